"""The pure-PyTorch equivalent of the compiled `gate` operator: what the extension check compares with."""

from __future__ import annotations

import torch


def gate(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(g)
