"""Layer normalisation with learnable gain (``weight``, gamma) and offset (``bias``, beta)."""

from __future__ import annotations

import torch
from torch import nn

from ._checks import check_last_dim

__all__ = ["LayerNorm"]


class LayerNorm(nn.Module):
    r"""y = (x - mean) / sqrt(var + eps) * weight + bias, over the last dimension D.

    The variance is the biased one (divide by D, not D - 1) and eps sits inside the square root,
    exactly as ``nn.LayerNorm``; the parameter names are the same, so ``load_state_dict`` works
    both ways.

    Args:
        d_model: D, the size of the last dimension.
        eps: added to the variance before the square root.

    Shape:
        input ``(..., D)``, output the same shape.
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        """``weight`` starts at ones and ``bias`` at zeros: a new LayerNorm only normalises."""
        super().__init__()
        self.d_model = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # gamma
        self.bias = nn.Parameter(torch.zeros(d_model))  # beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise each position of ``x`` ``(..., D)`` over D, then scale and shift it
        feature by feature; the output has the shape of ``x``."""
        check_last_dim("x", x, self.d_model)
        centred = x - x.mean(dim=-1, keepdim=True)
        var = centred.square().mean(dim=-1, keepdim=True)  # biased: divide by D
        # rsqrt(v) = 1 / sqrt(v): one multiply instead of a divide over the (..., D) tensor.
        return centred * torch.rsqrt(var + self.eps) * self.weight + self.bias

    def extra_repr(self) -> str:
        """What ``print(module)`` shows in the brackets: ``LayerNorm(512, eps=1e-05)``."""
        return f"{self.d_model}, eps={self.eps}"

    @classmethod
    def from_torch(cls, module: nn.LayerNorm) -> LayerNorm:
        """An equivalent ``LayerNorm`` holding a copy of ``module``'s gain and offset."""
        if not isinstance(module, nn.LayerNorm):
            raise TypeError(f"expected nn.LayerNorm, got {type(module).__name__}")
        if len(module.normalized_shape) != 1 or module.weight is None or module.bias is None:
            raise ValueError(
                "only nn.LayerNorm over one dimension with elementwise_affine=True and bias=True "
                f"has an equivalent LayerNorm, got {module}"
            )
        ours = cls(module.normalized_shape[0], module.eps).to(module.weight)
        ours.load_state_dict(module.state_dict())  # after .to(): no rounding through float32
        return ours

    def to_torch(self) -> nn.LayerNorm:
        """The equivalent ``nn.LayerNorm`` with a copy of our gain and offset."""
        theirs = nn.LayerNorm(self.d_model, eps=self.eps).to(self.weight)
        theirs.load_state_dict(self.state_dict())  # after .to(): no rounding through float32
        return theirs
