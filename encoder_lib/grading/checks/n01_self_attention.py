"""Notebook 01: self-attention, as data for the runner.

- ``check_attention_scores(attention_scores)``: Q K^T / sqrt(d_k), shape ``(..., L_q, L_k)``, for
  any number of leading batch axes.
- ``check_masked_softmax(masked_softmax)``: softmax over the keys, masked keys (mask False) at
  exactly 0, a fully masked query row all zeros (no NaN), large scores without overflow.
- ``check_causal_mask(causal_mask)``: a boolean ``(L, L)`` tensor, True on and below the diagonal.
- ``check_scaled_dot_product_attention(scaled_dot_product_attention)``: the pair
  ``(output (..., L_q, d_v), weights (..., L_q, L_k))``.

The catalogue (each mistake has a BUGGY answer in tests/variants/a01_self_attention.py): scores
not scaled, divided by d_k, multiplied by sqrt(d_k), divided by the square root of a length;
an answer right on a single sequence but wrong with batch axes in front (``key.T``,
``key.transpose(0, 1)``, ``torch.mm``) or that counts axes from the front; the softmax over the
query or the batch axis; the mask reversed, applied after the softmax, added to the scores,
multiplied in, ignored; a fully masked row giving NaN or uniform weights; exp overflowing; rows
that do not sum to 1; the scores returned as weights; the output equal to the weights (V
forgotten) or the pair swapped; a causal mask in the upper triangle, reversed, without its
diagonal, all True, 0/1 floats or additive 0/-inf floats. ``F.scaled_dot_product_attention``,
``F.multi_head_attention_forward`` (hence ``nn.MultiheadAttention``) and encoder_lib's attention
(and, for the causal mask, ``encoder_lib.causal_mask``) are forbidden.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

import encoder_lib

from ..feedback import GradingError, Mistake
from ..kernel.forbidden import Forbidden
from ..kernel.observe import Call, Failure, Observation
from ..runner import register_given
from ..vocabulary import Ask, Case, backpropagating, close, keep_first, randn

__all__ = [
    "check_attention_scores",
    "check_masked_softmax",
    "check_causal_mask",
    "check_scaled_dot_product_attention",
]


_TORCH = {
    F.scaled_dot_product_attention: "F.scaled_dot_product_attention",
    F.multi_head_attention_forward: "F.multi_head_attention_forward (nn.MultiheadAttention)",
}


_LIBRARY = (encoder_lib.scaled_dot_product_attention, encoder_lib.MultiHeadAttention)


def _forbidden(*own: Any) -> Forbidden:
    """Torch's attention built-ins, encoder_lib's attention and the given encoder_lib functions."""
    library = (*_LIBRARY, *own)
    return Forbidden(_TORCH, {obj: f"{obj.__module__}.{obj.__qualname__}" for obj in library})


_NEG_INF = float("-inf")
_Upstream = tuple[torch.Tensor, ...] | None
"""One tensor per output, backpropagated: ``Call.upstream``; None: no backward pass."""

# --- the messages that are not a catalogue entry -------------------------------------------------

DEAD_ROW_NAN = Mistake(
    "dead-row-nan",
    "a query whose keys are ALL masked gives NaN: the softmax of a row of -inf is 0/0. Such a row "
    "must give all-zero weights (as F.scaled_dot_product_attention does): find the rows where "
    "mask has no True and set their weights to 0.",
)
DEAD_ROW_UNIFORM = Mistake(
    "dead-row-uniform",
    "a query whose keys are ALL masked gets the same weight 1/L_k for every key: that is what a "
    "finite fill value such as -1e9 gives (all its scores are then equal). Such a row must give "
    "all-zero weights: find the rows where mask has no True and set their weights to 0.",
)
DEAD_ROW_NOT_ZERO = Mistake(
    "dead-row-not-zero",
    "a query whose keys are ALL masked must get all-zero weights (and so a zero output), but "
    "row {index} is {row}.",
)
OVERFLOW = Mistake(
    "exp-overflow",
    "large scores (around 1000) give NaN or inf: exp overflows. Subtract each row's maximum "
    "before exp (the softmax does not change when a constant is subtracted from a row), or use "
    "torch.softmax, which does this for you.",
)
NOT_SUM_TO_1 = Mistake(
    "rows-not-sum-to-1",
    "each query's weights must sum to 1 over the keys (the last axis), but row {index} sums to "
    "{total:.4g}.",
)
FORGOT_V = Mistake(
    "output-is-weights",
    "the output equals the attention weights: multiply the weights by the values "
    "(weights @ value) to get the output.",
)
PAIR_SWAPPED = Mistake(
    "pair-swapped", "the pair is in the wrong order: return (output, weights), output first."
)
BATCH_AXES = Mistake(
    "batch-axes",
    "{error}Your function works on a single sequence (2-D inputs) but not with a batch axis in "
    "front: count axes from the end (the last one is d_k whatever comes before it), swap only "
    "the last two axes of key (key.T reverses every axis, so on a batched tensor it moves the "
    "batch axis too) and use a matrix product that broadcasts over batch axes (@, not torch.mm).",
)
BATCH_AXES_HINT = (
    "negative axes count from the end: shape[-1] and a transpose of the axes -2 and -1 mean the "
    "same on (L, d_k) and on (B, H, L, d_k); tensors also have .mT, the transpose of the last "
    "two axes."
)
KEY_NOT_TRANSPOSED = Mistake(
    "key-not-transposed",
    "Is key transposed? A product A @ B needs A's last axis as long as B's second-to-last. "
    "The scores Q K^T multiply query (..., L_q, d_k) by key TRANSPOSED, (..., d_k, L_k), so "
    "that every query meets every key; key as it is, (..., L_k, d_k), does not fit. Swap the "
    "last two axes of key before the product.",
    "a tensor's transpose method takes the two axes to swap; name them from the end (negative "
    "axes) so that batch axes in front stay where they are.",
)
SINGLE_SEQUENCE = Mistake(
    "single-sequence-axes",
    "These inputs are a single sequence with no batch axis: count axes from the end (-1, -2), "
    "so that the code works for any number of leading batch axes.",
)
CAUSAL_ADDITIVE = Mistake(
    "causal-additive",
    "the mask should be a boolean tensor (True = may attend), but it is an additive float mask of "
    "0 and -inf, PyTorch's other convention (nn.Transformer.generate_square_subsequent_mask). "
    "This course's masks are boolean.",
)
CAUSAL_NOT_BOOL = Mistake(
    "causal-not-bool",
    "{slot} should be a boolean tensor (dtype torch.bool, True = may attend), got dtype {got}. "
    "Build it with dtype=torch.bool, a comparison, or .bool().",
)
CAUSAL_ROW = Mistake(
    "mismatch",
    "row {row} (query {row}) should be True in columns 0..{row} and False after, got {got}.",
)


# --- what every function exercise shares ---------------------------------------------------------


def _first_dim(case: Case) -> int:
    first = case.call.args[0] if case.call.args else None
    return first.dim() if isinstance(first, torch.Tensor) else 0


def _batched(error: GradingError, case: Case, passed: list[Case]) -> GradingError:
    """An answer right on a single sequence that fails on the first batched input is told so."""
    if type(error) is not GradingError or _first_dim(case) <= 2:
        return error
    if max((_first_dim(p) for p in passed), default=0) != 2:
        return error
    problem = error.problem.rstrip()
    problem += " " if problem.endswith(".") else ". "
    return GradingError(BATCH_AXES.format(error=problem), where=error.where, hint=BATCH_AXES_HINT)


def _single_sequence_hint(failure: Failure) -> str | None:
    return SINGLE_SEQUENCE if failure.error == "IndexError" else _matmul_hint(failure)


def _scores_hint(failure: Failure) -> str | None:
    if failure.error == "IndexError":
        return SINGLE_SEQUENCE
    return _matmul_hint(failure, anywhere=True)


_MATMUL_ERRORS = ("cannot be multiplied", "Expected size for first two dimensions of batch2")


def _matmul_hint(failure: Failure, anywhere: bool = False) -> str | None:
    """A product of query and key that does not fit: key not transposed (``query @ key``). In
    attention_scores (``anywhere``) every product is one; elsewhere, on a line naming both."""
    line = (failure.where or "").lower()
    matmul = failure.error == "RuntimeError" and any(e in failure.message for e in _MATMUL_ERRORS)
    ours = anywhere or ("key" in line and "query" in line)
    return KEY_NOT_TRANSPOSED if matmul and ours else None


def _case(
    target: str,
    params: tuple[str, ...],
    args: tuple[torch.Tensor, ...],
    tensors: str,
    upstream: _Upstream = None,
    **fields: Any,
) -> Case:
    """``target(*args)`` (``params``: its parameters' names; ``tensors``: the inputs in words),
    expected to equal the reference's value (the exercise's, or ``reference=`` in ``fields``);
    with ``upstream``, backpropagated, and the gradients of the float arguments compared with the
    reference's (the runner derives both)."""
    case = Case(
        Call(target, target, args),
        f"{target}({', '.join(params[: len(args)])}) with {_dtype(args[0])}{tensors}",
        inputs={f"args[{i}]": name for i, name in enumerate(params)},
        failure_hint=fields.pop(
            "failure_hint", _single_sequence_hint if args[0].dim() == 2 else _matmul_hint
        ),
        **fields,
    )
    return case if upstream is None else backpropagating(case, *upstream)


def _shape(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(x.shape)


def _dtype(x: torch.Tensor) -> str:
    return "" if x.dtype == torch.float64 else f"{str(x.dtype).removeprefix('torch.')} "


# --- references and the outputs of the classic mistakes ------------------------------------------


def _reference_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])


def _scale_mistakes(query: torch.Tensor, key: torch.Tensor) -> dict[str, torch.Tensor]:
    d_k, L_q, L_k = query.shape[-1], query.shape[-2], key.shape[-2]
    raw = query @ key.transpose(-2, -1)
    return {
        Mistake(
            "not-scaled",
            "the scores are not scaled. Divide Q K^T by sqrt(d_k), where d_k = query.shape[-1], so "
            "that their spread does not grow with the width of the vectors.",
        ): raw,
        Mistake(
            "scaled-by-d-k",
            "the scores are divided by d_k instead of sqrt(d_k) (or by sqrt(d_k) twice). Divide "
            "Q K^T once by math.sqrt(d_k).",
        ): raw / d_k,
        Mistake(
            "multiplied-by-sqrt-d-k",
            "the scores are multiplied by sqrt(d_k) instead of divided by it.",
        ): raw * math.sqrt(d_k),
        Mistake(
            "scaled-by-sqrt-l-k",
            "the scores are divided by sqrt(L_k), the number of keys. d_k is the size of the LAST "
            "axis of query and key (query.shape[-1]).",
        ): raw / math.sqrt(L_k),
        Mistake(
            "scaled-by-sqrt-l-q",
            "the scores are divided by sqrt(L_q), the number of queries. d_k is the size of the "
            "LAST axis of query and key (query.shape[-1]).",
        ): raw / math.sqrt(L_q),
    }


def _reference_weights(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax over the keys with masked scores at -inf; fully masked rows give zeros (the
    convention of ``encoder_lib.scaled_dot_product_attention``, which the tests compare)."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    weights = torch.softmax(scores.masked_fill(~mask, _NEG_INF), dim=-1)
    return weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)


def _weight_mistakes(scores: torch.Tensor, mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
    masked = scores if mask is None else scores.masked_fill(~mask, _NEG_INF)
    over_queries = torch.softmax(masked, dim=-2)
    mistakes = {
        Mistake(
            "softmax-over-queries",
            "the softmax is taken over the query axis (dim=-2; for a single sequence of scores "
            "(L_q, L_k) that is also dim=0), so each column sums to 1. Each query's weights over "
            "the keys must sum to 1: take the softmax over the last axis, dim=-1.",
        ): over_queries
    }
    if scores.dim() >= 3:
        mistakes[
            Mistake(
                "softmax-over-batch",
                "the softmax is taken over dim=0, the batch axis, which mixes different sequences. "
                "Take it over the last axis (the keys), dim=-1.",
            )
        ] = torch.softmax(masked, dim=0)
    if mask is None:
        return mistakes
    unmasked = torch.softmax(scores, dim=-1)
    return mistakes | {
        Mistake(
            "mask-reversed",
            "the mask polarity is reversed: the positions where mask is True got weight 0. In this "
            "course True means 'may attend' (as in F.scaled_dot_product_attention), so the "
            "positions to remove are those where mask is False (~mask). nn.MultiheadAttention's "
            "key_padding_mask is the opposite convention.",
        ): _reference_weights(scores, ~mask),
        Mistake(
            "mask-after-softmax",
            "the mask is applied after the softmax: zeroing weights afterwards leaves rows that no "
            "longer sum to 1. Put -inf in the masked scores before the softmax.",
        ): unmasked * mask,
        Mistake(
            "mask-added",
            "the boolean mask was added to the scores (True counts as 1, False as 0), which only "
            "shifts the allowed scores by 1 and removes nothing. Masked positions need a score of "
            "-inf before the softmax.",
        ): torch.softmax(scores + mask, dim=-1),
        Mistake(
            "mask-multiplied",
            "the masked scores were set to 0 (e.g. scores * mask) instead of -inf: exp(0) = 1, so "
            "masked keys still get weight. Use -inf.",
        ): torch.softmax(scores * mask, dim=-1),
        Mistake(
            "mask-ignored", "the mask is ignored: keys where mask is False still get weight."
        ): unmasked,
    }


def _weights_problem(got: torch.Tensor, expected: torch.Tensor, nan_hint: str) -> str | None:
    """The property of attention weights that ``got`` breaks, if any: NaN or non-zero weights in
    a fully masked row, NaN or inf elsewhere (``nan_hint``), rows that do not sum to 1."""
    g = got.to(torch.float64)
    dead = expected.sum(dim=-1) == 0  # (..., L_q): queries with every key masked
    if bool(torch.isnan(g).any()):
        if bool(dead.any()) and bool(torch.isnan(g[dead]).any()):
            return DEAD_ROW_NAN
        if nan_hint:
            return nan_hint
    elif bool(dead.any()) and not bool((g[dead] == 0).all()):
        rows = g[dead]
        if close(rows, torch.full_like(rows, 1.0 / g.shape[-1])):
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


def _pattern_mask() -> torch.Tensor:
    """``(L_q, L_k) = (3, 5)``: no row or column all True or all False, so that the polarity and
    axis mistakes give finite, recognisable weights."""
    return torch.tensor([[1, 1, 0, 1, 0], [0, 1, 1, 0, 1], [1, 0, 1, 1, 0]], dtype=torch.bool)


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


def _scores_case(query: torch.Tensor, key: torch.Tensor, upstream: _Upstream = None) -> Case:
    return _case(
        "attention_scores",
        ("query", "key"),
        (query, key),
        f"query {_shape(query)} and key {_shape(key)}",
        upstream,
        mistakes=lambda: _scale_mistakes(query, key),
        failure_hint=_scores_hint,
    )


def _scores_cases(thorough: bool) -> Iterator[Case]:
    shapes = [((3, 4), (5, 4)), ((2, 3, 4), (2, 5, 4))]
    if thorough:
        shapes += [((2, 3, 4, 8), (2, 3, 6, 8)), ((1, 1, 1), (1, 1, 1))]
    for seed, (q_shape, k_shape) in enumerate(shapes):
        yield _scores_case(randn(*q_shape, seed=100 + seed), randn(*k_shape, seed=200 + seed))
    if not thorough:
        return
    query32 = randn(2, 3, 4, seed=300, dtype=torch.float32)
    yield _scores_case(query32, randn(2, 5, 4, seed=301, dtype=torch.float32))
    query, key = randn(2, 3, 4, seed=302), randn(2, 5, 4, seed=303)
    yield _scores_case(query, key, upstream=(randn(2, 3, 5, seed=304),))


check_attention_scores = register_given(
    1,
    "def attention_scores(query, key):",
    _scores_cases,
    rewrite=_batched,
    reference=_reference_scores,
    forbidden=_forbidden(),
    slots=("the scores tensor",),
    letters=("(..., L_q, L_k)",),
)


# --- exercise 2: masked softmax ------------------------------------------------------------------


def _softmax_case(
    scores: torch.Tensor, mask: torch.Tensor | None, nan_hint: str = "", upstream: _Upstream = None
) -> Case:
    case = _case(
        "masked_softmax",
        ("scores", "mask"),
        (scores,) if mask is None else (scores, mask),
        f"scores {_shape(scores)} and {_describe_mask(mask)}",
        upstream,
        mistakes=lambda: _weight_mistakes(scores, mask),
        probes=(lambda obs, ask: _weights_problem(obs.value, case.expected, nan_hint),),
    )
    return case


def _softmax_cases(thorough: bool) -> Iterator[Case]:
    scores = randn(2, 3, 5, seed=400) * 2
    yield _softmax_case(scores, None)
    yield _softmax_case(scores, _pattern_mask())
    yield _softmax_case(scores, _dead_row_mask())
    yield _softmax_case(randn(2, 3, 5, seed=401) * 1000, None, OVERFLOW)
    if not thorough:
        return
    yield _softmax_case(scores, keep_first([4, 2], 5, 1))  # (B, 1, L_k)
    yield _softmax_case(randn(2, 2, 3, 4, seed=402), keep_first([3, 0], 4, 2))  # (B, 1, 1, L_k)
    yield _softmax_case(randn(3, 5, seed=403), torch.tensor([True, False, True, True, False]))
    one = randn(1, 1, seed=404)
    yield _softmax_case(one, torch.tensor([[True]]))
    yield _softmax_case(one, torch.tensor([[False]]))
    yield _softmax_case(randn(2, 4, seed=405), torch.zeros(2, 4, dtype=torch.bool))
    yield _softmax_case(randn(2, 3, 5, seed=406, dtype=torch.float32) * 2, _dead_row_mask())
    scores, upstream = randn(2, 3, 5, seed=407) * 2, randn(2, 3, 5, seed=408)
    yield _softmax_case(scores, _pattern_mask(), upstream=(upstream,))


check_masked_softmax = register_given(
    2,
    "def masked_softmax(scores, mask=None):",
    _softmax_cases,
    rewrite=_batched,
    reference=_reference_weights,
    forbidden=_forbidden(),
    slots=("the weights tensor",),
    letters=("(..., L_q, L_k)",),
)


# --- exercise 3: causal mask ---------------------------------------------------------------------


def _additive(obs: Observation) -> str | None:
    value = obs.value
    additive = isinstance(value, torch.Tensor) and value.is_floating_point()
    return CAUSAL_ADDITIVE if additive and bool(torch.isneginf(value).any()) else None


def _causal_case(L: int) -> Case:
    expected = torch.ones(L, L, dtype=torch.bool).tril()

    def wrong_row(obs: Observation, ask: Ask) -> str:
        got = obs.value
        row = int((got != expected).any(dim=-1).nonzero()[0])
        return CAUSAL_ROW.format(row=row, got=[bool(x) for x in got[row]])

    return Case(
        Call("causal_mask", "causal_mask", (L,)),
        f"causal_mask({L})",
        expected=expected,
        mistakes={
            Mistake(
                "causal-upper-triangle",
                "True is on and above the diagonal (the upper triangle). Row i is query i, which "
                "may attend to keys 0..i: True must be on and below the diagonal (torch.tril).",
            ): expected.mT,
            Mistake(
                "causal-reversed",
                "the polarity is reversed: True marks the future keys, which must NOT be attended. "
                "In this course True means 'may attend': row i is True in columns 0..i.",
            ): ~expected,
            Mistake(
                "causal-no-diagonal",
                "the diagonal is False, but each position may attend to itself: row i is True in "
                "columns 0..i, including i.",
            ): expected.tril(-1),
            Mistake(
                "causal-all-true",
                "every entry is True, so nothing is masked: query i must not see keys j > i.",
            ): (torch.ones(L, L, dtype=torch.bool)),
        },
        probes=(wrong_row,),
    )


def _causal_cases(thorough: bool) -> Iterator[Case]:
    for L in (4, 1, 2, 7) if thorough else (4,):
        yield _causal_case(L)


check_causal_mask = register_given(
    3,
    "def causal_mask(L):",
    _causal_cases,
    rewrite=_batched,
    forbidden=_forbidden(encoder_lib.causal_mask),
    precheck=_additive,
    slots=("the mask",),
    letters=("(L, L)",),
    messages={"dtype": CAUSAL_NOT_BOOL},
)


# --- exercise 4: attention -----------------------------------------------------------------------


def _attention_case(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    upstream: _Upstream = None,
) -> Case:
    if query is key and key is value:
        tensors = f"x {_shape(query)} given as query, key and value"
    else:
        tensors = f"query {_shape(query)}, key {_shape(key)}, value {_shape(value)}"

    def mistakes() -> dict[str, tuple[None, torch.Tensor]]:
        scores = _reference_scores(query, key)
        weights = _weight_mistakes(scores, mask)
        for description, wrong_scores in _scale_mistakes(query, key).items():
            weights[description] = _reference_weights(wrong_scores, mask)
        weights[
            Mistake(
                "weights-before-softmax", "the weights are the scaled scores, before the softmax."
            )
        ] = scores
        return {description: (None, w) for description, w in weights.items()}

    def output_is_weights(obs: Observation) -> str | None:
        got = obs.value
        if not (isinstance(got, tuple | list) and len(got) == 2):
            return None
        out, weights = got
        if not (isinstance(out, torch.Tensor) and isinstance(weights, torch.Tensor)):
            return None
        want_out, want_w = _shape(case.expected[0]), _shape(case.expected[1])
        if _shape(out) == want_w and _shape(weights) == want_out and want_w != want_out:
            return PAIR_SWAPPED
        if _shape(out) == want_w and close(out, weights):
            return FORGOT_V
        return None

    case = _case(
        "scaled_dot_product_attention",
        ("query", "key", "value", "mask"),
        (query, key, value) + (() if mask is None else (mask,)),
        f"{tensors} and {_describe_mask(mask)}",
        upstream,
        reference=encoder_lib.scaled_dot_product_attention,
        mistakes=mistakes,
        precheck=output_is_weights,
        probes=(lambda obs, ask: _weights_problem(obs.value[1], case.expected[1], ""),),
    )
    return case


def _attention_cases(thorough: bool) -> Iterator[Case]:
    yield _attention_case(randn(3, 4, seed=500), randn(5, 4, seed=501), randn(5, 6, seed=502), None)
    q, k, v = randn(2, 3, 4, seed=503), randn(2, 5, 4, seed=504), randn(2, 5, 6, seed=505)
    yield _attention_case(q, k, v, None)
    yield _attention_case(q, k, v, _pattern_mask())
    yield _attention_case(q, k, v, _dead_row_mask())
    if not thorough:
        return
    q, k = randn(2, 2, 3, 4, seed=506), randn(2, 2, 5, 4, seed=507)
    v = randn(2, 2, 5, 6, seed=508)
    yield _attention_case(q, k, v, keep_first([5, 2], 5, 2))  # (B, 1, 1, L_k)
    q, k, v = (randn(1, 1, n, seed=509 + n) for n in (2, 2, 3))
    yield _attention_case(q, k, v, torch.tensor([[False]]))
    yield _attention_case(q, k, v, None)
    x = randn(2, 4, 3, seed=520)
    yield _attention_case(x, x, x, torch.ones(4, 4, dtype=torch.bool).tril())
    q, k, v = (randn(2, n, 4, seed=521 + n, dtype=torch.float32) for n in (3, 5, 5))
    yield _attention_case(q, k, v, _dead_row_mask())
    q, k, v = (randn(2, n, d, seed=530 + n + d) for n, d in ((3, 4), (5, 4), (5, 6)))
    upstream = (randn(2, 3, 6, seed=540), randn(2, 3, 5, seed=541))
    yield _attention_case(q, k, v, _pattern_mask(), upstream)


check_scaled_dot_product_attention = register_given(
    4,
    "def scaled_dot_product_attention(query, key, value, mask=None):",
    _attention_cases,
    rewrite=_batched,
    forbidden=_forbidden(),
    slots=("the output", "the weights tensor"),
    letters=("(..., L_q, d_v)", "(..., L_q, L_k)"),
    order=(1, 0),
)
