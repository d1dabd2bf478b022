"""Resume the reference training run from its checkpoint and continue for a few steps.

    python resume.py --checkpoint /orch/weights/checkpoint --features features.npy --targets targets.npy \
        --steps 20 --output OUT [--seed 0]

Restores the model, the optimizer, the three random generators (torch, numpy, Python) and the step from
the checkpoint, then writes:
  OUT/state.json   the fingerprint of the computation state right after the restore, before any step
                   (step, sha256 of parameters, optimizer state and each generator; optimizer hyperparameters)
  OUT/losses.json  the training loss of each of the next --steps steps (K+1..K+steps), in order
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from resumable import Config, Run, load_checkpoint, load_data, set_determinism, write_fingerprint


def resume(args: argparse.Namespace, *, optimizer: bool = True, rng: bool = True) -> dict[str, object]:
    started = time.perf_counter()
    set_determinism(args.seed)
    checkpoint = load_checkpoint(args.checkpoint)
    run = Run(Config(**checkpoint["config"]))
    run.restore(checkpoint, optimizer=optimizer, rng=rng)
    fingerprint = run.fingerprint()  # before any step: what the restore produced
    x, y = load_data(args.features, args.targets)
    losses = [run.train_step(x, y) for _ in range(args.steps)]

    os.makedirs(args.output, exist_ok=True)
    write_fingerprint(os.path.join(args.output, "state.json"), fingerprint)
    with open(os.path.join(args.output, "losses.json"), "w", encoding="utf-8") as handle:
        json.dump(losses, handle)
    return {
        "resumed_at_step": int(checkpoint["step"]),
        "last_step": run.step,
        "last_loss": losses[-1] if losses else None,
        "seconds": round(time.perf_counter() - started, 3),
        "torch": torch.__version__,
    }


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--features", required=True)
    parser.add_argument("--targets", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--output", required=True)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main() -> None:
    print(json.dumps(resume(parser().parse_args())))


if __name__ == "__main__":
    main()
