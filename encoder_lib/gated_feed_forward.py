"""The gated feed-forward network (GLU family): GeGLU and SwiGLU, as in ModernBERT and Llama."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_last_dim

__all__ = ["GatedFeedForward", "gated_d_ff", "feed_forward_parameter_counts"]

# Exact GELU (the erf form, F.gelu's default), as ModernBERT's "gelu"; SiLU(x) = x * sigmoid(x).
_GATED_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,  # GeGLU
    "silu": F.silu,  # SwiGLU
}


def gated_d_ff(d_model: int) -> int:
    r"""The hidden width that gives a gated FFN the parameters of the plain 4D one.

    A plain FFN D -> 4D -> D has two matrices, 2 * D * 4D = 8D^2 weights; a gated one has three
    (two in, one out), 3 * D * d_ff. Equal counts need d_ff = 8D / 3, "two thirds of 4D". We round
    to the nearest integer, computed exactly as ``(8 * D + 1) // 3`` (8D / 3 is never halfway
    between two integers); then |3 * d_ff - 8D| <= 1, so the two counts differ by at most D
    weights, a fraction 1 / (8D) of 8D^2 (under 2% for D = 8, 0.02% for D = 768). Large models
    round further up to a multiple of 64 or 256 for the hardware; pass ``d_ff`` for that.
    """
    if d_model < 1:
        raise ValueError(f"d_model must be a positive width D, got {d_model}")
    return (8 * d_model + 1) // 3


def feed_forward_parameter_counts(d_model: int, d_ff: int | None = None) -> tuple[int, int]:
    """``(gated, plain)``: the weights of ``GatedFeedForward(d_model, d_ff)``, 3 * D * d_ff, and
    of a plain two-matrix FFN D -> 4D -> D without biases, 8 * D^2. ``d_ff=None`` means
    ``gated_d_ff(d_model)``, the width that makes the two nearly equal."""
    if d_ff is None:
        d_ff = gated_d_ff(d_model)
    return 3 * d_model * d_ff, 2 * d_model * 4 * d_model


class GatedFeedForward(nn.Module):
    r"""wo(dropout(activation(x W_a^T) * (x W_l^T))), a gated linear unit, with no biases.

    One input matrix ``wi`` of shape ``(2 d_ff, D)`` computes both branches at once; its output
    is split in two along the last dimension, as in ModernBERT
    (``input, gate = Wi(x).chunk(2, dim=-1)``):

    * the **first** half, rows ``[0, d_ff)`` of ``wi.weight`` (W_a), goes through the activation;
    * the **second** half, rows ``[d_ff, 2 d_ff)`` (W_l), stays linear and multiplies it.

    ModernBERT calls the linear half the "gate"; Llama calls the activated half ``gate_proj`` and
    the linear one ``up_proj``. The names differ, the function is the same. With ``"gelu"`` this is
    GeGLU (exact, erf-based GELU, ``F.gelu`` without ``approximate="tanh"``, as ModernBERT's
    ``"gelu"``), with ``"silu"`` SwiGLU (Llama). ``wo`` maps d_ff back to D.

    Args:
        d_model: D.
        d_ff: the hidden width of each branch; None means ``gated_d_ff(D)`` = round(8D / 3),
            which gives the parameter count of a plain D -> 4D -> D network (see
            ``feed_forward_parameter_counts``).
        activation: ``"gelu"`` (GeGLU) or ``"silu"`` (SwiGLU).
        dropout: dropout on the gated hidden units (training mode only).

    Shape:
        input ``(B, L, D)`` (any leading dimensions), output the same shape.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int | None = None,
        activation: str = "gelu",
        dropout: float = 0.0,
    ):
        super().__init__()
        if activation not in _GATED_ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(_GATED_ACTIVATIONS)}, got {activation!r}"
            )
        self.d_ff = gated_d_ff(d_model) if d_ff is None else d_ff
        self.activation_name = activation
        self.activation = _GATED_ACTIVATIONS[activation]
        self.wi = nn.Linear(d_model, 2 * self.d_ff, bias=False)  # rows: [activated; linear]
        self.dropout = nn.Dropout(dropout)
        self.wo = nn.Linear(self.d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the gated network to each position of ``x`` ``(..., D)`` alone."""
        check_last_dim("x", x, self.wi.in_features)
        activated, linear = self.wi(x).chunk(2, dim=-1)  # each (..., d_ff)
        return self.wo(self.dropout(self.activation(activated) * linear))  # (..., D)

    def extra_repr(self) -> str:
        return f"activation={self.activation_name!r}"
