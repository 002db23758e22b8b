"""Notebook 03: layer normalisation and residual connections, as data for the runner.

- ``check_layer_norm(layer_norm)``: exercise 1, ``layer_norm(x, weight, bias, eps=1e-5)`` over
  the last dimension.
- ``check_layer_norm_module(LayerNorm)``: exercise 2, the ``nn.Module`` with ``weight``/``bias``
  parameters and ``eps`` (the student writes ``forward``).
- ``check_residual_block(residual_block)``: exercise 3, ``norm(x + sublayer(x))`` (post-norm) or
  ``x + sublayer(norm(x))`` (pre-norm).

The catalogue: the unbiased variance (D - 1, ``torch.var``'s and ``torch.std``'s default), eps
outside the square root, no eps, ``std + eps``, an ignored eps argument or ``self.eps``, missing
weight and/or bias or the bias applied before the weight, normalising over the batch or sequence
axis (or several axes); for the residual block: a missing residual, a missing norm, pre-norm
where post-norm was asked and the reverse, the norm applied twice, the residual taken from the
normalised input, the norm applied to the sublayer's output, a sublayer or norm called more than
once, no gradient along the skip path. ``F.layer_norm`` (hence ``nn.LayerNorm``),
``torch.layer_norm``, group/instance/batch norm and ``encoder_lib.LayerNorm`` are forbidden.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import partial
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

import encoder_lib

from ..feedback import Mistake
from ..kernel import observe
from ..kernel.forbidden import Forbidden
from ..kernel.observe import Call, Observation, Part
from ..runner import register_given
from ..vocabulary import Ask, Case, ModuleSpec, backpropagating, close, randn, reference_grads

__all__ = ["check_layer_norm", "check_layer_norm_module", "check_residual_block"]

_NORMS = Forbidden(
    torch={
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
    },
    python={encoder_lib.LayerNorm: "encoder_lib.layer_norm.LayerNorm"},
)
_DEFAULT_EPS = 1e-5


# --- the reference and its mistakes --------------------------------------------------------------


def _layer_norm(weight, bias, eps: float = _DEFAULT_EPS, dtype=torch.float64) -> torch.nn.Module:
    """The course's LayerNorm holding this gain and offset."""
    norm = encoder_lib.LayerNorm(weight.shape[0], eps).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(weight)
        norm.bias.copy_(bias)
    return norm


def _as_function(x, weight, bias, eps: float = _DEFAULT_EPS) -> torch.Tensor:
    """The course's LayerNorm as the notebook's function: differentiable in weight and bias."""
    norm = encoder_lib.LayerNorm(x.shape[-1], eps)
    return torch.func.functional_call(norm, {"weight": weight, "bias": bias}, (x,))


def _variant(
    x, w, b, eps: float, dims=(-1,), correction=0, eps_at: str = "inside", affine: str = "both"
) -> torch.Tensor:
    """LayerNorm written with one deliberate mistake (or none, with the defaults): ``eps_at`` is
    ``"inside"``, ``"outside"`` or ``"none"``, ``affine`` which of weight and bias are applied
    (``"both"``, ``"weight"``, ``"bias"``, ``"none"``, or ``"bias_first"``)."""
    with torch.no_grad():
        centred = x - x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, correction=correction, keepdim=True)
        if eps_at == "inside":
            x_hat = centred / torch.sqrt(var + eps)
        elif eps_at == "outside":
            x_hat = centred / (torch.sqrt(var) + eps)
        else:
            x_hat = centred / torch.sqrt(var)
        if affine == "bias_first":
            return (x_hat + b) * w
        scaled = x_hat * w if affine in ("both", "weight") else x_hat
        return scaled + b if affine in ("both", "bias") else scaled


def _mistakes(x, w, b, eps: float, n: SimpleNamespace) -> dict[str, torch.Tensor]:
    """Description -> the output of that mistake on these inputs. Combinations come before the
    single mistakes they contain, so that the most complete name wins."""
    variant = partial(_variant, x, w, b, eps=eps)
    m = {
        Mistake(
            "std-plus-eps",
            "it divides by `std + eps`, the formula of some tutorials. torch.std is the unbiased "
            "standard deviation (it divides by D - 1), and eps is added outside the square root. "
            "LayerNorm divides by sqrt(var + eps) with the biased variance "
            "(divide by D).",
        ): variant(correction=1, eps_at="outside"),
        Mistake(
            "unbiased-std-no-eps",
            "it divides by the unbiased standard deviation with no eps at all (`x.std(dim=-1)` "
            "divides by D - 1). LayerNorm divides by sqrt(var + eps), with the biased variance "
            "(divide by D) and eps inside the square root.",
        ): variant(correction=1, eps_at="none"),
        Mistake(
            "unbiased-variance",
            "it uses the unbiased variance, dividing by D - 1 (the default of torch.var and "
            "torch.std). LayerNorm uses the biased variance, dividing by D: "
            "`x.var(dim=-1, unbiased=False, keepdim=True)` or the mean of the squared "
            "deviations.",
        ): variant(correction=1),
        Mistake(
            "eps-outside-sqrt",
            f"eps is added outside the square root, (x - mean) / (sqrt(var) + {n.eps}). It belongs "
            f"inside: (x - mean) / sqrt(var + {n.eps}). The two differ most when the variance is "
            "tiny, exactly where eps matters.",
        ): variant(eps_at="outside"),
        Mistake(
            "no-eps",
            "it has no eps at all: dividing by sqrt(var) (or by the std) divides by zero when a "
            f"position's D features are all equal. Add {n.eps} inside the square root: "
            f"sqrt(var + {n.eps}).",
        ): variant(eps_at="none"),
        Mistake(
            "no-weight-no-bias",
            f"it ignores {n.weight} and {n.bias} (the gain gamma and the offset beta): multiply "
            f"the normalised x by {n.weight}, then add {n.bias}.",
        ): variant(affine="none"),
        Mistake(
            "no-weight", f"it ignores {n.weight} (the gain gamma): multiply the normalised x by it."
        ): variant(affine="bias"),
        Mistake(
            "no-bias", f"it ignores {n.bias} (the offset beta): add it after the gain."
        ): variant(affine="weight"),
        Mistake(
            "bias-before-weight",
            f"it adds {n.bias} before multiplying by {n.weight}. The output is "
            f"x_hat * {n.weight} + {n.bias}: scale first, then shift.",
        ): variant(affine="bias_first"),
    }
    d, axis = x.dim(), "it normalises over the wrong axis: "
    own = "LayerNorm normalises each position over its own D features"
    if d >= 2 and x.shape[0] > 1:
        batch = f"the batch axis (dim 0), the way BatchNorm does. {own}: dim=-1."
        m[Mistake("normalises-over-batch", axis + batch)] = variant(dims=(0,))
    if d == 3 and x.shape[1] > 1:
        sequence = f"the sequence axis (dim 1), mixing the positions of a sentence. {own}: dim=-1."
        m[Mistake("normalises-over-sequence", axis + sequence)] = variant(dims=(1,))
    if d >= 3:
        whole = f"over all the features of a whole sequence at once. {own} only: dim=-1."
        m[Mistake("normalises-over-whole-sequence", axis + whole)] = variant(
            dims=tuple(range(1, d))
        )
    if d >= 2:
        everything = f"over the whole tensor at once. {own} only: dim=-1."
        m[Mistake("normalises-over-everything", axis + everything)] = variant(dims=tuple(range(d)))
    if eps != _DEFAULT_EPS:
        ignored = Mistake(
            "eps-ignored",
            f"it ignores {n.eps_source}: with eps={eps:g} your output is the one for eps=1e-5. "
            f"Use {n.eps} instead of a fixed number.",
        )
        m[ignored] = variant(eps=_DEFAULT_EPS)
    return m


# --- the cases of exercises 1 and 2 --------------------------------------------------------------


def _inputs(thorough: bool) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, float | None]]:
    """(x, weight, bias, eps or None for the default); D = 4 at first, where D and D - 1 differ
    a lot. Rows get very different scales and offsets (some with a tiny variance, where eps
    matters), and the first sizes differ (B != L != D) so that a wrong axis cannot hide."""

    def mixed(*shape: int, seed: int) -> torch.Tensor:
        scale = torch.exp(randn(*shape[:-1], 1, seed=seed + 1) * 2.0).clamp(min=0.01)
        return randn(*shape, seed=seed) * scale + randn(*shape[:-1], 1, seed=seed + 2) * 3.0

    def affine(d: int, seed: int, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
        return (1.0 + 0.5 * randn(d, seed=seed)).to(dtype), randn(d, seed=seed + 1).to(dtype)

    x1 = mixed(3, 5, 4, seed=1)
    x1[0, 0] *= 0.0001 / float(x1[0, 0].std())  # one position with a tiny variance
    constant = randn(2, 3, 4, seed=3)
    constant[0, 0] = 2.5  # all features equal: variance exactly 0
    constant[1, 2] = -1.25 + 1e-4 * randn(4, seed=4)  # nearly constant
    cases = [
        (x1, *affine(4, 10), None),
        (mixed(3, 5, 4, seed=20), *affine(4, 30), 0.5),
        (constant, *affine(4, 40), None),
        (mixed(7, 6, seed=70), *affine(6, 71), None),  # (N, D): not only (B, L, D)
    ]
    if thorough:
        x32 = randn(4, 6, 32, seed=90, dtype=torch.float32) * 2.0 + 0.5
        cases += [
            (mixed(2, 3, 16, seed=50), *affine(16, 60), 1e-3),
            (mixed(5, seed=72), *affine(5, 73), None),
            (mixed(1, 1, 8, seed=74), *affine(8, 75), 0.1),
            (mixed(2, 2, 3, 6, seed=76), *affine(6, 77), None),
            (x32, *affine(32, 91, torch.float32), None),
        ]
    return cases


class _Form:
    """How one exercise is called: the function ``layer_norm(x, weight, bias, eps)`` or the
    module ``LayerNorm(D, eps)`` holding weight and bias."""

    def __init__(self, module: bool):
        self.module = module
        self.exercise = "layer_norm_module" if module else "layer_norm"
        self.target = "LayerNorm" if module else "layer_norm"
        prefix = "self." if module else ""
        self.names = SimpleNamespace(  # how the messages call eps, weight and bias
            **{name: prefix + name for name in ("eps", "weight", "bias")},
            eps_source="`self.eps`" if module else "the `eps` argument",
        )

    def call(self, x, w, b, eps: float | None, **extra: Any) -> Call:
        eps_kwargs = {} if eps is None else {"eps": eps}
        if not self.module:
            return Call(self.target, self.exercise, (x, w, b), eps_kwargs, **extra)
        return Call(
            self.target,
            self.exercise,
            (x,),
            init=((x.shape[-1],), eps_kwargs),
            dtype=x.dtype,
            state={"weight": w, "bias": b},
            inspect=True,
            attrs=("eps",),
            **extra,
        )

    def what(self, x: torch.Tensor, eps: float | None) -> str:
        eps_text = "" if eps is None else f", eps={eps:g}"
        if self.module:
            call = f"LayerNorm({x.shape[-1]}{eps_text})(x)"
        else:
            call = f"layer_norm(x, weight, bias{eps_text})"
        dtype = "" if x.dtype == torch.float64 else f" ({x.dtype})"
        return f"{call} with x of shape {tuple(x.shape)}{dtype}"

    def reference(self, w, b, eps: float, dtype: torch.dtype) -> Callable[..., Any]:
        """The course's LayerNorm, as this exercise's module or function."""
        return _layer_norm(w, b, eps, dtype) if self.module else _as_function

    def spec(self, d: int, eps: float) -> ModuleSpec | None:
        if not self.module:
            return None
        return ModuleSpec(
            parameters=("weight", "bias"),
            names_message=(
                f"LayerNorm({d}) should have exactly two parameters, `weight` and `bias` (the "
                "names nn.LayerNorm uses, so that load_state_dict works), got {got}: keep the "
                "given __init__, which wraps each in nn.Parameter (a plain tensor stored on the "
                "module is no parameter: load_state_dict and an optimiser never see it)."
            ),
            initial={"weight": 1.0, "bias": 0.0},
            attrs={"eps": eps},
        )

    def cases(self, thorough: bool) -> Iterator[Case]:
        for x, w, b, eps in _inputs(thorough):
            yield self.case(x, w, b, eps)
        if thorough:
            yield self.gradient_case(*_inputs(False)[0][:3])

    def case(self, x, w, b, eps: float | None) -> Case:
        actual_eps = _DEFAULT_EPS if eps is None else eps

        def rank_hint(failure: observe.Failure) -> str | None:
            if "out of range" not in failure.message:
                return None
            return Mistake(
                "fixed-rank",
                f"This test passes an input with {x.dim()} dimension(s), shape {tuple(x.shape)}: "
                "normalise over dim=-1 (the last axis) so that any number of leading dimensions "
                "works.",
            )

        return Case(
            self.call(x, w, b, eps),
            self.what(x, eps),
            reference=self.reference(w, b, actual_eps, x.dtype),
            mistakes=lambda: _mistakes(x, w, b, actual_eps, self.names),
            probes=(partial(self.diagnose, x, w, b, eps),),
            module=self.spec(x.shape[-1], actual_eps),
            failure_hint=rank_hint,
        )

    def diagnose(self, x, w, b, eps: float | None, obs: Observation, ask: Ask) -> str | None:
        """No known mistake matched: look for a property that explains the difference."""
        got, names = obs.value, self.names
        if bool(torch.isnan(got).any()) and bool((x == x[..., :1]).all(dim=-1).any()):
            return Mistake(
                "no-eps",
                "it gives NaN for a position whose D features are all equal: its variance "
                "is 0, so dividing by sqrt(var) divides by zero. That is what eps is for: "
                f"divide by sqrt(var + {names.eps}), with eps inside the square root.",
            )

        def rerun(x_: torch.Tensor, w_: torch.Tensor, b_: torch.Tensor) -> Any:
            obs = ask(self.call(x_, w_, b_, eps))
            return None if obs.failure is not None else obs.value

        for axis, where in ((0, "first batch element"), (1, "first position of each sequence")):
            if x.dim() < 2 + axis or x.shape[axis] < 2:
                continue
            changed = x.clone()
            index = (slice(None),) * axis + (0,)
            changed[index] = changed[index] * 3.0 + 1.0
            rest = (slice(None),) * axis + (slice(1, None),)
            other = rerun(changed, w, b)
            if isinstance(other, torch.Tensor) and not close(other[rest], got[rest]):
                mixes = "mix the batch (as BatchNorm does)" if axis == 0 else "mix positions"
                return Mistake(
                    "normalises-over-wrong-axis",
                    f"it normalises over the wrong axis. Changing the {where} changed the "
                    f"output of the others, so your statistics {mixes}. LayerNorm uses only each "
                    "position's own D features: dim=-1.",
                )
        plain = rerun(x, torch.ones_like(w), torch.zeros_like(b))
        usable = isinstance(plain, torch.Tensor) and plain.shape == x.shape
        if not usable or not bool(torch.isfinite(plain).all()):
            return None
        if float(plain.mean(dim=-1).abs().max()) > 1e-6:
            return Mistake(
                "not-centred",
                f"with {names.weight} = 1 and {names.bias} = 0 the D outputs of a position should "
                "have mean 0, and yours do not. Subtract each position's mean over the last "
                "dimension (keepdim=True so that it broadcasts).",
            )
        var = x.var(dim=-1, correction=0)
        actual_eps = _DEFAULT_EPS if eps is None else eps
        if not close(plain.var(dim=-1, correction=0), var / (var + actual_eps), 1e-6, 1e-4):
            return Mistake(
                "wrong-variance",
                f"with {names.weight} = 1 and {names.bias} = 0 each position's output should have "
                "variance var / (var + eps), about 1, and yours does not. Divide (x - mean) by "
                f"sqrt(var + {names.eps}), where var is the mean of (x - mean) ** 2 over the last "
                "dimension.",
            )
        if not close(got, plain * w + b):
            return Mistake(
                "wrong-affine",
                "the normalisation is right but the gain and offset are not applied as "
                f"x_hat * {names.weight} + {names.bias} (elementwise, over the last dimension).",
            )
        return None

    def gradient_case(self, x, w, b) -> Case:
        """Gradients of x, weight and bias, with the default eps."""
        weight, bias = (
            ("parameters.weight", "parameters.bias") if self.module else ("args[1]", "args[2]")
        )
        case = Case(
            self.call(x, w, b, None),
            self.what(x, None),
            reference=self.reference(w, b, _DEFAULT_EPS, x.dtype),
            module=self.spec(x.shape[-1], _DEFAULT_EPS),
        )
        return backpropagating(
            case,
            randn(*x.shape, seed=97),
            grad=("args[0]", "parameters") if self.module else ("args[0]", weight, bias),
            grad_names={"args[0]": "x", weight: self.names.weight, bias: self.names.bias},
        )


check_layer_norm = register_given(
    1,
    "def layer_norm(x, weight, bias, eps=1e-5):",
    _Form(module=False).cases,
    forbidden=_NORMS,
    letters=("the shape of x",),
    inputs={"args[0]": "x", "args[1]": "weight", "args[2]": "bias"},
)
check_layer_norm_module = register_given(
    2,
    "class LayerNorm(nn.Module):",
    _Form(module=True).cases,
    name="layer_norm_module",
    forbidden=_NORMS,
    letters=("the shape of x",),
)


# --- exercise 3: residual_block ------------------------------------------------------------------


@observe.part("residual.sublayer")
def _sublayer(part: Part) -> Callable[[torch.Tensor], torch.Tensor]:
    weight, shift = part.tensors["weight"], part.tensors["shift"]
    return lambda t: torch.tanh(t @ weight.T + shift) * 2.0


@observe.part("residual.norm")
def _norm(part: Part) -> Callable[[torch.Tensor], torch.Tensor]:
    return _layer_norm(part.tensors["weight"], part.tensors["bias"])


@observe.part("zeros")
def _zeros(part: Part) -> Callable[[torch.Tensor], torch.Tensor]:
    return torch.zeros_like


def _parts(d: int, seed: int) -> tuple[Part, Part]:
    """A sub-layer (tanh of an affine map) and a LayerNorm with a non-trivial gain and offset, so
    that every arrangement of the two gives a different output."""
    weight = randn(d, d, seed=seed) / math.sqrt(d) * 1.5
    sublayer = Part("residual.sublayer", {"weight": weight, "shift": randn(d, seed=seed + 1) * 0.5})
    gain, offset = 1.0 + 0.5 * randn(d, seed=seed + 2), randn(d, seed=seed + 3)
    return sublayer, Part("residual.norm", {"weight": gain, "bias": offset})


def _residual(x, sublayer, norm, norm_first: bool = False, cut_skip: bool = False) -> torch.Tensor:
    """The right block (with ``cut_skip``, one whose skip path carries no gradient)."""
    skip = x.detach() if cut_skip else x
    return skip + sublayer(norm(x)) if norm_first else norm(skip + sublayer(x))


def _arrangements(x, sub, norm, norm_first: bool) -> dict[str, torch.Tensor]:
    """The outputs of the wrong arrangements of x, sublayer and norm."""
    with torch.no_grad():
        normed = norm(x)
        post, pre, no_norm = norm(x + sub(x)), x + sub(normed), x + sub(x)
        norm_twice, norm_output = norm(x + sub(normed)), x + norm(sub(x))
        if norm_first:
            return {
                Mistake(
                    "post-norm-instead-of-pre-norm",
                    "it computes post-norm, norm(x + sublayer(x)), but norm_first=True asks for "
                    "pre-norm: x + sublayer(norm(x)) (the norm is in the wrong place).",
                ): post,
                Mistake(
                    "no-residual",
                    "it is missing the residual connection: it returns sublayer(norm(x)). Add x "
                    "back: x + sublayer(norm(x)).",
                ): sub(normed),
                Mistake(
                    "normalised-skip",
                    "the residual adds the normalised x, norm(x) + sublayer(norm(x)). The residual "
                    "path must carry the original x untouched: x + sublayer(norm(x)).",
                ): normed + sub(normed),
                Mistake(
                    "norm-twice",
                    "it applies the norm twice (before the sublayer and after the sum): pre-norm "
                    "normalises only the sublayer's input, x + sublayer(norm(x)).",
                ): norm_twice,
                Mistake(
                    "norm-twice",
                    "it applies the norm twice: x + sublayer(norm(x)) calls norm once.",
                ): x + sub(norm(normed)),
                Mistake(
                    "no-norm", "it never applies the norm: pre-norm is x + sublayer(norm(x))."
                ): no_norm,
                Mistake(
                    "norm-on-sublayer-output",
                    "it normalises the sublayer's output instead of its input: pre-norm is "
                    "x + sublayer(norm(x)).",
                ): norm_output,
            }
        return {
            Mistake(
                "pre-norm-instead-of-post-norm",
                "it computes pre-norm, x + sublayer(norm(x)), but norm_first=False (the default) "
                "asks for post-norm: norm(x + sublayer(x)) (the norm is in the wrong place).",
            ): pre,
            Mistake(
                "no-residual",
                "it is missing the residual connection: it returns norm(sublayer(x)). Add x "
                "before normalising: norm(x + sublayer(x)).",
            ): norm(sub(x)),
            Mistake(
                "no-residual-no-norm",
                "it is missing the residual connection and the norm: it returns sublayer(x). "
                "Post-norm is norm(x + sublayer(x)).",
            ): sub(x),
            Mistake(
                "no-norm", "it never applies the norm: post-norm is norm(x + sublayer(x))."
            ): no_norm,
            Mistake(
                "norm-twice",
                "it applies the norm twice (before the sublayer and after the sum): post-norm is "
                "norm(x + sublayer(x)), with one norm, after the sum.",
            ): norm_twice,
            Mistake(
                "norm-twice", "it applies the norm twice: post-norm is norm(x + sublayer(x))."
            ): norm(post),
            Mistake(
                "norm-on-sublayer-output",
                "it normalises the sublayer's output before adding x: post-norm normalises the "
                "sum, norm(x + sublayer(x)).",
            ): norm_output,
        }


def _block_case(
    x: torch.Tensor, parts: tuple[Part, Part], norm_first: bool | None, upstream=None
) -> Case:
    """The case of these inputs (``upstream``: backpropagating it, into x)."""
    first = bool(norm_first)
    flag = "" if norm_first is None else f", norm_first={norm_first}"
    kind = "pre-norm" if first else "post-norm"
    kwargs = {} if norm_first is None else {"norm_first": norm_first}
    what = f"residual_block(x, sublayer, norm{flag}) ({kind}, x of shape {tuple(x.shape)})"
    call = Call("residual_block", "residual_block", (x, *parts), kwargs)

    def call_count(obs: Observation, ask: Ask) -> str | None:
        sub_calls, norm_calls = obs.info.get("parts", [1, 1])
        if norm_calls > 1:
            return Mistake(
                "norm-called-more-than-once",
                f"it applies the norm {norm_calls} times; {kind} applies it exactly once.",
            )
        if norm_calls == 0:
            return Mistake("no-norm", "it never calls norm.")
        if sub_calls == 0:
            return Mistake("no-sublayer", "it never calls sublayer.")
        return None

    def once_each(obs: Observation, ask: Ask) -> str | None:
        sub_calls, norm_calls = obs.info.get("parts", [1, 1])
        if sub_calls != 1:
            return Mistake(
                "sublayer-called-more-than-once",
                f"it calls sublayer {sub_calls} times: call it once and reuse the result (a "
                "sublayer with dropout would give a different output on each call, and every "
                "call costs a full attention or feed-forward pass).",
            )
        if norm_calls != 1:
            return Mistake(
                "norm-called-more-than-once",
                f"it calls norm {norm_calls} times; {kind} applies it exactly once (the norm "
                "applied twice is a different, wrong layer as soon as the gain and offset are "
                "learnt).",
            )
        return None

    case = Case(
        call,
        what,
        reference=_residual,
        mistakes=_arrangements(x, _sublayer(parts[0]), _norm(parts[1]), first),
        probes=(call_count,),
        requires=(once_each,),
        letters=("the shape of x",),
        inputs={"args[0]": "x"},
        messages={
            "in_place": (
                "it changed x in place (e.g. `x += sublayer(x)`), so the caller's tensor changed "
                "too. Write `x + sublayer(...)`, which makes a new tensor."
            )
        },
    )
    if upstream is None:
        return case
    case = backpropagating(case, upstream, grad=("args[0]",))
    skip_cut = Mistake(
        "skip-path-detached",
        "no gradient flows along the skip path (is x detached there?). The identity path is "
        "the point of a residual connection: x + ... must use x itself.",
    )
    cut = reference_grads(partial(_residual, cut_skip=True), case.call)["args[0]"]
    case.grad_mistakes = {"args[0]": {skip_cut: cut}}
    return case


def _block_cases(thorough: bool) -> Iterator[Case]:
    parts = _parts(6, seed=200)
    x = randn(2, 3, 6, seed=210) * 1.5 + 0.3
    for norm_first in (None, False, True):
        yield _block_case(x, parts, norm_first)
    if not thorough:
        return
    # The identity path: with a sublayer that outputs zeros, pre-norm returns x itself.
    yield Case(
        Call(
            "residual_block", "residual_block", (x, Part("zeros"), parts[1]), {"norm_first": True}
        ),
        "residual_block(x, sublayer, norm, norm_first=True) with a sublayer that returns zeros",
        expected=x,
        atol=1e-12,
        rtol=0.0,
        probes=(
            lambda obs, ask: Mistake(
                "skip-path-not-identity",
                "it should return x unchanged (x + 0): the residual path carries x itself, "
                "untouched by the norm. Yours does not.",
            ),
        ),
    )
    for shape, seed in (((5, 8), 220), ((1, 1, 8), 230), ((3, 4, 8), 240)):
        x8 = randn(*shape, seed=seed + 5) * 2.0 - 0.5
        for norm_first in (False, True):
            yield _block_case(x8, _parts(8, seed=seed), norm_first)
    for norm_first in (False, True):  # gradients flow through both paths
        yield _block_case(x, parts, norm_first, upstream=randn(*x.shape, seed=250))


check_residual_block = register_given(
    3, "def residual_block(x, sublayer, norm, norm_first=False):", _block_cases
)
