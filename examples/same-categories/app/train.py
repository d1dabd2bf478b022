"""Train the category classifier once, with a fixed seed, and write its weights file.

    python train.py --data ../training/train.jsonl --out ../weights/classifier.pt [--seed 0]

Reads JSON lines {"text": ..., "category": ...}. Full-batch Adam on cross-entropy for a fixed number
of epochs, one CPU thread, deterministic algorithms: the same torch build gives the same bytes. The
weights file is a torch.save of plain tensors, strings and numbers, loadable with weights_only=True.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

import torch

from textcat import WEIGHTS_FORMAT, TextClassifier, featurize, set_determinism


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--buckets", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.02)
    args = parser.parse_args()

    started = time.perf_counter()
    set_determinism(args.seed)
    with open(args.data, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    categories = sorted({row["category"] for row in rows})
    targets = torch.tensor([categories.index(row["category"]) for row in rows], dtype=torch.long)
    indices, offsets = featurize([row["text"] for row in rows], args.buckets)

    model = TextClassifier(args.buckets, args.hidden, len(categories))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for _ in range(args.epochs):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(indices, offsets), targets)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(indices, offsets).argmax(dim=1) == targets).float().mean().item()

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    torch.save(
        {
            "format": WEIGHTS_FORMAT,
            "categories": categories,
            "buckets": args.buckets,
            "hidden": args.hidden,
            "state_dict": model.state_dict(),
        },
        args.out,
    )
    with open(args.out, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    print(
        json.dumps(
            {
                "examples": len(rows),
                "categories": categories,
                "final_loss": round(loss.item(), 6),
                "train_accuracy": accuracy,
                "sha256": digest,
                "seconds": round(time.perf_counter() - started, 3),
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
