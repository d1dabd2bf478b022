#!/usr/bin/env bash
# The reference environment of an example, made as its reference/README.md says — a CPython 3.11 venv holding
# exactly the wheels of its CPU lock, installed offline and hash-checked — and its `pip freeze --all` written
# to EXAMPLE/reference/pip-freeze.txt, the dossier's python.reference_inventory (issue 24).
#
#   scripts/reference-inventory.sh EXAMPLE [WHEEL_DIR]
#
# WHEEL_DIR holds the lock's wheels (default: orch's wheel cache, which `orch build` fills); the install is
# offline, so a wheel missing there fails here rather than being fetched from elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
example=examples/${1:?usage: scripts/reference-inventory.sh EXAMPLE [WHEEL_DIR]}
cache=${2:-${XDG_CACHE_HOME:-$HOME/.cache}/orch/wheels}
lock=$example/requirements-cpu.lock
[ -f "$lock" ] || { echo "reference-inventory: $lock: no such lock" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/wheels"
find "$cache" -name '*.whl' -exec ln -sf {} "$work/wheels/" \;
python3.11 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --no-index --find-links "$work/wheels" --require-hashes -r "$lock"
"$work/venv/bin/pip" check
"$work/venv/bin/pip" freeze --all > "$example/reference/pip-freeze.txt"
echo "wrote $example/reference/pip-freeze.txt ($(wc -l < "$example/reference/pip-freeze.txt") distributions)"
