"""Checks for notebook 01, self-attention: ``attention_scores``, ``masked_softmax``,
``causal_mask`` and ``scaled_dot_product_attention``.

The mistakes the checks name (each one has a BUGGY answer in tests/variants/a01_self_attention.py):

- scores: not scaled; divided by d_k (or twice by sqrt(d_k)); multiplied by sqrt(d_k); divided by
  the square root of a length (L_k, L_q) instead of d_k; right on one sequence but wrong with batch
  axes in front (``key.T``, ``key.transpose(0, 1)``, ``torch.mm``); axes counted from the front
  (``key.transpose(1, 2)`` fails on a single sequence);
- weights: softmax over the query axis (dim=-2) or the batch axis (dim=0); rows that do not sum to
  1; mask polarity reversed; mask applied after the softmax; boolean mask added to the scores;
  masked scores set to 0; mask ignored; a fully masked row that gives NaN (softmax of all -inf) or
  uniform weights (a finite fill such as -1e9) instead of zeros; exp overflowing on large scores
  (no max subtraction); the input scores changed in place; the scores returned as weights;
- attention: output equal to the weights (V forgotten); not a pair, or the pair in the wrong order;
- causal mask: not boolean (0/1, or an additive 0/-inf float mask); True in the upper triangle;
  polarity reversed; diagonal excluded; nothing masked.

Every check also rejects Tensor subclasses, wrong shapes (expected vs got), a dtype that does not
follow the inputs and answers that break autograd (the last two with ``thorough=True``), and
answers that call the built-ins doing the exercise's work (``ForbiddenCallError``). Like every
check, they are ``_core.guarded``: they refuse to grade (``TamperingError``) while a torch mode is
left active, when torch's comparisons were rebound before grading was imported, or when torch or
encoder_lib was rebound, and they run with one torch thread (tiny tensors, busy machines).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

import encoder_lib

from . import _core
from ._core import ForbiddenCallError, GradingError, TamperingError

__all__ = [
    "check_attention_scores",
    "check_masked_softmax",
    "check_causal_mask",
    "check_scaled_dot_product_attention",
]

_NEG_INF = float("-inf")

_FORBIDDEN_TORCH = {
    F.scaled_dot_product_attention: "F.scaled_dot_product_attention",
    F.multi_head_attention_forward: "F.multi_head_attention_forward (nn.MultiheadAttention)",
}
_FORBIDDEN_PYTHON = (encoder_lib.scaled_dot_product_attention, encoder_lib.MultiHeadAttention)
_FORBIDDEN_MASK = (*_FORBIDDEN_PYTHON, encoder_lib.causal_mask)

# --- the mistakes, in the student's terms --------------------------------------------------------

NOT_SCALED = (
    "the scores are not scaled. Divide Q K^T by sqrt(d_k), where d_k = query.shape[-1], so that "
    "their spread does not grow with the width of the vectors."
)
SCALED_BY_D_K = (
    "the scores are divided by d_k instead of sqrt(d_k) (or by sqrt(d_k) twice). Divide Q K^T "
    "once by math.sqrt(d_k)."
)
SCALE_MULTIPLIED = "the scores are multiplied by sqrt(d_k) instead of divided by it."
SCALED_BY_L_K = (
    "the scores are divided by sqrt(L_k), the number of keys. d_k is the size of the LAST axis of "
    "query and key (query.shape[-1])."
)
SCALED_BY_L_Q = (
    "the scores are divided by sqrt(L_q), the number of queries. d_k is the size of the LAST axis "
    "of query and key (query.shape[-1])."
)
QUERY_AXIS = (
    "the softmax is taken over the query axis (dim=-2; for a single sequence of scores "
    "(L_q, L_k) that is also dim=0), so each column sums to 1. Each query's "
    "weights over the keys must sum to 1: take the softmax over the last axis, dim=-1."
)
BATCH_AXIS = (
    "the softmax is taken over dim=0, the batch axis, which mixes different sequences. Take it "
    "over the last axis (the keys), dim=-1."
)
MASK_REVERSED = (
    "the mask polarity is reversed: the positions where mask is True got weight 0. In this course "
    "True means 'may attend' (as in F.scaled_dot_product_attention), so the positions to remove "
    "are those where mask is False (~mask). nn.MultiheadAttention's key_padding_mask is the "
    "opposite convention."
)
MASK_AFTER_SOFTMAX = (
    "the mask is applied after the softmax: zeroing weights afterwards leaves rows that no longer "
    "sum to 1. Put -inf in the masked scores before the softmax."
)
MASK_ADDED = (
    "the boolean mask was added to the scores (True counts as 1, False as 0), which only shifts "
    "the allowed scores by 1 and removes nothing. Masked positions need a score of -inf before the "
    "softmax."
)
MASK_ZEROED = (
    "the masked scores were set to 0 (e.g. scores * mask) instead of -inf: exp(0) = 1, so masked "
    "keys still get weight. Use -inf."
)
MASK_IGNORED = "the mask is ignored: keys where mask is False still get weight."
DEAD_ROW_NAN = (
    "a query whose keys are ALL masked gives NaN: the softmax of a row of -inf is 0/0. Such a row "
    "must give all-zero weights (as F.scaled_dot_product_attention does): find the rows where "
    "mask has no True and set their weights to 0."
)
DEAD_ROW_UNIFORM = (
    "a query whose keys are ALL masked gets the same weight 1/L_k for every key: that is what a "
    "finite fill value such as -1e9 gives (all its scores are then equal). Such a row must give "
    "all-zero weights: find the rows where mask has no True and set their weights to 0."
)
DEAD_ROW_NOT_ZERO = (
    "a query whose keys are ALL masked must get all-zero weights (and so a zero output), but "
    "row {index} is {row}."
)
OVERFLOW = (
    "large scores (around 1000) give NaN or inf: exp overflows. Subtract each row's maximum "
    "before exp (the softmax does not change when a constant is subtracted from a row), or use "
    "torch.softmax, which does this for you."
)
NOT_SUM_TO_1 = (
    "each query's weights must sum to 1 over the keys (the last axis), but row {index} sums to "
    "{total:.4g}."
)
IN_PLACE = (
    "{name} changed its input {arg} in place (a method ending in _, such as masked_fill_, or an "
    "assignment into it). The caller still needs its tensor: work on a new tensor instead "
    "(masked_fill without the underscore, torch.where)."
)
SCORES_AS_WEIGHTS = "the weights are the scaled scores, before the softmax."
FORGOT_V = (
    "the output equals the attention weights: multiply the weights by the values "
    "(weights @ value) to get the output."
)
PAIR_SWAPPED = "the pair is in the wrong order: return (output, weights), output first."
BATCH_AXES = (
    "{error}Your function works on a single sequence (2-D inputs) but not with a batch axis in "
    "front: index axes from the end (d_k = query.shape[-1]), transpose only the last two axes of "
    "key (key.transpose(-2, -1) or key.mT; key.T reverses every axis, so on a batched tensor it "
    "moves the batch axis too) and use @ or torch.matmul rather than torch.mm."
)
SINGLE_SEQUENCE = (
    " These inputs are a single sequence with no batch axis: count axes from the end (-1, -2), "
    "so that the code works for any number of leading batch axes."
)
NO_GRAD = (
    "{what} does not carry gradients: the result must stay differentiable, so avoid .detach(), "
    ".item(), .numpy(), .data and torch.no_grad()."
)
WRONG_DTYPE = _core.WRONG_DTYPE
CAUSAL_UPPER = (
    "True is on and above the diagonal (the upper triangle). Row i is query i, which may attend "
    "to keys 0..i: True must be on and below the diagonal (torch.tril)."
)
CAUSAL_REVERSED = (
    "the polarity is reversed: True marks the future keys, which must NOT be attended. In this "
    "course True means 'may attend': row i is True in columns 0..i."
)
CAUSAL_NO_DIAGONAL = (
    "the diagonal is False, but each position may attend to itself: row i is True in columns 0..i, "
    "including i."
)
CAUSAL_ALL_TRUE = "every entry is True, so nothing is masked: query i must not see keys j > i."
CAUSAL_ADDITIVE = (
    "should be a boolean tensor (True = may attend), but it is an additive float mask of 0 and "
    "-inf, PyTorch's other convention (nn.Transformer.generate_square_subsequent_mask). This "
    "course's masks are boolean."
)
CAUSAL_NOT_BOOL = (
    "should be a boolean tensor (dtype torch.bool, True = may attend), got dtype {dtype}. Build it "
    "with dtype=torch.bool, a comparison, or .bool()."
)


# --- calling the student's code ------------------------------------------------------------------


def _call(
    what: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    forbidden_python: tuple[Any, ...] = _FORBIDDEN_PYTHON,
    single_sequence: bool = False,
) -> Any:
    """``fn(*args)`` inside ``_core.student_call``, with clearer messages for a stub called by
    the student's function and for an error on inputs without a batch axis."""
    try:
        with _core.student_call(what, _FORBIDDEN_TORCH, forbidden_python):
            return fn(*args)
    except (ForbiddenCallError, TamperingError):
        raise
    except GradingError as e:
        cause = e.__cause__
        if _core._isinstance(cause, NotImplementedError):
            stub = _stub_name(cause, fn)
            if stub is not None:
                raise GradingError(
                    f"{what} calls {stub}, which is not written yet: write {stub} first (and run "
                    "its cell)."
                ) from cause
            raise
        if single_sequence and _core._isinstance(cause, IndexError):
            raise GradingError(f"{_sentence(e)}{SINGLE_SEQUENCE.lstrip()}") from cause
        raise


def _stub_name(error: BaseException, fn: Callable[..., Any]) -> str | None:
    """The notebook function (other than ``fn``) whose ``raise NotImplementedError()`` ran."""
    name = _core.innermost_function(error)
    if name is None or name == getattr(fn, "__name__", None):
        return None
    return name if name in getattr(fn, "__globals__", {}) else None


def _batched(error: GradingError) -> GradingError:
    return GradingError(BATCH_AXES.format(error=_sentence(error)))


def _sentence(error: BaseException) -> str:
    """The message of ``error`` ending with a full stop and a space, ready for more text."""
    text = str(error).rstrip()
    return text + (" " if text.endswith(".") else ". ")


def _shape(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(x.shape)


def _expect_unchanged(name: str, given: dict[str, torch.Tensor], kept: dict[str, torch.Tensor]):
    for arg, tensor in given.items():
        if not _core._equal(tensor.detach(), kept[arg]):
            raise GradingError(IN_PLACE.format(name=name, arg=arg))


def _expect_weights(
    got: Any,
    expected: torch.Tensor,
    what: str,
    mistakes: Mapping[str, torch.Tensor],
    nan_hint: str = "",
    atol: float = 1e-6,
) -> None:
    """Attention weights: the named mistakes first, then the properties every answer must have
    (no NaN, all-zero fully masked rows, rows summing to 1), then the generic mismatch."""

    def broken_property() -> str | None:
        return _weights_problem(got, expected, nan_hint, atol)

    _core.expect_close(
        got,
        expected,
        what,
        mistakes,
        atol=atol,
        letters="(..., L_q, L_k)",
        probes=(broken_property,),
    )


def _weights_problem(
    got: torch.Tensor, expected: torch.Tensor, nan_hint: str, atol: float
) -> str | None:
    """The property of attention weights that ``got`` breaks, if any."""
    with torch.no_grad():
        g = got.detach().to(torch.float64)
        dead = expected.sum(dim=-1) == 0  # (..., L_q): queries with every key masked
        if bool(torch.isnan(g).any()):
            if bool(dead.any()) and bool(torch.isnan(g[dead]).any()):
                return DEAD_ROW_NAN
            if nan_hint:
                return nan_hint
        elif bool(dead.any()) and not bool((g[dead] == 0).all()):
            rows = g[dead]
            L_k = g.shape[-1]
            if _core._allclose(rows, torch.full_like(rows, 1.0 / L_k), atol=atol, rtol=1e-5):
                return DEAD_ROW_UNIFORM
            index = tuple(int(i) for i in dead.nonzero()[0])
            row = [round(float(w), 4) for w in g[index]]
            return DEAD_ROW_NOT_ZERO.format(index=index, row=row)
        elif nan_hint and bool(torch.isinf(g).any()):
            return nan_hint
        sums = g.sum(dim=-1)
        bad = ((sums - 1).abs() > 1e-5) & ~dead
        if bool(bad.any()):
            index = tuple(int(i) for i in bad.nonzero()[0])
            return NOT_SUM_TO_1.format(index=index, total=float(sums[index]))
    return None


# --- references and the outputs of the classic mistakes ------------------------------------------


def _reference_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])


def _scale_mistakes(query: torch.Tensor, key: torch.Tensor) -> dict[str, torch.Tensor]:
    d_k, L_q, L_k = query.shape[-1], query.shape[-2], key.shape[-2]
    raw = query @ key.transpose(-2, -1)
    return {
        NOT_SCALED: raw,
        SCALED_BY_D_K: raw / d_k,
        SCALE_MULTIPLIED: raw * math.sqrt(d_k),
        SCALED_BY_L_K: raw / math.sqrt(L_k),
        SCALED_BY_L_Q: raw / math.sqrt(L_q),
    }


def _reference_weights(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax over the keys with masked scores at -inf; fully masked rows give zeros (the
    convention of ``encoder_lib.scaled_dot_product_attention``, which the tests compare)."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    weights = torch.softmax(scores.masked_fill(~mask, _NEG_INF), dim=-1)
    return weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)


def _weight_mistakes(scores: torch.Tensor, mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
    masked = scores if mask is None else scores.masked_fill(~mask, _NEG_INF)
    mistakes = {QUERY_AXIS: torch.softmax(masked, dim=-2)}
    if scores.dim() >= 3:
        mistakes[BATCH_AXIS] = torch.softmax(masked, dim=0)
    if mask is not None:
        mistakes[MASK_REVERSED] = _reference_weights(scores, ~mask)
        mistakes[MASK_AFTER_SOFTMAX] = torch.softmax(scores, dim=-1) * mask
        mistakes[MASK_ADDED] = torch.softmax(scores + mask, dim=-1)
        mistakes[MASK_ZEROED] = torch.softmax(scores * mask, dim=-1)
        mistakes[MASK_IGNORED] = torch.softmax(scores, dim=-1)
    return mistakes


def _pattern_mask() -> torch.Tensor:
    """``(3, 5)``: no row or column all True or all False, so that the polarity and axis
    mistakes give finite, recognisable weights."""
    return torch.tensor(
        [[1, 1, 0, 1, 0], [0, 1, 1, 0, 1], [1, 0, 1, 1, 0]], dtype=torch.bool
    )  # (L_q, L_k)


def _dead_row_mask() -> torch.Tensor:
    """``(2, 3, 5)``: the pattern per sequence, with query 1 of sequence 1 fully masked."""
    mask = _pattern_mask().expand(2, 3, 5).clone()
    mask[0, :, 4] = False  # padding at the end of sequence 0
    mask[1, 1] = False
    return mask


def _describe_mask(mask: torch.Tensor | None) -> str:
    if mask is None:
        return "no mask"
    dead = "" if bool(mask.any(dim=-1).all()) else ", some queries fully masked"
    return f"a {_shape(mask)} mask{dead}"


# --- exercise 1: scores --------------------------------------------------------------------------


@_core.guarded
def check_attention_scores(attention_scores: Callable[..., Any], thorough: bool = False) -> None:
    """``attention_scores(query, key)`` must return Q K^T / sqrt(d_k), shape ``(..., L_q, L_k)``,
    for any number of leading batch axes."""
    cases: list[tuple[tuple[int, ...], tuple[int, ...]]] = [
        ((3, 4), (5, 4)),
        ((2, 3, 4), (2, 5, 4)),
    ]
    if thorough:
        cases += [((2, 3, 4, 8), (2, 3, 6, 8)), ((1, 1, 1), (1, 1, 1))]
    one_sequence_ok = False
    for seed, (q_shape, k_shape) in enumerate(cases):
        query = _core.randn(*q_shape, seed=100 + seed)
        key = _core.randn(*k_shape, seed=200 + seed)
        what = f"attention_scores(query, key) with query {q_shape} and key {k_shape}"
        expected = _reference_scores(query, key)
        mistakes = _scale_mistakes(query, key)
        given = {"query": query.clone(), "key": key.clone()}
        try:
            args = (given["query"], given["key"])
            got = _call(what, attention_scores, args, single_sequence=query.dim() == 2)
            _core.expect_close(got, expected, what, mistakes, letters="(..., L_q, L_k)")
        except (ForbiddenCallError, TamperingError):
            raise
        except GradingError as e:
            if one_sequence_ok and query.dim() > 2:
                raise _batched(e) from e
            raise
        _expect_unchanged("attention_scores", given, {"query": query, "key": key})
        one_sequence_ok = one_sequence_ok or query.dim() == 2
    if not thorough:
        return

    query = _core.randn(2, 3, 4, seed=300, dtype=torch.float32)
    key = _core.randn(2, 5, 4, seed=301, dtype=torch.float32)
    what = "attention_scores(query, key) with float32 query (2, 3, 4) and key (2, 5, 4)"
    got = _call(what, attention_scores, (query.clone(), key.clone()))
    _core.expect_tensor(got, what)
    _core.expect_dtype(got, torch.float32, what, WRONG_DTYPE)
    expected = _reference_scores(query, key)
    _core.expect_close(got, expected, what, atol=1e-5, letters="(..., L_q, L_k)")

    query = _core.randn(2, 3, 4, seed=302).requires_grad_()
    key = _core.randn(2, 5, 4, seed=303).requires_grad_()
    upstream = _core.randn(2, 3, 5, seed=304)
    what = "attention_scores(query, key) with query and key that require gradients"
    expected = torch.autograd.grad(_reference_scores(query, key), (query, key), upstream)
    got = _call(what, attention_scores, (query, key))
    _core.expect_tensor(got, what)
    if not got.requires_grad:
        raise GradingError(NO_GRAD.format(what=what))
    with _core.student_call(f"the backward pass of {what}"):
        grads = torch.autograd.grad(got, (query, key), upstream, allow_unused=True)
    for name, grad, reference in zip(("query", "key"), grads, expected, strict=True):
        if grad is None:
            raise GradingError(NO_GRAD.format(what=what) + f" (no gradient reaches {name})")
        _core.expect_close(grad, reference, f"the gradient of {what} with respect to {name}")


# --- exercise 2: masked softmax ------------------------------------------------------------------


def _masked_softmax_case(
    masked_softmax: Callable[..., Any],
    scores: torch.Tensor,
    mask: torch.Tensor | None,
    nan_hint: str = "",
    atol: float = 1e-6,
) -> None:
    call = "masked_softmax(scores)" if mask is None else "masked_softmax(scores, mask)"
    what = f"{call} with scores {_shape(scores)} and {_describe_mask(mask)}"
    expected = _reference_weights(scores, mask)
    mistakes = _weight_mistakes(scores, mask)
    given = {"scores": scores.clone()}
    args: tuple[Any, ...] = (given["scores"],)
    if mask is not None:
        given["mask"] = mask.clone()
        args += (given["mask"],)
    got = _call(what, masked_softmax, args, single_sequence=scores.dim() == 2)
    _core.expect_tensor(got, what)
    _core.expect_dtype(got, scores.dtype, what, WRONG_DTYPE)
    _expect_weights(got, expected, what, mistakes, nan_hint=nan_hint, atol=atol)
    kept = {"scores": scores} if mask is None else {"scores": scores, "mask": mask}
    _expect_unchanged("masked_softmax", given, kept)


@_core.guarded
def check_masked_softmax(masked_softmax: Callable[..., Any], thorough: bool = False) -> None:
    """``masked_softmax(scores, mask=None)``: softmax over the last axis (the keys), masked
    positions (mask False) exactly 0, a fully masked row all 0 (no NaN), any leading axes."""
    scores = _core.randn(2, 3, 5, seed=400) * 2
    _masked_softmax_case(masked_softmax, scores, None)
    _masked_softmax_case(masked_softmax, scores, _pattern_mask())
    _masked_softmax_case(masked_softmax, scores, _dead_row_mask())
    _masked_softmax_case(masked_softmax, _core.randn(2, 3, 5, seed=401) * 1000, None, OVERFLOW)
    if not thorough:
        return

    _masked_softmax_case(masked_softmax, scores, _core.keep_first([4, 2], 5, 1))  # (B, 1, L_k)
    scores4 = _core.randn(2, 2, 3, 4, seed=402)
    _masked_softmax_case(masked_softmax, scores4, _core.keep_first([3, 0], 4, 2))  # (B, 1, 1, L_k)
    _masked_softmax_case(
        masked_softmax, _core.randn(3, 5, seed=403), torch.tensor([True, False, True, True, False])
    )
    one = _core.randn(1, 1, seed=404)
    _masked_softmax_case(masked_softmax, one, torch.tensor([[True]]))
    _masked_softmax_case(masked_softmax, one, torch.tensor([[False]]))
    _masked_softmax_case(masked_softmax, _core.randn(2, 4, seed=405), torch.zeros(2, 4, dtype=bool))
    _masked_softmax_case(
        masked_softmax,
        _core.randn(2, 3, 5, seed=406, dtype=torch.float32) * 2,
        _dead_row_mask(),
        atol=1e-6,
    )

    scores = (_core.randn(2, 3, 5, seed=407) * 2).requires_grad_()
    mask = _pattern_mask()
    upstream = _core.randn(2, 3, 5, seed=408)
    what = "masked_softmax(scores, mask) with scores that require gradients"
    (expected,) = torch.autograd.grad(_reference_weights(scores, mask), scores, upstream)
    got = _call(what, masked_softmax, (scores, mask))
    _core.expect_tensor(got, what)
    if not got.requires_grad:
        raise GradingError(NO_GRAD.format(what=what))
    with _core.student_call(f"the backward pass of {what}"):
        (grad,) = torch.autograd.grad(got, scores, upstream, allow_unused=True)
    if grad is None:
        raise GradingError(NO_GRAD.format(what=what))
    _core.expect_close(grad, expected, f"the gradient of {what} with respect to scores")


# --- exercise 3: causal mask ---------------------------------------------------------------------


@_core.guarded
def check_causal_mask(causal_mask: Callable[..., Any], thorough: bool = False) -> None:
    """``causal_mask(L)``: a boolean ``(L, L)`` tensor, True on and below the diagonal."""
    for L in (4, 1, 2, 7) if thorough else (4,):
        what = f"causal_mask({L})"
        got = _call(what, causal_mask, (L,), forbidden_python=_FORBIDDEN_MASK)
        _core.expect_tensor(got, what)
        if got.dtype != torch.bool:
            if got.is_floating_point() and bool(torch.isneginf(got).any()):
                raise GradingError(f"{what} {CAUSAL_ADDITIVE}")
            raise GradingError(f"{what} " + CAUSAL_NOT_BOOL.format(dtype=got.dtype))
        _core.expect_shape(got, (L, L), what, "(L, L)")
        expected = torch.ones(L, L, dtype=torch.bool).tril()
        if _core._equal(got, expected):
            continue
        mistakes = {
            CAUSAL_UPPER: expected.mT,
            CAUSAL_REVERSED: ~expected,
            CAUSAL_NO_DIAGONAL: expected.tril(-1),
            CAUSAL_ALL_TRUE: torch.ones(L, L, dtype=torch.bool),
        }
        for description, wrong in mistakes.items():
            if _core._equal(got, wrong):
                raise GradingError(f"{what} is wrong: {description}")
        row = int((got != expected).any(dim=-1).nonzero()[0])
        raise GradingError(
            f"{what} is wrong: row {row} (query {row}) should be True in columns 0..{row} and "
            f"False after, got {[bool(x) for x in got[row]]}."
        )


# --- exercise 4: attention -----------------------------------------------------------------------


def _attention_case(
    attention: Callable[..., Any],
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    atol: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    call = "query, key, value" + ("" if mask is None else ", mask")
    what = (
        f"scaled_dot_product_attention({call}) with query {_shape(query)}, key {_shape(key)}, "
        f"value {_shape(value)} and {_describe_mask(mask)}"
    )
    expected_out, expected_w = encoder_lib.scaled_dot_product_attention(query, key, value, mask)
    assert expected_w is not None
    scores = _reference_scores(query, key)
    mistakes = _weight_mistakes(scores, mask)
    mistakes.update(
        {d: _reference_weights(s, mask) for d, s in _scale_mistakes(query, key).items()}
    )
    mistakes[SCORES_AS_WEIGHTS] = scores

    same = query is key and key is value  # self-attention: one tensor given three times
    x = query.clone()
    if same:
        given = {"query": x, "key": x, "value": x}
    else:
        given = {"query": query.clone(), "key": key.clone(), "value": value.clone()}
    args: tuple[Any, ...] = (given["query"], given["key"], given["value"])
    if mask is not None:
        given["mask"] = mask.clone()
        args += (given["mask"],)
    result = _call(what, attention, args, single_sequence=query.dim() == 2)

    if _core._type(result) is _core._Tensor:
        raise GradingError(
            f"{what} returned a single tensor of shape {_shape(result)}: it must return the pair "
            "(output, weights), e.g. `return output, weights`."
        )
    if not _core._isinstance(result, tuple | list) or len(result) != 2:
        raise GradingError(
            f"{what} returned {_core._type(result).__name__}: it must return the pair "
            "(output, weights)."
        )
    out, weights = result
    _core.expect_tensor(out, f"the output of {what}")
    _core.expect_tensor(weights, f"the weights returned by {what}")
    swapped = _shape(out) == _shape(expected_w) and _shape(weights) == _shape(expected_out)
    if swapped and _shape(expected_w) != _shape(expected_out):
        raise GradingError(f"{what} is wrong: {PAIR_SWAPPED}")
    if _shape(out) == _shape(expected_w) and _core._close(out, weights):
        raise GradingError(f"{what} is wrong: {FORGOT_V}")
    _core.expect_dtype(out, query.dtype, f"the output of {what}", WRONG_DTYPE)
    _expect_weights(weights, expected_w, f"the weights returned by {what}", mistakes, atol=atol)
    _core.expect_close(
        out, expected_out, f"the output of {what}", atol=atol, letters="(..., L_q, d_v)"
    )
    kept = {"query": query, "key": key, "value": value}
    if mask is not None:
        kept["mask"] = mask
    _expect_unchanged("scaled_dot_product_attention", given, kept)
    return out, weights


@_core.guarded
def check_scaled_dot_product_attention(
    scaled_dot_product_attention: Callable[..., Any], thorough: bool = False
) -> None:
    """``scaled_dot_product_attention(query, key, value, mask=None)`` must return
    ``(output, weights)``: weights ``(..., L_q, L_k)`` = masked softmax of Q K^T / sqrt(d_k),
    output ``(..., L_q, d_v)`` = weights @ V; a fully masked query gives zero weights and output."""
    attention = scaled_dot_product_attention
    q, k, v = _core.randn(3, 4, seed=500), _core.randn(5, 4, seed=501), _core.randn(5, 6, seed=502)
    _attention_case(attention, q, k, v, None)
    q, k = _core.randn(2, 3, 4, seed=503), _core.randn(2, 5, 4, seed=504)
    v = _core.randn(2, 5, 6, seed=505)
    try:
        _attention_case(attention, q, k, v, None)
    except (ForbiddenCallError, TamperingError):
        raise
    except GradingError as e:
        raise _batched(e) from e
    _attention_case(attention, q, k, v, _pattern_mask())
    _attention_case(attention, q, k, v, _dead_row_mask())
    if not thorough:
        return

    q, k = _core.randn(2, 2, 3, 4, seed=506), _core.randn(2, 2, 5, 4, seed=507)
    v = _core.randn(2, 2, 5, 6, seed=508)
    _attention_case(attention, q, k, v, _core.keep_first([5, 2], 5, 2))  # (B, 1, 1, L_k)
    q, k, v = (_core.randn(1, 1, n, seed=509 + n) for n in (2, 2, 3))
    _attention_case(attention, q, k, v, torch.tensor([[False]]))
    _attention_case(attention, q, k, v, None)
    x = _core.randn(2, 4, 3, seed=520)
    _attention_case(attention, x, x, x, torch.ones(4, 4, dtype=torch.bool).tril())
    q, k, v = (_core.randn(2, n, 4, seed=521 + n, dtype=torch.float32) for n in (3, 5, 5))
    _attention_case(attention, q, k, v, _dead_row_mask(), atol=1e-5)

    leaves = [
        _core.randn(2, n, d, seed=530 + n + d).requires_grad_() for n, d in ((3, 4), (5, 4), (5, 6))
    ]
    mask = _pattern_mask()
    up_out, up_w = _core.randn(2, 3, 6, seed=540), _core.randn(2, 3, 5, seed=541)
    ref_out, ref_w = encoder_lib.scaled_dot_product_attention(*leaves, mask)
    assert ref_w is not None
    expected = torch.autograd.grad((ref_out, ref_w), leaves, (up_out, up_w))
    what = (
        "scaled_dot_product_attention(query, key, value, mask) with inputs that require gradients"
    )
    out, weights = _call(what, attention, (*leaves, mask))
    if not (out.requires_grad and weights.requires_grad):
        raise GradingError(NO_GRAD.format(what=what))
    with _core.student_call(f"the backward pass of {what}"):
        grads = torch.autograd.grad((out, weights), leaves, (up_out, up_w), allow_unused=True)
    for name, grad, reference in zip(("query", "key", "value"), grads, expected, strict=True):
        if grad is None:
            raise GradingError(NO_GRAD.format(what=what) + f" (no gradient reaches {name})")
        _core.expect_close(grad, reference, f"the gradient of {what} with respect to {name}")
