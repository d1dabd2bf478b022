#!/usr/bin/env bash
# The main job end to end, on the real embedding model (examples/minilm-embeddings, CPU):
# validate the dossier, then `orch rebuild` — build the image (wheelhouse collected on the host, build
# network off, inventory and image checks), probe it layer by layer (image, host driver, device
# visibility, sample results re-read from the output folder and compared with the reference) — and
# write the report in every format plus the hand-over folder another team can replay with `orch verify`.
# Run through `make demo`, which creates the venv, starts the Docker engine and makes the base image first.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out}
orch=.venv/bin/orch
dossier=examples/minilm-embeddings/dossier.yaml

printf '\n== validate %s\n' "$dossier"
$orch validate "$dossier"

rm -rf "$out/minilm-embeddings" "$out/minilm-embeddings-handover"
# The hand-over is signed (docs/attestations.md) with a demo key made here, once; a real team signs with its own
# key (or KEY.pub with the key in ssh-agent). Without OpenSSH the demo hands over unsigned, and says so.
sign=() trust=""
if command -v ssh-keygen > /dev/null; then
  mkdir -p "$out"
  [ -f "$out/demo-signing-key" ] || ssh-keygen -q -t ed25519 -N "" -C orch-demo -f "$out/demo-signing-key"
  echo "demo@example.org $(cat "$out/demo-signing-key.pub")" > "$out/allowed_signers"
  sign=(--sign "$out/demo-signing-key") trust=" --trust $out/allowed_signers"
else
  echo "(ssh-keygen not found: the hand-over is not signed)"
fi
printf '\n== rebuild: build, probe, report, signed hand-over\n'
$orch rebuild "$dossier" --out "$out/minilm-embeddings" --handover "$out/minilm-embeddings-handover" "${sign[@]}"

echo
echo "demo done: report in $out/minilm-embeddings/report.html (also report.json, report.md, junit.xml);"
echo "hand-over folder in $out/minilm-embeddings-handover (replay it: .venv/bin/orch verify $out/minilm-embeddings-handover$trust)"
