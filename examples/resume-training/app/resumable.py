"""What train.py and resume.py share: the model, one training step, the checkpoint, the fingerprint.

A training step draws its randomness from three generators, so a resume is only faithful when all
three are restored along with the model and the optimizer:
  - Python's random (a random.Random owned by the run) picks the mini-batch;
  - numpy (a np.random.Generator owned by the run) draws the input noise (augmentation);
  - torch's default CPU generator draws the dropout masks.

The checkpoint is a torch.save of tensors, dicts, lists, tuples, strings and numbers only, so it loads
with torch.load(weights_only=True): no pickled code runs when it is read.

The fingerprint of the computation state is a list of "name=value" strings, in a fixed order: the step,
the sha256 of the parameters, of the optimizer's state tensors, of each generator's state, and the
optimizer's hyperparameters. Computed right after a restore, it shows what was restored, not only which
versions were installed; a check that compares it names the position of the first difference, which is
the first part that was not restored.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

CHECKPOINT_FORMAT = "resume-training/1"


@dataclass(frozen=True)
class Config:
    features: int = 8
    classes: int = 3
    hidden: int = 32
    dropout: float = 0.2
    lr: float = 0.003
    batch: int = 32
    noise: float = 0.1
    seed: int = 0


def set_determinism(seed: int) -> None:
    """Seeds and settings the app relies on, applied by the app itself (not left to the environment)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    # One thread: a reduction's summation order then does not depend on how many cores the machine has.
    torch.set_num_threads(1)


class Run:
    """The whole computation state of a training run: model, optimizer, generators, step."""

    def __init__(self, config: Config) -> None:
        self.config = config
        torch.manual_seed(config.seed)  # the initial weights; dropout then draws from the same generator
        self.model = torch.nn.Sequential(
            torch.nn.Linear(config.features, config.hidden),
            torch.nn.ReLU(),
            torch.nn.Dropout(config.dropout),
            torch.nn.Linear(config.hidden, config.hidden),
            torch.nn.ReLU(),
            torch.nn.Dropout(config.dropout),
            torch.nn.Linear(config.hidden, config.classes),
        )
        # foreach=False: the single-tensor implementation, whatever torch would pick by default.
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, foreach=False)
        self.py_rng = random.Random(config.seed)
        self.np_rng = np.random.default_rng(config.seed)
        self.step = 0

    def train_step(self, features: torch.Tensor, targets: torch.Tensor) -> float:
        """One optimizer step on a random mini-batch with input noise and dropout; returns its loss."""
        batch = self.py_rng.sample(range(features.shape[0]), self.config.batch)
        noise = self.np_rng.normal(0.0, self.config.noise, size=(self.config.batch, self.config.features))
        inputs = features[batch] + torch.from_numpy(noise.astype(np.float32))
        self.model.train()
        loss = torch.nn.functional.cross_entropy(self.model(inputs), targets[batch])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.step += 1
        return loss.item()

    def checkpoint(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT,
            "config": asdict(self.config),
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "numpy": self.np_rng.bit_generator.state,
                "python": self.py_rng.getstate(),
            },
        }

    def restore(self, checkpoint: dict[str, Any], *, optimizer: bool = True, rng: bool = True) -> None:
        """Restore a checkpoint. The keyword switches exist only for the negative controls (negative/)."""
        self.model.load_state_dict(checkpoint["model"])
        if optimizer:
            self.optimizer.load_state_dict(checkpoint["optimizer"])
        if rng:
            torch.set_rng_state(checkpoint["rng"]["torch"])
            self.np_rng.bit_generator.state = checkpoint["rng"]["numpy"]
            version, internal, gauss = checkpoint["rng"]["python"]
            self.py_rng.setstate((version, tuple(internal), gauss))
        self.step = int(checkpoint["step"])

    def fingerprint(self) -> list[str]:
        """The computation state as "name=value" strings; reading it changes nothing."""
        parameters = hashlib.sha256()
        for name, tensor in self.model.state_dict().items():
            parameters.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}\n".encode())
            parameters.update(tensor.detach().contiguous().numpy().tobytes())
        optimizer_state = hashlib.sha256()
        state = self.optimizer.state_dict()["state"]
        for index in sorted(state):
            for key in sorted(state[index]):
                value = state[index][key]
                optimizer_state.update(f"{index}.{key}\n".encode())
                if isinstance(value, torch.Tensor):
                    optimizer_state.update(value.detach().contiguous().numpy().tobytes())
                else:
                    optimizer_state.update(repr(value).encode())
        group = self.optimizer.param_groups[0]
        hyper = (
            f"{type(self.optimizer).__name__}(lr={group['lr']}, betas={tuple(group['betas'])}, "
            f"eps={group['eps']}, weight_decay={group['weight_decay']})"
        )
        return [
            f"step={self.step}",
            f"parameters_sha256={parameters.hexdigest()}",
            f"optimizer_state_sha256={optimizer_state.hexdigest()}",
            f"optimizer={hyper}",
            f"torch_rng_sha256={hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest()}",
            f"numpy_rng_sha256={_json_sha256(self.np_rng.bit_generator.state)}",
            f"python_rng_sha256={_json_sha256(self.py_rng.getstate())}",
        ]


def write_fingerprint(path: str, fingerprint: list[str]) -> None:
    """A JSON list, one entry a line: readable, and the same bytes for the same state."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("[\n" + ",\n".join(json.dumps(entry) for entry in fingerprint) + "\n]\n")


def _json_sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def load_checkpoint(path: str) -> dict[str, Any]:
    # weights_only=True: tensors and plain containers only, so reading the file runs no pickled code.
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise SystemExit(f"{path}: not a {CHECKPOINT_FORMAT} checkpoint")
    return checkpoint


def load_data(features_path: str, targets_path: str) -> tuple[torch.Tensor, torch.Tensor]:
    features = np.load(features_path, allow_pickle=False)
    targets = np.load(targets_path, allow_pickle=False)
    return torch.from_numpy(features.astype(np.float32)), torch.from_numpy(targets.astype(np.int64))
