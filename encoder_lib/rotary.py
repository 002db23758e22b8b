r"""Rotary position embeddings (RoPE, Su et al. 2021): position enters by rotating queries and keys.

Features are taken in pairs, and the pair with frequency theta_i = base^(-2i / d_head),
i = 0 .. d_head/2 - 1, is rotated at position m by the angle m * theta_i. A rotation by
angle a applied to a query at m and by angle b to a key at n leaves their dot product depending
on a - b only, so the attention score sees the *relative* position m - n. Values are not rotated:
position decides where a head looks, not what it reads.

Two layouts of the pairs are in use; they give the same model up to a fixed permutation of the
features (of the rows of the query and key projections):

* ``"adjacent"``: pairs (x_0, x_1), (x_2, x_3), ... as in RoFormer, GPT-J and Meta's Llama code.
* ``"halves"``: pairs (x_i, x_{i + d_head/2}), as in GPT-NeoX and Hugging Face's Llama and
  ModernBERT (``rotate_half``). Taking the features of an "adjacent" vector in the order
  0, 2, 4, ..., 1, 3, 5, ... turns it into the "halves" layout.
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import check_last_dim

__all__ = ["rotary_angles", "apply_rotary", "RotaryEmbedding"]

_PAIRINGS = ("halves", "adjacent")


def _check_d_head(d_head: int) -> None:
    if d_head < 2 or d_head % 2 != 0:
        raise ValueError(
            f"d_head = {d_head} must be even and positive for rotary embeddings: each frequency "
            "rotates a pair of features"
        )


def _check_pairing(pairing: str) -> None:
    if pairing not in _PAIRINGS:
        raise ValueError(f"pairing must be one of {list(_PAIRINGS)}, got {pairing!r}")


def rotary_angles(
    length: int,
    d_head: int,
    base: float = 10000.0,
    *,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    r"""The ``(L, d_head / 2)`` table angle[m, i] = m * base^(-2i / d_head).

    Column i is the angle of feature pair i at position m = 0 .. L - 1; pass ``cos()`` and
    ``sin()`` of it to ``apply_rotary``. ``dtype`` defaults to the default dtype; compute the
    table in at least float32 (RoPE in half precision loses the far positions).
    """
    _check_d_head(d_head)
    if length < 1:
        raise ValueError(f"length must be a positive sequence length L, got {length}")
    dtype = torch.get_default_dtype() if dtype is None else dtype
    two_i = torch.arange(0, d_head, 2, device=device, dtype=dtype)  # (d_head/2,)
    inv_freq = base ** (-two_i / d_head)  # theta_i, (d_head/2,)
    position = torch.arange(length, device=device, dtype=dtype)  # (L,)
    return torch.outer(position, inv_freq)  # (L, d_head/2)


def apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: str = "halves"
) -> torch.Tensor:
    r"""Rotate each feature pair (x1, x2) of ``x`` to (x1 cos - x2 sin, x2 cos + x1 sin).

    Apply it to queries and keys, never to values.

    Args:
        x: queries or keys ``(..., L, d_head)``, d_head even.
        cos, sin: cosine and sine of ``rotary_angles``, ``(L, d_head / 2)`` (or anything that
            broadcasts with ``(..., L, d_head / 2)``), one column per pair.
        pairing: ``"halves"`` pairs feature i with i + d_head/2; ``"adjacent"`` pairs 2i with
            2i + 1 (see the module's docstring).

    Shape:
        output the shape of ``x``.
    """
    _check_pairing(pairing)
    _check_d_head(x.shape[-1])
    check_last_dim("cos", cos, x.shape[-1] // 2, "d_head / 2")
    check_last_dim("sin", sin, x.shape[-1] // 2, "d_head / 2")
    if pairing == "halves":
        x1, x2 = x.chunk(2, dim=-1)  # each (..., L, d_head/2)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)  # (..., L, d_head)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # each (..., L, d_head/2)
    rotated = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)  # (..., L, d/2, 2)
    return rotated.flatten(-2)  # (..., L, d_head), pairs back in adjacent places


class RotaryEmbedding(nn.Module):
    r"""Rotates queries and keys by their positions 0 .. L - 1 (see the module's docstring).

    Holds no parameters and no buffers: the angles are computed at each call on the device of the
    input, in float32 (float64 for float64 input), and the cosine and sine are rounded to the
    input's dtype.

    Args:
        d_head: the width of one head; must be even.
        base: theta_i = base^(-2i / d_head). 10000 in the RoFormer paper; ModernBERT uses
            160000 in its global layers and 10000 in its local ones.
        pairing: ``"halves"`` (Hugging Face's ``rotate_half``) or ``"adjacent"`` (RoFormer).

    Shape:
        query ``(B, H, L, d_head)`` and key ``(B, H_kv, L, d_head)`` (any leading dimensions);
        outputs the same shapes.
    """

    def __init__(self, d_head: int, base: float = 10000.0, pairing: str = "halves"):
        super().__init__()
        _check_d_head(d_head)
        _check_pairing(pairing)
        self.d_head = d_head
        self.base = base
        self.pairing = pairing

    def forward(self, query: torch.Tensor, key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rotated query, rotated key)``; position m is the index along dimension -2."""
        check_last_dim("query", query, self.d_head, "d_head")
        check_last_dim("key", key, self.d_head, "d_head")
        if query.shape[-2] != key.shape[-2]:
            raise ValueError(
                "query and key must have the same length L (self-attention), got shapes "
                f"{tuple(query.shape)} and {tuple(key.shape)}"
            )
        angles = rotary_angles(
            query.shape[-2],
            self.d_head,
            self.base,
            device=query.device,
            dtype=torch.promote_types(query.dtype, torch.float32),
        )  # (L, d_head/2)
        cos, sin = angles.cos().to(query.dtype), angles.sin().to(query.dtype)
        return (
            apply_rotary(query, cos, sin, self.pairing),
            apply_rotary(key, cos, sin, self.pairing),
        )

    def extra_repr(self) -> str:
        return f"{self.d_head}, base={self.base}, pairing={self.pairing!r}"
