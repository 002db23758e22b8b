"""Answers to notebook 09 (the encoder as it is built today) as students write them: ``BUGGY``
ones, each with the test cells it must fail and the words that name its mistake, and
``CORRECT`` ones written differently from the solution.

The solution's layer (exercise 5) builds its band with the notebook's ``sliding_window_mask``,
so a wrong band of exercise 4 costs the layer's points too, and the layer's message says where
the mistake lives; exercises 1 to 3 are independent (the layer's given ``__init__`` holds
``encoder_lib``'s norms, rotary embedding and gated FFN).
"""

from __future__ import annotations

from variants import Variant

RMS, GATED, ROTARY, WINDOW, LAYER = (
    "rms_norm",
    "gated_feed_forward",
    "apply_rotary",
    "sliding_window_mask",
    "modern_encoder_layer",
)
T_RMS, T_GATED, T_ROTARY, T_WINDOW, T_LAYER = (
    f"test_{name}" for name in (RMS, GATED, ROTARY, WINDOW, LAYER)
)


def _rms(body: str) -> str:
    return f"def rms_norm(x, weight, eps=1e-6):\n{body}"


_GATED_INIT = '''class GatedFeedForward(nn.Module):
    """The gated feed-forward network of ModernBERT (GeGLU) and Llama (SwiGLU), without
    biases. Input and output (..., D)."""

    def __init__(self, d_model, d_ff=None, activation="gelu", dropout=0.0):
        super().__init__()
        self.d_ff = encoder_lib.gated_d_ff(d_model) if d_ff is None else d_ff  # round(8D / 3)
        self.activation = {"gelu": F.gelu, "silu": F.silu}[activation]  # GeGLU or SwiGLU
        self.wi = nn.Linear(d_model, 2 * self.d_ff, bias=False)  # rows: [activated; linear]
        self.dropout = nn.Dropout(dropout)
        self.wo = nn.Linear(self.d_ff, d_model, bias=False)

    def forward(self, x):
'''


def _gated(body: str) -> str:
    return _GATED_INIT + body


def _rotary(body: str) -> str:
    return f'def apply_rotary(x, cos, sin, pairing="halves"):\n{body}'


def _window(body: str) -> str:
    return f"def sliding_window_mask(length, window):\n{body}"


_LAYER_INIT = '''class ModernEncoderLayer(nn.Module):
    """A pre-norm encoder layer without biases: rotary queries and keys, an optional sliding
    window, a gated FFN. x (B, L, D); mask boolean, True = may attend, broadcastable to
    (B, H, L, L)."""

    def __init__(self, d_model, num_heads, d_ff=None, window=None, dropout=0.0, pairing="halves"):
        super().__init__()
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.window = window  # None: a global layer; an even number: local, window / 2 each side
        self.attn_dropout = dropout  # on the attention weights, in training mode
        self.norm1 = encoder_lib.RMSNorm(d_model, eps=1e-6)
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.rotary = encoder_lib.RotaryEmbedding(self.d_head, pairing=pairing)  # (q, k) -> rotated
        self.dropout1 = nn.Dropout(dropout)
        self.norm2 = encoder_lib.RMSNorm(d_model, eps=1e-6)
        self.ffn = encoder_lib.GatedFeedForward(d_model, d_ff, "gelu", dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
'''

# The solution's forward, in pieces that the buggy layers change one at a time.
_MASK = (
    "        B, L, D = x.shape\n"
    "        H, d_head = self.num_heads, self.d_head\n"
    "        if self.window is not None:\n"
    "            band = sliding_window_mask(L, self.window).to(x.device)\n"
    "            mask = band if mask is None else mask & band\n"
)
_QKV = (
    "        h = self.norm1(x)\n"
    "        q = self.q_proj(h).view(B, L, H, d_head).transpose(1, 2)\n"
    "        k = self.k_proj(h).view(B, L, H, d_head).transpose(1, 2)\n"
    "        v = self.v_proj(h).view(B, L, H, d_head).transpose(1, 2)\n"
)
_ROTATE = "        q, k = self.rotary(q, k)\n"
_ATTEND = (
    "        p = self.attn_dropout if self.training else 0.0\n"
    "        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)\n"
    "        attended = attended.transpose(1, 2).reshape(B, L, D)\n"
)
_RESIDUALS = (
    "        x = x + self.dropout1(self.out_proj(attended))\n"
    "        return x + self.dropout2(self.ffn(self.norm2(x)))\n"
)
_FORWARD = _MASK + _QKV + _ROTATE + _ATTEND + _RESIDUALS


def _layer(body: str) -> str:
    return _LAYER_INIT + body


def _layer_with(old: str, new: str) -> str:
    """The solution's layer with one piece of its forward replaced."""
    assert old in _FORWARD, old
    return _layer(_FORWARD.replace(old, new))


# --- exercise 1: rms_norm ------------------------------------------------------------------------

_RMS_BUGGY = [
    Variant(
        "subtracts_the_mean",
        RMS,
        _rms(
            "    x = x - x.mean(dim=-1, keepdim=True)\n"
            "    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight\n"
        ),
        (T_RMS,),
        "that is LayerNorm",
        mistake="layer-norm-not-rms-norm",
    ),
    Variant(
        "eps_outside",
        RMS,
        _rms("    return x / (x.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps) * weight\n"),
        (T_RMS,),
        "outside the square root",
        mistake="eps-outside-sqrt",
    ),
    Variant(
        "no_eps",
        RMS,
        _rms("    return x / x.pow(2).mean(dim=-1, keepdim=True).sqrt() * weight\n"),
        (T_RMS,),
        "it has no eps",
        mistake="no-eps",
    ),
    Variant(
        "eps_hard_coded",
        RMS,
        _rms("    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight\n"),
        (T_RMS,),
        "ignores the eps argument",
        mistake="eps-ignored",
    ),
    Variant(
        "sum_not_mean",
        RMS,
        _rms("    return x / torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps) * weight\n"),
        (T_RMS,),
        "sum of the squares",
        mistake="sum-not-mean",
    ),
    Variant(
        "length_of_x",
        RMS,
        _rms("    return x / x.norm(dim=-1, keepdim=True) * weight\n"),
        (T_RMS,),
        "root mean square of about 1",
        mistake="wrong-scale",
    ),
    Variant(
        "divides_by_d_minus_one",
        RMS,
        _rms(
            "    ms = x.pow(2).sum(dim=-1, keepdim=True) / (x.shape[-1] - 1)\n"
            "    return x / torch.sqrt(ms + eps) * weight\n"
        ),
        (T_RMS,),
        "by D - 1",
        mistake="divides-by-d-minus-1",
    ),
    Variant(
        "no_square_root",
        RMS,
        _rms("    return x / (x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight\n"),
        (T_RMS,),
        "without the square root",
        mistake="no-square-root",
    ),
    Variant(
        "mean_squared",
        RMS,
        _rms("    return x / torch.sqrt(x.mean(dim=-1, keepdim=True) ** 2 + eps) * weight\n"),
        (T_RMS,),
        "squares the mean",
        mistake="mean-squared",
    ),
    Variant(
        "mean_absolute_value",
        RMS,
        _rms("    return x / (x.abs().mean(dim=-1, keepdim=True) + eps) * weight\n"),
        (T_RMS,),
        "mean absolute value",
        mistake="mean-absolute-value",
    ),
    Variant(
        "weight_ignored",
        RMS,
        _rms("    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)\n"),
        (T_RMS,),
        "ignores weight",
        mistake="no-weight",
    ),
    Variant(
        "weight_added",
        RMS,
        _rms("    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) + weight\n"),
        (T_RMS,),
        "adds weight",
        mistake="weight-added",
    ),
    Variant(
        "weight_first",
        RMS,
        _rms(
            "    x = x * weight\n"
            "    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)\n"
        ),
        (T_RMS,),
        "before normalising",
        mistake="weight-first",
    ),
    Variant(
        "batch_axis",
        RMS,
        _rms("    return x / torch.sqrt(x.pow(2).mean(dim=0, keepdim=True) + eps) * weight\n"),
        (T_RMS,),
        "the batch axis",
        mistake="normalises-over-batch",
    ),
    Variant(
        "no_keepdim",
        RMS,
        _rms("    return x / torch.sqrt(x.pow(2).mean(dim=-1) + eps) * weight\n"),
        (T_RMS,),
        "keepdim=True",
        mistake="keepdim-dropped",
    ),
    Variant(
        "float32_result",
        RMS,
        _rms(
            "    x, weight = x.float(), weight.float()\n"
            "    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight\n"
        ),
        (T_RMS,),
        "keep the inputs' dtype",
        mistake="dtype",
    ),
    Variant(
        "in_place",
        RMS,
        _rms("    return x.div_(torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)) * weight\n"),
        (T_RMS,),
        "in place",
        mistake="in-place",
    ),
    Variant(
        "detached",
        RMS,
        _rms(
            "    x = x.detach()\n"
            "    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight\n"
        ),
        (T_RMS,),
        "after backward, x.grad is None",
        mistake="gradient-missing",
    ),
]

_RMS_CORRECT = [
    Variant(
        "rsqrt",
        RMS,
        _rms("    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * weight\n"),
    ),
    Variant(
        "sum_over_d",
        RMS,
        _rms(
            "    mean_square = (x * x).sum(dim=-1, keepdim=True) / x.shape[-1]\n"
            "    return weight * x / (mean_square + eps) ** 0.5\n"
        ),
    ),
    Variant(
        "vector_norm",
        RMS,
        _rms(
            "    rms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) / math.sqrt(x.shape[-1])\n"
            "    return x / torch.sqrt(rms**2 + eps) * weight\n"
        ),
    ),
]

# --- exercise 2: GatedFeedForward ----------------------------------------------------------------

_GATED_RIGHT = (
    "        activated, linear = self.wi(x).chunk(2, dim=-1)\n"
    "        return self.wo(self.dropout(self.activation(activated) * linear))\n"
)


def _gate(hidden: str) -> str:
    """A forward that splits wi's output into a and b and returns wo(<hidden>)."""
    return _gated(f"        a, b = self.wi(x).chunk(2, dim=-1)\n        return self.wo({hidden})\n")


_GATED_BUGGY = [
    Variant(
        "halves_swapped",
        GATED,
        _gate("self.dropout(self.activation(b) * a)"),
        (T_GATED,),
        "roles are swapped",
        mistake="halves-swapped",
    ),
    Variant(
        "no_gate",
        GATED,
        _gate("self.dropout(self.activation(a))"),
        (T_GATED,),
        "there is no gate",
        mistake="no-gate",
    ),
    Variant(
        "both_activated",
        GATED,
        _gate("self.dropout(self.activation(a) * self.activation(b))"),
        (T_GATED,),
        "applied to both halves",
        mistake="both-activated",
    ),
    Variant(
        "activation_after_product",
        GATED,
        _gate("self.dropout(self.activation(a * b))"),
        (T_GATED,),
        "after the product",
        mistake="activation-after-product",
    ),
    Variant(
        "no_activation",
        GATED,
        _gate("self.dropout(a * b)"),
        (T_GATED,),
        "there is no activation",
        mistake="no-activation",
    ),
    Variant(
        "added",
        GATED,
        _gate("self.dropout(self.activation(a) + b)"),
        (T_GATED,),
        "are added",
        mistake="halves-added",
    ),
    Variant(
        "even_and_odd",
        GATED,
        _gated(
            "        h = self.wi(x)\n"
            "        return self.wo(self.dropout(self.activation(h[..., 0::2]) * h[..., 1::2]))\n"
        ),
        (T_GATED,),
        "even and odd",
        mistake="even-and-odd",
    ),
    Variant(
        "glu",
        GATED,
        _gated("        return self.wo(self.dropout(F.glu(self.wi(x), dim=-1)))\n"),
        (T_GATED,),
        "sigmoid gate",
        mistake="glu-sigmoid-gate",
    ),
    Variant(
        "relu",
        GATED,
        _gate("self.dropout(F.relu(a) * b)"),
        (T_GATED,),
        "it uses ReLU",
        mistake="relu-activation",
    ),
    Variant(
        "always_gelu",
        GATED,
        _gate("self.dropout(F.gelu(a) * b)"),
        (T_GATED,),
        "GELU although activation='silu'",
        mistake="always-gelu",
    ),
    Variant(
        "always_silu",
        GATED,
        _gate("self.dropout(F.silu(a) * b)"),
        (T_GATED,),
        "SiLU although activation='gelu'",
        mistake="always-silu",
    ),
    Variant(
        "gelu_tanh",
        GATED,
        _gated(
            "        a, b = self.wi(x).chunk(2, dim=-1)\n"
            "        if self.activation is F.gelu:\n"
            "            a = F.gelu(a, approximate='tanh')\n"
            "        else:\n"
            "            a = self.activation(a)\n"
            "        return self.wo(self.dropout(a * b))\n"
        ),
        (T_GATED,),
        "tanh approximation",
        mistake="gelu-tanh",
    ),
    Variant(
        "residual_added",
        GATED,
        _gated(
            "        a, b = self.wi(x).chunk(2, dim=-1)\n"
            "        return x + self.wo(self.dropout(self.activation(a) * b))\n"
        ),
        (T_GATED,),
        "residual connection",
        mistake="residual-inside-ffn",
    ),
    Variant(
        "no_dropout",
        GATED,
        _gate("self.activation(a) * b"),
        (T_GATED,),
        "dropout is missing",
        mistake="dropout-missing",
    ),
    Variant(
        "dropout_on_output",
        GATED,
        _gated(
            "        a, b = self.wi(x).chunk(2, dim=-1)\n"
            "        return self.dropout(self.wo(self.activation(a) * b))\n"
        ),
        (T_GATED,),
        "dropout acts on wo's output",
        mistake="dropout-on-output",
    ),
    Variant(
        "dropout_on_input",
        GATED,
        _gated(
            "        a, b = self.wi(self.dropout(x)).chunk(2, dim=-1)\n"
            "        return self.wo(self.activation(a) * b)\n"
        ),
        (T_GATED,),
        "applied to the input x",
        mistake="dropout-on-input",
    ),
    Variant(
        "dropout_on_activated_half",
        GATED,
        _gate("self.dropout(self.activation(a)) * b"),
        (T_GATED,),
        "activated half before the product",
        mistake="dropout-on-activated-half",
    ),
    Variant(
        "dropout_twice",
        GATED,
        _gate("self.dropout(self.dropout(self.activation(a) * b))"),
        (T_GATED,),
        "dropout twice",
        mistake="dropout-twice",
    ),
    Variant(
        "dropout_in_eval",
        GATED,
        _gate("F.dropout(self.activation(a) * b, self.dropout.p)"),
        (T_GATED,),
        "still active in eval mode",
        mistake="dropout-in-eval",
    ),
    Variant(
        "float32_result",
        GATED,
        _gated(
            "        a, b = self.wi(x).chunk(2, dim=-1)\n"
            "        return self.wo(self.dropout(self.activation(a) * b)).float()\n"
        ),
        (T_GATED,),
        "keep the inputs' dtype",
        mistake="dtype",
    ),
]

_GATED_CORRECT = [
    Variant(
        "split",
        GATED,
        _gated(
            "        activated, linear = torch.split(self.wi(x), self.d_ff, dim=-1)\n"
            "        hidden = self.activation(activated) * linear\n"
            "        return self.wo(self.dropout(hidden))\n"
        ),
    ),
    Variant(
        "weight_slices",
        GATED,
        _gated(
            "        first = F.linear(x, self.wi.weight[: self.d_ff])\n"
            "        second = F.linear(x, self.wi.weight[self.d_ff :])\n"
            "        hidden = F.dropout(self.activation(first) * second, self.dropout.p, "
            "self.training)\n"
            "        return F.linear(hidden, self.wo.weight)\n"
        ),
    ),
    Variant(
        "unflatten",
        GATED,
        _gated(
            "        both = self.wi(x).unflatten(-1, (2, self.d_ff))  # (..., 2, d_ff)\n"
            "        activated, linear = both.unbind(dim=-2)\n"
            "        return self.wo(self.dropout(linear * self.activation(activated)))\n"
        ),
    ),
]

# --- exercise 3: apply_rotary --------------------------------------------------------------------

_PAIRS = (
    "    if pairing == 'halves':\n"
    "        x1, x2 = x.chunk(2, dim=-1)\n"
    "    else:\n"
    "        x1, x2 = x[..., 0::2], x[..., 1::2]\n"
)
_JOIN = (
    "    if pairing == 'halves':\n"
    "        return torch.cat((y1, y2), dim=-1)\n"
    "    return torch.stack((y1, y2), dim=-1).flatten(-2)\n"
)


def _rotate(y1: str, y2: str) -> str:
    """The solution's reading and writing of pairs around the rotation ``y1``, ``y2``."""
    return _rotary(_PAIRS + f"    y1 = {y1}\n    y2 = {y2}\n" + _JOIN)


_ROTARY_BUGGY = [
    Variant(
        "wrong_way",
        ROTARY,
        _rotate("x1 * cos + x2 * sin", "x2 * cos - x1 * sin"),
        (T_ROTARY,),
        "rotates each pair the wrong way",
        mistake="wrong-way",
    ),
    Variant(
        "always_halves",
        ROTARY,
        _rotary(
            "    x1, x2 = x.chunk(2, dim=-1)\n"
            "    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)\n"
        ),
        (T_ROTARY,),
        "is it ignored?",
        mistake="pairing-ignored",
    ),
    Variant(
        "always_adjacent",
        ROTARY,
        _rotary(
            "    x1, x2 = x[..., 0::2], x[..., 1::2]\n"
            "    y = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)\n"
            "    return y.flatten(-2)\n"
        ),
        (T_ROTARY,),
        "the 'adjacent' layout",
        mistake="pairing-ignored",
    ),
    Variant(
        "pairings_swapped",
        ROTARY,
        _rotary(
            _PAIRS.replace("'halves'", "'adjacent'")
            + "    y1 = x1 * cos - x2 * sin\n    y2 = x2 * cos + x1 * sin\n"
            + _JOIN.replace("'halves'", "'adjacent'")
        ),
        (T_ROTARY,),
        "pairing='halves' pairs feature i with feature i + d_head / 2",
        mistake="pairing-ignored",
    ),
    Variant(
        "written_back_as_halves",
        ROTARY,
        _rotary(
            _PAIRS + "    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)\n"
        ),
        (T_ROTARY,),
        "writes the rotated pairs back in the 'halves' layout",
        mistake="written-back-in-other-layout",
    ),
    Variant(
        "cos_and_sin_swapped",
        ROTARY,
        _rotate("x1 * sin - x2 * cos", "x2 * sin + x1 * cos"),
        (T_ROTARY,),
        "cos and sin are swapped",
        mistake="cos-and-sin-swapped",
    ),
    Variant(
        "no_sine",
        ROTARY,
        _rotate("x1 * cos", "x2 * cos"),
        (T_ROTARY,),
        "there is no sine term",
        mistake="no-sine",
    ),
    Variant(
        "both_plus",
        ROTARY,
        _rotate("x1 * cos + x2 * sin", "x2 * cos + x1 * sin"),
        (T_ROTARY,),
        "a plus sign in both features",
        mistake="both-plus",
    ),
    Variant(
        "outputs_swapped",
        ROTARY,
        _rotate("x2 * cos + x1 * sin", "x1 * cos - x2 * sin"),
        (T_ROTARY,),
        "written back swapped",
        mistake="outputs-swapped",
    ),
    Variant(
        "rotate_half_repeat_interleave",
        ROTARY,
        _rotary(
            "    c = cos.repeat_interleave(2, dim=-1)\n"
            "    s = sin.repeat_interleave(2, dim=-1)\n"
            "    if pairing == 'halves':\n"
            "        x1, x2 = x.chunk(2, dim=-1)\n"
            "        turned = torch.cat((-x2, x1), dim=-1)\n"
            "    else:\n"
            "        turned = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)\n"
            "    return x * c + turned * s\n"
        ),
        (T_ROTARY,),
        "spread over the d_head features in the 'adjacent' way",
        mistake="angles-spread-wrongly",
    ),
    Variant(
        "rotate_half_sign",
        ROTARY,
        _rotary(
            "    x1, x2 = x.chunk(2, dim=-1)\n"
            "    c, s = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)\n"
            "    if pairing == 'halves':\n"
            "        return x * c + torch.cat((x2, -x1), dim=-1) * s\n"
            "    a, b = x[..., 0::2], x[..., 1::2]\n"
            "    return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)\n"
        ),
        (T_ROTARY,),
        "rotates each pair the wrong way",
        mistake="wrong-way",
    ),
    Variant(
        "in_place",
        ROTARY,
        _rotary(
            "    half = x.shape[-1] // 2\n"
            "    x1, x2 = x[..., :half].clone(), x[..., half:].clone()\n"
            "    if pairing == 'adjacent':\n"
            "        x1, x2 = x[..., 0::2].clone(), x[..., 1::2].clone()\n"
            "        x[..., 0::2] = x1 * cos - x2 * sin\n"
            "        x[..., 1::2] = x2 * cos + x1 * sin\n"
            "        return x\n"
            "    x[..., :half] = x1 * cos - x2 * sin\n"
            "    x[..., half:] = x2 * cos + x1 * sin\n"
            "    return x\n"
        ),
        (T_ROTARY,),
        "in place",
        mistake="in-place",
    ),
]

_ROTARY_CORRECT = [
    Variant(
        "rotate_half",
        ROTARY,
        _rotary(
            "    if pairing == 'halves':\n"
            "        c, s = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)\n"
            "        x1, x2 = x.chunk(2, dim=-1)\n"
            "        turned = torch.cat((-x2, x1), dim=-1)\n"
            "    else:\n"
            "        c, s = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)\n"
            "        turned = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)\n"
            "    return x * c + turned * s\n"
        ),
    ),
    Variant(
        "complex_numbers",
        ROTARY,
        _rotary(
            "    turn = torch.complex(cos, sin)  # e^{i angle}, (L, d_head/2)\n"
            "    if pairing == 'adjacent':\n"
            "        pairs = torch.view_as_complex(x.unflatten(-1, (-1, 2)).contiguous())\n"
            "        return torch.view_as_real(pairs * turn).flatten(-2)\n"
            "    x1, x2 = x.chunk(2, dim=-1)\n"
            "    z = torch.complex(x1, x2) * turn\n"
            "    return torch.cat((z.real, z.imag), dim=-1)\n"
        ),
    ),
    Variant(
        "permuted_to_halves",
        ROTARY,
        _rotary(
            "    d = x.shape[-1]\n"
            "    order = torch.arange(d)\n"
            "    if pairing == 'adjacent':  # 0, 2, 4, ..., 1, 3, 5, ...: the halves layout\n"
            "        order = torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))\n"
            "    h = x[..., order]\n"
            "    a, b = h[..., : d // 2], h[..., d // 2 :]\n"
            "    rotated = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)\n"
            "    return rotated[..., torch.argsort(order)]\n"
        ),
    ),
    Variant(
        "rotation_matrices",
        ROTARY,
        _rotary(
            "    R = torch.stack((torch.stack((cos, -sin), -1), torch.stack((sin, cos), -1)), -2)\n"
            "    if pairing == 'halves':\n"
            "        pairs = torch.stack(x.chunk(2, dim=-1), dim=-1)  # (..., L, d/2, 2)\n"
            "    else:\n"
            "        pairs = x.unflatten(-1, (-1, 2))\n"
            "    turned = (R @ pairs.unsqueeze(-1)).squeeze(-1)  # (..., L, d/2, 2)\n"
            "    if pairing == 'halves':\n"
            "        return torch.cat(turned.unbind(-1), dim=-1)\n"
            "    return turned.flatten(-2)\n"
        ),
    ),
]

# --- exercise 4: sliding_window_mask -------------------------------------------------------------

_DISTANCE = "    i = torch.arange(length)\n    offset = i[:, None] - i[None, :]\n"


def _band(condition: str) -> str:
    return _window(_DISTANCE + f"    return {condition}\n")


_WINDOW_BUGGY = [
    Variant(
        "off_by_one",
        WINDOW,
        _band("offset.abs() < window // 2"),
        (T_WINDOW, T_LAYER),
        "one key too narrow",
        also_says=(
            ("test_modern_encoder_layer", "this comes from your sliding_window_mask (exercise 4)"),
        ),
        mistake="off-by-one",
    ),
    Variant(
        "window_as_half_width",
        WINDOW,
        _band("offset.abs() <= window"),
        (T_WINDOW, T_LAYER),
        "takes window as the half-width",
        mistake="window-as-half-width",
    ),
    Variant(
        "keys_before_only",
        WINDOW,
        _band("(offset >= 0) & (offset <= window // 2)"),
        (T_WINDOW, T_LAYER),
        "only lets a query see the keys before it",
        mistake="keys-before-only",
    ),
    Variant(
        "keys_after_only",
        WINDOW,
        _band("(offset <= 0) & (offset >= -(window // 2))"),
        (T_WINDOW, T_LAYER),
        "only lets a query see the keys after it",
        mistake="keys-after-only",
    ),
    Variant(
        "one_sided_triangles",
        WINDOW,
        _window("    return torch.ones(length, length, dtype=torch.bool).tril().triu(-window)\n"),
        (T_WINDOW, T_LAYER),
        "one-sided",
        mistake="one-sided",
    ),
    Variant(
        "less_than_window",
        WINDOW,
        _band("offset.abs() < window"),
        (T_WINDOW, T_LAYER),
        "up to window - 1",
        mistake="less-than-window",
    ),
    Variant(
        "polarity_reversed",
        WINDOW,
        _band("offset.abs() > window // 2"),
        (T_WINDOW, T_LAYER),
        "wrong polarity",
        mistake="polarity-reversed",
    ),
    Variant(
        "float_mask",
        WINDOW,
        _band("(offset.abs() <= window // 2).float()"),
        (T_WINDOW, T_LAYER),
        "must be boolean",
        mistake="dtype",
    ),
    Variant(
        "batched",
        WINDOW,
        _band("(offset.abs() <= window // 2)[None]"),
        (T_WINDOW,),
        "plain (L, L) mask",
        mistake="mask-not-plain",
    ),
]

_WINDOW_CORRECT = [
    Variant(
        "triangles",
        WINDOW,
        _window(
            "    half = window // 2\n"
            "    return torch.ones(length, length, dtype=torch.bool).triu(-half).tril(half)\n"
        ),
    ),
    Variant(
        "loops",
        WINDOW,
        _window(
            "    mask = torch.zeros(length, length, dtype=torch.bool)\n"
            "    for i in range(length):\n"
            "        for j in range(length):\n"
            "            mask[i, j] = abs(i - j) * 2 <= window\n"
            "    return mask\n"
        ),
    ),
    Variant(
        "transposed_column",
        WINDOW,
        _window(
            "    column = torch.arange(length).unsqueeze(1)\n"
            "    return (column - column.T).abs().le(window / 2)\n"
        ),
    ),
]

# --- exercise 5: ModernEncoderLayer --------------------------------------------------------------

_LAYER_BUGGY = [
    Variant(
        "post_norm",
        LAYER,
        _layer(
            _MASK
            + _QKV.replace("h = self.norm1(x)", "h = x")
            + _ROTATE
            + _ATTEND
            + "        x = self.norm1(x + self.dropout1(self.out_proj(attended)))\n"
            "        return self.norm2(x + self.dropout2(self.ffn(x)))\n"
        ),
        (T_LAYER,),
        "post-norm",
        mistake="post-norm",
    ),
    Variant(
        "normalised_skip",
        LAYER,
        _layer(
            _MASK
            + _QKV.replace("h = self.norm1(x)", "x = h = self.norm1(x)")
            + _ROTATE
            + _ATTEND
            + "        x = x + self.dropout1(self.out_proj(attended))\n"
            "        h = self.norm2(x)\n"
            "        return h + self.dropout2(self.ffn(h))\n"
        ),
        (T_LAYER,),
        "residual adds the normalised x",
        mistake="normalised-skip",
    ),
    Variant(
        "norm1_twice",
        LAYER,
        _layer_with("self.ffn(self.norm2(x))", "self.ffn(self.norm1(x))"),
        (T_LAYER,),
        "uses norm1 before the feed-forward network too",
        mistake="norm1-twice",
    ),
    Variant(
        "no_residual_around_attention",
        LAYER,
        _layer_with(
            "x = x + self.dropout1(self.out_proj(attended))",
            "x = self.dropout1(self.out_proj(attended))",
        ),
        (T_LAYER,),
        "around the attention is missing",
        mistake="no-residual-around-attention",
    ),
    Variant(
        "no_residual_around_ffn",
        LAYER,
        _layer_with(
            "return x + self.dropout2(self.ffn(self.norm2(x)))",
            "return self.dropout2(self.ffn(self.norm2(x)))",
        ),
        (T_LAYER,),
        "around the feed-forward network is missing",
        mistake="no-residual-around-ffn",
    ),
    Variant(
        "queries_only_rotated",
        LAYER,
        _layer_with(_ROTATE, "        q, _ = self.rotary(q, k)\n"),
        (T_LAYER,),
        "only the queries are rotated",
        mistake="queries-only-rotated",
    ),
    Variant(
        "values_rotated",
        LAYER,
        _layer_with(_ROTATE, _ROTATE + "        v, _ = self.rotary(v, v)\n"),
        (T_LAYER,),
        "the values are rotated too",
        mistake="values-rotated",
    ),
    Variant(
        "no_rotary",
        LAYER,
        _layer_with(_ROTATE, ""),
        (T_LAYER,),
        "there are no rotary positions",
        mistake="no-rotary",
    ),
    Variant(
        "output_rotated",
        LAYER,
        _layer_with(
            _ROTATE + _ATTEND,
            _ATTEND.replace(
                "        attended = attended.transpose",
                "        attended, _ = self.rotary(attended, attended)\n"
                "        attended = attended.transpose",
            ),
        ),
        (T_LAYER,),
        "rotates the attention's output",
        mistake="output-rotated",
    ),
    Variant(
        "mask_or_window",
        LAYER,
        _layer_with("mask & band", "mask | band"),
        (T_LAYER,),
        "with OR",
        mistake="mask-or-window",
    ),
    Variant(
        "window_ignored",
        LAYER,
        _layer_with(
            "        if self.window is not None:\n"
            "            band = sliding_window_mask(L, self.window).to(x.device)\n"
            "            mask = band if mask is None else mask & band\n",
            "",
        ),
        (T_LAYER,),
        "the window is ignored",
        mistake="window-ignored",
    ),
    Variant(
        "padding_ignored_in_local_layers",
        LAYER,
        _layer_with("band if mask is None else mask & band", "band"),
        (T_LAYER,),
        "ignores the padding mask",
        mistake="padding-ignored",
    ),
    Variant(
        "mask_inverted",
        LAYER,
        _layer_with("attn_mask=mask", "attn_mask=None if mask is None else ~mask"),
        (T_LAYER,),
        "inverts the padding mask",
        mistake="mask-inverted",
    ),
    Variant(
        "own_band_off_by_one",
        LAYER,
        _layer_with(
            "band = sliding_window_mask(L, self.window).to(x.device)",
            "i = torch.arange(L)\n"
            "            band = (i[:, None] - i[None, :]).abs() < self.window // 2",
        ),
        (T_LAYER,),
        "check exercise 4 first",
        mistake="band-off-by-one",
    ),
    Variant(
        "heads_without_transpose",
        LAYER,
        _layer(
            _MASK
            + _QKV.replace("view(B, L, H, d_head).transpose(1, 2)", "reshape(B, H, L, d_head)")
            + _ROTATE
            + _ATTEND.replace("attended.transpose(1, 2).reshape", "attended.reshape")
            + _RESIDUALS
        ),
        (T_LAYER,),
        "plain reshape",
        mistake="heads-without-transpose",
    ),
    Variant(
        "scaled_by_sqrt_d_model",
        LAYER,
        _layer_with("attn_mask=mask, dropout_p=p)", "attn_mask=mask, dropout_p=p, scale=D**-0.5)"),
        (T_LAYER,),
        "sqrt(D)",
        mistake="scaled-by-sqrt-d-model",
    ),
    Variant(
        "no_attention_dropout",
        LAYER,
        _layer_with("dropout_p=p", "dropout_p=0.0"),
        (T_LAYER,),
        "the attention weights get no dropout",
        mistake="no-attention-dropout",
    ),
    Variant(
        "attention_dropout_in_eval",
        LAYER,
        _layer_with("dropout_p=p", "dropout_p=self.attn_dropout"),
        (T_LAYER,),
        "in eval mode too",
        mistake="attention-dropout-in-eval",
    ),
    Variant(
        "no_dropout1",
        LAYER,
        _layer_with("self.dropout1(self.out_proj(attended))", "self.out_proj(attended)"),
        (T_LAYER,),
        "self.dropout1",
        mistake="no-dropout1",
    ),
    Variant(
        "no_dropout2",
        LAYER,
        _layer_with("self.dropout2(self.ffn(self.norm2(x)))", "self.ffn(self.norm2(x))"),
        (T_LAYER,),
        "self.dropout2",
        mistake="no-dropout2",
    ),
    Variant(
        "no_dropout_at_all",
        LAYER,
        _layer(
            _MASK
            + _QKV
            + _ROTATE
            + _ATTEND.replace("dropout_p=p", "dropout_p=0.0")
            + "        x = x + self.out_proj(attended)\n"
            "        return x + self.ffn(self.norm2(x))\n"
        ),
        (T_LAYER,),
        "applies no dropout in training mode",
        mistake="no-dropout-at-all",
    ),
]

_LAYER_CORRECT = [
    Variant(
        "hand_written_attention",
        LAYER,
        _layer(
            "        B, L, D = x.shape\n"
            "        if self.window is not None:\n"
            "            band = encoder_lib.sliding_window_mask(L, self.window)\n"
            "            mask = band if mask is None else torch.logical_and(mask, band)\n"
            "        h = self.norm1(x)\n"
            "        heads = [proj(h).unflatten(-1, (self.num_heads, self.d_head)).movedim(2, 1)\n"
            "                 for proj in (self.q_proj, self.k_proj, self.v_proj)]\n"
            "        q, k = self.rotary(heads[0], heads[1])\n"
            "        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)\n"
            "        if mask is not None:\n"
            "            scores = scores.masked_fill(~mask, float('-inf'))\n"
            "        weights = scores.softmax(dim=-1)\n"
            "        weights = F.dropout(weights, self.attn_dropout, self.training)\n"
            "        attended = (weights @ heads[2]).movedim(1, 2).flatten(2)\n"
            "        x = x + self.dropout1(self.out_proj(attended))\n"
            "        return x + self.dropout2(self.ffn(self.norm2(x)))\n"
        ),
    ),
    Variant(
        "library_attention",
        LAYER,
        _layer(
            "        B, L, D = x.shape\n"
            "        if self.window is not None:\n"
            "            near = sliding_window_mask(L, self.window)\n"
            "            mask = near if mask is None else mask * near\n"
            "        h = self.norm1(x)\n"
            "        split = lambda t: t.reshape(B, L, self.num_heads, -1).permute(0, 2, 1, 3)\n"
            "        q, k = split(self.q_proj(h)), split(self.k_proj(h))\n"
            "        v = split(self.v_proj(h))\n"
            "        q, k = self.rotary(q, k)\n"
            "        p = self.attn_dropout if self.training else 0.0\n"
            "        out, _ = encoder_lib.scaled_dot_product_attention(q, k, v, mask, p)\n"
            "        h = self.dropout1(self.out_proj(out.permute(0, 2, 1, 3).reshape(B, L, D)))\n"
            "        x = x + h\n"
            "        h = self.ffn(self.norm2(x))\n"
            "        return x + self.dropout2(h)\n"
        ),
    ),
    Variant(
        "attention_method",
        LAYER,
        _layer(
            "        return self._feed_forward(x + self._attention(x, mask))\n"
            "\n"
            "    def _attention(self, x, mask):\n"
            "        B, L, D = x.shape\n"
            "        if self.window:\n"
            "            i = torch.arange(L, device=x.device)\n"
            "            local = (i[None, :] - i[:, None]).abs() * 2 <= self.window\n"
            "            mask = local if mask is None else mask & local\n"
            "        h = self.norm1(x)\n"
            "        q, k, v = (p(h).view(B, L, self.num_heads, self.d_head).transpose(1, 2)\n"
            "                   for p in (self.q_proj, self.k_proj, self.v_proj))\n"
            "        q, k = self.rotary(q, k)\n"
            "        out = F.scaled_dot_product_attention(\n"
            "            q, k, v, attn_mask=mask,\n"
            "            dropout_p=self.attn_dropout if self.training else 0.0)\n"
            "        return self.dropout1(self.out_proj(out.transpose(1, 2).reshape(B, L, D)))\n"
            "\n"
            "    def _feed_forward(self, x):\n"
            "        return x + self.dropout2(self.ffn(self.norm2(x)))\n"
        ),
    ),
]

BUGGY = _RMS_BUGGY + _GATED_BUGGY + _ROTARY_BUGGY + _WINDOW_BUGGY + _LAYER_BUGGY
CORRECT = _RMS_CORRECT + _GATED_CORRECT + _ROTARY_CORRECT + _WINDOW_CORRECT + _LAYER_CORRECT

# --- answers that make the rest of the catalogue (tests/grading/checks/test_catalogue.py) -------


def _own_band(condition: str) -> str:
    """The solution's layer building its window band itself, as ``condition`` on ``offset``
    (query position minus key position) and ``half`` (window / 2)."""
    return _layer_with(
        "            band = sliding_window_mask(L, self.window).to(x.device)\n",
        "            i = torch.arange(L, device=x.device)\n"
        "            offset = i[:, None] - i[None, :]  # (L, L): query minus key\n"
        "            half = self.window // 2\n"
        f"            band = {condition}\n",
    )


BUGGY += [
    Variant(
        "centred_and_eps_outside",
        RMS,
        _rms(
            "    x = x - x.mean(dim=-1, keepdim=True)\n"
            "    return x / (x.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps) * weight\n"
        ),
        (T_RMS,),
        "puts eps outside the square root",
        mistake="layer-norm-eps-outside",
    ),
    Variant(
        "rms_over_sequence",
        RMS,
        _rms("    return x / torch.sqrt(x.pow(2).mean(dim=1, keepdim=True) + eps) * weight\n"),
        (T_RMS,),
        "the sequence axis (dim 1)",
        mistake="normalises-over-sequence",
    ),
    Variant(
        "rms_over_whole_sequence",
        RMS,
        _rms(
            "    dims = tuple(range(1, x.dim()))\n"
            "    return x / torch.sqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps) * weight\n"
        ),
        (T_RMS,),
        "all the features of a whole sequence at once",
        mistake="normalises-over-whole-sequence",
    ),
    Variant(
        "rms_over_everything",
        RMS,
        _rms("    return x / torch.sqrt(x.pow(2).mean() + eps) * weight\n"),
        (T_RMS,),
        "the whole tensor at once",
        mistake="normalises-over-everything",
    ),
    Variant(
        "only_linear_half",
        GATED,
        _gate("self.dropout(b)"),
        (T_GATED,),
        "only the second (linear) half reaches wo",
        mistake="only-linear-half",
    ),
    Variant(
        "sigmoid_on_first_half",
        GATED,
        _gate("self.dropout(torch.sigmoid(a) * b)"),
        (T_GATED,),
        "it uses a sigmoid on the first half",
        mistake="sigmoid-activation",
    ),
    Variant(
        "dropout_on_linear_half",
        GATED,
        _gate("self.activation(a) * self.dropout(b)"),
        (T_GATED,),
        "dropout is applied to the linear half",
        mistake="dropout-on-linear-half",
    ),
    Variant(
        "both_minus",
        ROTARY,
        _rotate("x1 * cos - x2 * sin", "x2 * cos - x1 * sin"),
        (T_ROTARY,),
        "minus sign in both features",
        mistake="both-minus",
    ),
    Variant(
        "pairings_swapped_and_wrong_way",
        ROTARY,
        _rotary(
            _PAIRS.replace("'halves'", "'adjacent'")
            + "    y1 = x1 * cos + x2 * sin\n    y2 = x2 * cos - x1 * sin\n"
            + _JOIN.replace("'halves'", "'adjacent'")
        ),
        (T_ROTARY,),
        "and it rotates the wrong way",
        mistake="pairing-ignored-and-wrong-way",
    ),
    Variant(
        "read_in_other_layout",
        ROTARY,
        _rotary(
            _PAIRS.replace("'halves'", "'adjacent'")
            + "    y1 = x1 * cos - x2 * sin\n    y2 = x2 * cos + x1 * sin\n"
            + _JOIN
        ),
        (T_ROTARY,),
        "it reads the pairs in the",
        mistake="read-in-other-layout",
    ),
    Variant(
        "outside_and_one_narrower",
        WINDOW,
        _band("offset.abs() >= window // 2"),
        (T_WINDOW, T_LAYER),
        "wrong polarity and is one key too narrow",
        mistake="polarity-reversed-and-off-by-one",
    ),
    Variant(
        "layer_no_norm",
        LAYER,
        _layer_with("        h = self.norm1(x)\n", "        h = x\n").replace(
            "self.ffn(self.norm2(x))", "self.ffn(x)"
        ),
        (T_LAYER,),
        "never applies norm1 and norm2",
        mistake="no-norm",
    ),
    Variant(
        "layer_no_residual",
        LAYER,
        _layer_with(
            _RESIDUALS,
            "        x = self.dropout1(self.out_proj(attended))\n"
            "        return self.dropout2(self.ffn(self.norm2(x)))\n",
        ),
        (T_LAYER,),
        "there is no residual",
        mistake="no-residual",
    ),
    Variant(
        "layer_keys_only_rotated",
        LAYER,
        _layer_with(_ROTATE, "        _, k = self.rotary(q, k)\n"),
        (T_LAYER,),
        "only the keys are rotated",
        mistake="keys-only-rotated",
    ),
    Variant(
        "layer_band_too_wide",
        LAYER,
        _own_band("offset.abs() <= self.window"),
        (T_LAYER,),
        "twice too wide",
        mistake="band-too-wide",
    ),
    Variant(
        "layer_band_before_only",
        LAYER,
        _own_band("(offset >= 0) & (offset <= half)"),
        (T_LAYER,),
        "only the keys before it",
        mistake="band-before-only",
    ),
    Variant(
        "layer_band_after_only",
        LAYER,
        _own_band("(offset <= 0) & (offset >= -half)"),
        (T_LAYER,),
        "only the keys after it",
        mistake="band-after-only",
    ),
    Variant(
        "layer_band_reversed",
        LAYER,
        _own_band("offset.abs() > half"),
        (T_LAYER,),
        "the band has the wrong polarity",
        mistake="band-reversed",
    ),
]
