"""Answers to notebook 10 (the encoder in JAX) as students write them: ``BUGGY`` ones, each with
the test cells it must fail and the words that name its mistake, and ``CORRECT`` ones written
differently from the solution.

The block's given ``__init__`` builds it from the student's ``LayerNorm``, ``MultiHeadAttention``
and ``FeedForward``, so a wrong part costs the block's points too, and the block's message says
where the mistake lives. The modules' checks replace the notebook's ``dropout`` by a recording
reference while they run, so a wrong ``dropout`` costs exercise 1 only.
"""

from __future__ import annotations

from variants import Variant

DROP, LIN, LN, FF, MHA, BLOCK = (
    "jax_dropout",
    "jax_load_linear",
    "jax_layer_norm",
    "jax_feed_forward",
    "jax_attention",
    "jax_encoder_block",
)
T_DROP, T_LIN, T_LN, T_FF, T_MHA, T_BLOCK = (
    f"test_{name}" for name in (DROP, LIN, LN, FF, MHA, BLOCK)
)


def _dropout(body: str) -> str:
    return f"def dropout(x, rate, *, deterministic, key):\n{body}"


_GUARDS = (
    "    if deterministic or rate == 0.0:\n"
    "        return x\n"
    "    if rate >= 1.0:\n"
    "        return jnp.zeros_like(x)\n"
)


def _linear(body: str) -> str:
    return f"def load_linear(layer, weight, bias):\n{body}"


def _layer_norm(init: str, call: str) -> str:
    return (
        "class LayerNorm(nnx.Module):\n"
        "    def __init__(self, num_features, *, epsilon=None, rngs=None):\n"
        f"{init}\n"
        "    def __call__(self, x):\n"
        f"{call}"
    )


_LN_INIT = (
    "        self.scale = nnx.Param(jnp.ones((num_features,)))\n"
    "        self.bias = nnx.Param(jnp.zeros((num_features,)))\n"
    "        self.epsilon = 1e-5 if epsilon is None else epsilon\n"
)
_LN_CALL = (
    "        mean = x.mean(axis=-1, keepdims=True)\n"
    "        variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)\n"
)

_FF_INIT = '''class FeedForward(nnx.Module):
    """linear2(dropout(relu(linear1(x)))), as in nn.TransformerEncoderLayer. x (..., D)."""

    def __init__(self, d_model, d_ff, dropout_rate=0.1, *, rngs):
        self.linear1 = nnx.Linear(d_model, d_ff, rngs=rngs)
        self.linear2 = nnx.Linear(d_ff, d_model, rngs=rngs)
        self.dropout_rate = dropout_rate
        self.rngs = rngs  # self.rngs.dropout() gives a new key at every call

    def __call__(self, x, *, deterministic):
'''


def _ff(body: str) -> str:
    return _FF_INIT + body


_MHA_INIT = '''class MultiHeadAttention(nnx.Module):
    """Self-attention with num_heads heads. x (B, L, D); padding_mask None or (B, L) boolean,
    True = a real token. Output (B, L, D)."""

    def __init__(self, d_model, num_heads, dropout_rate=0.1, *, rngs):
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.query = nnx.Linear(d_model, d_model, rngs=rngs)
        self.key = nnx.Linear(d_model, d_model, rngs=rngs)
        self.value = nnx.Linear(d_model, d_model, rngs=rngs)
        self.out = nnx.Linear(d_model, d_model, rngs=rngs)
        self.dropout_rate = dropout_rate  # on the attention weights
        self.rngs = rngs

    def __call__(self, x, *, padding_mask=None, deterministic):
'''

_HEADS = (
    "        B, L, D = x.shape\n"
    "        q, k, v = (\n"
    "            f(x).reshape(B, L, self.num_heads, self.d_head).transpose(0, 2, 1, 3)\n"
    "            for f in (self.query, self.key, self.value)\n"
    "        )\n"
)
_KEY = "key=self.rngs.dropout()"


def _mha(
    scores: str = "        scores = q @ k.swapaxes(-1, -2) / jnp.sqrt(self.d_head)\n",
    mask: str = "            scores = jnp.where(padding_mask[:, None, None, :], scores, -jnp.inf)\n",  # noqa: E501
    softmax: str = "        weights = jax.nn.softmax(scores, axis=-1)\n",
    drop: str = f"        weights = dropout(weights, self.dropout_rate, deterministic=deterministic, {_KEY})\n",  # noqa: E501
    merge: str = "        context = (weights @ v).transpose(0, 2, 1, 3).reshape(B, L, D)\n",
    heads: str = _HEADS,
) -> str:
    return (
        _MHA_INIT
        + heads
        + scores
        + "        if padding_mask is not None:\n"
        + mask
        + softmax
        + drop
        + merge
        + "        return self.out(context)\n"
    )


_BLOCK_INIT = '''class EncoderBlock(nnx.Module):
    """nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout_rate, batch_first=True):
    post-norm, ReLU. x (B, L, D); padding_mask None or (B, L), True = a real token."""

    def __init__(self, d_model, num_heads, d_ff, dropout_rate=0.1, *, rngs):
        self.attention = MultiHeadAttention(d_model, num_heads, dropout_rate, rngs=rngs)
        self.norm1 = LayerNorm(d_model)
        self.feed_forward = FeedForward(d_model, d_ff, dropout_rate, rngs=rngs)
        self.norm2 = LayerNorm(d_model)
        self.dropout_rate = dropout_rate
        self.rngs = rngs

    def __call__(self, x, *, padding_mask=None, deterministic):
'''

_DROP_A = f"        a = dropout(a, self.dropout_rate, deterministic=deterministic, {_KEY})\n"
_DROP_F = f"        f = dropout(f, self.dropout_rate, deterministic=deterministic, {_KEY})\n"
_ATTEND = "        a = self.attention(x, padding_mask=padding_mask, deterministic=deterministic)\n"
_FEED = "        f = self.feed_forward(x, deterministic=deterministic)\n"


def _block(body: str) -> str:
    return _BLOCK_INIT + body


_DROPOUT_BUGGY = [
    Variant(
        "no_rescale",
        DROP,
        _dropout(
            _GUARDS + "    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)\n"
            "    return jnp.where(keep, x, 0.0)\n"
        ),
        (T_DROP,),
        "not rescaled",
        mistake="not-rescaled",
    ),
    Variant(
        "divides_by_rate",
        DROP,
        _dropout(
            _GUARDS + "    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)\n"
            "    return jnp.where(keep, x / rate, 0.0)\n"
        ),
        (T_DROP,),
        "divided by rate",
        mistake="divided-by-rate",
    ),
    Variant(
        "multiplies_by_keep_probability",
        DROP,
        _dropout(
            _GUARDS + "    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)\n"
            "    return jnp.where(keep, x * (1 - rate), 0.0)\n"
        ),
        (T_DROP,),
        "multiplied by 1 - rate",
        mistake="multiplied-by-keep",
    ),
    Variant(
        "keeps_with_probability_rate",
        DROP,
        _dropout(
            _GUARDS + "    keep = jax.random.bernoulli(key, rate, x.shape)\n"
            "    return jnp.where(keep, x / (1.0 - rate), 0.0)\n"
        ),
        (T_DROP,),
        "probability of dropping",
        mistake="keeps-with-probability-rate",
    ),
    Variant(
        "active_when_deterministic",
        DROP,
        _dropout(
            "    if rate == 0.0:\n        return x\n"
            "    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)\n"
            "    return jnp.where(keep, x / (1.0 - rate), 0.0)\n"
        ),
        (T_DROP,),
        "deterministic=True",
        mistake="active-when-deterministic",
    ),
    Variant(
        "fixed_key_inside",
        DROP,
        _dropout(
            _GUARDS + "    keep = jax.random.bernoulli(jax.random.key(0), 1.0 - rate, x.shape)\n"
            "    return jnp.where(keep, x / (1.0 - rate), 0.0)\n"
        ),
        (T_DROP,),
        "two different keys dropped the same elements",
        mistake="ignores-key",
    ),
    Variant(
        "numpy_randomness",
        DROP,
        "import numpy as np\n\n\n"
        + _dropout(
            _GUARDS + "    keep = np.random.rand(*x.shape) >= rate\n"
            "    return jnp.where(keep, x / (1.0 - rate), 0.0)\n"
        ),
        (T_DROP,),
        "the same key gave two different masks",
        mistake="not-from-key",
    ),
    Variant(
        "nan_at_rate_one",
        DROP,
        _dropout(
            "    if deterministic or rate == 0.0:\n        return x\n"
            "    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)\n"
            "    return x * keep / (1.0 - rate)\n"
        ),
        (T_DROP,),
        "rate = 1",
        mistake="nan-at-rate-one",
    ),
    Variant(
        "one_draw_for_the_whole_array",
        DROP,
        _dropout(
            _GUARDS + "    keep = jax.random.bernoulli(key, 1.0 - rate)\n"
            "    return jnp.where(keep, x / (1.0 - rate), 0.0)\n"
        ),
        (T_DROP,),
        "one random draw for the whole array",
        mistake="one-draw-for-all",
    ),
    Variant(
        "in_place",
        DROP,
        _dropout(
            _GUARDS + "    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)\n"
            "    x = x / (1.0 - rate)\n"
            "    x[~keep] = 0.0\n"
            "    return x\n"
        ),
        (T_DROP,),
        "cannot be changed in place",
        mistake="jax-array-changed-in-place",
    ),
    Variant(
        "nnx_dropout",
        DROP,
        _dropout(
            "    layer = nnx.Dropout(rate, rngs=nnx.Rngs(dropout=key))\n"
            "    return layer(x, deterministic=deterministic)\n"
        ),
        (T_DROP,),
        "nnx.Dropout",
        mistake="forbidden-built-in",
    ),
]

_LINEAR_BUGGY = [
    Variant(
        "not_transposed",
        LIN,
        _linear(
            "    layer.kernel[...] = weight\n    if bias is not None:\n"
            "        layer.bias[...] = bias\n"
        ),
        (T_LIN,),
        "transpose",
        mistake="kernel-not-transposed",
    ),
    Variant(
        "new_param_not_transposed",
        LIN,
        _linear(
            "    layer.kernel = nnx.Param(weight)\n    if bias is not None:\n"
            "        layer.bias = nnx.Param(bias)\n"
        ),
        (T_LIN,),
        "(out, in)",
        mistake="kernel-not-transposed",
    ),
    Variant(
        "kernel_replaced_by_an_array",
        LIN,
        _linear(
            "    layer.kernel = weight.T\n    if bias is not None:\n        layer.bias = bias\n"
        ),
        (T_LIN,),
        "no longer an nnx.Param",
        mistake="not-a-parameter",
    ),
    Variant(
        "bias_replaced_by_an_array",
        LIN,
        _linear(
            "    layer.kernel[...] = weight.T\n    if bias is not None:\n"
            "        layer.bias = jnp.asarray(bias)\n"
        ),
        (T_LIN,),
        "layer.bias is now a plain",
        mistake="not-a-parameter",
    ),
    Variant(
        "new_params",
        LIN,
        _linear(
            "    layer.kernel = nnx.Param(weight.T)\n"
            "    if layer.bias is not None:\n        layer.bias = nnx.Param(bias)\n"
        ),
        (T_LIN,),
        "a new nnx.Param that replaced the layer's own",
        mistake="variable-replaced",
    ),
    Variant(
        "reshaped",
        LIN,
        _linear(
            "    layer.kernel[...] = weight.reshape(layer.kernel.shape)\n    if bias is not None:\n"
            "        layer.bias[...] = bias\n"
        ),
        (T_LIN,),
        "reshaped",
        mistake="kernel-reshaped",
    ),
    Variant(
        "returns_instead_of_writing",
        LIN,
        _linear("    return weight.T, bias\n"),
        (T_LIN,),
        "write into the given layer",
        mistake="layer-not-changed",
    ),
    Variant(
        "bias_none_not_handled",
        LIN,
        _linear("    layer.kernel[...] = weight.T\n    layer.bias[...] = bias\n"),
        (T_LIN,),
        "bias may be None",
        mistake="bias-none-not-handled",
    ),
]

_LN_BUGGY = [
    Variant(
        "flax_default_epsilon",
        LN,
        _layer_norm(
            _LN_INIT.replace("1e-5 if", "1e-6 if"),
            _LN_CALL + "        return (x - mean) / jnp.sqrt(variance + self.epsilon) "
            "* self.scale + self.bias\n",
        ),
        (T_LN, T_BLOCK),
        "Flax's default",
        also_says=((T_BLOCK, "comes from your LayerNorm"),),
        mistake="flax-eps",
    ),
    Variant(
        "unbiased_variance",
        LN,
        _layer_norm(
            _LN_INIT,
            "        mean = x.mean(axis=-1, keepdims=True)\n"
            "        variance = jnp.var(x, axis=-1, keepdims=True, ddof=1)\n"
            "        return (x - mean) / jnp.sqrt(variance + self.epsilon) "
            "* self.scale + self.bias\n",
        ),
        (T_LN, T_BLOCK),
        "D - 1",
        mistake="unbiased",
    ),
    Variant(
        "eps_outside_sqrt",
        LN,
        _layer_norm(
            _LN_INIT,
            _LN_CALL + "        return (x - mean) / (jnp.sqrt(variance) + self.epsilon) "
            "* self.scale + self.bias\n",
        ),
        (T_LN, T_BLOCK),
        "standard deviation",
        mistake="eps-outside",
    ),
    Variant(
        "no_epsilon",
        LN,
        _layer_norm(
            _LN_INIT,
            _LN_CALL + "        return (x - mean) / jnp.sqrt(variance) * self.scale + self.bias\n",
        ),
        (T_LN, T_BLOCK),
        "epsilon is missing",
        mistake="no-eps",
    ),
    Variant(
        "variance_by_cancellation",
        LN,
        _layer_norm(
            _LN_INIT,
            "        mean = x.mean(axis=-1, keepdims=True)\n"
            "        variance = (x**2).mean(axis=-1, keepdims=True) - mean**2\n"
            "        return (x - mean) / jnp.sqrt(variance + self.epsilon) "
            "* self.scale + self.bias\n",
        ),
        (T_LN,),
        "mean of 300",
        mistake="variance-cancellation",
    ),
    Variant(
        "epsilon_argument_ignored",
        LN,
        _layer_norm(
            _LN_INIT.replace("1e-5 if epsilon is None else epsilon", "1e-5"),
            _LN_CALL + "        return (x - mean) / jnp.sqrt(variance + self.epsilon) "
            "* self.scale + self.bias\n",
        ),
        (T_LN,),
        "still uses 1e-5",
        mistake="eps-argument-ignored",
    ),
    Variant(
        "no_scale_and_bias",
        LN,
        _layer_norm(
            _LN_INIT,
            _LN_CALL + "        return (x - mean) / jnp.sqrt(variance + self.epsilon)\n",
        ),
        (T_LN, T_BLOCK),
        "scale and bias are not applied",
        mistake="no-affine",
    ),
    Variant(
        "plain_arrays",
        LN,
        _layer_norm(
            "        self.scale = jnp.ones((num_features,))\n"
            "        self.bias = jnp.zeros((num_features,))\n"
            "        self.epsilon = 1e-5 if epsilon is None else epsilon\n",
            _LN_CALL + "        return (x - mean) / jnp.sqrt(variance + self.epsilon) "
            "* self.scale + self.bias\n",
        ),
        (T_LN, T_BLOCK),
        "holds them as a plain jax array",
        mistake="not-a-parameter",
    ),
    Variant(
        "variables_not_params",
        LN,
        _layer_norm(
            "        self.scale = nnx.Variable(jnp.ones((num_features,)))\n"
            "        self.bias = nnx.Variable(jnp.zeros((num_features,)))\n"
            "        self.epsilon = 1e-5 if epsilon is None else epsilon\n",
            _LN_CALL + "        return (x - mean) / jnp.sqrt(variance + self.epsilon) "
            "* self.scale + self.bias\n",
        ),
        (T_LN, T_BLOCK),
        "holds them as nnx.Variable",
        mistake="not-a-parameter",
    ),
    Variant(
        "torch_names",
        LN,
        _layer_norm(
            "        self.weight = nnx.Param(jnp.ones((num_features,)))\n"
            "        self.bias = nnx.Param(jnp.zeros((num_features,)))\n"
            "        self.epsilon = 1e-5 if epsilon is None else epsilon\n",
            _LN_CALL + "        return (x - mean) / jnp.sqrt(variance + self.epsilon) "
            "* self.weight + self.bias\n",
        ),
        (T_LN, T_BLOCK),
        "name them scale and bias",
        mistake="parameter-names",
    ),
    Variant(
        "wraps_nnx_layer_norm",
        LN,
        _layer_norm(
            "        eps = 1e-5 if epsilon is None else epsilon\n"
            "        self.norm = nnx.LayerNorm(num_features, epsilon=eps, rngs=nnx.Rngs(0))\n",
            "        return self.norm(x)\n",
        ),
        (T_LN, T_BLOCK),
        "nnx.LayerNorm",
        mistake="forbidden-built-in",
    ),
]

_FF_BUGGY = [
    Variant(
        "gelu",
        FF,
        _ff(
            "        h = jax.nn.gelu(self.linear1(x))\n"
            f"        h = dropout(h, self.dropout_rate, deterministic=deterministic, {_KEY})\n"
            "        return self.linear2(h)\n"
        ),
        (T_FF, T_BLOCK),
        "GELU",
        also_says=((T_BLOCK, "comes from your FeedForward"),),
        mistake="gelu",
    ),
    Variant(
        "no_activation",
        FF,
        _ff(
            "        h = self.linear1(x)\n"
            f"        h = dropout(h, self.dropout_rate, deterministic=deterministic, {_KEY})\n"
            "        return self.linear2(h)\n"
        ),
        (T_FF, T_BLOCK),
        "no activation",
        mistake="no-activation",
    ),
    Variant(
        "dropout_after_linear2",
        FF,
        _ff(
            "        h = self.linear2(jax.nn.relu(self.linear1(x)))\n"
            f"        return dropout(h, self.dropout_rate, deterministic=deterministic, {_KEY})\n"
        ),
        (T_FF, T_BLOCK),
        "applied dropout to arrays of shapes",
        mistake="dropout-sites",
    ),
    Variant(
        "no_dropout",
        FF,
        _ff("        return self.linear2(jax.nn.relu(self.linear1(x)))\n"),
        (T_FF, T_BLOCK),
        "never called your `dropout`",
        mistake="dropout-not-called",
    ),
    Variant(
        "same_key_every_step",
        FF,
        _ff(
            "        h = jax.nn.relu(self.linear1(x))\n"
            "        h = dropout(h, self.dropout_rate, deterministic=deterministic,"
            " key=jax.random.key(0))\n"
            "        return self.linear2(h)\n"
        ),
        (T_FF, T_BLOCK),
        "reused the keys of the first",
        mistake="fixed-seed-key",
    ),
    Variant(
        "key_made_in_init",
        FF,
        _FF_INIT.replace(
            "        self.rngs = rngs  # self.rngs.dropout() gives a new key at every call\n",
            "        self.key = rngs.dropout()  # one key for the module\n",
        )
        + "        h = jax.nn.relu(self.linear1(x))\n"
        "        h = dropout(h, self.dropout_rate, deterministic=deterministic, key=self.key)\n"
        "        return self.linear2(h)\n",
        (T_FF, T_BLOCK),
        "made once, in __init__",
        mistake="same-key-every-step",
    ),
    Variant(
        "always_training",
        FF,
        _ff(
            "        h = jax.nn.relu(self.linear1(x))\n"
            f"        h = dropout(h, self.dropout_rate, deterministic=False, {_KEY})\n"
            "        return self.linear2(h)\n"
        ),
        (T_FF, T_BLOCK),
        "although FeedForward was called with deterministic=True",
        mistake="dropout-when-deterministic",
    ),
    Variant(
        "nnx_dropout_module",
        FF,
        _ff(
            "        h = jax.nn.relu(self.linear1(x))\n"
            "        h = nnx.Dropout(self.dropout_rate, rngs=self.rngs)(h, "
            "deterministic=deterministic)\n"
            "        return self.linear2(h)\n"
        ),
        (T_FF, T_BLOCK),
        "never called your `dropout`",
        mistake="dropout-not-called",
    ),
]

_MHA_BUGGY = [
    Variant(
        "softmax_over_queries",
        MHA,
        _mha(softmax="        weights = jax.nn.softmax(scores, axis=-2)\n"),
        (T_MHA, T_BLOCK),
        "over the queries",
        also_says=((T_BLOCK, "comes from your MultiHeadAttention"),),
        mistake="softmax-over-queries",
    ),
    Variant(
        "scaled_by_sqrt_d_model",
        MHA,
        _mha(scores="        scores = q @ k.swapaxes(-1, -2) / jnp.sqrt(D)\n"),
        (T_MHA, T_BLOCK),
        "sqrt(D)",
        mistake="sqrt-d",
    ),
    Variant(
        "not_scaled",
        MHA,
        _mha(scores="        scores = q @ k.swapaxes(-1, -2)\n"),
        (T_MHA, T_BLOCK),
        "not scaled",
        mistake="no-scale",
    ),
    Variant(
        "mask_read_the_pytorch_way",
        MHA,
        _mha(
            mask="            scores = jnp.where(padding_mask[:, None, None, :], -jnp.inf, scores)\n"  # noqa: E501
        ),
        (T_MHA, T_BLOCK),
        "PyTorch way",
        mistake="mask-inverted",
    ),
    Variant(
        "mask_hides_query_rows",
        MHA,
        _mha(
            mask="            scores = jnp.where(padding_mask[:, None, :, None], scores, -jnp.inf)\n"  # noqa: E501
        ),
        (T_MHA, T_BLOCK),
        "laid along the queries",
        mistake="mask-hides-queries",
    ),
    Variant(
        "mask_without_head_axis",
        MHA,
        _mha(mask="            scores = jnp.where(padding_mask[:, None, :], scores, -jnp.inf)\n"),
        (T_MHA, T_BLOCK),
        "does not line up with the scores",
        mistake="mask-shape",
    ),
    Variant(
        "mask_ignored",
        MHA,
        _mha(mask="            pass\n"),
        (T_MHA, T_BLOCK),
        "not applied",
        mistake="mask-ignored",
    ),
    Variant(
        "heads_split_without_transpose",
        MHA,
        _mha(
            heads="        B, L, D = x.shape\n"
            "        q, k, v = (\n"
            "            f(x).reshape(B, self.num_heads, L, self.d_head)\n"
            "            for f in (self.query, self.key, self.value)\n"
            "        )\n"
        ),
        (T_MHA, T_BLOCK),
        "mixes positions and features",
        mistake="split-without-transpose",
    ),
    Variant(
        "heads_merged_without_transpose",
        MHA,
        _mha(merge="        context = (weights @ v).reshape(B, L, D)\n"),
        (T_MHA, T_BLOCK),
        "merged",
        mistake="merge-without-transpose",
    ),
    Variant(
        "no_dropout_on_weights",
        MHA,
        _mha(drop=""),
        (T_MHA, T_BLOCK),
        "never called your `dropout`",
        mistake="dropout-not-called",
    ),
    Variant(
        "key_made_once_per_call_site",
        MHA,
        _mha(
            drop="        weights = dropout(weights, self.dropout_rate, "
            "deterministic=deterministic, key=jax.random.key(42))\n"
        ),
        (T_MHA, T_BLOCK),
        "reused the keys of the first",
        mistake="fixed-seed-key",
    ),
    Variant(
        "uses_jax_attention",
        MHA,
        _MHA_INIT + "        B, L, D = x.shape\n"
        "        q, k, v = (\n"
        "            f(x).reshape(B, L, self.num_heads, self.d_head)\n"
        "            for f in (self.query, self.key, self.value)\n"
        "        )\n"
        "        mask = None if padding_mask is None else padding_mask[:, None, None, :]\n"
        "        context = jax.nn.dot_product_attention(q, k, v, mask=mask)\n"
        "        return self.out(context.reshape(B, L, D))\n",
        (T_MHA, T_BLOCK),
        "jax.nn.dot_product_attention",
        mistake="forbidden-built-in",
    ),
]

_BLOCK_BUGGY = [
    Variant(
        "pre_norm",
        BLOCK,
        _block(
            "        a = self.attention(self.norm1(x), padding_mask=padding_mask, "
            "deterministic=deterministic)\n" + _DROP_A + "        x = x + a\n"
            "        f = self.feed_forward(self.norm2(x), deterministic=deterministic)\n"
            + _DROP_F
            + "        return x + f\n"
        ),
        (T_BLOCK,),
        "pre-norm",
        mistake="pre-norm",
    ),
    Variant(
        "no_residual_around_attention",
        BLOCK,
        _block(
            _ATTEND
            + _DROP_A
            + "        x = self.norm1(a)\n"
            + _FEED
            + _DROP_F
            + "        return self.norm2(x + f)\n"
        ),
        (T_BLOCK,),
        "not added to its input before norm1",
        mistake="no-residual-attention",
    ),
    Variant(
        "no_residual_around_feed_forward",
        BLOCK,
        _block(
            _ATTEND
            + _DROP_A
            + "        x = self.norm1(x + a)\n"
            + _FEED
            + _DROP_F
            + "        return self.norm2(f)\n"
        ),
        (T_BLOCK,),
        "before norm2",
        mistake="no-residual-feed-forward",
    ),
    Variant(
        "norm1_twice",
        BLOCK,
        _block(
            _ATTEND
            + _DROP_A
            + "        x = self.norm1(x + a)\n"
            + _FEED
            + _DROP_F
            + "        return self.norm1(x + f)\n"
        ),
        (T_BLOCK,),
        "norm1 is used after both",
        mistake="norm1-twice",
    ),
    Variant(
        "mask_inverted_for_pytorch",
        BLOCK,
        _block(
            "        mask = None if padding_mask is None else ~padding_mask\n"
            "        a = self.attention(x, padding_mask=mask, deterministic=deterministic)\n"
            + _DROP_A
            + "        x = self.norm1(x + a)\n"
            + _FEED
            + _DROP_F
            + "        return self.norm2(x + f)\n"
        ),
        (T_BLOCK,),
        "inverted padding mask",
        mistake="mask-inverted",
    ),
    Variant(
        "mask_not_passed",
        BLOCK,
        _block(
            "        a = self.attention(x, deterministic=deterministic)\n"
            + _DROP_A
            + "        x = self.norm1(x + a)\n"
            + _FEED
            + _DROP_F
            + "        return self.norm2(x + f)\n"
        ),
        (T_BLOCK,),
        "does not reach the attention",
        mistake="mask-ignored",
    ),
    Variant(
        "one_key_for_both_sites",
        BLOCK,
        _block(
            "        key = self.rngs.dropout()\n"
            + _ATTEND
            + "        a = dropout(a, self.dropout_rate, deterministic=deterministic, key=key)\n"
            + "        x = self.norm1(x + a)\n"
            + _FEED
            + "        f = dropout(f, self.dropout_rate, deterministic=deterministic, key=key)\n"
            + "        return self.norm2(x + f)\n"
        ),
        (T_BLOCK,),
        "same key to two dropout sites",
        mistake="same-key-two-sites",
    ),
    Variant(
        "feed_forward_always_training",
        BLOCK,
        _block(
            _ATTEND + _DROP_A + "        x = self.norm1(x + a)\n"
            "        f = self.feed_forward(x, deterministic=False)\n"
            + _DROP_F
            + "        return self.norm2(x + f)\n"
        ),
        (T_BLOCK,),
        "although EncoderBlock was called with deterministic=True",
        mistake="dropout-when-deterministic",
    ),
    Variant(
        "dropout_on_the_sum",
        BLOCK,
        _block(
            _ATTEND + "        x = self.norm1(dropout(x + a, self.dropout_rate, "
            f"deterministic=deterministic, {_KEY}))\n"
            + _FEED
            + "        x = self.norm2(dropout(x + f, self.dropout_rate, "
            f"deterministic=deterministic, {_KEY}))\n" + "        return x\n"
        ),
        (T_BLOCK,),
        "applied to the residual sum",
        mistake="dropout-on-the-sum",
    ),
    Variant(
        "no_dropout_in_block",
        BLOCK,
        _block(
            _ATTEND
            + "        x = self.norm1(x + a)\n"
            + _FEED
            + "        return self.norm2(x + f)\n"
        ),
        (T_BLOCK,),
        "applied dropout to arrays of shapes",
        mistake="dropout-sites",
    ),
]

BUGGY = _DROPOUT_BUGGY + _LINEAR_BUGGY + _LN_BUGGY + _FF_BUGGY + _MHA_BUGGY + _BLOCK_BUGGY

CORRECT = [
    Variant(
        "uniform_threshold",
        DROP,
        _dropout(
            _GUARDS + "    keep = jax.random.uniform(key, x.shape) >= rate\n"
            "    return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))\n"
        ),
    ),
    Variant(
        "multiplies_by_mask",
        DROP,
        _dropout(
            "    if deterministic or rate == 0:\n        return x\n"
            "    if rate == 1:\n        return x * 0\n"
            "    keep = jax.random.bernoulli(key, p=1 - rate, shape=x.shape).astype(x.dtype)\n"
            "    return x * keep / (1 - rate)\n"
        ),
    ),
    Variant(
        "set_value",
        LIN,
        _linear(
            "    layer.kernel.set_value(jnp.transpose(weight))\n"
            "    if bias is not None:\n        layer.bias.set_value(bias)\n"
        ),
    ),
    Variant(
        "jnp_var_and_rsqrt",
        LN,
        _layer_norm(
            "        self.epsilon = epsilon if epsilon is not None else 1e-5\n"
            "        self.scale = nnx.Param(jnp.ones(num_features))\n"
            "        self.bias = nnx.Param(jnp.zeros(num_features))\n",
            "        centred = x - jnp.mean(x, axis=-1, keepdims=True)\n"
            "        variance = jnp.var(x, axis=-1, keepdims=True)\n"
            "        normed = centred * jax.lax.rsqrt(variance + self.epsilon)\n"
            "        return normed * self.scale[...] + self.bias[...]\n",
        ),
    ),
    Variant(
        "nnx_relu_and_intermediate",
        FF,
        _ff(
            "        hidden = nnx.relu(self.linear1(x))\n"
            "        key = self.rngs.dropout()\n"
            "        hidden = dropout(hidden, self.dropout_rate, deterministic=deterministic,"
            " key=key)\n"
            "        return self.linear2(hidden)\n"
        ),
    ),
    Variant(
        "einsum_and_large_negative",
        MHA,
        _MHA_INIT + "        B, L, D = x.shape\n"
        "        H, d = self.num_heads, self.d_head\n"
        "        q = self.query(x).reshape(B, L, H, d)\n"
        "        k = self.key(x).reshape(B, L, H, d)\n"
        "        v = self.value(x).reshape(B, L, H, d)\n"
        "        scores = jnp.einsum('bqhd,bkhd->bhqk', q, k) / d**0.5\n"
        "        if padding_mask is not None:\n"
        "            scores = jnp.where(padding_mask[:, None, None, :], scores, -1e9)\n"
        "        weights = jax.nn.softmax(scores, axis=-1)\n"
        f"        weights = dropout(weights, self.dropout_rate, deterministic=deterministic, {_KEY})\n"  # noqa: E501
        "        context = jnp.einsum('bhqk,bkhd->bqhd', weights, v).reshape(B, L, D)\n"
        "        return self.out(context)\n",
    ),
    Variant(
        "sublayer_helper",
        BLOCK,
        _block(
            "        def residual(x, y):\n"
            "            y = dropout(y, self.dropout_rate, deterministic=deterministic,"
            " key=self.rngs.dropout())\n"
            "            return x + y\n\n"
            "        x = self.norm1(residual(x, self.attention(x, padding_mask=padding_mask,"
            " deterministic=deterministic)))\n"
            "        return self.norm2(residual(x, self.feed_forward(x,"
            " deterministic=deterministic)))\n"
        ),
    ),
]


# --- answers that make the rest of the catalogue (tests/grading/checks/test_catalogue.py) -------

BUGGY += [
    Variant(
        "exact_gelu",
        FF,
        _ff(
            "        h = jax.nn.gelu(self.linear1(x), approximate=False)\n"
            f"        h = dropout(h, self.dropout_rate, deterministic=deterministic, {_KEY})\n"
            "        return self.linear2(h)\n"
        ),
        (T_FF, T_BLOCK),
        "the exact form",
        mistake="gelu-exact",
    ),
]


# --- exercise 7: make_optimizer and train_step (issue 39; n10_jax_encoder.py) ---------------

TRAIN = "jax_train_step"
T_TRAIN = f"test_{TRAIN}"

_OPTIMIZER = (
    "def make_optimizer(model, learning_rate, betas, weight_decay):\n"
    "    b1, b2 = betas\n"
    "    tx = optax.adamw(learning_rate, b1=b1, b2=b2, weight_decay=weight_decay)\n"
    "    return nnx.Optimizer(model, tx, wrt=nnx.Param)\n"
)
_STEP = (
    "def train_step(model, optimizer, x, y):\n"
    "    def loss_fn(model):\n"
    "        return jnp.mean((model(x, deterministic=True) - y) ** 2)\n\n"
    "    loss, grads = nnx.value_and_grad(loss_fn)(model)\n"
    "    optimizer.update(model, grads)\n"
    "    return loss, grads\n"
)


def _train(optimizer: str = _OPTIMIZER, step: str = _STEP) -> str:
    return f"import optax\n\n\n{optimizer}\n\n{step}"


def _adamw(args: str) -> str:
    """make_optimizer with ``optax.adamw(<args>)``."""
    return (
        "def make_optimizer(model, learning_rate, betas, weight_decay):\n"
        "    b1, b2 = betas\n"
        f"    return nnx.Optimizer(model, optax.adamw({args}), wrt=nnx.Param)\n"
    )


BUGGY += [
    Variant(
        "grad_of_the_input",
        TRAIN,
        _train(
            step="def train_step(model, optimizer, x, y):\n"
            "    def loss_fn(model, x):\n"
            "        return jnp.mean((model(x, deterministic=True) - y) ** 2)\n\n"
            "    loss, grads = nnx.value_and_grad(loss_fn, argnums=1)(model, x)\n"
            "    optimizer.update(model, grads)\n"
            "    return loss, grads\n"
        ),
        (T_TRAIN,),
        "differentiates with respect to",
        mistake="grad-wrong-argument",
    ),
    Variant(
        "l2_in_the_gradient",
        TRAIN,
        _train(
            optimizer="def make_optimizer(model, learning_rate, betas, weight_decay):\n"
            "    tx = optax.chain(\n"
            "        optax.add_decayed_weights(weight_decay),\n"
            "        optax.adam(learning_rate, b1=betas[0], b2=betas[1]),\n"
            "    )\n"
            "    return nnx.Optimizer(model, tx, wrt=nnx.Param)\n"
        ),
        (T_TRAIN,),
        "L2 regularisation",
        mistake="l2-not-decoupled",
    ),
    Variant(
        "betas_swapped",
        TRAIN,
        _train(_adamw("learning_rate, b1=b2, b2=b1, weight_decay=weight_decay")),
        (T_TRAIN,),
        "betas are swapped",
        mistake="betas-swapped",
    ),
    Variant(
        "learning_rate_and_decay_swapped",
        TRAIN,
        _train(_adamw("weight_decay, b1=b1, b2=b2, weight_decay=learning_rate")),
        (T_TRAIN,),
        "learning rate and the weight decay are swapped",
        mistake="lr-weight-decay-swapped",
    ),
    Variant(
        "optax_default_decay",
        TRAIN,
        _train(_adamw("learning_rate, b1=b1, b2=b2")),
        (T_TRAIN,),
        "optax.adamw without weight_decay=",
        mistake="weight-decay-not-passed",
    ),
    Variant(
        "adam_without_decay",
        TRAIN,
        _train(
            "def make_optimizer(model, learning_rate, betas, weight_decay):\n"
            "    tx = optax.adam(learning_rate, b1=betas[0], b2=betas[1])\n"
            "    return nnx.Optimizer(model, tx, wrt=nnx.Param)\n"
        ),
        (T_TRAIN,),
        "this is Adam",
        mistake="weight-decay-not-passed",
    ),
    Variant(
        "optimiser_state_made_every_step",
        TRAIN,
        _train(
            step="def train_step(model, optimizer, x, y):\n"
            "    def loss_fn(model):\n"
            "        return jnp.mean((model(x, deterministic=True) - y) ** 2)\n\n"
            "    loss, grads = nnx.value_and_grad(loss_fn)(model)\n"
            "    params = nnx.state(model, nnx.Param)\n"
            "    opt_state = optimizer.tx.init(params)  # a new state at every step\n"
            "    updates, _ = optimizer.tx.update(grads, opt_state, params)\n"
            "    nnx.update(model, optax.apply_updates(params, updates))\n"
            "    return loss, grads\n"
        ),
        (T_TRAIN,),
        "fresh optimiser state",
        mistake="state-not-carried",
    ),
    Variant(
        "loss_as_a_float",
        TRAIN,
        _train(step=_STEP.replace("return loss, grads", "return float(loss), grads")),
        (T_TRAIN,),
        "nnx.jit",
        mistake="not-jittable",
    ),
    Variant(
        "returns_the_loss_only",
        TRAIN,
        _train(step=_STEP.replace("return loss, grads", "return loss")),
        (T_TRAIN,),
        "return the gradients",
        mistake="grads-not-returned",
    ),
    Variant(
        "returns_grads_then_loss",
        TRAIN,
        _train(step=_STEP.replace("return loss, grads", "return grads, loss")),
        (T_TRAIN,),
        "a single number",
        mistake="loss-not-a-scalar",
    ),
]

CORRECT += [
    Variant(
        "adamw_by_parts_and_grad_then_loss",
        TRAIN,
        _train(
            optimizer="def make_optimizer(model, learning_rate, betas, weight_decay):\n"
            "    tx = optax.chain(  # AdamW written out: Adam's scaling, then the decay beside it\n"
            "        optax.scale_by_adam(b1=betas[0], b2=betas[1], eps=1e-8),\n"
            "        optax.add_decayed_weights(weight_decay),\n"
            "        optax.scale(-learning_rate),\n"
            "    )\n"
            "    return nnx.Optimizer(model, tx, wrt=nnx.Param)\n",
            step="def train_step(model, optimizer, x, y):\n"
            "    def loss_fn(model):\n"
            "        return ((model(x, deterministic=True) - y) ** 2).mean()\n\n"
            "    grads = nnx.grad(loss_fn)(model)\n"
            "    loss = loss_fn(model)  # before the update\n"
            "    optimizer.update(model, grads)\n"
            "    return loss, grads\n",
        ),
    ),
    Variant(
        "loss_as_a_sum_over_the_size",
        TRAIN,
        _train(
            step="def train_step(model, optimizer, x, y):\n"
            "    def loss_fn(model):\n"
            "        error = model(x, deterministic=True) - y\n"
            "        return jnp.sum(error**2) / error.size\n\n"
            "    loss, grads = nnx.value_and_grad(loss_fn)(model)\n"
            "    optimizer.update(model, grads)\n"
            "    return loss, grads\n"
        ),
    ),
]
