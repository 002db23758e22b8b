"""Scaled dot-product attention and multi-head attention.

Conventions (the same in every file of ``encoder_lib``):

* Tensors are batch-first. Letters: B batch, L sequence length (L_q queries, L_k keys),
  D model width, H heads, d_head = D / H.
* A mask is boolean and **True means "may attend"**. This is the convention of
  ``F.scaled_dot_product_attention``'s boolean ``attn_mask``; it is the *opposite* of
  ``nn.MultiheadAttention``'s ``key_padding_mask`` and boolean ``attn_mask``, where True means
  "ignore". Convert with ``~``.
* A query row whose keys are all masked gets zero weights and a zero output (no NaN) on every
  PyTorch ``encoder_lib`` accepts, because it zeroes such rows itself;
  ``F.scaled_dot_product_attention`` alone returns zeros there only since PyTorch 2.5 (NaN
  before).
* Attention always returns a pair ``(output, weights)``; ``weights`` is None when not asked for.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_last_dim, check_mask, check_rank

__all__ = ["scaled_dot_product_attention", "MultiHeadAttention"]


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""softmax(Q K^T / sqrt(d_k) + M) V, over any number of leading batch dimensions.

    Args:
        query, key, value: tensors of shape ``(..., L_q, d_k)``, ``(..., L_k, d_k)`` and
            ``(..., L_k, d_v)``.
        mask: optional boolean tensor broadcastable to ``(..., L_q, L_k)``; True = may attend.
            Masked scores become -inf before the softmax, so they get exactly zero weight.
        dropout_p: dropout probability applied to the attention weights (pass 0.0 in eval).
        need_weights: if False, use the fused kernel ``F.scaled_dot_product_attention`` and
            return ``None`` for the weights; the output is the same to rounding error.

    Returns:
        ``(output, weights)``: output ``(..., L_q, d_v)``; weights ``(..., L_q, L_k)``, the
        weights actually used, or None. Without dropout each row sums to 1; with dropout they
        are the dropped-out weights, whose rows sum to 1 only on average (kept entries are
        divided by 1 - dropout_p). A fully masked row gives zero weights and a zero output.
    """
    if query.dim() < 2 or key.dim() != query.dim() or value.dim() != query.dim():
        raise ValueError(
            "query, key and value must have the same rank >= 2, shapes (..., L_q, d_k), "
            f"(..., L_k, d_k), (..., L_k, d_v); got {tuple(query.shape)}, {tuple(key.shape)}, "
            f"{tuple(value.shape)}"
        )
    check_last_dim("key", key, query.shape[-1], "d_k")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length L_k, got shapes {tuple(key.shape)} "
            f"and {tuple(value.shape)}"
        )
    *batch, L_q, d_k = query.shape
    L_k = key.shape[-2]
    check_mask(mask, (*batch, L_q, L_k), "(..., L_q, L_k)")
    dead = None if mask is None else ~mask.any(dim=-1, keepdim=True)  # (..., L_q, 1)

    if not need_weights:
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout_p)
        if dead is not None and dead.any():
            out = out.masked_fill(dead, 0.0)
        return out, None

    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., L_q, L_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if dead is not None:
        weights = weights.masked_fill(dead, 0.0)  # softmax of an all -inf row is NaN
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ value, weights


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention with the parameter names of ``nn.MultiheadAttention``.

    The query, key and value projections are one fused matrix ``in_proj_weight`` of shape
    ``(3D, D)`` (rows ``[0, D)`` for Q, ``[D, 2D)`` for K, ``[2D, 3D)`` for V), so
    ``load_state_dict`` works both ways with PyTorch's module. Each projection is split into
    H heads of width d_head = D / H along the embedding, attended separately, merged back, and
    passed through ``out_proj``.

    Args:
        embed_dim: D.
        num_heads: H; must divide D.
        dropout: dropout on the attention weights (training mode only).
        bias: whether the projections have biases.

    Shape:
        - query ``(B, L_q, D)``, key and value ``(B, L_k, D)``; self-attention passes x three times.
        - mask: boolean, True = may attend, broadcastable to ``(B, H, L_q, L_k)``: ``(L_q, L_k)``
          for a causal mask, ``(B, 1, 1, L_k)`` for padding (see ``encoder_lib.masks``).
        - output ``(B, L_q, D)``; weights per head ``(B, H, L_q, L_k)`` or None.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        """Build the fused projection ``in_proj_weight`` ``(3D, D)`` and ``out_proj``,
        initialised as PyTorch does; the arguments are described in the class docstring."""
        super().__init__()
        if num_heads < 1 or embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim (D = {embed_dim}) must be divisible by num_heads (H = {num_heads}) "
                "so that every head gets d_head = D / H features"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim)) if bias else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The initialisation PyTorch uses: Xavier-uniform projections, zero biases."""
        nn.init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from each query position to the key positions, H heads at a time.

        Args:
            query: ``(B, L_q, D)``.
            key, value: ``(B, L_k, D)``; self-attention passes the same ``x`` three times.
            mask: boolean, True = may attend, broadcastable to ``(B, H, L_q, L_k)``.
            need_weights: return each head's weights; False takes the fused kernel
                (``F.scaled_dot_product_attention``) and returns None instead.

        Returns:
            ``(output, weights)``: output ``(B, L_q, D)``; weights ``(B, H, L_q, L_k)`` or None.
        """
        for name, t in (("query", query), ("key", key), ("value", value)):
            check_rank(name, t, "(B, L, D)")
            check_last_dim(name, t, self.embed_dim)
        B, L_q, D = query.shape
        L_k = key.shape[1]
        if key.shape[:2] != value.shape[:2] or key.shape[0] != B:
            raise ValueError(
                "key and value must have shape (B, L_k, D) with the batch size of query, got "
                f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
            )
        H, d_head = self.num_heads, self.head_dim
        check_mask(mask, (B, H, L_q, L_k), "(B, H, L_q, L_k)")

        w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        b_q, b_k, b_v = (None,) * 3 if self.in_proj_bias is None else self.in_proj_bias.chunk(3)
        q = F.linear(query, w_q, b_q).view(B, L_q, H, d_head).transpose(1, 2)  # (B, H, L_q, d_head)
        k = F.linear(key, w_k, b_k).view(B, L_k, H, d_head).transpose(1, 2)  # (B, H, L_k, d_head)
        v = F.linear(value, w_v, b_v).view(B, L_k, H, d_head).transpose(1, 2)  # (B, H, L_k, d_head)

        dropout_p = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p, need_weights)
        out = out.transpose(1, 2).reshape(B, L_q, D)  # (B, L_q, H * d_head) = (B, L_q, D)
        return self.out_proj(out), weights

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """An equivalent ``MultiHeadAttention`` holding a copy of ``module``'s weights.

        PyTorch's module is sequence-first unless built with ``batch_first=True``; ours is always
        batch-first. Its boolean masks mean "ignore" where ours mean "may attend".
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"expected nn.MultiheadAttention, got {type(module).__name__}")
        if not module._qkv_same_embed_dim or module.bias_k is not None or module.add_zero_attn:
            raise ValueError(
                "only nn.MultiheadAttention with kdim = vdim = embed_dim, add_bias_kv=False and "
                "add_zero_attn=False has an equivalent MultiHeadAttention"
            )
        ours = cls(
            module.embed_dim, module.num_heads, module.dropout, module.in_proj_bias is not None
        )
        # Convert before loading: load_state_dict copies into the existing (default-dtype)
        # parameters, which would round float64 weights to float32.
        ours = ours.to(module.in_proj_weight).train(module.training)
        ours.load_state_dict(module.state_dict())
        return ours

    def to_torch(self) -> nn.MultiheadAttention:
        """The equivalent ``nn.MultiheadAttention(batch_first=True)`` with a copy of our weights."""
        theirs = nn.MultiheadAttention(
            self.embed_dim,
            self.num_heads,
            self.dropout,
            bias=self.in_proj_bias is not None,
            batch_first=True,
        ).to(self.in_proj_weight)
        theirs.load_state_dict(self.state_dict())
        return theirs.train(self.training)
