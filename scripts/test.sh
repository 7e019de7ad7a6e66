#!/usr/bin/env bash
# The test command. As root (CI, fresh machines) it also installs Debian's docker.io and starts
# two private daemons (scripts/dockerds.sh): one on a unix socket so the docker sandbox backend
# really runs, one reachable only over loopback TCP with mutual TLS, the "remote Docker host"
# the conformance and enclave suites also run on; both stop afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" RLVR_PROGRESS=0
source scripts/dockerds.sh
# The real-library corpus (pinned sdists + the wheels their suites need, hash-checked;
# data/real/.cache): the tests that run upstream suites unchanged need it.
python scripts/fetch_corpus.py
# The library's floors (pyproject.toml [tool.importlinter], CONTRIBUTING.md "Layers").
lint-imports --no-cache --no-logo
python -m pytest -q -m "not slow and not vllm" "$@"
