#!/usr/bin/env bash
# Rootless Podman for an unprivileged user, reached through Podman's Docker-compatible API socket: the second
# engine kind orch drives (docs/gpu-hosts.md "Podman"). Run as root; what it sets up is what a server
# administrator does once per user.
#
#   scripts/podman.sh start    install Debian's podman (+ runc, fuse-overlayfs, uidmap, slirp4netns) when missing,
#                              create the user with sub-uids/sub-gids, write its containers.conf and storage.conf,
#                              start `podman system service` as that user and wait until the socket answers; load
#                              the base image into the user's store when Docker has it and Podman does not
#   scripts/podman.sh env      print `export` lines: DOCKER_HOST (the user's socket), ORCH_PODMAN_USER
#   scripts/podman.sh status   exit 0 when the socket answers
#   scripts/podman.sh stop     stop the service this script started (its pid file); the user's images stay
#   scripts/podman.sh as-user CMD...   run CMD as the user, with DOCKER_HOST set (what the tests use to run orch
#                              as an unprivileged user)
#
# Settings (environment):
#   ORCH_PODMAN_USER  the unprivileged user (default orch-podman), created when missing
#   ORCH_PODMAN_WAIT  seconds to wait for the socket (default 60)
#   ORCH_BASE_IMAGE   the base image to copy from Docker into the user's store (default orch/debian-python:bookworm)
#
# Machine-level facts this script handles (each found on this project's Debian 12 machines):
# - /dev/net/tun and /dev/fuse must be usable by the user (slirp4netns, fuse-overlayfs): mode 0666, as udev
#   makes them on a normal install.
# - Storage: native overlay on a kernel >= 5.13 (rootless overlay mounts), fuse-overlayfs before that. The
#   user's own containers.conf / storage.conf are never replaced, only the ones this script wrote.
# - On a host with cgroup v1 or a hybrid hierarchy, crun (Podman's default on Debian) refuses to start
#   ("cgroups in hybrid mode not supported"); runc runs rootless there, so containers.conf names runc. Rootless
#   containers on cgroup v1 get no memory or pids limit: Podman ignores them (orch's report says so).
# - No systemd user session: XDG_RUNTIME_DIR (/run/user/UID) is made here, owned by the user.
set -euo pipefail

user=${ORCH_PODMAN_USER:-orch-podman}
wait_s=${ORCH_PODMAN_WAIT:-60}
base_image=${ORCH_BASE_IMAGE:-orch/debian-python:bookworm}

say() { echo "podman: $*" >&2; }

uid() { id -u "$user" 2>/dev/null; }
runtime_dir() { echo "/run/user/$(uid)"; }
socket() { echo "$(runtime_dir)/podman/podman.sock"; }
pidfile() { echo "$(runtime_dir)/orch-podman-service.pid"; }

# Run a command as the user with a login-like environment (HOME, XDG_RUNTIME_DIR), without a login shell.
as_user() {
  local home
  home=$(getent passwd "$user" | cut -d: -f6)
  (cd / && setpriv --reuid="$user" --regid="$user" --init-groups \
    env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$home" USER="$user" LOGNAME="$user" \
    XDG_RUNTIME_DIR="$(runtime_dir)" "$@")
}

kernel_at_least() {
  local major minor
  IFS=. read -r major minor _ <<<"$(uname -r)"
  [ "$major" -gt "$1" ] || { [ "$major" -eq "$1" ] && [ "${minor%%[!0-9]*}" -ge "$2" ]; }
}

write_conf() {
  local file=$1 body=$2 mark='# written by orch scripts/podman.sh'
  if [ -f "$file" ] && [ "$(head -1 "$file")" != "$mark" ]; then
    say "note: $file is the user's own; left as it is"
    return 0
  fi
  printf '%s\n%b' "$mark" "$body" >"$file"
}

answers() {
  [ -n "$(uid)" ] && [ -S "$(socket)" ] || return 1
  curl -s --max-time 5 --unix-socket "$(socket)" http://d/_ping 2>/dev/null | grep -q OK
}

install_packages() {
  local missing=()
  for tool in podman runc fuse-overlayfs newuidmap slirp4netns setpriv curl; do
    command -v "$tool" >/dev/null 2>&1 && continue
    case $tool in
      newuidmap) missing+=(uidmap) ;;
      setpriv) missing+=(util-linux) ;;
      *) missing+=("$tool") ;;
    esac
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    say "missing ${missing[*]}, and this is not root on a Debian-like system: install them, then retry."
    exit 1
  fi
  say "installing ${missing[*]} with apt-get"
  apt-get update -qq
  NEEDRESTART_SUSPEND=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

setup_user() {
  if [ -z "$(uid)" ]; then
    say "creating the unprivileged user $user"
    useradd --create-home --shell /bin/bash "$user"
  fi
  # Sub-ids: useradd gives them on Debian; a user created before uidmap was installed may have none.
  for file in /etc/subuid /etc/subgid; do
    grep -q "^$user:" "$file" 2>/dev/null || {
      local start=$((200000 + $(uid) * 65536 % 100000000))
      echo "$user:$start:65536" >>"$file"
    }
  done
  chmod 0666 /dev/net/tun /dev/fuse 2>/dev/null || say "note: could not open /dev/net/tun or /dev/fuse to the user"
  local dir
  dir=$(runtime_dir)
  mkdir -p "$dir"
  chown "$user:$user" "$dir"
  chmod 0700 "$dir"
  local home conf
  home=$(getent passwd "$user" | cut -d: -f6)
  conf=$home/.config/containers
  mkdir -p "$conf"
  local runtime=crun
  # cgroup v2 only ("unified"): crun is Podman's default and works; anything else gets runc.
  [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || runtime=runc
  # A kernel >= 5.13 mounts overlayfs in a user namespace itself: native overlay, no FUSE (fuse-overlayfs
  # cost about half of a build's CPU here). Older kernels need fuse-overlayfs.
  local overlay='[storage]\ndriver = "overlay"\n'
  kernel_at_least 5 13 || overlay+='[storage.options.overlay]\nmount_program = "/usr/bin/fuse-overlayfs"\n'
  # A user's own configuration is never replaced: only files this script wrote (its first line says so).
  write_conf "$conf/containers.conf" "[engine]\nruntime = \"$runtime\"\n"
  write_conf "$conf/storage.conf" "$overlay"
  chown -R "$user:$user" "$home/.config"
}

start_service() {
  mkdir -p "$(runtime_dir)/podman"
  chown "$user:$user" "$(runtime_dir)/podman"
  say "starting podman system service as $user on $(socket)"
  as_user bash -c "nohup podman system service --time=0 unix://$(socket) >$(runtime_dir)/podman-service.log 2>&1 & echo \$! >$(pidfile)"
  local waited=0
  until answers; do
    sleep 1
    waited=$((waited + 1))
    if [ "$waited" -ge "$wait_s" ]; then
      say "the service did not answer within ${wait_s}s; its log:"
      tail -20 "$(runtime_dir)/podman-service.log" >&2 || true
      exit 1
    fi
  done
}

load_base() {
  # The examples build FROM the local base image (`orch base` makes it with Docker); the user's store is
  # separate, so it is copied once. Without Docker, `DOCKER_HOST=$(socket) orch base` makes it directly.
  as_user podman image exists "$base_image" 2>/dev/null && return 0
  command -v docker >/dev/null 2>&1 && docker image inspect "$base_image" >/dev/null 2>&1 || {
    say "note: $base_image is neither in Docker nor in $user's store; make it with DOCKER_HOST=unix://$(socket) orch base"
    return 0
  }
  say "copying $base_image from Docker into $user's store"
  docker save "$base_image" | as_user podman load >/dev/null 2>&1
}

case ${1:-start} in
  start)
    install_packages
    setup_user
    answers || start_service
    load_base
    say "rootless Podman $(as_user podman version --format '{{.Server.Version}}' 2>/dev/null || echo '?') answers at unix://$(socket) (user $user)"
    ;;
  env)
    [ -n "$(uid)" ] || { say "no user $user: run '$0 start' first"; exit 1; }
    echo "export DOCKER_HOST=unix://$(socket)"
    echo "export ORCH_PODMAN_USER=$user"
    ;;
  status) answers ;;
  stop)
    if [ -n "$(uid)" ] && [ -f "$(pidfile)" ]; then
      kill "$(cat "$(pidfile)")" 2>/dev/null || true
      rm -f "$(pidfile)"
    fi
    ;;
  as-user)
    shift
    as_user env DOCKER_HOST="unix://$(socket)" "$@"
    ;;
  *)
    echo "usage: $0 start|env|status|stop|as-user CMD..." >&2
    exit 2
    ;;
esac
