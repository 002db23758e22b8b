"""The encoder as built today (ModernBERT, 2024): pre-norm without biases, a gated FFN, rotary
positions on queries and keys, grouped-query attention, and local (sliding-window) layers
between global ones.

What changed from ``encoder.EncoderLayer`` and why, in one line each:

* no biases anywhere (projections, FFN, norms): fewer parameters, no loss in quality;
* pre-norm, with a final norm after the stack: deep stacks train far less sensitive to depth
  and warm-up (Xiong et al., 2020; ModernBERT still warmed up);
* ``GatedFeedForward`` (GeGLU) instead of linear-activation-linear;
* ``RotaryEmbedding`` instead of adding positions to the input: scores see relative positions;
* grouped-query attention: H query heads share H_kv key/value heads (H_kv = H is ordinary
  multi-head attention, H_kv = 1 multi-query attention), a smaller key/value cache. Decoders
  keep that cache while they generate; an encoder has none, so encoders (ModernBERT too) keep
  H_kv = H;
* local layers see only a band of ``window`` neighbours (``masks.sliding_window_mask``); one
  layer in ``global_every`` sees the whole sequence.

Masks are boolean and True = may attend, as everywhere in ``encoder_lib``.
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import check_last_dim, check_mask, check_rank
from .attention import scaled_dot_product_attention
from .gated_feed_forward import GatedFeedForward
from .masks import sliding_window_mask
from .rms_norm import RMSNorm
from .rotary import RotaryEmbedding

__all__ = [
    "grouped_query_attention",
    "ModernSelfAttention",
    "ModernEncoderLayer",
    "ModernEncoder",
]


def grouped_query_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Scaled dot-product attention where H query heads share H_kv key/value heads.

    Query head h reads key/value head h // (H / H_kv): consecutive query heads form a group, as
    in ``F.scaled_dot_product_attention(..., enable_gqa=True)``. Each key/value head is repeated
    H / H_kv times (``repeat_interleave``) and ``scaled_dot_product_attention`` does the rest.

    Args:
        query: ``(B, H, L_q, d_head)``.
        key, value: ``(B, H_kv, L_k, d_head)``; H_kv must divide H.
        mask: optional boolean tensor broadcastable to ``(B, H, L_q, L_k)``; True = may attend.
        dropout_p: dropout on the attention weights (pass 0.0 in eval).
        need_weights: if False, use the fused kernel and return None for the weights.

    Returns:
        ``(output, weights)``: output ``(B, H, L_q, d_head)``; weights ``(B, H, L_q, L_k)`` or
        None. A fully masked row gives zero weights and a zero output.
    """
    check_rank("query", query, "(B, H, L_q, d_head)")
    check_rank("key", key, "(B, H_kv, L_k, d_head)")
    check_rank("value", value, "(B, H_kv, L_k, d_head)")
    B, H, L_q, d_head = query.shape
    H_kv, L_k = key.shape[1], key.shape[2]
    if key.shape[0] != B or value.shape[:3] != key.shape[:3]:
        raise ValueError(
            "key and value must have shape (B, H_kv, L_k, d_head) with the batch size of query, "
            f"got query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    check_last_dim("key", key, d_head, "d_head")
    if H % H_kv != 0:
        raise ValueError(
            f"the query heads (H = {H}) must be a multiple of the key/value heads "
            f"(H_kv = {H_kv}), so that each key/value head serves a whole group; got query "
            f"{tuple(query.shape)}, key {tuple(key.shape)}"
        )
    check_mask(mask, (B, H, L_q, L_k), "(B, H, L_q, L_k)")
    key = key.repeat_interleave(H // H_kv, dim=1)  # (B, H, L_k, d_head)
    value = value.repeat_interleave(H // H_kv, dim=1)  # (B, H, L_k, d_head)
    return scaled_dot_product_attention(query, key, value, mask, dropout_p, need_weights)


class ModernSelfAttention(nn.Module):
    r"""Self-attention with rotary positions, grouped-query heads, no biases, and an optional
    sliding window.

    The projections are separate, because with grouped-query attention the key and value
    projections are narrower than the query's: ``q_proj`` ``(D, D)``, ``k_proj`` and ``v_proj``
    ``(H_kv d_head, D)``, ``out_proj`` ``(D, D)`` (Llama's names, with ``nn.MultiheadAttention``'s
    ``out_proj``). ModernBERT, where H_kv = H, fuses the first three into one ``Wqkv``.

    Args:
        d_model: D.
        num_heads: H; must divide D, and d_head = D / H must be even (rotary pairs).
        num_kv_heads: H_kv, the key/value heads; must divide H. None means H.
        window: None for global attention; an even number for local attention, each query
            seeing ``window / 2`` keys on either side (see ``masks.sliding_window_mask``).
        dropout: dropout on the attention weights (training mode only).
        pairing: the rotary layout, ``"halves"`` or ``"adjacent"`` (see ``encoder_lib.rotary``).
        rope_base: the rotary base, theta_i = rope_base^(-2i / d_head).

    Shape:
        x ``(B, L, D)``; mask boolean, True = may attend, broadcastable to ``(B, H, L, L)``
        (``padding_mask`` gives ``(B, 1, 1, L)``), combined by AND with the window; output
        ``(B, L, D)``, weights ``(B, H, L, L)`` or None.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        window: int | None = None,
        dropout: float = 0.0,
        pairing: str = "halves",
        rope_base: float = 10000.0,
    ):
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(
                f"d_model (D = {d_model}) must be divisible by num_heads (H = {num_heads}) "
                "so that every head gets d_head = D / H features"
            )
        if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads (H = {num_heads}) must be a multiple of num_kv_heads "
                f"(H_kv = {num_kv_heads}), so that each key/value head serves a whole group"
            )
        if window is not None:
            sliding_window_mask(1, window)  # raises ValueError now for a bad window
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = d_model // num_heads
        self.window = window
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.rotary = RotaryEmbedding(self.head_dim, rope_base, pairing)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(output, weights or None)`` of ``x`` attending to itself; positions are the indices
        0 .. L - 1 along dimension 1."""
        check_rank("x", x, "(B, L, D)")
        check_last_dim("x", x, self.d_model)
        B, L, D = x.shape
        H, H_kv, d_head = self.num_heads, self.num_kv_heads, self.head_dim
        check_mask(mask, (B, H, L, L), "(B, H, L, L)")
        if self.window is not None:
            local = sliding_window_mask(L, self.window, device=x.device)  # (L, L)
            mask = local if mask is None else mask & local  # both True = may attend

        q = self.q_proj(x).view(B, L, H, d_head).transpose(1, 2)  # (B, H, L, d_head)
        k = self.k_proj(x).view(B, L, H_kv, d_head).transpose(1, 2)  # (B, H_kv, L, d_head)
        v = self.v_proj(x).view(B, L, H_kv, d_head).transpose(1, 2)  # (B, H_kv, L, d_head)
        q, k = self.rotary(q, k)  # positions rotate queries and keys, never values

        dropout_p = self.dropout if self.training else 0.0
        out, weights = grouped_query_attention(q, k, v, mask, dropout_p, need_weights)
        out = out.transpose(1, 2).reshape(B, L, D)  # (B, L, H * d_head) = (B, L, D)
        return self.out_proj(out), weights

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, window={self.window}"


def _make_norm(kind: str, d_model: int, eps: float) -> nn.Module:
    """``"layer"``: PyTorch's ``nn.LayerNorm(bias=False)`` (``encoder_lib.LayerNorm`` always has
    an offset), as ModernBERT; ``"rms"``: ``encoder_lib.RMSNorm``. Both name their gain
    ``weight``."""
    if kind == "layer":
        return nn.LayerNorm(d_model, eps=eps, bias=False)
    if kind == "rms":
        return RMSNorm(d_model, eps)
    raise ValueError(f"norm must be one of ['layer', 'rms'], got {kind!r}")


class ModernEncoderLayer(nn.Module):
    r"""One pre-norm encoder layer without biases, as ModernBERT's::

        x = x + dropout1(self_attn(norm1(x)))   # rotary, grouped-query, maybe local
        x = x + dropout2(ffn(norm2(x)))         # gated: GeGLU or SwiGLU

    Args:
        d_model: D.
        num_heads: H; d_head = D / H must be even.
        d_ff: hidden width of the gated FFN; None means round(8D / 3) (``gated_d_ff``).
        num_kv_heads: H_kv for grouped-query attention; None means H.
        window: None for a global layer, an even number for a local one.
        activation: ``"gelu"`` (GeGLU, ModernBERT's) or ``"silu"`` (SwiGLU, Llama's).
        dropout: on the attention weights, the FFN's hidden units and both sub-layer outputs.
        eps: eps of both norms.
        norm: ``"layer"`` (LayerNorm without offset, ModernBERT's) or ``"rms"`` (RMSNorm).
        pairing: rotary layout, ``"halves"`` or ``"adjacent"``.
        rope_base: rotary base.

    Shape:
        x ``(B, L, D)``; mask boolean, True = may attend, broadcastable to ``(B, H, L, L)``
        (``(B, 1, 1, L)`` for padding, ``(B, 1, L, L)`` per example); output ``(B, L, D)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int | None = None,
        num_kv_heads: int | None = None,
        window: int | None = None,
        activation: str = "gelu",
        dropout: float = 0.0,
        eps: float = 1e-5,
        norm: str = "layer",
        *,
        pairing: str = "halves",
        rope_base: float = 10000.0,
    ):
        super().__init__()
        self.norm1 = _make_norm(norm, d_model, eps)
        self.self_attn = ModernSelfAttention(
            d_model, num_heads, num_kv_heads, window, dropout, pairing, rope_base
        )
        self.dropout1 = nn.Dropout(dropout)
        self.norm2 = _make_norm(norm, d_model, eps)
        self.ffn = GatedFeedForward(d_model, d_ff, activation, dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The layer's output ``(B, L, D)`` for ``x`` ``(B, L, D)``; see the class docstring."""
        check_rank("x", x, "(B, L, D)")
        check_last_dim("x", x, self.self_attn.d_model)  # before the norm, for a clear message
        attended, _ = self.self_attn(self.norm1(x), mask, need_weights=False)
        x = x + self.dropout1(attended)
        return x + self.dropout2(self.ffn(self.norm2(x)))


class ModernEncoder(nn.Module):
    r"""A stack of ``ModernEncoderLayer`` alternating global and local attention, then a norm.

    Layer i is global when ``i % global_every == 0`` and local (a sliding ``window``) otherwise,
    as ModernBERT's ``global_attn_every_n_layers``: with the defaults, layers 0, 3, 6, ... are
    global; the first layer is always global. The final norm is needed because pre-norm layers
    add to the residual stream without normalising it. Each layer has its own weights.

    Unlike ModernBERT, one ``rope_base`` serves all layers (ModernBERT: 160000 global, 10000
    local), and the first layer keeps its ``norm1`` (ModernBERT drops it, its embeddings being
    normalised already).

    Args:
        d_model: D.
        num_heads: H.
        num_layers: N.
        global_every: one layer in this many is global (1: all global).
        window: the local layers' window (even; 128 in ModernBERT).
        d_ff, num_kv_heads, activation, dropout, eps, norm, pairing, rope_base: as in
            ``ModernEncoderLayer``, for every layer; ``eps`` and ``norm`` for the final norm too.

    Shape:
        x ``(B, L, D)``; mask boolean, True = may attend, broadcastable to ``(B, H, L, L)``;
        output ``(B, L, D)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_layers: int,
        global_every: int = 3,
        window: int = 128,
        d_ff: int | None = None,
        num_kv_heads: int | None = None,
        activation: str = "gelu",
        dropout: float = 0.0,
        eps: float = 1e-5,
        norm: str = "layer",
        *,
        pairing: str = "halves",
        rope_base: float = 10000.0,
    ):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        if global_every < 1:
            raise ValueError(f"global_every must be at least 1, got {global_every}")
        self.global_every = global_every
        self.layers = nn.ModuleList(
            ModernEncoderLayer(
                d_model,
                num_heads,
                d_ff,
                num_kv_heads,
                None if i % global_every == 0 else window,  # global: no window
                activation,
                dropout,
                eps,
                norm,
                pairing=pairing,
                rope_base=rope_base,
            )
            for i in range(num_layers)
        )
        self.norm = _make_norm(norm, d_model, eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The final norm of the last layer's output, ``(B, L, D)``; every layer gets ``mask``
        (the local ones AND it with their window)."""
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)
