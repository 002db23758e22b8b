"""Boolean attention masks. **True means "may attend"** everywhere in ``encoder_lib``.

PyTorch uses both polarities: ``F.scaled_dot_product_attention`` takes True = may attend (as
here), while ``nn.MultiheadAttention`` and ``nn.TransformerEncoder`` take a ``key_padding_mask``
of shape ``(B, L)`` with True = ignore. ``~padding_mask(ids, pad_id)[:, 0, 0, :]`` converts ours
into theirs.
"""

from __future__ import annotations

import torch

from ._checks import check_rank

__all__ = ["padding_mask", "causal_mask"]


def padding_mask(token_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """True at real tokens, False at padding, shaped ``(B, 1, 1, L)`` to broadcast over heads and
    queries: every query may attend to every real key and to no padding key.

    Args:
        token_ids: integer tensor ``(B, L)``.
        pad_id: the id of the padding token.
    """
    check_rank("token_ids", token_ids, "(B, L)")
    return (token_ids != pad_id)[:, None, None, :]  # (B, 1, 1, L)


def causal_mask(length: int, device: torch.device | None = None) -> torch.Tensor:
    """``(L, L)`` lower-triangular mask: query i may attend to keys 0..i (the decoder's mask)."""
    if length < 1:
        raise ValueError(f"length must be a positive sequence length L, got {length}")
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()
