"""Tiny embeddings: a fixed-seed character-trigram model that embeds an identified sample.

    python embed.py --input sample.jsonl --output OUT [--dim 16] [--buckets 2048] [--seed 0]

Reads JSON lines {"id": ..., "text": ...}; writes OUT/embeddings.npy (float32, N x dim, rows of unit
length) and OUT/ids.json (the ids, in the order of the rows). The model has no trained weights: they
are drawn from a seeded torch.Generator, which gives the same numbers on every CPU build of torch, so
the example is small and fast yet exercises torch, numpy and the whole output contract.
"""

from __future__ import annotations

import argparse
import json
import os
import zlib

import numpy as np
import torch


def trigrams(text: str) -> list[str]:
    padded = f"  {text.lower()}  "
    return [padded[i : i + 3] for i in range(len(padded) - 2)]


def featurize(texts: list[str], buckets: int) -> tuple[torch.Tensor, torch.Tensor]:
    indices: list[int] = []
    offsets: list[int] = []
    for text in texts:
        offsets.append(len(indices))
        # crc32, not hash(): Python's string hash is salted per process.
        indices.extend(zlib.crc32(gram.encode("utf-8")) % buckets for gram in trigrams(text))
    return torch.tensor(indices, dtype=torch.long), torch.tensor(offsets, dtype=torch.long)


def build_model(buckets: int, dim: int, seed: int) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    bag = torch.nn.EmbeddingBag(buckets, 64, mode="mean")
    projection = torch.nn.Linear(64, dim)
    with torch.no_grad():
        bag.weight.copy_(torch.randn(buckets, 64, generator=generator) * 0.5)
        projection.weight.copy_(torch.randn(dim, 64, generator=generator) / 8)
        projection.bias.zero_()
    return torch.nn.ModuleDict({"bag": bag, "projection": projection}).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--buckets", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    with open(args.input, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    ids = [str(row["id"]) for row in rows]
    indices, offsets = featurize([row["text"] for row in rows], args.buckets)
    model = build_model(args.buckets, args.dim, args.seed)
    with torch.no_grad():
        hidden = model["bag"](indices, offsets)
        embeddings = torch.nn.functional.normalize(torch.tanh(model["projection"](hidden)), dim=1)

    os.makedirs(args.output, exist_ok=True)
    np.save(os.path.join(args.output, "embeddings.npy"), embeddings.numpy().astype(np.float32))
    with open(os.path.join(args.output, "ids.json"), "w", encoding="utf-8") as handle:
        json.dump(ids, handle)
    print(json.dumps({"embedded": len(ids), "dim": args.dim, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
