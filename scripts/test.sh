#!/usr/bin/env bash
# The test command. As root (CI, fresh machines) it also installs Debian's docker.io, starts
# dockerd on a private socket and data root so the docker sandbox backend really runs, and
# stops that daemon afterwards. RLVR_REQUIRE_DOCKER=1 then turns "no daemon" into a failure.
# A second daemon listens only on a loopback TCP port with mutual TLS (scripts/dockerd.sh
# with RLVR_DOCKER_TLS_PORT): the "remote Docker host" the conformance and enclave suites
# also run on (RLVR_DOCKER_TLS_HOST / RLVR_DOCKER_TLS_DIR, tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" RLVR_PROGRESS=0
started=0
TLS_DIR=${RLVR_DOCKER_TLS_STATE:-/tmp/rlvr-docker-tls}
cleanup() {
  if [ "$started" = 1 ]; then
    scripts/dockerd.sh stop || true
    RLVR_DOCKER_DIR="$TLS_DIR" RLVR_DOCKER_TLS_PORT=1 scripts/dockerd.sh stop || true
  fi
}
trap cleanup EXIT
if [ "$(id -u)" = 0 ] && [ "${RLVR_SKIP_DOCKER:-0}" != 1 ]; then
  if ! command -v dockerd >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
  fi
  eval "$(scripts/dockerd.sh start)"
  started=1
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  tls=$(RLVR_DOCKER_DIR="$TLS_DIR" RLVR_DOCKER_TLS_PORT=$port scripts/dockerd.sh start)
  RLVR_DOCKER_TLS_HOST=$(sed -n 's/.*DOCKER_HOST=\([^ ]*\).*/\1/p' <<<"$tls")
  RLVR_DOCKER_TLS_DIR=$(sed -n 's/.*DOCKER_CERT_PATH=\([^ ]*\).*/\1/p' <<<"$tls")
  export RLVR_DOCKER_TLS_HOST RLVR_DOCKER_TLS_DIR
  export RLVR_REQUIRE_DOCKER=1
fi
# The real-library corpus (pinned sdists + the wheels their suites need, hash-checked;
# data/real/.cache): the tests that run upstream suites unchanged need it.
python scripts/fetch_corpus.py
# The library's floors (pyproject.toml [tool.importlinter], CONTRIBUTING.md "Layers").
lint-imports --no-cache --no-logo
python -m pytest -q -m "not slow and not vllm" "$@"
