#!/usr/bin/env bash
# A second Docker daemon on this machine, for the nightly tests and demo: a stand-in for a GPU server's
# own daemon reached over `tcp://` with TLS.
#
#   scripts/second-dockerd.sh start   # certificates, bridge, dockerd; waits until it answers; loads the base image
#   scripts/second-dockerd.sh env     # DOCKER_HOST / DOCKER_TLS_VERIFY / DOCKER_CERT_PATH to reach it (eval-able)
#   scripts/second-dockerd.sh status  # exit 0 when it answers
#   scripts/second-dockerd.sh stop    # stops it (idempotent); its images stay in its data root for a warm cache
#   scripts/second-dockerd.sh purge   # stop, then remove its data root, certificates and state
#
# Everything it owns lives under $ORCH_DOCKERD2_DIR (default /var/tmp/orch-dockerd2): data-root, exec-root,
# pid file, log, an empty daemon.json (the first daemon's /etc/docker/daemon.json is never read) and the
# certificates (a CA, the server's and the client's, made with openssl). It listens ONLY on
# 127.0.0.1:$ORCH_DOCKERD2_PORT (default 23760) with --tlsverify: no unix socket, so the first daemon's
# /var/run/docker.sock is never touched.
#
# Two daemons on one host cannot share the default bridge (each would manage docker0 and its iptables
# chains). This one gets its own bridge device (orch-br2, 172.29.0.1/24) and --iptables=false
# --ip-masq=false, so it never rewrites the rules the first daemon relies on: its containers reach each
# other and the host, not the outside world, which orch's wheelhouse builds and probes (network off)
# do not need. Its cgroups live under /orch-dockerd2, not /docker.
set -euo pipefail

dir=${ORCH_DOCKERD2_DIR:-/var/tmp/orch-dockerd2}
port=${ORCH_DOCKERD2_PORT:-23760}
bridge=${ORCH_DOCKERD2_BRIDGE:-orch-br2}
bridge_cidr=${ORCH_DOCKERD2_BRIDGE_CIDR:-172.29.0.1/24}
base_image=${ORCH_BASE_IMAGE:-orch/debian-python:bookworm}
wait_s=${ORCH_ENGINE_WAIT:-60}
certs=$dir/certs
client=$certs/client
pidfile=$dir/dockerd.pid
log=$dir/dockerd.log

say() { echo "second-dockerd: $*" >&2; }

client_env() {
  echo "export DOCKER_HOST=tcp://127.0.0.1:$port"
  echo "export DOCKER_TLS_VERIFY=1"
  echo "export DOCKER_CERT_PATH=$client"
}

answers() {
  [ -f "$client/cert.pem" ] || return 1
  DOCKER_HOST=tcp://127.0.0.1:$port DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$client \
    timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

running_pid() {
  [ -f "$pidfile" ] || return 1
  local pid
  pid=$(cat "$pidfile")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

make_certs() {
  [ -f "$client/key.pem" ] && [ -f "$certs/server-key.pem" ] && return 0
  say "generating a CA, a server and a client certificate in $certs"
  mkdir -p "$client"
  chmod 700 "$certs"
  local tmp leaf_ext
  tmp=$(mktemp -d)
  leaf_ext=$'basicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature,keyEncipherment\nsubjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid,issuer'
  openssl genrsa -out "$certs/ca-key.pem" 4096 2>/dev/null
  # Python >= 3.13 verifies strictly (VERIFY_X509_STRICT): the CA needs its key usage, every certificate
  # its key identifiers, or docker-py refuses a chain the docker CLI accepts.
  openssl req -new -x509 -days 365 -key "$certs/ca-key.pem" -sha256 -subj "/CN=orch test CA" -out "$certs/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash"
  # Server: the only names a client uses to reach it (loopback).
  openssl genrsa -out "$certs/server-key.pem" 4096 2>/dev/null
  openssl req -new -sha256 -subj "/CN=localhost" -key "$certs/server-key.pem" -out "$tmp/server.csr"
  printf '%s\n' "subjectAltName = DNS:localhost,IP:127.0.0.1" "extendedKeyUsage = serverAuth" "$leaf_ext" >"$tmp/server.ext"
  openssl x509 -req -days 365 -sha256 -in "$tmp/server.csr" -CA "$certs/ca.pem" -CAkey "$certs/ca-key.pem" \
    -CAcreateserial -out "$certs/server-cert.pem" -extfile "$tmp/server.ext" 2>/dev/null
  # Client, in DOCKER_CERT_PATH's layout (ca.pem, cert.pem, key.pem).
  openssl genrsa -out "$client/key.pem" 4096 2>/dev/null
  openssl req -new -subj "/CN=orch-client" -key "$client/key.pem" -out "$tmp/client.csr"
  printf '%s\n' "extendedKeyUsage = clientAuth" "$leaf_ext" >"$tmp/client.ext"
  openssl x509 -req -days 365 -sha256 -in "$tmp/client.csr" -CA "$certs/ca.pem" -CAkey "$certs/ca-key.pem" \
    -CAcreateserial -out "$client/cert.pem" -extfile "$tmp/client.ext" 2>/dev/null
  cp "$certs/ca.pem" "$client/ca.pem"
  chmod 600 "$certs/ca-key.pem" "$certs/server-key.pem" "$client/key.pem"
  rm -rf "$tmp"
}

make_bridge() {
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add name "$bridge" type bridge
    ip addr add "$bridge_cidr" dev "$bridge"
  fi
  ip link set "$bridge" up
}

load_base_image() {
  if DOCKER_HOST=tcp://127.0.0.1:$port DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$client \
    docker image inspect "$base_image" >/dev/null 2>&1; then
    return 0
  fi
  if ! docker image inspect "$base_image" >/dev/null 2>&1; then
    say "the first daemon has no $base_image (make base); the second one starts without it."
    return 0
  fi
  say "loading $base_image from the first daemon"
  docker save "$base_image" | DOCKER_HOST=tcp://127.0.0.1:$port DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$client \
    docker load >/dev/null
}

start() {
  if answers; then
    say "already answers at tcp://127.0.0.1:$port"
    load_base_image
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    say "dockerd needs root; run this as root."
    exit 1
  fi
  command -v dockerd >/dev/null 2>&1 || { say "dockerd is missing (make engine installs docker.io)"; exit 1; }
  # containerd's sockets live under the exec root, and a unix socket path has at most 107 bytes.
  if [ "${#dir}" -gt 60 ]; then
    say "ORCH_DOCKERD2_DIR=$dir is too long for the sockets under it (at most 60 characters); choose a shorter one."
    exit 1
  fi
  mkdir -p "$dir/data" "$dir/exec"
  make_certs
  make_bridge
  [ -f "$dir/daemon.json" ] || echo '{}' >"$dir/daemon.json"
  say "starting dockerd on tcp://127.0.0.1:$port (log: $log)"
  nohup dockerd \
    --config-file "$dir/daemon.json" \
    --data-root "$dir/data" \
    --exec-root "$dir/exec" \
    --pidfile "$pidfile" \
    --host "tcp://127.0.0.1:$port" \
    --tlsverify --tlscacert "$certs/ca.pem" --tlscert "$certs/server-cert.pem" --tlskey "$certs/server-key.pem" \
    --bridge "$bridge" --iptables=false --ip-masq=false \
    --cgroup-parent /orch-dockerd2 \
    >"$log" 2>&1 &
  for _ in $(seq 1 "$wait_s"); do
    if answers; then
      say "answers at tcp://127.0.0.1:$port"
      load_base_image
      return 0
    fi
    sleep 1
  done
  say "did not answer within ${wait_s}s. Last lines of $log:"
  tail -n 20 "$log" >&2 || true
  exit 1
}

stop() {
  local pid
  if pid=$(running_pid); then
    say "stopping dockerd (pid $pid)"
    kill -TERM "$pid"
    for _ in $(seq 1 30); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "still running after 30s; killing it"
      kill -KILL "$pid" || true
    fi
  fi
  rm -f "$pidfile"
  if ip link show "$bridge" >/dev/null 2>&1; then
    ip link delete "$bridge" || true
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) client_env ;;
  status)
    if answers; then say "answers at tcp://127.0.0.1:$port"; else say "does not answer"; exit 1; fi
    ;;
  purge)
    stop
    rm -rf "$dir"
    ;;
  *)
    echo "usage: $0 start|stop|env|status|purge" >&2
    exit 2
    ;;
esac
