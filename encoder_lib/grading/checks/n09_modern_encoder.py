"""Notebook 09: the encoder as it is built today, as data for the runner.

- ``check_rms_norm(rms_norm)``, exercise 1: ``x / sqrt(mean(x^2) + eps) * weight`` over the last
  dimension. Named: the mean subtracted (LayerNorm without its offset), eps outside the square
  root or missing or ignored, the sum of squares (the length of x) or a division by D - 1
  instead of the mean square, no square root, the mean squared instead of the mean of the
  squares, the mean absolute value, the gain ignored, added or applied before normalising,
  normalising over the batch or sequence axis (or several). ``F.rms_norm``, ``torch.rms_norm``,
  ``nn.RMSNorm`` and ``encoder_lib``'s ``rms_norm``/``RMSNorm`` are forbidden.
- ``check_gated_feed_forward(GatedFeedForward)``, exercise 2: ``forward`` of the GeGLU/SwiGLU
  network with the given ``__init__`` (``wi`` fused, first half activated, second half linear).
  Named: the halves' roles swapped, no gate (one half only), the activation on both halves or
  after the product or missing, the halves added, the wrong activation (GELU for SiLU and the
  reverse, GELU's tanh form, ReLU, a sigmoid gate as in ``F.glu``), the halves taken as even and
  odd features, the residual added; in training mode dropout missing, on the input, on the
  output, on one half before the product or twice; dropout still active in eval mode.
- ``check_apply_rotary(apply_rotary)``, exercise 3: both pairings. Named: the rotation the wrong
  way (the sign of sin), the pairings mixed (with or without the sign), pairs read in one layout
  and written back in the other, cos and sin swapped, no sine term, both signs + or both -, the
  two rotated halves swapped, cos and sin spread over the features in the other pairing's way.
  Probes: the identity at angle 0 and the length of each pair.
- ``check_sliding_window_mask(sliding_window_mask)``, exercise 4. Named: off by one (< for <=),
  the window taken as the half-width, one-sided bands (keys before or after the query only),
  |i - j| < window, the polarity reversed; a non-boolean mask and a batched shape.
- ``check_modern_encoder_layer(ModernEncoderLayer)``, exercise 5: ``forward`` of a pre-norm layer
  without biases, with rotary queries and keys and an optional sliding window, the given
  ``__init__`` holding ``encoder_lib``'s norms, rotary embedding and gated FFN. Named: post-norm,
  a normalised residual, ``norm1`` used twice, residuals missing, rotary on the queries or keys
  only, on the values too, on the output, or missing; the padding mask and the window combined
  with OR, the window or the padding ignored, the mask inverted, the band one too narrow or too
  wide (naming exercise 4); heads split without a transpose, scores scaled by sqrt(D); in
  training mode dropout missing (all, on the weights, ``dropout1``, ``dropout2``), attention
  dropout in eval mode. Probes: padding leaking into real positions, a token beyond the window
  changing the output, right in eval but not in training.

Each exercise is checked on its own: the layer's given ``__init__`` builds ``encoder_lib``'s
``RMSNorm``, ``RotaryEmbedding`` and ``GatedFeedForward``; its attention mask may come from the
student's ``sliding_window_mask`` or from ``encoder_lib``'s (a band of the wrong width says so).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import encoder_lib

from .. import runner, vocabulary
from ..feedback import Mistake
from ..kernel.forbidden import Forbidden
from ..kernel.observe import Call, Failure, Observation, deterministic_dropout
from ..vocabulary import (
    Ask,
    Case,
    ModuleSpec,
    Unchanged,
    close,
    keep_first,
    randn,
    redrawn,
    reference_grads,
)
from . import layer_cases

__all__ = [
    "check_rms_norm",
    "check_gated_feed_forward",
    "check_apply_rotary",
    "check_sliding_window_mask",
    "check_modern_encoder_layer",
]

_LAYERS = {
    encoder_lib.ModernEncoderLayer: "encoder_lib.ModernEncoderLayer",
    encoder_lib.ModernEncoder: "encoder_lib.ModernEncoder",
}


def _dtype_text(t: torch.Tensor) -> str:
    return "" if t.dtype == torch.float64 else f" ({t.dtype})"


def _with_random_upstream(case: Case, grad: tuple[str, ...], seed: int, **fields: Any) -> Case:
    """``case`` with a random upstream (``randn`` with ``seed``, of the first argument's shape and
    dtype) backpropagated into ``grad`` (``vocabulary.backpropagating``)."""
    x = case.call.args[0]
    return vocabulary.backpropagating(
        case, randn(*x.shape, seed=seed).to(x.dtype), grad=grad, **fields
    )


def _module(cls: str, parameters, names_message: str, forbidden: Forbidden) -> ModuleSpec:
    """The given ``class cls(nn.Module)`` kept: ``parameters`` only, no forbidden sub-module."""
    return ModuleSpec(
        parameters=tuple(parameters),
        names_message=names_message,
        forbidden_submodules={
            f"{c.__module__}.{c.__qualname__}": name for c, name in forbidden.python.items()
        },
        not_module_message=(
            f"{{call}} should build an nn.Module: keep the given `class {cls}(nn.Module)` and its "
            "__init__."
        ),
    )


# --- exercise 1: rms_norm ------------------------------------------------------------------------

_RMS_EPS = 1e-6
"""The default eps of the exercise's ``rms_norm(x, weight, eps=1e-6)``."""


def _rms_variant(
    x: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    dims: tuple[int, ...] = (-1,),
    center: bool = False,
    square: str = "mean",
    eps_at: str = "inside",
    root: bool = True,
    gain: str = "times",
) -> torch.Tensor:
    """RMSNorm written with one mistake (or none, with the defaults). ``square``: how the mean
    square is taken (``"mean"``, ``"sum"``, ``"unbiased"`` (sum / (D - 1)), ``"mean_squared"``
    (mean(x)^2), ``"abs"`` (the mean absolute value)); ``gain``: ``"times"``, ``"none"``,
    ``"plus"`` or ``"before"`` (x * w normalised)."""
    with torch.no_grad():
        if gain == "before":
            x = x * w
        h = x - x.mean(dim=dims, keepdim=True) if center else x
        if square == "mean":
            ms = h.square().mean(dim=dims, keepdim=True)
        elif square == "sum":
            ms = h.square().sum(dim=dims, keepdim=True)
        elif square == "unbiased":
            n = math.prod(h.shape[d] for d in dims)
            ms = h.square().sum(dim=dims, keepdim=True) / max(n - 1, 1)
        elif square == "abs":
            ms = h.abs().mean(dim=dims, keepdim=True)
        else:
            ms = h.mean(dim=dims, keepdim=True).square()
        if not root:
            y = h / (ms + eps)
        elif eps_at == "inside":
            y = h / torch.sqrt(ms + eps)
        elif eps_at == "outside":
            y = h / (torch.sqrt(ms) + eps)
        else:
            y = h / torch.sqrt(ms)
        return {"times": y * w, "none": y, "plus": y + w, "before": y}[gain]


def _rms_mistakes(x: torch.Tensor, w: torch.Tensor, eps: float) -> dict[str, torch.Tensor]:
    """Description -> that mistake's output on these inputs (combinations first; an ignored
    eps before no eps, which it resembles when eps is large)."""
    catalogue: dict[str, dict[str, Any]] = {}  # description -> _rms_variant's switches
    if eps != _RMS_EPS:
        catalogue[
            Mistake(
                "eps-ignored",
                f"it ignores the eps argument: with eps={eps:g} your output is the one for "
                f"eps={_RMS_EPS:g}. Use the argument instead of a fixed number.",
            )
        ] = {"eps": _RMS_EPS}
    catalogue |= {
        Mistake(
            "layer-norm-not-rms-norm",
            "it subtracts the mean of x and divides by the standard deviation: that is LayerNorm "
            "(without its offset). RMSNorm does not centre x: it divides x itself by its root mean "
            "square, sqrt(mean(x²) + eps), so a constant added to every feature is not "
            "removed.",
        ): {"center": True},
        Mistake(
            "layer-norm-eps-outside",
            "it subtracts the mean of x before squaring, which makes it LayerNorm rather than "
            "RMSNorm, and puts eps outside the square root. RMSNorm divides x itself by "
            "sqrt(mean(x²) + eps).",
        ): {"center": True, "eps_at": "outside"},
        Mistake(
            "eps-outside-sqrt",
            "eps is added outside the square root, x / (sqrt(mean(x²)) + eps). It belongs inside, "
            "next to the mean square: the two differ most when x is tiny, exactly where eps "
            "matters.",
        ): {"eps_at": "outside"},
        Mistake(
            "no-eps",
            "it has no eps: dividing by sqrt(mean(x²)) divides by zero when all D features of a "
            "position are 0. Add eps to the mean square, inside the square root.",
        ): {"eps_at": "none"},
        Mistake(
            "sum-not-mean",
            "it divides by the square root of the sum of the squares (the length of x, what "
            "x.norm() gives), not of their mean: the root mean square divides the sum by D first, "
            "so your output is sqrt(D) times too small.",
        ): {"square": "sum"},
        Mistake(
            "divides-by-d-minus-1",
            "it divides the sum of the squares by D - 1. The mean square divides by D: nothing is "
            "subtracted from x, so there is nothing to correct for.",
        ): {"square": "unbiased"},
        Mistake(
            "mean-squared",
            "it squares the mean of x instead of averaging the squares: mean(x)² is not mean(x²) "
            "(features that cancel out have mean 0 but a large root mean square).",
        ): {"square": "mean_squared"},
        Mistake(
            "no-square-root",
            "it divides by the mean square itself, without the square root: the output then "
            "shrinks like 1 / x instead of being the same whatever the scale of x.",
        ): {"root": False},
        Mistake(
            "no-weight",
            "it ignores weight (the gain): multiply the normalised x by it, feature by feature.",
        ): {"gain": "none"},
        Mistake(
            "weight-added",
            "it adds weight instead of multiplying by it: weight is a gain, one factor per "
            "feature.",
        ): {"gain": "plus"},
        Mistake(
            "weight-first",
            "it multiplies x by weight before normalising, so the normalisation undoes most of the "
            "gain: normalise first, then multiply by weight.",
        ): {"gain": "before"},
        Mistake(
            "mean-absolute-value",
            "it divides by the mean absolute value of x; RMSNorm divides by the root mean "
            "square, sqrt(mean(x²) + eps).",
        ): {"square": "abs", "root": False},
    }
    axes = (  # (whether x has it, id, which axes, dims)
        (x.dim() >= 2 and x.shape[0] > 1, "normalises-over-batch", "the batch axis (dim 0)", (0,)),
        (
            x.dim() == 3 and x.shape[1] > 1,
            "normalises-over-sequence",
            "the sequence axis (dim 1), mixing the positions of a sentence",
            (1,),
        ),
        (
            x.dim() >= 3,
            "normalises-over-whole-sequence",
            "all the features of a whole sequence at once",
            tuple(range(1, x.dim())),
        ),
        (
            x.dim() >= 2,
            "normalises-over-everything",
            "the whole tensor at once",
            tuple(range(x.dim())),
        ),
    )
    own = "RMSNorm normalises each position over its own D features, the last axis"
    for present, name, which, dims in axes:
        if present:
            text = f"it normalises over the wrong axis: {which}. {own}."
            catalogue[Mistake(name, text)] = {"dims": dims}
    return {text: _rms_variant(x, w, **({"eps": eps} | how)) for text, how in catalogue.items()}


def _rms_reference(x, weight, eps: float = _RMS_EPS) -> torch.Tensor:
    """The notebook's rms_norm: encoder_lib's, with the exercise's default eps (1e-6)."""
    return encoder_lib.rms_norm(x, weight, eps)


def _rms_call(x, w, eps: float | None, **extra: Any) -> Call:
    return Call("rms_norm", "rms_norm", (x, w), {} if eps is None else {"eps": eps}, **extra)


def _rms_probe(x, w, eps: float | None) -> Callable[[Observation, Ask], str | None]:
    """No named mistake matched: look for the property that explains the difference."""
    actual = _RMS_EPS if eps is None else eps

    def probe(obs: Observation, ask: Ask) -> str | None:
        got = obs.value
        if bool(torch.isnan(got).any()) and bool((x == 0).all(dim=-1).any()):
            return Mistake(
                "no-eps",
                "it gives NaN for a position whose D features are all 0: its mean square is 0, "
                "so dividing by its square root divides by zero. That is what eps is for: add "
                "it to the mean square, inside the square root.",
            )
        for axis, where in ((0, "first batch element"), (1, "first position of each sequence")):
            if x.dim() < 2 + axis or x.shape[axis] < 2:
                continue
            changed = x.clone()
            index = (slice(None),) * axis + (0,)
            changed[index] = changed[index] * 3.0 + 1.0
            rest = (slice(None),) * axis + (slice(1, None),)
            other = ask(_rms_call(changed, w, eps)).value
            same_shape = isinstance(other, torch.Tensor) and other.shape == got.shape
            if same_shape and not close(other[rest], got[rest]):
                return Mistake(
                    "normalises-over-wrong-axis",
                    f"it normalises over the wrong axis: changing the {where} changed the "
                    "output of the others. RMSNorm uses only each position's own D "
                    "features, the last axis.",
                )
        plain = ask(_rms_call(x, torch.ones_like(w), eps)).value
        if not isinstance(plain, torch.Tensor) or plain.shape != x.shape:
            return None
        ms = x.square().mean(dim=-1)
        wanted = ms / (ms + actual)  # the mean square of the output with weight = 1
        if not close(plain.square().mean(dim=-1), wanted, 1e-6, 1e-4):
            return Mistake(
                "wrong-scale",
                "with weight = 1 each position's output should have a root mean square of "
                "about 1 (exactly sqrt(ms / (ms + eps)), where ms is the position's mean "
                "square), and yours does not. Divide x by sqrt(mean(x²) + eps), the mean taken "
                "over the last axis.",
            )
        if not close(got, plain * w):
            return Mistake(
                "wrong-gain",
                "the normalisation is right but the gain is not applied as x_hat * weight "
                "(elementwise, over the last dimension).",
            )
        return None

    return probe


def _rms_hint(x: torch.Tensor) -> Callable[[Failure], str | None]:
    def hint(failure: Failure) -> str | None:
        if "must match the size" in failure.message:
            return Mistake(
                "keepdim-dropped",
                "A mean over the last axis drops that axis: keep it (keepdim=True) so that the "
                "(..., 1) mean square broadcasts against the (..., D) input.",
            )
        if "out of range" in failure.message:
            return Mistake(
                "fixed-rank",
                f"This test passes an input with {x.dim()} dimension(s), shape "
                f"{tuple(x.shape)}: reduce over dim=-1 so that any number of leading "
                "dimensions works.",
            )
        return None

    return hint


def _rms_case(x, w, eps: float | None, gradient: bool = False) -> Case:
    actual = _RMS_EPS if eps is None else eps
    what = "rms_norm(x, weight" + ("" if eps is None else f", eps={eps:g}") + ")"
    what += f" with x of shape {tuple(x.shape)}{_dtype_text(x)}"
    case = Case(
        _rms_call(x, w, eps),
        what,
        reference=_rms_reference,
        mistakes=lambda: _rms_mistakes(x, w, actual),
        probes=(_rms_probe(x, w, eps),),
        failure_hint=_rms_hint(x),
    )
    return _with_random_upstream(case, ("args[0]", "args[1]"), seed=97) if gradient else case


def _rms_inputs(thorough: bool) -> list[tuple[torch.Tensor, torch.Tensor, float | None]]:
    """(x, weight, eps or None); D = 4 first, where D and D - 1 differ a lot; rows of very
    different scales and offsets (so that centring shows), one tiny (where eps matters), one
    all zero and one constant."""

    def mixed(*shape: int, seed: int) -> torch.Tensor:
        scale = torch.exp(randn(*shape[:-1], 1, seed=seed + 1) * 1.5).clamp(min=0.01)
        return randn(*shape, seed=seed) * scale + randn(*shape[:-1], 1, seed=seed + 2) * 2.0

    def gain(d: int, seed: int) -> torch.Tensor:
        return 1.0 + 0.5 * randn(d, seed=seed)

    x1 = mixed(3, 5, 4, seed=901)
    x1[0, 0] *= 1e-3 / float(x1[0, 0].abs().max())  # a tiny position: eps matters
    special = mixed(2, 3, 4, seed=903)
    special[0, 0] = 0.0  # all zero
    special[1, 2] = -1.5  # constant: LayerNorm would give 0
    inputs = [
        (x1, gain(4, 910), None),
        (mixed(3, 5, 4, seed=920), gain(4, 930), 0.5),
        (special, gain(4, 940), None),
        (mixed(7, 6, seed=970), gain(6, 971), None),
    ]
    if thorough:
        x32 = randn(4, 6, 32, seed=990, dtype=torch.float32) * 2.0 + 0.5
        inputs += [
            (mixed(2, 3, 16, seed=950), gain(16, 960), 1e-3),
            (mixed(5, seed=972), gain(5, 973), None),
            (mixed(1, 1, 8, seed=974), gain(8, 975), 0.1),
            (mixed(2, 2, 3, 6, seed=976), gain(6, 977), None),
            (x32, gain(32, 991).float(), None),
        ]
    return inputs


def _rms_cases(thorough: bool) -> Iterator[Case]:
    for x, w, eps in _rms_inputs(thorough):
        yield _rms_case(x, w, eps)
    x, w, _ = _rms_inputs(False)[0]
    yield _rms_case(x, w, None, gradient=True)


_RMS_INPUTS = {"args[0]": "x", "args[1]": "weight"}
check_rms_norm = runner.register_given(
    1,
    "def rms_norm(x, weight, eps=1e-6):",
    _rms_cases,
    forbidden=Forbidden(
        torch={
            F.rms_norm: "F.rms_norm (which nn.RMSNorm calls)",
            torch.rms_norm: "torch.rms_norm",
        },
        python={
            nn.RMSNorm: "nn.RMSNorm",
            encoder_lib.rms_norm: "encoder_lib.rms_norm",
            encoder_lib.RMSNorm: "encoder_lib.RMSNorm",
        },
    ),
    letters=("the shape of x",),
    inputs=_RMS_INPUTS,
    grad_names=_RMS_INPUTS,
)


# --- exercise 2: GatedFeedForward.forward ---------------------------------------------------------

_GATED = {"gelu": F.gelu, "silu": F.silu}
_GATE_PLACE = (
    "the first d_ff features of wi's output go through self.activation, are multiplied feature "
    "by feature by the last d_ff, and the product goes through wo"
)
_DROP_WHERE = (
    "apply self.dropout to the gated hidden units (the product of the two halves), just before wo"
)


def _gated_mistakes(
    w: dict[str, torch.Tensor], activation: str, p: float, x: torch.Tensor, train: bool
) -> dict[str, torch.Tensor]:
    act = _GATED[activation]
    wi, wo = w["wi.weight"].to(x.dtype), w["wo.weight"].to(x.dtype)

    def drop(t: torch.Tensor, q: float = p) -> torch.Tensor:
        return deterministic_dropout(t, q) if train else t

    with torch.no_grad():
        h = x @ wi.T  # (..., 2 d_ff)
        a, b = h.chunk(2, dim=-1)
        right = act(a) * b  # the gated hidden units

        def out(hidden: torch.Tensor) -> torch.Tensor:
            return hidden @ wo.T

        if train:
            return {
                Mistake(
                    "dropout-missing",
                    "its output in training mode equals the eval-mode output: dropout is "
                    f"missing in training. With p = {p}, {_DROP_WHERE}.",
                ): out(right),
                Mistake(
                    "dropout-on-output",
                    f"dropout acts on wo's output; {_DROP_WHERE}.",
                ): drop(out(right)),
                Mistake(
                    "dropout-on-input", f"dropout is applied to the input x; {_DROP_WHERE}."
                ): out(act(drop(x) @ wi.T).chunk(2, -1)[0] * (drop(x) @ wi.T).chunk(2, -1)[1]),
                Mistake(
                    "dropout-on-activated-half",
                    "dropout is applied to the activated half before the product. In "
                    "distribution that drops the same units, but the check compares exactly "
                    f"which units are dropped: {_DROP_WHERE}, as the instructions ask.",
                ): out(drop(act(a)) * b),
                Mistake(
                    "dropout-on-linear-half",
                    "dropout is applied to the linear half before the product. In "
                    "distribution that drops the same units, but the check compares exactly "
                    f"which units are dropped: {_DROP_WHERE}, as the instructions ask.",
                ): out(act(a) * drop(b)),
                Mistake(
                    "dropout-twice",
                    "it applies dropout twice, so the units it keeps are scaled by "
                    f"1 / (1 - p)² instead of 1 / (1 - p): {_DROP_WHERE}, once.",
                ): out(drop(drop(right))),
            }
        m = {
            Mistake(
                "halves-swapped",
                "the halves' roles are swapped: the activation is on the second half of wi's "
                "output and the first half multiplies it. In this layout (ModernBERT's) "
                f"{_GATE_PLACE}. Trained weights expect one arrangement; the other is a "
                "different network.",
            ): out(act(b) * a),
            Mistake(
                "no-gate",
                "there is no gate: only the activated first half reaches wo, and the second "
                "half of wi's output is never used. A gated network multiplies the activated "
                "half by the linear half, feature by feature.",
            ): out(act(a)),
            Mistake(
                "only-linear-half",
                "there is no gate: only the second (linear) half reaches wo. "
                f"In a gated network {_GATE_PLACE}.",
            ): out(b),
            Mistake(
                "both-activated",
                "the activation is applied to both halves; only the first half goes through "
                "it, the second stays linear and multiplies it.",
            ): out(act(a) * act(b)),
            Mistake(
                "activation-after-product",
                "the activation is applied after the product; activate the first half, then "
                "multiply it by the second.",
            ): out(act(a * b)),
            Mistake(
                "no-activation",
                "there is no activation: the two halves are multiplied as they are. "
                f"{_GATE_PLACE[0].upper() + _GATE_PLACE[1:]}.",
            ): out(a * b),
            Mistake(
                "halves-added",
                "the two halves are added; the gate multiplies them, feature by feature.",
            ): out(act(a) + b),
            Mistake(
                "even-and-odd",
                "it splits wi's output into its even and odd features. The two halves are the "
                "first d_ff features and the last d_ff features of the last axis.",
            ): out(act(h[..., 0::2]) * h[..., 1::2]),
            Mistake(
                "glu-sigmoid-gate",
                "it uses a sigmoid gate (the original GLU, as F.glu computes). This layer's "
                "gate is the activation the activation argument names, in self.activation.",
            ): out(a * torch.sigmoid(b)),
            Mistake(
                "sigmoid-activation",
                "it uses a sigmoid on the first half; the activation is self.activation (GELU "
                "or SiLU, as the activation argument says).",
            ): out(torch.sigmoid(a) * b),
            Mistake(
                "relu-activation",
                "it uses ReLU (that would be ReGLU); call self.activation, which the given "
                "__init__ sets from the activation argument.",
            ): out(F.relu(a) * b),
            Mistake(
                "residual-inside-ffn",
                "you added the input x to the output. That is the residual connection, which "
                "the encoder layer adds around the FFN; the FFN returns only wo's output.",
            ): (x + out(right)),
        }
        if activation == "gelu":
            m |= {
                Mistake(
                    "always-silu",
                    "it uses SiLU although activation='gelu' was asked (GeGLU): call "
                    "self.activation, which the given __init__ sets from the argument.",
                ): out(F.silu(a) * b),
                Mistake(
                    "gelu-tanh",
                    "it uses GELU's tanh approximation (approximate='tanh'); self.activation "
                    "is the exact GELU, F.gelu's default.",
                ): out(F.gelu(a, approximate="tanh") * b),
            }
        else:
            m |= {
                Mistake(
                    "always-gelu",
                    "it uses GELU although activation='silu' was asked (SwiGLU): call "
                    "self.activation, which the given __init__ sets from the argument.",
                ): out(F.gelu(a) * b)
            }
        if p > 0:
            m |= {
                Mistake(
                    "dropout-in-eval",
                    "dropout is still active in eval mode: use self.dropout (the nn.Dropout "
                    "module, which model.eval() switches off), not F.dropout with its "
                    "training=True default.",
                ): out(deterministic_dropout(right, p))
            }
        return m


def _gated_hint(d_model: int, d_ff: int) -> Callable[[Failure], str | None]:
    def hint(failure: Failure) -> str | None:
        words = ("cannot be multiplied", "size of tensor", "must match")
        if failure.error == "RuntimeError" and any(w in failure.message for w in words):
            return Mistake(
                "halves-not-split",
                f"wi maps D = {d_model} features to 2·d_ff = {2 * d_ff} (both halves at "
                f"once) and wo takes d_ff = {d_ff}: split wi's output into two halves of "
                "d_ff along the last axis and combine them before wo.",
            )
        return None

    return hint


def _gated_case(
    shape: tuple[int, ...],
    d_ff: int | None,
    act: str,
    p: float,
    seed: int,
    train: bool = False,
    dtype: torch.dtype = torch.float64,
    gradient: bool = False,
) -> Case:
    """``GatedFeedForward(D, d_ff, act, dropout=p)`` with given weights (``d_ff=None``: the
    default width, round(8D / 3)) on an x of ``shape``."""
    D = shape[-1]
    width = encoder_lib.gated_d_ff(D) if d_ff is None else d_ff
    w = {
        "wi.weight": randn(2 * width, D, seed=seed) / math.sqrt(D) * 1.5,
        "wo.weight": randn(D, width, seed=seed + 1) / math.sqrt(width),
    }
    with torch.random.fork_rng(devices=[]):  # its weights are loaded: draw nothing
        ref = encoder_lib.GatedFeedForward(D, width, act, p).to(dtype)
    ref.load_state_dict(w)
    x = randn(*shape, seed=seed + 5).to(dtype)
    init = ((D,), {**({} if d_ff is None else {"d_ff": d_ff}), "activation": act, "dropout": p})
    call = Call(
        "GatedFeedForward",
        "gated_feed_forward",
        (x,),
        init=init,
        dtype=dtype,
        state=w,
        train=train,
        inspect=True,
    )
    name = f"GatedFeedForward({D}" + ("" if d_ff is None else f", {d_ff}")
    name += f", activation={act!r}, dropout={p})"
    what = f"{name}(x) in {'training' if train else 'eval'} mode, x of shape {shape}"
    what += _dtype_text(x)
    case = Case(
        call,
        what,
        reference=ref.train(train),
        mistakes=lambda: _gated_mistakes(w, act, p, x, train),
        shape_hints=(
            {
                (*shape[:-1], width): Mistake(
                    "no-wo",
                    f"Its last size is the hidden width d_ff = {width}: the "
                    "gated hidden units must go through wo back to D.",
                ),
                (*shape[:-1], 2 * width): Mistake(
                    "no-wo",
                    "Its last size is 2·d_ff, wi's output: split it "
                    "into two halves, combine them, and map the result back to D with wo.",
                ),
            },
        ),
        module=_module(
            "GatedFeedForward",
            w,
            f"{name} has the parameters {{got}}, but {{expected}} were expected: keep the "
            "given __init__ (wi and wo have no biases, as in ModernBERT and Llama).",
            _GATED_FORBIDDEN,
        ),
        failure_hint=_gated_hint(D, width),
    )
    if gradient:
        names = {"args[0]": "x", "parameters.wi.weight": "wi", "parameters.wo.weight": "wo"}
        _with_random_upstream(case, ("args[0]", "parameters"), seed=seed + 6, grad_names=names)
    if train:  # after the reference has given the expected values: this leaves it in eval mode
        case.probes = (layer_cases.right_in_eval(ref, case.call, _DROP_WHERE),)
    return case


def _gated_cases(thorough: bool) -> Iterator[Case]:
    yield _gated_case((2, 5, 6), 7, "gelu", 0.1, seed=1010)
    yield _gated_case((3, 4, 8), 10, "silu", 0.0, seed=1020)
    yield _gated_case((4, 5, 8), 6, "gelu", 0.3, seed=1030, train=True)
    yield _gated_case((2, 3, 6), 5, "silu", 0.2, seed=1040, gradient=True)
    if not thorough:
        return
    yield _gated_case((7, 6), 9, "silu", 0.1, seed=1050)  # no batch dimension
    yield _gated_case((2, 3, 4, 5), 4, "gelu", 0.0, seed=1060)  # two batch dimensions
    yield _gated_case((2, 4, 9), None, "gelu", 0.1, seed=1070)  # d_ff = round(8D / 3) = 24
    yield _gated_case((3, 5, 8), 12, "silu", 0.5, seed=1080, train=True)
    yield _gated_case((2, 6, 8), 11, "gelu", 0.2, seed=1090, dtype=torch.float32)
    yield _gated_case((5, 7), 6, "gelu", 0.4, seed=1100, train=True)
    yield _gated_case((2, 3, 6), 5, "gelu", 0.3, seed=1110, train=True, gradient=True)


_GATED_FORBIDDEN = Forbidden(
    python={encoder_lib.GatedFeedForward: "encoder_lib.GatedFeedForward", **_LAYERS}
)
check_gated_feed_forward = runner.register_given(
    2,
    "class GatedFeedForward(nn.Module):",
    _gated_cases,
    forbidden=_GATED_FORBIDDEN,
    slots=("its output",),
    letters=("the shape of x",),
    inputs={"args[0]": "x"},
)


# --- exercise 3: apply_rotary --------------------------------------------------------------------

_OTHER = {"halves": "adjacent", "adjacent": "halves"}
_PAIRS = {
    "halves": "feature i with feature i + d_head / 2 (the two halves of x)",
    "adjacent": "neighbouring features, 0 with 1, 2 with 3, ...",
}


def _split(x: torch.Tensor, pairing: str) -> tuple[torch.Tensor, torch.Tensor]:
    if pairing == "halves":
        return x.chunk(2, dim=-1)
    return x[..., 0::2], x[..., 1::2]


def _join(y1: torch.Tensor, y2: torch.Tensor, pairing: str) -> torch.Tensor:
    if pairing == "halves":
        return torch.cat((y1, y2), dim=-1)
    return torch.stack((y1, y2), dim=-1).flatten(-2)


def _rotation(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    read: str,
    write: str | None = None,
    signs: tuple[int, int] = (-1, 1),
    swap_out: bool = False,
) -> torch.Tensor:
    """Pairs read in the ``read`` layout, rotated to (x1 cos + s1 x2 sin, x2 cos + s2 x1 sin),
    written back in the ``write`` layout (default: the same)."""
    x1, x2 = _split(x, read)
    y1 = x1 * cos + signs[0] * x2 * sin
    y2 = x2 * cos + signs[1] * x1 * sin
    if swap_out:
        y1, y2 = y2, y1
    return _join(y1, y2, write or read)


def _spread(t: torch.Tensor, pairing: str) -> torch.Tensor:
    """A ``(..., d_head / 2)`` table spread over the d_head features in ``pairing``'s way."""
    return torch.cat((t, t), dim=-1) if pairing == "halves" else t.repeat_interleave(2, dim=-1)


def _turned(x: torch.Tensor, pairing: str) -> torch.Tensor:
    """Every pair (x1, x2) turned by 90 degrees, (-x2, x1), in ``pairing``'s layout."""
    x1, x2 = _split(x, pairing)
    return _join(-x2, x1, pairing)


def _rotary_mistakes(x, cos, sin, pairing: str) -> dict[str, torch.Tensor]:
    other = _OTHER[pairing]
    asked, done = _PAIRS[pairing], _PAIRS[other]
    mixed = (
        f"pairing={pairing!r} pairs {asked}, but it pairs {done}, the {other!r} layout. A "
        "model's weights are trained for one pairing and do not work with the other: use the "
        "pairing argument"
    )
    with torch.no_grad():
        return {
            Mistake("pairing-ignored", mixed + " (is it ignored?)."): _rotation(x, cos, sin, other),
            Mistake(
                "pairing-ignored-and-wrong-way",
                mixed + ", and it rotates the wrong way (the sign of sin).",
            ): _rotation(x, cos, sin, other, signs=(1, -1)),
            Mistake(
                "wrong-way",
                "it rotates each pair the wrong way, by minus its angle: in the rotation matrix "
                "the sine term is subtracted in the first row and added in the second, and yours "
                "does the opposite.",
            ): _rotation(x, cos, sin, pairing, signs=(1, -1)),
            Mistake(
                "written-back-in-other-layout",
                f"it reads the pairs as pairing={pairing!r} asks, {asked}, but writes the rotated "
                f"pairs back in the {other!r} layout: each rotated feature must go back where its "
                "input feature was.",
            ): _rotation(x, cos, sin, pairing, write=other),
            Mistake(
                "read-in-other-layout",
                f"it reads the pairs in the {other!r} layout ({done}) and writes them back in the "
                f"{pairing!r} one; pairing={pairing!r} pairs {asked}, for reading and writing "
                "alike.",
            ): _rotation(x, cos, sin, other, write=pairing),
            Mistake(
                "cos-and-sin-swapped",
                "cos and sin are swapped: each feature of a pair keeps its own value times the "
                "cosine and takes the other feature times the sine.",
            ): _rotation(x, sin, cos, pairing),
            Mistake(
                "no-sine",
                "there is no sine term: multiplying by cos alone scales each pair, it does not "
                "rotate it. The rotation mixes the two features of a pair, through sin.",
            ): _join(*(t * cos for t in _split(x, pairing)), pairing),
            Mistake(
                "both-plus",
                "the sine term has a plus sign in both features of a pair: that is not a rotation "
                "(it changes the pair's length). In the rotation matrix the sine enters with a "
                "minus sign in one row and a plus sign in the other.",
            ): _rotation(x, cos, sin, pairing, signs=(1, 1)),
            Mistake(
                "both-minus",
                "the sine term has a minus sign in both features of a pair: that is not a rotation "
                "(it changes the pair's length). In the rotation matrix the sine enters with a "
                "minus sign in one row and a plus sign in the other.",
            ): _rotation(x, cos, sin, pairing, signs=(-1, -1)),
            Mistake(
                "outputs-swapped",
                "the two rotated features of each pair are written back swapped: the rotated first "
                "feature goes back in the place of x1, the rotated second in the place of "
                "x2.",
            ): _rotation(x, cos, sin, pairing, swap_out=True),
            Mistake(
                "angles-spread-wrongly",
                f"cos and sin are spread over the d_head features in the {other!r} way: with "
                f"pairing={pairing!r} feature j belongs to pair "
                + ("j mod d_head / 2" if pairing == "halves" else "j // 2")
                + ", and takes that pair's angle.",
            ): (x * _spread(cos, other) + _turned(x, pairing) * _spread(sin, other)),
        }


def _rotary_call(x, cos, sin, pairing: str | None) -> Call:
    kwargs = {} if pairing is None else {"pairing": pairing}
    return Call("apply_rotary", "apply_rotary", (x, cos, sin), kwargs)


def _rotary_probes(x, cos, sin, pairing: str | None):
    asked = pairing or "halves"

    def identity(obs: Observation, ask: Ask) -> str | None:
        still = ask(_rotary_call(x, torch.ones_like(cos), torch.zeros_like(sin), pairing)).value
        if isinstance(still, torch.Tensor) and still.shape == x.shape and not close(still, x):
            return Mistake(
                "not-identity-at-angle-0",
                "with every angle 0 (cos = 1, sin = 0) it should return x unchanged, and it "
                "does not: check how the pairs are read from x and written back (each rotated "
                "feature goes back where its input feature was).",
            )
        return None

    def length(obs: Observation, ask: Ask) -> str | None:
        got = obs.value
        kept = [t.square() for t in _split(x, asked)]
        seen = [t.square() for t in _split(got, asked)]
        if not close(seen[0] + seen[1], kept[0] + kept[1], 1e-6, 1e-4):
            return Mistake(
                "changes-lengths",
                "it changes the length of some pairs (x1, x2); a rotation only turns them. "
                "Check the signs of the sine terms against the rotation matrix.",
            )
        return None

    return identity, length


def _rotary_hint(failure: Failure) -> str | None:
    if "must match the size" in failure.message:
        return Mistake(
            "angles-on-whole-x",
            "cos and sin have d_head / 2 columns, one angle per pair: multiply them with the "
            "(..., L, d_head / 2) halves of each pair, not with the whole x.",
        )
    return None


def _rotary_case(
    shape: tuple[int, ...],
    pairing: str | None,
    seed: int,
    table: bool = False,
    dtype: torch.dtype = torch.float64,
    gradient: bool = False,
) -> Case:
    L, d_head = shape[-2], shape[-1]
    x = randn(*shape, seed=seed).to(dtype)
    if table:
        angles = encoder_lib.rotary_angles(L, d_head, dtype=torch.float64)
    else:
        angles = randn(L, d_head // 2, seed=seed + 1) * 2.0
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    asked = pairing or "halves"
    call = _rotary_call(x, cos, sin, pairing)
    text = "" if pairing is None else f", pairing={pairing!r}"
    what = f"apply_rotary(x, cos, sin{text}) with x of shape {shape}{_dtype_text(x)} and "
    what += "the angles of rotary_angles" if table else "random angles"
    case = Case(
        call,
        what,
        reference=encoder_lib.apply_rotary,
        mistakes=lambda: _rotary_mistakes(x, cos, sin, asked),
        probes=_rotary_probes(x, cos, sin, pairing),
        shape_hints=(
            {
                (*shape[:-1], d_head // 2): Mistake(
                    "one-value-per-pair",
                    "That is one value per pair: return both rotated "
                    "features of every pair, d_head in all, in the places of the input's.",
                ),
                (*shape[:-1], d_head // 2, 2): Mistake(
                    "pairs-not-joined",
                    "Those are the pairs, (..., d_head / 2, 2): put "
                    "them back in x's layout, (..., L, d_head).",
                ),
            },
        ),
    )
    return _with_random_upstream(case, ("args[0]",), seed=seed + 2) if gradient else case


def _rotary_cases(thorough: bool) -> Iterator[Case]:
    yield _rotary_case((2, 3, 5, 8), "halves", seed=1201)
    yield _rotary_case((2, 3, 5, 8), "adjacent", seed=1201)
    yield _rotary_case((1, 2, 6, 4), "halves", seed=1202, table=True, gradient=True)
    yield _rotary_case((1, 2, 6, 4), "adjacent", seed=1203, table=True)
    if not thorough:
        return
    yield _rotary_case((4, 6), None, seed=1204)  # the default pairing; (L, d_head)
    yield _rotary_case((3, 7, 2), "adjacent", seed=1205)  # one pair; (B, L, d_head)
    yield _rotary_case((2, 2, 9, 12), "halves", seed=1206, dtype=torch.float32)
    yield _rotary_case((2, 2, 9, 12), "adjacent", seed=1207, dtype=torch.float32, table=True)
    yield _rotary_case((1, 1, 5, 6), "adjacent", seed=1208, gradient=True)
    yield _rotary_case((2, 16, 10), "halves", seed=1209, table=True)


check_apply_rotary = runner.register_given(
    3,
    'def apply_rotary(x, cos, sin, pairing="halves"):',
    _rotary_cases,
    forbidden=Forbidden(
        python={
            encoder_lib.apply_rotary: "encoder_lib.apply_rotary",
            encoder_lib.RotaryEmbedding: "encoder_lib.RotaryEmbedding",
        }
    ),
    slots=("the rotated x",),
    letters=("the shape of x",),
    inputs={"args[0]": "x", "args[1]": "cos", "args[2]": "sin"},
    failure_hint=_rotary_hint,
    grad_names={"args[0]": "x"},
)


# --- exercise 4: sliding_window_mask -------------------------------------------------------------


def _band(length: int, low: int, high: int) -> torch.Tensor:
    """True where low <= i - j <= high (query i, key j)."""
    i = torch.arange(length)
    offset = i[:, None] - i[None, :]  # (L, L), i - j
    return (offset >= low) & (offset <= high)


def _window_mistakes(length: int, window: int) -> dict[str, torch.Tensor]:
    half = window // 2
    right = _band(length, -half, half)
    return {
        Mistake(
            "off-by-one",
            "the mask is one key too narrow on each side (off by one): |i - j| < window / 2 leaves "
            "out the two keys at distance exactly window / 2. A query sees window / 2 keys on each "
            "side, so the band includes that distance.",
        ): _band(length, -half + 1, half - 1),
        Mistake(
            "window-as-half-width",
            "it takes window as the half-width: each query sees window keys on each side, twice "
            "too many. window counts the keys on both sides together (ModernBERT's window of 128 "
            "is 64 on each side).",
        ): _band(length, -window, window),
        Mistake(
            "keys-before-only",
            "it only lets a query see the keys before it (and itself), like a causal mask. The "
            "encoder's window is two-sided: window / 2 keys on each side.",
        ): _band(length, 0, half),
        Mistake(
            "keys-after-only",
            "it only lets a query see the keys after it (and itself). The encoder's window is "
            "two-sided: window / 2 keys on each side.",
        ): _band(length, -half, 0),
        Mistake(
            "one-sided",
            "it is one-sided: a query sees the window keys before it. The encoder's window is "
            "two-sided: window / 2 keys on each side, window in all.",
        ): _band(length, 0, window),
        Mistake(
            "less-than-window",
            "it lets a query see keys at distances up to window - 1 on each side (|i - j| < "
            "window): window counts both sides together, window / 2 on each.",
        ): _band(length, -(window - 1), window - 1),
        Mistake(
            "polarity-reversed",
            "it has the wrong polarity: it is True outside the band. In this course True means "
            "'may attend' (as in F.scaled_dot_product_attention), so the keys near the query are "
            "True.",
        ): ~right,
        Mistake(
            "polarity-reversed-and-off-by-one",
            "it has the wrong polarity and is one key too narrow: True means 'may attend', and the "
            "band includes the distance window / 2.",
        ): ~_band(length, -half + 1, half - 1),
    }


_PLAIN_MASK = Mistake(
    "mask-not-plain",
    "Return the plain (L, L) mask: it broadcasts against scores (B, H, L, L) by itself.",
)


def _window_case(length: int, window: int) -> Case:
    expected = encoder_lib.sliding_window_mask(length, window)

    def first_difference(obs: Observation, ask: Ask) -> str | None:
        i, j = (obs.value != expected).nonzero()[0].tolist()
        return Mistake(
            "mismatch",
            f"at query {i}, key {j} (distance {abs(i - j)}) it gives {bool(obs.value[i, j])}, "
            f"expected {bool(expected[i, j])}: True exactly where |i - j| <= window / 2 = "
            f"{window // 2}.",
        )

    return Case(
        Call("sliding_window_mask", "sliding_window_mask", (length, window)),
        f"sliding_window_mask({length}, {window})",
        expected=expected,
        mistakes=lambda: _window_mistakes(length, window),
        probes=(first_difference,),
        shape_hints=(dict.fromkeys(((1, length, length), (1, 1, length, length)), _PLAIN_MASK),),
    )


def _window_cases(thorough: bool) -> Iterator[Case]:
    sizes = [(8, 4), (7, 2), (9, 6), (5, 12)]
    if thorough:
        sizes += [(1, 2), (16, 8), (12, 22), (3, 4), (20, 10)]
    for length, window in sizes:
        yield _window_case(length, window)


check_sliding_window_mask = runner.register_given(
    4,
    "def sliding_window_mask(length, window):",
    _window_cases,
    reference=encoder_lib.sliding_window_mask,
    forbidden=Forbidden(
        python={encoder_lib.sliding_window_mask: "encoder_lib.sliding_window_mask"}
    ),
    slots=("the mask",),
    letters=("(L, L)",),
    messages={
        "dtype": "{slot} has dtype {got}; it must be boolean (torch.bool), True = may attend: "
        "compare the distances with the half-width and keep the result as it is."
    },
)


# --- exercise 5: ModernEncoderLayer.forward ------------------------------------------------------

_LAYER_EPS = 1e-6
_STATE = {  # the student's parameter name -> the library layer's
    "norm1.weight": "norm1.weight",
    "q_proj.weight": "self_attn.q_proj.weight",
    "k_proj.weight": "self_attn.k_proj.weight",
    "v_proj.weight": "self_attn.v_proj.weight",
    "out_proj.weight": "self_attn.out_proj.weight",
    "norm2.weight": "norm2.weight",
    "ffn.wi.weight": "ffn.wi.weight",
    "ffn.wo.weight": "ffn.wo.weight",
}
_LAYER_DROPOUT_WHERE = (
    "in training mode the attention weights get dropout with probability self.attn_dropout, "
    "self.dropout1 acts on the attention sub-layer's output and self.dropout2 on the FFN's, "
    "each before it is added to x"
)
_OWN_MASK = (
    " If you build the band with your sliding_window_mask, check exercise 4 first; "
    "encoder_lib.sliding_window_mask is allowed here."
)


@dataclasses.dataclass(frozen=True)
class _Way:
    """How the layer is written: the right way with the defaults, else one mistake."""

    norm: str = "pre"
    """"pre", "post", "normalised_skip" (h = norm(x); h + sublayer(h)), "norm1_twice", "none"."""
    residual: tuple[bool, bool] = (True, True)
    rotate: str = "qk"
    """"qk", "q", "k", "qkv", "output" (the attention output instead), "none"."""
    combine: str = "and"
    """"and", "or", "mask_only" (window ignored), "window_only" (padding ignored), "inverted"."""
    band: tuple[int, int] | None = None
    """The offsets i - j the band allows, (low, high), if not (-window / 2, window / 2)."""
    band_inverted: bool = False
    split: str = "transpose"
    """"transpose" or "view" (heads split by a plain view, no transpose)."""
    scale_by_d_model: bool = False
    attn_drop: bool = True
    drop1: bool = True
    drop2: bool = True
    attn_drop_in_eval: bool = False


def _layer_formula(ref, x, mask, window: int | None, train: bool, way: _Way) -> torch.Tensor:
    """The layer written out with ``ref``'s modules, in ``way``; call under ``reference_mode``
    with ``ref`` in the case's mode."""
    B, L, D = x.shape
    sa = ref.self_attn
    H, d = sa.num_heads, sa.head_dim
    p = sa.dropout

    def heads(t: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, H, L, d)
        if way.split == "transpose":
            return t.view(B, L, H, d).transpose(1, 2)
        return t.reshape(B, H, L, d)

    def attention_mask() -> torch.Tensor | None:
        padding = None if mask is None or way.combine == "window_only" else mask
        if padding is not None and way.combine == "inverted":
            padding = ~padding
        if window is None or way.combine == "mask_only":
            return padding
        low, high = way.band or (-(window // 2), window // 2)
        band = ~_band(L, low, high) if way.band_inverted else _band(L, low, high)
        if padding is None:
            return band
        return padding | band if way.combine == "or" else padding & band

    def attention(h: torch.Tensor) -> torch.Tensor:
        q, k, v = heads(sa.q_proj(h)), heads(sa.k_proj(h)), heads(sa.v_proj(h))
        q_r, k_r = sa.rotary(q, k)
        q = q_r if way.rotate in ("qk", "q", "qkv") else q
        k = k_r if way.rotate in ("qk", "k", "qkv") else k
        if way.rotate == "qkv":
            v = sa.rotary(v, v)[0]
        if way.scale_by_d_model:
            q = q * math.sqrt(d / D)
        dropout_p = p if (train and way.attn_drop) or way.attn_drop_in_eval else 0.0
        out, _ = encoder_lib.scaled_dot_product_attention(
            q, k, v, attention_mask(), dropout_p, need_weights=False
        )
        if way.rotate == "output":
            out = sa.rotary(out, out)[0]
        if way.split == "transpose":
            out = out.transpose(1, 2)
        return sa.out_proj(out.reshape(B, L, D))

    drop1 = ref.dropout1 if way.drop1 else layer_cases.same
    drop2 = ref.dropout2 if way.drop2 else layer_cases.same
    norm1 = ref.norm1 if way.norm != "none" else layer_cases.same
    norm2 = {"none": layer_cases.same, "norm1_twice": ref.norm1}.get(way.norm, ref.norm2)
    shape = layer_cases.Shape(
        norm_first=way.norm != "post",
        drops=(drop1, drop2),
        at=("out", "out"),
        residual=way.residual,
        form="normalised_skip" if way.norm == "normalised_skip" else "",
    )
    return layer_cases.residual_sublayers(
        x, ((attention, norm1, drop1), (ref.ffn, norm2, drop2)), shape
    )


def _layer_mistakes(ref, x, mask, window: int | None, train: bool) -> dict[str, Any]:
    def f(**changes: Any) -> Callable[[], torch.Tensor]:
        return lambda: _layer_formula(ref, x, mask, window, train, _Way(**changes))

    entries: dict[str, Callable[[], torch.Tensor]] = {
        Mistake(
            "post-norm",
            "it normalises after adding the residual (post-norm, the 2017 layer's order). This "
            "layer is pre-norm: each sub-layer reads a normalised copy of x and its output is "
            "added to x itself, which is never normalised inside the layer.",
        ): f(norm="post"),
        Mistake(
            "normalised-skip",
            "the residual adds the normalised x: in a pre-norm layer the skip connection carries x "
            "itself, and only the sub-layer's input is normalised.",
        ): f(norm="normalised_skip"),
        Mistake(
            "norm1-twice",
            "it uses norm1 before the feed-forward network too; that sub-layer has its own norm, "
            "norm2 (each norm has its own gain).",
        ): f(norm="norm1_twice"),
        Mistake(
            "no-norm",
            "it never applies norm1 and norm2: in a pre-norm layer each sub-layer reads a "
            "normalised copy of its input.",
        ): f(norm="none"),
        Mistake(
            "no-residual",
            "there is no residual (skip) connection: each sub-layer's output must be added to its "
            "input x.",
        ): f(residual=(False, False)),
        Mistake(
            "no-residual-around-attention",
            "the residual (skip) connection around the attention is missing: add the attention "
            "sub-layer's output to its input x.",
        ): f(residual=(False, True)),
        Mistake(
            "no-residual-around-ffn",
            "the residual (skip) connection around the feed-forward network is missing: add the "
            "FFN sub-layer's output to its input.",
        ): f(residual=(True, False)),
        Mistake(
            "queries-only-rotated",
            "only the queries are rotated. The keys must be rotated too, each by its own position: "
            "then a score depends on the distance between query and key; with one side rotated it "
            "depends on absolute positions.",
        ): f(rotate="q"),
        Mistake(
            "keys-only-rotated",
            "only the keys are rotated. The queries must be rotated too, each by its own position: "
            "then a score depends on the distance between query and key.",
        ): f(rotate="k"),
        Mistake(
            "values-rotated",
            "the values are rotated too. Rotary positions act on queries and keys only: position "
            "decides where a head looks (the scores), not what it reads (the values).",
        ): f(rotate="qkv"),
        Mistake(
            "output-rotated",
            "it rotates the attention's output instead of the queries and keys: rotary positions "
            "must act on q and k before the scores are computed, so that the scores see the "
            "distance between positions.",
        ): f(rotate="output"),
        Mistake(
            "no-rotary",
            "there are no rotary positions: without them the layer cannot tell the order of the "
            "tokens (this layer adds no positions to its input). Rotate the queries and the keys "
            "with self.rotary, after splitting the heads.",
        ): f(rotate="none"),
        Mistake(
            "heads-without-transpose",
            "the heads are split with a plain reshape (B, H, L, d_head) of the (B, L, D) "
            "projections: that mixes positions and features. Reshape to (B, L, H, d_head) first, "
            "then move the head axis forward (and back again after the attention).",
        ): f(split="view"),
        Mistake(
            "scaled-by-sqrt-d-model",
            "the scores are scaled by sqrt(D); scaled dot-product attention divides by "
            "sqrt(d_head), the width of one head.",
        ): f(scale_by_d_model=True),
    }
    if mask is not None:
        entries |= {
            Mistake(
                "padding-ignored",
                "it ignores the padding mask, so padding leaks into the real positions: pass the "
                "mask on to the attention (the check calls layer(x, mask=mask) by keyword).",
            ): f(combine="window_only"),
            Mistake(
                "mask-inverted",
                "it inverts the padding mask: True already means 'may attend', so use it as it is.",
            ): f(combine="inverted"),
        }
    if window is not None:
        if mask is not None:
            entries |= {
                Mistake(
                    "mask-or-window",
                    "it combines the padding mask and the window with OR, so a query may attend to "
                    "a key that is either real or near. Both must hold: True = may attend in each "
                    "mask, and a key is allowed only where both are True.",
                ): f(combine="or")
            }
        entries |= {
            Mistake(
                "window-ignored",
                f"the window is ignored: with window={window} each query may see only "
                f"{window // 2} keys on each side (and itself), but it attends to the whole "
                "sequence. Build the (L, L) band and combine it with the padding mask.",
            ): f(combine="mask_only")
        }
        half = window // 2
        bands = {
            Mistake(
                "band-off-by-one",
                "the band is one key too narrow on each side (|i - j| < window / 2): a query sees "
                "the keys at distance window / 2 too.",
            ): (-half + 1, half - 1),
            Mistake(
                "band-too-wide",
                "the band is twice too wide: window counts the keys on both sides together, "
                "window / 2 on each.",
            ): (-window, window),
            Mistake(
                "band-before-only",
                "the band is one-sided: a query sees only the keys before it. The encoder's window "
                "reaches window / 2 keys on each side.",
            ): (0, half),
            Mistake(
                "band-after-only",
                "the band is one-sided: a query sees only the keys after it. The encoder's window "
                "reaches window / 2 keys on each side.",
            ): (-half, 0),
        }
        for description, band in bands.items():
            if band[0] <= band[1]:
                entries[Mistake(description.id, description + _OWN_MASK)] = f(band=band)
        entries |= {
            Mistake(
                "band-reversed",
                "the band has the wrong polarity: True must mean 'may attend', for the keys near "
                "the query." + _OWN_MASK,
            ): f(band_inverted=True)
        }
    if train:
        entries |= {
            Mistake(
                "no-dropout-at-all",
                "it applies no dropout in training mode: " + _LAYER_DROPOUT_WHERE + ".",
            ): f(attn_drop=False, drop1=False, drop2=False),
            Mistake(
                "no-attention-dropout",
                "the attention weights get no dropout in training mode: the attention takes "
                "self.attn_dropout as its dropout probability when the layer is training (and 0 in "
                "eval mode).",
            ): f(attn_drop=False),
            Mistake(
                "no-dropout1",
                "in training mode there is no dropout on the attention sub-layer's output "
                "(self.dropout1), before it is added to x.",
            ): f(drop1=False),
            Mistake(
                "no-dropout2",
                "in training mode there is no dropout on the FFN sub-layer's output "
                "(self.dropout2), before it is added to x.",
            ): f(drop2=False),
        }
    elif ref.self_attn.dropout > 0:
        entries |= {
            Mistake(
                "attention-dropout-in-eval",
                "the attention weights get dropout in eval mode too: pass self.attn_dropout as the "
                "dropout probability only while self.training, 0 otherwise.",
            ): f(attn_drop_in_eval=True)
        }
    return layer_cases.mistake_values(ref, train, entries)


def _reference_layer(D, H, d_ff, window, p, pairing, seed, dtype) -> nn.Module:
    """``encoder_lib.ModernEncoderLayer`` with RMSNorms whose gains are random (a norm swapped
    or skipped shows), in eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ref = encoder_lib.ModernEncoderLayer(
            D, H, d_ff, None, window, "gelu", p, _LAYER_EPS, "rms", pairing=pairing
        ).to(torch.float64)
    with torch.no_grad():
        for i, (name, param) in enumerate(ref.named_parameters()):
            if name.startswith("norm"):
                param.copy_(1.0 + 0.3 * randn(*param.shape, seed=seed * 100 + i))
    return ref.to(dtype).eval()


def _layer_hint(failure: Failure) -> str | None:
    message = failure.message
    if "view size is not compatible" in message:
        return Mistake(
            "view-not-contiguous",
            "After a transpose the tensor is no longer contiguous, so view cannot merge the "
            "heads: use reshape (or .contiguous() before view).",
        )
    if "tuple" in message and "attribute" in message:
        return Mistake(
            "attention-pair-not-unpacked",
            "encoder_lib.scaled_dot_product_attention returns a pair (output, weights): unpack "
            "it (F.scaled_dot_product_attention returns the output alone).",
        )
    if "d_head" in message or "last dimension" in message:
        return Mistake(
            "rotary-before-split",
            "self.rotary works on each head's d_head features: split the heads first, "
            "(B, L, D) -> (B, H, L, d_head), then rotate the queries and the keys.",
        )
    return None


def _layer_case(
    D: int,
    H: int,
    d_ff: int,
    window: int | None,
    p: float,
    pairing: str,
    lengths: list[int],
    seed: int,
    train: bool = False,
    dtype: torch.dtype = torch.float64,
    padding: bool = True,
    gradient: bool = False,
) -> Case:
    """The layer on an x of shape (B, L, D), B = len(lengths) sequences of L = max(lengths)
    positions, sequence b real at its first lengths[b] (the padding mask, unless not padding)."""
    B, L = len(lengths), max(lengths)
    ref = _reference_layer(D, H, d_ff, window, p, pairing, seed, dtype)
    x = randn(B, L, D, seed=seed + 2).to(dtype)
    mask = keep_first(lengths, L) if padding else None
    library = ref.state_dict()
    state = {ours: library[theirs].clone() for ours, theirs in _STATE.items()}
    init = ((D, H), {"d_ff": d_ff, "window": window, "dropout": p, "pairing": pairing})
    call = Call(
        "ModernEncoderLayer",
        "modern_encoder_layer",
        (x,),
        {"mask": mask},
        init=init,
        dtype=dtype,
        state=state,
        train=train,
        inspect=True,
        seed=seed,
    )
    kind = "global" if window is None else f"window={window}"
    what = f"ModernEncoderLayer({D}, {H}, d_ff={d_ff}, {kind}, dropout={p}, pairing={pairing!r})"
    what += f"(x, mask) with x of shape {(B, L, D)}" + ("" if padding else " and no mask")
    what += _dtype_text(x) + (" in training mode" if train else "")

    leaks = mask is not None and not bool(mask.all()) and not train
    pad = ~keep_first(lengths, L, extra_axes=0) if leaks else ...  # (B, L)
    no_leak = Unchanged(
        call,
        (redrawn(x, pad, seed + 3),) if leaks else (x,),
        Mistake(
            "padding-leaks",
            "padding leaks into the real positions: changing only the padded positions of x "
            "changed the outputs at real positions. The padding mask (True = may attend) "
            "must reach the attention, combined with the window when there is one.",
        ),
        ~pad if leaks else ...,
        when=leaks,
    )
    reach = L if window is None else window // 2 + 1  # positions beyond it: out of reach
    local = Unchanged(
        call,
        (redrawn(x, (slice(None), 0), seed + 4),),  # the first token changes
        Mistake(
            "window-ignored",
            f"changing the token at position 0 changed the outputs at positions more than "
            f"window / 2 = {reach - 1} away, which a local layer cannot see: the window "
            "does not limit the attention. Combine the band with the padding mask so that "
            "a key is allowed only where both are True." + _OWN_MASK,
        ),
        (slice(None), slice(reach, None)),
        when=window is not None and not train and reach < L,
    )

    case = Case(
        call,
        what,
        expected=layer_cases.reference_output(ref, call),
        mistakes=lambda: _layer_mistakes(ref, x, mask, window, train),
        probes=(no_leak, local),  # they ask without gradients
    )
    if gradient:  # derived from the library's layer, under its own parameter names
        names = {"args[0]": "x"} | {f"parameters.{n}": n for n in _STATE}
        _with_random_upstream(case, ("args[0]", "parameters"), seed=seed + 5, grad_names=names)
        library = reference_grads(ref.train(train), case.call)
        case.grads = {"args[0]": library["args[0]"]} | {
            f"parameters.{ours}": library[f"parameters.{theirs}"] for ours, theirs in _STATE.items()
        }
    case.probes = (*case.probes, layer_cases.right_in_eval(ref, case.call, _LAYER_DROPOUT_WHERE))
    return case


def _layer_cases(thorough: bool) -> Iterator[Case]:
    yield _layer_case(8, 2, 12, None, 0.1, "halves", [7, 5, 3], seed=1301)
    yield _layer_case(8, 2, 12, 4, 0.1, "halves", [9, 7], seed=1302)
    yield _layer_case(8, 2, 12, 4, 0.2, "adjacent", [8, 6], seed=1303, train=True)
    yield _layer_case(8, 2, 10, 2, 0.0, "adjacent", [6, 5], seed=1304, gradient=True)
    if not thorough:
        return
    yield _layer_case(12, 3, 16, 6, 0.1, "halves", [10, 10], seed=1305, padding=False)
    yield _layer_case(8, 2, 12, None, 0.0, "adjacent", [5, 2], seed=1306)
    yield _layer_case(8, 4, 12, 4, 0.1, "halves", [9, 8], seed=1307, dtype=torch.float32)
    yield _layer_case(8, 2, 12, None, 0.3, "halves", [6, 4, 6], seed=1308, train=True)
    yield _layer_case(8, 2, 12, 8, 0.1, "adjacent", [6, 3], seed=1309)  # wider than L
    yield _layer_case(8, 2, 12, 2, 0.1, "halves", [1], seed=1310)
    yield _layer_case(8, 2, 12, 4, 0.2, "halves", [9, 7], seed=1311, train=True, gradient=True)


_LAYER_FORBIDDEN = Forbidden(
    python={**_LAYERS, encoder_lib.ModernSelfAttention: "encoder_lib.ModernSelfAttention"}
)
check_modern_encoder_layer = runner.register_given(
    5,
    "class ModernEncoderLayer(nn.Module):",
    _layer_cases,
    forbidden=_LAYER_FORBIDDEN,
    slots=("the layer's output",),
    letters=("(B, L, D)",),
    module=_module(
        "ModernEncoderLayer",
        _STATE,
        "ModernEncoderLayer should have the parameters of the given __init__ and no other, got "
        "{got}: keep the given __init__ (no biases anywhere).",
        _LAYER_FORBIDDEN,
    ),
    inputs={"args[0]": "x", "mask": "mask"},
    failure_hint=_layer_hint,
)
