"""Answers to notebook 03 (layer normalisation and residual connections), written the way
students write them. See ``variants/__init__.py`` for what the fields mean."""

from __future__ import annotations

from variants import Variant

LN = "answer_layer_norm"
MODULE = "answer_layer_norm_module"
BLOCK = "answer_residual_block"
T_LN = ("test_layer_norm",)
T_MODULE = ("test_layer_norm_module",)
T_BLOCK = ("test_residual_block",)


def _fn(body: str) -> str:
    """A complete exercise-1 cell around ``body`` (4-space indented lines)."""
    return "def layer_norm(x, weight, bias, eps=1e-5):\n" + body


def _module(forward_body: str, init_body: str | None = None) -> str:
    """A complete exercise-2 cell: the given __init__ (or ``init_body``) and ``forward_body``."""
    init = init_body or (
        "        super().__init__()\n"
        "        self.eps = eps\n"
        "        self.weight = nn.Parameter(torch.ones(d_model))\n"
        "        self.bias = nn.Parameter(torch.zeros(d_model))\n"
    )
    return (
        "class LayerNorm(nn.Module):\n"
        "    def __init__(self, d_model, eps=1e-5):\n"
        f"{init}\n"
        "    def forward(self, x):\n"
        f"{forward_body}"
    )


def _block(body: str) -> str:
    return "def residual_block(x, sublayer, norm, norm_first=False):\n" + body


BUGGY = [
    # --- exercise 1: layer_norm --------------------------------------------------------------
    Variant(
        "unbiased_variance",
        LN,
        _fn(
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = x.var(dim=-1, keepdim=True)\n"
            "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"
        ),
        T_LN,
        "unbiased",
        mistake="unbiased-variance",
    ),
    Variant(
        "unbiased_variance_explicit_d_minus_1",
        LN,
        _fn(
            "    D = x.shape[-1]\n"
            "    mean = x.sum(dim=-1, keepdim=True) / D\n"
            "    var = ((x - mean) ** 2).sum(dim=-1, keepdim=True) / (D - 1)\n"
            "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"
        ),
        T_LN,
        "D - 1",
        mistake="unbiased-variance",
    ),
    Variant(
        "std_plus_eps",
        LN,
        _fn(
            "    mean = x.mean(-1, keepdim=True)\n"
            "    std = x.std(-1, keepdim=True)\n"
            "    return weight * (x - mean) / (std + eps) + bias\n"
        ),
        T_LN,
        "std + eps",
        mistake="std-plus-eps",
    ),
    Variant(
        "std_without_eps",
        LN,
        _fn(
            "    mean = x.mean(-1, keepdim=True)\n"
            "    return (x - mean) / x.std(-1, keepdim=True) * weight + bias\n"
        ),
        T_LN,
        "no eps",
        mistake="unbiased-std-no-eps",
    ),
    Variant(
        "biased_std_without_eps",
        LN,
        _fn(
            "    mean = x.mean(-1, keepdim=True)\n"
            "    std = x.std(-1, keepdim=True, unbiased=False)\n"
            "    return (x - mean) / std * weight + bias\n"
        ),
        T_LN,
        "no eps",
        mistake="no-eps",
    ),
    Variant(
        "eps_outside_sqrt",
        LN,
        _fn(
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            "    return (x - mean) / (torch.sqrt(var) + eps) * weight + bias\n"
        ),
        T_LN,
        "outside the square root",
        mistake="eps-outside-sqrt",
    ),
    Variant(
        "eps_argument_ignored",
        LN,
        _fn(
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            "    return (x - mean) / torch.sqrt(var + 1e-5) * weight + bias\n"
        ),
        T_LN,
        "ignores the `eps` argument",
        mistake="eps-ignored",
    ),
    Variant(
        "no_gain_no_offset",
        LN,
        _fn(
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            "    return (x - mean) / torch.sqrt(var + eps)\n"
        ),
        T_LN,
        "ignores weight and bias",
        mistake="no-weight-no-bias",
    ),
    Variant(
        "no_gain",
        LN,
        _fn(
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            "    return (x - mean) / torch.sqrt(var + eps) + bias\n"
        ),
        T_LN,
        "ignores weight",
        mistake="no-weight",
    ),
    Variant(
        "no_offset",
        LN,
        _fn(
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            "    return (x - mean) / torch.sqrt(var + eps) * weight\n"
        ),
        T_LN,
        "ignores bias",
        mistake="no-bias",
    ),
    Variant(
        "offset_before_gain",
        LN,
        _fn(
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            "    return ((x - mean) / torch.sqrt(var + eps) + bias) * weight\n"
        ),
        T_LN,
        "before multiplying",
        mistake="bias-before-weight",
    ),
    Variant(
        "batch_axis",
        LN,
        _fn(
            "    mean = x.mean(dim=0, keepdim=True)\n"
            "    var = x.var(dim=0, unbiased=False, keepdim=True)\n"
            "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"
        ),
        T_LN,
        "wrong axis",
        mistake="normalises-over-batch",
    ),
    Variant(
        "sequence_axis",
        LN,
        _fn(
            "    mean = x.mean(dim=1, keepdim=True)\n"
            "    var = x.var(dim=1, unbiased=False, keepdim=True)\n"
            "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"
        ),
        T_LN,
        "wrong axis",
        mistake="normalises-over-sequence",
    ),
    Variant(
        "sequence_axis_unbiased",
        LN,
        _fn(
            "    mean = x.mean(dim=1, keepdim=True)\n"
            "    std = x.std(dim=1, keepdim=True)\n"
            "    return (x - mean) / (std + eps) * weight + bias\n"
        ),
        T_LN,
        "wrong axis",
        mistake="normalises-over-wrong-axis",
    ),
    Variant(
        "whole_sequence",
        LN,
        _fn(
            "    mean = x.mean(dim=(-2, -1), keepdim=True)\n"
            "    var = x.var(dim=(-2, -1), unbiased=False, keepdim=True)\n"
            "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"
        ),
        T_LN,
        "wrong axis",
        mistake="normalises-over-whole-sequence",
    ),
    Variant(
        "mean_not_subtracted",
        LN,
        _fn(
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            "    return x / torch.sqrt(var + eps) * weight + bias\n"
        ),
        T_LN,
        "mean 0",
        mistake="not-centred",
    ),
    Variant(
        "hard_coded_dim_2",
        LN,
        _fn(
            "    mean = x.mean(dim=2, keepdim=True)\n"
            "    var = ((x - mean) ** 2).mean(dim=2, keepdim=True)\n"
            "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"
        ),
        T_LN,
        "dim=-1",
        mistake="fixed-rank",
    ),
    Variant(
        "modifies_x_in_place",
        LN,
        _fn(
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    x -= mean\n"
            "    var = (x ** 2).mean(dim=-1, keepdim=True)\n"
            "    return x / torch.sqrt(var + eps) * weight + bias\n"
        ),
        T_LN,
        "in place",
        mistake="in-place",
    ),
    Variant(
        "detached",
        LN,
        _fn(
            "    x = x.detach()\n"
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            "    return (x - mean) / torch.sqrt(var + eps) * weight.detach() + bias.detach()\n"
        ),
        T_LN,
        "autograd",
        mistake="no-grad",
    ),
    Variant(
        "returns_float32",
        LN,
        _fn(
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            "    return ((x - mean) / torch.sqrt(var + eps) * weight + bias).float()\n"
        ),
        T_LN,
        "dtype",
        mistake="dtype",
    ),
    Variant(
        "returns_tuple",
        LN,
        _fn(
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            "    return (x - mean) / torch.sqrt(var + eps) * weight + bias, mean, var\n"
        ),
        T_LN,
        "should be a torch.Tensor",
        mistake="not-a-tensor",
    ),
    Variant(
        "calls_F_layer_norm",
        LN,
        _fn("    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)\n"),
        T_LN,
        "F.layer_norm",
        mistake="forbidden-built-in",
    ),
    Variant(
        "calls_torch_layer_norm",
        LN,
        _fn("    return torch.layer_norm(x, (x.shape[-1],), weight, bias, eps)\n"),
        T_LN,
        "torch.layer_norm",
        mistake="forbidden-built-in",
    ),
    Variant(
        "uses_nn_LayerNorm",
        LN,
        _fn(
            "    ln = nn.LayerNorm(x.shape[-1], eps=eps).to(x.dtype)\n"
            "    with torch.no_grad():\n"
            "        ln.weight.copy_(weight)\n"
            "        ln.bias.copy_(bias)\n"
            "    return ln(x)\n"
        ),
        T_LN,
        "F.layer_norm",
        mistake="forbidden-built-in",
    ),
    Variant(
        "uses_group_norm",
        LN,
        _fn(
            "    flat = x.reshape(-1, x.shape[-1], 1)\n"
            "    out = F.group_norm(flat, 1, eps=eps).reshape(x.shape)\n"
            "    return out * weight + bias\n"
        ),
        T_LN,
        "F.group_norm",
        mistake="forbidden-built-in",
    ),
    Variant(
        "calls_native_layer_norm",
        LN,
        _fn("    return torch.native_layer_norm(x, (x.shape[-1],), weight, bias, eps)[0]\n"),
        T_LN,
        "torch.native_layer_norm",
        mistake="forbidden-built-in",
    ),
    Variant(
        "uses_instance_norm",
        LN,
        _fn(
            "    rows = x.reshape(1, -1, x.shape[-1])  # each position is a channel\n"
            "    return F.instance_norm(rows, eps=eps).reshape(x.shape) * weight + bias\n"
        ),
        T_LN,
        "F.instance_norm",
        mistake="forbidden-built-in",
    ),
    Variant(
        "uses_batch_norm",
        LN,
        _fn(
            "    columns = x.reshape(-1, x.shape[-1]).T  # (D, positions)\n"
            "    out = F.batch_norm(columns, None, None, training=True, eps=eps)\n"
            "    return out.T.reshape(x.shape) * weight + bias\n"
        ),
        T_LN,
        "F.batch_norm",
        mistake="forbidden-built-in",
    ),
    Variant(
        "uses_encoder_lib",
        LN,
        _fn(
            "    ln = encoder_lib.LayerNorm(x.shape[-1], eps).to(x.dtype)\n"
            "    with torch.no_grad():\n"
            "        ln.weight.copy_(weight)\n"
            "        ln.bias.copy_(bias)\n"
            "    return ln(x)\n"
        ),
        T_LN,
        "encoder_lib.layer_norm.LayerNorm",
        mistake="forbidden-built-in",
    ),
    # --- exercise 2: LayerNorm module ---------------------------------------------------------
    Variant(
        "module_unbiased_variance",
        MODULE,
        _module(
            "        mean = x.mean(-1, keepdim=True)\n"
            "        var = torch.var(x, -1, keepdim=True)\n"
            "        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias\n"
        ),
        T_MODULE,
        "unbiased",
        mistake="unbiased-variance",
    ),
    Variant(
        "module_eps_outside_sqrt",
        MODULE,
        _module(
            "        mean = x.mean(-1, keepdim=True)\n"
            "        std = x.std(-1, keepdim=True, unbiased=False)\n"
            "        return (x - mean) / (std + self.eps) * self.weight + self.bias\n"
        ),
        T_MODULE,
        "outside the square root",
        mistake="eps-outside-sqrt",
    ),
    Variant(
        "module_std_without_eps",
        MODULE,
        _module(
            "        mean = x.mean(-1, keepdim=True)\n"
            "        return self.weight * (x - mean) / x.std(-1, keepdim=True) + self.bias\n"
        ),
        T_MODULE,
        "no eps",
        mistake="unbiased-std-no-eps",
    ),
    Variant(
        "module_ignores_self_eps",
        MODULE,
        _module(
            "        mean = x.mean(-1, keepdim=True)\n"
            "        var = ((x - mean) ** 2).mean(-1, keepdim=True)\n"
            "        return (x - mean) / torch.sqrt(var + 1e-5) * self.weight + self.bias\n"
        ),
        T_MODULE,
        "ignores `self.eps`",
        mistake="eps-ignored",
    ),
    Variant(
        "module_no_gain_no_offset",
        MODULE,
        _module(
            "        mean = x.mean(-1, keepdim=True)\n"
            "        var = ((x - mean) ** 2).mean(-1, keepdim=True)\n"
            "        return (x - mean) / torch.sqrt(var + self.eps)\n"
        ),
        T_MODULE,
        "ignores self.weight and self.bias",
        mistake="no-weight-no-bias",
    ),
    Variant(
        "module_batch_axis",
        MODULE,
        _module(
            "        mean = x.mean(0, keepdim=True)\n"
            "        var = ((x - mean) ** 2).mean(0, keepdim=True)\n"
            "        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias\n"
        ),
        T_MODULE,
        "wrong axis",
        mistake="normalises-over-batch",
    ),
    Variant(
        "module_renamed_parameters",
        MODULE,
        _module(
            "        mean = x.mean(-1, keepdim=True)\n"
            "        var = ((x - mean) ** 2).mean(-1, keepdim=True)\n"
            "        return (x - mean) / torch.sqrt(var + self.eps) * self.gamma + self.beta\n",
            init_body=(
                "        super().__init__()\n"
                "        self.eps = eps\n"
                "        self.gamma = nn.Parameter(torch.ones(d_model))\n"
                "        self.beta = nn.Parameter(torch.zeros(d_model))\n"
            ),
        ),
        T_MODULE,
        "exactly two parameters, `weight` and `bias`",
        mistake="parameter-names",
    ),
    Variant(
        "module_uses_parameter_data",
        MODULE,
        _module(
            "        mean = x.mean(-1, keepdim=True)\n"
            "        var = ((x - mean) ** 2).mean(-1, keepdim=True)\n"
            "        x_hat = (x - mean) / torch.sqrt(var + self.eps)\n"
            "        return x_hat * self.weight.data + self.bias.data\n"
        ),
        T_MODULE,
        "self.weight.grad is None",
        mistake="gradient-missing",
    ),
    Variant(
        "module_calls_F_layer_norm",
        MODULE,
        _module("        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)\n"),
        T_MODULE,
        "F.layer_norm",
        mistake="forbidden-built-in",
    ),
    Variant(
        "module_wraps_nn_LayerNorm",
        MODULE,
        _module(
            "        ln = nn.LayerNorm(x.shape[-1], eps=self.eps).to(x)\n"
            "        ln.load_state_dict(self.state_dict())\n"
            "        return ln(x)\n"
        ),
        T_MODULE,
        "F.layer_norm",
        mistake="forbidden-built-in",
    ),
    Variant(
        "module_calls_encoder_lib",
        MODULE,
        _module(
            "        ln = encoder_lib.LayerNorm(x.shape[-1], self.eps).to(x)\n"
            "        ln.load_state_dict(self.state_dict())\n"
            "        return ln(x)\n"
        ),
        T_MODULE,
        "encoder_lib.layer_norm.LayerNorm",
        mistake="forbidden-built-in",
    ),
    # --- exercise 3: residual_block -----------------------------------------------------------
    Variant(
        "post_norm_without_residual",
        BLOCK,
        _block(
            "    if norm_first:\n"
            "        return x + sublayer(norm(x))\n"
            "    return norm(sublayer(x))\n"
        ),
        T_BLOCK,
        "missing the residual",
        mistake="no-residual",
    ),
    Variant(
        "pre_norm_without_residual",
        BLOCK,
        _block(
            "    if norm_first:\n"
            "        return sublayer(norm(x))\n"
            "    return norm(x + sublayer(x))\n"
        ),
        T_BLOCK,
        "missing the residual",
        mistake="no-residual",
    ),
    Variant(
        "sublayer_only",
        BLOCK,
        _block("    return sublayer(x)\n"),
        T_BLOCK,
        "missing the residual",
        mistake="no-residual-no-norm",
    ),
    Variant(
        "no_norm",
        BLOCK,
        _block("    return x + sublayer(x)\n"),
        T_BLOCK,
        "never applies the norm",
        mistake="no-norm",
    ),
    Variant(
        "pre_and_post_swapped",
        BLOCK,
        _block(
            "    if norm_first:\n"
            "        return norm(x + sublayer(x))\n"
            "    return x + sublayer(norm(x))\n"
        ),
        T_BLOCK,
        "wrong place",
        mistake="pre-norm-instead-of-post-norm",
    ),
    Variant(
        "always_post_norm",
        BLOCK,
        _block("    return norm(x + sublayer(x))\n"),
        T_BLOCK,
        "wrong place",
        mistake="post-norm-instead-of-pre-norm",
    ),
    Variant(
        "always_pre_norm",
        BLOCK,
        _block("    return x + sublayer(norm(x))\n"),
        T_BLOCK,
        "wrong place",
        mistake="pre-norm-instead-of-post-norm",
    ),
    Variant(
        "post_norm_twice",
        BLOCK,
        _block(
            "    if norm_first:\n"
            "        return x + sublayer(norm(x))\n"
            "    return norm(x + sublayer(norm(x)))\n"
        ),
        T_BLOCK,
        "norm twice",
        mistake="norm-twice",
    ),
    Variant(
        "pre_norm_twice",
        BLOCK,
        _block(
            "    if norm_first:\n"
            "        return norm(x + sublayer(norm(x)))\n"
            "    return norm(x + sublayer(x))\n"
        ),
        T_BLOCK,
        "norm twice",
        mistake="norm-twice",
    ),
    Variant(
        "norm_then_residual_of_normalised",
        BLOCK,
        _block(
            "    if norm_first:\n"
            "        x = norm(x)\n"
            "        return x + sublayer(x)\n"
            "    return norm(x + sublayer(x))\n"
        ),
        T_BLOCK,
        "normalised x",
        mistake="normalised-skip",
    ),
    Variant(
        "norm_on_sublayer_output",
        BLOCK,
        _block(
            "    if norm_first:\n"
            "        return x + norm(sublayer(x))\n"
            "    return norm(x + sublayer(x))\n"
        ),
        T_BLOCK,
        "sublayer's output",
        mistake="norm-on-sublayer-output",
    ),
    Variant(
        "adds_in_place",
        BLOCK,
        _block(
            "    if norm_first:\n"
            "        return x + sublayer(norm(x))\n"
            "    x += sublayer(x)\n"
            "    return norm(x)\n"
        ),
        T_BLOCK,
        "in place",
        mistake="in-place",
    ),
    Variant(
        "sublayer_called_twice",
        BLOCK,
        _block(
            "    if norm_first:\n"
            "        out = sublayer(norm(x))\n"
            "        return x + sublayer(norm(x))\n"
            "    return norm(x + sublayer(x))\n"
        ),
        T_BLOCK,
        "calls sublayer 2 times",
        mistake="sublayer-called-more-than-once",
    ),
    Variant(
        "residual_detached",
        BLOCK,
        _block(
            "    if norm_first:\n"
            "        return x.detach() + sublayer(norm(x))\n"
            "    return norm(x.detach() + sublayer(x))\n"
        ),
        T_BLOCK,
        "skip path",
        mistake="skip-path-detached",
    ),
]

CORRECT = [
    # --- exercise 1 ----------------------------------------------------------------------------
    Variant(
        "mean_of_squares_minus_squared_mean",
        LN,
        _fn(
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = (x * x).mean(dim=-1, keepdim=True) - mean ** 2\n"
            "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"
        ),
    ),
    Variant(
        "var_unbiased_false",
        LN,
        _fn(
            "    mean = torch.mean(x, -1, keepdim=True)\n"
            "    var = torch.var(x, dim=-1, unbiased=False, keepdim=True)\n"
            "    return weight * (x - mean) / torch.sqrt(var + eps) + bias\n"
        ),
    ),
    Variant(
        "var_correction_0_rsqrt",
        LN,
        _fn(
            "    mean = x.mean(-1, keepdim=True)\n"
            "    var = x.var(-1, correction=0, keepdim=True)\n"
            "    return (x - mean) * torch.rsqrt(var + eps) * weight + bias\n"
        ),
    ),
    Variant(
        "var_mean",
        LN,
        _fn(
            "    var, mean = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)\n"
            "    x_hat = (x - mean) / (var + eps).sqrt()\n"
            "    return torch.addcmul(bias, x_hat, weight)\n"
        ),
    ),
    Variant(
        "power_minus_half",
        LN,
        _fn(
            "    D = x.shape[-1]\n"
            "    mean = x.sum(-1, keepdim=True) / D\n"
            "    centred = x - mean\n"
            "    var = centred.pow(2).sum(-1, keepdim=True) / D\n"
            "    return centred * (var + eps) ** -0.5 * weight + bias\n"
        ),
    ),
    Variant(
        "std_of_biased_variance_with_math",
        LN,
        _fn(
            "    mu = x.mean(dim=x.dim() - 1).unsqueeze(-1)\n"
            "    sigma = torch.sqrt(((x - mu) ** 2).mean(dim=-1) + eps).unsqueeze(-1)\n"
            "    y = (x - mu) / sigma\n"
            "    return y * weight.view(*([1] * (x.dim() - 1)), -1) + bias\n"
        ),
    ),
    # --- exercise 2 ----------------------------------------------------------------------------
    Variant(
        "module_calls_layer_norm",
        MODULE,
        _module("        return layer_norm(x, self.weight, self.bias, self.eps)\n"),
    ),
    Variant(
        "module_written_out",
        MODULE,
        _module(
            "        mean = x.mean(dim=-1, keepdim=True)\n"
            "        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            "        x_hat = (x - mean) / torch.sqrt(var + self.eps)\n"
            "        return self.weight * x_hat + self.bias\n"
        ),
    ),
    Variant(
        "module_mean_of_squares",
        MODULE,
        _module(
            "        m = x.mean(-1, keepdim=True)\n"
            "        v = x.pow(2).mean(-1, keepdim=True) - m.pow(2)\n"
            "        return (x - m) * (v + self.eps).rsqrt() * self.weight + self.bias\n"
        ),
    ),
    # --- exercise 3 ----------------------------------------------------------------------------
    Variant(
        "block_one_liner",
        BLOCK,
        _block("    return x + sublayer(norm(x)) if norm_first else norm(x + sublayer(x))\n"),
    ),
    Variant(
        "block_shared_sum",
        BLOCK,
        _block(
            "    h = norm(x) if norm_first else x\n"
            "    out = x + sublayer(h)\n"
            "    if not norm_first:\n"
            "        out = norm(out)\n"
            "    return out\n"
        ),
    ),
    Variant(
        "block_explicit_branches",
        BLOCK,
        _block(
            "    if norm_first == True:\n"
            "        normed = norm(x)\n"
            "        update = sublayer(normed)\n"
            "        return x + update\n"
            "    else:\n"
            "        update = sublayer(x)\n"
            "        y = x + update\n"
            "        return norm(y)\n"
        ),
    ),
]

# --- answers that make the rest of the catalogue (tests/grading/checks/test_catalogue.py) -------


def _normalised(dims: str, eps: str = "self.eps") -> str:
    """The module's forward's first lines: x_hat over ``dims`` (biased variance)."""
    return (
        f"        mean = x.mean(dim={dims}, keepdim=True)\n"
        f"        var = x.var(dim={dims}, keepdim=True, unbiased=False)\n"
        f"        x_hat = (x - mean) / torch.sqrt(var + {eps})\n"
    )


_EVERYTHING = "tuple(range(x.dim()))"

BUGGY += [
    Variant(
        "over_everything",
        LN,
        _fn(
            "    mean = x.mean()\n"
            "    var = x.var(unbiased=False)\n"
            "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"
        ),
        T_LN,
        "over the whole tensor at once",
        mistake="normalises-over-everything",
    ),
    Variant(
        "module_std_plus_eps",
        MODULE,
        _module(
            "        mean = x.mean(-1, keepdim=True)\n"
            "        return (x - mean) / (x.std(-1, keepdim=True) + self.eps) * self.weight"
            " + self.bias\n"
        ),
        T_MODULE,
        "std + eps",
        mistake="std-plus-eps",
    ),
    Variant(
        "module_no_eps",
        MODULE,
        _module(_normalised("-1", eps="0") + "        return x_hat * self.weight + self.bias\n"),
        T_MODULE,
        "no eps at all",
        mistake="no-eps",
    ),
    Variant(
        "module_no_weight",
        MODULE,
        _module(_normalised("-1") + "        return x_hat + self.bias\n"),
        T_MODULE,
        "ignores self.weight",
        mistake="no-weight",
    ),
    Variant(
        "module_no_bias",
        MODULE,
        _module(_normalised("-1") + "        return x_hat * self.weight\n"),
        T_MODULE,
        "ignores self.bias",
        mistake="no-bias",
    ),
    Variant(
        "module_bias_before_weight",
        MODULE,
        _module(_normalised("-1") + "        return (x_hat + self.bias) * self.weight\n"),
        T_MODULE,
        "before multiplying",
        mistake="bias-before-weight",
    ),
    Variant(
        "module_over_sequence",
        MODULE,
        _module(_normalised("1") + "        return x_hat * self.weight + self.bias\n"),
        T_MODULE,
        "wrong axis",
        mistake="normalises-over-sequence",
    ),
    Variant(
        "module_over_whole_sequence",
        MODULE,
        _module(
            _normalised("tuple(range(1, x.dim()))")
            + "        return x_hat * self.weight + self.bias\n"
        ),
        T_MODULE,
        "whole sequence at once",
        mistake="normalises-over-whole-sequence",
    ),
    Variant(
        "module_over_everything",
        MODULE,
        _module(_normalised(_EVERYTHING) + "        return x_hat * self.weight + self.bias\n"),
        T_MODULE,
        "over the whole tensor at once",
        mistake="normalises-over-everything",
    ),
]


# --- PyTorch parameters held as plain tensors (issue 38) ------------------------------------------

BUGGY += [
    Variant(
        "module_plain_tensors",
        MODULE,
        _module(
            _normalised("-1") + "        return x_hat * self.weight + self.bias\n",
            init_body=(
                "        super().__init__()\n"
                "        self.eps = eps\n"
                "        self.weight = torch.ones(d_model)\n"
                "        self.bias = torch.zeros(d_model)\n"
            ),
        ),
        T_MODULE,
        "wraps each in nn.Parameter",
        mistake="parameter-names",
    ),
]
