#!/usr/bin/env bash
# The main job end to end on the CPU example: validate the dossier, then `orch rebuild` — build the image
# (wheelhouse collected on the host, build network off, inventory and image checks), probe it layer by
# layer (image, host driver, device visibility, sample results re-read from the output folder and compared
# with the reference) and write the report in every format. Run through `make demo`, which creates the
# venv, starts the Docker engine and makes the local base image first.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out}
orch=.venv/bin/orch
dossier=examples/tiny-embeddings/dossier.yaml

printf '\n== validate %s\n' "$dossier"
$orch validate "$dossier"

printf '\n== rebuild: build, probe, report\n'
$orch rebuild "$dossier" --out "$out/tiny-embeddings"

echo
echo "demo done: report $out/tiny-embeddings/report.html (and report.json, report.md, junit.xml);"
echo "build record $out/tiny-embeddings/build.json; sample outputs $out/tiny-embeddings/sample-output/"
