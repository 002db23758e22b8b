"""Notebook 07: from the encoder to the decoder, as data for the runner.

- ``check_causal_self_attention(fn)``, exercise (a): ``causal_self_attention(x, attention,
  keep=None)`` builds the decoder's self-attention mask (position i may attend to 0..i, and to no
  target padding when ``keep`` (B, L) is given) and calls ``attention(x, x, x, mask)``. Named: the
  mask on the wrong side of the diagonal, the diagonal left out, the polarity reversed, no mask;
  with padding: the padding ignored, the causal part dropped, ``|`` for ``&``, the padding mask
  applied to the queries, reversed or missing its head axis. A probe changes the last position
  and looks for a change in the earlier outputs (the future leaking in).
- ``check_cross_attention(fn)``, exercise (b): ``cross_attention(x, memory, attention,
  memory_keep=None)``: queries from the decoder ``(B, L_tgt, D)``, keys and values from the
  encoder's output ``(B, L_src, D)``, the source padding mask ``(B, 1, 1, L_src)``. Named: keys
  and values taken from the decoder, values from the decoder, queries from the memory, the
  source mask ignored, reversed, applied to the queries, not reshaped or missing its head axis,
  a causal mask added. A probe changes the padded source positions.
- ``check_decoder_layer(DecoderLayer)``, exercise (c): ``forward(x, memory, tgt_mask=None,
  memory_mask=None)``, post-norm and pre-norm, compared with ``encoder_lib.DecoderLayer`` in eval
  and training mode. Named: the norm in the wrong place (norm_first ignored, norm inside the
  residual branch, normalised skip, memory normalised), a residual missing, no activation, the
  sub-layers in the wrong order, the cross-attention's queries taken from the layer's input, the
  masks ignored, swapped or reversed, keys and values from the decoder; in training, dropout
  missing or in the wrong place; in eval mode, dropout still active.
- ``check_greedy_decode(fn)``, exercise (d): ``greedy_decode(model, src, max_len, start_id=1,
  end_id=2, pad_id=0)`` with a stand-in model (``model(src, tgt_in) -> logits``, causal, its
  prediction depending on everything fed so far). Named: the whole target fed at once, the
  first position read instead of the last, predictions not fed back, only the last token fed,
  no padding after ``<end>``, ``<end>`` itself replaced, stopping when the first sequence ends,
  a finished sequence that starts again, a token drawn (sampled) instead of the argmax, the
  ids hard-coded.

``nn.TransformerDecoderLayer``, ``nn.TransformerDecoder``, ``encoder_lib.DecoderLayer``,
``encoder_lib.TransformerDecoder`` and ``F.multi_head_attention_forward`` are forbidden in (a),
(b) and (c), and ``encoder_lib.causal_mask`` in (a). The attention is handed to (a) and (b)
ready-made (the arithmetic was notebooks 01 and 02's), so ``F.scaled_dot_product_attention``
does none of their work and stays allowed (the given attention may use it).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import encoder_lib

from .. import runner
from ..feedback import Mistake
from ..kernel import observe
from ..kernel.forbidden import Forbidden
from ..kernel.observe import Call, Failure, Observation, Part
from ..locate import Locate
from ..vocabulary import Ask, Case, ModuleSpec, Unchanged, keep_first, randn, redrawn
from . import layer_cases

__all__ = [
    "check_causal_self_attention",
    "check_cross_attention",
    "check_decoder_layer",
    "check_greedy_decode",
]

_DECODERS = {
    nn.TransformerDecoderLayer: "nn.TransformerDecoderLayer",
    nn.TransformerDecoder: "nn.TransformerDecoder",
    encoder_lib.DecoderLayer: "encoder_lib.decoder.DecoderLayer",
    encoder_lib.TransformerDecoder: "encoder_lib.decoder.TransformerDecoder",
}
_MHA_FORWARD = {
    F.multi_head_attention_forward: "F.multi_head_attention_forward (nn.MultiheadAttention, "
    "inside nn.TransformerDecoderLayer)"
}
_NO_DECODERS = Forbidden(torch=_MHA_FORWARD, python=_DECODERS)


# --- the attention handed to exercises (a) and (b) -----------------------------------------------


@observe.part("decoder.attention")
def _build_attention(part: Part) -> nn.Module:
    """An ``encoder_lib.MultiHeadAttention`` in eval mode with the weights the check sent."""
    weights = part.tensors
    D = weights["out_proj.weight"].shape[0]
    with torch.random.fork_rng(devices=[]):
        module = encoder_lib.MultiHeadAttention(D, int(part.options["heads"]))
    module = module.to(weights["in_proj_weight"].dtype)
    module.load_state_dict({name: t.clone() for name, t in weights.items()})
    return module.eval()


def _attention(D: int, H: int, seed: int, dtype: torch.dtype) -> tuple[Part, nn.Module]:
    """The part sent to the student's code (random weights, biases included) and the same
    module here."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = encoder_lib.MultiHeadAttention(D, H).to(torch.float64)
    with torch.no_grad():
        for i, param in enumerate(module.parameters()):
            param.add_(0.3 * randn(*param.shape, seed=seed * 10 + i))
    tensors = {name: t.to(dtype) for name, t in module.state_dict().items()}
    part = Part("decoder.attention", tensors, {"heads": H})
    return part, _build_attention(part)


def _calls_once(obs: Observation, ask: Ask) -> str | None:
    calls = obs.info.get("parts", [1])[0]
    if calls != 1:
        return Mistake(
            "attention-called-more-than-once",
            f"it calls attention {calls} times: call it once, with one mask that says everything "
            "(each call costs a full attention pass).",
        )
    return None


def _needs_weights(failure: Failure) -> str | None:
    if "has no attribute" in failure.message:
        return Mistake(
            "attention-attributes-used",
            "The check hands your function an attention module that is only called, as "
            "attention(query, key, value, mask): it returns the pair (output, weights).",
        )
    return None


_ATTENTION_SLOTS = ("the output", "the weights")
_BEFORE_LAST = (slice(None), slice(None, -1))  # [:, :-1]: every position before the last


def _dtype_note(dtype: torch.dtype) -> str:
    """How a case's description names a dtype other than float64."""
    return "" if dtype == torch.float64 else f" ({dtype})"


# --- (a) causal self-attention -------------------------------------------------------------------


_CAUSAL_HINT = (
    "start from an (L, L) tensor of True (dtype=torch.bool) and keep its lower triangle: torch "
    "has a method for the lower triangle of a matrix (notebook 01's causal_mask is exactly it)."
)
_COMBINE_HINT = (
    "combine two boolean masks with & (both must allow). keep is (B, L): indexing it with None "
    "inserts a size-1 axis; insert one for the heads and one for the queries so that it becomes "
    "(B, 1, 1, L), and & with the (L, L) causal mask broadcasts to (B, 1, L, L)."
)


def _no_head_axis(what: str, rows: bool = False) -> Mistake:
    also = ", and its padding runs along the queries (the rows) instead of the keys" if rows else ""
    return Mistake(
        "mask-without-head-axis",
        f"{what} has three axes, with no axis for the heads{also}: the scores are "
        "(B, H, L_q, L_k), and broadcasting lines shapes up from the right, so a three-axis "
        "mask meets them as (1, B, ..., ...): its batch axis lands on the heads' axis, and "
        "each head gets another sentence's padding (or the shapes do not fit at all). Give "
        "the padding mask one axis for the heads and one for the queries, (B, 1, 1, L_k), so "
        "that its L axis lines up with the keys (the columns).",
    )


def _fits(mask_shape: tuple[int, ...], scores: tuple[int, ...]) -> bool:
    try:
        return torch.broadcast_shapes(mask_shape, scores) == scores
    except RuntimeError:
        return False


_THREE_AXES = re.compile(r"got shape \(\d+, \d+, \d+\)")


def _causal_mistakes(ref, x, keep) -> dict[str, Any]:
    L = x.shape[1]
    ones = torch.ones(L, L, dtype=torch.bool)
    causal = ones.tril()
    pad = None if keep is None else keep[:, None, None, :]  # (B, 1, 1, L)

    def attend(mask):
        return lambda: ref(x, x, x, mask)

    def with_pad(mask):
        return mask if pad is None else mask & pad

    entries = {
        Mistake(
            "causal-upper-triangle",
            "the mask is on the wrong side of the diagonal: position i may attend to i and the "
            "positions after it, i.e. to the future. The causal mask is True on and below the "
            "diagonal (the lower triangle): query i sees keys 0..i.",
        ): attend(with_pad(ones.triu())),
        Mistake(
            "causal-no-diagonal",
            "the mask leaves out the diagonal: position i may not attend to itself, and position 0 "
            "has nothing at all to attend to (its output is zero). Keep the diagonal: the lower "
            "triangle with the diagonal included (offset 0, not -1).",
        ): attend(with_pad(ones.tril(-1))),
        Mistake(
            "causal-reversed",
            "the mask has the wrong polarity: True must mean 'may attend'. Your mask is True above "
            "the diagonal, the future: the lower triangle itself is the mask, with no ~.",
        ): attend(with_pad(~causal)),
    }
    if keep is None:
        entries[
            Mistake(
                "no-causal-mask",
                "no causal mask reaches the attention: every position sees the whole target, "
                "the future included. Give the attention a causal mask: an (L, L) boolean "
                "tensor, True on and below the diagonal (True = may attend).",
                _CAUSAL_HINT,
            )
        ] = attend(None)
    else:
        entries |= {
            Mistake(
                "keep-ignored",
                "it ignores keep: the padded target positions stay visible. A key may be "
                "attended only if it is in the past AND real, so the mask is both conditions at "
                "once: the causal mask (L, L) and keep, with keep laid out as one value per key "
                "(a column of the scores (B, H, L, L)), the same for every head and query.",
                _COMBINE_HINT,
            ): attend(causal),
            Mistake(
                "causal-part-ignored",
                "it ignores the causal part and masks only the padding: position i still sees "
                "the future. A key may be attended only if it is in the past AND real: the "
                "mask must hold both conditions, the causal one and the padding one.",
                _COMBINE_HINT,
            ): attend(pad),
            Mistake(
                "masks-combined-with-or",
                "it combines the two masks with | (or): a key that is in the past OR real is "
                "visible, so the future shows through. A key must be both: use &.",
            ): attend(causal | pad),
            Mistake(
                "padding-masks-queries",
                "the padding mask is applied to the queries (keep[:, None, :, None], the rows) "
                "instead of the keys: padding is something no query may look at, so it masks the "
                "columns, the last axis of the scores: keep's L axis must line up with the keys' "
                "axis.",
            ): attend(causal & keep[:, None, :, None]),
            Mistake(
                "keep-reversed",
                "the padding mask has the wrong polarity: keep is True at real tokens (may "
                "attend), so use it as it is, with no ~.",
            ): attend(causal & ~pad),
        }
        B, H = x.shape[0], ref.num_heads
        for rows, three in ((False, keep[:, None, :]), (True, keep[:, :, None])):  # no head axis
            mask = causal & three  # (B, L, L)
            if _fits(tuple(mask.shape), (B, H, L, L)):
                entries[_no_head_axis("the padding mask", rows)] = attend(mask)
    return layer_cases.evaluate(entries)


def _causal_self_attention(x, attention, keep=None):
    """The reference answer: the causal mask, and keep's (B, 1, 1, L) with it."""
    mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
    return attention(x, x, x, mask if keep is None else mask & keep[:, None, None, :])


def _causal_hint(failure: Failure) -> str | None:
    if _THREE_AXES.search(failure.message):
        return _no_head_axis("The mask")
    if "must broadcast" in failure.message or "must match the size" in failure.message:
        return Mistake(
            "mask-does-not-broadcast",
            "The mask must broadcast against the scores (B, H, L, L): the causal part is "
            "(L, L), keep (B, L) needs singleton axes for the heads and the queries, "
            "(B, 1, 1, L), and the two combined are (B, 1, L, L).",
        )
    if "boolean" in failure.message:
        return Mistake("mask-not-bool", "Build the mask with dtype=torch.bool (True = may attend).")
    if "NoneType" in failure.message:
        return Mistake(
            "keep-none-not-handled",
            "keep may be None (no padding): then the causal mask alone is the mask.",
        )
    return _needs_weights(failure)


def _causal_case(B, L, D, H, seed, keep_rows=None, dtype=torch.float64) -> Case:
    part, ref = _attention(D, H, seed, dtype)
    x = randn(B, L, D, seed=seed + 1).to(dtype)
    keep = None if keep_rows is None else torch.tensor(keep_rows, dtype=torch.bool)
    kwargs = {} if keep is None else {"keep": keep}
    call = Call("causal_self_attention", "causal_self_attention", (x, part), kwargs)
    future = Unchanged(
        call,
        (redrawn(x, (slice(None), -1), seed + 2), part),
        Mistake(
            "sees-the-future",
            "position i looks at the future: changing only the last position of x changed the "
            "outputs of the positions before it. The mask must hide keys j > i from query i "
            "(True on and below the diagonal).",
        ),
        _BEFORE_LAST,
        when=L >= 2,
    )
    padded = "" if keep is None else f", keep of shape {(B, L)}"
    return Case(
        call,
        f"causal_self_attention(x, attention{', keep' if keep is not None else ''}) with x of "
        f"shape {(B, L, D)}, {H} heads{padded}{_dtype_note(dtype)}",
        mistakes=lambda: _causal_mistakes(ref, x, keep),
        probes=(future,),
        reference=_causal_self_attention,
    )


def _causal_cases(thorough: bool) -> Iterator[Case]:
    yield _causal_case(2, 5, 8, 2, seed=701)
    left = [[False, False, True, True, True, True], [True] * 6]  # left padding: real tokens last
    yield _causal_case(2, 6, 8, 2, seed=702, keep_rows=left)
    if thorough:
        yield _causal_case(1, 1, 4, 1, seed=703)
        mixed = [[True, True, False, False], [False, True, True, True], [True] * 4]
        yield _causal_case(3, 4, 12, 3, seed=704, keep_rows=mixed)
        yield _causal_case(
            4, 4, 8, 2, seed=705, keep_rows=[[False] * k + [True] * (4 - k) for k in range(4)]
        )
        yield _causal_case(2, 7, 16, 4, seed=706, dtype=torch.float32)
        yield _causal_case(1, 5, 8, 2, seed=707, keep_rows=[[False, True, True, True, True]])


check_causal_self_attention = runner.register_given(
    "(a)",
    "def causal_self_attention(x, attention, keep=None):",
    _causal_cases,
    forbidden=Forbidden(
        torch=_MHA_FORWARD,
        python={**_DECODERS, encoder_lib.causal_mask: "encoder_lib.masks.causal_mask"},
    ),
    letters=("(B, L, D)", "(B, H, L, L)"),
    inputs={"args[0]": "x", "keep": "keep"},
    failure_hint=_causal_hint,
    slots=_ATTENTION_SLOTS,
    requires=(_calls_once,),
)


# --- (b) cross-attention -------------------------------------------------------------------------


def _cross_mistakes(ref, x, memory, keep) -> dict[str, Any]:
    L_tgt, L_src = x.shape[1], memory.shape[1]
    pad = None if keep is None else keep[:, None, None, :]

    def attend(q, k, v, mask):
        return lambda: ref(q, k, v, mask)

    entries = {
        Mistake(
            "keys-values-from-decoder",
            "keys and values are taken from the decoder (attention(x, x, x, ...)): that is "
            "self-attention again. In cross-attention the queries come from x and the keys and "
            "values from the encoder's output: attention(x, memory, memory, mask).",
        ): attend(x, x, x, pad),
        Mistake(
            "values-from-decoder",
            "the values are taken from the decoder: attention(x, memory, x, ...). Keys and values "
            "both come from the encoder's output, memory: a key says where to look, its value what "
            "is found there.",
        ): attend(x, memory, x, pad),
        Mistake(
            "keys-from-decoder",
            "the keys are taken from the decoder: attention(x, x, memory, ...). Keys and values "
            "both come from the encoder's output, memory.",
        ): attend(x, x, memory, pad),
        Mistake(
            "queries-from-memory",
            "the queries are taken from memory: attention(memory, memory, memory, ...) lets the "
            "source attend to itself. The queries come from the decoder, one per target position: "
            "attention(x, memory, memory, mask).",
        ): attend(memory, memory, memory, pad),
        Mistake(
            "queries-and-keys-swapped",
            "the queries are taken from memory and the keys and values from the decoder: it is the "
            "other way round, attention(x, memory, memory, mask).",
        ): attend(memory, x, x, pad),
    }
    if keep is not None:
        entries |= {
            Mistake(
                "memory-keep-ignored",
                "it ignores memory_keep: every target position also looks at the source's padding. "
                "The mask is memory_keep laid out as one value per key (source position), "
                "(B, 1, 1, L_src), the same for every head and target position.",
            ): attend(x, memory, memory, None),
            Mistake(
                "memory-keep-reversed",
                "the source mask has the wrong polarity: memory_keep is True at real source tokens "
                "(may attend), so use it as it is, with no ~.",
            ): attend(x, memory, memory, ~pad),
            Mistake(
                "source-mask-on-queries",
                "the source mask is applied to the queries (memory_keep[:, None, :, None], the "
                "rows of the scores) instead of the keys: padding is something no query may look "
                "at, so it masks the columns: memory_keep's L_src axis must be the last one.",
            ): attend(x, memory, memory, keep[:, None, :, None]),
            Mistake(
                "causal-mask-in-cross-attention",
                "a causal mask is added to the cross-attention: target position i may read every "
                "real source position, before or after i (the whole source sentence is known). "
                "Use only the source padding mask.",
            ): attend(x, memory, memory, pad & torch.ones(L_tgt, L_src, dtype=torch.bool).tril()),
        }
        B, H = x.shape[0], ref.num_heads
        for rows, three in ((False, keep[:, None, :]), (True, keep[:, :, None])):  # no head axis
            if _fits(tuple(three.shape), (B, H, L_tgt, L_src)):
                entries[_no_head_axis("the source mask", rows)] = attend(x, memory, memory, three)
    return layer_cases.evaluate(entries)


def _cross_attention(x, memory, attention, memory_keep=None):
    """The reference answer: keys and values from memory, memory_keep as (B, 1, 1, L_src)."""
    mask = None if memory_keep is None else memory_keep[:, None, None, :]
    return attention(x, memory, memory, mask)


def _cross_hint(B: int, L_src: int, failure: Failure) -> str | None:
    text = failure.message
    scores = "The cross-attention scores have shape (B, H, L_tgt, L_src)"
    if f"got shape {(B, L_src)}" in text:
        return Mistake(
            "memory-keep-shape-b-l",
            f"{scores}: give memory_keep (B, L_src) two singleton axes for the heads and "
            "the target positions, (B, 1, 1, L_src): one value per source position (key), "
            "the same for every head and target position.",
        )
    if f"got shape {(B, 1, L_src, 1)}" in text:
        return Mistake(
            "source-mask-on-queries",
            f"{scores}: (B, 1, L_src, 1) would mask target positions (the queries, the "
            "rows). The source padding masks keys (the columns): (B, 1, 1, L_src).",
        )
    if _THREE_AXES.search(text):
        return _no_head_axis("The mask")
    if "must broadcast" in text or "must match the size" in text:
        return Mistake(
            "keys-values-from-decoder",
            f"{scores}, and the mask is memory_keep as (B, 1, 1, L_src). The "
            "keys and values must be memory, whose length is L_src: with x as keys they "
            "would have length L_tgt.",
        )
    if "key and value must have shape" in text:
        return Mistake(
            "keys-values-from-decoder",
            "Keys and values both come from the encoder's output: "
            "attention(x, memory, memory, mask).",
        )
    if "NoneType" in text:
        return Mistake(
            "memory-keep-none-not-handled",
            "memory_keep may be None (a source without padding): then pass no mask.",
        )
    return _needs_weights(failure)


_QUERIES_FROM_MEMORY = Mistake(
    "queries-from-memory",
    "The output needs one row per target position (the queries come from x, the decoder); "
    "yours has one per source position: the queries were taken from memory.",
)


def _cross_case(B, L_tgt, L_src, D, H, seed, lengths=None, dtype=torch.float64) -> Case:
    part, ref = _attention(D, H, seed, dtype)
    x = randn(B, L_tgt, D, seed=seed + 1).to(dtype)
    memory = randn(B, L_src, D, seed=seed + 2).to(dtype) * 1.5
    keep = None if lengths is None else keep_first(lengths, L_src, extra_axes=0)  # (B, L_src)
    kwargs = {} if keep is None else {"memory_keep": keep}
    call = Call("cross_attention", "cross_attention", (x, memory, part), kwargs)
    padded = torch.zeros(B, L_src, dtype=torch.bool) if keep is None else ~keep
    source_leak = Unchanged(
        call,
        (x, redrawn(memory, padded, seed + 3, scale=3.0), part),
        Mistake(
            "source-padding-leaks",
            "the source padding leaks into the output: changing only the padded positions of "
            "memory changed it. memory_keep must hide those source positions from every "
            "query: pass memory_keep as a (B, 1, 1, L_src) mask, one value per source "
            "position.",
        ),
        when=bool(padded.any()),
    )
    padded = "" if keep is None else f", memory_keep of shape {(B, L_src)}"
    return Case(
        call,
        f"cross_attention(x, memory, attention{', memory_keep' if keep is not None else ''}) "
        f"with x of shape {(B, L_tgt, D)}, memory {(B, L_src, D)}, {H} heads{padded}"
        f"{_dtype_note(dtype)}",
        mistakes=lambda: _cross_mistakes(ref, x, memory, keep),
        probes=(source_leak,),
        shape_hints=(
            {(B, L_src, D): _QUERIES_FROM_MEMORY} if L_src != L_tgt else {},
            {(B, H, L_src, L_tgt): _QUERIES_FROM_MEMORY} if L_src != L_tgt else {},
        ),
        failure_hint=functools.partial(_cross_hint, B, L_src),
        reference=_cross_attention,
    )


def _cross_cases(thorough: bool) -> Iterator[Case]:
    yield _cross_case(3, 5, 5, 8, 2, seed=722, lengths=[5, 2, 4])  # L_tgt = L_src
    yield _cross_case(2, 4, 6, 8, 2, seed=721, lengths=[6, 3])
    if thorough:
        yield _cross_case(2, 1, 5, 8, 2, seed=723, lengths=[5, 1])
        yield _cross_case(2, 3, 7, 12, 3, seed=724)
        yield _cross_case(4, 4, 3, 8, 2, seed=725, lengths=[3, 1, 2, 3])  # B = L_tgt
        yield _cross_case(2, 6, 4, 16, 4, seed=726, lengths=[4, 2], dtype=torch.float32)


check_cross_attention = runner.register_given(
    "(b)",
    "def cross_attention(x, memory, attention, memory_keep=None):",
    _cross_cases,
    forbidden=_NO_DECODERS,
    letters=("(B, L_tgt, D)", "(B, H, L_tgt, L_src)"),
    inputs={"args[0]": "x", "args[1]": "memory", "memory_keep": "memory_keep"},
    slots=_ATTENTION_SLOTS,
    requires=(_calls_once,),
)


# --- (c) the decoder layer -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _DecoderShape(layer_cases.Shape):
    """A decoder layer's ``layer_cases.Shape`` (``drops``: the three sub-layers' outputs, then the
    FFN's hidden units; ``form`` may also be "stale_query": the cross-attention's queries come from
    the layer's input)."""

    keys: str = "memory"
    """Where the cross-attention's keys and values come from: "memory" or "x"."""
    norm_memory: bool = False
    swap_masks: bool = False


def _decoder_formula(ref, x, memory, tgt_mask, memory_mask, s: _DecoderShape) -> torch.Tensor:
    """A decoder layer written out with ``ref``'s sub-modules, in the way ``s`` says."""
    d1, d2, d3, dh = s.drops
    self_mask, cross_mask = (memory_mask, tgt_mask) if s.swap_masks else (tgt_mask, memory_mask)
    start = x

    def self_block(h: torch.Tensor) -> torch.Tensor:
        return ref.self_attn(h, h, h, self_mask, need_weights=False)[0]

    def cross_block(h: torch.Tensor) -> torch.Tensor:
        source = memory if s.keys == "memory" else h
        source = ref.norm2(source) if s.norm_memory else source
        if s.form == "stale_query":
            h = ref.norm2(start) if s.norm_first else start
        return ref.multihead_attn(h, source, source, cross_mask, need_weights=False)[0]

    ffn = layer_cases.feed_forward(ref, dh, s.activation)
    blocks = ((self_block, ref.norm1, d1), (cross_block, ref.norm2, d2), (ffn, ref.norm3, d3))
    return layer_cases.residual_sublayers(x, blocks, s)


_SUBLAYER_NAMES = ("the self-attention", "the cross-attention", "the feed-forward network")
_LAYER_PARTS = (
    "self_attn", "dropout1", "norm1", "multihead_attn", "dropout2", "norm2",
    "linear1", "dropout", "linear2", "dropout3", "norm3",
)  # fmt: skip
"""The given sub-modules, whose calls localise a mistake no catalogue entry names."""

_DROPOUTS = layer_cases.Dropouts(
    sites=(
        "the self-attention's output (self.dropout1)",
        "the cross-attention's output (self.dropout2)",
        "the FFN's output (self.dropout3)",
        "the FFN's hidden units (self.dropout)",
    ),
    places=(*_SUBLAYER_NAMES, "every sub-layer"),
    where="apply self.dropout1, self.dropout2 and self.dropout3 to the outputs of the "
    "self-attention, the cross-attention and the FFN, each before it is added to the residual, "
    "and self.dropout to the FFN's hidden units (after the activation)",
    still_active=Mistake(
        "dropout-in-eval",
        "dropout is still active in eval mode (on {site}, p={q:g}): use the nn.Dropout "
        "modules self.dropout1, self.dropout2, self.dropout3 and self.dropout, which model.eval() "
        "switches off, not F.dropout(x, p), which drops even in eval mode.",
    ),
)


def _layer_mistakes(ref, x, memory, tgt_mask, memory_mask, norm_first, train) -> dict[str, Any]:
    """Description -> the output of that mistake, computed with the reference's sub-modules."""
    d = layer_cases.dropout(ref.dropout.p) if train else layer_cases.same
    right = _DecoderShape(norm_first, (d,) * 4, ("out",) * 3, (True,) * 3)

    def f(tgt_mask=tgt_mask, memory_mask=memory_mask, **changes) -> Callable[[], torch.Tensor]:
        shape = dataclasses.replace(right, **changes)
        return lambda: _decoder_formula(ref, x, memory, tgt_mask, memory_mask, shape)

    m = layer_cases.norm_mistakes(f, norm_first, "norm1, norm2 and norm3")
    if norm_first:
        m[
            Mistake(
                "memory-normalised",
                "with norm_first=True (pre-norm) it normalises memory too: norm2 belongs to the "
                "decoder's stream only. The cross-attention reads the encoder's output as it is: "
                "x = x + multihead_attn(norm2(x), memory, memory, memory_mask).",
            )
        ] = f(norm_memory=True)
    m[
        Mistake(
            "no-residual",
            "there is no residual (skip) connection: each sub-layer's output must be added to its "
            "input before (post-norm) or after (pre-norm) the norm.",
        )
    ] = f(residual=(False, False, False))
    for i, name in enumerate(_SUBLAYER_NAMES):
        m[
            Mistake(
                "no-residual-around-a-sublayer",
                f"the residual (skip) connection around {name} is missing: add the sub-layer's "
                "input to its output.",
            )
        ] = f(residual=tuple(j != i for j in range(3)))
    m |= {
        layer_cases.NO_ACTIVATION: f(activation=False),
        Mistake(
            "sublayers-out-of-order",
            "the sub-layers run in the wrong order: the cross-attention comes before the "
            "self-attention. A decoder layer first lets the target positions look at each other "
            "(masked self-attention), then at the source (cross-attention), then the FFN.",
        ): f(order=(1, 0, 2)),
        Mistake(
            "stale-query",
            "the cross-attention's queries come from the layer's input instead of the output of "
            "the self-attention sub-layer: each sub-layer works on the result of the one before it "
            "(keep updating x).",
        ): f(form="stale_query"),
        Mistake(
            "cross-keys-from-decoder",
            "the cross-attention takes its keys and values from the decoder "
            "(multihead_attn(x, x, x, ...)): in cross-attention the decoder asks (queries from "
            "x) and the encoder's output answers (keys and values from memory, with "
            "memory_mask).",
        ): f(keys="x"),
    }
    if tgt_mask is not None:
        m |= {
            Mistake(
                "tgt-mask-ignored",
                "the self-attention ignores tgt_mask, so every target position sees the future. "
                "Pass tgt_mask to self.self_attn (as it is, True = may attend); the check calls "
                "layer(x, memory, tgt_mask=..., memory_mask=...) by keyword.",
            ): f(tgt_mask=None),
            Mistake(
                "tgt-mask-inverted",
                "it inverts tgt_mask: True already means 'may attend', so pass it to "
                "self.self_attn as it is (no ~).",
            ): f(tgt_mask=~tgt_mask),
        }
    if memory_mask is not None:
        m |= {
            Mistake(
                "memory-mask-ignored",
                "the cross-attention ignores memory_mask, so the source padding leaks into every "
                "target position. Pass memory_mask to self.multihead_attn; the check calls "
                "layer(x, memory, tgt_mask=..., memory_mask=...) by keyword.",
            ): f(memory_mask=None),
            Mistake(
                "memory-mask-inverted",
                "it inverts memory_mask: True already means 'may attend', so pass it to "
                "self.multihead_attn as it is (no ~).",
            ): f(memory_mask=~memory_mask),
        }
    if tgt_mask is not None and memory_mask is not None:
        m[
            Mistake(
                "masks-swapped",
                "the masks are swapped: tgt_mask (causal) belongs to the self-attention and "
                "memory_mask (source padding) to the cross-attention.",
            )
        ] = f(swap_masks=True)
    m |= layer_cases.dropout_mistakes(f, ref.dropout.p, train, norm_first, _DROPOUTS)
    return layer_cases.mistake_values(ref, train, m)


def _layer_hint(failure: Failure) -> str | None:
    text = failure.message
    if "tuple" in text:
        return Mistake(
            "attention-pair-not-unpacked",
            "self.self_attn and self.multihead_attn return a pair (output, weights): unpack "
            "it into two names (the weights are not needed here) and use the output.",
        )
    if "must broadcast" in text or "must match the size" in text:
        return Mistake(
            "wrong-attention-inputs",
            "Check which attention gets which inputs and mask: the self-attention reads x "
            "only, with tgt_mask, scores (B, H, L_tgt, L_tgt); the cross-attention's queries "
            "come from x and its keys and values from memory, with memory_mask, scores "
            "(B, H, L_tgt, L_src).",
        )
    if "key and value must have shape" in text:
        return Mistake(
            "cross-keys-from-decoder",
            "The cross-attention's keys and values both come from memory (the encoder's "
            "output); its queries come from x.",
        )
    return None


def _layer_case(
    D, H, d_ff, p, norm_first, B, L_tgt, L_src, src_lengths, seed, *,
    tgt_lengths=None, masks=True, train=False, dtype=torch.float64, backward=False,
) -> Case:  # fmt: skip
    """``backward``: the gradients of an upstream drawn with ``seed + 5``, too."""
    ref = layer_cases.reference_layer(
        encoder_lib.DecoderLayer, D, H, d_ff, p, norm_first, seed, dtype
    )
    x = randn(B, L_tgt, D, seed=seed + 1).to(dtype)
    memory = (randn(B, L_src, D, seed=seed + 2) * 1.5).to(dtype)
    tgt_mask = memory_mask = None
    if masks:
        tgt_mask = encoder_lib.causal_mask(L_tgt)  # (L_tgt, L_tgt)
        if tgt_lengths is not None:
            tgt_mask = tgt_mask & keep_first(tgt_lengths, L_tgt)  # (B, 1, L_tgt, L_tgt)
        memory_mask = keep_first(src_lengths, L_src)  # (B, 1, 1, L_src)
    call = Call(
        "DecoderLayer",
        "decoder_layer",
        (x, memory),
        {"tgt_mask": tgt_mask, "memory_mask": memory_mask},
        init=((D, H, d_ff, p), {"norm_first": norm_first}),
        dtype=dtype,
        state=ref.state_dict(),
        train=train,
        seed=seed,
    )

    future = Unchanged(
        call,
        (redrawn(x, (slice(None), -1), seed + 3), memory),
        Mistake(
            "sees-the-future",
            "the self-attention looks at the future: changing only the last target position "
            "changed the outputs before it. Pass tgt_mask (as it is) to self.self_attn.",
        ),
        _BEFORE_LAST,
        when=tgt_mask is not None and not train and L_tgt >= 2,
    )
    leaks = memory_mask is not None and not train and not bool(memory_mask.all())
    pad = ~keep_first(src_lengths, L_src, extra_axes=0) if leaks else ...  # (B, L_src)
    source_leak = Unchanged(
        call,
        (x, redrawn(memory, pad, seed + 4, scale=3.0) if leaks else memory),
        Mistake(
            "source-padding-leaks",
            "the source padding leaks into the output: changing only the padded positions of "
            "memory changed it. Pass memory_mask (as it is) to self.multihead_attn.",
        ),
        when=leaks,
    )
    case = Case(
        call,
        f"DecoderLayer({D}, {H}, {d_ff}, {p}, norm_first={norm_first}) on x {(B, L_tgt, D)} and "
        f"memory {(B, L_src, D)}{'' if masks else ', no masks'}{_dtype_note(dtype)}"
        + (" in training mode" if train else ""),
        expected=layer_cases.reference_output(ref, call),
        mistakes=lambda: _layer_mistakes(ref, x, memory, tgt_mask, memory_mask, norm_first, train),
        probes=(future, source_leak, layer_cases.right_in_eval(ref, call, _DROPOUTS.where)),
        locate=Locate(
            ref,
            _LAYER_PARTS,
            {"args[0]": "x (the decoder's stream)", "args[1]": "memory (the encoder's output)"},
            functions=layer_cases.FUNCTIONS,
        ),
    )
    if backward:
        return layer_cases.backpropagating_layer(
            case, ref, upstream=randn(B, L_tgt, D, seed=seed + 5)
        )
    return case


def _layer_cases(thorough: bool) -> Iterator[Case]:
    yield _layer_case(16, 4, 32, 0.1, False, 2, 6, 6, [6, 3], seed=741)  # L_tgt = L_src
    yield _layer_case(16, 4, 32, 0.1, True, 2, 5, 7, [7, 4], seed=742)
    yield _layer_case(16, 4, 32, 0.1, False, 2, 5, 7, [7, 4], seed=743, train=True)
    yield _layer_case(16, 4, 32, 0.1, True, 2, 5, 7, [7, 4], seed=742, train=True)
    if thorough:
        yield _layer_case(8, 2, 16, 0.1, False, 2, 4, 7, [7, 3], seed=744)
        yield _layer_case(8, 2, 16, 0.1, True, 2, 6, 6, [6, 3], seed=752)  # L_tgt = L_src
        yield _layer_case(8, 2, 16, 0.0, False, 1, 1, 1, [1], seed=745)
        yield _layer_case(12, 3, 24, 0.1, False, 3, 4, 5, [5, 5, 5], seed=746, masks=False)
        yield _layer_case(12, 3, 24, 0.1, True, 3, 4, 5, [5, 1, 3], seed=747, tgt_lengths=[4, 2, 3])
        yield _layer_case(8, 2, 16, 0.5, False, 2, 3, 4, [4, 4], seed=748, masks=False, train=True)
        yield _layer_case(12, 3, 24, 0.3, True, 3, 4, 6, [6, 1, 2], seed=749, train=True)
        yield _layer_case(16, 4, 32, 0.1, False, 2, 5, 7, [7, 3], seed=750, dtype=torch.float32)
        yield _layer_case(8, 2, 16, 0.1, False, 2, 4, 5, [5, 2], seed=751, backward=True)


check_decoder_layer = runner.register_given(
    "(c)",
    "class DecoderLayer(nn.Module):",
    _layer_cases,
    forbidden=_NO_DECODERS,
    letters=("(B, L_tgt, D)",),
    module=ModuleSpec(
        keep_init="keep the given __init__ (its sub-modules self_attn, multihead_attn, "
        "linear1, linear2, norm1, norm2, norm3 have the names of nn.TransformerDecoderLayer)"
    ),
    inputs={"args[0]": "x", "args[1]": "memory", "tgt_mask": "tgt_mask"},
    failure_hint=_layer_hint,
)


# --- (d) greedy decoding -------------------------------------------------------------------------


_TOY = "decoder.toy_model"


@observe.part(_TOY)
def _toy_model(part: Part) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The stand-in for a trained encoder-decoder: ``model(src, tgt_in)`` returns logits
    ``(B, L_tgt, V)`` where position t predicts the token after ``tgt_in[:, t]``. It is causal
    (position t depends on ``tgt_in[:, :t + 1]`` only) and its prediction depends on everything
    fed so far, so a decoding loop that feeds the wrong history goes wrong. It says ``<end>``
    at step ``t == n`` for a source of n real tokens, and something else before and after."""
    o = part.options
    V, start, end, pad = int(o["vocab"]), int(o["start"]), int(o["end"]), int(o["pad"])
    symbols = torch.tensor([v for v in range(V) if v not in (start, end, pad)])

    def model(src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        for name, ids in (("src", src), ("tgt_in", tgt_in)):
            if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
                raise ValueError(f"{name} must be a tensor of token ids (B, L)")
            if ids.dtype not in (torch.int64, torch.int32):
                raise TypeError(
                    f"{name} must hold integer token ids (torch.long), got {ids.dtype}: an "
                    "embedding table is indexed with integers"
                )
        if tgt_in.shape[0] != src.shape[0] or tgt_in.shape[1] < 1:
            raise ValueError(
                f"tgt_in must have shape (B, t) with B = {src.shape[0]} and t >= 1 (at least "
                f"<start>), got {tuple(tgt_in.shape)}"
            )
        if int(tgt_in.min()) < 0 or int(tgt_in.max()) >= V:
            raise IndexError(f"tgt_in holds ids outside [0, {V})")
        src, tgt_in = src.long(), tgt_in.long()
        B, L = tgt_in.shape
        n = (src != pad).sum(dim=1, keepdim=True)  # (B, 1) real source tokens
        t = torch.arange(L)[None, :]  # (1, L)
        weights = torch.arange(1, L + 1)[None, :]
        history = (tgt_in * weights).cumsum(dim=1)  # (B, L): causal
        back = (n - 1 - t).clamp(min=0) % src.shape[1]  # reading the source backwards
        choice = (src.gather(1, back) * 3 + history * 7 + t * 5) % len(symbols)
        tokens = torch.where(t == n, end, symbols[choice])  # (B, L)
        logits = torch.cos(torch.arange(V, dtype=torch.float64) * 0.7 + t[..., None] * 1.3)
        logits = logits.expand(B, L, V).clone() * 0.5  # (B, L, V), below 0.5
        return logits.scatter(2, tokens[..., None], 3.0)

    return model


def _decode(model, src, max_len, start, end, pad, mistake: str = "") -> torch.Tensor:
    """Greedy decoding as written by the reference (``mistake=""``) or with one mistake."""
    B = src.shape[0]
    if mistake in ("whole", "whole_raw"):
        buffer = torch.full((B, max_len), pad)
        buffer[:, 0] = start
        tokens = model(src, buffer).argmax(dim=-1)  # (B, max_len) from one call
        return tokens if mistake == "whole_raw" else _pad_after_end(tokens, end, pad)
    out = torch.full((B, 1), start)
    chosen: list[torch.Tensor] = []
    for _ in range(max_len):
        fed = out[:, -1:] if mistake == "last_only" else out
        logits = model(src, fed)
        position = 0 if mistake == "first_position" else -1
        token = logits[:, position].argmax(dim=-1)  # (B,)
        chosen.append(token)
        out = torch.cat([out, token[:, None]], dim=1)
        if mistake == "stop_at_first" and bool((token == end).any()):
            break
    tokens = torch.stack(chosen, dim=1)  # (B, t)
    tokens = F.pad(tokens, (0, max_len - tokens.shape[1]), value=pad)
    if mistake == "no_padding":
        return tokens
    if mistake == "end_replaced":
        return tokens.masked_fill((tokens == end).long().cumsum(dim=1) > 0, pad)
    return _pad_after_end(tokens, end, pad)


def _pad_after_end(tokens: torch.Tensor, end: int, pad: int) -> torch.Tensor:
    """Every place after a sequence's first ``end`` becomes ``pad``."""
    seen = (tokens == end).long().cumsum(dim=1)  # (B, max_len): ends so far, this one included
    after = (seen - (tokens == end).long()) > 0
    return tokens.masked_fill(after, pad)


_WHOLE = Mistake(
    "whole-target-at-once",
    "it feeds the whole target at once: one call of the model on a buffer holding <start> and "
    "padding, with every position's prediction taken from that call. At inference the later "
    "tokens do not exist yet, so position t would predict from padding instead of the tokens "
    "chosen before it. Generate one token per call: feed <start> and everything chosen so far, "
    "take the last position's prediction, append it, repeat.",
)


_DECODE_MISTAKES = {
    _WHOLE: "whole",
    Mistake("whole-target-at-once", _WHOLE + " (Pad the places after <end> too.)"): "whole_raw",
    Mistake(
        "reads-the-first-position",
        "every step predicts the token after <start> again: it reads the first position's logits, "
        "logits[:, 0], or it never feeds its predictions back. The next token comes from the last "
        "position, logits[:, -1], of a call on <start> and every token "
        "chosen so far.",
    ): "first_position",
    Mistake(
        "feeds-only-the-last-token",
        "it feeds the model only the last token chosen: the decoder needs the whole prefix, "
        "<start> and every token chosen so far (its self-attention looks back at all of them).",
    ): "last_only",
    Mistake(
        "no-padding-after-end",
        "the places after <end> are not padding: once a sequence has produced end_id, the rest of "
        "its row must be pad_id (keep a `finished` flag per sequence).",
    ): "no_padding",
    Mistake(
        "end-replaced-by-padding",
        "it replaces <end> itself by padding: keep the end_id token and pad only the places after "
        "it.",
    ): "end_replaced",
    Mistake(
        "stops-at-the-first-end",
        "it stops when the first sequence has finished, so the others are cut short: keep going "
        "until every sequence has produced end_id (or max_len tokens).",
    ): "stop_at_first",
}


def _decode_mistakes(model, src, max_len, start, end, pad, defaults: bool) -> dict[str, Any]:
    m = {
        text: _decode(model, src, max_len, start, end, pad, mistake)
        for text, mistake in _DECODE_MISTAKES.items()
    }
    if not defaults:  # the default ids instead of the arguments
        wrong_ids = {
            Mistake(
                "ignores-special-ids",
                "it ignores start_id, end_id and pad_id and uses the default ids 1, 2 and 0: use "
                "the arguments, the special tokens do not always have those ids.",
            ): (1, 2, 0),
            Mistake(
                "ignores-start-id",
                "it ignores start_id: its first input is <start> with the default id 1. Start from "
                "torch.full((B, 1), start_id).",
            ): (1, end, pad),
            Mistake(
                "ignores-end-id",
                "it ignores end_id: it looks for the default id 2 to know that a sequence has "
                "finished. Compare with end_id.",
            ): (start, 2, pad),
            Mistake(
                "ignores-pad-id",
                "it ignores pad_id: the places after <end> hold the default id 0. Fill them with "
                "pad_id.",
            ): (start, end, 0),
        }
        m |= {text: _decode(model, src, max_len, *ids) for text, ids in wrong_ids.items()}
    return m


def _loop_problem(got: Any, model, src, start: int, end: int, pad: int) -> Mistake | None:
    """What the loop did, read from its output: a finished sequence that starts again, or a
    first token that is not the model's most likely one (its input, <start>, was right)."""
    if not isinstance(got, torch.Tensor) or got.dim() != 2 or got.shape[0] != src.shape[0]:
        return None
    if got.dtype not in (torch.int64, torch.int32) or got.shape[1] < 1:
        return None
    for row in got:
        ends = (row == end).nonzero()
        tail = row[int(ends[0]) + 1 :] if len(ends) else row[:0]  # after the first <end>
        pads = (tail == pad).nonzero()
        if len(pads) and bool((tail[int(pads[0]) :] != pad).any()):
            return Mistake(
                "finished-sequence-restarts",
                "a sequence that has produced end_id starts again: after <end> and some "
                "padding, its row holds real tokens once more. Whether a sequence has "
                "finished must be remembered from step to step (once finished, always "
                "finished), not worked out again from the last token alone.",
            )
    first = model(src, torch.full((src.shape[0], 1), start))[:, -1].argmax(dim=-1)  # (B,)
    if not bool((got[:, 0] == first).all()):
        return Mistake(
            "not-argmax",
            "already the first token is not the model's most likely one, although its input "
            "(<start> alone) was right: a greedy decoder takes the argmax of the last "
            "position's logits at every step. Drawing from the probabilities (sampling) makes "
            "another decoder, whose output changes from run to run.",
        )
    return None


def _decode_hint(failure: Failure) -> str | None:
    if "has no attribute" in failure.message:
        return Mistake(
            "model-attributes-used",
            "The check's model is only called, model(src, tgt_in) -> logits (B, L_tgt, V).",
        )
    if "integer token ids" in failure.message:
        return Mistake(
            "ids-not-integers",
            "Build the input from integer ids, e.g. torch.full((B, 1), start_id) (an int fill "
            "value gives torch.long), and append argmax results, which are integers too.",
        )
    if "t >= 1" in failure.message:
        return Mistake(
            "first-input-not-start",
            "The first input is <start> alone: torch.full((B, 1), start_id).",
        )
    return None


def _decode_case(B, max_len, lengths, seed, ids=(1, 2, 0), V=13) -> Case:
    start, end, pad = ids
    part = Part(_TOY, options={"vocab": V, "start": start, "end": end, "pad": pad})
    model = _toy_model(part)
    L_src = max(lengths)
    g = torch.Generator().manual_seed(seed)
    symbols = torch.tensor([v for v in range(V) if v not in ids])
    src = symbols[torch.randint(len(symbols), (B, L_src), generator=g)]
    src = src.masked_fill(~keep_first(lengths, L_src, extra_axes=0), pad)
    defaults = ids == (1, 2, 0)
    kwargs = {} if defaults else {"start_id": start, "end_id": end, "pad_id": pad}
    call = Call("greedy_decode", "greedy_decode", (part, src, max_len), kwargs)
    expected = _decode(model, src, max_len, start, end, pad)

    def calls(obs: Observation, ask: Ask) -> str | None:
        count = obs.info.get("parts", [None])[0]
        if count == 1 and max_len > 1:
            return _WHOLE
        got = obs.value
        loop = _loop_problem(got, model, src, start, end, pad)
        if loop is not None:
            return loop
        if isinstance(got, torch.Tensor) and bool((got[:, 0] == expected[:, 0]).all()):
            return Mistake(
                "not-fed-back",
                "the first token of every sequence is right but later ones are not: feed each "
                "prediction back. The input of step t + 1 is <start> followed by every token "
                "chosen so far, and the next token is the argmax of the last position's logits.",
            )
        return None

    def record(_call: Call) -> list[dict]:
        """The reference's calls of the model, recorded as the kernel records the answer's."""
        calls: list[dict] = []

        def recording(src_: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
            logits = model(src_, tgt_in)
            observe.record_call(calls, _TOY, [("args[0]", src_), ("args[1]", tgt_in)], logits)
            return logits

        _decode(recording, src, max_len, start, end, pad)
        return calls

    named = "" if defaults else f", start_id={start}, end_id={end}, pad_id={pad}"
    return Case(
        call,
        f"greedy_decode(model, src of shape {(B, L_src)}, max_len={max_len}{named})",
        expected=expected,
        mistakes=lambda: _decode_mistakes(model, src, max_len, start, end, pad, defaults),
        probes=(calls,),
        shape_hints=(
            {
                (B, max_len + 1): Mistake(
                    "returns-start-token",
                    "It returns <start> as well: return only the max_len tokens chosen after it.",
                ),
                (B, max_len - 1): Mistake(
                    "one-token-short", "One token short: the loop must choose max_len tokens."
                ),
            },
        ),
        locate=Locate(
            record, (_TOY,), names={_TOY: "the model", "args[0]": "src", "args[1]": "tgt_in"}
        ),
    )


def _decode_cases(thorough: bool) -> Iterator[Case]:
    yield _decode_case(4, 9, [5, 8, 6, 7], seed=761)
    yield _decode_case(3, 6, [2, 4, 3], seed=762)  # every sequence ends early
    if thorough:
        yield _decode_case(1, 1, [3], seed=763)
        yield _decode_case(2, 4, [6, 2], seed=764)  # one sequence never ends
        yield _decode_case(5, 7, [3, 1, 5, 4, 2], seed=765, ids=(4, 7, 3), V=15)
        yield _decode_case(6, 10, [5, 8, 6, 7, 5, 8], seed=766)


check_greedy_decode = runner.register_given(
    "(d)",
    "def greedy_decode(model, src, max_len, start_id=1, end_id=2, pad_id=0):",
    _decode_cases,
    forbidden=Forbidden(python=_DECODERS),
    slots=("the output",),
    letters=("(B, max_len)",),
    inputs={"args[1]": "src"},
    failure_hint=_decode_hint,
    messages={
        "dtype": "{slot} has dtype {got}; token ids are integers (torch.long): argmax gives "
        "them, and torch.full((B, 1), start_id) starts an integer tensor.",
        "in_place": "it changed src in place: the caller still needs its source ids.",
    },
)
