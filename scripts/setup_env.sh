#!/usr/bin/env bash
# Create .venv with the whole CPU stack (idempotent). torch first: any other torch spec
# would pull a multi-GB CUDA build on these machines. System tools (bubblewrap, git) come
# from Debian when we are root and they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v bwrap >/dev/null 2>&1 || ! command -v git >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap git >/dev/null
  else
    echo "setup_env: please install bubblewrap and git (Debian: apt-get install bubblewrap git)" >&2
    exit 1
  fi
fi
stamp=.venv/.rlvr-installed
want=$(cat requirements/lock.txt pyproject.toml | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q torch==2.13.0
DS_BUILD_OPS=0 .venv/bin/pip install -q -r requirements/lock.txt
.venv/bin/pip install -q --no-deps --no-build-isolation -e .
echo "$want" > "$stamp"
