"""Checks for the feed_forward notebook: the position-wise feed-forward network (``FeedForward``),
its parameter count (``count_parameters``) and the exact GELU (``gelu``).

Mistakes the checks name:

``check_feed_forward``
    the activation missing (the network is then one affine map), the activation after linear2
    (alone or as well), the activation on the input, ReLU used when ``activation="gelu"`` was
    asked for (and GELU for ``"relu"``), GELU's tanh approximation, the residual connection added
    inside the FFN, the layers in the wrong order (a shape error, explained), the hidden layer
    returned (forgotten linear2) or another wrong shape, a changed dtype, the input modified in
    place, dropout active in eval mode, dropout missing in train mode, kept units not rescaled by
    1/(1 - p) or rescaled by the wrong factor (a hard-coded p, dropout twice), dropout on the
    output or before the activation, wrong parameter names, gradients that do not flow.
``check_count_parameters``
    biases left out (both or one), the wrong bias size, one weight matrix counted, d_ff taken as
    4·D instead of the argument, a non-int result, counting by building modules.
``check_gelu``
    the tanh and sigmoid approximations, erf without the 1/√2 (or with √2), the missing ½,
    Φ(x) or x·φ(x) returned instead of x·Φ(x), ReLU, a changed dtype or shape, the input modified
    in place, a broken gradient.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..encoder import EncoderLayer as _EncoderLayer
from ..feed_forward import FeedForward as _ReferenceFeedForward
from . import _core
from ._core import ForbiddenCallError, GradingError

__all__ = ["check_feed_forward", "check_count_parameters", "check_gelu"]

_FFN_FORBIDDEN_TORCH = {
    torch._transformer_encoder_layer_fwd: "torch._transformer_encoder_layer_fwd",
}
_FFN_FORBIDDEN_PYTHON = (_ReferenceFeedForward, _EncoderLayer, nn.TransformerEncoderLayer)
_COUNT_FORBIDDEN_PYTHON = (
    _ReferenceFeedForward,
    _EncoderLayer,
    nn.TransformerEncoderLayer,
    nn.Linear,
)
_GELU_FORBIDDEN_TORCH = {
    F.gelu: "F.gelu",
    torch.ops.aten.gelu: "torch.ops.aten.gelu",
    torch.ops.aten.gelu.default: "torch.ops.aten.gelu",
}
_GELU_FORBIDDEN_PYTHON = (nn.GELU,)
_DTYPE = (
    "{what} has dtype {got}, but the input was {expected}: keep the input's dtype (no "
    ".float()/.double(), no new tensors made with torch.tensor(...))."
)


# --- helpers -------------------------------------------------------------------------------------


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def _activation(name: str):
    return {"relu": F.relu, "gelu": F.gelu}[name]


def _is_shape_error(error: BaseException | None) -> bool:
    if not _core._isinstance(error, RuntimeError):
        return False
    text = str(error)
    return any(
        words in text
        for words in ("cannot be multiplied", "size of tensor", "size mismatch", "must match")
    )


# --- FeedForward ---------------------------------------------------------------------------------


def _ffn_weights(d_model: int, d_ff: int, seed: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Weights with biases large enough that a missing bias or activation shows."""
    return {
        "linear1.weight": _core.randn(d_ff, d_model, seed=seed, dtype=dtype) / math.sqrt(d_model),
        "linear1.bias": 0.5 * _core.randn(d_ff, seed=seed + 1, dtype=dtype),
        "linear2.weight": _core.randn(d_model, d_ff, seed=seed + 2, dtype=dtype) / math.sqrt(d_ff),
        "linear2.bias": 0.5 * _core.randn(d_model, seed=seed + 3, dtype=dtype),
    }


def _ffn_name(d_model: int, d_ff: int, p: float, activation: str) -> str:
    return f"FeedForward({d_model}, {d_ff}, dropout={p}, activation={activation!r})"


def _build_student(
    FeedForward: Any,
    d_model: int,
    d_ff: int,
    p: float,
    activation: str,
    weights: dict[str, torch.Tensor],
    mode: str,
) -> nn.Module:
    """The student's module with ``weights`` loaded, in ``mode`` ("eval" or "train")."""
    name = _ffn_name(d_model, d_ff, p, activation)
    with _core.student_call(name, _FFN_FORBIDDEN_TORCH, _FFN_FORBIDDEN_PYTHON):
        module = FeedForward(d_model, d_ff, dropout=p, activation=activation)
        is_module = _core._isinstance(module, nn.Module)
        names = sorted(n for n, _ in module.named_parameters()) if is_module else []
    if not is_module:
        raise GradingError(
            f"{name} should build an nn.Module, got {_core._type(module).__qualname__}: keep the "
            "given `class FeedForward(nn.Module)` and its __init__."
        )
    if names != sorted(weights):
        raise GradingError(
            f"{name} has the parameters {names}, but {sorted(weights)} were expected (the names "
            "nn.TransformerEncoderLayer uses, so that its weights load into yours). Keep the "
            "given __init__, which creates linear1, dropout and linear2."
        )
    dtype = weights["linear1.weight"].dtype
    with _core.student_call(name, _FFN_FORBIDDEN_TORCH, _FFN_FORBIDDEN_PYTHON):
        module.to(dtype)
        module.load_state_dict({k: v.clone() for k, v in weights.items()})
    with _core.student_call(f"FeedForward.{mode}", _FFN_FORBIDDEN_TORCH, _FFN_FORBIDDEN_PYTHON):
        if mode == "eval":
            module.eval()
        else:
            module.train()
    return module


def _forward(module: nn.Module, x: torch.Tensor, d_model: int, d_ff: int) -> Any:
    before = x.detach().clone()
    try:
        with _core.student_call("FeedForward.forward", _FFN_FORBIDDEN_TORCH, _FFN_FORBIDDEN_PYTHON):
            y = module(x)
    except GradingError as e:
        if _is_shape_error(e.__cause__):
            raise GradingError(
                f"FeedForward.forward raised a shape error ({e.__cause__}). The input has "
                f"D = {d_model} features, so it must go through linear1 (D -> d_ff = {d_ff}) "
                f"first and linear2 (d_ff -> D) last: check the order of your layers."
            ) from e.__cause__
        if e.__cause__ is not None and not _core._isinstance(e.__cause__, NotImplementedError):
            hint = " forward must accept any leading dimensions, (..., D)." if x.dim() != 3 else ""
            raise GradingError(
                f"{e} (on an input of shape {tuple(x.shape)}).{hint}"
            ) from e.__cause__
        raise
    if not torch.equal(x.detach(), before):
        raise GradingError(
            "FeedForward.forward changed its input x in place (an in-place operation such as "
            "x.relu_() or x += ...): the encoder layer still needs x for its residual connection."
        )
    return y


def _expect_output(y: Any, x: torch.Tensor, what: str, d_ff: int) -> torch.Tensor:
    _core.expect_tensor(y, what)
    shape = tuple(x.shape)
    if tuple(y.shape) != shape:
        hint = ""
        if tuple(y.shape[:-1]) == shape[:-1] and y.shape[-1] == d_ff:
            hint = (
                f" Its last size is the hidden width d_ff = {d_ff}: the hidden layer must go "
                "through linear2 back to D."
            )
        raise GradingError(
            f"{what} has the wrong shape: expected the input's shape {shape} ((..., D) with "
            f"D = {shape[-1]}), got {tuple(y.shape)}.{hint}"
        )
    _core.expect_dtype(y, x.dtype, what, _DTYPE)
    return y


def _ffn_mistakes(
    x: torch.Tensor, w: dict[str, torch.Tensor], activation: str
) -> dict[str, torch.Tensor]:
    def lin1(t):
        return F.linear(t, w["linear1.weight"], w["linear1.bias"])

    def lin2(t):
        return F.linear(t, w["linear2.weight"], w["linear2.bias"])

    act = _activation(activation)
    mistakes = {
        "the activation is missing. Without it linear2(linear1(x)) collapses into a single "
        "affine map of x (see 'Why the non-linearity matters'): apply self.activation between "
        "linear1 and linear2.": lin2(lin1(x)),
        "the activation is applied after linear2 instead of between linear1 and linear2 (the "
        "FFN's output must be free to take any sign).": act(lin2(lin1(x))),
        "the activation is applied after linear2 as well: only the hidden layer (between "
        "linear1 and linear2) gets one.": act(lin2(act(lin1(x)))),
        "the activation is applied to the input x before linear1; it belongs between linear1 "
        "and linear2.": lin2(lin1(act(x))),
        "you added the input x to the output. That is the residual connection, which the "
        "encoder layer adds around the FFN (notebook 5); the FFN itself returns only "
        "linear2(...).": x + lin2(act(lin1(x))),
    }
    if activation == "gelu":
        wrong, right = "ReLU", "gelu"
        tanh = lin2(_gelu_tanh(lin1(x)))
        mistakes[
            "you used GELU's tanh approximation (approximate='tanh'); self.activation is "
            "F.gelu, the exact GELU x·Φ(x)."
        ] = tanh
        other = lin2(F.relu(lin1(x)))
    else:
        wrong, right = "GELU", "relu"
        other = lin2(F.gelu(lin1(x)))
    mistakes[
        f"you used {wrong} although activation={right!r} was requested: call self.activation, "
        "which the given __init__ sets from the activation argument."
    ] = other
    return mistakes


def _check_eval(FeedForward: Any, shape: tuple[int, ...], d_ff: int, p: float, act: str, seed: int):
    d_model = shape[-1]
    weights = _ffn_weights(d_model, d_ff, seed, torch.float64)
    reference = _ReferenceFeedForward(d_model, d_ff, p, act).double().eval()
    reference.load_state_dict(weights)
    x = _core.randn(*shape, seed=seed + 10)
    with torch.no_grad():
        expected = reference(x)
    mistakes = _ffn_mistakes(x, weights, act)

    module = _build_student(FeedForward, d_model, d_ff, p, act, weights, "eval")
    what = f"The output of {_ffn_name(d_model, d_ff, p, act)} in eval mode"
    with torch.no_grad():
        first = _expect_output(_forward(module, x, d_model, d_ff), x, what, d_ff)
        second = _expect_output(_forward(module, x, d_model, d_ff), x, what, d_ff)
    if p > 0 and not torch.equal(first, second) and not bool(first.isnan().any()):
        raise GradingError(
            f"{what} changes from one call to the next: dropout is still active in eval mode. "
            "Use self.dropout (the nn.Dropout module, which model.eval() switches off) or pass "
            "training=self.training to F.dropout; F.dropout's training=True default drops units "
            "even in eval mode."
        )
    _core.expect_close(first, expected, what, mistakes)


def _check_train(
    FeedForward: Any, shape: tuple[int, ...], d_ff: int, p: float, act: str, seed: int
):
    """In train mode, read the hidden units back through linear2 (d_ff < D, so linear2's weight
    has a left inverse) and check that each is either dropped or scaled by 1 / (1 - p)."""
    d_model = shape[-1]
    assert d_ff < d_model
    weights = _ffn_weights(d_model, d_ff, seed, torch.float64)
    x = _core.randn(*shape, seed=seed + 10)
    pre = F.linear(x, weights["linear1.weight"], weights["linear1.bias"])
    hidden = _activation(act)(pre)
    eval_output = F.linear(hidden, weights["linear2.weight"], weights["linear2.bias"])
    left_inverse = torch.linalg.pinv(weights["linear2.weight"])  # (d_ff, D)

    module = _build_student(FeedForward, d_model, d_ff, p, act, weights, "train")
    what = f"The output of {_ffn_name(d_model, d_ff, p, act)} in train mode"
    with torch.no_grad():
        y = _expect_output(_forward(module, x, d_model, d_ff), x, what, d_ff)
        y = y.detach()
        if _core._close(y, eval_output, atol=1e-9, rtol=1e-9):
            raise GradingError(
                f"{what} equals its eval-mode output: dropout is missing in training. With "
                f"p = {p} about {p:.0%} of the hidden units should be zeroed in train mode. Apply "
                "self.dropout to the activated hidden layer, just before linear2."
            )
        z = (y - weights["linear2.bias"]) @ left_inverse.T  # the hidden units linear2 received
        if not _core._close(
            F.linear(z, weights["linear2.weight"], weights["linear2.bias"]), y, 1e-8
        ):
            _dropout_elsewhere(y, what)
        informative = hidden.abs() > 1e-3
        h, zi = hidden[informative], z[informative]
        dropped = zi.abs() < 1e-7
        ratio = zi[~dropped] / h[~dropped]
        scale = 1 / (1 - p)
        if act != "relu" and bool(dropped.any()):
            # dropout before the activation: kept units are act(scale * pre), dropped ones act(0)
            before = _activation(act)(scale * pre)[informative]
            if _core._close(zi[~dropped], before[~dropped], 1e-7) and not _core._close(
                ratio, ratio * 0 + scale
            ):
                raise GradingError(
                    f"{what} is wrong: dropout is applied before the activation; it belongs "
                    "after it: linear2(dropout(activation(linear1(x))))."
                )
        if ratio.numel() == 0 or not _core._close(ratio, ratio.mean().expand_as(ratio), 1e-6):
            _dropout_elsewhere(y, what)
        factor = float(ratio.mean())
        if abs(factor - 1) < 1e-6:
            raise GradingError(
                f"{what} is wrong: the hidden units that dropout keeps are not rescaled. Inverted "
                f"dropout multiplies them by 1 / (1 - p) = {scale:.4g} so that the expected "
                "output is the same in training and evaluation: use self.dropout (nn.Dropout)."
            )
        if abs(factor - scale) > 1e-6 * scale:
            raise GradingError(
                f"{what} is wrong: the hidden units that are kept are multiplied by "
                f"{factor:.4g} instead of 1 / (1 - p) = {scale:.4g}. Use self.dropout, whose p "
                "is the dropout argument, once (not a hard-coded probability, not twice)."
            )
        fraction = float(dropped.double().mean())
        if not (0.4 * p <= fraction <= min(1.0, 1.6 * p)):
            raise GradingError(
                f"{what} is wrong: it drops {fraction:.0%} of the hidden units, but dropout with "
                f"p = {p} should drop about {p:.0%}. Use self.dropout."
            )


def _dropout_elsewhere(y: torch.Tensor, what: str) -> None:
    if float((y == 0).double().mean()) >= 0.2:
        raise GradingError(
            f"{what} is wrong: whole output features are zero, so dropout acts on linear2's "
            "output. It belongs on the hidden units: linear2(dropout(activation(linear1(x))))."
        )
    raise GradingError(
        f"{what} is not linear2 applied to the activated hidden units with some of them dropped: "
        "dropout belongs between the activation and linear2, "
        "linear2(dropout(activation(linear1(x)))), and nowhere else."
    )


def _check_gradients(FeedForward: Any, seed: int) -> None:
    d_model, d_ff, act = 5, 9, "gelu"
    weights = _ffn_weights(d_model, d_ff, seed, torch.float64)
    reference = _ReferenceFeedForward(d_model, d_ff, 0.1, act).double().eval()
    reference.load_state_dict(weights)
    x = _core.randn(2, 3, d_model, seed=seed + 10).requires_grad_(True)
    g = _core.randn(2, 3, d_model, seed=seed + 11)
    (reference(x) * g).sum().backward()
    expected = {"x": x.grad.clone(), **{n: q.grad for n, q in reference.named_parameters()}}
    x.grad = None

    module = _build_student(FeedForward, d_model, d_ff, 0.1, act, weights, "eval")
    y = _expect_output(_forward(module, x, d_model, d_ff), x, "FeedForward's output", d_ff)
    hint = (
        "make sure forward uses only differentiable tensor operations (no .detach(), .data, "
        ".item(), numpy or torch.no_grad())."
    )
    if not y.requires_grad:
        raise GradingError(f"FeedForward's output does not require grad, so nothing trains: {hint}")
    with _core.student_call("FeedForward's backward pass"):
        (y * g).sum().backward()
        actual = {"x": x.grad, **{n: q.grad for n, q in module.named_parameters()}}
    for name, grad in expected.items():
        got = actual.get(name)
        if got is None or not _core._close(got, grad):
            raise GradingError(
                f"The gradient with respect to {name} does not match the reference: {hint}"
            )


@_core.guarded
def check_feed_forward(FeedForward: Any, thorough: bool = False) -> None:
    """``FeedForward(d_model, d_ff, dropout, activation)`` computes
    ``linear2(dropout(activation(linear1(x))))``: in eval mode it matches encoder_lib's (ReLU and
    GELU), in train mode each hidden unit is either dropped or scaled by 1 / (1 - p)."""
    with _core.seeded(0):  # the student's dropout masks; the notebook's RNG is untouched
        _check_eval(FeedForward, (2, 5, 6), 20, 0.5, "relu", seed=400)
        _check_eval(FeedForward, (3, 4, 8), 12, 0.1, "gelu", seed=410)
        _check_train(FeedForward, (4, 5, 8), 6, 0.5, "relu", seed=420)
        if thorough:
            _check_eval(FeedForward, (7, 6), 10, 0.1, "relu", seed=430)  # no batch dimension
            _check_eval(FeedForward, (2, 3, 4, 5), 7, 0.2, "gelu", seed=440)  # two batch dims
            _check_eval(FeedForward, (1, 1, 3), 8, 0.0, "relu", seed=450)  # B = L = 1
            _check_eval(FeedForward, (2, 9, 16), 64, 0.3, "gelu", seed=460)  # d_ff = 4 D
            _check_train(FeedForward, (4, 6, 10), 7, 0.2, "gelu", seed=470)
            _check_train(FeedForward, (3, 5, 12), 9, 0.75, "relu", seed=480)
            _check_gradients(FeedForward, seed=490)


# --- count_parameters ----------------------------------------------------------------------------


def _reference_count(d_model: int, d_ff: int) -> int:
    """Counted on a real module (on the meta device: no memory is used, whatever the size)."""
    with torch.device("meta"):
        module = _ReferenceFeedForward(d_model, d_ff)
    return sum(q.numel() for q in module.parameters())


def _count_mistakes(D: int, d_ff: int) -> dict[int, str]:
    mistakes = {
        2 * D * d_ff: "you left out the biases (linear1 has d_ff of them, linear2 has D).",
        2 * D * d_ff + d_ff: "you left out linear2's bias (D numbers, one per output feature).",
        2 * D * d_ff + D: "you left out linear1's bias (d_ff numbers, one per hidden unit).",
        2 * D * d_ff + 2 * d_ff: "linear2's bias has D entries (its output size), not d_ff.",
        2 * D * d_ff + 2 * D: "linear1's bias has d_ff entries (its output size), not D.",
        D * d_ff + d_ff + D: "you counted only one weight matrix: linear1's is d_ff x D and "
        "linear2's is D x d_ff.",
        D * d_ff: "you counted only one weight matrix and no biases.",
    }
    if d_ff != 4 * D:
        mistakes.setdefault(
            8 * D * D + 5 * D,
            "you assumed d_ff = 4·D: use the d_ff argument (4·D is only the usual choice).",
        )
    right = 2 * D * d_ff + d_ff + D
    return {value: why for value, why in mistakes.items() if value != right}


@_core.guarded
def check_count_parameters(count_parameters: Any, thorough: bool = False) -> None:
    """``count_parameters(d_model, d_ff)`` equals the number of parameters of a real FFN."""
    sizes = [(6, 20), (512, 2048), (3, 12)]
    if thorough:
        sizes += [(1, 1), (7, 5), (768, 3072), (1024, 4096), (100, 37), (12288, 49152)]
    for d_model, d_ff in sizes:
        expected = _reference_count(d_model, d_ff)
        what = f"count_parameters({d_model}, {d_ff})"
        try:
            with _core.student_call(what, None, _COUNT_FORBIDDEN_PYTHON):
                got = count_parameters(d_model, d_ff)
        except ForbiddenCallError as e:
            built = re.search(r" calls (\S+), which", str(e))
            raise ForbiddenCallError(
                f"{what} builds a module ({built[1] if built else 'a built-in'}) to count its "
                "parameters, which earns no points: this exercise asks for the formula. Count "
                "the entries of each weight matrix and bias from d_model and d_ff."
            ) from None
        if _core._type(got) is not int:
            raise GradingError(
                f"{what} should return a Python int, got {_core._type(got).__qualname__} "
                f"({got!r}). Use integer arithmetic (*, +, //) and no tensors."
            )
        if got != expected:
            why = _count_mistakes(d_model, d_ff).get(got)
            if why:
                raise GradingError(f"{what} returned {got}, expected {expected}: {why}")
            raise GradingError(
                f"{what} returned {got}, expected {expected}. Count linear1 (a d_ff x D weight "
                "and d_ff biases) and linear2 (a D x d_ff weight and D biases)."
            )


# --- gelu ----------------------------------------------------------------------------------------


def _gelu_mistakes(x: torch.Tensor) -> dict[str, torch.Tensor]:
    erf, root2 = torch.erf, math.sqrt(2.0)
    phi = "Φ(x) = ½·(1 + erf(x/√2))"
    density = torch.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    return {
        "this is GELU's tanh approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). The "
        f"exercise asks for the exact GELU x·Φ(x), written with the error function: {phi}.": (
            _gelu_tanh(x)
        ),
        "this is the sigmoid approximation x·sigmoid(1.702·x). The exercise asks for the exact "
        f"GELU x·Φ(x) with {phi}.": x * torch.sigmoid(1.702 * x),
        f"erf must be evaluated at x/√2: {phi}.": 0.5 * x * (1 + erf(x)),
        f"erf must be evaluated at x/√2 (you multiplied by √2 instead of dividing): {phi}.": (
            0.5 * x * (1 + erf(x * root2))
        ),
        f"the factor ½ is missing: {phi}.": x * (1 + erf(x / root2)),
        "you returned Φ(x), the Gaussian CDF, instead of x·Φ(x).": 0.5 * (1 + erf(x / root2)),
        "you used the Gaussian density φ(x) = exp(-x²/2)/√(2π) where the cumulative "
        "distribution Φ(x) belongs.": x * density,
        f"erf(x/√2) equals 2·Φ(x) - 1, not Φ(x): {phi}.": x * erf(x / root2),
        "this is ReLU. GELU is x·Φ(x): smooth, and slightly negative for negative x.": F.relu(x),
    }


def _call_gelu(gelu: Any, x: torch.Tensor, what: str) -> torch.Tensor:
    before = x.detach().clone()
    with _core.student_call("gelu", _GELU_FORBIDDEN_TORCH, _GELU_FORBIDDEN_PYTHON):
        y = gelu(x)
    _core.expect_tensor(y, what)
    if not torch.equal(x.detach(), before):
        raise GradingError("gelu changed its input in place: return a new tensor instead.")
    _core.expect_shape(y, tuple(x.shape), what)
    _core.expect_dtype(y, x.dtype, what, _DTYPE)
    return y


def _check_gelu_values(gelu: Any, x: torch.Tensor, what: str, atol: float = 1e-7) -> None:
    expected = F.gelu(x)
    mistakes = _gelu_mistakes(x)
    y = _call_gelu(gelu, x, what)
    _core.expect_close(y, expected, what, mistakes, atol=atol, rtol=1e-6)


@_core.guarded
def check_gelu(gelu: Any, thorough: bool = False) -> None:
    """``gelu(x)`` is the exact GELU x·Φ(x), as ``F.gelu``'s default, elementwise."""
    grid = torch.linspace(-5, 5, 201, dtype=torch.float64)
    _check_gelu_values(gelu, grid, "gelu(x) for x from -5 to 5")
    _check_gelu_values(gelu, 2 * _core.randn(3, 4, 5, seed=500), "gelu(x) for x of shape (3, 4, 5)")
    if not thorough:
        return
    _check_gelu_values(
        gelu, 3 * _core.randn(1000, seed=510, dtype=torch.float32), "gelu(x) in float32", 1e-6
    )
    big = torch.tensor([-40.0, -12.0, -8.0, 0.0, 8.0, 12.0, 40.0], dtype=torch.float64)
    _check_gelu_values(gelu, big, "gelu(x) for large |x|")
    _check_gelu_values(gelu, torch.tensor(0.5, dtype=torch.float64), "gelu of a 0-d tensor")
    x = _core.randn(50, seed=520).requires_grad_(True)
    y = _call_gelu(gelu, x, "gelu(x)")
    if not y.requires_grad:
        raise GradingError(
            "gelu's output does not require grad, so a network using it could not train: "
            "use differentiable torch operations (torch.erf...), no .detach(), .item(), "
            "math.erf on numbers or numpy."
        )
    with _core.student_call("gelu's backward pass"):
        (grad,) = torch.autograd.grad(y.sum(), x)
    cdf = 0.5 * (1 + torch.erf(x.detach() / math.sqrt(2.0)))
    density = torch.exp(-(x.detach() ** 2) / 2) / math.sqrt(2 * math.pi)
    if not _core._close(grad, cdf + x.detach() * density):
        raise GradingError(
            "The gradient of your gelu does not match Φ(x) + x·φ(x): use differentiable "
            "torch operations (torch.erf...), no .detach(), .item() or numpy."
        )
