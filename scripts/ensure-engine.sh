#!/usr/bin/env bash
# Make sure a Docker engine answers, for the tests and the demo.
#
# - An engine already answers (DOCKER_HOST or the default socket): nothing to do.
# - DOCKER_HOST names another engine that does not answer: fail; we never start a local daemon in its place.
# - Otherwise, as root on a Debian-like system: install docker.io and debootstrap with apt-get when missing,
#   start dockerd in the background (log: $ORCH_DOCKERD_LOG, default /var/log/orch-dockerd.log) and wait
#   until it answers, at most $ORCH_ENGINE_WAIT seconds (default 90).
# - Anywhere else: say how to start Docker and exit 1.
set -euo pipefail

log=${ORCH_DOCKERD_LOG:-/var/log/orch-dockerd.log}
wait_s=${ORCH_ENGINE_WAIT:-90}

say() { echo "ensure-engine: $*" >&2; }

answers() {
  command -v docker >/dev/null 2>&1 && timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

need_packages() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v docker >/dev/null 2>&1 || missing+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  printf '%s\n' "${missing[@]}" | sort -u | grep -v '^$' || true
}

if answers; then
  say "a Docker engine answers at ${DOCKER_HOST:-the default socket} (server $(docker version --format '{{.Server.Version}}'))."
  if [ "$(id -u)" = 0 ] && ! command -v debootstrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    say "installing debootstrap (needed by 'orch base')."
    apt-get update -qq && NEEDRESTART_SUSPEND=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  exit 0
fi

if [ -n "${DOCKER_HOST:-}" ]; then
  say "DOCKER_HOST=$DOCKER_HOST does not answer. Start that engine, or unset DOCKER_HOST to use a local one."
  exit 1
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  say "no Docker engine answers, and this is not root on a Debian-like system, so it cannot be started here."
  say "start Docker yourself (e.g. 'sudo systemctl start docker', Docker Desktop) or set DOCKER_HOST, then retry."
  exit 1
fi

mapfile -t packages < <(need_packages)
if [ "${#packages[@]}" -gt 0 ]; then
  say "no Docker engine answers; installing ${packages[*]} with apt-get."
  apt-get update -qq
  NEEDRESTART_SUSPEND=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
fi

if pgrep -x dockerd >/dev/null 2>&1; then
  say "dockerd is running but does not answer yet; waiting for it."
else
  say "starting dockerd in the background (log: $log)."
  mkdir -p "$(dirname "$log")"
  nohup dockerd >"$log" 2>&1 &
fi

for _ in $(seq 1 "$wait_s"); do
  if answers; then
    say "the engine answers (server $(docker version --format '{{.Server.Version}}'))."
    exit 0
  fi
  sleep 1
done
say "dockerd did not answer within ${wait_s}s. Last lines of $log:"
tail -n 20 "$log" >&2 || true
exit 1
