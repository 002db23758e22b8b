"""Checks of notebook 10 (the encoder block in JAX with Flax NNX), judged against PyTorch.

The grader never imports JAX: it sends torch tensors and PyTorch state dicts as for every other
notebook, and the kernel's side of a call (``observe_jax``, the ``"jax"`` scenario, run by
``wire.serve`` at autograde and by the visible checks in the notebook) converts them to JAX
arrays, builds the student's NNX module, writes PyTorch's weights into it with
``encoder_lib.jax_bridge``, calls it, and sends the outputs back as torch tensors. The reference
is PyTorch's own module on the same weights (``nn.LayerNorm``, ``nn.MultiheadAttention``,
``nn.TransformerEncoderLayer``), in float32 on both sides, compared to float32's rounding
(``ATOL``, ``RTOL``).

Dropout cannot be compared value for value with PyTorch's (the random streams differ), so in a
module's cases the notebook's ``dropout`` (exercise 1, graded on its own) is replaced, while the
call runs, by one that records every call: the rate, ``deterministic``, the key, and the mask
it drew from that key. The reference then applies the recorded masks at PyTorch's dropout sites:
the comparison sees where dropout sits and how it scales, and the recorded keys show whether
every site and every step got a fresh key.

Named mistakes: Flax's epsilon, unbiased variance, the variance lost to cancellation in float32
(layer norm); a kernel left in PyTorch's (out, in) layout, a kernel or bias replaced by a plain
array or by a new ``nnx.Param`` instead of written in place (transplant); the softmax over the
queries, scaling by sqrt(D), the padding mask read the PyTorch way, laid over the queries (NaN
rows) or missing its head axis (attention); pre-norm, a missing residual (block); a key reused
across sites or steps (kept from ``__init__``, or made from a fixed seed in ``__call__``);
dropout running when ``deterministic=True``, one Bernoulli draw for the whole array. A module's
parameters must be ``nnx.Param`` (a plain array or another kind of ``nnx.Variable`` is named).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .. import runner, vocabulary
from ..feedback import GradingError, Mistake
from ..kernel import observe, observe_jax
from ..kernel.forbidden import Forbidden, forbid
from ..kernel.observe import Call, Failure, Observation
from ..vocabulary import Case, ModuleSpec, close, mismatch, randn

__all__ = [
    "check_jax_dropout",
    "check_jax_load_linear",
    "check_jax_layer_norm",
    "check_jax_feed_forward",
    "check_jax_attention",
    "check_jax_encoder_block",
    "check_jax_train_step",
]

ATOL, RTOL = 2e-5, 2e-4
"""float32 in JAX against float32 in PyTorch: different summation orders, same function."""

FLAX_EPS, TORCH_EPS = 1e-6, 1e-5

_REFERENCE = "encoder_lib.jax_encoder"
_JAX_ONLY = {
    "jax_dropout": {
        "flax.nnx:Dropout": "nnx.Dropout",
        "flax.linen:Dropout": "flax.linen.Dropout",
        f"{_REFERENCE}:dropout": "the reference",
    },
    "jax_load_linear": {
        f"{_REFERENCE}:load_linear": "the reference",
        "encoder_lib.jax_bridge:load_from_torch": "encoder_lib.jax_bridge",
    },
    "jax_layer_norm": {
        "flax.nnx:LayerNorm": "nnx.LayerNorm",
        "flax.linen:LayerNorm": "flax.linen.LayerNorm",
        "jax.nn:standardize": "jax.nn.standardize",
        f"{_REFERENCE}:LayerNorm": "the reference",
    },
    "jax_feed_forward": {f"{_REFERENCE}:FeedForward": "the reference"},
    "jax_attention": {
        "flax.nnx:MultiHeadAttention": "nnx.MultiHeadAttention",
        "flax.nnx:dot_product_attention": "nnx.dot_product_attention",
        "flax.nnx.nn.attention:dot_product_attention_weights": (
            "flax.nnx.nn.attention.dot_product_attention_weights"
        ),
        "flax.linen:dot_product_attention": "flax.linen.dot_product_attention",
        "flax.linen:dot_product_attention_weights": "flax.linen.dot_product_attention_weights",
        "jax.nn:dot_product_attention": "jax.nn.dot_product_attention",
        f"{_REFERENCE}:MultiHeadAttention": "the reference",
    },
    "jax_encoder_block": {
        "flax.nnx:MultiHeadAttention": "nnx.MultiHeadAttention",
        f"{_REFERENCE}:EncoderBlock": "the reference",
    },
}
for _name, _by_name in _JAX_ONLY.items():
    forbid(
        _name,
        Forbidden(
            by_name={
                k: v.replace("the reference", k.replace(":", ".")) for k, v in _by_name.items()
            }
        ),
    )

observe.scenario("jax")(observe_jax.run_jax)  # the kernel's side of every call below
observe.after_each_check(observe_jax.release_after_a_check)

IMMUTABLE = Mistake(
    "jax-array-changed-in-place",
    "JAX arrays cannot be changed in place (no x[...] = ..., no slice +=): build a new array "
    "with x.at[index].set(value) or jnp.where.",
)


# --- the grader's side: PyTorch references with switches ----------------------------------------


def _layer_norm(x, weight, bias, eps: float, way: str = "") -> torch.Tensor:
    """LayerNorm over the last axis; ``way`` names a mistake."""
    mean = x.mean(-1, keepdim=True)
    variance = x.var(-1, unbiased=way == "unbiased", keepdim=True)
    if way == "eps outside":
        return (x - mean) / (variance.sqrt() + eps) * weight + bias
    eps = {"flax eps": FLAX_EPS, "no eps": 0.0, "eps argument ignored": TORCH_EPS}.get(way, eps)
    if way == "no affine":
        return (x - mean) / torch.sqrt(variance + eps)
    return (x - mean) / torch.sqrt(variance + eps) * weight + bias


def _apply(mask: torch.Tensor | None, t: torch.Tensor, p: float) -> torch.Tensor:
    return t if mask is None else torch.where(mask, t / (1.0 - p), torch.zeros_like(t))


def _feed_forward(state, x, masks=(None,), p=0.0, prefix="", way="") -> torch.Tensor:
    h = F.linear(x, state[f"{prefix}linear1.weight"], state[f"{prefix}linear1.bias"])
    h = {
        "gelu": lambda t: F.gelu(t, approximate="tanh"),  # jax.nn.gelu's default
        "exact gelu": F.gelu,
        "no activation": lambda t: t,
    }.get(way, F.relu)(h)
    return F.linear(
        _apply(masks[0], h, p), state[f"{prefix}linear2.weight"], state[f"{prefix}linear2.bias"]
    )


def _attention(state, x, keep, H, masks=(None,), p=0.0, prefix="", way="") -> torch.Tensor:
    """nn.MultiheadAttention's function on its state dict; ``keep`` (B, L): True = real token."""
    B, L, D = x.shape
    d_head = D // H
    w_q, w_k, w_v = state[f"{prefix}in_proj_weight"].chunk(3)
    b_q, b_k, b_v = state[f"{prefix}in_proj_bias"].chunk(3)

    def heads(t: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, H, L, d_head)
        if way == "split without transpose":
            return t.reshape(B, H, L, d_head)
        return t.reshape(B, L, H, d_head).transpose(1, 2)

    q, k, v = (
        heads(F.linear(x, w_q, b_q)),
        heads(F.linear(x, w_k, b_k)),
        heads(F.linear(x, w_v, b_v)),
    )
    scale = {"sqrt(D)": math.sqrt(D), "no scale": 1.0}.get(way, math.sqrt(d_head))
    scores = q @ k.transpose(-2, -1) / scale  # (B, H, L_q, L_k)
    if keep is not None and way != "mask ignored":
        attend = ~keep if way == "mask inverted" else keep
        scores = scores.masked_fill(~attend[:, None, None, :], float("-inf"))
    weights = scores.softmax(dim=-2 if way == "softmax over queries" else -1)
    context = _apply(masks[0], weights, p) @ v  # (B, H, L, d_head)
    if way == "merge without transpose":
        context = context.reshape(B, L, D)
    else:
        context = context.transpose(1, 2).reshape(B, L, D)
    return F.linear(context, state[f"{prefix}out_proj.weight"], state[f"{prefix}out_proj.bias"])


def _block(state, x, keep, H, masks=(None,) * 4, p=0.0, way="") -> torch.Tensor:
    """nn.TransformerEncoderLayer (post-norm, ReLU) on its state dict, with ``masks`` for its
    four dropout sites: the attention weights, the attention's output, the feed-forward
    network's hidden units, its output."""
    eps = FLAX_EPS if way == "flax eps" else TORCH_EPS

    def norm(i: int, t: torch.Tensor) -> torch.Tensor:
        i = 1 if way == "norm1 twice" else i
        return _layer_norm(t, state[f"norm{i}.weight"], state[f"norm{i}.bias"], eps)

    mask = {"mask inverted": None if keep is None else ~keep, "mask ignored": None}.get(way, keep)
    attend = lambda t: _attention(state, t, mask, H, masks[:1], p, "self_attn.")  # noqa: E731
    feed = lambda t: _feed_forward(state, t, masks[2:3], p)  # noqa: E731
    res1, res2 = way != "no residual (attention)", way != "no residual (feed-forward)"
    if way == "pre-norm":
        x = x + _apply(masks[1], attend(norm(1, x)), p)
        return x + _apply(masks[3], feed(norm(2, x)), p)
    if way == "dropout on the sum":
        x = norm(1, _apply(masks[1], x + attend(x), p))
        return norm(2, _apply(masks[3], x + feed(x), p))
    x = norm(1, x * res1 + _apply(masks[1], attend(x), p))
    return norm(2, x * res2 + _apply(masks[3], feed(x), p))


# --- what the cases share ------------------------------------------------------------------------


def _hint(extra: Callable[[Failure], str | None] | None = None) -> Callable[[Failure], str | None]:
    def hint(failure: Failure) -> str | None:
        own = extra(failure) if extra is not None else None
        if own is None and "immutable" in failure.message:
            return IMMUTABLE
        return own

    return hint


def _float32(*shape: int, seed: int) -> torch.Tensor:
    return randn(*shape, seed=seed).to(torch.float32)


def _keep(lengths: Sequence[int] | None, L: int) -> torch.Tensor | None:
    """(B, L), True at each sequence's first ``lengths[b]`` positions (real tokens); None
    without lengths."""
    if lengths is None:
        return None
    return torch.arange(L)[None, :] < torch.tensor(list(lengths))[:, None]


def _seeded(seed: int, make: Callable[[], nn.Module]) -> nn.Module:
    """``make()`` with its weights drawn from ``seed``, not from the notebook's random stream."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make()


def _own(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """PyTorch's own module in evaluation mode: what a deterministic case expects."""
    with torch.no_grad():
        return module.eval()(*args, **kwargs)


def _randomised(module: nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """The module's state dict with every parameter random (no unit gain or zero bias that
    could hide a swapped or missing one), float32."""
    state = {}
    for i, (name, t) in enumerate(module.state_dict().items()):
        noise = randn(*t.shape, seed=seed * 100 + i).to(torch.float32)
        if "norm" in name and name.endswith("weight"):
            state[name] = 1.0 + 0.3 * noise
        elif name.endswith("bias"):
            state[name] = 0.2 * noise
        else:
            state[name] = t.detach().clone()
    module.load_state_dict(state)
    return state


class _Masks:
    """The dropout masks a call recorded, per step: read by the precheck, used by the
    reference of a training-mode case."""

    def __init__(self) -> None:
        self.steps: list[list[torch.Tensor | None]] = []


def _sites(
    target: str,
    train: bool,
    rate: float,
    sites: Sequence[tuple[tuple[int, ...], str]],
    into: _Masks,
) -> Callable[[Observation], str | None]:
    """A precheck on the recorded dropout calls: none active when ``deterministic=True``; in
    training mode one per site, in PyTorch's order, at the module's rate."""

    def check(obs: Observation) -> str | None:
        steps = obs.info.get("dropout") or []
        into.steps = []
        for calls in steps:
            active = [c for c in calls if not c["deterministic"] and c["rate"] > 0]
            if not train:
                if active:
                    return Mistake(
                        "dropout-when-deterministic",
                        f"dropout ran although {target} was called with deterministic=True (on "
                        f"an array of shape {active[0]['shape']}): pass `deterministic` on to "
                        "every dropout call and every sub-module.",
                    )
                continue
            if rate == 0:
                into.steps.append([None] * len(sites))
                continue
            where = "; ".join(f"{text} {shape}" for shape, text in sites)
            if not active:
                return Mistake(
                    "dropout-not-called",
                    f"with deterministic=False, {target} never called your `dropout` "
                    f"(exercise 1). PyTorch's module applies dropout at: {where}. Call "
                    "`dropout` there, with a fresh key from self.rngs.dropout() each time.",
                )
            got = [tuple(c["shape"]) for c in active]
            want = [shape for shape, _ in sites]
            if got != want:
                return Mistake(
                    "dropout-sites",
                    f"with deterministic=False, {target} applied dropout to arrays of shapes "
                    f"{got}; PyTorch's module applies it at: {where}, in that order.",
                )
            wrong = [c["rate"] for c in active if not math.isclose(c["rate"], rate)]
            if wrong:
                return Mistake(
                    "dropout-rate",
                    f"dropout ran with rate {wrong[0]:g}, but the module's rate is {rate:g} "
                    "(self.dropout_rate).",
                )
            into.steps.append([c["mask"] for c in active])
        return None

    check.sites = list(sites)  # type: ignore[attr-defined] (what tests/grading fabricate)
    return check


def _fresh_keys(target: str) -> Callable[[Observation, Any], str | None]:
    """A requirement of training-mode cases: every dropout site and every step has its own key."""

    def rule(obs: Observation, ask: Any) -> str | None:
        seen: list[torch.Tensor] = []
        for step, calls in enumerate(obs.info.get("dropout") or []):
            keys = [c["key"] for c in calls if not c["deterministic"] and c["rate"] > 0]
            for i, key in enumerate(keys):
                if key is None:
                    continue
                if any(torch.equal(key, other) for other in keys[:i]):
                    return Mistake(
                        "same-key-two-sites",
                        f"{target} passed the same key to two dropout sites in one call, so "
                        "both drop the same positions (and are not independent): ask "
                        "self.rngs.dropout() for a new key at every site.",
                    )
                if step and any(torch.equal(key, other) for other in seen):
                    if _from_a_fixed_seed(key):
                        return Mistake(
                            "fixed-seed-key",
                            f"{target}'s second call reused the keys of the first: its key is "
                            "made from a fixed seed (jax.random.key(n)) inside __call__, so "
                            "every call makes the same key again and drops the same positions. "
                            "Ask self.rngs.dropout() for a new key at every call instead.",
                        )
                    return Mistake(
                        "same-key-every-step",
                        f"{target}'s second call reused the keys of the first, so every step "
                        "drops the same positions: a key kept from one call to the next (made "
                        "once, in __init__) is the same key each time. Draw the keys inside "
                        "__call__ from self.rngs.dropout().",
                    )
            if step == 0:
                seen = [k for k in keys if k is not None]
        return None

    return rule


def _from_a_fixed_seed(key: torch.Tensor) -> bool:
    """Whether a key's bits are those of ``jax.random.key(n)`` for a small ``n`` (0, n): a key
    split from ``nnx.Rngs`` has random bits in both words."""
    bits = key.flatten()
    return bits.numel() == 2 and int(bits[0]) == 0 and 0 <= int(bits[1]) < 2**20


def _module_call(
    target: str, layout: str, init: tuple, x, state, train: bool, seed: int, keep=None
) -> Call:
    """``target(*init)`` (exercise ``jax_<layout>``) with PyTorch's ``state`` written in, called
    on ``x`` (and ``padding_mask=keep``), twice in training mode."""
    return Call(
        target,
        f"jax_{layout}",
        args=(x,),
        kwargs={} if keep is None else {"padding_mask": keep},
        init=(init, {}),
        state=state,
        train=train,
        scenario="jax",
        options={"setup": "module", "layout": layout, "steps": 2 if train else 1},
        seed=seed,
    )


_FLAX_SUBMODULES = {
    "flax.nnx.nn.normalization.LayerNorm": "nnx.LayerNorm",
    "flax.nnx.nn.attention.MultiHeadAttention": "nnx.MultiHeadAttention",
}


def _parameters(*owners: str, names: Sequence[str] = ("kernel", "bias")) -> list[str]:
    """The dotted names of the parameters ``names`` of each of ``owners`` (NNX's names)."""
    return [f"{owner}.{name}" for owner in owners for name in names]


def _module_spec(cls: str, parameters: Sequence[str], given: bool = True) -> ModuleSpec:
    keep = (
        "keep the given __init__"
        if given
        else "name them scale and bias, as nnx.LayerNorm does, each an nnx.Param"
    )
    return ModuleSpec(
        forbidden_submodules=_FLAX_SUBMODULES,
        parameters=tuple(parameters),
        names_message=(
            f"{cls} has the parameters {{got}}, but {{expected}} were expected: {keep} "
            "(jax_bridge writes PyTorch's weights into them)."
        ),
        not_module_message=f"{{call}} should build an nnx.Module: keep `class {cls}(nnx.Module)`.",
        keep_init=keep,
        not_parameter_message=(
            "{names} should be parameters, but {call} holds them as {kinds}: an NNX "
            "module's parameters are the arrays wrapped in nnx.Param, which "
            "nnx.state(module, nnx.Param) lists and an optimiser trains (and which jax_bridge "
            "writes PyTorch's weights into). A bare array, or another kind of Variable, is neither."
        ),
    )


def _steps_case(
    made: str,
    call: Call,
    sites: Sequence[tuple[tuple[int, ...], str]],
    formula: Callable[[list[torch.Tensor | None], str], torch.Tensor],
    table: Mapping[str, Mistake],
    want: torch.Tensor | None = None,
) -> Case:
    """A module case (``made``: the module as the student reads it): deterministic, compared to
    ``want`` (PyTorch's own module) or else to ``formula`` without masks, or in training mode,
    called twice, compared to ``formula`` with the masks each call recorded at ``sites``.
    ``formula(masks, way)`` gives each mistake of ``table`` too (those of the padding mask only
    when the call has one)."""
    target, train, rate = call.target, call.train, call.init[0][-1]
    x, keep = call.args[0], call.kwargs.get("padding_mask")
    mode = "with deterministic=False, called twice" if train else "with deterministic=True"
    padding = "" if keep is None else f", padding_mask with lengths {keep.sum(-1).tolist()}"
    what = f"{made}, {mode}, x of shape {tuple(x.shape)}{padding}"
    masks, none = _Masks(), [None] * len(sites)
    probes = (_query_rows(keep),) if keep is not None else ()

    def mistakes(m: list[torch.Tensor | None]) -> dict[str, torch.Tensor]:
        return {
            text: formula(m, way)
            for way, text in table.items()
            if keep is not None or not way.startswith("mask")
        }

    if train:
        expected: Any = lambda: tuple(formula(m, "") for m in masks.steps)  # noqa: E731
        slots: Sequence[str] = (f"the output of {what}, first call", "the same, second call")
        wrong = lambda: _per_step(mistakes, masks)  # noqa: E731
    else:
        expected = lambda: formula(none, "") if want is None else want  # noqa: E731
        slots = (f"the output of {what}",)
        wrong = lambda: mistakes(none)  # noqa: E731
    return Case(
        call,
        what,
        expected=expected,
        mistakes=wrong,
        requires=(_fresh_keys(target),) if train else (),
        probes=probes,
        slots=slots,
        letters=("the shape of x",) * len(slots),
        precheck=_sites(target, train, rate, sites, masks),
    )


def _per_step(mistakes, masks: _Masks) -> dict[str, tuple[torch.Tensor, ...]]:
    """Each mistake's value at every call, with that call's masks (none before an answer has
    recorded some: nothing to compare then)."""
    per_step = [mistakes(m) for m in masks.steps]
    if not per_step:
        return {}
    return {text: tuple(values[text] for values in per_step) for text in per_step[0]}


_NNX = {"inputs": {"args[0]": "x"}, "atol": ATOL, "rtol": RTOL, "failure_hint": _hint()}
"""What every NNX class's cases share: the input is x, compared to float32's rounding, and an
exception names JAX's immutable arrays (unless a class says else)."""


# --- exercise 1: dropout -------------------------------------------------------------------------


def _dropout_judge(x: torch.Tensor, rate: float, runs) -> Callable[[Observation, Any], None]:
    """Dropout's values are random: judged by their properties. Every run's output must have
    x's shape; ``deterministic=True`` (or rate 0) returns x; otherwise each element is 0 or
    x / (1 - rate), kept with probability 1 - rate, the same key giving the same output and
    another key another."""

    def judge(obs: Observation, ask: Any) -> None:
        outs = obs.value if isinstance(obs.value, tuple) else ()
        if len(outs) != len(runs) or not all(isinstance(o, torch.Tensor) for o in outs):
            raise GradingError(
                f"dropout should return one array, got {obs.value!r}.", mistake="not-a-tensor"
            )
        for out in outs:
            if out.shape != x.shape:
                raise GradingError(
                    f"its output has shape {tuple(out.shape)}, but x has {tuple(x.shape)}: "
                    "dropout keeps the shape.",
                    mistake="shape",
                )
            if out.dtype != x.dtype:
                raise GradingError(
                    f"its output has dtype {out.dtype}; keep x's ({x.dtype}).", mistake="dtype"
                )
        for out, (_, deterministic) in zip(outs, runs, strict=True):
            if (deterministic or rate == 0.0) and not torch.equal(out, x):
                raise GradingError(
                    Mistake(
                        "active-when-deterministic",
                        "with deterministic=True (or rate = 0) dropout must return x unchanged: "
                        "it is what evaluation uses. Check `deterministic` before drawing a mask.",
                    )
                )
        active = [o for o, (_, d) in zip(outs, runs, strict=True) if not d]
        if rate == 0.0 or not active:
            return
        if rate >= 1.0:
            for out in active:
                if out.isnan().any() or (out != 0).any():
                    raise GradingError(
                        Mistake(
                            "nan-at-rate-one",
                            "with rate = 1 every element is dropped: the output is all zeros (no "
                            "NaN from dividing by 1 - rate = 0: return zeros for rate 1).",
                        )
                    )
            return
        first = outs[0]
        kept = first != 0
        if not close(first[kept], x[kept] / (1 - rate), 1e-6, 1e-5):
            for wrong, text in (
                (x, Mistake("not-rescaled", "the kept elements are not rescaled: divide them "
                    "by 1 - rate, the probability of keeping, so that each element's expected "
                    "value stays x.")),
                (x / rate, Mistake("divided-by-rate", "the kept elements are divided by rate; "
                           "divide them by 1 - rate, the probability of keeping.")),
                (x * (1 - rate), Mistake("multiplied-by-keep", "the kept elements are "
                                 "multiplied by 1 - rate; divide by it (inverted dropout scales "
                                 "at training time).")),
            ):  # fmt: skip
                if kept.any() and close(first[kept], wrong[kept], 1e-6, 1e-5):
                    raise GradingError(text)
            raise GradingError(
                Mistake(
                    "wrong-scale",
                    "an element that is kept should equal x / (1 - rate) and a dropped one 0: "
                    + mismatch("the kept elements", first[kept], x[kept] / (1 - rate), 1e-6, 1e-5),
                )
            )
        if kept.numel() >= 16 and (bool(kept.all()) or not bool(kept.any())):
            for out in active[1:]:
                whole = (out != 0).all() or (out == 0).all()
                if not bool(whole):
                    break
            else:
                raise GradingError(
                    Mistake(
                        "one-draw-for-all",
                        "every call keeps the whole array or drops all of it: the mask is one "
                        "random draw for the whole array, not one per element. Give "
                        "jax.random.bernoulli the shape of x, so that each element is kept or "
                        "dropped on its own (with probability 1 - rate of keeping).",
                    )
                )
        share = kept.double().mean().item()
        if abs(share - rate) < abs(share - (1 - rate)) and abs(share - (1 - rate)) > 0.05:
            raise GradingError(
                Mistake(
                    "keeps-with-probability-rate",
                    f"{share:.0%} of the elements were kept at rate {rate:g}: the rate is the "
                    "probability of dropping. jax.random.bernoulli(key, p) is True with "
                    "probability p; True should mean kept, so p = 1 - rate.",
                )
            )
        if abs(share - (1 - rate)) > 0.05:
            raise GradingError(
                Mistake(
                    "wrong-keep-share",
                    f"{share:.0%} of the elements were kept at rate {rate:g}; expected about "
                    f"{1 - rate:.0%}.",
                )
            )
        again, other = outs[1], outs[2]  # runs: key 7, key 7 again, key 8
        if not torch.equal(again, first):
            raise GradingError(
                Mistake(
                    "not-from-key",
                    "the same key gave two different masks: take all the randomness from `key` (no "
                    "NumPy or Python random numbers), so that a step can be repeated.",
                )
            )
        if torch.equal(other, first):
            raise GradingError(
                Mistake(
                    "ignores-key",
                    "two different keys dropped the same elements: the mask must come from `key` "
                    "(jax.random.bernoulli(key, ...)); a fixed key inside the function drops the "
                    "same positions at every site and step.",
                )
            )

    return judge


def _dropout_case(shape: tuple[int, ...], rate: float, seed: int) -> Case:
    x = _float32(*shape, seed=seed)
    x = torch.where(x == 0, torch.ones_like(x), x)  # no zeros: a 0 in the output was dropped
    runs = ((7, False), (7, False), (8, False), (7, True))  # the judge reads them in this order
    call = Call(
        "dropout",
        "jax_dropout",
        args=(x,),
        kwargs={"rate": rate},
        scenario="jax",
        options={"setup": "function", "runs": runs},
    )
    what = f"dropout(x, rate={rate:g}, deterministic=..., key=...) with x of shape {shape}"
    return Case(call, what, judge=_dropout_judge(x, rate, runs))


def _dropout_cases(thorough: bool) -> Iterator[Case]:
    yield _dropout_case((64, 64), 0.25, seed=10_010)
    yield _dropout_case((2, 5, 8), 0.0, seed=10_020)
    if not thorough:
        return
    yield _dropout_case((2, 16, 32), 0.5, seed=10_030)
    yield _dropout_case((64, 64), 0.1, seed=10_040)
    yield _dropout_case((2, 5, 8), 1.0, seed=10_050)


check_jax_dropout = runner.register_given(
    1,
    "def dropout(x, rate, *, deterministic, key):",
    _dropout_cases,
    name="jax_dropout",
    failure_hint=_hint(),
)


# --- exercise 2: load_linear ---------------------------------------------------------------------


def _linear_hint(d_in: int, d_out: int) -> Callable[[Failure], str | None]:
    def hint(failure: Failure) -> str | None:
        if "broadcast" in failure.message or "shape" in failure.message.lower():
            return Mistake(
                "kernel-not-transposed",
                f"nn.Linear's weight is (out, in) = ({d_out}, {d_in}); nnx.Linear's kernel is "
                f"(in, out) = ({d_in}, {d_out}), because it computes x @ kernel: transpose it.",
            )
        if "NoneType" in failure.message:
            return Mistake(
                "bias-none-not-handled",
                "bias may be None (nn.Linear(bias=False)): then the layer has no bias to fill.",
            )
        return None

    return _hint(hint)


def _linear_not_changed(obs: Observation, ask: Any) -> str | None:
    before = obs.info.get("before")
    if before and close(obs.value[0], before[0]):
        return Mistake(
            "layer-not-changed",
            "the layer's kernel is what nnx.Linear started with: write into the given layer, "
            "layer.kernel[...] = ... (an NNX module is changed in place; returning a new array "
            "or a new layer leaves it as it was).",
        )
    return None


def _linear_case(d_in: int, d_out: int, bias: bool, seed: int) -> Case:
    weight = _float32(d_out, d_in, seed=seed)
    b = _float32(d_out, seed=seed + 1) if bias else None
    call = Call(
        "load_linear",
        "jax_load_linear",
        args=(weight, b),
        scenario="jax",
        options={"setup": "linear", "linear": (d_in, d_out, bias)},
        seed=seed,
    )
    what = f"load_linear(nnx.Linear({d_in}, {d_out}), weight {tuple(weight.shape)}, " + (
        f"bias ({d_out},))" if bias else "bias None)"
    )
    mistakes = {
        Mistake(
            "kernel-reshaped",
            "the kernel is weight reshaped to (in, out), which mixes its entries: nnx.Linear's "
            "kernel is weight's transpose, weight.T.",
        ): (weight.reshape(d_in, d_out), b)
    }
    if d_in == d_out:
        mistakes[
            Mistake(
                "kernel-not-transposed",
                "the kernel holds weight as it is: nn.Linear computes x @ weight.T, nnx.Linear "
                "x @ kernel, so the kernel must be weight.T (with a square matrix nothing fails, "
                "the values are just wrong).",
            )
        ] = (weight, b)
    return Case(
        call,
        what,
        expected=(weight.T.contiguous(), b),
        mistakes=mistakes,
        shape_hints=(
            {
                (d_out, d_in): Mistake(
                    "kernel-not-transposed",
                    "That is nn.Linear's layout, (out, in): nnx.Linear's kernel is its "
                    "transpose, (in, out).",
                )
            },
        ),
        failure_hint=_linear_hint(d_in, d_out),
    )


def _linear_cases(thorough: bool) -> Iterator[Case]:
    # The layer sizes of the module exercises (8, 16, 32): nnx.Linear's initialiser compiles a
    # program for every new kernel shape (about 0.3 s each in a fresh grading kernel).
    yield _linear_case(16, 8, True, seed=10_110)
    yield _linear_case(8, 8, True, seed=10_120)
    if not thorough:
        return
    yield _linear_case(8, 16, True, seed=10_130)
    yield _linear_case(16, 16, True, seed=10_140)
    yield _linear_case(32, 16, False, seed=10_150)


def _linear_variables(obs: Observation, ask: Any) -> str | None:
    """Once the values are right: the kernel and bias are still the layer's own nnx.Param,
    written in place."""
    for name, what in (obs.info.get("variables") or {}).items():
        if what == "same":
            continue
        if what == "new Param":
            return Mistake(
                "variable-replaced",
                f"the values are right, but layer.{name} is a new nnx.Param that replaced the "
                "layer's own: the exercise copies the weights into the variable the layer "
                f"already has, in place (layer.{name}[...] = ...), so that anything holding "
                "that variable (an optimiser's state, a tied layer) sees the new values.",
            )
        return Mistake(
            "not-a-parameter",
            f"the values are right, but layer.{name} is now {what}, no longer an "
            "nnx.Param: nnx.state(layer, nnx.Param) no longer lists it, so no optimiser would "
            f"train it. Write into the parameter in place (layer.{name}[...] = ...) instead of "
            "replacing it.",
        )
    return None


check_jax_load_linear = runner.register_given(
    2,
    "def load_linear(layer, weight, bias):",
    _linear_cases,
    name="jax_load_linear",
    probes=(_linear_not_changed,),
    requires=(_linear_variables,),
    slots=("the layer's kernel after the call", "the layer's bias after the call"),
    letters=("(in, out)", "(out,)"),
    atol=0.0,
    rtol=0.0,
)


# --- exercise 3: LayerNorm -----------------------------------------------------------------------

_LN_MISTAKES = {
    "flax eps": Mistake(
        "flax-eps",
        "epsilon is 1e-6, Flax's default (nnx.LayerNorm's); this LayerNorm must match "
        "PyTorch's nn.LayerNorm, whose default is 1e-5.",
    ),
    "unbiased": Mistake(
        "unbiased",
        "the variance divides by D - 1 (unbiased); LayerNorm divides by D: use the mean "
        "of the squared deviations (jnp.var's default ddof=0).",
    ),
    "no eps": Mistake(
        "no-eps",
        "epsilon is missing: add it to the variance inside the square root.",
    ),
    "eps outside": Mistake(
        "eps-outside",
        "epsilon is added to the standard deviation; it goes inside the square root, "
        "added to the variance.",
    ),
    "no affine": Mistake(
        "no-affine",
        "the output is normalised but scale and bias are not applied: multiply by "
        "self.scale and add self.bias.",
    ),
    "eps argument ignored": Mistake(
        "eps-argument-ignored",
        "LayerNorm(D, epsilon=...) still uses 1e-5: store the epsilon it is "
        "given (None only means PyTorch's default).",
    ),
}


_EPS_WAYS = ("flax eps", "eps argument ignored")  # the first for the default, the second else


def _ln_cancellation(obs: Observation, ask: Any) -> str | None:
    return Mistake(
        "variance-cancellation",
        "right on the earlier inputs but not on x with a mean of 300: the variance computed as "
        "mean(x²) - mean(x)² subtracts two numbers near 90,000, and float32 keeps about 7 "
        "digits, so the variance (about 1) is lost. Subtract the mean first, then average the "
        "squares.",
    )


def _ln_case(shape, seed: int, epsilon: float | None, scale: float = 1.0, shift: float = 0.0):
    D = shape[-1]
    x = _float32(*shape, seed=seed) * scale + shift
    torch_norm = nn.LayerNorm(D, eps=TORCH_EPS if epsilon is None else epsilon)
    state = _randomised(torch_norm, seed)
    eps = torch_norm.eps
    call = Call(
        "LayerNorm",
        "jax_layer_norm",
        args=(x,),
        init=((D,), {} if epsilon is None else {"epsilon": epsilon}),
        state=state,
        scenario="jax",
        options={"setup": "module", "layout": "layer_norm", "steps": 1, "plain_call": True},
        seed=seed,
    )
    made = f"LayerNorm({D})" if epsilon is None else f"LayerNorm({D}, epsilon={epsilon:g})"
    what = f"{made} with PyTorch's weights, on x of shape {shape}"
    if scale != 1.0:
        what += f" with a spread of {scale:g}"
    if shift:
        what += f" and a mean of {shift:g}"
    return Case(
        call,
        what,
        reference=torch_norm,
        mistakes=lambda: {
            text: _layer_norm(x, state["weight"], state["bias"], eps, way)
            for way, text in _LN_MISTAKES.items()
            if (way == "eps argument ignored") == (epsilon is not None) or way not in _EPS_WAYS
        },
        probes=(_ln_cancellation,) if shift else (),
        atol=2e-4 if shift else ATOL if scale >= 1.0 else 1e-4,  # float32 near 300: ulp 3e-5
    )


def _ln_cases(thorough: bool) -> Iterator[Case]:
    # Three shapes, two of them the blocks': run eagerly, JAX compiles each of the norm's eight
    # operations for every new shape (five shapes compiled 43 programs, three compile 24).
    yield _ln_case((2, 5, 16), seed=10_210, epsilon=None)
    yield _ln_case((2, 2, 3, 8), seed=10_220, epsilon=None, scale=0.003)  # epsilon shows; 4 axes
    yield _ln_case((3, 4, 8), seed=10_230, epsilon=1e-3, scale=0.05)
    if not thorough:
        return
    yield _ln_case((2, 5, 16), seed=10_240, epsilon=None, scale=0.002)
    yield _ln_case((2, 5, 16), seed=10_250, epsilon=None, shift=300.0)
    yield _ln_case((2, 2, 3, 8), seed=10_260, epsilon=0.01, scale=0.1)


# Run with `module(x)`: LayerNorm has no `deterministic` argument.
check_jax_layer_norm = runner.register_given(
    3,
    "class LayerNorm(nnx.Module):",
    _ln_cases,
    name="jax_layer_norm",
    wrong_kind="write `class LayerNorm(nnx.Module)` with __init__(self, num_features, *, "
    "epsilon=..., rngs=None) and __call__(self, x).",
    **_NNX,
    slots=("its output",),
    letters=("the shape of x",),
    module=_module_spec("LayerNorm", ("scale", "bias"), given=False),
)


# --- exercise 4: FeedForward ---------------------------------------------------------------------

_FF_MISTAKES = {
    "gelu": Mistake(
        "gelu",
        "it uses GELU (jax.nn.gelu); PyTorch's nn.TransformerEncoderLayer uses ReLU by default: "
        "jax.nn.relu.",
    ),
    "exact gelu": Mistake(
        "gelu-exact",
        "it uses GELU (the exact form, approximate=False); PyTorch's nn.TransformerEncoderLayer "
        "uses ReLU by default: jax.nn.relu.",
    ),
    "no activation": Mistake(
        "no-activation",
        "there is no activation between linear1 and linear2: without jax.nn.relu "
        "the two layers are one linear map.",
    ),
}


def _ff_case(shape, d_ff: int, p: float, train: bool, seed: int) -> Case:
    D = shape[-1]
    ff = _seeded(
        seed,
        lambda: nn.ModuleDict({"linear1": nn.Linear(D, d_ff), "linear2": nn.Linear(d_ff, D)}),
    )
    state = _randomised(ff, seed)
    x = _float32(*shape, seed=seed + 1)
    return _steps_case(
        f"FeedForward({D}, {d_ff}, {p:g}) with PyTorch's weights",
        _module_call("FeedForward", "feed_forward", (D, d_ff, p), x, state, train, seed),
        [((*shape[:-1], d_ff), "the hidden units after the activation")],
        lambda m, way: _feed_forward(state, x, m, p, way=way),
        _FF_MISTAKES,
    )


def _ff_cases(thorough: bool) -> Iterator[Case]:
    # Few distinct layer sizes: each new size compiles JAX's initialisers anew (about a second
    # on a busy 2-core machine), and the block's cases reuse these sizes.
    yield _ff_case((2, 5, 8), 16, 0.1, train=False, seed=10_310)
    yield _ff_case((2, 5, 8), 16, 0.3, train=True, seed=10_320)
    if not thorough:
        return
    yield _ff_case((2, 5, 16), 32, 0.0, train=False, seed=10_330)
    yield _ff_case((5, 8), 16, 0.2, train=False, seed=10_340)  # no batch axis
    yield _ff_case((3, 4, 8), 16, 0.5, train=True, seed=10_350)


check_jax_feed_forward = runner.register_given(
    4,
    "class FeedForward(nnx.Module):",
    _ff_cases,
    name="jax_feed_forward",
    **_NNX,
    module=_module_spec("FeedForward", _parameters("linear1", "linear2")),
)


# --- exercise 5: MultiHeadAttention --------------------------------------------------------------

_MHA_MISTAKES = {
    "softmax over queries": Mistake(
        "softmax-over-queries",
        "the softmax runs over the queries (axis -2): each query's weights "
        "over the keys must sum to 1, so take it over the last axis (axis=-1).",
    ),
    "sqrt(D)": Mistake(
        "sqrt-d",
        "the scores are divided by sqrt(D), the model width; divide by sqrt(d_head), the "
        "width of one head's queries and keys.",
    ),
    "no scale": Mistake(
        "no-scale",
        "the scores are not scaled: divide q @ k^T by sqrt(d_head).",
    ),
    "mask inverted": Mistake(
        "mask-inverted",
        "the padding mask is read the PyTorch way round (True = padding). Here, as "
        "in Flax, True marks a real token that may be attended to: keep the scores where the mask "
        "is True.",
    ),
    "mask ignored": Mistake(
        "mask-ignored",
        "the padding mask is not applied: padded keys must get no weight (set their "
        "scores to -inf before the softmax, e.g. with jnp.where).",
    ),
    "split without transpose": Mistake(
        "split-without-transpose",
        "the heads are split by reshaping (B, L, D) straight to (B, H, "
        "L, d_head), which mixes positions and features: reshape to (B, L, H, d_head), then move "
        "the head axis forward (transpose(0, 2, 1, 3)).",
    ),
    "merge without transpose": Mistake(
        "merge-without-transpose",
        "the heads are merged by reshaping (B, H, L, d_head) straight to "
        "(B, L, D): move the head axis back first (transpose(0, 2, 1, 3)), then reshape.",
    ),
}


def _query_rows(keep: torch.Tensor | None) -> Callable[[Observation, Any], str | None]:
    """A probe for an output with NaN at padded positions' rows: the mask hid the queries."""

    def probe(obs: Observation, ask: Any) -> str | None:
        values = obs.value if isinstance(obs.value, tuple) else (obs.value,)
        if keep is None or not all(isinstance(v, torch.Tensor) for v in values):
            return None
        nan_rows = [v.isnan().any(-1) for v in values if v.shape[:2] == keep.shape]
        if not nan_rows or not any(bool(r.any()) for r in nan_rows):
            return None
        if all(bool((r == ~keep).all()) for r in nan_rows):
            return _MASKED_QUERIES
        return None

    return probe


_MASKED_QUERIES = Mistake(
    "mask-hides-queries",
    "the output is NaN at the padded positions: the padding mask is laid along the queries "
    "(rows of the scores) instead of the keys (columns), so a padded query's whole row is -inf "
    "and its softmax divides 0 by 0. A padded token may still ask (its row is kept); what no "
    "query may do is attend to it: shape the mask (B, 1, 1, L) so that it hides key columns.",
)


def _attention_hint(failure: Failure) -> str | None:
    if "broadcast" in failure.message.lower():
        return Mistake(
            "mask-shape",
            "the padding mask (B, L) does not line up with the scores (B, H, L_q, L_k): give "
            "it an axis for the heads and one for the queries, so that it hides key columns "
            "in every head and every row.",
        )
    if "reshape" in failure.message or "cannot reshape" in failure.message.lower():
        return (
            "reshape (B, L, D) to (B, L, H, d_head) with H = self.num_heads and d_head = "
            "self.d_head, then transpose to (B, H, L, d_head)."
        )
    return None


def _mha_case(B, L, D, H, p, lengths, train: bool, seed: int) -> Case:
    mha = _seeded(seed, lambda: nn.MultiheadAttention(D, H, dropout=p, batch_first=True))
    state = _randomised(mha, seed)
    x, keep = _float32(B, L, D, seed=seed + 1), _keep(lengths, L)
    padding = None if keep is None else ~keep  # PyTorch's way round: True = padding
    return _steps_case(
        f"MultiHeadAttention({D}, {H}, {p:g}) with PyTorch's weights",
        _module_call("MultiHeadAttention", "attention", (D, H, p), x, state, train, seed, keep),
        [((B, H, L, L), "the attention weights")],
        lambda m, way: _attention(state, x, keep, H, m, p, way=way),
        _MHA_MISTAKES,
        want=None if train else _own(mha, x, x, x, key_padding_mask=padding)[0],
    )


def _mha_cases(thorough: bool) -> Iterator[Case]:
    yield _mha_case(2, 5, 16, 4, 0.1, None, train=False, seed=10_410)
    yield _mha_case(2, 5, 16, 4, 0.1, (3, 4), train=False, seed=10_420)
    yield _mha_case(3, 4, 8, 2, 0.2, (4, 2, 3), train=True, seed=10_430)
    if not thorough:
        return
    # the shapes of the cases above, with eight heads and with one: each new (B, L, D) adds
    # about eight programs to the fifteen a new head count compiles
    yield _mha_case(2, 5, 16, 8, 0.0, (5, 1), train=False, seed=10_440)
    yield _mha_case(3, 4, 8, 1, 0.1, None, train=False, seed=10_450)  # one head
    yield _mha_case(2, 5, 16, 4, 0.5, (2, 5), train=True, seed=10_460)


check_jax_attention = runner.register_given(
    5,
    "class MultiHeadAttention(nnx.Module):",
    _mha_cases,
    name="jax_attention",
    **_NNX | {"failure_hint": _hint(_attention_hint)},
    module=_module_spec("MultiHeadAttention", _parameters("query", "key", "value", "out")),
)


# --- exercise 6: EncoderBlock --------------------------------------------------------------------

_BLOCK_MISTAKES = {
    "pre-norm": Mistake(
        "pre-norm",
        "the block normalises before each sub-layer (pre-norm, norm_first=True); "
        "nn.TransformerEncoderLayer's default is post-norm: x = norm1(x + attention), then "
        "x = norm2(x + feed-forward).",
    ),
    "no residual (attention)": Mistake(
        "no-residual-attention",
        "the attention's output is not added to its input before norm1: "
        "the residual connection is norm1(x + dropout(attention(x))).",
    ),
    "no residual (feed-forward)": Mistake(
        "no-residual-feed-forward",
        "the feed-forward network's output is not added to its input "
        "before norm2: norm2(x + dropout(feed_forward(x))).",
    ),
    "norm1 twice": Mistake(
        "norm1-twice",
        "norm1 is used after both sub-layers; the second needs norm2 (its own weights).",
    ),
    "mask inverted": Mistake(
        "mask-inverted",
        "the block hands the attention the inverted padding mask; it already "
        "means True = real token, as MultiHeadAttention takes it: pass it on unchanged.",
    ),
    "mask ignored": Mistake(
        "mask-ignored",
        "the padding mask does not reach the attention: pass padding_mask on to self.attention.",
    ),
    "flax eps": Mistake(
        "flax-eps",
        "the norms use epsilon 1e-6 (Flax's default); nn.TransformerEncoderLayer's norms use 1e-5.",
    ),
    "dropout on the sum": Mistake(
        "dropout-on-the-sum",
        "dropout is applied to the residual sum; it belongs on the "
        "sub-layer's output, before the sum: norm(x + dropout(sublayer(x))).",
    ),
}


def _block_case(B, L, D, H, d_ff, p, lengths, train: bool, seed: int, small=False) -> Case:
    """``small``: activations of about 0.003 (small weights and input), where the norms'
    epsilon shows."""
    layer = _seeded(seed, lambda: nn.TransformerEncoderLayer(D, H, d_ff, p, batch_first=True))
    state = _randomised(layer, seed)
    x, keep = _float32(B, L, D, seed=seed + 1), _keep(lengths, L)
    if small:
        state = {k: v if k.startswith("norm") else 0.05 * v for k, v in state.items()}
        layer.load_state_dict(state)
        x = 0.003 * x
    padding = None if keep is None else ~keep  # PyTorch's way round: True = padding
    sites = [
        ((B, H, L, L), "the attention weights"),
        ((B, L, D), "the attention's output, before the residual sum"),
        ((B, L, d_ff), "the feed-forward network's hidden units"),
        ((B, L, D), "the feed-forward network's output, before the residual sum"),
    ]
    return _steps_case(
        f"EncoderBlock({D}, {H}, {d_ff}, {p:g}) with the weights of nn.TransformerEncoderLayer",
        _module_call("EncoderBlock", "encoder_block", (D, H, d_ff, p), x, state, train, seed, keep),
        sites,
        lambda m, way: _block(state, x, keep, H, m, p, way=way),
        _BLOCK_MISTAKES,
        want=None if train else _own(layer, x, src_key_padding_mask=padding),
    )


def _block_cases(thorough: bool) -> Iterator[Case]:
    yield _block_case(2, 5, 16, 4, 32, 0.1, None, train=False, seed=10_510)
    yield _block_case(2, 5, 16, 4, 32, 0.1, (4, 3), train=False, seed=10_520)
    yield _block_case(3, 4, 8, 2, 16, 0.2, (4, 3, 2), train=True, seed=10_530)
    if not thorough:
        return
    # the attention's shapes (their programs are compiled by then; a block of new shapes,
    # B = 1 and 2 dimensions a head, compiled 31 more)
    yield _block_case(2, 5, 16, 8, 32, 0.0, (5, 1), train=False, seed=10_540)
    yield _block_case(2, 5, 16, 4, 32, 0.3, None, train=True, seed=10_550)
    yield _block_case(2, 5, 16, 4, 32, 0.1, (5, 2), train=False, seed=10_560, small=True)


_BLOCK_PARAMETERS = (
    _parameters(*(f"attention.{n}" for n in ("query", "key", "value", "out")))
    + _parameters("feed_forward.linear1", "feed_forward.linear2")
    + _parameters("norm1", "norm2", names=("scale", "bias"))
)

check_jax_encoder_block = runner.register_given(
    6,
    "class EncoderBlock(nnx.Module):",
    _block_cases,
    name="jax_encoder_block",
    **_NNX,
    module=_module_spec("EncoderBlock", _BLOCK_PARAMETERS),
)


# =================================================================================================
# Exercise 7: the training step.
#
# Checks of notebook 10's training step (exercise 7): ``make_optimizer`` and ``train_step``,
# judged against PyTorch's ``torch.optim.AdamW`` on the same weights and batches.
#
# The grader never imports JAX. The kernel's side (the ``"jax.train_step"`` scenario) builds the
# course's reference ``EncoderBlock`` (``encoder_lib.jax_encoder``, so that a mistake in exercise 6
# costs nothing here), writes PyTorch's weights into it, asks the student's ``make_optimizer`` for
# an optimiser, compiles the student's ``train_step`` with ``nnx.jit`` (as the notebook's demo
# does) and calls it on three batches in a row. After each call it sends back, as PyTorch state
# dicts, the loss, the gradients ``train_step`` returned and the block's weights.
#
# The grader replays the same three steps with ``nn.TransformerEncoderLayer`` (evaluation mode: no
# dropout, as ``deterministic=True``), ``F.mse_loss`` and ``torch.optim.AdamW``, and compares step
# by step: loss, gradients, weights. Each named mistake is the same replay with one thing changed:
# L2 regularisation instead of decoupled weight decay (``torch.optim.Adam(weight_decay=...)``,
# what ``optax.chain(optax.add_decayed_weights(wd), optax.adam(lr))`` computes), the betas
# swapped, the learning rate and the weight decay swapped, no weight decay (or optax's default,
# 1e-4, which three steps cannot tell from none), and a fresh optimiser state at every step. A
# gradient taken with respect to the input instead of the model never reaches the weights'
# structure: its exception is named.
#
# The key projection's bias is left out of the weights' comparison: softmax ignores a constant
# added to a row of scores, so its gradient is zero in exact arithmetic and rounding alone decides
# the sign of its Adam step (it is still compared as a gradient, where both sides give ~1e-9).
# =================================================================================================


_SCENARIO = "jax.train_step"
_SIZES = (16, 4, 32)  # D, H, d_ff: the sizes the block's checks use (their programs are cached)
_B, _L = 2, 5
_STEPS = 3
LOSS_RTOL = 1e-5
GRAD_ATOL, GRAD_RTOL = 1e-6, 1e-4
PARAM_ATOL, PARAM_RTOL = 1e-5, 1e-4
"""float32 on both sides: the gradients agree to about 3e-8 and the weights after three steps
to about 2e-7 (measured); the smallest named mistake moves a weight by about 5e-4."""


# --- the kernel's side: the student's step, compiled, three times --------------------------------


@observe.scenario(_SCENARIO)
def _run_train_step(lookup: Callable[[str], Any], call: Call) -> Observation:
    """Build the reference block with ``call.state``, the student's optimiser
    (``make_optimizer(block, lr, betas, weight_decay)``), and call ``nnx.jit(train_step)`` on
    each batch; record after each call the loss, the gradients and the weights (PyTorch's
    names)."""
    from flax import nnx

    from encoder_lib import jax_bridge
    from encoder_lib.jax_encoder import EncoderBlock

    target = observe.lookup_target(lookup, call.target)
    obs = Observation(info={"target": observe.kind_of(target)})
    if not callable(target) or isinstance(target, type):
        return obs
    make_optimizer = observe.lookup_target(lookup, "make_optimizer")
    options = call.options
    steps: list[dict[str, Any]] = []
    phase = "construct"
    with observe.student_mode(call.exercise, call.seed) as seen:
        try:
            D, H, d_ff = options["sizes"]
            block = EncoderBlock(D, H, d_ff, 0.1, rngs=nnx.Rngs(params=0, dropout=1))
            jax_bridge.block_from_torch(block, call.state)
            optimizer = make_optimizer(block, *options["hyper"])
            step = _jitted(target)
            phase = "call"
            for x, y in options["batches"]:
                loss, grads = _pair(
                    step(block, optimizer, jax_bridge.to_jax(x), jax_bridge.to_jax(y))
                )
                steps.append(
                    {
                        "loss": _loss(loss),
                        "grads": _as_torch_state(block, grads),
                        "parameters": jax_bridge.block_to_torch(block),
                    }
                )
        except Exception as error:  # anything the student's code raised is observed
            obs.failure = observe.failure_of(error, phase, seen)
            if obs.failure.kind == "stub" and obs.failure.function == "make_optimizer":
                obs.failure.function = None  # the same answer cell: this exercise's own stub
        if seen and obs.failure is None:
            obs.failure = observe.seen_failure(seen[0], phase)
    obs.info["steps"] = steps
    return obs


_JITTED: list[tuple[Any, Any]] = []
"""The last answer compiled, and its ``nnx.jit`` wrapper: the thorough check runs the visible
case again, and a wrapper kept finds the program it compiled for it (same shapes, same
optimiser) instead of tracing and compiling it anew (about 2 s)."""


def _jitted(target: Any) -> Any:
    from flax import nnx

    if not _JITTED or _JITTED[0][0] is not target:
        _JITTED[:] = [(target, nnx.jit(target))]
    return _JITTED[0][1]


def _pair(value: Any) -> tuple[Any, Any]:
    if isinstance(value, tuple | list) and len(value) == 2:
        return value[0], value[1]
    return value, None


def _loss(loss: Any) -> Any:
    """The loss as a Python float when it is one number; else what it is, in words."""
    import numpy as np

    try:
        array = np.asarray(loss)
    except Exception:
        return f"a {type(loss).__name__}"
    if array.size != 1 or not np.issubdtype(array.dtype, np.floating):
        return f"an array of shape {tuple(array.shape)} and dtype {array.dtype}"
    return float(array.reshape(()))


def _as_torch_state(block: Any, grads: Any) -> dict[str, torch.Tensor] | str:
    """The gradients as a PyTorch state dict (what ``block_to_torch`` would give for a block
    holding them), or a sentence saying what they are instead."""
    from flax import nnx

    from encoder_lib import jax_bridge

    if grads is None:
        return "nothing (train_step did not return a pair (loss, grads))"
    holder = nnx.clone(block)
    try:
        nnx.update(holder, grads)
        return jax_bridge.block_to_torch(holder)
    except Exception:
        shape = getattr(grads, "shape", None)
        if shape is not None:
            return f"an array of shape {tuple(shape)}"
        return f"a {type(grads).__name__} that is not the model's parameters"


# --- the grader's side: PyTorch's AdamW, with one switch per mistake -----------------------------


class _Adam:
    """``torch.optim.AdamW`` (``decoupled=False``: ``torch.optim.Adam``) on CPU tensors, step for
    step: both classes' ``step`` calls ``torch.optim.adam.adam``, PyTorch's functional Adam,
    which this calls with the state and options they would give it (single-tensor path, as
    they take on CPU; amsgrad off; eps 1e-8). Why not the classes: building the first
    ``torch.optim`` optimiser of a process imports ``torch._dynamo`` and sympy, about 70 MB and
    a second (measured 2026-11-29), and the visible check of exercise 7 judges in the student's
    kernel (notebook 08's ``encoder_lib.pretraining.AdamW`` avoids it for the same reason).
    The course's tests check that both give identical weights."""

    def __init__(self, params, lr, betas, weight_decay, decoupled: bool = True):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.weight_decay, self.decoupled = lr, betas, weight_decay, decoupled
        self.exp_avgs = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p) for p in self.params]
        self.steps = [torch.tensor(0.0) for _ in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        from torch.optim.adam import adam

        adam(
            self.params,
            [p.grad for p in self.params],
            self.exp_avgs,
            self.exp_avg_sqs,
            [],
            self.steps,
            foreach=False,
            decoupled_weight_decay=self.decoupled,
            amsgrad=False,
            beta1=self.betas[0],
            beta2=self.betas[1],
            lr=self.lr,
            weight_decay=self.weight_decay,
            eps=1e-8,
            maximize=False,
        )


def _replay(
    state: Mapping[str, torch.Tensor],
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    way: str = "",
) -> list[dict[str, Any]]:
    """The steps as PyTorch takes them: per step the loss, the gradients and the weights after.
    ``way`` names a mistake."""
    D, H, d_ff = _SIZES
    with torch.random.fork_rng(devices=[]):
        layer = nn.TransformerEncoderLayer(D, H, d_ff, 0.1, batch_first=True)
    layer.load_state_dict(state)
    layer.eval()  # deterministic=True: no dropout

    def optimiser() -> _Adam:
        if way == "l2":  # torch.optim.Adam(weight_decay=...)
            return _Adam(layer.parameters(), lr, betas, weight_decay, decoupled=False)
        b, wd, rate = betas, weight_decay, lr
        if way == "betas swapped":
            b = (betas[1], betas[0])
        elif way == "lr and wd swapped":
            rate, wd = weight_decay, lr
        elif way == "no decay":
            wd = 0.0
        return _Adam(layer.parameters(), rate, b, wd)

    opt = optimiser()
    steps = []
    for x, y in batches:
        if way == "fresh state":
            opt = optimiser()
        opt.zero_grad()
        loss = F.mse_loss(layer(x), y)
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in layer.named_parameters()}
        opt.step()
        after = {n: p.detach().clone() for n, p in layer.named_parameters()}
        steps.append({"loss": loss.item(), "grads": grads, "parameters": after})
    return steps


_MISTAKES = {
    "l2": Mistake(
        "l2-not-decoupled",
        "the weight decay is added to the gradient before Adam (L2 regularisation, what "
        "torch.optim.Adam(weight_decay=...) and optax.chain(optax.add_decayed_weights(wd), "
        "optax.adam(lr)) do), so Adam's scaling shrinks it with the gradient. AdamW decouples "
        "it: the weights are decayed beside Adam's step, by lr * weight_decay * w. optax.adamw "
        "does exactly this.",
    ),
    "betas swapped": Mistake(
        "betas-swapped",
        "the two betas are swapped: b1 (betas[0], about 0.9) is the decay of the gradient's "
        "running mean, b2 (betas[1], close to 1) that of the squared gradient's. The first step "
        "is the same either way; the second shows it.",
    ),
    "lr and wd swapped": Mistake(
        "lr-weight-decay-swapped",
        "the learning rate and the weight decay are swapped: optax.adamw's first argument is "
        "the learning rate, and weight_decay= is the decay.",
    ),
    "no decay": Mistake(
        "weight-decay-not-passed",
        "the weights are not decayed by the weight_decay make_optimizer is given: this is Adam "
        "(optax.adam), or optax.adamw without weight_decay=, whose default, 1e-4, is next to "
        "nothing (torch.optim.AdamW's is 1e-2; neither is this one). Pass "
        "weight_decay=weight_decay on to optax.adamw.",
    ),
    "fresh state": Mistake(
        "state-not-carried",
        "every step starts from a fresh optimiser state: Adam's running means restart at zero "
        "and its step count at 1, so each step is a first step again. The state lives in the "
        "optimiser (nnx.Optimizer keeps it, and optimizer.update(model, grads) advances it); "
        "build it once, in make_optimizer, and update that one at every step.",
    ),
}

_WRONG_ARGUMENT = Mistake(
    "grad-wrong-argument",
    "the gradients are not the model's: value_and_grad differentiates with respect to one "
    "argument (argnums=0, the first, by default), and here it is the input or the target, not "
    "the model. Put the model first in the loss function, loss_fn(model), and differentiate "
    "with respect to it: the gradients then have the model's parameters' structure, which "
    "optimizer.update needs.",
)


def _keep_key_bias(name: str, t: torch.Tensor) -> torch.Tensor:
    """``t`` without the key projection's bias (rows D:2D of ``in_proj_bias``), whose step
    rounding decides (see the module's docstring)."""
    if name != "self_attn.in_proj_bias":
        return t
    D = t.shape[0] // 3
    return torch.cat([t[:D], t[2 * D :]])


def _same_weights(got: Any, want: Mapping[str, torch.Tensor]) -> bool:
    return (
        isinstance(got, Mapping)
        and set(got) == set(want)
        and all(
            close(_keep_key_bias(n, got[n]), _keep_key_bias(n, want[n]), PARAM_ATOL, PARAM_RTOL)
            for n in want
        )
    )


def _judge(state, batches, hyper) -> Callable[[Observation, Any], None]:
    def judge(obs: Observation, ask: Any) -> None:
        steps = obs.info.get("steps") or []
        if len(steps) != len(batches):
            raise GradingError(
                "the grader got no record of the steps: run train_step's cell again.",
                mistake="no-answer",
            )
        right = _replay(state, batches, *hyper)
        for i, (got, want) in enumerate(zip(steps, right, strict=True)):
            which = ("first", "second", "third")[i]
            loss = got["loss"]
            if not isinstance(loss, float):
                raise GradingError(
                    Mistake(
                        "loss-not-a-scalar",
                        f"the loss train_step returns is {loss}: return (loss, grads), the "
                        "loss a single number (the mean over every element), as "
                        "nnx.value_and_grad gives it.",
                    )
                )
            if not math.isclose(loss, want["loss"], rel_tol=LOSS_RTOL, abs_tol=1e-7):
                raise GradingError(
                    Mistake(
                        "mismatch",
                        f"at the {which} step the loss is {loss:.6g}, but the mean squared "
                        "error of model(x, deterministic=True) against y, before the step, is "
                        f"{want['loss']:.6g}.",
                    )
                )
            grads = got["grads"]
            if isinstance(grads, str):
                raise GradingError(
                    Mistake(
                        "grads-not-returned",
                        f"the second value train_step returns is {grads}: return the "
                        "gradients nnx.value_and_grad gave, an nnx.State of the model's "
                        "parameters.",
                    )
                )
            for name, g in want["grads"].items():
                if not close(grads.get(name), g, GRAD_ATOL, GRAD_RTOL):
                    raise GradingError(
                        Mistake(
                            "mismatch",
                            f"at the {which} step, "
                            + vocabulary.mismatch(
                                f"the gradient of the weights PyTorch calls {name}",
                                grads.get(name),
                                g,
                                GRAD_ATOL,
                                GRAD_RTOL,
                            ),
                        )
                    )
            if _same_weights(got["parameters"], want["parameters"]):
                continue
            for way, text in _MISTAKES.items():
                wrong = _replay(state, batches, *hyper, way=way)
                if all(
                    _same_weights(steps[j]["parameters"], wrong[j]["parameters"])
                    for j in range(i + 1)
                ):
                    raise GradingError(text)
            name = next(
                n
                for n, w in want["parameters"].items()
                if not close(
                    _keep_key_bias(n, got["parameters"][n]),
                    _keep_key_bias(n, w),
                    PARAM_ATOL,
                    PARAM_RTOL,
                )
            )
            raise GradingError(
                Mistake(
                    "mismatch",
                    f"the loss and gradients are right, but after the {which} step "
                    + vocabulary.mismatch(
                        f"the weights PyTorch calls {name}",
                        _keep_key_bias(name, got["parameters"][name]),
                        _keep_key_bias(name, want["parameters"][name]),
                        PARAM_ATOL,
                        PARAM_RTOL,
                    )
                    + " torch.optim.AdamW took another step from the same gradients.",
                )
            )

    return judge


def _step_hint(failure: Failure) -> str | None:
    message = failure.message
    if (
        "tuple index out of range" in message
        or "pytree structure" in message.lower()
        or "Custom node type mismatch" in message
        or "Dict key mismatch" in message
    ):
        return _WRONG_ARGUMENT
    if "Concretization" in failure.error or "Concretization" in message:
        return Mistake(
            "not-jittable",
            "train_step runs under nnx.jit, where the loss is an abstract array while it is "
            "traced: no float(...), .item() or Python if on its value inside train_step. "
            "Return the loss as a JAX array.",
        )
    return None


def _case(seed: int, lr: float, betas: tuple[float, float], weight_decay: float) -> Case:
    D, H, d_ff = _SIZES
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = nn.TransformerEncoderLayer(D, H, d_ff, 0.1, batch_first=True)
    state = {n: t.detach().clone() for n, t in layer.state_dict().items()}
    batches = [
        (
            randn(_B, _L, D, seed=seed + 2 * i + 1).to(torch.float32),
            randn(_B, _L, D, seed=seed + 2 * i + 2).to(torch.float32),
        )
        for i in range(_STEPS)
    ]
    hyper = (lr, betas, weight_decay)
    call = Call(
        "train_step",
        "jax_train_step",
        state=state,
        scenario=_SCENARIO,
        options={"sizes": _SIZES, "hyper": hyper, "batches": batches},
        seed=seed,
    )
    what = (
        f"make_optimizer(block, {lr:g}, {betas}, {weight_decay:g}), then nnx.jit(train_step) "
        f"on three batches of shape {(_B, _L, D)}, the block nn.TransformerEncoderLayer({D}, "
        f"{H}, {d_ff})'s weights, compared with torch.optim.AdamW"
    )
    return Case(call, what, judge=_judge(state, batches, hyper))


def _cases(thorough: bool) -> Iterator[Case]:
    yield _case(10_710, 1e-2, (0.9, 0.98), 0.05)
    if thorough:
        yield _case(10_720, 3e-3, (0.8, 0.95), 0.2)


check_jax_train_step = runner.register_given(
    7,
    "def train_step(model, optimizer, x, y):",
    _cases,
    name="jax_train_step",
    failure_hint=_step_hint,
)
