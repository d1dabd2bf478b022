"""Classify an identified sample into categories with the committed classifier weights.

    python classify.py --weights /orch/weights/classifier --input sample.jsonl --output OUT [--seed 0]

Reads JSON lines {"id": ..., "text": ...}; writes, in the sample's order:
  OUT/labels.json         the category of each item (a JSON list of strings)
  OUT/probabilities.npy   float32, N x C: softmax over the categories, columns in OUT/categories.json order
  OUT/categories.json     the category names, in column order (as stored with the weights)
  OUT/ids.json            the ids
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch

from textcat import WEIGHTS_FORMAT, TextClassifier, featurize, set_determinism


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    set_determinism(args.seed)
    # weights_only=True: the file holds tensors, strings and numbers only, so no pickled code can run.
    saved = torch.load(args.weights, map_location="cpu", weights_only=True)
    if saved.get("format") != WEIGHTS_FORMAT:
        raise SystemExit(f"{args.weights}: not a {WEIGHTS_FORMAT} weights file")
    categories = list(saved["categories"])
    model = TextClassifier(saved["buckets"], saved["hidden"], len(categories))
    model.load_state_dict(saved["state_dict"])
    model.eval()

    with open(args.input, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    ids = [str(row["id"]) for row in rows]
    indices, offsets = featurize([row["text"] for row in rows], saved["buckets"])
    with torch.no_grad():
        probabilities = torch.softmax(model(indices, offsets), dim=1)
    labels = [categories[i] for i in probabilities.argmax(dim=1).tolist()]

    os.makedirs(args.output, exist_ok=True)
    np.save(os.path.join(args.output, "probabilities.npy"), probabilities.numpy().astype(np.float32))
    for name, value in (("labels.json", labels), ("categories.json", categories), ("ids.json", ids)):
        with open(os.path.join(args.output, name), "w", encoding="utf-8") as handle:
            json.dump(value, handle)
    print(json.dumps({"classified": len(ids), "categories": categories, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
