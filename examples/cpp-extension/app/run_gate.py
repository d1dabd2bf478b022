"""Applies the compiled `gate` operator (gate_ext) to a seeded input and writes the result.

    python run_gate.py --output OUT [--rows 64] [--cols 32] [--seed 0] [--device cpu] [--pure]

Writes OUT/gated.npy (float32, rows x cols). --pure uses the pure-PyTorch equivalent instead of the
extension: that is how reference/gated.npy was made. --device cuda runs the CUDA build of the operator
(dossier-cuda.yaml) on the GPU; the input is drawn on the CPU either way, so both read the same numbers.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--cols", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--pure", action="store_true")
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.rows, args.cols, generator=generator)
    g = torch.randn(args.rows, args.cols, generator=generator)
    x, g = x.to(args.device), g.to(args.device)
    if args.pure:
        from gate_reference import gate
    else:
        from gate_ext import gate  # built by orch in the builder stage, copied alone to the image
    out = gate(x, g)
    os.makedirs(args.output, exist_ok=True)
    np.save(os.path.join(args.output, "gated.npy"), out.cpu().numpy().astype(np.float32))


if __name__ == "__main__":
    main()
