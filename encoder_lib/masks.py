"""Boolean attention masks. **True means "may attend"** everywhere in ``encoder_lib``.

PyTorch uses both polarities: ``F.scaled_dot_product_attention`` takes True = may attend (as
here), while ``nn.MultiheadAttention`` and ``nn.TransformerEncoder`` take a ``key_padding_mask``
of shape ``(B, L)`` with True = ignore. ``~padding_mask(ids, pad_id)[:, 0, 0, :]`` converts ours
into theirs.
"""

from __future__ import annotations

import torch

from ._checks import check_rank

__all__ = ["padding_mask", "causal_mask", "sliding_window_mask"]


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


def sliding_window_mask(
    length: int, window: int, device: torch.device | None = None
) -> torch.Tensor:
    """``(L, L)`` band mask of local attention: query i may attend to key j when
    |i - j| <= window / 2.

    ``window`` counts the neighbours a query sees, both sides together, as ModernBERT's
    ``local_attention`` (128: 64 keys on each side, so a band of window + 1 = 129 keys with the
    query's own position). It must be even and at least 2, so that the band is the same on both
    sides and no odd width is silently rounded down. Combine it with a padding mask by ``&``
    (both True = may attend). A window of at least 2 (L - 1) lets every query see every key.
    """
    if length < 1:
        raise ValueError(f"length must be a positive sequence length L, got {length}")
    if window < 2 or window % 2 != 0:
        raise ValueError(
            f"window must be an even number >= 2 (the keys a query sees, window / 2 on each "
            f"side), got {window}"
        )
    position = torch.arange(length, device=device)  # (L,)
    distance = (position[:, None] - position[None, :]).abs()  # (L, L), |i - j|
    return distance <= window // 2
