"""The encoder block of notebook 05 again, in JAX with Flax NNX: the reference of notebook 10.

Imported only where JAX is installed (``encoder_lib`` itself never imports it, so the PyTorch
notebooks do not pay for it). The layout copies ``nn.TransformerEncoderLayer`` with
``batch_first=True`` and ``norm_first=False`` (post-norm, ReLU), so that
``encoder_lib.jax_bridge`` can move its weights to and from PyTorch:

    EncoderBlock
      attention:    MultiHeadAttention   query, key, value, out: nnx.Linear (D -> D)
      norm1:        LayerNorm            scale, bias: (D,)
      feed_forward: FeedForward          linear1: nnx.Linear (D -> d_ff), linear2 (d_ff -> D)
      norm2:        LayerNorm

What differs from PyTorch, and where it shows here:

- Randomness is explicit. Every module keeps the ``nnx.Rngs`` it was built with (``self.rngs``)
  and asks it for a new key at every dropout site, on every call: ``self.rngs.dropout()``.
  Nothing in JAX has a hidden global generator.
- Train or eval: here ``deterministic`` is an argument of each call (True: no dropout, as after
  ``.eval()``), the course's choice, so that every call says which mode it runs in. Flax NNX
  also has PyTorch's style: ``model.eval()`` and ``model.train()`` set the ``deterministic``
  attribute of every nested module that has one (``nnx.Dropout``), and
  ``nnx.view(model, deterministic=True)`` returns a view of the model with it set, the model
  itself unchanged; these modules use the course's own ``dropout`` function, which has no such
  attribute, so they take the argument.
- ``nnx.Linear`` stores its kernel as ``(in, out)`` and computes ``x @ kernel + bias``;
  ``nn.Linear`` stores ``weight`` as ``(out, in)`` and computes ``x @ weight.T + bias``.
- Padding masks say True = a real token (may be attended to), as ``nnx.MultiHeadAttention``'s
  masks do; ``nn.TransformerEncoderLayer``'s ``src_key_padding_mask`` says True = padding.
- JAX arrays cannot be changed in place: ``x.at[i].set(v)`` and ``jnp.where`` make new ones.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

__all__ = [
    "TORCH_LAYER_NORM_EPS",
    "dropout",
    "load_linear",
    "LayerNorm",
    "FeedForward",
    "MultiHeadAttention",
    "EncoderBlock",
]

TORCH_LAYER_NORM_EPS = 1e-5
"""``nn.LayerNorm``'s default epsilon; ``nnx.LayerNorm``'s is 1e-6."""


def dropout(x: jax.Array, rate: float, *, deterministic: bool, key: jax.Array) -> jax.Array:
    """Inverted dropout: each element is kept with probability ``1 - rate`` and then divided by
    ``1 - rate``, so that the expected value is unchanged; ``deterministic=True`` (or
    ``rate == 0``) returns ``x`` itself. ``key`` decides which elements are dropped: the same
    key drops the same elements, so every dropout site and every step needs a key of its own."""
    if deterministic or rate == 0.0:
        return x
    if rate >= 1.0:
        return jnp.zeros_like(x)
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)  # True with probability 1 - rate
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def load_linear(layer: nnx.Linear, weight: jax.Array, bias: jax.Array | None) -> None:
    """Copy an ``nn.Linear``'s ``weight`` ``(out, in)`` and ``bias`` ``(out,)`` into ``layer``,
    in place. ``layer.kernel`` is ``(in, out)``: the transpose of ``weight``."""
    layer.kernel[...] = jnp.asarray(weight).T  # (in, out); [...] = checks the shape
    if bias is not None:
        layer.bias[...] = jnp.asarray(bias)


class LayerNorm(nnx.Module):
    """Layer normalisation over the last axis, with PyTorch's default epsilon.

    Args:
        num_features: D, the size of the last axis.
        epsilon: added to the variance inside the square root (``nn.LayerNorm``: 1e-5).

    Shape:
        input ``(..., D)``, output the same shape.
    """

    def __init__(self, num_features: int, *, epsilon: float = TORCH_LAYER_NORM_EPS, rngs=None):
        self.scale = nnx.Param(jnp.ones((num_features,)))  # gamma (PyTorch: weight)
        self.bias = nnx.Param(jnp.zeros((num_features,)))  # beta
        self.epsilon = epsilon

    def __call__(self, x: jax.Array) -> jax.Array:
        mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
        variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # biased, as PyTorch
        return (x - mean) / jnp.sqrt(variance + self.epsilon) * self.scale + self.bias


class FeedForward(nnx.Module):
    """linear2(dropout(relu(linear1(x)))): the position-wise network of
    ``nn.TransformerEncoderLayer`` (whose second dropout, after linear2, belongs to the block).

    Shape:
        input ``(..., D)``, output the same shape.
    """

    def __init__(self, d_model: int, d_ff: int, dropout_rate: float = 0.1, *, rngs: nnx.Rngs):
        self.linear1 = nnx.Linear(d_model, d_ff, rngs=rngs)
        self.linear2 = nnx.Linear(d_ff, d_model, rngs=rngs)
        self.dropout_rate = dropout_rate
        self.rngs = rngs

    def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
        h = jax.nn.relu(self.linear1(x))  # (..., d_ff)
        h = dropout(h, self.dropout_rate, deterministic=deterministic, key=self.rngs.dropout())
        return self.linear2(h)  # (..., D)


class MultiHeadAttention(nnx.Module):
    """Self-attention with ``num_heads`` heads of ``d_head = D / num_heads`` features, dropout
    on the attention weights.

    Args (call):
        x: ``(B, L, D)``.
        padding_mask: None or boolean ``(B, L)``, True = a real token that may be attended to.
        deterministic: True switches dropout off.

    Shape:
        output ``(B, L, D)``.
    """

    def __init__(self, d_model: int, num_heads: int, dropout_rate: float = 0.1, *, rngs: nnx.Rngs):
        if d_model % num_heads:
            raise ValueError(f"d_model = {d_model} is not divisible by num_heads = {num_heads}")
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.query = nnx.Linear(d_model, d_model, rngs=rngs)
        self.key = nnx.Linear(d_model, d_model, rngs=rngs)
        self.value = nnx.Linear(d_model, d_model, rngs=rngs)
        self.out = nnx.Linear(d_model, d_model, rngs=rngs)
        self.dropout_rate = dropout_rate
        self.rngs = rngs

    def __call__(
        self, x: jax.Array, *, padding_mask: jax.Array | None = None, deterministic: bool
    ) -> jax.Array:
        B, L, D = x.shape

        def heads(t: jax.Array) -> jax.Array:  # (B, L, D) -> (B, H, L, d_head)
            return t.reshape(B, L, self.num_heads, self.d_head).transpose(0, 2, 1, 3)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        scores = q @ k.swapaxes(-1, -2) / jnp.sqrt(self.d_head)  # (B, H, L_q, L_k)
        if padding_mask is not None:
            scores = jnp.where(padding_mask[:, None, None, :], scores, -jnp.inf)
        weights = jax.nn.softmax(scores, axis=-1)  # each query's weights over the keys sum to 1
        weights = dropout(
            weights, self.dropout_rate, deterministic=deterministic, key=self.rngs.dropout()
        )
        context = (weights @ v).transpose(0, 2, 1, 3).reshape(B, L, D)  # heads side by side
        return self.out(context)


class EncoderBlock(nnx.Module):
    """A post-norm encoder block, ``nn.TransformerEncoderLayer(d_model, num_heads, d_ff,
    dropout_rate, batch_first=True)``:

        x = norm1(x + dropout(attention(x)))
        x = norm2(x + dropout(feed_forward(x)))

    Args (call):
        x: ``(B, L, D)``.
        padding_mask: None or boolean ``(B, L)``, True = a real token.
        deterministic: True switches every dropout off (PyTorch: ``.eval()``).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout_rate: float = 0.1,
        *,
        rngs: nnx.Rngs,
    ):
        self.attention = MultiHeadAttention(d_model, num_heads, dropout_rate, rngs=rngs)
        self.norm1 = LayerNorm(d_model, rngs=rngs)
        self.feed_forward = FeedForward(d_model, d_ff, dropout_rate, rngs=rngs)
        self.norm2 = LayerNorm(d_model, rngs=rngs)
        self.dropout_rate = dropout_rate
        self.rngs = rngs

    def __call__(
        self, x: jax.Array, *, padding_mask: jax.Array | None = None, deterministic: bool
    ) -> jax.Array:
        a = self.attention(x, padding_mask=padding_mask, deterministic=deterministic)
        a = dropout(a, self.dropout_rate, deterministic=deterministic, key=self.rngs.dropout())
        x = self.norm1(x + a)
        f = self.feed_forward(x, deterministic=deterministic)
        f = dropout(f, self.dropout_rate, deterministic=deterministic, key=self.rngs.dropout())
        return self.norm2(x + f)
