#!/usr/bin/env bash
# Start / stop a private Docker daemon for the `docker` sandbox backend and its tests.
#
#   scripts/dockerd.sh start   # idempotent; prints `export DOCKER_HOST=unix://...`
#   scripts/dockerd.sh env     # prints the export line (exit 1 if that daemon is not answering)
#   scripts/dockerd.sh stop    # stops only the daemon this script started (pidfile), idempotent
#   scripts/dockerd.sh status  # exit 0 iff the daemon answers
#
# With RLVR_DOCKER_TLS_PORT=<port> the daemon listens only on tcp://127.0.0.1:<port> with mutual
# TLS (no unix socket): a test CA, a server certificate for 127.0.0.1 and a client certificate
# are made under $RLVR_DOCKER_DIR/tls, and `start` prints DOCKER_HOST, DOCKER_TLS_VERIFY and
# DOCKER_CERT_PATH (the client's ca.pem, cert.pem, key.pem). This is the "second Docker host"
# of the remote-host tests: reachable over TCP+TLS only, sharing no path with its clients'
# mounts. Use another RLVR_DOCKER_DIR than the unix-socket daemon's.
#
# Why a private daemon: CI machines have Debian's dockerd but no running engine, and nothing
# here should depend on (or disturb) a system daemon. Everything lives under $RLVR_DOCKER_DIR
# (default /tmp/rlvr-docker): socket, data root, exec root (containerd state), pidfile, log.
#
# Why these flags: every sandbox container runs with --network none, so the daemon needs no
# networking at all. `--bridge=none --iptables=false --ip6tables=false --ip-forward=false
# --ip-masq=false` keep it from creating docker0, rewriting the host's iptables (a default
# dockerd sets the FORWARD policy to DROP) or flipping net.ipv4.ip_forward. The storage driver
# is dockerd's own choice (overlay2 on ext4 here); set RLVR_DOCKER_STORAGE_DRIVER=vfs where
# overlayfs is unavailable (e.g. a data root on overlayfs itself).
set -euo pipefail

DIR=${RLVR_DOCKER_DIR:-/tmp/rlvr-docker}
SOCK="$DIR/docker.sock"
PIDFILE="$DIR/dockerd.pid"
LOG="$DIR/dockerd.log"
HOST="unix://$SOCK"
TLS_PORT=${RLVR_DOCKER_TLS_PORT:-}
TLS="$DIR/tls"
# A TLS daemon already running from this directory keeps the port it was started on.
if [ -n "$TLS_PORT" ] && [ -f "$DIR/tls-port" ] && [ -f "$PIDFILE" ] \
   && [ -d "/proc/$(cat "$PIDFILE" 2>/dev/null || echo none)" ]; then
  TLS_PORT=$(cat "$DIR/tls-port")
fi
if [ -n "$TLS_PORT" ]; then HOST="tcp://127.0.0.1:$TLS_PORT"; fi
START_TIMEOUT=${RLVR_DOCKERD_START_TIMEOUT:-60}
# A unix socket path must fit in sun_path (108 bytes).
[ "${#SOCK}" -lt 100 ] || { echo "dockerd.sh: socket path too long: $SOCK (shorten RLVR_DOCKER_DIR)" >&2; exit 1; }

die() { echo "dockerd.sh: $*" >&2; exit 1; }

exports() {
  if [ -n "$TLS_PORT" ]; then
    echo "export DOCKER_HOST=$HOST DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$TLS/client"
  else
    echo "export DOCKER_HOST=$HOST"
  fi
}

make_certs() {
  # A throw-away CA, a server certificate for 127.0.0.1 and a client certificate: what
  # `dockerd --tlsverify` and a client need for mutual TLS (docker's file names).
  [ -f "$TLS/client/key.pem" ] && return 0
  command -v openssl >/dev/null 2>&1 || die "openssl not found (needed for the TLS daemon's certificates)"
  mkdir -p "$TLS/client"
  chmod 700 "$TLS"
  (
    cd "$TLS"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -keyout ca-key.pem -out ca.pem \
      -subj "/CN=rlvr test docker CA" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr \
      -subj "/CN=127.0.0.1" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 30 \
      -extfile server.ext -out server-cert.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout client/key.pem -out client.csr \
      -subj "/CN=rlvr client" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' > client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 30 \
      -extfile client.ext -out client/cert.pem 2>/dev/null
    cp ca.pem client/ca.pem
    rm -f server.csr client.csr server.ext client.ext
  )
}

answers() {
  if [ -n "$TLS_PORT" ]; then
    [ -f "$TLS/client/key.pem" ] || return 1
    curl -fsS --max-time 2 --cacert "$TLS/client/ca.pem" --cert "$TLS/client/cert.pem" \
      --key "$TLS/client/key.pem" "https://127.0.0.1:$TLS_PORT/_ping" >/dev/null 2>&1
    return
  fi
  # /_ping over the unix socket: cheap, and needs only the docker SDK that the venv has
  # (the `docker` CLI may be missing on some machines).
  [ -S "$SOCK" ] || return 1
  if command -v curl >/dev/null 2>&1; then
    curl -fsS --max-time 2 --unix-socket "$SOCK" http://localhost/_ping >/dev/null 2>&1
  elif command -v docker >/dev/null 2>&1; then
    DOCKER_HOST="$HOST" timeout 5 docker version >/dev/null 2>&1
  else
    python3 - "$SOCK" <<'EOF' >/dev/null 2>&1
import socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect(sys.argv[1])
s.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
sys.exit(0 if b" 200 " in s.recv(128) else 1)
EOF
  fi
}

our_pid() {
  # The pid in our pidfile, if that process is still a dockerd.
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  grep -q dockerd "/proc/$pid/comm" 2>/dev/null || return 1
  echo "$pid"
}

cmd_start() {
  if answers; then
    exports
    return 0
  fi
  [ "$(id -u)" = 0 ] || die "must run as root to start dockerd (or point DOCKER_HOST at a running daemon)"
  command -v dockerd >/dev/null 2>&1 || die "dockerd not found (Debian: apt-get install docker.io)"
  if pid=$(our_pid); then
    # Started but not answering yet (a concurrent start) — wait for it below.
    :
  else
    mkdir -p "$DIR/data" "$DIR/exec"
    chmod 711 "$DIR"
    rm -f "$SOCK" "$PIDFILE"
    local extra=()
    if [ -n "$TLS_PORT" ]; then
      make_certs
      echo "$TLS_PORT" > "$DIR/tls-port"
      extra+=(--tlsverify --tlscacert "$TLS/ca.pem" --tlscert "$TLS/server-cert.pem"
              --tlskey "$TLS/server-key.pem")
    fi
    if [ -n "${RLVR_DOCKER_STORAGE_DRIVER:-}" ]; then
      extra+=(--storage-driver "$RLVR_DOCKER_STORAGE_DRIVER")
    fi
    # setsid: the daemon must outlive the shell (and the CI step) that started it.
    setsid dockerd \
      --host "$HOST" \
      --data-root "$DIR/data" \
      --exec-root "$DIR/exec" \
      --pidfile "$PIDFILE" \
      --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
      "${extra[@]}" \
      </dev/null >>"$LOG" 2>&1 &
    disown || true
  fi
  local waited=0
  until answers; do
    sleep 0.5
    waited=$((waited + 1))
    if [ "$waited" -ge $((START_TIMEOUT * 2)) ]; then
      tail -n 20 "$LOG" >&2 || true
      die "dockerd did not answer on $HOST within ${START_TIMEOUT}s (log: $LOG)"
    fi
    if ! our_pid >/dev/null && [ "$waited" -ge 4 ]; then
      tail -n 20 "$LOG" >&2 || true
      die "dockerd exited during start-up (log: $LOG)"
    fi
  done
  exports
}

cmd_stop() {
  local pid
  if ! pid=$(our_pid); then
    rm -f "$PIDFILE"
    return 0
  fi
  kill -TERM "$pid"
  for _ in $(seq 1 60); do
    [ -d "/proc/$pid" ] || break
    sleep 0.5
  done
  if [ -d "/proc/$pid" ]; then
    echo "dockerd.sh: dockerd $pid did not stop in 30s; killing it" >&2
    kill -KILL "$pid" || true
  fi
  rm -f "$PIDFILE"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  env)
    answers || die "no daemon answers on $HOST (run: scripts/dockerd.sh start)"
    exports
    ;;
  status) answers ;;
  *) echo "usage: $0 start|stop|env|status" >&2; exit 2 ;;
esac
