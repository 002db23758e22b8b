"""Answers to notebook 4 (the position-wise feed-forward network), written as students write them.

Answer cells: ``answer_feed_forward`` (class FeedForward), ``answer_count_parameters`` and
``answer_gelu``; each has one test cell (``test_<name>``), and no answer uses another, so a wrong
answer costs only its own test cell. See ``variants/__init__.py`` for what the fields mean.
"""

from __future__ import annotations

import dataclasses
from textwrap import dedent, indent

from variants import Variant

FFN, COUNT, GELU = "answer_feed_forward", "answer_count_parameters", "answer_gelu"
T_FFN, T_COUNT, T_GELU = ("test_feed_forward",), ("test_count_parameters",), ("test_gelu",)

_FFN_HEAD = '''\
class FeedForward(nn.Module):
    """The position-wise feed-forward network: linear2(dropout(activation(linear1(x))))."""

    def __init__(self, d_model, d_ff, dropout=0.1, activation="relu"):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f'activation must be "relu" or "gelu", got {activation!r}')
        self.linear1 = nn.Linear(d_model, d_ff)  # D -> d_ff
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)  # d_ff -> D
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x):
'''


def _ffn(body: str) -> str:
    """The given class with ``body`` as the body of ``forward``."""
    return _FFN_HEAD + indent(dedent(body).strip("\n"), " " * 8) + "\n"


def _bad_ffn(name: str, body: str, says: str) -> Variant:
    return Variant(name, FFN, _ffn(body), T_FFN, says)


def _bad_count(name: str, body: str, says: str) -> Variant:
    source = "def count_parameters(d_model, d_ff):\n" + indent(dedent(body).strip("\n"), "    ")
    return Variant(name, COUNT, source + "\n", T_COUNT, says)


def _bad_gelu(name: str, body: str, says: str) -> Variant:
    source = "def gelu(x):\n" + indent(dedent(body).strip("\n"), "    ")
    return Variant(name, GELU, source + "\n", T_GELU, says)


BUGGY = [
    # --- FeedForward: the activation ---
    _bad_ffn(
        "no_activation",
        "return self.linear2(self.dropout(self.linear1(x)))",
        "activation is missing",
    ),
    _bad_ffn(
        "activation_after_linear2",
        "return self.activation(self.linear2(self.dropout(self.linear1(x))))",
        "applied after linear2 instead of between",
    ),
    _bad_ffn(
        "activation_twice",
        """
        hidden = self.dropout(self.activation(self.linear1(x)))
        return self.activation(self.linear2(hidden))
        """,
        "after linear2 as well",
    ),
    _bad_ffn(
        "activation_on_input",
        "return self.linear2(self.dropout(self.linear1(self.activation(x))))",
        "applied to the input x before linear1",
    ),
    _bad_ffn(
        "relu_always",
        "return self.linear2(self.dropout(F.relu(self.linear1(x))))",
        "ReLU although activation='gelu'",
    ),
    _bad_ffn(
        "relu_by_hand_always",
        "return self.linear2(self.dropout(torch.clamp(self.linear1(x), min=0)))",
        "ReLU although activation='gelu'",
    ),
    _bad_ffn(
        "gelu_tanh",
        """
        h = self.linear1(x)
        if self.activation is F.gelu:
            h = F.gelu(h, approximate="tanh")
        else:
            h = F.relu(h)
        return self.linear2(self.dropout(h))
        """,
        "tanh approximation",
    ),
    _bad_ffn(
        "residual_inside",
        "return x + self.linear2(self.dropout(self.activation(self.linear1(x))))",
        "residual connection",
    ),
    # --- FeedForward: dropout ---
    _bad_ffn(
        "dropout_in_eval_functional_default",
        """
        h = self.activation(self.linear1(x))
        return self.linear2(F.dropout(h, self.dropout.p))
        """,
        "still active in eval mode",
    ),
    _bad_ffn(
        "dropout_training_true",
        """
        h = self.activation(self.linear1(x))
        h = F.dropout(h, p=self.dropout.p, training=True)
        return self.linear2(h)
        """,
        "still active in eval mode",
    ),
    _bad_ffn(
        "dropout_missing",
        "return self.linear2(self.activation(self.linear1(x)))",
        "dropout is missing in training",
    ),
    _bad_ffn(
        "dropout_not_rescaled",
        """
        h = self.activation(self.linear1(x))
        if self.training:
            h = h * (torch.rand_like(h) >= self.dropout.p)
        return self.linear2(h)
        """,
        "not rescaled",
    ),
    _bad_ffn(
        "dropout_hard_coded_p",
        """
        h = self.activation(self.linear1(x))
        return self.linear2(F.dropout(h, 0.1, self.training))
        """,
        "instead of 1 / (1 - p)",
    ),
    _bad_ffn(
        "dropout_twice",
        "return self.linear2(self.dropout(self.dropout(self.activation(self.linear1(x)))))",
        "instead of 1 / (1 - p)",
    ),
    _bad_ffn(
        "dropout_keep_probability",
        """
        h = self.activation(self.linear1(x))
        return self.linear2(F.dropout(h, 1 - self.dropout.p, self.training))
        """,
        "keep probability 1 - p",
    ),
    _bad_ffn(
        "hand_mask_divides_by_p",
        """
        h = self.activation(self.linear1(x))
        if self.training:
            p = self.dropout.p
            h = h * (torch.rand_like(h) >= p) / p
        return self.linear2(h)
        """,
        "instead of 1 / (1 - p)",
    ),
    _bad_ffn(
        "hand_mask_in_eval_too",
        """
        h = self.activation(self.linear1(x))
        p = self.dropout.p
        return self.linear2(h * (torch.rand_like(h) >= p) / (1 - p))
        """,
        "still active in eval mode",
    ),
    _bad_ffn(
        # right values in both modes, but no gradient reaches linear1 (or x) while training:
        # only a gradient case in train mode sees it
        "dropout_under_no_grad",
        """
        h = self.activation(self.linear1(x))
        if self.training:
            with torch.no_grad():
                h = self.dropout(h)
        return self.linear2(h)
        """,
        "linear1.weight.grad is None",
    ),
    _bad_ffn(
        "dropout_on_output",
        "return self.dropout(self.linear2(self.activation(self.linear1(x))))",
        "dropout acts on linear2's output",
    ),
    _bad_ffn(
        "dropout_on_input",
        "return self.linear2(self.activation(self.linear1(self.dropout(x))))",
        "dropout belongs between the activation and linear2",
    ),
    _bad_ffn(
        # the same as the right order for ReLU (relu(m·z) = m·relu(z) for m >= 0); the hidden
        # test's GELU case tells them apart
        "dropout_before_gelu",
        "return self.linear2(self.activation(self.dropout(self.linear1(x))))",
        "dropout is applied before the activation",
    ),
    # --- FeedForward: shapes, types, structure ---
    _bad_ffn(
        "layers_in_wrong_order",
        "return self.linear1(self.dropout(self.activation(self.linear2(x))))",
        "check the order of your layers",
    ),
    _bad_ffn(
        "forgot_linear2",
        "return self.dropout(self.activation(self.linear1(x)))",
        "through linear2 back to D",
    ),
    _bad_ffn(
        "pooled_over_positions",
        "return self.linear2(self.dropout(self.activation(self.linear1(x)))).mean(dim=1)",
        "wrong shape",
    ),
    _bad_ffn(
        "only_three_dimensions",
        """
        B, L, D = x.shape
        h = self.dropout(self.activation(self.linear1(x.reshape(B * L, D))))
        return self.linear2(h).reshape(B, L, D)
        """,
        "any leading dimensions",
    ),
    _bad_ffn(
        "changes_dtype",
        "return self.linear2(self.dropout(self.activation(self.linear1(x)))).float()",
        "dtype",
    ),
    _bad_ffn(
        "detached_output",
        "return self.linear2(self.dropout(self.activation(self.linear1(x)))).detach()",
        "differentiable",
    ),
    _bad_ffn(
        "tensor_subclass",
        """
        class Sneaky(torch.Tensor):
            pass

        y = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return y.as_subclass(Sneaky)
        """,
        "Tensor subclass",
    ),
    _bad_ffn(
        "delegates_to_encoder_lib",
        """
        reference = encoder_lib.FeedForward(self.linear1.in_features, self.linear1.out_features)
        reference.load_state_dict(self.state_dict())
        return reference.to(x.dtype).train(self.training)(x)
        """,
        "already does what this exercise asks",
    ),
    Variant(
        "renamed_layers",
        FFN,
        """\
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1, activation="relu"):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x):
        return self.fc2(self.drop(self.activation(self.fc1(x))))
""",
        T_FFN,
        "Keep the given __init__",
        mistake="parameter-names",
    ),
    # --- count_parameters ---
    _bad_count("no_biases", "return 2 * d_model * d_ff", "left out the biases"),
    _bad_count("no_linear2_bias", "return 2 * d_model * d_ff + d_ff", "left out linear2's bias"),
    _bad_count(
        "bias_sizes_swapped_twice",
        "return 2 * d_model * d_ff + 2 * d_model",
        "linear1's bias has d_ff entries",
    ),
    _bad_count(
        "one_weight_matrix",
        "return d_model * d_ff + d_ff + d_model",
        "only one weight matrix",
    ),
    _bad_count(
        "assumes_four_d",
        """
        hidden = 4 * d_model  # the usual d_ff
        return 2 * d_model * hidden + hidden + d_model
        """,
        "assumed d_ff = 4·D",
    ),
    _bad_count(
        "returns_float",
        "return 2.0 * d_model * d_ff + d_ff + d_model",
        "should return a Python int",
    ),
    _bad_count(
        "returns_tensor",
        "return torch.tensor(2 * d_model * d_ff + d_ff + d_model)",
        "should return a Python int",
    ),
    _bad_count(
        "builds_the_module",
        "return sum(p.numel() for p in encoder_lib.FeedForward(d_model, d_ff).parameters())",
        "builds a module",
    ),
    _bad_count(
        "builds_linears",
        """
        layers = [nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)]
        return sum(p.numel() for layer in layers for p in layer.parameters())
        """,
        "builds a module",
    ),
    # --- gelu ---
    _bad_gelu(
        "tanh_approximation",
        "return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))",
        "tanh approximation",
    ),
    _bad_gelu(
        "sigmoid_approximation", "return x * torch.sigmoid(1.702 * x)", "sigmoid approximation"
    ),
    _bad_gelu("erf_without_sqrt2", "return 0.5 * x * (1 + torch.erf(x))", "evaluated at x/√2"),
    _bad_gelu(
        "erf_times_sqrt2",
        "return 0.5 * x * (1 + torch.erf(x * math.sqrt(2)))",
        "multiplied by √2 instead of dividing",
    ),
    _bad_gelu("missing_half", "return x * (1 + torch.erf(x / math.sqrt(2)))", "factor ½"),
    _bad_gelu(
        "cdf_only", "return 0.5 * (1 + torch.erf(x / math.sqrt(2)))", "Φ(x), the Gaussian CDF"
    ),
    _bad_gelu(
        "density_instead_of_cdf",
        "return x * torch.exp(-(x**2) / 2) / math.sqrt(2 * math.pi)",
        "density",
    ),
    _bad_gelu("erf_as_cdf", "return x * torch.erf(x / math.sqrt(2))", "2·Φ(x) - 1"),
    _bad_gelu("relu", "return torch.relu(x)", "this is ReLU"),
    _bad_gelu(
        "calls_f_gelu", "return F.gelu(x)", "F.gelu, which already does what this exercise asks"
    ),
    _bad_gelu("calls_nn_gelu", "return nn.GELU()(x)", "already does what this exercise asks"),
    _bad_gelu(
        "calls_aten_gelu",
        "return torch.ops.aten.gelu.default(x)",
        "already does what this exercise asks",
    ),
    _bad_gelu(
        "python_floats_wrong_dtype",
        """
        values = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.flatten().tolist()]
        return torch.tensor(values).reshape(x.shape)
        """,
        "dtype",
    ),
    _bad_gelu(
        "python_floats_no_gradient",
        """
        values = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.flatten().tolist()]
        return torch.tensor(values, dtype=x.dtype).reshape(x.shape)
        """,
        "does not require grad",
    ),
    _bad_gelu(
        "in_place",
        "return x.mul_(0.5 * (1 + torch.erf(x / math.sqrt(2))))",
        "changed its input in place",
    ),
    _bad_gelu("not_written", "raise NotImplementedError()", "not written yet"),
]

CORRECT = [
    Variant(
        "ffn_step_by_step",
        FFN,
        _ffn(
            """
            hidden = self.linear1(x)  # (..., d_ff)
            hidden = self.activation(hidden)
            hidden = self.dropout(hidden)
            return self.linear2(hidden)  # (..., D)
            """
        ),
    ),
    Variant(
        "ffn_clamp_for_relu",
        FFN,
        _ffn(
            """
            h = self.linear1(x)
            h = torch.clamp(h, min=0) if self.activation is F.relu else self.activation(h)
            return self.linear2(self.dropout(h))
            """
        ),
    ),
    Variant(
        "ffn_maximum_for_relu",
        FFN,
        _ffn(
            """
            h = self.linear1(x)
            if self.activation is F.relu:
                h = torch.maximum(h, torch.zeros_like(h))
            else:
                h = self.activation(h)
            return self.linear2(self.dropout(h))
            """
        ),
    ),
    Variant(
        "ffn_sequential_of_given_layers",
        FFN,
        _ffn(
            """
            act = nn.ReLU() if self.activation is F.relu else nn.GELU()
            return nn.Sequential(self.linear1, act, self.dropout, self.linear2)(x)
            """
        ),
    ),
    Variant(
        "ffn_functional_with_training_flag",
        FFN,
        _ffn(
            """
            h = F.linear(x, self.linear1.weight, self.linear1.bias)
            h = F.dropout(self.activation(h), p=self.dropout.p, training=self.training)
            return F.linear(h, self.linear2.weight, self.linear2.bias)
            """
        ),
    ),
    Variant(
        "ffn_matmul",
        FFN,
        _ffn(
            """
            h = self.activation(x @ self.linear1.weight.T + self.linear1.bias)
            return self.dropout(h) @ self.linear2.weight.T + self.linear2.bias
            """
        ),
    ),
    Variant(
        "ffn_dropout_before_relu_only",
        # relu(dropout(z)) == dropout(relu(z)): the same function when the activation is ReLU
        FFN,
        _ffn(
            """
            h = self.linear1(x)
            if self.activation is F.relu:
                return self.linear2(F.relu(self.dropout(h)))
            return self.linear2(self.dropout(self.activation(h)))
            """
        ),
    ),
    Variant(
        "ffn_torch_dropout",
        FFN,
        _ffn(
            """
            h = self.activation(self.linear1(x))
            return self.linear2(torch.dropout(h, self.dropout.p, self.training))
            """
        ),
    ),
    Variant(
        "ffn_dropout_keywords",
        FFN,
        _ffn(
            """
            h = self.activation(self.linear1(x))
            h = F.dropout(training=self.training, p=self.dropout.p, input=h)
            return self.linear2(h)
            """
        ),
    ),
    Variant(
        "ffn_einsum",
        FFN,
        _ffn(
            """
            w1, b1 = self.linear1.weight, self.linear1.bias  # (d_ff, D), (d_ff,)
            w2, b2 = self.linear2.weight, self.linear2.bias  # (D, d_ff), (D,)
            h = self.dropout(self.activation(torch.einsum("...d,fd->...f", x, w1) + b1))
            return torch.einsum("...f,df->...d", h, w2) + b2
            """
        ),
    ),
    Variant(
        "ffn_position_by_position",
        FFN,
        _ffn(
            """
            rows = x.reshape(-1, x.shape[-1])  # every position of every sequence, (N, D)
            outs = [self.linear2(self.dropout(self.activation(self.linear1(r)))) for r in rows]
            return torch.stack(outs).reshape(x.shape)
            """
        ),
    ),
    Variant(
        "count_by_layer",
        COUNT,
        """\
def count_parameters(d_model, d_ff):
    linear1 = d_ff * d_model + d_ff
    linear2 = d_model * d_ff + d_model
    return linear1 + linear2
""",
    ),
    Variant(
        "count_factored",
        COUNT,
        """\
def count_parameters(d_model, d_ff):
    return d_ff * (d_model + 1) + d_model * (d_ff + 1)
""",
    ),
    Variant(
        "count_from_shapes",
        COUNT,
        """\
def count_parameters(d_model, d_ff):
    shapes = [(d_ff, d_model), (d_ff,), (d_model, d_ff), (d_model,)]
    return sum(math.prod(shape) for shape in shapes)
""",
    ),
    Variant(
        "gelu_erf",
        GELU,
        """\
def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
""",
    ),
    Variant(
        "gelu_ndtr",
        GELU,
        """\
def gelu(x):
    return x * torch.special.ndtr(x)
""",
    ),
    Variant(
        "gelu_erfc",
        GELU,
        """\
def gelu(x):
    # Φ(x) = ½·erfc(-x/√2), accurate far into the negative tail
    return 0.5 * x * torch.special.erfc(-x / math.sqrt(2.0))
""",
    ),
    Variant(
        "gelu_sqrt_half",
        GELU,
        """\
def gelu(x):
    cdf = 0.5 * (1.0 + torch.special.erf(x * math.sqrt(0.5)))
    return x * cdf
""",
    ),
]


# --- answers that make the rest of the catalogue (tests/grading/checks/test_catalogue.py) -------

BUGGY += [
    dataclasses.replace(v, mistake=mistake)
    for v, mistake in (
        (
            _bad_ffn(
                "dropout_rescales_only",
                """
                h = self.activation(self.linear1(x))
                if self.training:
                    h = h / (1 - self.dropout.p)
                return self.linear2(h)
                """,
                "drops 0% of the hidden units",
            ),
            "dropout-drops-nothing",
        ),
        (
            _bad_count(
                "no_linear1_bias", "return 2 * d_model * d_ff + d_model", "left out linear1's bias"
            ),
            "no-linear1-bias",
        ),
        (
            _bad_count(
                "linear2_bias_of_d_ff",
                "return 2 * d_model * d_ff + 2 * d_ff",
                "linear2's bias has D entries",
            ),
            "linear2-bias-size",
        ),
        (
            _bad_count(
                "one_weight_matrix_no_biases",
                "return d_model * d_ff",
                "only one weight matrix and no biases",
            ),
            "one-weight-matrix-no-biases",
        ),
    )
]

MISTAKES = {
    ("answer_feed_forward", "no_activation"): "no-activation",
    ("answer_feed_forward", "activation_after_linear2"): "activation-after-linear2",
    ("answer_feed_forward", "activation_twice"): "activation-after-linear2-too",
    ("answer_feed_forward", "activation_on_input"): "activation-on-input",
    ("answer_feed_forward", "relu_always"): "wrong-activation",
    ("answer_feed_forward", "relu_by_hand_always"): "wrong-activation",
    ("answer_feed_forward", "gelu_tanh"): "gelu-tanh",
    ("answer_feed_forward", "residual_inside"): "residual-inside-ffn",
    ("answer_feed_forward", "dropout_in_eval_functional_default"): "dropout-in-eval",
    ("answer_feed_forward", "dropout_training_true"): "dropout-in-eval",
    ("answer_feed_forward", "dropout_missing"): "dropout-missing",
    ("answer_feed_forward", "dropout_not_rescaled"): "dropout-not-rescaled",
    ("answer_feed_forward", "dropout_hard_coded_p"): "fixed-dropout-p",
    ("answer_feed_forward", "dropout_twice"): "dropout-twice",
    ("answer_feed_forward", "dropout_keep_probability"): "keep-probability",
    ("answer_feed_forward", "hand_mask_divides_by_p"): "dropout-wrong-scale",
    ("answer_feed_forward", "hand_mask_in_eval_too"): "dropout-in-eval",
    ("answer_feed_forward", "dropout_under_no_grad"): "gradient-missing",
    ("answer_feed_forward", "dropout_on_output"): "dropout-on-output",
    ("answer_feed_forward", "dropout_on_input"): "dropout-on-input",
    ("answer_feed_forward", "dropout_before_gelu"): "dropout-before-activation",
    ("answer_feed_forward", "layers_in_wrong_order"): "layers-in-wrong-order",
    ("answer_feed_forward", "forgot_linear2"): "no-linear2",
    ("answer_feed_forward", "pooled_over_positions"): "shape",
    ("answer_feed_forward", "only_three_dimensions"): "fixed-rank",
    ("answer_feed_forward", "changes_dtype"): "dtype",
    ("answer_feed_forward", "detached_output"): "no-grad",
    ("answer_feed_forward", "tensor_subclass"): "tensor-subclass",
    ("answer_feed_forward", "delegates_to_encoder_lib"): "forbidden-built-in",
    ("answer_count_parameters", "no_biases"): "no-biases",
    ("answer_count_parameters", "no_linear2_bias"): "no-linear2-bias",
    ("answer_count_parameters", "bias_sizes_swapped_twice"): "linear1-bias-size",
    ("answer_count_parameters", "one_weight_matrix"): "one-weight-matrix",
    ("answer_count_parameters", "assumes_four_d"): "d-ff-assumed-4d",
    ("answer_count_parameters", "returns_float"): "not-an-int",
    ("answer_count_parameters", "returns_tensor"): "not-an-int",
    ("answer_count_parameters", "builds_the_module"): "forbidden-built-in",
    ("answer_count_parameters", "builds_linears"): "forbidden-built-in",
    ("answer_gelu", "tanh_approximation"): "gelu-tanh",
    ("answer_gelu", "sigmoid_approximation"): "gelu-sigmoid",
    ("answer_gelu", "erf_without_sqrt2"): "erf-not-at-x-over-sqrt2",
    ("answer_gelu", "erf_times_sqrt2"): "erf-at-x-times-sqrt2",
    ("answer_gelu", "missing_half"): "no-half",
    ("answer_gelu", "cdf_only"): "returned-phi",
    ("answer_gelu", "density_instead_of_cdf"): "density-for-cdf",
    ("answer_gelu", "erf_as_cdf"): "erf-for-phi",
    ("answer_gelu", "relu"): "gelu-is-relu",
    ("answer_gelu", "calls_f_gelu"): "forbidden-built-in",
    ("answer_gelu", "calls_nn_gelu"): "forbidden-built-in",
    ("answer_gelu", "calls_aten_gelu"): "forbidden-built-in",
    ("answer_gelu", "python_floats_wrong_dtype"): "dtype",
    ("answer_gelu", "python_floats_no_gradient"): "no-grad",
    ("answer_gelu", "in_place"): "in-place",
    ("answer_gelu", "not_written"): "not-written",
}
"""The mistake id of each buggy answer built from a table above: ``(cell, name)`` -> id
(``variants.load`` gives it to the variant)."""
