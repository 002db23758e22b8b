"""The decoder layer (masked self-attention, cross-attention to the encoder's output, FFN; each
wrapped in residual + LayerNorm) and a stack of N such layers. Parameter names match
``nn.TransformerDecoderLayer`` and ``nn.TransformerDecoder``, so ``load_state_dict`` works both
ways.

Two sequences meet here: the target ``x`` of shape ``(B, L_tgt, D)``, which the decoder reads,
and the encoder's output ``memory`` of shape ``(B, L_src, D)``, which it consults. Both masks
are boolean with **True = may attend** (the opposite of PyTorch's boolean ``tgt_mask`` and
``*_key_padding_mask``, where True = ignore):

* ``tgt_mask``, broadcastable to ``(B, H, L_tgt, L_tgt)``: ``causal_mask(L_tgt)`` so that
  position i sees only positions 0..i, optionally ``& padding_mask(tgt_ids, pad_id)``;
* ``memory_mask``, broadcastable to ``(B, H, L_tgt, L_src)``: ``padding_mask(src_ids, pad_id)``,
  the encoder's own padding mask, so that no query looks at source padding.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ._checks import check_last_dim, check_mask, check_rank
from ._transplant import copy_weights
from .attention import MultiHeadAttention
from .feed_forward import get_activation
from .layer_norm import LayerNorm

__all__ = ["DecoderLayer", "TransformerDecoder"]


class DecoderLayer(nn.Module):
    r"""One decoder layer: three sub-layers, each with a residual connection and a LayerNorm.

    Post-norm (the original paper, ``norm_first=False``)::

        x = norm1(x + dropout1(self_attn(x, x, x, tgt_mask)))                  # masked
        x = norm2(x + dropout2(multihead_attn(x, memory, memory, memory_mask)))  # cross
        x = norm3(x + dropout3(ffn(x)))

    Pre-norm (``norm_first=True``)::

        x = x + dropout1(self_attn(norm1(x), norm1(x), norm1(x), tgt_mask))
        x = x + dropout2(multihead_attn(norm2(x), memory, memory, memory_mask))
        x = x + dropout3(ffn(norm3(x)))

    where ffn(x) = linear2(dropout(activation(linear1(x)))), as in ``encoder_lib.FeedForward``.
    In the cross-attention the queries come from the decoder and the keys and values from the
    encoder's output; ``memory`` itself is never normalised here.

    Args:
        d_model: D.
        num_heads: H.
        d_ff: hidden width of the FFN.
        dropout: dropout on both attentions' weights, FFN hidden units and all sub-layer outputs.
        activation: ``"relu"`` or ``"gelu"``.
        norm_first: pre-norm if True, post-norm if False.
        layer_norm_eps: eps of the three LayerNorms.

    Shape:
        - x ``(B, L_tgt, D)``; memory ``(B, L_src, D)``; output ``(B, L_tgt, D)``.
        - tgt_mask: boolean, True = may attend, broadcastable to ``(B, H, L_tgt, L_tgt)``
          (``causal_mask(L_tgt)`` gives ``(L_tgt, L_tgt)``). Without it, position i sees the
          tokens after it.
        - memory_mask: boolean, True = may attend, broadcastable to ``(B, H, L_tgt, L_src)``
          (``padding_mask(src_ids, pad_id)`` gives ``(B, 1, 1, L_src)``).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
    ):
        """Build the sub-layers under ``nn.TransformerDecoderLayer``'s names (``self_attn``,
        ``multihead_attn``, ``linear1``, ``linear2``, ``norm1`` to ``norm3``, ``dropout``,
        ``dropout1`` to ``dropout3``); the arguments are described in the class docstring."""
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.multihead_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = LayerNorm(d_model, layer_norm_eps)
        self.norm2 = LayerNorm(d_model, layer_norm_eps)
        self.norm3 = LayerNorm(d_model, layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.activation_name = activation
        self.activation = get_activation(activation)
        self.norm_first = norm_first

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Masked self-attention, cross-attention to ``memory``, then the FFN, each with its
        residual connection and LayerNorm.

        Args:
            x: the target, ``(B, L_tgt, D)``.
            memory: the encoder's output, ``(B, L_src, D)``.
            tgt_mask: boolean, True = may attend, broadcastable to ``(B, H, L_tgt, L_tgt)``;
                ``causal_mask(L_tgt)`` keeps each position from seeing the ones after it.
            memory_mask: boolean, True = may attend, broadcastable to ``(B, H, L_tgt, L_src)``;
                ``padding_mask(src_ids, pad_id)`` hides the source padding.

        Returns:
            ``(B, L_tgt, D)``.
        """
        self._check_inputs(x, memory, tgt_mask, memory_mask)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask))
            x = self.norm3(x + self._ff_block(x))
        return x  # (B, L_tgt, D)

    def cross_attention_weights(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The cross-attention weights ``(B, H, L_tgt, L_src)`` this layer uses on these inputs:
        row i says how much target position i takes from each source position. Same arguments
        and mask polarity (True = may attend) as ``forward``; use it in eval mode (in training
        mode the weights are the dropped-out ones)."""
        self._check_inputs(x, memory, tgt_mask, memory_mask)
        if self.norm_first:
            x = self.norm2(x + self._sa_block(self.norm1(x), tgt_mask))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask))
        _, weights = self.multihead_attn(x, memory, memory, memory_mask, need_weights=True)
        return weights  # (B, H, L_tgt, L_src)

    def _sa_block(self, x: torch.Tensor, tgt_mask: torch.Tensor | None) -> torch.Tensor:
        out, _ = self.self_attn(x, x, x, tgt_mask, need_weights=False)  # (B, L_tgt, D)
        return self.dropout1(out)

    def _mha_block(
        self, x: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None
    ) -> torch.Tensor:
        # queries from the decoder, keys and values from the encoder
        out, _ = self.multihead_attn(x, memory, memory, memory_mask, need_weights=False)
        return self.dropout2(out)  # (B, L_tgt, D)

    def _ff_block(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def _check_inputs(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None,
        memory_mask: torch.Tensor | None,
    ) -> None:
        check_rank("x", x, "(B, L_tgt, D)")
        check_rank("memory", memory, "(B, L_src, D)")
        D = self.self_attn.embed_dim
        check_last_dim("x", x, D)
        check_last_dim("memory", memory, D)
        (B, L_tgt, _), L_src = x.shape, memory.shape[1]
        if memory.shape[0] != B:
            raise ValueError(
                f"memory must have shape (B, L_src, D) with the batch size B = {B} of x, got "
                f"x {tuple(x.shape)} and memory {tuple(memory.shape)}"
            )
        H = self.self_attn.num_heads
        for name, mask, target, layout in (
            ("tgt_mask", tgt_mask, (B, H, L_tgt, L_tgt), "(B, H, L_tgt, L_tgt)"),
            ("memory_mask", memory_mask, (B, H, L_tgt, L_src), "(B, H, L_tgt, L_src)"),
        ):
            try:
                check_mask(mask, target, layout)
            except ValueError as error:  # say which of the two masks it was
                raise ValueError(f"{name}: {error}") from None

    @classmethod
    def from_torch(cls, module: nn.TransformerDecoderLayer) -> DecoderLayer:
        """An equivalent ``DecoderLayer`` holding a copy of ``module``'s weights. Ours is always
        batch-first, whatever ``module.self_attn.batch_first`` says."""
        if not isinstance(module, nn.TransformerDecoderLayer):
            raise TypeError(f"expected nn.TransformerDecoderLayer, got {type(module).__name__}")
        names = [name for name in ("relu", "gelu") if get_activation(name) is module.activation]
        if not names:
            raise ValueError(
                f"only relu and gelu activations are supported, got {module.activation}"
            )
        ours = cls(
            module.self_attn.embed_dim,
            module.self_attn.num_heads,
            module.linear1.out_features,
            module.dropout.p,
            names[0],
            module.norm_first,
            module.norm1.eps,
        )
        return copy_weights(ours, module)

    def to_torch(self) -> nn.TransformerDecoderLayer:
        """The equivalent ``nn.TransformerDecoderLayer(batch_first=True)`` with our weights.
        Its boolean masks mean "ignore": pass ``~tgt_mask`` and ``~memory_mask`` (or
        ``memory_key_padding_mask=~memory_mask[:, 0, 0, :]`` for a padding mask)."""
        theirs = nn.TransformerDecoderLayer(
            self.self_attn.embed_dim,
            self.self_attn.num_heads,
            self.linear1.out_features,
            self.dropout.p,
            self.activation_name,
            self.norm1.eps,
            batch_first=True,
            norm_first=self.norm_first,
        )
        return copy_weights(theirs, self)


class TransformerDecoder(nn.Module):
    """A stack of ``num_layers`` copies of ``decoder_layer``, then an optional final ``norm``
    (pre-norm stacks need one). Same constructor as ``nn.TransformerDecoder``. Every layer
    attends to the same ``memory`` (the encoder's last output) with the same masks.

    Shape:
        x ``(B, L_tgt, D)``; memory ``(B, L_src, D)``; output ``(B, L_tgt, D)``. Masks boolean,
        True = may attend: tgt_mask broadcastable to ``(B, H, L_tgt, L_tgt)`` (causal),
        memory_mask to ``(B, H, L_tgt, L_src)`` (source padding); see ``DecoderLayer``.
    """

    def __init__(self, decoder_layer: DecoderLayer, num_layers: int, norm: LayerNorm | None = None):
        """Stack ``num_layers`` deep copies of ``decoder_layer`` (they start with equal weights,
        as in ``nn.TransformerDecoder``) and keep ``norm`` for the end."""
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        self.layers = nn.ModuleList(copy.deepcopy(decoder_layer) for _ in range(num_layers))
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run ``x`` ``(B, L_tgt, D)`` through every layer, each attending to the same
        ``memory`` ``(B, L_src, D)`` with the same masks (see ``DecoderLayer.forward``), then
        through ``norm`` if there is one; returns ``(B, L_tgt, D)``."""
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return x if self.norm is None else self.norm(x)

    @classmethod
    def from_torch(cls, module: nn.TransformerDecoder) -> TransformerDecoder:
        """An equivalent ``TransformerDecoder`` holding a copy of ``module``'s weights."""
        if not isinstance(module, nn.TransformerDecoder):
            raise TypeError(f"expected nn.TransformerDecoder, got {type(module).__name__}")
        norm = None if module.norm is None else LayerNorm.from_torch(module.norm)
        ours = cls(DecoderLayer.from_torch(module.layers[0]), module.num_layers, norm)
        return copy_weights(ours, module)  # every layer's own weights, not only the first's

    def to_torch(self) -> nn.TransformerDecoder:
        """The equivalent ``nn.TransformerDecoder`` (batch-first)."""
        norm = None if self.norm is None else self.norm.to_torch()
        theirs = nn.TransformerDecoder(self.layers[0].to_torch(), self.num_layers, norm)
        return copy_weights(theirs, self)  # every layer's own weights, not only the first's
