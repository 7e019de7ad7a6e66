# Sourced by scripts/test.sh and scripts/test_vllm.sh (not run): as root, and unless
# RLVR_SKIP_DOCKER=1, install Debian's docker.io if missing and start two private daemons,
# stopped again when the sourcing shell exits:
#   * this machine's, on a unix socket (DOCKER_HOST): the docker sandbox backend's tests;
#   * a second one reachable only over loopback TCP with mutual TLS (RLVR_DOCKER_TLS_HOST,
#     RLVR_DOCKER_TLS_DIR): the "remote Docker host" (tests/conftest.py `docker-tls`).
# RLVR_REQUIRE_DOCKER=1 then turns "no daemon" into a test failure.
_dockerds_started=0
_dockerds_tls=${RLVR_DOCKER_TLS_STATE:-/tmp/rlvr-docker-tls}
_dockerds_stop() {
  if [ "$_dockerds_started" = 1 ]; then
    scripts/dockerd.sh stop || true
    RLVR_DOCKER_DIR="$_dockerds_tls" RLVR_DOCKER_TLS_PORT=1 scripts/dockerd.sh stop || true
  fi
}
trap _dockerds_stop EXIT
if [ "$(id -u)" = 0 ] && [ "${RLVR_SKIP_DOCKER:-0}" != 1 ]; then
  if ! command -v dockerd >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
  fi
  eval "$(scripts/dockerd.sh start)"
  _dockerds_started=1
  _port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  _tls=$(RLVR_DOCKER_DIR="$_dockerds_tls" RLVR_DOCKER_TLS_PORT=$_port scripts/dockerd.sh start)
  RLVR_DOCKER_TLS_HOST=$(sed -n 's/.*DOCKER_HOST=\([^ ]*\).*/\1/p' <<<"$_tls")
  RLVR_DOCKER_TLS_DIR=$(sed -n 's/.*DOCKER_CERT_PATH=\([^ ]*\).*/\1/p' <<<"$_tls")
  export RLVR_DOCKER_TLS_HOST RLVR_DOCKER_TLS_DIR RLVR_REQUIRE_DOCKER=1
fi
