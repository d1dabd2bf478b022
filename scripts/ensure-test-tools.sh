#!/usr/bin/env bash
# Tools the test suite drives besides Docker: Debian's chromium (the HTML report is rendered in a real
# headless browser). Installed with apt-get when missing and we are root on a Debian-like system;
# otherwise say so — the browser test then skips, except under CI=true where it fails.
set -euo pipefail
say() { echo "ensure-test-tools: $*" >&2; }
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  say "installing chromium with apt-get (for the HTML report browser test)."
  apt-get update -qq
  NEEDRESTART_SUSPEND=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
else
  say "chromium is missing and cannot be installed here (not root, or no apt-get): the browser test will skip."
fi
