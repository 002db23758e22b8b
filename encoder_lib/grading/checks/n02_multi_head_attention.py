"""Notebook 02: multi-head attention, as data for the runner.

- ``check_split_heads(split_heads)``: ``(B, L, D)`` -> ``(B, H, L, d_head)``, head h holding
  features ``[h * d_head, (h + 1) * d_head)`` of every position.
- ``check_merge_heads(merge_heads)``: ``(B, H, L, d_head)`` -> ``(B, L, D)``, the inverse.
- ``check_multi_head_attention(MultiHeadAttention)``: ``MultiHeadAttention(D, H, dropout=0.0)``,
  ``forward(query, key, value, mask=None)`` -> ``(output (B, L_q, D), weights (B, H, L_q, L_k))``,
  dropout on the attention weights in training mode only.
- ``load_reference_weights(module, reference)``: gives a student's module the reference's weights
  whatever layout its projections use (the notebook's "compare with PyTorch" cell uses it, and
  the check does the same in the student's kernel, preparation ``"multi_head.reference_weights"``).

The catalogue (each mistake has a BUGGY answer in tests/variants/a02_multi_head_attention.py):
heads split or merged with ``view``/``reshape`` and no transpose, interleaved features, the
transpose forgotten, ``view`` on non-contiguous memory; outputs of the wrong shape (weights
averaged over the heads, heads never merged); scores scaled by sqrt(D) or not at all; the output
projection missing; the projections or the inputs mixed up; the mask ignored, reversed or leaking;
the softmax over the queries; the scores returned as weights; dropout missing in training, placed
on the scores, the merged heads or the output, or still active in eval mode; a layout the weights
cannot be loaded into. ``nn.MultiheadAttention``, ``F.multi_head_attention_forward``,
``torch._native_multi_head_attention`` and ``encoder_lib.MultiHeadAttention`` are forbidden.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import encoder_lib

from ..feedback import GradingError, Mistake
from ..kernel import observe
from ..kernel.forbidden import Forbidden
from ..kernel.observe import Call, Failure, Observation
from ..runner import register_given
from ..vocabulary import Case, ModuleSpec, backpropagating, keep_first, randn, reference_mode

__all__ = [
    "check_split_heads",
    "check_merge_heads",
    "check_multi_head_attention",
    "load_reference_weights",
]

_FORBIDDEN = Forbidden(
    torch={
        F.multi_head_attention_forward: "F.multi_head_attention_forward (nn.MultiheadAttention)",
        torch._native_multi_head_attention: "torch._native_multi_head_attention",
    },
    python={
        encoder_lib.MultiHeadAttention: "encoder_lib.attention.MultiHeadAttention",
        nn.MultiheadAttention: "nn.MultiheadAttention",
    },
)

VIEW_HINT = Mistake(
    "view-not-contiguous",
    "`view` only works on memory laid out contiguously, and a transposed tensor is not: use "
    "`reshape`, or `.contiguous().view(...)`.",
)
SHAPE_HINT = (
    "Print the shape after every step: (B, L, D) -> view (B, L, H, d_head) -> transpose "
    "(B, H, L, d_head) -> attention -> transpose back (B, L, H, d_head) -> reshape (B, L, D)."
)
SPLIT_NO_TRANSPOSE = Mistake(
    "split-without-transpose",
    "the features were reshaped straight to (B, H, L, d_head) with view/reshape and no transpose, "
    "so each head mixes the features of several tokens. Split the last dimension first, "
    "view(B, L, H, d_head), then swap the head and sequence dimensions with transpose(1, 2).",
)
SPLIT_INTERLEAVED = Mistake(
    "split-interleaved",
    "head h got the interleaved features h, h + H, h + 2H, ... of the embedding. Head h must get "
    "the consecutive block h * d_head ... (h + 1) * d_head - 1: view(B, L, H, d_head), then "
    "transpose(1, 2).",
)
MERGE_NO_TRANSPOSE = Mistake(
    "merge-without-transpose",
    "the heads were merged with view/reshape straight from (B, H, L, d_head) to (B, L, D), "
    "without transposing back first, so tokens receive each other's features. Transpose to "
    "(B, L, H, d_head) with transpose(1, 2), then reshape to (B, L, D).",
)
MERGE_INTERLEAVED = Mistake(
    "merge-interleaved",
    "the heads were merged into interleaved features (head h at positions h, h + H, ...). Head "
    "h's d_head features must become the consecutive block h * d_head ... (h + 1) * d_head - 1: "
    "transpose(1, 2), then reshape to (B, L, D).",
)
NO_FORWARD = (
    "MultiHeadAttention has no method `forward` (check its spelling and that it is indented "
    "inside the class)."
)
LEAK = Mistake(
    "padding-leaks",
    "padding leaks: your weights give up to {leak:.3g} to keys where the mask is False (True = "
    "may attend). Those keys must get exactly zero weight: set their scores to -inf before the "
    "softmax.",
)
ROWS_SUM = Mistake(
    "rows-not-sum-to-1",
    "each query's weights should sum to 1 over the keys (softmax over the last dimension); yours "
    "are off by up to {error:.3g}.",
)
ACTIVE_IN_EVAL = Mistake(
    "dropout-in-eval",
    "with dropout={p} and the module in eval mode (model.eval()), the result changed: dropout "
    "must only act while training. Use nn.Dropout, or F.dropout(..., training=self.training).",
)
WHERE_DROPOUT = (
    "Dropout belongs on the attention weights, after the softmax and before multiplying by V: "
    "F.dropout(weights, self.dropout, self.training) or an nn.Dropout layer."
)
DROPOUT_MISSING = Mistake(
    "dropout-missing",
    "dropout is missing in training: in training mode (model.train()) with dropout={p} your "
    "output is the output without dropout. " + WHERE_DROPOUT,
)
DROPOUT_ON = Mistake("dropout-misplaced", "dropout is applied to {where}. " + WHERE_DROPOUT)
TRAINING_MISMATCH = Mistake(
    "dropout-mismatch-in-training",
    "in training mode with dropout={p} the output does not match the reference, although it "
    "matched in eval mode: dropout is in the wrong place or has the wrong rate. "
    + WHERE_DROPOUT
    + " (The checks make F.dropout, nn.Dropout and the dropout_p of "
    "F.scaled_dot_product_attention repeatable; a mask drawn by hand with torch.rand cannot be "
    "compared.)",
)


# --- split_heads / merge_heads -------------------------------------------------------------------


def _view_hint(failure: Failure) -> str | None:
    return VIEW_HINT if "view size is not compatible" in failure.message else None


def _split(x: torch.Tensor, H: int, how: str = "ok") -> torch.Tensor:
    """``(B, L, D)`` -> ``(B, H, L, d_head)``, or the mistake ``how``: ``"view"`` (no
    transpose) or ``"interleaved"`` (head h takes features h, h + H, ...)."""
    B, L, D = x.shape
    if how == "view":
        return x.reshape(B, H, L, D // H)
    if how == "interleaved":
        return x.reshape(B, L, D // H, H).permute(0, 3, 1, 2)
    return x.reshape(B, L, H, D // H).transpose(1, 2)


def _merge(x: torch.Tensor, how: str = "ok") -> torch.Tensor:
    """``(B, H, L, d_head)`` -> ``(B, L, D)``, or the mistake ``how`` (as for ``_split``)."""
    B, H, L, d = x.shape
    if how == "view":
        return x.reshape(B, L, H * d)
    if how == "interleaved":
        return x.permute(0, 2, 3, 1).reshape(B, L, H * d)
    return x.transpose(1, 2).reshape(B, L, H * d)


def _heads_case(name: str, shape: tuple[int, ...], seed: int, grad: bool) -> Case:
    """A case of ``split_heads(x, num_heads)`` (``shape``: ``(B, L, D, H)``) or of
    ``merge_heads(x)`` (``shape``: ``(B, H, L, d_head)``)."""
    if name == "split_heads":
        B, L, D, H = shape
        d = D // H
        x = randn(B, L, D, seed=seed)
        reference, rearrange, args = _split, functools.partial(_split, H=H), (x, H)
        call = f"split_heads(x, num_heads={H}) with x of shape (B, L, D)"
        mistakes = {SPLIT_NO_TRANSPOSE: "view", SPLIT_INTERLEAVED: "interleaved"}
        hints = {
            (B, L, H, d): Mistake(
                "heads-not-in-front",
                "The head dimension must come before the sequence dimension: after "
                "view(B, L, H, d_head), swap them with transpose(1, 2).",
            ),
            (B, H * L, d): Mistake(
                "heads-and-positions-joined",
                "Keep the heads and the positions as two separate dimensions.",
            ),
        }
    else:
        B, H, L, d = shape
        x = randn(*shape, seed=seed)
        reference, rearrange, args = _merge, _merge, (x,)
        call = "merge_heads(x) with x of shape (B, H, L, d_head)"
        mistakes = {MERGE_NO_TRANSPOSE: "view", MERGE_INTERLEAVED: "interleaved"}
        hints = {
            (B, L, H, d): Mistake(
                "heads-not-joined",
                "The heads were moved back behind the sequence but not joined: "
                "reshape to (B, L, H * d_head).",
            ),
            (B, H, L * d): Mistake(
                "merge-without-transpose",
                "Transpose(1, 2) first, so that each position's heads end up side "
                "by side, then reshape to (B, L, D).",
            ),
        }
    expected = rearrange(x)
    case = Case(
        Call(name, name, args),
        f"{call} = {tuple(x.shape)}",
        expected=expected,
        mistakes={text: rearrange(x, how=how) for text, how in mistakes.items()},
        shape_hints=(hints,),
        reference=reference,
    )
    if not grad:
        return case
    # a rearrangement: the gradient is the upstream gradient rearranged back
    return backpropagating(case, randn(*expected.shape, seed=int(x.shape[-1]) + 1))


def _reference_split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``split_heads`` as the reference writes it (``SPARE_DEPENDENTS`` puts it in place of the
    student's)."""
    return _split(x, num_heads)


def _reference_merge_heads(x: torch.Tensor) -> torch.Tensor:
    return _merge(x)


def _heads_exercise(number: int, given: str, shapes: list, seed: int, reference, letters: str):
    """Register exercise ``number`` (the function ``given``, its output of shape ``letters``),
    tried on each of ``shapes`` (see ``_heads_case``): the first visible, the sixth
    backpropagating."""
    name = given.split()[1].split("(")[0]

    def cases(thorough: bool) -> Iterator[Case]:
        for i, shape in enumerate(shapes if thorough else shapes[:1]):
            yield _heads_case(name, shape, seed + i, grad=i == 5)

    return register_given(
        number,
        given,
        cases,
        reference=reference,
        slots=("the output",),
        letters=(letters,),
        inputs={"args[0]": "x"},
        failure_hint=_view_hint,
    )


# (B, L, D, H) and (B, H, L, d_head): all sizes distinct, so a swapped axis shows
_SPLIT = [(2, 3, 20, 4), (1, 1, 6, 1), (3, 4, 6, 6), (2, 5, 24, 3), (1, 7, 16, 8), (2, 3, 12, 3)]
_MERGE = [(2, 4, 3, 5), (1, 1, 1, 6), (3, 6, 4, 1), (2, 3, 5, 8), (1, 8, 7, 2), (2, 3, 4, 2)]
check_split_heads = _heads_exercise(
    1, "def split_heads(x, num_heads):", _SPLIT, 200, _reference_split_heads, "(B, H, L, d_head)"
)
check_merge_heads = _heads_exercise(
    2, "def merge_heads(x):", _MERGE, 300, _reference_merge_heads, "(B, L, D)"
)


# --- loading the reference's weights into any layout ---------------------------------------------

Weights = Mapping[str, "torch.Tensor | None"]
"""``in_proj_weight (3D, D)``, ``in_proj_bias (3D,)``, ``out_proj.weight``, ``out_proj.bias``
(the biases may be None): ``encoder_lib.MultiHeadAttention``'s state."""


class _LayoutError(observe.Unfit):
    """The module cannot take the weights; the message says what to keep."""


def _get(obj: Any, path: str) -> Any:
    """``obj``'s attribute at the dotted ``path`` (``"q_proj.weight"``), or None."""
    for name in path.split("."):
        try:
            obj = getattr(obj, name, None)
        except Exception:  # a property written by the student may raise anything
            return None
    return obj


def _copy(module: nn.Module, path: str, source: torch.Tensor | None) -> None:
    """Copy ``source`` into ``module``'s tensor at ``path``. A bias may be missing on one side:
    the reference's (None) zeroes the module's; the module's (None) is fine if the reference's
    is zero."""
    owner, target = f"{type(module).__name__}.{path}", _get(module, path)
    if source is None:
        if isinstance(target, torch.Tensor):
            with torch.no_grad():
                target.zero_()
        return
    if target is None and path.endswith("bias"):
        if bool(source.any()):
            raise _LayoutError(
                f"{owner} is missing (None), but the reference has a bias: keep bias=True "
                "(nn.Linear's default)."
            )
        return
    if not isinstance(target, torch.Tensor):
        raise _LayoutError(
            f"{owner} should be a tensor (an nn.Parameter) of shape {tuple(source.shape)}, got "
            f"{type(target).__name__}."
        )
    if tuple(target.shape) != tuple(source.shape):
        raise _LayoutError(
            f"{owner} should have shape {tuple(source.shape)}, got {tuple(target.shape)}."
        )
    with torch.no_grad():
        target.copy_(source)


def _load(module: nn.Module, weights: Weights) -> None:
    """Copy ``weights`` into every projection layout ``module`` has (values copied into its
    tensors, which keep their dtype); raise ``_LayoutError`` naming what is missing or wrong."""
    cls = type(module).__name__
    weight, bias = weights["in_proj_weight"], weights.get("in_proj_bias")
    D = weight.shape[1]
    chunks = zip(weight.chunk(3), (None,) * 3 if bias is None else bias.chunk(3), strict=True)
    separate = ("q_proj", "k_proj", "v_proj")
    present = [name for name in separate if _get(module, name) is not None]
    loaded = False
    if len(present) == 3:
        for a, b in itertools.combinations(separate, 2):
            wa, wb = _get(module, f"{a}.weight"), _get(module, f"{b}.weight")
            if _get(module, a) is _get(module, b) or (wa is not None and wa is wb):
                raise _LayoutError(
                    f"{cls}.{b} is the same layer as {cls}.{a}: each projection needs its own "
                    "nn.Linear(D, D) with its own weights."
                )
        for name, (w, b) in zip(separate, chunks, strict=True):
            _copy(module, f"{name}.weight", w)
            _copy(module, f"{name}.bias", b)
        loaded = True
    if _get(module, "in_proj_weight") is not None:  # PyTorch's fused layout
        _copy(module, "in_proj_weight", weight)
        _copy(module, "in_proj_bias", bias)
        loaded = True
    for name in ("in_proj", "qkv_proj"):  # one fused layer
        if _get(module, name) is not None:
            _copy(module, f"{name}.weight", weight)
            _copy(module, f"{name}.bias", bias)
            loaded = True
    if not loaded and present:
        missing = ", ".join(f"`{n}`" for n in separate if n not in present)
        raise _LayoutError(
            f"{cls} has {', '.join(f'`{n}`' for n in present)} but no {missing}: keep the "
            f"three projections q_proj, k_proj, v_proj (nn.Linear({D}, {D}) each) that the "
            "given __init__ creates."
        )
    if not loaded:
        raise _LayoutError(
            f"{cls} has no attribute `q_proj` (nor PyTorch's fused `in_proj_weight`, nor a fused "
            f"layer `in_proj`): keep the projections q_proj, k_proj, v_proj (nn.Linear({D}, {D}) "
            "each) that the given __init__ creates."
        )
    if _get(module, "out_proj") is None:
        raise _LayoutError(
            f"{cls} has no attribute `out_proj`, the output projection nn.Linear({D}, {D}) that "
            "mixes the heads: keep the one the given __init__ creates."
        )
    _copy(module, "out_proj.weight", weights["out_proj.weight"])
    _copy(module, "out_proj.bias", weights.get("out_proj.bias"))


def load_reference_weights(module: nn.Module, reference: nn.Module) -> nn.Module:
    """Copy ``reference``'s weights into ``module`` (a student's multi-head attention) and return
    ``module``.

    ``reference`` is an ``encoder_lib.MultiHeadAttention`` (or an ``nn.MultiheadAttention`` with
    ``kdim = vdim = embed_dim``). ``module`` may hold its projections as separate layers
    ``q_proj``/``k_proj``/``v_proj``, as PyTorch's fused ``in_proj_weight``/``in_proj_bias``, or as
    one fused layer ``in_proj`` or ``qkv_proj`` (``weight (3D, D)``: rows Q, then K, then V);
    every layout it has is loaded, so a module that keeps unused layers still gets the right
    weights where it reads them. It must have ``out_proj``. Values are copied into the existing
    tensors, which keep their dtype (as ``load_state_dict`` does): convert ``module`` first to
    compare in float64.

    Raises ``GradingError`` naming the attribute that is missing or has the wrong shape.
    """
    if not isinstance(module, nn.Module):
        raise GradingError(
            "expected an nn.Module (an instance of your MultiHeadAttention), got "
            f"{type(module).__name__}"
        )
    try:
        _load(module, {k: v.detach() for k, v in reference.state_dict().items()})
    except _LayoutError as error:
        raise GradingError(str(error)) from None
    return module


@observe.preparation("multi_head.reference_weights")
def _prepare_with_reference_weights(module: nn.Module, call: Call, obs: Observation) -> bool:
    """Get a module whose layout the grader does not know ready: copy ``call.options["weights"]``
    into it with ``_load`` (a layout that cannot take them is ``Unfit``, reported with its
    sentence). Runs in the student's kernel."""
    _load(module, call.options["weights"])
    if type(module).forward is nn.Module.forward:
        raise _LayoutError(NO_FORWARD)
    return True


# --- MultiHeadAttention: the reference and its mistakes ------------------------------------------


def _weights(D: int, seed: int) -> dict[str, torch.Tensor]:
    """Random weights and (non-zero) biases in float64, so that every parameter shows."""
    return {
        "in_proj_weight": randn(3 * D, D, seed=seed) / math.sqrt(D),
        "in_proj_bias": randn(3 * D, seed=seed + 1) * 0.2,
        "out_proj.weight": randn(D, D, seed=seed + 2) / math.sqrt(D),
        "out_proj.bias": randn(D, seed=seed + 3) * 0.2,
    }


def _reference(weights, H, dropout, dtype, train, *tensors):
    """``encoder_lib.MultiHeadAttention`` with ``weights``, in float64 or float32, run on
    ``tensors`` the way the student's module is (built and run in one seeded context, so that
    its dropout draws what the student's draws)."""
    with reference_mode(), torch.no_grad():
        return _module(weights, H, dropout, dtype, train)(*tensors)


def _module(weights, H, dropout, dtype, train) -> nn.Module:
    """``encoder_lib.MultiHeadAttention`` with ``weights``, in ``dtype``, in train or eval mode."""
    with reference_mode():
        D = weights["out_proj.weight"].shape[0]
        ref = encoder_lib.MultiHeadAttention(D, H, dropout).to(dtype).train(train)
    ref.load_state_dict(weights)
    return ref


_SLOT = ("queries", "keys", "values")
_INPUT = ("query", "key", "value")


def _attend(
    weights: Weights,
    H: int,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    proj: str = "qkv",
    inputs: tuple[int, int, int] = (0, 1, 2),
    scale: str = "head",
    split: str = "ok",
    merge: str = "ok",
    out_proj: bool = True,
    mask_mode: str = "ok",
    softmax_dim: int = -1,
    p: float = 0.0,
    dropout_on: str = "weights",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Multi-head attention with one mistake switched on: ``(output, weights, scores)``. Run it
    under ``reference_mode`` when ``p`` > 0 (deterministic dropout)."""
    D = query.shape[-1]
    d = D // H
    w = dict(zip("qkv", weights["in_proj_weight"].chunk(3), strict=True))
    b = dict(zip("qkv", weights["in_proj_bias"].chunk(3), strict=True))
    src = (query, key, value)

    def drop(t: torch.Tensor, where: str) -> torch.Tensor:
        return F.dropout(t, p) if p > 0 and dropout_on == where else t

    q, k, v = (_split(F.linear(src[inputs[i]], w[proj[i]], b[proj[i]]), H, split) for i in range(3))
    scores = q @ k.transpose(-2, -1)
    scores = scores / {"head": math.sqrt(d), "model": math.sqrt(D), "none": 1.0}[scale]
    masked = drop(scores, "scores")
    if mask is not None and mask_mode != "ignored":
        allowed = mask if mask_mode == "ok" else ~mask
        masked = masked.masked_fill(~allowed, float("-inf"))
    attention = drop(torch.softmax(masked, dim=softmax_dim).nan_to_num(0.0), "weights")
    out = drop(_merge(attention @ v, merge), "merged")
    if out_proj:
        out = F.linear(out, weights["out_proj.weight"], weights["out_proj.bias"])
    return drop(out, "output"), attention, scores


def _mistakes(weights: Weights, H: int, args: tuple) -> dict[str, tuple[Any, Any]]:
    """Description -> ``(output, weights)`` of every mistake the check recognises in eval mode,
    most common first (the first match is reported)."""
    D = args[0].shape[-1]
    d = D // H
    found: dict[str, dict[str, Any]] = {
        Mistake(
            "scaled-by-sqrt-d-model",
            f"the scores are divided by sqrt(D) = sqrt(d_model) = sqrt({D}). Each head's dot "
            f"product sums only d_head = D / H = {d} products, so divide by sqrt(d_head) = "
            f"sqrt({d}).",
        ): {"scale": "model"},
        Mistake(
            "not-scaled",
            f"the scores are not scaled: divide them by sqrt(d_head) = sqrt({d}) before the "
            "softmax.",
        ): {"scale": "none"},
        Mistake(
            "heads-without-transpose",
            "the heads were split and merged with view/reshape but no transpose, so each head "
            "mixes several tokens' features. " + SHAPE_HINT,
        ): {"split": "view", "merge": "view"},
        Mistake("split-without-transpose", "the heads were split wrongly: " + SPLIT_NO_TRANSPOSE): {
            "split": "view"
        },
        Mistake(
            "merge-without-transpose", "the heads were merged wrongly: " + MERGE_NO_TRANSPOSE
        ): {"merge": "view"},
        Mistake(
            "no-output-projection",
            "the output projection is missing: pass the merged heads through self.out_proj, the "
            "layer that mixes what the heads found.",
        ): {"out_proj": False},
        Mistake(
            "q-proj-for-all",
            "q_proj is used for the queries, the keys and the values: project the keys with "
            "k_proj and the values with v_proj.",
        ): {"proj": "qqq"},
    }
    for combo in itertools.product("qkv", repeat=3):
        proj = "".join(combo)
        if proj in ("qkv", "qqq"):
            continue
        wrong = [
            f"the {_SLOT[i]} are projected with {p}_proj instead of {'qkv'[i]}_proj"
            for i, p in enumerate(proj)
            if p != "qkv"[i]
        ]
        text = "the projections are mixed up: " + "; ".join(wrong) + "."
        found[Mistake("projections-mixed-up", text)] = {"proj": proj}
    for inputs in itertools.product(range(3), repeat=3):
        if inputs == (0, 1, 2):
            continue
        wrong = [
            f"the {_SLOT[i]} are computed from `{_INPUT[j]}` instead of `{_INPUT[i]}`"
            for i, j in enumerate(inputs)
            if j != i
        ]
        text = "the inputs are mixed up: " + "; ".join(wrong) + "."
        found[Mistake("inputs-mixed-up", text)] = {"inputs": inputs}
    found |= {
        Mistake(
            "mask-ignored",
            "the mask is ignored, so padding leaks into the result: before the softmax, set the "
            "scores where the mask is False to -inf.",
        ): {"mask_mode": "ignored"},
        Mistake(
            "mask-reversed",
            "the mask's polarity is reversed. Here True means 'may attend' (as in "
            "F.scaled_dot_product_attention), the opposite of nn.MultiheadAttention's "
            "key_padding_mask: hide the scores where the mask is False, "
            "masked_fill(~mask, -inf).",
        ): {"mask_mode": "reversed"},
        Mistake(
            "softmax-over-queries",
            "the softmax is taken over the queries (dim=-2): take it over the keys (dim=-1), so "
            "that each query's weights sum to 1.",
        ): {"softmax_dim": -2},
        Mistake(
            "heads-interleaved",
            "heads built from interleaved features (head h took features h, h + H, ...): "
            + SPLIT_INTERLEAVED,
        ): {"split": "interleaved", "merge": "interleaved"},
        Mistake("split-interleaved", "the heads were split wrongly: " + SPLIT_INTERLEAVED): {
            "split": "interleaved"
        },
        Mistake("merge-interleaved", "the heads were merged wrongly: " + MERGE_INTERLEAVED): {
            "merge": "interleaved"
        },
    }
    result: dict[str, tuple[Any, Any]] = {}
    for description, flags in found.items():
        try:
            out, attention, _ = _attend(weights, H, *args, **flags)
        except RuntimeError:  # e.g. keys taken from an input of another length
            continue
        result[description] = (out, attention)
    before_softmax = Mistake(
        "weights-before-softmax",
        "the weights returned are the scores before the softmax: return softmax(scores).",
    )
    return result | {before_softmax: (None, _attend(weights, H, *args)[2])}


def _dropout_mistakes(weights: Weights, H: int, args: tuple, p: float) -> dict[str, tuple]:
    """In training mode: description -> ``(output, None)`` of dropout missing or misplaced."""
    with reference_mode():
        wrong = {DROPOUT_MISSING.format(p=p): _attend(weights, H, *args)}
        for where, on in (
            ("the scores, before the softmax", "scores"),
            ("the merged heads, before out_proj", "merged"),
            ("the output, after out_proj", "output"),
        ):
            wrong[DROPOUT_ON.format(where=where)] = _attend(weights, H, *args, p=p, dropout_on=on)
    return {description: (value[0], None) for description, value in wrong.items()}


def _weight_properties(obs: Observation, mask: torch.Tensor | None) -> str | None:
    """Padding that leaks, or rows that do not sum to 1."""
    w = obs.value[1].to(torch.float64)
    if mask is not None:
        hidden = ~mask.expand(w.shape)
        leak = float(w[hidden].abs().max()) if bool(hidden.any()) else 0.0
        if not leak <= 1e-9:
            return LEAK.format(leak=leak)
    error = float((w.sum(dim=-1) - 1).abs().max())
    return None if error <= 1e-6 else ROWS_SUM.format(error=error)


# --- MultiHeadAttention: the cases ---------------------------------------------------------------


_SIZES = {  # name -> (B, L_q, L_k, D, H)
    "self": (2, 5, 5, 12, 3),
    "padding": (2, 5, 5, 12, 3),
    "cross": (2, 3, 6, 12, 3),
    "cross_masked": (2, 3, 6, 12, 3),
    "cross_same_length": (3, 4, 4, 8, 2),
    "causal": (3, 6, 6, 8, 2),
    "full_mask": (2, 3, 5, 16, 4),
    "tiny": (1, 1, 1, 4, 1),
    "d_head_1": (2, 3, 3, 6, 6),
}


def _inputs(name: str, seed: int) -> tuple[str, int, int, tuple, torch.Tensor | None]:
    """``(description, D, H, (query, key, value), mask)`` for one named input."""
    B, L_q, L_k, D, H = _SIZES[name]
    query = randn(B, L_q, D, seed=seed)
    if name.startswith("cross"):
        tensors = (query, randn(B, L_k, D, seed=seed + 1), randn(B, L_k, D, seed=seed + 2))
        text = f"cross-attention, query {(B, L_q, D)}, key and value {(B, L_k, D)}, all different"
    elif name == "full_mask":
        kv = randn(B, L_k, D, seed=seed + 1)
        tensors = (query, kv, kv)
        text = f"cross-attention, query {(B, L_q, D)}, key = value {(B, L_k, D)}"
    else:
        tensors = (query, query, query)
        text = f"self-attention on x of shape (B, L, D) = {(B, L_q, D)}"
    mask = {
        "padding": lambda: keep_first([4, 2], L_k),
        "cross_masked": lambda: keep_first([5, 3], L_k),
        "causal": lambda: encoder_lib.causal_mask(L_q),
        "full_mask": lambda: randn(B, H, L_q, L_k, seed=seed + 2) > 0,
    }.get(name, lambda: None)()
    if name == "full_mask":
        mask[..., 0], mask[..., 1] = True, False  # every row keeps a key and loses one
    if mask is not None:
        kind = {"causal": "causal", "full_mask": "per-head"}.get(name, "padding")
        text += f", a {kind} mask of shape {tuple(mask.shape)} (True = may attend)"
    return text, D, H, tensors, mask


def _mha_case(
    name: str,
    seed: int,
    dropout: float | None = None,
    train: bool = False,
    dtype: torch.dtype = torch.float64,
    grad: bool = False,
) -> Case:
    description, D, H, tensors, mask = _inputs(name, seed)
    tensors = tuple(t.to(dtype) for t in tensors)
    B, L_q, L_k = _SIZES[name][:3]
    d, p = D // H, dropout or 0.0
    weights = _weights(D, seed + 10)
    args = (*tensors, *(() if mask is None else (mask,)))
    init = (D, H) if dropout is None else (D, H, dropout)
    mode = " in training mode" if train else (" in eval mode" if dropout else "")
    dtype_text = "" if dtype == torch.float64 else f" ({str(dtype).removeprefix('torch.')})"
    if train:
        mistakes: Any = lambda: _dropout_mistakes(weights, H, (*tensors, mask), p)  # noqa: E731
        probes = (lambda obs, ask: TRAINING_MISMATCH.format(p=p),)
    elif dropout:  # in eval mode, any difference is dropout acting
        mistakes, probes = None, (lambda obs, ask: ACTIVE_IN_EVAL.format(p=p),)
    else:
        typed = {name: w.to(dtype) for name, w in weights.items()}  # as the tensors
        mistakes = lambda: _mistakes(typed, H, (*tensors, mask))  # noqa: E731
        probes = (lambda obs, ask: _weight_properties(obs, mask),)
    weight_hints = {
        (B, L_q, L_k): Mistake(
            "weights-averaged-over-heads",
            "The weights were averaged over the heads (as nn.MultiheadAttention does "
            "by default); return every head's weights, shape (B, H, L_q, L_k).",
        ),
        (B, L_q, H, H): Mistake(
            "heads-not-in-front",
            "The heads were never moved in front of the sequence: after "
            "view(B, L, H, d_head), transpose dimensions 1 and 2.",
        ),
    }
    if L_q != L_k:
        weight_hints[(B, H, L_q, L_q)] = Mistake(
            "keys-from-query",
            "There is one column per query instead of one per key: project the keys from "
            "`key` and the values from `value`, not from `query`.",
        )
    # in training mode, the returned weights may be taken before or after dropout: not compared
    expected = (_reference(weights, H, p, dtype, train, *args)[0], None) if train else None
    case = Case(
        Call(
            "MultiHeadAttention",
            "multi_head_attention",
            args,
            init=(init, {}),
            dtype=dtype,
            train=train,
            inspect=True,
            prepare="multi_head.reference_weights",
            options={"weights": weights},
        ),
        f"MultiHeadAttention({D}, {H}{'' if dropout is None else f', dropout={dropout}'})"
        f"{mode}{dtype_text}, {description}",
        expected=expected,
        mistakes=mistakes,
        probes=probes,
        shape_hints=(
            {
                (B, H, L_q, d): Mistake(
                    "heads-not-merged",
                    "The heads were never merged: transpose back to (B, L_q, H, "
                    "d_head), reshape to (B, L_q, D), then apply out_proj.",
                ),
                (B, L_q, H, d): Mistake(
                    "heads-not-joined",
                    "The heads were moved back but not joined: reshape to (B, L_q, D).",
                ),
            },
            weight_hints,
        ),
        reference=_module(weights, H, p, dtype, train),
    )
    if not grad:
        return case
    upstream = randn(B, L_q, D, seed=seed + 20), randn(B, H, L_q, L_k, seed=seed + 21)
    return backpropagating(case, *upstream, grad=("args[0]", "args[1]", "args[2]"))


def _forward_hint(failure: Failure) -> str | None:
    hint = _view_hint(failure)
    shapes = failure.error in ("RuntimeError", "ValueError", "IndexError")
    return SHAPE_HINT if hint is None and failure.phase == "call" and shapes else hint


def _mha_cases(thorough: bool) -> Iterator[Case]:
    names = ["self", "padding", "cross"]
    if thorough:
        names += ["cross_masked", "cross_same_length", "causal", "full_mask", "tiny", "d_head_1"]
    for i, name in enumerate(names):
        yield _mha_case(name, seed=400 + 20 * i)
    yield _mha_case("self", seed=560, dropout=0.5, train=True)
    yield _mha_case("padding", seed=600, dropout=0.5)
    if thorough:
        yield _mha_case("cross_masked", seed=580, dropout=0.3, train=True)
        yield _mha_case("padding", seed=640, dtype=torch.float32)
        yield _mha_case("cross_masked", seed=620, grad=True)


check_multi_head_attention = register_given(
    3,
    "class MultiHeadAttention(nn.Module):",
    _mha_cases,
    forbidden=_FORBIDDEN,
    slots=("the output", "the weights tensor"),
    letters=("(B, L_q, D)", "(B, H, L_q, L_k)"),
    order=(1, 0),
    module=ModuleSpec(
        forbidden_submodules={
            "torch.nn.modules.activation.MultiheadAttention": "nn.MultiheadAttention",
            "encoder_lib.attention.MultiHeadAttention": "encoder_lib.MultiHeadAttention",
        },
        not_module_message=(
            "MultiHeadAttention(...) should build an nn.Module, got {type}: define "
            "`class MultiHeadAttention(nn.Module)`."
        ),
    ),
    inputs={"args[0]": "query", "args[1]": "key", "args[2]": "value", "args[3]": "mask"},
    failure_hint=_forward_hint,
)
