"""The position-wise feed-forward network: D -> d_ff -> D, applied to each position alone."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_last_dim

__all__ = ["FeedForward"]

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "gelu": F.gelu}


def get_activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """``"relu"`` or ``"gelu"``, the two activations ``nn.TransformerEncoderLayer`` accepts."""
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(
            f"activation must be one of {sorted(_ACTIVATIONS)}, got {name!r}"
        ) from None


class FeedForward(nn.Module):
    r"""linear2(dropout(activation(linear1(x)))), the FFN of ``nn.TransformerEncoderLayer``.

    Args:
        d_model: D.
        d_ff: the hidden width (2048 for D = 512 in the original paper).
        dropout: dropout on the hidden activations (training mode only).
        activation: ``"relu"`` (the paper's) or ``"gelu"``.

    Shape:
        input ``(B, L, D)`` (any leading dimensions), output the same shape.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1, activation: str = "relu"):
        """Build ``linear1`` (D to d_ff), ``dropout`` and ``linear2`` (d_ff to D); the
        arguments are described in the class docstring."""
        super().__init__()
        self.activation_name = activation
        self.activation = get_activation(activation)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Send each position of ``x`` ``(..., D)`` through D -> d_ff -> D on its own; the
        output has the shape of ``x``."""
        check_last_dim("x", x, self.linear1.in_features)
        return self.linear2(self.dropout(self.activation(self.linear1(x))))
