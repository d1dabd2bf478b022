"""The reference training run: synthetic data, a checkpoint at step K, the reference continuation.

    python train.py --out DIR [--steps 60] [--checkpoint-step 40] [--samples 256] [--seed 0]

Writes to DIR:
  features.npy, targets.npy  the synthetic data set (float32 N x 8, int64 N), drawn from numpy's PCG64
                             seeded with --seed: the sample's inputs
  checkpoint.pt              the state after step K: model, optimizer, RNG states (torch, numpy, Python), step
  state.json                 the fingerprint of the state right after loading checkpoint.pt into a fresh run
                             (the same code path as resume.py); also checked equal to the live state at step K
  losses.json                the losses of steps K+1..N of this uninterrupted run: the reference continuation
  training.json              all N losses, for the record (timings are printed, not written: the files
                             are the same bytes on every run with the same torch build)
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from resumable import Config, Run, load_checkpoint, load_data, set_determinism, write_fingerprint


def make_data(samples: int, config: Config) -> tuple[np.ndarray, np.ndarray]:
    """Three classes set by a fixed random two-layer teacher: not linearly separable, learnable."""
    rng = np.random.default_rng(config.seed)
    features = rng.normal(size=(samples, config.features)).astype(np.float32)
    w1 = rng.normal(size=(config.features, 16))
    w2 = rng.normal(size=(16, config.classes))
    targets = np.argmax(np.tanh(features.astype(np.float64) @ w1) @ w2, axis=1).astype(np.int64)
    return features, targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-step", type=int, default=40)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    started = time.perf_counter()
    set_determinism(args.seed)
    config = Config(seed=args.seed)
    os.makedirs(args.out, exist_ok=True)
    features_path = os.path.join(args.out, "features.npy")
    targets_path = os.path.join(args.out, "targets.npy")
    checkpoint_path = os.path.join(args.out, "checkpoint.pt")
    features, targets = make_data(args.samples, config)
    np.save(features_path, features)
    np.save(targets_path, targets)
    # Train from the files just written: exactly the bytes the sample will read.
    x, y = load_data(features_path, targets_path)

    run = Run(config)
    losses: list[float] = []
    live_fingerprint: list[str] = []
    for _ in range(args.steps):
        losses.append(run.train_step(x, y))
        if run.step == args.checkpoint_step:
            torch.save(run.checkpoint(), checkpoint_path)
            live_fingerprint = run.fingerprint()
    trained = time.perf_counter() - started

    # The reference fingerprint: a fresh run restored from the file, as resume.py does it.
    restored = Run(config)
    restored.restore(load_checkpoint(checkpoint_path))
    fingerprint = restored.fingerprint()
    if fingerprint != live_fingerprint:
        raise SystemExit(f"the checkpoint does not restore the state at step {args.checkpoint_step}")

    continuation = losses[args.checkpoint_step :]
    write_fingerprint(os.path.join(args.out, "state.json"), fingerprint)
    with open(os.path.join(args.out, "losses.json"), "w", encoding="utf-8") as handle:
        json.dump(continuation, handle)
    record = {
        "steps": args.steps,
        "checkpoint_step": args.checkpoint_step,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "losses": losses,
    }
    with open(os.path.join(args.out, "training.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
        handle.write("\n")
    summary = {
        "first_loss": losses[0],
        "loss_at_checkpoint": losses[args.checkpoint_step - 1],
        "last_loss": losses[-1],
        "checkpoint_bytes": os.path.getsize(checkpoint_path),
        "train_seconds": round(trained, 3),
        "total_seconds": round(time.perf_counter() - started, 3),
    }
    print(json.dumps({k: v for k, v in record.items() if k != "losses"} | summary))


if __name__ == "__main__":
    main()
