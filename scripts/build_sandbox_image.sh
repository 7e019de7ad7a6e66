#!/usr/bin/env bash
# Build (or find cached) the offline docker sandbox image `rlvr-sandbox:<content-hash>` and print
# its tag. Needs a daemon: starts the private one (scripts/dockerd.sh) when run as root and
# DOCKER_HOST is unset. Pass --force to re-import even when the tag exists.
# The docker backend builds the image itself on first use; this script is for warming a CI
# machine or checking the build in isolation. See rlvr/sandbox/image.py for what goes in.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DOCKER_HOST:-}" ] && [ "$(id -u)" = 0 ]; then
  eval "$(scripts/dockerd.sh start)"
fi
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
exec "$PY" -m rlvr.sandbox.image build "$@"
