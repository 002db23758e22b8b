"""Notebook 05: assembling the encoder, as data for the runner.

- ``check_sinusoidal_positional_encoding(fn)``, exercise (a): the ``(max_len, D)`` table.
  Named: sines and cosines concatenated instead of interleaved; the frequency from the column
  index j, 10000^(j/D), instead of the pair index; the factor 2 missing, 10000^(i/D); sin and
  cos swapped; the position multiplied by 10000^(2i/D); a sequence-first ``(max_len, 1, D)`` or
  batched ``(1, max_len, D)`` table; a transposed table; a table that is not floating-point.
- ``check_make_padding_mask(fn)``, exercise (b): the boolean ``(B, 1, 1, L)`` mask. Named: the
  polarity reversed; the shapes ``(B, L)``, ``(B, 1, L, 1)`` (masks queries) and ``(B, 1, L)``;
  a non-boolean mask; the pad id hard-coded to 0.
- ``check_encoder_layer(EncoderLayer)``, exercise (c). Named: no residual (around either
  sub-layer or both); the norm in the wrong place (pre-norm when ``norm_first=False`` and the
  reverse, the norm inside the residual branch, a pre-norm residual adding the normalised x); no
  FFN activation; the mask ignored (also when a misspelt keyword is swallowed by ``**kwargs``:
  the check passes ``mask=`` by keyword) or inverted; padding leaking into real positions; in
  training mode, dropout missing (all of it, ``dropout1``, ``dropout2`` or the FFN's) or in the
  wrong place (on the attention's or the FFN's input, on the residual sum, after the norm);
  dropout still active in eval mode; no gradient.
- ``check_encoder(Encoder)``, exercise (d). Named: no positional encoding (also found by
  permuting the tokens); a sequence-first table indexed with the batch size or broadcast against
  batch-first data; embeddings scaled by sqrt(D) twice or not at all; the positional encoding
  scaled too; no mask passed to the layers, a misspelt mask keyword, a mask with reversed
  polarity, the wrong shape or the wrong pad id; dropout missing in training, in the wrong place
  (before the positional encoding is added, on it alone, twice, between the layers, on the
  output) or still active in eval mode; layers skipped, repeated or their outputs discarded.

Design choices:
- (d) does not depend on (c): in the student's kernel, its call builds the student's ``Encoder``
  and its preparation (``@observe.preparation("encoder.recorded_layers")``) replaces its
  ``layers`` by ``encoder_lib.EncoderLayer`` s with weights sent by the check, each wrapped to
  record what it receives (its input, the mask, any other keyword). Only those facts come back;
  every comparison happens here, so a mistake is named where it happens (the first layer's input,
  the mask, the chaining of the layers), not only at the output.
- (d) depends on (b) when the forward calls the student's ``make_padding_mask`` (as the solution
  does); ``encoder_lib.padding_mask`` is allowed in (d) for a student stuck on (b). The given
  ``__init__`` registers ``encoder_lib.sinusoidal_table`` as the buffer ``pe``, so (d) does not
  depend on (a) either.
- Dropout is deterministic while student code runs (``observe.deterministic_dropout``, also
  inside the attention), so training-mode cases compare with ``encoder_lib`` run under
  ``reference_mode`` and show where each dropout sits.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import encoder_lib

from .. import runner, vocabulary
from ..feedback import Mistake
from ..kernel import observe
from ..kernel.forbidden import Forbidden
from ..kernel.observe import Call, Failure, Observation
from ..locate import Locate
from ..vocabulary import (
    Ask,
    Case,
    Intermediate,
    ModuleSpec,
    Unchanged,
    close,
    keep_first,
    randn,
    redrawn,
    reference_mode,
)
from . import layer_cases

__all__ = [
    "check_sinusoidal_positional_encoding",
    "check_make_padding_mask",
    "check_encoder_layer",
    "check_encoder",
]

# nn.TransformerEncoderLayer always reaches one of these, which a message names.
_LAYER_KERNELS = {
    torch._transformer_encoder_layer_fwd: "torch._transformer_encoder_layer_fwd "
    "(nn.TransformerEncoderLayer's fused kernel)",
    F.multi_head_attention_forward: "F.multi_head_attention_forward "
    "(nn.MultiheadAttention, inside nn.TransformerEncoderLayer)",
}


def _ids(batch: int, length: int, vocab: int, pad: int, lengths: list[int], seed: int):
    """Token ids ``(B, L)``: row b has ``lengths[b]`` real tokens (never ``pad``), then padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab - 1, (batch, length), generator=g)
    ids = ids + (ids >= pad).long()  # skip the pad id
    for b, n in enumerate(lengths):
        ids[b, n:] = pad
    return ids


def _dtype_note(dtype: torch.dtype) -> str:
    """How a case's description names a dtype other than float64."""
    return "" if dtype == torch.float64 else f" ({dtype})"


# --- (a) sinusoidal positional encoding ----------------------------------------------------------


def _pe_variant(max_len: int, d_model: int, kind: str) -> torch.Tensor:
    """The table a classic mistake produces, in float64."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    col = torch.arange(d_model, dtype=torch.float64)  # (D,)
    pair = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i, (D/2,)
    if kind == "column":  # column j uses 10000^(j/D)
        angle = pos / 10000.0 ** (col / d_model)
        return torch.where(col.long() % 2 == 0, torch.sin(angle), torch.cos(angle))
    if kind == "concat":
        angle = pos / 10000.0 ** (pair / d_model)
        return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)
    if kind == "no_two":  # pair index i in 10000^(i/D)
        angle = pos / 10000.0 ** ((pair / 2) / d_model)
    elif kind == "multiply":
        angle = pos * 10000.0 ** (pair / d_model)
    else:
        angle = pos / 10000.0 ** (pair / d_model)
    first, second = (torch.cos, torch.sin) if kind == "swapped" else (torch.sin, torch.cos)
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = first(angle)
    table[:, 1::2] = second(angle)
    return table


_PE_MISTAKES = {
    "concat": Mistake(
        "pe-concatenated",
        "the sines fill the first half of the columns and the cosines the second half "
        "(concatenated). They must be interleaved: column 2i holds sin and column 2i+1 holds cos "
        "of the same angle pos / 10000^(2i/D).",
    ),
    "column": Mistake(
        "pe-column-index",
        "the frequency uses the column index j, 10000^(j/D), so columns 2i and 2i+1 get "
        "different frequencies. Use the pair index i (i = j // 2): both columns of a pair share "
        "10000^(2i/D).",
    ),
    "no_two": Mistake(
        "pe-no-factor-2",
        "the exponent is i/D with the pair index i; it must be 2i/D (the factor 2 is "
        "missing), i.e. 10000^(2i/D) where 2i is the even column of the pair.",
    ),
    "swapped": Mistake(
        "pe-sin-cos-swapped",
        "sin and cos are swapped: even columns 2i hold sin, odd columns 2i+1 hold cos.",
    ),
}


def _pe_case(max_len: int, d_model: int) -> Case:
    multiplied = _pe_variant(max_len, d_model, "multiply")

    def multiplies(obs: Observation, ask: Ask) -> str | None:
        # The angles pos * 10000^(2i/D) are huge, so float32 rounding makes all but the first
        # rows differ from any float64 table: compare positions 0 and 1 only.
        if close(obs.value[:2], multiplied[:2], atol=2e-2, rtol=0.0):
            return Mistake(
                "pe-multiplied",
                "the position is multiplied by 10000^(2i/D); it must be divided by it, "
                "pos / 10000^(2i/D), so that the wavelengths grow along D.",
            )
        return None

    layout = "the Encoder adds self.pe[:L] to batch-first (B, L, D) data, where the (L, D) table"
    return Case(
        Call(
            "sinusoidal_positional_encoding", "sinusoidal_positional_encoding", (max_len, d_model)
        ),
        f"sinusoidal_positional_encoding({max_len}, {d_model})",
        mistakes=lambda: {
            text: _pe_variant(max_len, d_model, k) for k, text in _PE_MISTAKES.items()
        },
        probes=(multiplies,),
        shape_hints=(
            {
                (max_len, 1, d_model): Mistake(
                    "pe-sequence-first",
                    "That is a sequence-first (max_len, 1, D) table: return the "
                    f"plain table; {layout} broadcasts over the batch.",
                ),
                (1, max_len, d_model): Mistake(
                    "pe-batched",
                    "That is a batched (1, max_len, D) table: return the plain "
                    f"table; {layout} broadcasts over the batch.",
                ),
            },
        ),
        reference=encoder_lib.sinusoidal_table,  # (max_len, D), torch's default dtype
    )


def _pe_cases(thorough: bool) -> Iterator[Case]:
    sizes = [(50, 16), (7, 4)]
    if thorough:
        sizes += [(1, 2), (9, 6), (128, 64), (3, 32)]
    for max_len, d_model in sizes:
        yield _pe_case(max_len, d_model)


check_sinusoidal_positional_encoding = runner.register_given(
    "(a)",
    "def sinusoidal_positional_encoding(max_len, d_model):",
    _pe_cases,
    forbidden=Forbidden(
        python={
            encoder_lib.sinusoidal_table: "encoder_lib.embeddings.sinusoidal_table",
            encoder_lib.SinusoidalPositionalEncoding: (
                "encoder_lib.embeddings.SinusoidalPositionalEncoding"
            ),
        }
    ),
    slots=("the table",),
    letters=("(max_len, D)",),
    atol=1e-4,
    rtol=0.0,
    any_float=True,
    messages={
        "dtype": Mistake(
            "pe-not-float",
            "{slot} has dtype {got}; it must be a floating-point tensor (sin and cos of "
            "the angles, between -1 and 1).",
        )
    },
)


# --- (b) padding mask ----------------------------------------------------------------------------


def _mask_case(B: int, L: int, vocab: int, pad_id: int, lengths: list[int], seed: int) -> Case:
    token_ids = _ids(B, L, vocab, pad_id, lengths, seed)
    expected = encoder_lib.padding_mask(token_ids, pad_id)  # (B, 1, 1, L)
    mistakes = {
        Mistake(
            "mask-reversed",
            "it has the wrong polarity: it is True at padding and False at real tokens. In this "
            "course True means 'may attend' (as in F.scaled_dot_product_attention), so real tokens "
            "are True. (PyTorch's key_padding_mask is the opposite: True = ignore.)",
        ): ~expected
    }
    if pad_id != 0:
        mistakes[
            Mistake(
                "pad-id-hard-coded",
                f"it compares the ids with 0 instead of pad_id = {pad_id}: use the pad_id "
                "argument, the padding id is not always 0.",
            )
        ] = (token_ids != 0)[:, None, None, :]

    def first_difference(obs: Observation, ask: Ask) -> str | None:
        b, pos = (obs.value != expected)[:, 0, 0, :].nonzero()[0].tolist()
        return Mistake(
            "mismatch",
            f"at batch {b}, position {pos} (token id {int(token_ids[b, pos])}) it gives "
            f"{bool(obs.value[b, 0, 0, pos])}, expected {bool(expected[b, 0, 0, pos])} (True "
            "exactly where token_ids != pad_id).",
        )

    right = f"(B, 1, 1, L) = {(B, 1, 1, L)}"
    return Case(
        Call("make_padding_mask", "make_padding_mask", (token_ids, pad_id)),
        f"make_padding_mask(token_ids of shape {(B, L)}, pad_id={pad_id})",
        expected=expected,
        mistakes=mistakes,
        probes=(first_difference,),
        shape_hints=(
            {
                (B, L): Mistake(
                    "mask-shape-b-l",
                    "Attention scores have shape (B, H, L_q, L_k), and a mask of shape (B, L) "
                    "broadcasts against their last two dimensions (L_q, L_k): it lines the batch "
                    "up with the queries instead of masking the keys (and fails unless B = L). Add "
                    f"two singleton dimensions: {right}.",
                ),
                (B, 1, L, 1): Mistake(
                    "mask-masks-queries",
                    "That shape masks the queries (rows of the score matrix) instead of "
                    f"the keys (columns). Every query may look at every real key: use {right}.",
                ),
                (B, 1, L): Mistake(
                    "mask-shape-b-1-l",
                    "Against scores (B, H, L_q, L_k) that shape lines the batch up with the "
                    f"heads. Use {right}.",
                ),
            },
        ),
    )


def _mask_cases(thorough: bool) -> Iterator[Case]:
    yield _mask_case(3, 6, 20, 0, [4, 2, 6], seed=51)
    yield _mask_case(2, 5, 20, 3, [5, 1], seed=52)
    if thorough:
        yield _mask_case(1, 1, 9, 0, [1], seed=53)
        yield _mask_case(4, 9, 30, 7, [9, 3, 0, 5], seed=54)
        yield _mask_case(5, 2, 12, 1, [2, 1, 2, 0, 1], seed=55)


check_make_padding_mask = runner.register_given(
    "(b)",
    "def make_padding_mask(token_ids, pad_id):",
    _mask_cases,
    reference=encoder_lib.padding_mask,
    forbidden=Forbidden(python={encoder_lib.padding_mask: "encoder_lib.masks.padding_mask"}),
    slots=("the mask",),
    letters=("(B, 1, 1, L)",),
    inputs={"args[0]": "token_ids"},
    messages={
        "dtype": Mistake(
            "mask-not-bool",
            "{slot} has dtype {got}; it must be boolean (torch.bool), True = may attend. "
            "Compare the ids with pad_id (`!=`) and keep the result as it is.",
        )
    },
)


# --- (c) encoder layer ---------------------------------------------------------------------------

_reference_layer = functools.partial(layer_cases.reference_layer, encoder_lib.EncoderLayer)


def _layer_formula(
    ref, x: torch.Tensor, mask: torch.Tensor | None, s: layer_cases.Shape
) -> torch.Tensor:
    """An encoder layer written out with ``ref``'s sub-modules, in the way ``s`` says; its
    ``drops`` are those of the attention output, the FFN's hidden units and the FFN output."""
    d1, dh, d2 = s.drops

    def attention(h: torch.Tensor) -> torch.Tensor:
        return ref.self_attn(h, h, h, mask, need_weights=False)[0]

    ffn = layer_cases.feed_forward(ref, dh, s.activation)
    return layer_cases.residual_sublayers(x, ((attention, ref.norm1, d1), (ffn, ref.norm2, d2)), s)


_LAYER_PARTS = (
    "self_attn", "dropout1", "norm1", "linear1", "dropout", "linear2", "dropout2", "norm2",
)  # fmt: skip
"""The given sub-modules, whose calls localise a mistake no catalogue entry names."""

_DROPOUTS = layer_cases.Dropouts(
    sites=(
        "the attention output (self.dropout1)",
        "the FFN's hidden units (self.dropout)",
        "the FFN output (self.dropout2)",
    ),
    places=(
        "the attention sub-layer (self.dropout1)",
        "the feed-forward sub-layer (self.dropout2)",
        "both sub-layers",
    ),
    where="apply self.dropout1 to the attention output and self.dropout2 to the FFN output, each "
    "before it is added to the residual, and self.dropout to the FFN's hidden units (after the "
    "activation)",
    still_active=Mistake(
        "dropout-in-eval",
        "dropout is still active in eval mode (on {site}, p={q:g}): use the nn.Dropout modules "
        "self.dropout1, self.dropout and self.dropout2, which model.eval() switches off, not "
        "F.dropout(x, p), which drops even in eval mode.",
    ),
)


def _layer_mistakes(ref, x, mask, norm_first: bool, train: bool) -> dict[str, torch.Tensor]:
    """Description -> the output of that mistake, computed with the reference's sub-modules."""
    d = layer_cases.dropout(ref.dropout.p) if train else layer_cases.same
    right = layer_cases.Shape(norm_first, (d, d, d), ("out", "out"), (True, True))

    def f(mask: torch.Tensor | None = mask, **changes: Any) -> Callable[[], torch.Tensor]:
        shape = dataclasses.replace(right, **changes)
        return lambda: _layer_formula(ref, x, mask, shape)

    m = layer_cases.norm_mistakes(f, norm_first, "norm1/norm2") | {
        Mistake(
            "no-residual",
            "there is no residual (skip) connection: each sub-layer's output must be added to its "
            "input x before (post-norm) or after (pre-norm) the norm.",
        ): f(residual=(False, False)),
        Mistake(
            "no-residual-around-attention",
            "the residual (skip) connection around the self-attention is missing: add the "
            "sub-layer's input x to the attention output.",
        ): f(residual=(False, True)),
        Mistake(
            "no-residual-around-ffn",
            "the residual (skip) connection around the feed-forward network is missing: add the "
            "FFN's input to its output.",
        ): f(residual=(True, False)),
        layer_cases.NO_ACTIVATION: f(activation=False),
    }
    if mask is not None:
        m |= {
            Mistake(
                "mask-ignored",
                "it ignores the padding mask, so padding leaks into the real positions. Pass the "
                "mask on to self.self_attn. The check calls layer(x, mask=mask) by keyword: a "
                "parameter with another name (say src_mask) next to **kwargs swallows it.",
            ): f(mask=None),
            Mistake(
                "mask-inverted",
                "it inverts the mask: True already means 'may attend', so pass it to "
                "self.self_attn as it is (no ~).",
            ): f(mask=~mask),
        }
    m |= layer_cases.dropout_mistakes(f, ref.dropout.p, train, norm_first, _DROPOUTS)
    return layer_cases.mistake_values(ref, train, m)


def _pair_hint(failure: Failure) -> str | None:
    if "tuple" not in failure.message:
        return None
    return Mistake(
        "attention-pair-not-unpacked",
        "self.self_attn returns a pair (output, weights): unpack it into two names (the "
        "weights are not needed here) and use the output.",
    )


def _layer_case(
    D, H, d_ff, p, norm_first, B, L, lengths, seed,
    mask_kind="padding", train=False, dtype=torch.float64, backward=False,
) -> Case:  # fmt: skip
    """``backward``: the gradients of an upstream drawn with ``seed + 4``, too."""
    ref = _reference_layer(D, H, d_ff, p, norm_first, seed, dtype)
    x = randn(B, L, D, seed=seed + 2).to(dtype)
    mask = {
        "padding": keep_first(lengths, L),
        "causal": encoder_lib.causal_mask(L),
        "none": None,
    }[mask_kind]
    call = Call(
        "EncoderLayer",
        "encoder_layer",
        (x,),
        {"mask": mask},
        init=((D, H, d_ff, p), {"norm_first": norm_first}),
        dtype=dtype,
        state=ref.state_dict(),
        train=train,
        seed=seed,
    )

    leaks = mask_kind == "padding" and not bool(mask.all()) and not train
    pad = ~keep_first(lengths, L, extra_axes=0) if leaks else ...  # (B, L)
    no_leak = Unchanged(
        call,
        (redrawn(x, pad, seed + 3),) if leaks else (x,),
        Mistake(
            "padding-leaks",
            "padding leaks into the real positions: changing only the padded positions of x "
            "changed the outputs at real positions. Pass the mask on to self.self_attn (as it "
            "is, True = may attend); the check calls layer(x, mask=mask) by keyword.",
        ),
        ~pad if leaks else ...,
        when=leaks,
    )
    extra = {"padding": "", "causal": ", causal mask", "none": ", no mask"}[mask_kind]
    case = Case(
        call,
        f"EncoderLayer({D}, {H}, {d_ff}, {p}, norm_first={norm_first}) on x of shape "
        f"{(B, L, D)}{extra}{_dtype_note(dtype)}" + (" in training mode" if train else ""),
        expected=layer_cases.reference_output(ref, call),
        mistakes=lambda: _layer_mistakes(ref, x, mask, norm_first, train),
        probes=(no_leak, layer_cases.right_in_eval(ref, call, _DROPOUTS.where)),
        locate=Locate(
            ref, _LAYER_PARTS, {"args[0]": "x (the layer's input)"}, functions=layer_cases.FUNCTIONS
        ),
    )
    if backward:
        return layer_cases.backpropagating_layer(case, ref, upstream=randn(B, L, D, seed=seed + 4))
    return case


def _layer_cases(thorough: bool) -> Iterator[Case]:
    yield _layer_case(16, 4, 32, 0.1, False, 2, 5, [5, 3], seed=61)
    yield _layer_case(16, 4, 32, 0.1, True, 2, 5, [5, 3], seed=62)
    yield _layer_case(16, 4, 32, 0.1, False, 2, 5, [5, 3], seed=61, train=True)
    yield _layer_case(16, 4, 32, 0.1, True, 2, 5, [5, 3], seed=62, train=True)
    if thorough:
        yield _layer_case(8, 2, 16, 0.0, False, 1, 1, [1], seed=63)
        yield _layer_case(12, 3, 24, 0.1, True, 3, 4, [4, 1, 2], seed=64)
        yield _layer_case(12, 3, 24, 0.1, False, 2, 6, [6, 6], seed=65, mask_kind="none")
        yield _layer_case(8, 2, 16, 0.1, True, 2, 5, [5, 5], seed=66, mask_kind="causal")
        yield _layer_case(8, 2, 16, 0.5, False, 2, 6, [6, 6], seed=68, mask_kind="none", train=True)
        yield _layer_case(12, 3, 24, 0.3, True, 3, 4, [4, 1, 2], seed=69, train=True)
        yield _layer_case(16, 4, 32, 0.1, False, 2, 5, [5, 2], seed=70, dtype=torch.float32)
        yield _layer_case(8, 2, 16, 0.1, False, 2, 4, [4, 2], seed=67, backward=True)


check_encoder_layer = runner.register_given(
    "(c)",
    "class EncoderLayer(nn.Module):",
    _layer_cases,
    forbidden=Forbidden(
        torch=_LAYER_KERNELS, python={encoder_lib.EncoderLayer: "encoder_lib.encoder.EncoderLayer"}
    ),
    letters=("(B, L, D)",),
    module=ModuleSpec(
        keep_init="keep the given __init__ (its sub-modules self_attn, linear1, linear2, "
        "norm1, norm2 have the names of nn.TransformerEncoderLayer)"
    ),
    inputs={"args[0]": "x", "mask": "mask"},
    failure_hint=_pair_hint,
)


# --- (d) the full encoder: its preparation, in the student's kernel -----------------------------

_PREPARE = "encoder.recorded_layers"


class _Recorder(nn.Module):
    """A reference layer that records what the student's forward hands it."""

    def __init__(self, layer: nn.Module, index: int, log: list[dict[str, Any]]):
        super().__init__()
        self.layer, self.index, self.log = layer, index, log

    def forward(self, x: Any = None, mask: Any = None, **kwargs: Any) -> Any:
        (x_copy, x_facts), (mask_copy, mask_facts) = map(observe.export_value, (x, mask))
        entry = {"index": self.index, "keywords": sorted(kwargs), "x": x_copy, "mask": mask_copy}
        entry["classes"] = [facts.get("", {}).get("class") for facts in (x_facts, mask_facts)]
        self.log.append(entry)
        try:
            return self.layer(x, mask)  # a misspelt keyword is ignored, as **kwargs would
        except Exception as error:  # recorded: the check says what was wrong with x or mask
            entry["error"] = f"{type(error).__name__}: {error}"
            return x


def _layer_from(options: Mapping[str, Any], state: Mapping[str, torch.Tensor], dtype):
    D, H, d_ff = options["shape"]
    with torch.random.fork_rng(devices=[]):
        layer = encoder_lib.EncoderLayer(D, H, d_ff, 0.0).to(dtype)
    layer.load_state_dict(state)
    return layer


@observe.preparation(_PREPARE)
def _prepare_encoder(model: nn.Module, call: Call, obs: Observation) -> bool:
    """Give the student's Encoder the check's embedding weights and recording reference layers
    (what each layer receives goes to ``obs.info["log"]``); stop before the call when it has no
    ``TokenEmbedding`` called ``embedding`` or not N layers in an ``nn.ModuleList`` called
    ``layers``. Runs in the student's kernel."""
    layers = [_layer_from(call.options, s, call.dtype) for s in call.options["layers"]]
    embedding, own = getattr(model, "embedding", None), getattr(model, "layers", None)
    parts = obs.info["parts"] = {
        "embedding": type(embedding) is encoder_lib.TokenEmbedding,
        "layers": len(own) if isinstance(own, nn.ModuleList) else None,
    }
    if not parts["embedding"] or parts["layers"] != len(layers):
        return False
    log = obs.info["log"] = []
    model.layers = nn.ModuleList(_Recorder(r, i, log) for i, r in enumerate(layers))
    with torch.no_grad():
        embedding.embedding.weight.copy_(call.options["embedding"])
    return True


# --- (d) the full encoder: judging what the call saw ---------------------------------------------

_MASK_AFTER = (
    "If you build it with your make_padding_mask, check exercise (b) first; "
    "encoder_lib.padding_mask(token_ids, self.pad_id) is allowed here."
)


def _mask_problem(mask: Any, expected: torch.Tensor, H: int) -> str | None:
    """What is wrong with the mask the forward passed to the layers, or None."""
    B, _, _, L = expected.shape
    if mask is None:
        return Mistake(
            "no-mask-to-layers",
            "it runs the layers without a padding mask, so padding leaks into the real positions "
            "(their outputs would change with the padded tokens). Build the mask from token_ids "
            "and pass it: x = layer(x, mask=mask).",
        )
    if not isinstance(mask, torch.Tensor):
        return Mistake(
            "mask-not-a-tensor",
            f"the mask passed to the layers is {vocabulary.describe(mask)}, not a torch.Tensor.",
        )
    if mask.dtype != torch.bool:
        return Mistake(
            "mask-not-bool",
            f"the mask passed to the layers has dtype {mask.dtype}; it must be boolean. "
            + (_MASK_AFTER),
        )
    if tuple(mask.shape) == (B, L) and L > 1:
        return Mistake(
            "mask-shape-b-l",
            f"the mask passed to the layers has shape (B, L) = {(B, L)}, which broadcasts against "
            f"the queries instead of the keys; it must be (B, 1, 1, L). {_MASK_AFTER}",
        )
    target = (B, H, L, L)
    fits = mask.dim() <= 4 and all(
        m in (1, t) for m, t in zip(reversed(mask.shape), reversed(target), strict=False)
    )
    if not fits:
        return Mistake(
            "mask-wrong-shape",
            f"the mask passed to the layers has shape {tuple(mask.shape)}; it must be "
            f"(B, 1, 1, L) = {(B, 1, 1, L)}. {_MASK_AFTER}",
        )
    got = mask.expand(target)
    if torch.equal(got, expected.expand(target)):
        return None
    if torch.equal(got, (~expected).expand(target)):
        return Mistake(
            "mask-reversed",
            "the mask passed to the layers has the wrong polarity: True at padding. True means "
            f"'may attend', so it must be True at the real tokens. {_MASK_AFTER}",
        )
    return Mistake(
        "mask-does-not-match-padding",
        "the mask passed to the layers does not match the padding of token_ids (True exactly "
        f"where token_ids != self.pad_id, shape (B, 1, 1, L)). {_MASK_AFTER}",
    )


class _EncoderSetup:
    """One Encoder case: its sizes, inputs, the weights sent to the kernel and the reference's
    intermediate values."""

    def __init__(self, sizes: tuple, ids: torch.Tensor, seed: int, train: bool, dtype) -> None:
        self.sizes, self.ids, self.seed, self.train, self.dtype = sizes, ids, seed, train, dtype
        self.V, self.D, self.H, self.d_ff, self.N, self.p, self.max_len, self.pad = sizes
        self.weight = randn(self.V, self.D, seed=self.seed + 2).to(self.dtype)
        self.weight[self.pad] = 0.0  # as nn.Embedding(padding_idx=pad) starts
        self.layers = [
            _reference_layer(self.D, self.H, self.d_ff, 0.0, False, self.seed + 10 + i, self.dtype)
            for i in range(self.N)
        ]
        self.mask = encoder_lib.padding_mask(self.ids, self.pad)  # (B, 1, 1, L)
        with reference_mode(), torch.no_grad():
            self.x0 = self.first_input()
            self.first = self.dropout(self.x0) if self.train else self.x0
            self.expected = self.run_layers(self.first)

    def call(self, ids: torch.Tensor | None = None, train: bool | None = None) -> Call:
        return Call(
            "Encoder",
            "encoder",
            (self.ids if ids is None else ids,),
            init=(self.sizes, {}),
            dtype=self.dtype,
            train=self.train if train is None else train,
            inspect=True,
            prepare=_PREPARE,
            options={
                "embedding": self.weight,
                "layers": [layer.state_dict() for layer in self.layers],
                "shape": (self.D, self.H, self.d_ff),
            },
            seed=self.seed,
        )

    def dropout(self, x: torch.Tensor) -> torch.Tensor:
        with reference_mode():
            return nn.Dropout(self.p).train()(x)

    def first_input(self, kind: str = "right") -> torch.Tensor:
        """What the first layer should receive (embedding + positional encoding), or what a
        mistake gives it."""
        B, L = self.ids.shape
        embedding = encoder_lib.TokenEmbedding(self.V, self.D, self.pad, scale=False)
        with torch.no_grad():
            embedding.to(self.dtype).embedding.weight.copy_(self.weight)
            emb = embedding(self.ids)  # (B, L, D), unscaled
        scale = self.D**0.5
        table = encoder_lib.sinusoidal_table(max(L, B), self.D).to(self.dtype)
        with reference_mode(), torch.no_grad():
            return {
                "right": lambda: emb * scale + table[:L],
                "no_pe": lambda: emb * scale,
                "by_batch": lambda: emb * scale + table[:B][:, None, :],
                "twice": lambda: emb * scale * scale + table[:L],
                "unscaled": lambda: emb + table[:L],
                "pe_scaled": lambda: (emb + table[:L]) * scale,
                "drop_embedding": lambda: self.dropout(emb * scale) + table[:L],
                "drop_pe": lambda: emb * scale + self.dropout(table[:L]),
                "twice_dropped": lambda: self.dropout(self.dropout(emb * scale + table[:L])),
            }[kind]()

    def run_layers(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            for layer in self.layers:
                x = layer(x, self.mask)
        return x


def _encoder_case(sizes, B, L, lengths, seed, train=False, dtype=torch.float64) -> Case:
    """``sizes``: the Encoder's ``(V, D, H, d_ff, N, p, max_len, pad)``."""
    s = _EncoderSetup(sizes, _ids(B, L, sizes[0], sizes[-1], lengths, seed + 1), seed, train, dtype)
    case = Case(
        s.call(),
        f"Encoder{sizes} on token_ids of shape {(B, L)}{_dtype_note(dtype)}"
        + (" in training mode" if train else ""),
        expected=s.expected,
        failure_hint=functools.partial(_sequence_first_hint, B, L, s.D),
        before=(
            lambda obs, ask: _layers_problem(s, obs),
            Intermediate(_first_input, lambda obs: _first_input_case(s, case, obs)),
            lambda obs, ask: _run_problem(s, obs),
        ),
    )
    return case


def _sequence_first_hint(B: int, L: int, D: int, failure: Failure) -> str | None:
    wanted = f"tensor a ({B}) must match the size of tensor b ({L}) at non-singleton dimension 0"
    if wanted not in failure.message:
        return None
    return Mistake(
        "pe-sequence-first",
        "That is what adding a sequence-first positional encoding, (L, 1, D), to batch-first x "
        f"(B, L, D) does: with one sentence the sum has shape (L, L, D) = {(L, L, D)}, with more "
        "it fails. Add the (L, D) table self.pe[:L], which broadcasts over the batch.",
    )


def _layers_problem(s: _EncoderSetup, obs: Observation) -> str | None:
    """Looked at first: the given sub-modules kept, the layers run, the first one with the
    padding mask."""
    parts = obs.info.get("parts", {})
    if not parts.get("embedding"):
        return Mistake(
            "embedding-replaced",
            "self.embedding should be the given encoder_lib.TokenEmbedding: keep the given "
            "__init__.",
        )
    if parts.get("layers") != s.N:
        return Mistake(
            "layers-replaced",
            f"self.layers should be an nn.ModuleList of num_layers = {s.N} EncoderLayers: keep "
            "the given __init__.",
        )
    log: list[dict[str, Any]] = obs.info.get("log", [])
    for entry in log:
        if entry["keywords"]:
            return Mistake(
                "misspelt-mask-keyword",
                f"it calls the layers with the keyword {', '.join(entry['keywords'])}, but "
                "EncoderLayer.forward takes (x, mask=None): pass the mask as mask=mask. (A "
                "misspelt keyword is dangerous: a layer whose forward has **kwargs would "
                "swallow it and silently ignore the padding mask.)",
            )
    if not log:
        return Mistake(
            "layers-never-run",
            "it never runs the layers in self.layers (for layer in self.layers: "
            "x = layer(x, mask=mask)).",
        )
    return _mask_problem(log[0]["mask"], s.mask, s.H)


def _run_problem(s: _EncoderSetup, obs: Observation) -> str | None:
    """Looked at once the first layer's input is right: every layer run once, in order, with
    the mask, on the previous one's output, and the last one's output returned."""
    log: list[dict[str, Any]] = obs.info["log"]
    for entry in log:
        if entry.get("error"):
            return Mistake(
                "bad-layer-input",
                f"layer {entry['index']} raised {entry['error']} on the input your forward "
                "gave it: pass x (B, L, D) and the mask (B, 1, 1, L).",
            )
    order = [entry["index"] for entry in log]
    if order != list(range(s.N)):
        return Mistake(
            "layers-out-of-order",
            f"it runs the layers in the order {order}; each of the {s.N} layers in self.layers "
            f"must run once, in order {list(range(s.N))}.",
        )
    for entry in log[1:]:
        problem = _mask_problem(entry["mask"], s.mask, s.H)
        if problem:
            return Mistake(problem.id, f"(layer {entry['index']}) {problem}")
    chain = _chain_problem(s, log)
    if chain:
        return chain
    last = s.layers[-1](log[-1]["x"], s.mask).detach()
    if not close(obs.value, last) and close(obs.value, log[0]["x"]):
        return Mistake(
            "returns-embeddings", "it returns the embeddings, not the output of the last layer."
        )
    return None


def _first_input(obs: Observation) -> Observation:
    """The input of the first layer (embedding + positional encoding), as recorded."""
    entry = obs.info["log"][0]
    facts = {"": {"class": entry["classes"][0]}} if entry["classes"][0] else {}
    return Observation(value=entry["x"], after=obs.after, info={"tensors": facts})


def _first_input_case(s: _EncoderSetup, case: Case, obs: Observation) -> Case:
    """The first layer's input, judged like an output: structure, shape, dtype, values, named
    mistakes, then the permutation probe."""
    B, L = s.ids.shape

    def mistakes() -> dict[str, torch.Tensor]:
        if s.train:
            dropped_output = close(obs.value, s.dropout(s.run_layers(s.x0)))
            never = (
                Mistake(
                    "dropout-on-output",
                    "self.dropout is applied to the output of the last layer instead: the layers "
                    "have their own dropout; self.dropout goes once, on the sum embedding + "
                    "positional encoding, before the layers.",
                )
                if dropped_output
                else Mistake(
                    "dropout-missing",
                    "self.dropout is never applied. In training mode the sum embedding + "
                    "positional encoding goes through self.dropout before the layers.",
                )
            )
            wrong = (
                "dropout is in the wrong place: it is applied to {} only. Apply self.dropout "
                "once, to the sum x = self.dropout(embedding + positional encoding)."
            )
            m = {
                never: s.x0,
                Mistake("dropout-on-embeddings-only", wrong.format("the token embeddings")): (
                    s.first_input("drop_embedding")
                ),
                Mistake("dropout-on-pe-only", wrong.format("the positional encoding")): (
                    s.first_input("drop_pe")
                ),
                Mistake(
                    "dropout-twice",
                    "self.dropout is applied twice to embedding + positional encoding: apply it "
                    "once.",
                ): s.first_input("twice_dropped"),
            }
        else:
            m = {
                Mistake(
                    "dropout-in-eval",
                    "self.dropout is still active in eval mode: use self.dropout (an nn.Dropout, "
                    "which model.eval() switches off), not F.dropout(x, p), which drops even in "
                    "eval mode.",
                ): s.dropout(s.x0)
            }
        structural = {
            Mistake(
                "no-positional-encoding",
                "no positional encoding is added to the embeddings: without it the encoder cannot "
                "tell positions apart (permuting the input tokens would just permute the outputs). "
                "Add self.pe[:L].",
            ): "no_pe",
            Mistake(
                "embeddings-scaled-twice",
                "the token embeddings are multiplied by sqrt(D) a second time: TokenEmbedding "
                "already scales by sqrt(D), so add the positional encoding to "
                "self.embedding(token_ids) as it is.",
            ): "twice",
            Mistake(
                "embeddings-not-scaled",
                "the token embeddings are not scaled by sqrt(D): call self.embedding(token_ids) "
                "(TokenEmbedding multiplies by sqrt(D)), not the inner nn.Embedding.",
            ): "unscaled",
            Mistake(
                "pe-scaled",
                "the positional encoding is scaled by sqrt(D) together with the embeddings: only "
                "the token embedding is scaled (TokenEmbedding does it); add self.pe[:L] "
                "afterwards.",
            ): "pe_scaled",
        }
        if B != L:
            structural[
                Mistake(
                    "pe-indexed-by-batch",
                    "the positional encoding of position b is added to every token of sentence b: "
                    "the table was indexed with the batch size x.size(0), as in sequence-first "
                    "code where the table has shape (max_len, 1, D). With batch-first x (B, L, D), "
                    "add self.pe[:L] with L = x.size(1).",
                )
            ] = "by_batch"
        for text, kind in structural.items():  # in training, followed by the right dropout
            wrong_input = s.first_input(kind)
            m[text] = s.dropout(wrong_input) if s.train else wrong_input
        return m

    def permutation(obs_: Observation, ask_: Ask) -> str | None:
        length = L if L > 2 else 3
        ids = _ids(1, length, s.V, s.pad, [length], s.seed + 7)
        perm = torch.roll(torch.arange(length), 1)
        out = ask_(s.call(ids, train=False)).value
        moved = ask_(s.call(ids[:, perm], train=False)).value
        if isinstance(out, torch.Tensor) and out.dim() == 3 and close(moved, out[:, perm]):
            return Mistake(
                "no-positional-encoding",
                "the encoder has no positional information: permuting the input tokens just "
                "permutes the outputs. Add the positional encoding self.pe[:L] to the embeddings.",
            )
        return None

    return dataclasses.replace(
        case,
        before=(),
        expected=s.first,
        mistakes=mistakes,
        probes=(permutation,),
        slots=("the input of the first layer (embedding + positional encoding)",),
        shape_hints=(
            {
                (L, L, s.D): Mistake(
                    "pe-sequence-first",
                    "The positional encoding is sequence-first, (L, 1, D), but x is "
                    "batch-first (B, L, D): with one sentence the sum has shape (L, L, D). Add the "
                    "(L, D) table self.pe[:L], which broadcasts over the batch.",
                )
            },
        ),
    )


def _chain_problem(s: _EncoderSetup, log: list[dict[str, Any]]) -> str | None:
    """Each layer gets the previous layer's output."""
    first = log[0]["x"]
    for entry in log[1:]:
        i = entry["index"]
        previous = s.layers[i - 1](log[i - 1]["x"], s.mask).detach()
        if close(entry["x"], previous):
            continue
        if close(entry["x"], first):
            return Mistake(
                "layer-outputs-discarded",
                "it discards the layers' outputs; every layer gets the embeddings. Feed each "
                "layer's output to the next: x = layer(x, mask=mask).",
            )
        if s.train and close(entry["x"], s.dropout(previous)):
            return Mistake(
                "dropout-between-layers",
                "it applies self.dropout between the layers too: each layer has its own "
                "dropout; self.dropout goes once, on embedding + positional encoding, before "
                "the layers.",
            )
        return Mistake(
            "layers-not-chained",
            f"layer {i} does not get the output of layer {i - 1}. Feed each layer's output to "
            "the next.",
        )
    return None


_SMALL = (23, 16, 4, 32, 2, 0.1, 12, 0)
"""The sizes ``(V, D, H, d_ff, N, p, max_len, pad)`` of the visible cases."""


def _encoder_cases(thorough: bool) -> Iterator[Case]:
    yield _encoder_case(_SMALL, B=2, L=7, lengths=[7, 4], seed=71)
    yield _encoder_case(_SMALL, B=2, L=7, lengths=[7, 4], seed=72, train=True)
    yield _encoder_case((30, 8, 2, 16, 3, 0.1, 5, 5), B=3, L=5, lengths=[2, 5, 3], seed=73)
    if thorough:
        yield _encoder_case((9, 8, 2, 16, 1, 0.0, 4, 2), B=1, L=1, lengths=[1], seed=74)
        yield _encoder_case((40, 12, 3, 24, 2, 0.2, 20, 1), B=4, L=9, lengths=[9, 1, 5, 8], seed=75)
        yield _encoder_case(
            (40, 12, 3, 24, 3, 0.3, 20, 1), B=3, L=6, lengths=[6, 2, 4], seed=76, train=True
        )
        yield _encoder_case(_SMALL, B=2, L=7, lengths=[7, 4], seed=77, dtype=torch.float32)


check_encoder = runner.register_given(
    "(d)",
    "class Encoder(nn.Module):",
    _encoder_cases,
    forbidden=Forbidden(
        torch=_LAYER_KERNELS,
        python={
            encoder_lib.TransformerEncoder: "encoder_lib.encoder.TransformerEncoder",
            encoder_lib.SentenceEncoder: "encoder_lib.model.SentenceEncoder",
            nn.TransformerEncoder: "nn.TransformerEncoder",
            nn.TransformerEncoderLayer: "nn.TransformerEncoderLayer",
        },
    ),
    slots=("the output",),
    letters=("(B, L, D)",),
    module=ModuleSpec(),
    inputs={"args[0]": "token_ids"},
    messages={
        "dtype": "{slot} has dtype {got}, but the model is {expected}: keep the model's dtype "
        "(no .float() or .double(), no new tensors made with a fixed dtype; the buffer self.pe "
        "follows model.to(...))."
    },
)
