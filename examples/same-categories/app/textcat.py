"""The classifier shared by train.py and classify.py: hashed text features and a small torch model.

Features are word unigrams, word bigrams and character trigrams of each word, hashed with crc32 (not
hash(): Python's string hash is salted per process) into a fixed number of buckets. The model is an
EmbeddingBag (mean of the feature vectors), a ReLU and a linear layer to one logit per category.
"""

from __future__ import annotations

import itertools
import random
import re
import zlib

import numpy as np
import torch

WEIGHTS_FORMAT = "same-categories/1"


def set_determinism(seed: int) -> None:
    """Seeds and settings the app relies on, applied by the app itself (not left to the environment)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    # One thread: a reduction's summation order then does not depend on how many cores the machine has.
    torch.set_num_threads(1)


def features(text: str) -> list[str]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    grams = [f"w:{word}" for word in words]
    grams += [f"b:{a}_{b}" for a, b in itertools.pairwise(words)]
    for word in words:
        padded = f"#{word}#"
        grams += [f"c:{padded[i : i + 3]}" for i in range(len(padded) - 2)]
    return grams


def featurize(texts: list[str], buckets: int) -> tuple[torch.Tensor, torch.Tensor]:
    indices: list[int] = []
    offsets: list[int] = []
    for text in texts:
        offsets.append(len(indices))
        indices.extend(zlib.crc32(gram.encode("utf-8")) % buckets for gram in features(text))
    return torch.tensor(indices, dtype=torch.long), torch.tensor(offsets, dtype=torch.long)


class TextClassifier(torch.nn.Module):
    def __init__(self, buckets: int, hidden: int, categories: int) -> None:
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(buckets, hidden, mode="mean")
        self.out = torch.nn.Linear(hidden, categories)

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.bag(indices, offsets)))
