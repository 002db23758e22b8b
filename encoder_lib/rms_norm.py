"""Root-mean-square normalisation: LayerNorm without the centring and without the offset."""

from __future__ import annotations

import torch
from torch import nn

from ._checks import check_last_dim
from ._transplant import copy_weights

__all__ = ["rms_norm", "RMSNorm"]


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None = None, eps: float | None = None
) -> torch.Tensor:
    r"""y = x / sqrt(mean(x^2) + eps) * weight, over the last dimension D.

    The same as ``F.rms_norm(x, (D,), weight, eps)``. Unlike LayerNorm nothing is subtracted:
    the mean of the squares is the squared root-mean-square of x, not its variance, and there is
    no offset to add back.

    Args:
        x: the input ``(..., D)``.
        weight: the gain ``(D,)``, or None for none.
        eps: added to the mean square *inside* the square root; None means
            ``torch.finfo(x.dtype).eps``, as in ``nn.RMSNorm`` and ``F.rms_norm``.

    Shape:
        input ``(..., D)``, output the same shape.
    """
    if weight is not None:
        check_last_dim("x", x, weight.shape[-1])
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    # rsqrt(v) = 1 / sqrt(v): one multiply instead of a divide over the (..., D) tensor.
    y = x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps)
    return y if weight is None else y * weight


class RMSNorm(nn.Module):
    r"""y = x / sqrt(mean(x^2) + eps) * weight, over the last dimension D.

    The parameter is named ``weight`` (the gain) as in ``nn.RMSNorm``, so ``load_state_dict``
    works both ways; there is no ``bias``. Llama and many encoders since use it in place of
    LayerNorm: one reduction instead of two, and no offset.

    Args:
        d_model: D, the size of the last dimension.
        eps: added to the mean square inside the square root. None (the default, as in
            ``nn.RMSNorm``) means the machine epsilon of the input's dtype,
            ``torch.finfo(x.dtype).eps``, looked up at every call.

    Shape:
        input ``(..., D)``, output the same shape.
    """

    def __init__(self, d_model: int, eps: float | None = None):
        super().__init__()
        self.d_model = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # the gain, gamma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` ``(..., D)`` to unit root-mean-square over D, then scale by the gain."""
        check_last_dim("x", x, self.d_model)
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"

    @classmethod
    def from_torch(cls, module: nn.RMSNorm) -> RMSNorm:
        """An equivalent ``RMSNorm`` holding a copy of ``module``'s gain."""
        if not isinstance(module, nn.RMSNorm):
            raise TypeError(f"expected nn.RMSNorm, got {type(module).__name__}")
        if len(module.normalized_shape) != 1 or module.weight is None:
            raise ValueError(
                "only nn.RMSNorm over one dimension with elementwise_affine=True has an "
                f"equivalent RMSNorm, got {module}"
            )
        return copy_weights(cls(module.normalized_shape[0], module.eps), module)

    def to_torch(self) -> nn.RMSNorm:
        """The equivalent ``nn.RMSNorm`` with a copy of our gain."""
        return copy_weights(nn.RMSNorm(self.d_model, eps=self.eps), self)
