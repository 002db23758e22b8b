"""Notebook 04: the position-wise feed-forward network, as data for the runner.

- ``check_feed_forward(FeedForward)``: exercise 1, ``linear2(dropout(activation(linear1(x))))``
  with the given ``__init__`` (the student writes ``forward``), in eval and in train mode.
- ``check_count_parameters(count_parameters)``: exercise 2, the FFN's parameter count as a
  Python int, from the formula.
- ``check_gelu(gelu)``: exercise 3, the exact GELU x·Φ(x).

The catalogues name the activation misplaced, missing or of the wrong kind, the residual added
inside the FFN and every misplaced or mis-scaled dropout (FeedForward); biases left out or of the
wrong size, one weight matrix, d_ff taken as 4·D (count_parameters); the usual wrong formulas of
GELU (gelu). Dropout is deterministic while the answer runs, so the train-mode cases compare
values with the reference; a mask drawn by hand is read back through a linear2 that copies the
hidden units out (``_read_back``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

import encoder_lib

from ..feedback import ForbiddenCallError, GradingError, Mistake
from ..kernel.forbidden import Forbidden
from ..kernel.observe import Call, Failure, Observation, deterministic_dropout
from ..runner import register_given
from ..vocabulary import (
    Ask,
    Case,
    ModuleSpec,
    backpropagating,
    close,
    randn,
    reference_mode,
    reference_value,
)

__all__ = ["check_feed_forward", "check_count_parameters", "check_gelu"]

_FFN_MODULES = {  # forbidden in exercises 1 and 2
    encoder_lib.FeedForward: "encoder_lib.feed_forward.FeedForward",
    encoder_lib.EncoderLayer: "encoder_lib.encoder.EncoderLayer",
    nn.TransformerEncoderLayer: "nn.TransformerEncoderLayer",
}
_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "gelu": F.gelu}


# --- exercise 1: FeedForward ---------------------------------------------------------------------

_EVAL_DROPOUT = Mistake(
    "dropout-in-eval",
    "dropout is still active in eval mode. Use self.dropout (the nn.Dropout module, which "
    "model.eval() switches off) or pass training=self.training to F.dropout; F.dropout's "
    "training=True default drops units even in eval mode.",
)
_EVAL_VARIES = Mistake(
    "dropout-in-eval", "its eval-mode output changes from one call to the next: " + _EVAL_DROPOUT
)
_PLACE = "linear2(dropout(activation(linear1(x))))"


def _missing(p: float) -> str:
    return Mistake(
        "dropout-missing",
        f"its train-mode output equals its eval-mode output: dropout is missing in training. "
        f"With p = {p} about {p:.0%} of the hidden units should be zeroed in train mode. Apply "
        "self.dropout to the activated hidden layer, just before linear2.",
    )


def _not_rescaled(p: float) -> str:
    return Mistake(
        "dropout-not-rescaled",
        "the hidden units that dropout keeps are not rescaled. Inverted dropout multiplies them "
        f"by 1 / (1 - p) = {1 / (1 - p):.4g} so that the expected output is the same in training "
        "and evaluation: use self.dropout (nn.Dropout).",
    )


def _wrong_scale(p: float, factor: float, why: str, mistake: str = "dropout-wrong-scale") -> str:
    return Mistake(
        mistake,
        f"{why}the hidden units that are kept are multiplied by {factor:.4g} instead of "
        f"1 / (1 - p) = {1 / (1 - p):.4g}. Use self.dropout, whose p is the dropout argument, "
        "once (not a hard-coded probability, not twice).",
    )


_KEEP = (
    "it passes the keep probability 1 - p where dropout expects the probability p of zeroing a "
    "unit: "
)
_ON_OUTPUT = Mistake(
    "dropout-on-output",
    "dropout acts on linear2's output (whole output features are zeroed). It belongs on the "
    f"hidden units: {_PLACE}.",
)
_ON_INPUT = Mistake(
    "dropout-on-input",
    f"dropout is applied to the input x: dropout belongs between the activation and linear2, "
    f"{_PLACE}.",
)
_BEFORE_ACTIVATION = Mistake(
    "dropout-before-activation",
    f"dropout is applied before the activation; it belongs after it: {_PLACE}.",
)
_ELSEWHERE = Mistake(
    "dropout-misplaced",
    "its train-mode output is not linear2 applied to the activated hidden units with some of "
    f"them dropped: dropout belongs between the activation and linear2, {_PLACE}, and nowhere "
    "else.",
)
_OWN_MASK = Mistake(
    "dropout-own-mask",
    "it drops hidden units with a mask of its own (drawn by hand with torch.rand..., or by "
    "another dropout function). Use self.dropout (or "
    "F.dropout(h, self.dropout.p, training=self.training)): while checking, dropout makes "
    "reproducible decisions so that your module can be compared with the reference in train "
    "mode, and a mask of your own cannot be.",
)


def _weights(d_model: int, d_ff: int, seed: int) -> dict[str, torch.Tensor]:
    """Weights with biases large enough that a missing bias or activation shows."""
    return {
        "linear1.weight": randn(d_ff, d_model, seed=seed) / math.sqrt(d_model),
        "linear1.bias": 0.5 * randn(d_ff, seed=seed + 1),
        "linear2.weight": randn(d_model, d_ff, seed=seed + 2) / math.sqrt(d_ff),
        "linear2.bias": 0.5 * randn(d_model, seed=seed + 3),
    }


class _FFN:
    """One configuration: FeedForward(D, d_ff, dropout=p, activation=act) with given weights."""

    def __init__(self, d_ff: int, p: float, act: str, weights: dict[str, torch.Tensor]):
        self.d_ff, self.p, self.act, self.w = d_ff, p, act, weights

    def call(self, x: torch.Tensor, train: bool, **extra) -> Call:
        return Call(
            "FeedForward",
            "feed_forward",
            (x,),
            init=((x.shape[-1], self.d_ff), {"dropout": self.p, "activation": self.act}),
            dtype=x.dtype,
            state=self.w,
            train=train,
            inspect=True,
            **extra,
        )

    def module(self, x: torch.Tensor, train: bool) -> nn.Module:
        """The course's FeedForward holding these weights, for x, in train or eval mode."""
        with reference_mode():
            ref = encoder_lib.FeedForward(x.shape[-1], self.d_ff, self.p, self.act).to(x.dtype)
        ref.load_state_dict(self.w)
        return ref.train(train)

    def reference(self, x: torch.Tensor, train: bool) -> torch.Tensor:
        """Its output on x (what the catalogue's entries must differ from)."""
        return reference_value(self.module(x, train), self.call(x, train))

    def lin1(self, t: torch.Tensor) -> torch.Tensor:
        return F.linear(t, self.w["linear1.weight"], self.w["linear1.bias"])

    def lin2(self, t: torch.Tensor) -> torch.Tensor:
        return F.linear(t, self.w["linear2.weight"], self.w["linear2.bias"])

    def mistakes(self, x: torch.Tensor, train: bool) -> dict[str, torch.Tensor]:
        """Description -> the output of that mistake (dropout as the student's code gets it)."""
        p, act, lin1, lin2 = self.p, _ACTIVATIONS[self.act], self.lin1, self.lin2

        def drop(t: torch.Tensor, q: float = p) -> torch.Tensor:
            return deterministic_dropout(t, q)

        with torch.no_grad():
            h = act(lin1(x))
            if train:
                m = {
                    _missing(p): lin2(h),
                    _not_rescaled(p): lin2(drop(h) * (1 - p)),
                    Mistake(
                        "dropout-drops-nothing",
                        "it drops 0% of the hidden units: it scales them all by 1 / (1 - p) but "
                        "never zeroes any. Use self.dropout, which zeroes each unit with "
                        "probability p and rescales the others.",
                    ): lin2(h / (1 - p)),
                    _wrong_scale(
                        p, 1 / (1 - p) ** 2, "it applies dropout twice: ", "dropout-twice"
                    ): (lin2(drop(drop(h)))),
                    _wrong_scale(p, 1 / p, _KEEP, "keep-probability"): lin2(drop(h, 1 - p)),
                }
                for q in (0.1, 0.5, 0.2):
                    if q != p:
                        why = f"it drops with a fixed p = {q} instead of the dropout argument: "
                        m[_wrong_scale(p, 1 / (1 - q), why, "fixed-dropout-p")] = lin2(drop(h, q))
                m[_ON_OUTPUT] = drop(lin2(h))
                m[_ON_INPUT] = lin2(act(lin1(drop(x))))
                m[_BEFORE_ACTIVATION] = lin2(act(drop(lin1(x))))
                return m
            m = {
                Mistake(
                    "no-activation",
                    "the activation is missing. Without it linear2(linear1(x)) collapses into a "
                    "single affine map of x (see 'Why the non-linearity matters'): apply "
                    "self.activation between linear1 and linear2.",
                ): lin2(lin1(x)),
                Mistake(
                    "activation-after-linear2",
                    "the activation is applied after linear2 instead of between linear1 and "
                    "linear2 (the FFN's output must be free to take any sign).",
                ): act(lin2(lin1(x))),
                Mistake(
                    "activation-after-linear2-too",
                    "the activation is applied after linear2 as well: only the hidden layer "
                    "(between linear1 and linear2) gets one.",
                ): act(lin2(h)),
                Mistake(
                    "activation-on-input",
                    "the activation is applied to the input x before linear1; it belongs between "
                    "linear1 and linear2.",
                ): lin2(lin1(act(x))),
                Mistake(
                    "residual-inside-ffn",
                    "you added the input x to the output. That is the residual connection, which "
                    "the encoder layer adds around the FFN (notebook 5); the FFN itself returns "
                    "only linear2(...).",
                ): x + lin2(h),
            }
            if self.act == "gelu":
                m[
                    Mistake(
                        "gelu-tanh",
                        "you used GELU's tanh approximation (approximate='tanh'); self.activation "
                        "is F.gelu, the exact GELU x·Φ(x).",
                    )
                ] = lin2(F.gelu(lin1(x), approximate="tanh"))
                wrong, other = "ReLU", lin2(F.relu(lin1(x)))
            else:
                wrong, other = "GELU", lin2(F.gelu(lin1(x)))
            m[
                Mistake(
                    "wrong-activation",
                    f"you used {wrong} although activation={self.act!r} was requested: call "
                    "self.activation, which the given __init__ sets from the activation argument.",
                )
            ] = other
            if p > 0:
                m[_EVAL_DROPOUT] = lin2(drop(h))
            return m


def _varies(ffn: _FFN, x: torch.Tensor, obs: Observation, ask: Ask) -> str | None:
    """Eval mode: the same call with another seed gives another output (a random mask)."""
    again = ask(ffn.call(x, train=False, seed=1)).value
    if isinstance(again, torch.Tensor) and again.shape == obs.value.shape:
        return None if torch.equal(again.nan_to_num(), obs.value.nan_to_num()) else _EVAL_VARIES
    return None


def _zeroed_output(obs: Observation, ask: Ask) -> str | None:
    """Train mode: exact zeros in the output (biases make them otherwise impossible)."""
    if float((obs.value == 0).double().mean()) >= 0.2:
        return _ON_OUTPUT
    return None


def _read_back(p: float, act: str) -> Callable[[Observation, Ask], str | None]:
    """Train mode, for masks no catalogue entry replays: build the module with a linear2 that
    copies the d_ff hidden units into the first d_ff outputs (weight [I; 0], no bias), read what
    linear2 received and compare it with the activated hidden units, unit by unit."""
    d_model, d_ff = 8, 6
    weights = _weights(d_model, d_ff, seed=700)
    weights["linear2.weight"] = torch.eye(d_model, d_ff, dtype=torch.float64)
    weights["linear2.bias"] = torch.zeros(d_model, dtype=torch.float64)
    ffn = _FFN(d_ff, p, act, weights)
    x = randn(6, 5, d_model, seed=710)
    call = ffn.call(x, train=True)
    activation = _ACTIVATIONS[act]
    with torch.no_grad():
        pre = ffn.lin1(x)
        hidden = activation(pre)

    def probe(obs: Observation, ask: Ask) -> str | None:
        back = ask(call)
        out = back.value
        if back.failure is not None or not isinstance(out, torch.Tensor) or out.shape != x.shape:
            return None
        if bool(out[..., d_ff:].abs().gt(1e-12).any()):
            return _ELSEWHERE
        informative = hidden.abs() > 1e-3
        h, z = hidden[informative], out[..., :d_ff][informative]
        dropped = z.abs() < 1e-9
        ratio = z[~dropped] / h[~dropped]
        scale = 1 / (1 - p)
        if act != "relu" and bool(dropped.any()):
            before = activation(scale * pre)[informative][~dropped]
            if close(z[~dropped], before, 1e-7) and not close(ratio, ratio * 0 + scale):
                return _BEFORE_ACTIVATION
        if ratio.numel() == 0 or not close(ratio, ratio.mean().expand_as(ratio), 1e-6):
            return _ELSEWHERE
        factor, fraction = float(ratio.mean()), float(dropped.double().mean())
        if abs(factor - 1) < 1e-6:
            return _missing(p) if fraction == 0 else _not_rescaled(p)
        if abs(factor - scale) > 1e-6 * scale:
            return _wrong_scale(p, factor, "")
        if not 0.4 * p <= fraction <= min(1.0, 1.6 * p):
            return Mistake(
                "dropout-wrong-rate",
                f"it drops {fraction:.0%} of the hidden units, but dropout with p = {p} should "
                f"drop about {p:.0%}. Use self.dropout.",
            )
        return _OWN_MASK

    return probe


def _hint(d_model: int, d_ff: int, rank: int, failure: Failure) -> str | None:
    shape_words = ("cannot be multiplied", "size of tensor", "size mismatch", "must match")
    if failure.error == "RuntimeError" and any(w in failure.message for w in shape_words):
        return Mistake(
            "layers-in-wrong-order",
            f"The input has D = {d_model} features, so it must go through linear1 (D -> "
            f"d_ff = {d_ff}) first and linear2 (d_ff -> D) last: check the order of your "
            "layers.",
        )
    if rank != 3 and failure.phase == "call":
        return Mistake(
            "fixed-rank",
            f"This input has {rank} dimension(s): forward must accept any leading "
            "dimensions, (..., D).",
        )
    return None


def _ffn_case(
    shape: tuple[int, ...],
    d_ff: int,
    p: float,
    act: str,
    seed: int,
    train: bool,
    backward: bool = False,
) -> Case:
    d_model = shape[-1]
    ffn = _FFN(d_ff, p, act, _weights(d_model, d_ff, seed))
    x = randn(*shape, seed=seed + 10)
    name = f"FeedForward({d_model}, {d_ff}, dropout={p}, activation={act!r})"
    what = f"{name}(x) in {'train' if train else 'eval'} mode, x of shape {shape}"
    no_linear2 = Mistake(
        "no-linear2",
        f"Its last size is the hidden width d_ff = {d_ff}: the hidden layer must go through "
        "linear2 back to D.",
    )
    case = Case(
        ffn.call(x, train),
        what,
        reference=ffn.module(x, train),
        mistakes=lambda: ffn.mistakes(x, train),
        probes=(_zeroed_output, _read_back(p, act)) if train else (partial(_varies, ffn, x),),
        shape_hints=({(*shape[:-1], d_ff): no_linear2},),
        module=ModuleSpec(
            parameters=("linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"),
            names_message=(
                f"{name} has the parameters {{got}}, but {{expected}} were expected (the names "
                "nn.TransformerEncoderLayer uses, so that its weights load into yours). Keep the "
                "given __init__, which creates linear1, dropout and linear2."
            ),
            not_module_message=(
                "{call} should build an nn.Module: keep the given `class FeedForward(nn.Module)` "
                "and its __init__."
            ),
        ),
        failure_hint=partial(_hint, d_model, d_ff, len(shape)),
    )
    if not backward:
        return case
    # The parameters' gradients first: an answer that cuts the graph is told about the weights it
    # would stop training (reference_grads keeps the order of Call.grad).
    return backpropagating(
        case,
        randn(*shape, seed=seed + 11),
        grad=("parameters", "args[0]"),
        grad_names={"args[0]": "x"} | {f"parameters.{n}": n for n in ffn.w},
    )


def _ffn_cases(thorough: bool) -> Iterator[Case]:
    yield _ffn_case((2, 5, 6), 20, 0.5, "relu", seed=400, train=False)
    yield _ffn_case((3, 4, 8), 12, 0.1, "gelu", seed=410, train=False)
    yield _ffn_case((4, 5, 8), 6, 0.4, "relu", seed=420, train=True)
    yield _ffn_case((3, 4, 8), 12, 0.3, "gelu", seed=425, train=True)
    if not thorough:
        return
    yield _ffn_case((7, 6), 10, 0.1, "relu", seed=430, train=False)  # no batch dimension
    yield _ffn_case((2, 3, 4, 5), 7, 0.2, "gelu", seed=440, train=False)  # two batch dimensions
    yield _ffn_case((1, 1, 3), 8, 0.0, "relu", seed=450, train=False)  # B = L = 1, no dropout
    yield _ffn_case((2, 9, 16), 64, 0.3, "gelu", seed=460, train=False)  # d_ff = 4 D
    yield _ffn_case((4, 6, 10), 7, 0.2, "gelu", seed=470, train=True)
    yield _ffn_case((3, 5, 12), 9, 0.75, "relu", seed=480, train=True)
    yield _ffn_case((5, 7), 11, 0.4, "gelu", seed=485, train=True)  # no batch dimension
    yield _ffn_case((2, 3, 5), 9, 0.1, "gelu", seed=490, train=False, backward=True)
    yield _ffn_case((2, 3, 6), 10, 0.3, "relu", seed=495, train=True, backward=True)


check_feed_forward = register_given(
    1,
    "class FeedForward(nn.Module):",
    _ffn_cases,
    forbidden=Forbidden(
        torch={torch._transformer_encoder_layer_fwd: "torch._transformer_encoder_layer_fwd"},
        python=_FFN_MODULES,
    ),
    slots=("its output",),
    letters=("the shape of x",),
    inputs={"args[0]": "x"},
    messages={
        "in_place": (
            "it changed its input x in place (an in-place operation such as x.relu_() or "
            "x += ...): the encoder layer still needs x for its residual connection. "
            "Compute a new tensor instead."
        )
    },
)


# --- exercise 2: count_parameters ----------------------------------------------------------------


def _reference_count(d_model: int, d_ff: int) -> int:
    """Counted on a real module (on the meta device: no memory used, whatever the size)."""
    with torch.device("meta"):
        module = encoder_lib.FeedForward(d_model, d_ff)
    return sum(q.numel() for q in module.parameters())


def _count_mistakes(D: int, d_ff: int, expected: int) -> dict[str, int]:
    mistakes = {
        Mistake(
            "no-biases", "you left out the biases (linear1 has d_ff of them, linear2 has D)."
        ): 2 * D * d_ff,
        Mistake(
            "no-linear2-bias", "you left out linear2's bias (D numbers, one per output feature)."
        ): 2 * D * d_ff + d_ff,
        Mistake(
            "no-linear1-bias", "you left out linear1's bias (d_ff numbers, one per hidden unit)."
        ): 2 * D * d_ff + D,
        Mistake("linear2-bias-size", "linear2's bias has D entries (its output size), not d_ff."): (
            2 * D * d_ff + 2 * d_ff
        ),
        Mistake("linear1-bias-size", "linear1's bias has d_ff entries (its output size), not D."): (
            2 * D * d_ff + 2 * D
        ),
        Mistake(
            "one-weight-matrix",
            "you counted only one weight matrix: linear1's is d_ff x D and linear2's is D x d_ff.",
        ): D * d_ff + d_ff + D,
        Mistake(
            "one-weight-matrix-no-biases", "you counted only one weight matrix and no biases."
        ): D * d_ff,
    }
    if d_ff != 4 * D:
        assumed = "you assumed d_ff = 4·D: use the d_ff argument (4·D is only the usual choice)."
        mistakes[Mistake("d-ff-assumed-4d", assumed)] = 8 * D * D + 5 * D
    return {
        Mistake(why.id, f"it returned {value}, expected {expected}: {why}"): value
        for why, value in mistakes.items()
        if value != expected
    }


def _count_case(d_model: int, d_ff: int) -> Case:
    expected = _reference_count(d_model, d_ff)

    def unexplained(obs: Observation, ask: Ask) -> str:
        return Mistake(
            "mismatch",
            f"it returned {obs.value}, expected {expected}. Count linear1 (a d_ff x D weight and "
            "d_ff biases) and linear2 (a D x d_ff weight and D biases).",
        )

    return Case(
        Call("count_parameters", "count_parameters", (d_model, d_ff)),
        f"count_parameters({d_model}, {d_ff})",
        expected=expected,
        mistakes=lambda: _count_mistakes(d_model, d_ff, expected),
        probes=(unexplained,),
    )


def _count_cases(thorough: bool) -> Iterator[Case]:
    sizes = [(6, 20), (512, 2048), (3, 12)]
    if thorough:
        sizes += [(1, 1), (7, 5), (768, 3072), (1024, 4096), (100, 37), (12288, 49152)]
    for d_model, d_ff in sizes:
        yield _count_case(d_model, d_ff)


def _count_rewrite(error: GradingError, case: Case, passed: list[Case]) -> GradingError:
    """The count builds no module and is a plain int: say so in this exercise's terms."""
    if isinstance(error, ForbiddenCallError):
        built = error.parts.get("name") or "a built-in"
        return ForbiddenCallError(
            f"it builds a module ({built}) to count its "
            "parameters, which earns no points: this exercise asks for the formula. Count the "
            "entries of each weight matrix and bias from d_model and d_ff.",
            mistake=error.mistake,
        )
    if error.mistake == "not-an-int":
        said = "{name} should return a Python int, got {got}".format(**error.parts)
        return GradingError(
            said.rstrip(".") + ". Use integer arithmetic (*, +, //) and no tensors or floats.",
            mistake=error.mistake,
            parts=error.parts,
        )
    return error


check_count_parameters = register_given(
    2,
    "def count_parameters(d_model, d_ff):",
    _count_cases,
    rewrite=_count_rewrite,
    forbidden=Forbidden(python={nn.Linear: "nn.Linear", **_FFN_MODULES}),
    slots=("it",),
)


# --- exercise 3: gelu ----------------------------------------------------------------------------

_PHI = "Φ(x) = ½·(1 + erf(x/√2))"


def _gelu_mistakes(x: torch.Tensor) -> dict[str, torch.Tensor]:
    erf, root2 = torch.erf, math.sqrt(2.0)
    density = torch.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    return {
        Mistake(
            "gelu-tanh",
            "this is GELU's tanh approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). The "
            f"exercise asks for the exact GELU x·Φ(x), written with the error function: {_PHI}.",
        ): F.gelu(x, approximate="tanh"),
        Mistake(
            "gelu-sigmoid",
            "this is the sigmoid approximation x·sigmoid(1.702·x). The exercise asks for the exact "
            f"GELU x·Φ(x) with {_PHI}.",
        ): x * torch.sigmoid(1.702 * x),
        Mistake("erf-not-at-x-over-sqrt2", f"erf must be evaluated at x/√2: {_PHI}."): (
            0.5 * x * (1 + erf(x))
        ),
        Mistake(
            "erf-at-x-times-sqrt2",
            f"erf must be evaluated at x/√2 (you multiplied by √2 instead of dividing): {_PHI}.",
        ): 0.5 * x * (1 + erf(x * root2)),
        Mistake("no-half", f"the factor ½ is missing: {_PHI}."): x * (1 + erf(x / root2)),
        Mistake("returned-phi", "you returned Φ(x), the Gaussian CDF, instead of x·Φ(x)."): (
            0.5 * (1 + erf(x / root2))
        ),
        Mistake(
            "density-for-cdf",
            "you used the Gaussian density φ(x) = exp(-x²/2)/√(2π) where the cumulative "
            "distribution Φ(x) belongs.",
        ): x * density,
        Mistake("erf-for-phi", f"erf(x/√2) equals 2·Φ(x) - 1, not Φ(x): {_PHI}."): (
            x * erf(x / root2)
        ),
        Mistake(
            "gelu-is-relu",
            "this is ReLU. GELU is x·Φ(x): smooth, and slightly negative for negative x.",
        ): F.relu(x),
    }


def _gelu_case(
    x: torch.Tensor, what: str, atol: float | None = None, backward: bool = False
) -> Case:
    """``gelu(x)`` against F.gelu (``atol``: 1e-7 unless given)."""
    case = Case(
        Call("gelu", "gelu", (x,)),
        what,
        reference=F.gelu,
        mistakes=lambda: _gelu_mistakes(x),
        atol=atol,
    )
    if backward:
        backpropagating(case, torch.ones_like(x), grad_names={"args[0]": "x"})
    return case


def _gelu_cases(thorough: bool) -> Iterator[Case]:
    grid = torch.linspace(-5, 5, 201, dtype=torch.float64)
    yield _gelu_case(grid, "gelu(x) for x from -5 to 5")
    yield _gelu_case(2 * randn(3, 4, 5, seed=500), "gelu(x) for x of shape (3, 4, 5)")
    if not thorough:
        return
    x32 = 3 * randn(1000, seed=510, dtype=torch.float32)
    yield _gelu_case(x32, "gelu(x) for x of shape (1000,) in float32", atol=1e-6)
    big = torch.tensor([-40.0, -12.0, -8.0, 0.0, 8.0, 12.0, 40.0], dtype=torch.float64)
    yield _gelu_case(big, "gelu(x) for large |x|")
    yield _gelu_case(torch.tensor(0.5, dtype=torch.float64), "gelu of a 0-d tensor")
    yield _gelu_case(randn(50, seed=520), "gelu(x) for x of shape (50,)", backward=True)


check_gelu = register_given(
    3,
    "def gelu(x):",
    _gelu_cases,
    forbidden=Forbidden(
        torch={
            F.gelu: "F.gelu",
            torch.ops.aten.gelu: "torch.ops.aten.gelu",
            torch.ops.aten.gelu.default: "torch.ops.aten.gelu",
        },
        python={nn.GELU: "nn.GELU"},
    ),
    slots=("gelu(x)",),
    letters=("the shape of x",),
    inputs={"args[0]": "x"},
    atol=1e-7,
    rtol=1e-6,
)
