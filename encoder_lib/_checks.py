"""Input checks shared by the modules: each failure is a ``ValueError`` that names the argument,
the shape that was expected and the shape that was given."""

from __future__ import annotations

import torch

__all__: list[str] = []


def check_rank(name: str, x: torch.Tensor, layout: str) -> None:
    """``layout`` is the expected shape written with the course's letters, e.g. ``"(B, L, D)"``."""
    rank = layout.count(",") + 1
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {layout}, got {type(x).__name__}")
    if x.dim() != rank:
        raise ValueError(
            f"{name} must have shape {layout} ({rank} dimensions), got shape {tuple(x.shape)}"
        )


def check_last_dim(name: str, x: torch.Tensor, expected: int, letter: str = "D") -> None:
    if x.shape[-1] != expected:
        raise ValueError(
            f"{name} must have last dimension {letter} = {expected}, got shape {tuple(x.shape)}"
        )


def check_mask(mask: torch.Tensor | None, target: tuple[int, ...], layout: str) -> None:
    """A mask is boolean, True = may attend, and broadcasts to ``target`` without enlarging it."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = (
            f"{mask.dtype} with shape {tuple(mask.shape)}"
            if isinstance(mask, torch.Tensor)
            else type(mask).__name__
        )
        raise ValueError(
            f"mask must be a boolean tensor (True = may attend) broadcastable to {layout} = "
            f"{target}, got {got}"
        )
    # Broadcasting aligns shapes from the right; each mask size must be 1 or the target's size.
    # (Plain Python: torch.broadcast_shapes imports torch._refs, ~1 s on first use.)
    ok = mask.dim() <= len(target) and all(
        m in (1, t) for m, t in zip(reversed(mask.shape), reversed(target), strict=False)
    )
    if not ok:
        raise ValueError(
            f"mask must broadcast to {layout} = {target}, got shape {tuple(mask.shape)}"
        )


def check_token_ids(name: str, ids: torch.Tensor, vocab_size: int) -> None:
    check_rank(name, ids, "(B, L)")
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(
            f"{name} must hold integer token ids of shape (B, L), got dtype {ids.dtype} "
            f"with shape {tuple(ids.shape)}"
        )
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(
            f"{name} must hold ids in [0, {vocab_size}) (the vocabulary size), "
            f"got values from {int(ids.min())} to {int(ids.max())} in shape {tuple(ids.shape)}"
        )
