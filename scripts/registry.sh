#!/usr/bin/env bash
# A container registry on a loopback port, for the nightly publishing tests and the demo.
#
#   scripts/registry.sh start    install Debian's docker-registry (the distribution registry) when missing,
#                                write its config and start it in the background; wait until /v2/ answers
#   scripts/registry.sh stop     stop the registry this script started (by its pid file); keep its storage
#   scripts/registry.sh env      print `export` lines for a shell: ORCH_REGISTRY and, with auth, the user
#                                name and a password read from its file (never printed itself)
#   scripts/registry.sh status   exit 0 when it answers
#   scripts/registry.sh install  only install the packages (what `make test` needs: its tests start their own)
#
# Settings (environment):
#   ORCH_REGISTRY_ADDR  host:port to listen on (default 127.0.0.1:5055; loopback: Docker engines allow plain
#                       HTTP to 127.0.0.0/8 without an "insecure-registries" entry)
#   ORCH_REGISTRY_DIR   its folder: config.yml, storage, htpasswd, password, pid, log (default /var/tmp/orch-registry)
#   ORCH_REGISTRY_AUTH  `htpasswd` (default: what real sites do) or `none`
#   ORCH_REGISTRY_USER  the user of htpasswd auth (default orch); its password is generated once into
#                       $ORCH_REGISTRY_DIR/password (mode 0600), or taken from ORCH_REGISTRY_PASSWORD when set
#   ORCH_REGISTRY_WAIT  seconds to wait for /v2/ (default 30)
set -euo pipefail

addr=${ORCH_REGISTRY_ADDR:-127.0.0.1:5055}
dir=${ORCH_REGISTRY_DIR:-/var/tmp/orch-registry}
auth=${ORCH_REGISTRY_AUTH:-htpasswd}
user=${ORCH_REGISTRY_USER:-orch}
wait_s=${ORCH_REGISTRY_WAIT:-30}
pidfile=$dir/registry.pid

say() { echo "registry: $*" >&2; }

# 200 (open) or 401 (auth required): the registry's API root answers either way.
answers() {
  local code
  code=$(curl -s --noproxy '*' -o /dev/null -w '%{http_code}' --max-time 3 "http://$addr/v2/" 2>/dev/null || true)
  [ "$code" = 200 ] || [ "$code" = 401 ]
}

ours() {  # the pid in our pid file is a docker-registry serving our config
  [ -f "$pidfile" ] || return 1
  local pid
  pid=$(cat "$pidfile")
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "docker-registry serve $dir/config.yml"
}

install_packages() {
  local missing=()
  command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
  if [ "$auth" = htpasswd ] && ! command -v htpasswd >/dev/null 2>&1; then missing+=(apache2-utils); fi
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  [ "${#missing[@]}" -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    say "${missing[*]} missing, and this is not root on a Debian-like system: install them (apt-get install ${missing[*]})."
    exit 1
  fi
  say "installing ${missing[*]} with apt-get."
  # Other set-up scripts may hold the dpkg lock (Slurm, Docker): wait for it rather than fail.
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  NEEDRESTART_SUSPEND=1 DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
}

write_config() {
  mkdir -p "$dir/storage"
  chmod 0700 "$dir"
  local auth_block=""
  if [ "$auth" = htpasswd ]; then
    if [ ! -s "$dir/password" ] || [ -n "${ORCH_REGISTRY_PASSWORD:-}" ]; then
      (umask 077; printf '%s' "${ORCH_REGISTRY_PASSWORD:-$(openssl rand -hex 16)}" >"$dir/password")
    fi
    # bcrypt (-B): the only hash the distribution registry accepts. Password on stdin, never in argv.
    htpasswd -B -i -c "$dir/htpasswd" "$user" <"$dir/password" 2>/dev/null
    auth_block="auth:
  htpasswd:
    realm: orch-registry
    path: $dir/htpasswd"
  elif [ "$auth" != none ]; then
    say "ORCH_REGISTRY_AUTH must be htpasswd or none, not $auth"
    exit 2
  fi
  [ -s "$dir/http-secret" ] || (umask 077; openssl rand -hex 32 >"$dir/http-secret")
  cat >"$dir/config.yml" <<EOF
# Written by scripts/registry.sh; rewritten on every start.
version: 0.1
log:
  level: warn
  fields:
    service: orch-registry
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: $addr
  secret: $(cat "$dir/http-secret")
  headers:
    X-Content-Type-Options: [nosniff]
$auth_block
EOF
  chmod 0600 "$dir/config.yml"
}

start() {
  if ours && answers; then
    say "already answers at http://$addr/v2/ (pid $(cat "$pidfile"), folder $dir)."
    return 0
  fi
  if answers; then
    say "something else already answers at $addr; choose another ORCH_REGISTRY_ADDR."
    exit 1
  fi
  install_packages
  write_config
  say "starting docker-registry at $addr (folder $dir, auth $auth, log $dir/registry.log)."
  setsid nohup docker-registry serve "$dir/config.yml" >>"$dir/registry.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 1 $((wait_s * 5))); do
    if answers; then
      say "answers at http://$addr/v2/ (pid $(cat "$pidfile"))."
      return 0
    fi
    if ! ours; then break; fi
    sleep 0.2
  done
  say "docker-registry did not answer within ${wait_s}s. Last lines of $dir/registry.log:"
  tail -n 20 "$dir/registry.log" >&2 || true
  stop || true
  exit 1
}

stop() {
  if ! ours; then
    say "no registry of this script runs for $dir."
    rm -f "$pidfile"
    return 0
  fi
  local pid
  pid=$(cat "$pidfile")
  kill "$pid"
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  rm -f "$pidfile"
  say "stopped (pid $pid); storage kept in $dir/storage."
}

env_lines() {
  echo "export ORCH_REGISTRY=$addr"
  if [ -f "$dir/htpasswd" ] && grep -q '^auth:' "$dir/config.yml" 2>/dev/null; then
    echo "export ORCH_REGISTRY_USERNAME=$user"
    echo "export ORCH_REGISTRY_PASSWORD=\"\$(cat $dir/password)\""
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) env_lines ;;
  status) answers ;;
  install) install_packages ;;
  *)
    echo "usage: $0 start|stop|env|status|install" >&2
    exit 2
    ;;
esac
