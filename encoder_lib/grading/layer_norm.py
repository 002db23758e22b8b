"""Checks for notebook 03: layer normalisation and residual connections.

- ``check_layer_norm(layer_norm)``: exercise 1, ``layer_norm(x, weight, bias, eps=1e-5)`` over
  the last dimension.
- ``check_layer_norm_module(LayerNorm)``: exercise 2, the ``nn.Module`` with ``weight``/``bias``
  parameters and ``eps`` (the student writes ``forward``).
- ``check_residual_block(residual_block)``: exercise 3, ``norm(x + sublayer(x))`` (post-norm) or
  ``x + sublayer(norm(x))`` (pre-norm).

Mistakes named in the failure messages: the unbiased variance (D - 1, e.g. ``torch.var``'s or
``torch.std``'s default), eps outside the square root, no eps at all, ``std + eps``, an ignored
eps argument or ``self.eps``, missing weight and/or bias or the bias applied before the weight,
normalising over the batch or sequence axis (or over several axes), modifying the input in place,
a broken gradient, a changed ``__init__``; for the residual block: a missing residual, a missing
norm, pre-norm where post-norm was asked and the reverse, the norm applied twice, the residual
taken from the normalised input, the norm applied to the sublayer's output, and a sublayer or norm
called more than once. The built-ins that do the work (``F.layer_norm``, hence ``nn.LayerNorm``,
``torch.layer_norm``, group/instance/batch norm and ``encoder_lib.LayerNorm``) are forbidden while
the student's code runs.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import encoder_lib

from . import _core
from ._core import GradingError

__all__ = ["check_layer_norm", "check_layer_norm_module", "check_residual_block"]

_FORBIDDEN_TORCH = {
    F.layer_norm: "F.layer_norm (which nn.LayerNorm calls)",
    torch.layer_norm: "torch.layer_norm",
    torch.native_layer_norm: "torch.native_layer_norm",
    F.group_norm: "F.group_norm (a LayerNorm in disguise with one group)",
    torch.group_norm: "torch.group_norm",
    torch.native_group_norm: "torch.native_group_norm",
    F.instance_norm: "F.instance_norm",
    torch.instance_norm: "torch.instance_norm",
    F.batch_norm: "F.batch_norm",
    torch.batch_norm: "torch.batch_norm",
    torch.native_batch_norm: "torch.native_batch_norm",
}
_FORBIDDEN_PYTHON = (encoder_lib.LayerNorm,)

_DEFAULT_EPS = 1e-5
_DTYPE = (
    "{what} returns dtype {got} for an input of dtype {expected}: the output's dtype should "
    "follow the input's (create no tensors with a fixed dtype)."
)


# --- calling the student's code ------------------------------------------------------------------


@contextlib.contextmanager
def _student_call(exercise: str, forbid: bool = True) -> Iterator[None]:
    """``_core.student_call`` with this notebook's forbidden built-ins (``forbid``)."""
    forbidden = (_FORBIDDEN_TORCH, _FORBIDDEN_PYTHON) if forbid else ()
    with _core.student_call(exercise, *forbidden):
        yield


# --- the reference and the classic mistakes -------------------------------------------------------


def _reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    """encoder_lib's LayerNorm (computed before any student code runs)."""
    ref = encoder_lib.LayerNorm(x.shape[-1], eps).to(x.dtype)
    with torch.no_grad():
        ref.weight.copy_(w)
        ref.bias.copy_(b)
        return ref(x)


def _variant(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor,
    eps: float,
    dims: tuple[int, ...] = (-1,),
    correction: int = 0,
    eps_at: str = "inside",
    affine: str = "both",
) -> torch.Tensor:
    """LayerNorm written with one deliberate mistake (or none, with the defaults)."""
    with torch.no_grad():
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, correction=correction, keepdim=True)
        if eps_at == "inside":
            x_hat = (x - mean) / torch.sqrt(var + eps)
        elif eps_at == "outside":
            x_hat = (x - mean) / (torch.sqrt(var) + eps)
        else:
            x_hat = (x - mean) / torch.sqrt(var)
        if affine == "both":
            return x_hat * w + b
        if affine == "weight":
            return x_hat * w
        if affine == "bias":
            return x_hat + b
        if affine == "bias_first":
            return (x_hat + b) * w
        return x_hat


class _Names:
    """How the messages call eps, weight and bias: arguments or the module's attributes."""

    def __init__(self, module: bool):
        prefix = "self." if module else ""
        self.eps, self.weight, self.bias = prefix + "eps", prefix + "weight", prefix + "bias"
        self.eps_source = "`self.eps`" if module else "the `eps` argument"


def _layer_norm_mistakes(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float, n: _Names
) -> dict[str, torch.Tensor]:
    """Description (in the student's terms) -> the output that mistake gives on these inputs.
    Combinations come before the single mistakes they contain, so the most complete name wins."""
    m: dict[str, torch.Tensor] = {}

    def add(description: str, **kwargs: Any) -> None:
        m[description] = _variant(x, w, b, kwargs.pop("eps", eps), **kwargs)

    add(
        "it divides by `std + eps`, the formula of some tutorials. torch.std is the unbiased "
        "standard deviation (it divides by D - 1), and eps is added outside the square root. "
        "LayerNorm divides by sqrt(var + eps) with the biased variance (divide by D).",
        correction=1,
        eps_at="outside",
    )
    add(
        "it divides by the unbiased standard deviation with no eps at all (`x.std(dim=-1)` "
        "divides by D - 1). LayerNorm divides by sqrt(var + eps), with the biased variance "
        "(divide by D) and eps inside the square root.",
        correction=1,
        eps_at="none",
    )
    add(
        "it uses the unbiased variance, dividing by D - 1 (the default of torch.var and "
        "torch.std). LayerNorm uses the biased variance, dividing by D: "
        "`x.var(dim=-1, unbiased=False, keepdim=True)` or the mean of the squared deviations.",
        correction=1,
    )
    add(
        f"eps is added outside the square root, (x - mean) / (sqrt(var) + {n.eps}). It belongs "
        f"inside: (x - mean) / sqrt(var + {n.eps}). The two differ most when the variance is "
        "tiny, exactly where eps matters.",
        eps_at="outside",
    )
    add(
        "it has no eps at all: dividing by sqrt(var) (or by the std) divides by zero when a "
        f"position's D features are all equal. Add {n.eps} inside the square root: "
        f"sqrt(var + {n.eps}).",
        eps_at="none",
    )
    add(
        f"it ignores {n.weight} and {n.bias} (the gain gamma and the offset beta): multiply "
        f"the normalised x by {n.weight}, then add {n.bias}.",
        affine="none",
    )
    add(f"it ignores {n.weight} (the gain gamma): multiply the normalised x by it.", affine="bias")
    add(f"it ignores {n.bias} (the offset beta): add it after the gain.", affine="weight")
    add(
        f"it adds {n.bias} before multiplying by {n.weight}. The output is "
        f"x_hat * {n.weight} + {n.bias}: scale first, then shift.",
        affine="bias_first",
    )
    rank = x.dim()
    if rank >= 2 and x.shape[0] > 1:
        add(
            "it normalises over the wrong axis: the batch axis (dim 0), the way BatchNorm does. "
            "LayerNorm normalises each position over its own D features: dim=-1.",
            dims=(0,),
        )
    if rank == 3 and x.shape[1] > 1:
        add(
            "it normalises over the wrong axis: the sequence axis (dim 1), mixing the positions "
            "of a sentence. LayerNorm normalises each position over its own D features: dim=-1.",
            dims=(1,),
        )
    if rank >= 3:
        add(
            "it normalises over the wrong axis: over all the features of a whole sequence at "
            "once. LayerNorm normalises each position over its own D features only: dim=-1.",
            dims=tuple(range(1, rank)),
        )
    if rank >= 2:
        add(
            "it normalises over the wrong axis: over the whole tensor at once. LayerNorm "
            "normalises each position over its own D features only: dim=-1.",
            dims=tuple(range(rank)),
        )
    if eps != _DEFAULT_EPS:
        add(
            f"it ignores {n.eps_source}: with eps={eps:g} your output is the one for eps=1e-5. "
            f"Use {n.eps} instead of a fixed number.",
            eps=_DEFAULT_EPS,
        )
    return m


# --- shared machinery for exercises 1 and 2 ------------------------------------------------------

_Call = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Any]


def _student(exercise: str, call: _Call, x, w, b) -> Any:
    with _student_call(exercise):
        return call(x, w, b)


def _with_rank_hint(e: GradingError, x: torch.Tensor) -> GradingError:
    """A dimension out of range usually means a hard-coded axis: say how to fix it."""
    if _core._type(e) is not GradingError or "out of range" not in str(e):
        return e
    return GradingError(
        f"{e}. This test passes an input with {x.dim()} dimension(s), shape {tuple(x.shape)}: "
        "normalise over dim=-1 (the last axis) so that any number of leading dimensions works."
    )


def _check_layer_norm_case(
    exercise: str,
    call: _Call,
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor,
    eps: float,
    what: str,
    names: _Names,
) -> None:
    expected = _reference(x, w, b, eps)
    mistakes = _layer_norm_mistakes(x, w, b, eps, names)
    originals = (x.clone(), w.clone(), b.clone())
    try:
        actual = _student(exercise, call, x, w, b)
    except GradingError as e:
        hinted = _with_rank_hint(e, x)
        if hinted is e:
            raise
        raise hinted from e
    for tensor, original, name in zip(
        (x, w, b), originals, ("x", names.weight, names.bias), strict=True
    ):
        if not _core._equal(tensor, original):
            raise GradingError(
                f"{what} changed {name} in place (an operation such as `x -= mean` or "
                "`x.sub_(...)`). Compute new tensors instead: the caller's tensors must not change."
            )
    _core.expect_shape(actual, tuple(x.shape), what, "the shape of x")
    _core.expect_dtype(actual, x.dtype, what, _DTYPE)

    def nan_where_constant() -> None:
        if bool(torch.isnan(actual).any()) and not bool(torch.isnan(x).any()):
            constant = (x == x[..., :1]).all(dim=-1)
            if bool(constant.any()):
                raise GradingError(
                    f"{what} gives NaN for a position whose D features are all equal: its "
                    "variance is 0, so dividing by sqrt(var) divides by zero. That is what eps is "
                    f"for: divide by sqrt(var + {names.eps}), with eps inside the square root."
                )

    def diagnosis() -> str | None:
        return _diagnose(exercise, call, x, w, b, eps, actual, names)

    tol = {"atol": 1e-5, "rtol": 1e-4} if x.dtype == torch.float32 else {}
    _core.expect_close(
        actual, expected, what, mistakes, probes=(nan_where_constant, diagnosis), **tol
    )


def _diagnose(exercise, call, x, w, b, eps, actual, names: _Names) -> str | None:
    """No known mistake matched: look for a property that explains the difference (returned as
    the description of the mistake)."""
    if x.dim() >= 2 and x.shape[0] > 1:
        changed = x.clone()
        changed[0] = changed[0] * 3.0 + 1.0
        other = _student(exercise, call, changed, w, b)
        if not _core._close(
            other[1:] if _core._type(other) is _core._Tensor else other, actual[1:]
        ):
            return (
                "it normalises over the wrong axis. Changing the first batch element changed the "
                "output of the others, so your statistics mix the batch (as BatchNorm does). "
                "LayerNorm uses only each position's own D features: dim=-1."
            )
    if x.dim() >= 3 and x.shape[1] > 1:
        changed = x.clone()
        changed[:, 0] = changed[:, 0] * 3.0 + 1.0
        other = _student(exercise, call, changed, w, b)
        if not _core._close(
            other[:, 1:] if _core._type(other) is _core._Tensor else other, actual[:, 1:]
        ):
            return (
                "it normalises over the wrong axis. Changing the first position of each sequence "
                "changed the output at the other positions, so your statistics mix positions. "
                "LayerNorm uses only each position's own D features: dim=-1."
            )
    ones, zeros = torch.ones_like(w), torch.zeros_like(b)
    plain = _student(exercise, call, x, ones, zeros)
    if _core._type(plain) is not _core._Tensor or plain.shape != x.shape:
        return None
    plain = plain.detach()
    if not bool(torch.isfinite(plain).all()):
        return None
    if float(plain.mean(dim=-1).abs().max()) > 1e-6:
        return (
            f"with {names.weight} = 1 and {names.bias} = 0 the D outputs of a position should "
            "have mean 0, and yours do not. Subtract each position's mean over the last dimension "
            "(keepdim=True so that it broadcasts)."
        )
    with torch.no_grad():
        var = x.var(dim=-1, correction=0)
        target = var / (var + eps)  # the variance of x_hat
    if not _core._close(plain.var(dim=-1, correction=0), target, 1e-6, 1e-4):
        return (
            f"with {names.weight} = 1 and {names.bias} = 0 each position's output should have "
            "variance var / (var + eps), about 1, and yours does not. Divide (x - mean) by "
            f"sqrt(var + {names.eps}), where var is the mean of (x - mean) ** 2 over the last "
            "dimension."
        )
    if not _core._close(actual, plain * w + b):
        return (
            "the normalisation is right but the gain and offset are not applied as "
            f"x_hat * {names.weight} + {names.bias} (elementwise, over the last dimension)."
        )
    return None


def _check_gradients(
    exercise: str,
    call: _Call,
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor,
    eps: float,
    what: str,
    names: _Names,
    student_leaves: Callable[[], tuple[Any, Any]] | None = None,
) -> None:
    """Gradients of x, weight and bias must match the reference's."""
    upstream = _core.randn(*x.shape, seed=97)
    rx, rw, rb = (t.detach().clone().requires_grad_() for t in (x, w, b))
    ref = encoder_lib.LayerNorm(x.shape[-1], eps).to(x.dtype)
    with torch.no_grad():
        ref.weight.copy_(rw)
        ref.bias.copy_(rb)
    (ref(rx) * upstream).sum().backward()
    expected = (rx.grad, ref.weight.grad, ref.bias.grad)
    sx, sw, sb = (t.detach().clone().requires_grad_() for t in (x, w, b))
    with _student_call(exercise):
        out = call(sx, sw, sb)
        _core.expect_tensor(out, what)
        if not out.requires_grad:
            raise GradingError(
                f"{what} returns a tensor that is cut off from autograd (no grad_fn): do not use "
                "torch.no_grad(), .detach(), .data, .item() or .tolist() inside it, or no "
                "gradient reaches x and the parameters."
            )
        (out * upstream).sum().backward()
    leaves = student_leaves() if student_leaves is not None else (sw, sb)
    actual = (sx, *leaves)
    for tensor, wanted, name in zip(actual, expected, ("x", names.weight, names.bias), strict=True):
        if tensor.grad is None:
            raise GradingError(
                f"{what}: after backward, {name}.grad is None, so training would never update "
                f"it. Use {name} itself in the computation (not .data, .detach() or a copy)."
            )
        _core.expect_close(tensor.grad, wanted, f"the gradient of {name} through {what}")


def _cases(thorough: bool) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, float | None]]:
    """(x, weight, bias, eps or None for the default); D = 4 at first, where D and D - 1 differ
    a lot. Rows get very different scales and offsets (some with a tiny variance, where eps
    matters), and the first few sizes differ (B != L != D) so a wrong axis cannot hide."""

    def mixed(*shape: int, seed: int) -> torch.Tensor:
        rows = shape[:-1]
        scale = torch.exp(_core.randn(*rows, 1, seed=seed + 1) * 2.0)  # from ~0.02 to ~50
        scale = scale.clamp(min=0.01)
        offset = _core.randn(*rows, 1, seed=seed + 2) * 3.0
        return _core.randn(*shape, seed=seed) * scale + offset

    def affine(d: int, seed: int, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
        w = (1.0 + 0.5 * _core.randn(d, seed=seed)).to(dtype)
        b = _core.randn(d, seed=seed + 1).to(dtype)
        return w, b

    x1 = mixed(3, 5, 4, seed=1)
    x1[0, 0] *= 0.0001 / float(x1[0, 0].std())  # one position with a tiny variance
    constant = _core.randn(2, 3, 4, seed=3)
    constant[0, 0] = 2.5  # all features equal: variance exactly 0
    constant[1, 2] = -1.25 + 1e-4 * _core.randn(4, seed=4)  # nearly constant
    cases = [
        (x1, *affine(4, 10), None),
        (mixed(3, 5, 4, seed=20), *affine(4, 30), 0.5),
        (constant, *affine(4, 40), None),
        (mixed(7, 6, seed=70), *affine(6, 71), None),  # (N, D): not only (B, L, D)
    ]
    if thorough:
        x32 = _core.randn(4, 6, 32, seed=90, dtype=torch.float32) * 2.0 + 0.5
        cases += [
            (mixed(2, 3, 16, seed=50), *affine(16, 60), 1e-3),
            (mixed(5, seed=72), *affine(5, 73), None),
            (mixed(1, 1, 8, seed=74), *affine(8, 75), 0.1),
            (mixed(2, 2, 3, 6, seed=76), *affine(6, 77), None),
            (x32, *affine(32, 91, torch.float32), None),
        ]
    return cases


def _describe(call: str, x: torch.Tensor, eps: float | None) -> str:
    """``call`` holds ``{eps}`` where the eps argument goes, e.g. ``"LayerNorm(4{eps})(x)"``."""
    eps_text = "" if eps is None else f", eps={eps:g}"
    dtype = "" if x.dtype == torch.float64 else f" ({x.dtype})"
    return call.format(eps=eps_text) + f" with x of shape {tuple(x.shape)}{dtype}"


# --- exercise 1 ----------------------------------------------------------------------------------


@_core.guarded
def check_layer_norm(layer_norm: Callable, thorough: bool = False) -> None:
    """Exercise 1: ``layer_norm(x, weight, bias, eps=1e-5)`` normalises over the last dimension
    with the biased variance and eps inside the square root, then applies gain and offset."""
    if not callable(layer_norm) or isinstance(layer_norm, type):
        raise GradingError(
            f"layer_norm should be a function, got {type(layer_norm).__name__}: keep the given "
            "`def layer_norm(x, weight, bias, eps=1e-5):`"
        )
    names = _Names(module=False)
    for x, w, b, eps in _cases(thorough):
        what = _describe("layer_norm(x, weight, bias{eps})", x, eps)

        def call(x_, w_, b_, eps=eps):
            return layer_norm(x_, w_, b_) if eps is None else layer_norm(x_, w_, b_, eps=eps)

        actual_eps = _DEFAULT_EPS if eps is None else eps
        _check_layer_norm_case("layer_norm", call, x, w, b, actual_eps, what, names)
    if thorough:
        x, w, b, _ = _cases(False)[0]
        what = _describe("layer_norm(x, weight, bias{eps})", x, None)
        _check_gradients(
            "layer_norm", lambda x_, w_, b_: layer_norm(x_, w_, b_), x, w, b, 1e-5, what, names
        )


# --- exercise 2 ----------------------------------------------------------------------------------


def _build(LayerNorm: type, d: int, eps: float | None, dtype: torch.dtype) -> nn.Module:
    given = "keep the given __init__"
    with _student_call("LayerNorm.__init__"):
        module = LayerNorm(d) if eps is None else LayerNorm(d, eps=eps)
    if not isinstance(module, nn.Module):
        raise GradingError(f"LayerNorm({d}) is not an nn.Module: {given}.")
    params = dict(module.named_parameters())
    if sorted(params) != ["bias", "weight"]:
        raise GradingError(
            f"LayerNorm({d}) should have exactly two parameters, `weight` and `bias` (the names "
            f"nn.LayerNorm uses, so that load_state_dict works), got {sorted(params)}: {given}."
        )
    for name, fill in (("weight", 1.0), ("bias", 0.0)):
        p = params[name]
        if tuple(p.shape) != (d,) or not bool((p == fill).all()):
            raise GradingError(
                f"LayerNorm({d}).{name} should start as a parameter of shape ({d},) filled with "
                f"{fill:g}: {given}."
            )
    wanted_eps = _DEFAULT_EPS if eps is None else eps
    if getattr(module, "eps", None) != wanted_eps:
        raise GradingError(
            f"LayerNorm({d}{'' if eps is None else f', eps={eps:g}'}).eps should be {wanted_eps:g}"
            f": {given} (it stores the eps argument in self.eps)."
        )
    return module.to(dtype)


@_core.guarded
def check_layer_norm_module(LayerNorm: type, thorough: bool = False) -> None:
    """Exercise 2: ``LayerNorm(d_model, eps)`` with parameters ``weight`` (ones) and ``bias``
    (zeros); ``forward`` normalises over the last dimension exactly as ``nn.LayerNorm``."""
    if not isinstance(LayerNorm, type) or not issubclass(LayerNorm, nn.Module):
        raise GradingError(
            "LayerNorm should be a class derived from nn.Module: keep the given "
            "`class LayerNorm(nn.Module):` and its __init__, and write forward."
        )
    names = _Names(module=True)
    for x, w, b, eps in _cases(thorough):
        d = x.shape[-1]
        module = _build(LayerNorm, d, eps, x.dtype)
        what = _describe(f"LayerNorm({d}{{eps}})(x)", x, eps)

        def call(x_, w_, b_, module=module):
            with torch.no_grad():
                module.weight.copy_(w_)
                module.bias.copy_(b_)
            return module(x_)

        actual_eps = _DEFAULT_EPS if eps is None else eps
        _check_layer_norm_case("LayerNorm.forward", call, x, w, b, actual_eps, what, names)
    if thorough:
        x, w, b, _ = _cases(False)[0]
        module = _build(LayerNorm, x.shape[-1], None, x.dtype)
        with torch.no_grad():
            module.weight.copy_(w)
            module.bias.copy_(b)
        what = _describe(f"LayerNorm({x.shape[-1]}{{eps}})(x)", x, None)
        _check_gradients(
            "LayerNorm.forward",
            lambda x_, w_, b_: module(x_),
            x,
            w,
            b,
            1e-5,
            what,
            names,
            student_leaves=lambda: (module.weight, module.bias),
        )


# --- exercise 3 ----------------------------------------------------------------------------------


class _Counted(nn.Module):
    """Wraps a sub-layer or norm and counts how often it is called."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.fn = fn
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.fn(x)


def _residual_parts(d: int, seed: int):
    """A sub-layer (tanh of an affine map) and a LayerNorm with a non-trivial gain and offset, so
    that every arrangement of the two gives a different output. No global random state is used."""
    weight = _core.randn(d, d, seed=seed) / math.sqrt(d) * 1.5
    shift = _core.randn(d, seed=seed + 1) * 0.5
    norm = encoder_lib.LayerNorm(d).to(torch.float64)
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.5 * _core.randn(d, seed=seed + 2))
        norm.bias.copy_(_core.randn(d, seed=seed + 3))

    def sublayer(t: torch.Tensor) -> torch.Tensor:
        return torch.tanh(t @ weight.T + shift) * 2.0

    return sublayer, norm


def _residual_mistakes(x, sub, norm, norm_first: bool) -> dict[str, torch.Tensor]:
    """Description -> the output of that wrong arrangement of x, sublayer and norm."""
    with torch.no_grad():
        if norm_first:
            wrong = [
                (
                    "it computes post-norm, norm(x + sublayer(x)), but norm_first=True asks for "
                    "pre-norm: x + sublayer(norm(x)) (the norm is in the wrong place).",
                    norm(x + sub(x)),
                ),
                (
                    "it is missing the residual connection: it returns sublayer(norm(x)). Add x "
                    "back: x + sublayer(norm(x)).",
                    sub(norm(x)),
                ),
                (
                    "the residual adds the normalised x, norm(x) + sublayer(norm(x)). The "
                    "residual path must carry the original x untouched: x + sublayer(norm(x)).",
                    norm(x) + sub(norm(x)),
                ),
                (
                    "it applies the norm twice (before the sublayer and after the sum): pre-norm "
                    "normalises only the sublayer's input, x + sublayer(norm(x)).",
                    norm(x + sub(norm(x))),
                ),
                (
                    "it applies the norm twice: x + sublayer(norm(x)) calls norm once.",
                    x + sub(norm(norm(x))),
                ),
                ("it never applies the norm: pre-norm is x + sublayer(norm(x)).", x + sub(x)),
                (
                    "it normalises the sublayer's output instead of its input: pre-norm is "
                    "x + sublayer(norm(x)).",
                    x + norm(sub(x)),
                ),
            ]
        else:
            wrong = [
                (
                    "it computes pre-norm, x + sublayer(norm(x)), but norm_first=False (the "
                    "default) asks for post-norm: norm(x + sublayer(x)) (the norm is in the wrong "
                    "place).",
                    x + sub(norm(x)),
                ),
                (
                    "it is missing the residual connection: it returns norm(sublayer(x)). Add x "
                    "before normalising: norm(x + sublayer(x)).",
                    norm(sub(x)),
                ),
                (
                    "it is missing the residual connection and the norm: it returns sublayer(x). "
                    "Post-norm is norm(x + sublayer(x)).",
                    sub(x),
                ),
                ("it never applies the norm: post-norm is norm(x + sublayer(x)).", x + sub(x)),
                (
                    "it applies the norm twice (before the sublayer and after the sum): "
                    "post-norm is norm(x + sublayer(x)), with one norm, after the sum.",
                    norm(x + sub(norm(x))),
                ),
                (
                    "it applies the norm twice: post-norm is norm(x + sublayer(x)).",
                    norm(norm(x + sub(x))),
                ),
                (
                    "it normalises the sublayer's output before adding x: post-norm normalises "
                    "the sum, norm(x + sublayer(x)).",
                    x + norm(sub(x)),
                ),
            ]
    return dict(wrong)


def _run_block(residual_block, x, sub, norm, norm_first: bool | None, what: str):
    """Call the student's block with counting wrappers; return (output, sub calls, norm calls)."""
    counted_sub, counted_norm = _Counted(sub), _Counted(norm)
    original = x.clone()
    with _student_call("residual_block", forbid=False):
        if norm_first is None:
            out = residual_block(x, counted_sub, counted_norm)
        else:
            out = residual_block(x, counted_sub, counted_norm, norm_first=norm_first)
    if not _core._equal(x.detach(), original.detach()):
        raise GradingError(
            f"{what} changed x in place (e.g. `x += sublayer(x)`), so the caller's tensor "
            "changed too. Write `x + sublayer(...)`, which makes a new tensor."
        )
    return out, counted_sub.calls, counted_norm.calls


def _check_block_case(residual_block, x, sub, norm, norm_first: bool | None) -> None:
    first = bool(norm_first)
    flag = "" if norm_first is None else f", norm_first={norm_first}"
    kind = "pre-norm" if first else "post-norm"
    what = f"residual_block(x, sublayer, norm{flag}) ({kind}, x of shape {tuple(x.shape)})"
    with torch.no_grad():
        expected = x + sub(norm(x)) if first else norm(x + sub(x))
    mistakes = _residual_mistakes(x, sub, norm, first)
    actual, sub_calls, norm_calls = _run_block(residual_block, x, sub, norm, norm_first, what)
    _core.expect_shape(actual, tuple(x.shape), what, "the shape of x")

    def call_count() -> str | None:
        if norm_calls > 1:
            return f"it applies the norm {norm_calls} times; {kind} applies it exactly once."
        if norm_calls == 0:
            return "it never calls norm."
        if sub_calls == 0:
            return "it never calls sublayer."
        return None

    _core.expect_close(actual, expected, what, mistakes, probes=(call_count,))
    if sub_calls != 1:
        raise GradingError(
            f"{what} calls sublayer {sub_calls} times: call it once and reuse the result (a "
            "sublayer with dropout would give a different output on each call, and every call "
            "costs a full attention or feed-forward pass)."
        )
    if norm_calls != 1:
        raise GradingError(
            f"{what} calls norm {norm_calls} times; {kind} applies it exactly once (the norm "
            "applied twice is a different, wrong layer as soon as the gain and offset are learnt)."
        )


@_core.guarded
def check_residual_block(residual_block: Callable, thorough: bool = False) -> None:
    """Exercise 3: ``residual_block(x, sublayer, norm, norm_first=False)`` returns
    ``norm(x + sublayer(x))`` (post-norm) or, with ``norm_first=True``,
    ``x + sublayer(norm(x))`` (pre-norm)."""
    if not callable(residual_block) or isinstance(residual_block, type):
        raise GradingError(
            f"residual_block should be a function, got {type(residual_block).__name__}: keep "
            "the given `def residual_block(x, sublayer, norm, norm_first=False):`"
        )
    sub, norm = _residual_parts(6, seed=200)
    x = _core.randn(2, 3, 6, seed=210) * 1.5 + 0.3
    _check_block_case(residual_block, x, sub, norm, None)
    _check_block_case(residual_block, x, sub, norm, False)
    _check_block_case(residual_block, x, sub, norm, True)
    if not thorough:
        return
    # The identity path: with a sublayer that outputs zeros, pre-norm returns x itself.
    zero = _Counted(torch.zeros_like)
    what = "residual_block(x, sublayer, norm, norm_first=True) with a sublayer that returns zeros"
    with _student_call("residual_block", forbid=False):
        out = residual_block(x, zero, _Counted(norm), norm_first=True)
    _core.expect_shape(out, tuple(x.shape), what)
    if not _core._close(out, x, 1e-12, 0.0):
        raise GradingError(
            f"{what} should return x unchanged (x + 0): the residual path carries x itself, "
            "untouched by the norm. Yours does not."
        )
    for shape, seed in (((5, 8), 220), ((1, 1, 8), 230), ((3, 4, 8), 240)):
        sub8, norm8 = _residual_parts(8, seed=seed)
        x8 = _core.randn(*shape, seed=seed + 5) * 2.0 - 0.5
        for norm_first in (False, True):
            _check_block_case(residual_block, x8, sub8, norm8, norm_first)
    # Gradients flow through both paths.
    upstream = _core.randn(*x.shape, seed=250)

    def gradient(block: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        leaf = x.clone().requires_grad_()
        (block(leaf) * upstream).sum().backward()
        return leaf.grad

    for norm_first in (False, True):
        kind = "pre-norm" if norm_first else "post-norm"
        if norm_first:
            expected = gradient(lambda t: t + sub(norm(t)))
            skip_cut = gradient(lambda t: t.detach() + sub(norm(t)))
        else:
            expected = gradient(lambda t: norm(t + sub(t)))
            skip_cut = gradient(lambda t: norm(t.detach() + sub(t)))
        mistakes = {
            "no gradient flows along the skip path (is x detached there?). The identity path "
            "is the point of a residual connection: x + ... must use x itself.": skip_cut
        }
        sx = x.clone().requires_grad_()
        what = f"residual_block(x, sublayer, norm, norm_first={norm_first}) ({kind})"
        with _student_call("residual_block", forbid=False):
            out = residual_block(sx, sub, norm, norm_first=norm_first)
            _core.expect_tensor(out, what)
            if not out.requires_grad:
                raise GradingError(
                    f"{what} returns a tensor cut off from autograd: no .detach(), .data or "
                    "torch.no_grad() inside the block."
                )
            (out * upstream).sum().backward()
        if sx.grad is None:
            raise GradingError(f"{what}: no gradient reaches x.")
        _core.expect_close(sx.grad, expected, f"the gradient of x through {what}", mistakes)
