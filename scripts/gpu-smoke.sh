#!/usr/bin/env bash
# GPU smoke run (issue 11): on a machine with a real NVIDIA or AMD GPU, run host mode, `orch doctor`, a host
# capture (and its diagnosis with --from), and `orch rebuild` of the CUDA (or ROCm) example end to end.
# Everything it writes goes under one folder (default: out/gpu-smoke-<UTC time>); the summary at the end is
# what to paste into a closing note. Usage: scripts/gpu-smoke.sh [OUTDIR]
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
orch="${ORCH:-$here/.venv/bin/orch}"
out="${1:-$here/out/gpu-smoke-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
log="$out/smoke.log"
: >"$log"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    vendor=cuda
    dossier="$here/examples/tiny-embeddings/dossier-cuda.yaml"
    version="$(nvidia-smi | sed -n 's/.*CUDA \(UMD \)\{0,1\}Version: *\([0-9.]*\).*/\2/p' | head -n1)"
elif [ -e /dev/kfd ]; then
    vendor=rocm
    dossier="$here/examples/tiny-embeddings/dossier-rocm.yaml"
    version=""
else
    echo "gpu-smoke: no NVIDIA driver answering and no /dev/kfd: this machine has no usable GPU" | tee -a "$log"
    exit 2
fi

status=0
step() {  # step NAME COMMAND...: run, keep its output, record its exit status
    local name="$1"; shift
    echo "== $name: $*" >>"$log"
    "$@" >"$out/$name.out" 2>&1
    local rc=$?
    echo "$name exit=$rc" | tee -a "$log"
    [ "$rc" -eq 0 ] || status=1
}

step host-mode "$orch" probe-host --platform "$vendor" ${version:+--version "$version"} --out "$out/host-mode"
step doctor "$orch" doctor "$dossier"
step doctor-json "$orch" doctor --json
step capture "$orch" doctor --capture "$out/capture"
step doctor-from-capture "$orch" doctor --from "$out/capture" "$dossier"
step rebuild "$orch" rebuild "$dossier" --out "$out/rebuild"

{
    echo "gpu-smoke summary ($vendor, $(date -u +%Y-%m-%dT%H:%MZ))"
    grep ' exit=' "$log"
    echo "outputs: $out"
} | tee "$out/summary.txt"
exit "$status"
