"""The encoder layer (attention and FFN sub-layers, each wrapped in residual + LayerNorm) and a
stack of N such layers. Parameter names match ``nn.TransformerEncoderLayer`` and
``nn.TransformerEncoder``, so ``load_state_dict`` works both ways."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_rank
from .attention import MultiHeadAttention
from .feed_forward import get_activation
from .layer_norm import LayerNorm

__all__ = ["EncoderLayer", "TransformerEncoder"]


class EncoderLayer(nn.Module):
    r"""One encoder layer.

    Post-norm (the original paper, ``norm_first=False``)::

        x = norm1(x + dropout1(self_attn(x)))
        x = norm2(x + dropout2(ffn(x)))

    Pre-norm (``norm_first=True``, easier to train deep)::

        x = x + dropout1(self_attn(norm1(x)))
        x = x + dropout2(ffn(norm2(x)))

    where ffn(x) = linear2(dropout(activation(linear1(x)))), as in ``encoder_lib.FeedForward``.

    Args:
        d_model: D.
        num_heads: H.
        d_ff: hidden width of the FFN.
        dropout: dropout on attention weights, FFN hidden units and both sub-layer outputs.
        activation: ``"relu"`` or ``"gelu"``.
        norm_first: pre-norm if True, post-norm if False.
        layer_norm_eps: eps of both LayerNorms.

    Shape:
        x ``(B, L, D)``; mask boolean, True = may attend, broadcastable to ``(B, H, L, L)``
        (``padding_mask`` gives ``(B, 1, 1, L)``); output ``(B, L, D)``.
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
        """Build the sub-layers under ``nn.TransformerEncoderLayer``'s names (``self_attn``,
        ``linear1``, ``linear2``, ``norm1``, ``norm2``, ``dropout``, ``dropout1``,
        ``dropout2``); the arguments are described in the class docstring."""
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = LayerNorm(d_model, layer_norm_eps)
        self.norm2 = LayerNorm(d_model, layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation_name = activation
        self.activation = get_activation(activation)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Self-attention, then the FFN, each with its residual connection and LayerNorm.

        Args:
            x: ``(B, L, D)``.
            mask: boolean, True = may attend, broadcastable to ``(B, H, L, L)``
                (``padding_mask`` gives ``(B, 1, 1, L)``).

        Returns:
            ``(B, L, D)``.
        """
        check_rank("x", x, "(B, L, D)")
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), mask)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, mask))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        out, _ = self.self_attn(x, x, x, mask, need_weights=False)
        return self.dropout1(out)

    def _ff_block(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    @classmethod
    def from_torch(cls, module: nn.TransformerEncoderLayer) -> EncoderLayer:
        """An equivalent ``EncoderLayer`` holding a copy of ``module``'s weights. Ours is always
        batch-first, whatever ``module.batch_first`` says."""
        if not isinstance(module, nn.TransformerEncoderLayer):
            raise TypeError(f"expected nn.TransformerEncoderLayer, got {type(module).__name__}")
        activation = {F.relu: "relu", F.gelu: "gelu"}.get(module.activation)
        if activation is None:
            raise ValueError(
                f"only relu and gelu activations are supported, got {module.activation}"
            )
        ours = cls(
            module.self_attn.embed_dim,
            module.self_attn.num_heads,
            module.linear1.out_features,
            module.dropout.p,
            activation,
            module.norm_first,
            module.norm1.eps,
        ).to(module.linear1.weight)
        ours.load_state_dict(module.state_dict())  # after .to(): no rounding through float32
        return ours.train(module.training)

    def to_torch(self) -> nn.TransformerEncoderLayer:
        """The equivalent ``nn.TransformerEncoderLayer(batch_first=True)`` with our weights."""
        theirs = nn.TransformerEncoderLayer(
            self.self_attn.embed_dim,
            self.self_attn.num_heads,
            self.linear1.out_features,
            self.dropout.p,
            self.activation_name,
            self.norm1.eps,
            batch_first=True,
            norm_first=self.norm_first,
        ).to(self.linear1.weight)
        theirs.load_state_dict(self.state_dict())  # after .to(): no rounding through float32
        return theirs.train(self.training)


class TransformerEncoder(nn.Module):
    """A stack of ``num_layers`` copies of ``encoder_layer``, then an optional final ``norm``
    (pre-norm stacks need one). Same constructor as ``nn.TransformerEncoder``.

    Shape:
        x ``(B, L, D)``; mask boolean, True = may attend, broadcastable to ``(B, H, L, L)``;
        output ``(B, L, D)``.
    """

    def __init__(self, encoder_layer: EncoderLayer, num_layers: int, norm: LayerNorm | None = None):
        """Stack ``num_layers`` deep copies of ``encoder_layer`` (they start with equal weights,
        as in ``nn.TransformerEncoder``) and keep ``norm`` for the end."""
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        self.layers = nn.ModuleList(copy.deepcopy(encoder_layer) for _ in range(num_layers))
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Run ``x`` ``(B, L, D)`` through every layer with the same ``mask`` (boolean, True =
        may attend), then through ``norm`` if there is one; returns ``(B, L, D)``."""
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.norm is None else self.norm(x)

    @classmethod
    def from_torch(cls, module: nn.TransformerEncoder) -> TransformerEncoder:
        """An equivalent ``TransformerEncoder`` holding a copy of ``module``'s weights."""
        if not isinstance(module, nn.TransformerEncoder):
            raise TypeError(f"expected nn.TransformerEncoder, got {type(module).__name__}")
        norm = None if module.norm is None else LayerNorm.from_torch(module.norm)
        ours = cls(EncoderLayer.from_torch(module.layers[0]), module.num_layers, norm)
        ours = ours.to(module.layers[0].linear1.weight)
        ours.load_state_dict(module.state_dict())  # after .to(): no rounding through float32
        return ours.train(module.training)

    def to_torch(self) -> nn.TransformerEncoder:
        """The equivalent ``nn.TransformerEncoder`` (batch-first, nested tensors off)."""
        norm = None if self.norm is None else self.norm.to_torch()
        theirs = nn.TransformerEncoder(
            self.layers[0].to_torch(), self.num_layers, norm, enable_nested_tensor=False
        ).to(self.layers[0].linear1.weight)
        theirs.load_state_dict(self.state_dict())  # after .to(): no rounding through float32
        return theirs.train(self.training)
