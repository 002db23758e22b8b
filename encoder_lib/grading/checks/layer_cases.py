"""What the checks of the encoder layer (notebook 05) and the decoder layer (notebook 07) share:
random reference layers, a layer written out with one mistake or none, the mistakes both layers
can make (the norm, the activation, dropout) and the probes of training-mode cases. The modern
layer (notebook 09) writes its residual sub-layers with the same ``Shape`` and
``residual_sublayers``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..feedback import Mistake
from ..kernel.observe import Call, Observation
from ..vocabulary import Ask, Case, backpropagating, close, randn, reference_mode

FUNCTIONS = {"relu({})": torch.relu}
"""What the reference layers apply besides their sub-modules (``locate.Locate.functions``)."""


def dropout(p: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """Dropout with probability p as student code gets it (call under ``reference_mode``)."""
    return lambda t: F.dropout(t, p, training=True) if p > 0 else t


def same(t: torch.Tensor) -> torch.Tensor:
    return t


def evaluate(entries: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
    """Description -> value, skipping the mistakes that cannot happen on these inputs (their
    masks do not broadcast: the student's code would have raised instead)."""
    values: dict[str, Any] = {}
    with reference_mode(), torch.no_grad():
        for text, make in entries.items():
            try:
                values[text] = make()
            except (ValueError, RuntimeError):
                continue
    return values


def reference_layer(cls: type[nn.Module], D, H, d_ff, p, norm_first, seed, dtype=torch.float64):
    """A ``cls`` (``encoder_lib.EncoderLayer`` or ``DecoderLayer``) in eval mode with every
    parameter random (no unit gain or zero bias that could hide a swapped or missing
    parameter)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ref = cls(D, H, d_ff, p, "relu", norm_first).to(torch.float64)
    with torch.no_grad():
        for i, (name, param) in enumerate(ref.named_parameters()):
            noise = randn(*param.shape, seed=seed * 100 + i)
            if name.startswith("norm") and name.endswith("weight"):
                param.copy_(1.0 + 0.3 * noise)
            elif name.endswith("bias"):
                param.copy_(0.2 * noise)
    return ref.to(dtype).eval()


def reference_output(ref: nn.Module, call: Call) -> torch.Tensor:
    """``ref`` on ``call``'s inputs, in ``call``'s mode; ``ref`` is left in eval mode."""
    with reference_mode(), torch.no_grad():
        try:
            return ref.train(call.train)(*call.args, **call.kwargs)
        finally:
            ref.eval()


# --- a layer written out with one mistake or none ------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Shape:
    """One way of writing a layer of residual sub-layers."""

    norm_first: bool
    drops: tuple[Callable[[torch.Tensor], torch.Tensor], ...]
    """The dropouts (``same`` when off), in the order of the layer's dropout sites."""
    at: tuple[str, ...]
    """Where each sub-layer's dropout sits: its output ("out"), its input ("in"), the residual
    sum ("sum") or after the norm ("after")."""
    residual: tuple[bool, ...]
    activation: bool = True
    form: str = ""
    """"norm_in_branch": x + norm(sublayer(x)); "normalised_skip": h = norm(x); h + sublayer(h)."""
    order: tuple[int, ...] | None = None
    """The order the sub-layers run in (None: as given)."""


def feed_forward(ref: nn.Module, hidden_dropout, activation: bool) -> Callable:
    """``ref``'s FFN sub-layer, with ``hidden_dropout`` on its hidden units."""

    def ffn(h: torch.Tensor) -> torch.Tensor:
        hidden = ref.linear1(h)
        return ref.linear2(hidden_dropout(ref.activation(hidden) if activation else hidden))

    return ffn


def residual_sublayers(x: torch.Tensor, blocks: Sequence[tuple], s: Shape) -> torch.Tensor:
    """``x`` through ``blocks``, one ``(sublayer, norm, dropout)`` per residual sub-layer, in the
    way ``s`` says."""
    for i in s.order or range(len(blocks)):
        sublayer, norm, drop = blocks[i]
        if s.form == "norm_in_branch":
            x = x + norm(drop(sublayer(x)))
            continue
        if s.form == "normalised_skip":
            x = norm(x)
            x = x + drop(sublayer(x))
            continue
        at = s.at[i]
        h = norm(x) if s.norm_first else x
        y = sublayer(drop(h)) if at == "in" else sublayer(h)
        total = (x if s.residual[i] else 0) + (drop(y) if at == "out" else y)
        total = drop(total) if at == "sum" else total
        x = total if s.norm_first else norm(total)
        x = drop(x) if at == "after" else x
    return x


# --- the mistakes both layers can make -----------------------------------------------------------

Rewrite = Callable[..., Callable[[], torch.Tensor]]
"""``f(**changes)``: computes the output of the layer written as its right ``Shape`` with those
fields changed."""

NO_ACTIVATION = Mistake(
    "no-activation",
    "the FFN has no activation between linear1 and linear2 (two linear maps in a row are one "
    "linear map): apply self.activation (ReLU) to linear1's output.",
)


def norm_mistakes(f: Rewrite, norm_first: bool, norms: str) -> dict[str, Callable]:
    """The norm in the wrong place; ``norms`` names the layer's norms in a message."""
    if norm_first:
        return {
            Mistake(
                "post-norm-instead-of-pre-norm",
                "with norm_first=True (pre-norm) it normalises after adding the residual "
                f"(post-norm): with norm_first=True apply {norms} to the input of each sub-layer, "
                "x = x + sublayer(norm(x)), and leave the residual sum un-normalised. Is "
                "norm_first ignored?",
            ): f(norm_first=False),
            Mistake(
                "normalised-skip",
                "with norm_first=True (pre-norm) the residual adds the normalised x: the skip "
                "connection must carry the un-normalised input, x = x + sublayer(norm(x)).",
            ): f(form="normalised_skip"),
        }
    return {
        Mistake(
            "pre-norm-instead-of-post-norm",
            "with norm_first=False (post-norm) it normalises the input of each sub-layer "
            "(pre-norm): the norm is in the wrong place. Post-norm adds the residual first and "
            "then normalises, x = norm(x + sublayer(x)). Is norm_first ignored?",
        ): f(norm_first=True),
        Mistake(
            "norm-in-residual-branch",
            "with norm_first=False (post-norm) the norm is inside the residual branch, "
            "x + norm(sublayer(x)); post-norm normalises the sum: x = norm(x + sublayer(x)).",
        ): f(form="norm_in_branch"),
    }


_WRONG_PLACE = {
    "in": ("dropout-on-sublayer-input", "to the sub-layer's input instead of its output"),
    "sum": (
        "dropout-on-residual-sum",
        "to the residual sum instead of the sub-layer's output alone",
    ),
    "after": ("dropout-after-norm", "after the norm instead of to the sub-layer's output"),
}


@dataclasses.dataclass(frozen=True)
class Dropouts:
    """How messages name a layer's dropouts."""

    sites: tuple[str, ...]
    """Each dropout, in the order of ``Shape.drops``."""
    places: tuple[str, ...]
    """Each sub-layer, then all of them together."""
    where: str
    """Where the dropouts go (the advice)."""
    still_active: str
    """Dropout left active in eval mode at ``{site}`` (with probability ``{q}``)."""


def dropout_mistakes(f: Rewrite, p: float, train: bool, norm_first: bool, names: Dropouts):
    """In training mode: dropout missing (everywhere or at one site) or in the wrong place (in one
    sub-layer or all). In eval mode: dropout still active at one site."""
    n, m = len(names.sites), {}
    if not train:
        for i, site in enumerate(names.sites):
            for q in sorted({p, 0.5} - {0.0}):
                drops = tuple(dropout(q) if j == i else same for j in range(n))
                m[names.still_active.format(site=site, q=q)] = f(drops=drops)
        return m
    m[
        Mistake(
            "dropout-missing",
            "it applies no dropout in training mode (dropout is missing in training): "
            f"{names.where}.",
        )
    ] = f(drops=(same,) * n)
    for i, site in enumerate(names.sites):
        drops = tuple(same if j == i else dropout(p) for j in range(n))
        m[
            Mistake(
                "dropout-missing-at-one-site",
                f"in training mode there is no dropout on {site}: {names.where}.",
            )
        ] = f(drops=drops)
    advice = names.where[0].upper() + names.where[1:]
    sublayers = len(names.places) - 1
    for at, (mistake, text) in _WRONG_PLACE.items():
        if at == "after" and norm_first:
            continue
        for i, where in enumerate(names.places):
            every = i == sublayers  # the last place names all the sub-layers
            places_at = tuple(at if every or j == i else "out" for j in range(sublayers))
            wrong = f"dropout is in the wrong place in {where}: it is applied {text}. {advice}."
            m[Mistake(mistake, wrong)] = f(at=places_at)
    return m


def mistake_values(ref: nn.Module, train: bool, entries: Mapping[str, Callable]) -> dict[str, Any]:
    """The mistakes' outputs, computed with ``ref``'s sub-modules in the case's mode."""
    ref.train(train)
    try:
        return evaluate(entries)
    finally:
        ref.eval()


# --- probes and the gradient case ----------------------------------------------------------------


def right_in_eval(ref: nn.Module, call: Call, where_dropout_goes: str):
    """A probe for a training-mode ``call``: an answer right in eval mode has its dropout missing
    or misplaced."""
    evaluated = reference_output(ref, dataclasses.replace(call, train=False))

    def probe(obs: Observation, ask: Ask) -> str | None:
        if not call.train:
            return None
        if close(ask(dataclasses.replace(call, train=False)).value, evaluated, 1e-5, 1e-4):
            return Mistake(
                "dropout-misplaced",
                "it is right in eval mode but not in training mode, so its dropout is missing or "
                f"in the wrong place: {where_dropout_goes}.",
            )
        return None

    return probe


def backpropagating_layer(case: Case, ref: nn.Module, upstream: torch.Tensor) -> Case:
    """``case`` (in eval mode, float64) with ``upstream`` backpropagated into its tensor
    arguments and the layer's parameters, compared with ``ref``'s gradients."""
    names = tuple(f"args[{i}]" for i in range(len(case.call.args)))
    case.reference = ref  # the expected value is the case's own: only the gradients are derived
    backpropagating(case, upstream, grad=(*names, "parameters"))
    case.grad_names = {n: n.removeprefix("parameters.") for n in case.grads if n not in names}
    return case
