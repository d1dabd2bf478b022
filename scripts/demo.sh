#!/usr/bin/env bash
# The main job end to end on the CPU example, with what orch has so far: validate the dossier, build
# its image with `orch build` (wheelhouse collected on the host, build network off, inventory and image
# checks recorded in build.json), run the sample inside with least privilege, and compare the outputs
# with the committed reference. Run through `make demo`, which creates the venv, starts the engine and
# makes the base image first.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out}
orch=.venv/bin/orch
dossier=examples/tiny-embeddings/dossier.yaml

step() { printf '\n== %s\n' "$*"; }

step "validate $dossier"
$orch validate "$dossier"

step "build (the wheelhouse makes it hermetic: the build runs with no network)"
$orch build "$dossier" --out "$out/build"
image=$(.venv/bin/python -c "
from orchestrator.build import read_record
print(read_record(__import__('pathlib').Path('$out/build/build.json')).image.id)")

step "run the sample inside the image"
rm -rf "$out/output" && mkdir -p "$out/output" && { chown 10001:10001 "$out/output" 2>/dev/null || chmod 0777 "$out/output"; }
mapfile -t command < <(.venv/bin/python -c "
from orchestrator.dossier.load import load_dossier
print('\n'.join(load_dossier('$dossier').model.expect.command))")
docker run --rm --network none --cap-drop ALL --security-opt no-new-privileges --memory 4g --pids-limit 1024 \
  --label io.orch.managed=true \
  -v "$PWD/examples/tiny-embeddings/sample:/orch/input/sample:ro" -v "$PWD/$out/output:/orch/output" \
  "$image" "${command[@]}"

step "compare with the reference"
if cmp -s "$out/output/embeddings.npy" examples/tiny-embeddings/reference/embeddings.npy \
   && cmp -s <(tr -d ' \n' < "$out/output/ids.json") <(tr -d ' \n' < examples/tiny-embeddings/sample/ids.json); then
  echo "embeddings.npy and ids.json match the reference byte for byte."
else
  echo "the outputs differ from the reference"; exit 1
fi
echo
echo "demo done: build record in $out/build/build.json, sample outputs in $out/output"
