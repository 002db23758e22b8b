"""Checks for notebook 05, assembling the encoder.

Exercises and the mistakes their checks name:

``check_sinusoidal_positional_encoding`` (a): sines and cosines concatenated (first half sin,
second half cos) instead of interleaved; the frequency taken from the column index j,
10000^(j/D), instead of the pair index, 10000^(2i/D); the factor 2 missing, 10000^(i/D); sin and
cos swapped; the position multiplied by 10000^(2i/D) instead of divided; a sequence-first
``(max_len, 1, D)`` or batched ``(1, max_len, D)`` table; a transposed table; integer output.

``check_make_padding_mask`` (b): reversed polarity (True at padding); the shape ``(B, L)``,
which broadcasts against the queries instead of the keys; ``(B, 1, L, 1)``, which masks queries;
``(B, 1, L)``, which lines the batch up with the heads; a non-boolean mask; a pad id hard-coded
to 0; ``token_ids`` modified in place.

``check_encoder_layer`` (c): no residual (around either sub-layer or both); the norm in the wrong
place (pre-norm when ``norm_first=False``, post-norm when ``norm_first=True``, the norm inside
the residual branch, a pre-norm residual that adds the normalised x); no FFN activation; the
mask ignored (including a misspelt keyword swallowed by ``**kwargs``: the check passes
``mask=`` by keyword) or inverted; dropout active in eval mode; padding leaking into real
positions (changing the padded positions of x must not change the real ones); no gradient.

``check_encoder`` (d): no positional encoding (also found by permuting the tokens); a
sequence-first table indexed with the batch size (position b added to all of sequence b) or
broadcast against batch-first data; embeddings scaled by sqrt(D) twice, or not at all (the given
``TokenEmbedding`` already scales, so the forward must not); the positional encoding scaled too;
no padding mask passed to the layers, or one passed under a misspelt keyword; a mask with
reversed polarity, the wrong shape or the wrong pad id; dropout missing or misplaced; layers
skipped, repeated or their outputs discarded.

Design choices:
- (d) does not depend on (c): the check builds the student's ``Encoder`` and swaps its
  ``layers`` for reference ``encoder_lib.EncoderLayer`` s (allowed in (d), so a student stuck on
  (c) can still finish (d)) that record the input and mask they receive. Mistakes are named at
  the first layer's input and at the mask, not only at the output.
- (d) does depend on (b) when the forward calls the student's ``make_padding_mask`` (as the
  solution does); ``encoder_lib.padding_mask`` is allowed there for a student stuck on (b).
- The given ``__init__`` of ``Encoder`` registers ``encoder_lib.sinusoidal_table`` as the buffer
  ``pe``, so (d) does not depend on (a) either.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import encoder_lib

from . import _core
from ._core import GradingError

__all__ = [
    "check_sinusoidal_positional_encoding",
    "check_make_padding_mask",
    "check_encoder_layer",
    "check_encoder",
]

# References captured at import, before any student cell runs.
_table = encoder_lib.sinusoidal_table
_padding_mask = encoder_lib.padding_mask
_RefLayer = encoder_lib.EncoderLayer
_TokenEmbedding = encoder_lib.TokenEmbedding

_FORBIDDEN_PE = (encoder_lib.sinusoidal_table, encoder_lib.SinusoidalPositionalEncoding)
_FORBIDDEN_MASK = (encoder_lib.padding_mask,)
_FORBIDDEN_TORCH_LAYER = {
    torch._transformer_encoder_layer_fwd: "torch._transformer_encoder_layer_fwd "
    "(nn.TransformerEncoderLayer's fused kernel)",
    F.multi_head_attention_forward: "F.multi_head_attention_forward "
    "(nn.MultiheadAttention, inside nn.TransformerEncoderLayer)",
}
_FORBIDDEN_LAYER = (encoder_lib.EncoderLayer, nn.TransformerEncoderLayer)
_FORBIDDEN_ENCODER = (
    encoder_lib.TransformerEncoder,
    encoder_lib.SentenceEncoder,
    nn.TransformerEncoder,
    nn.TransformerEncoderLayer,
)
_FORBIDDEN_D = (_FORBIDDEN_TORCH_LAYER, _FORBIDDEN_ENCODER)


# --- helpers -------------------------------------------------------------------------------------


def _ids(batch: int, length: int, vocab: int, pad: int, lengths: list[int], seed: int):
    """Token ids ``(B, L)``: row b has ``lengths[b]`` real tokens (never ``pad``), then padding."""
    g = _core.generator(seed)
    ids = torch.randint(0, vocab - 1, (batch, length), generator=g)
    ids = ids + (ids >= pad).long()  # skip the pad id
    for b, n in enumerate(lengths):
        ids[b, n:] = pad
    return ids


def _with_hint(err: GradingError, hints: dict[str, str]) -> GradingError:
    """Append a hint when the message of the exception behind ``err`` contains a key of
    ``hints``."""
    cause = err.__cause__
    text = f"{cause}" if cause is not None else ""
    for key, hint in hints.items():
        if key in text:
            return GradingError(f"{err} {hint}")
    return err


_PAIR_HINT = {
    "tuple": "(self.self_attn returns a pair (output, weights): unpack it, e.g. "
    "`attn, _ = self.self_attn(x, x, x, mask)`.)",
}


# --- (a) sinusoidal positional encoding ----------------------------------------------------------


def _pe_variant(max_len: int, d_model: int, kind: str) -> torch.Tensor:
    """The table a classic mistake produces, in float64."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    col = torch.arange(d_model, dtype=torch.float64)  # (D,)
    pair = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i, (D/2,)
    if kind == "column":  # column j uses 10000^(j/D)
        angle = pos / 10000.0 ** (col / d_model)
        table = torch.where(col.long() % 2 == 0, torch.sin(angle), torch.cos(angle))
        return table
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
    "concat": "the sines fill the first half of the columns and the cosines the second half "
    "(concatenated). They must be interleaved: column 2i holds sin and column 2i+1 holds cos of "
    "the same angle pos / 10000^(2i/D).",
    "column": "the frequency uses the column index j, 10000^(j/D), so columns 2i and 2i+1 get "
    "different frequencies. Use the pair index i (i = j // 2): both columns of a pair share "
    "10000^(2i/D).",
    "no_two": "the exponent is i/D with the pair index i; it must be 2i/D (the factor 2 is "
    "missing), i.e. 10000^(2i/D) where 2i is the even column of the pair.",
    "swapped": "sin and cos are swapped: even columns 2i hold sin, odd columns 2i+1 hold cos.",
}
_PE_MULTIPLY = (
    "the position is multiplied by 10000^(2i/D); it must be divided by it, pos / 10000^(2i/D), "
    "so that the wavelengths grow along D."
)


@_core.guarded
def check_sinusoidal_positional_encoding(fn: Callable, thorough: bool = False) -> None:
    """``fn(max_len, d_model)`` must return the ``(max_len, D)`` table with PE[pos, 2i] =
    sin(pos / 10000^(2i/D)) and PE[pos, 2i+1] = cos(pos / 10000^(2i/D))."""
    cases = [(50, 16), (7, 4)]
    if thorough:
        cases += [(1, 2), (9, 6), (128, 64), (3, 32)]
    for max_len, d_model in cases:
        what = f"sinusoidal_positional_encoding({max_len}, {d_model})"
        expected = _table(max_len, d_model).to(torch.float64)
        mistakes = {
            text: _pe_variant(max_len, d_model, kind) for kind, text in _PE_MISTAKES.items()
        }
        with _core.student_call("sinusoidal_positional_encoding", forbidden_python=_FORBIDDEN_PE):
            out = fn(max_len, d_model)
        _core.expect_tensor(out, what)
        shape = tuple(out.shape)
        if shape in ((max_len, 1, d_model), (1, max_len, d_model)):
            layout = (
                "sequence-first (max_len, 1, D)" if shape[1] == 1 else "batched (1, max_len, D)"
            )
            raise GradingError(
                f"{what} has shape {shape}: that is a {layout} table. Return the plain table "
                f"(max_len, D) = {(max_len, d_model)}; the Encoder adds self.pe[:L] to batch-first "
                "(B, L, D) data, where the (L, D) table broadcasts over the batch."
            )
        _core.expect_shape(out, (max_len, d_model), what, "(max_len, D)")
        if not out.is_floating_point():
            raise GradingError(
                f"{what} has dtype {out.dtype}; it must be a floating-point tensor (sin and cos "
                "of the angles, between -1 and 1)."
            )
        multiplied = _pe_variant(max_len, d_model, "multiply")

        def multiplies(out=out, multiplied=multiplied) -> str | None:
            # The angles pos * 10000^(2i/D) are huge, so float32 rounding makes all but the
            # first rows differ from any float64 table: compare positions 0 and 1 only.
            if _core._close(out[:2], multiplied[:2], atol=2e-2, rtol=0.0):
                return _PE_MULTIPLY
            return None

        _core.expect_close(out, expected, what, mistakes, atol=1e-4, rtol=0.0, probes=(multiplies,))


# --- (b) padding mask ----------------------------------------------------------------------------


@_core.guarded
def check_make_padding_mask(fn: Callable, thorough: bool = False) -> None:
    """``fn(token_ids, pad_id)`` must return a boolean ``(B, 1, 1, L)`` mask, True at real
    tokens (may attend) and False at padding."""
    cases = [
        (_ids(3, 6, 20, 0, [4, 2, 6], seed=51), 0),
        (_ids(2, 5, 20, 3, [5, 1], seed=52), 3),
    ]
    if thorough:
        cases += [
            (_ids(1, 1, 9, 0, [1], seed=53), 0),
            (_ids(4, 9, 30, 7, [9, 3, 0, 5], seed=54), 7),
            (_ids(5, 2, 12, 1, [2, 1, 2, 0, 1], seed=55), 1),
        ]
    for token_ids, pad_id in cases:
        _check_mask_case(fn, token_ids, pad_id)


def _check_mask_case(fn: Callable, token_ids: torch.Tensor, pad_id: int) -> None:
    B, L = token_ids.shape
    what = f"make_padding_mask(token_ids of shape {(B, L)}, pad_id={pad_id})"
    expected = _padding_mask(token_ids, pad_id)  # (B, 1, 1, L)
    given = token_ids.clone()
    with _core.student_call("make_padding_mask", forbidden_python=_FORBIDDEN_MASK):
        out = fn(given, pad_id)
    if not torch.equal(given, token_ids):
        raise GradingError(f"{what} modified token_ids in place; build a new tensor instead.")
    _core.expect_tensor(out, what)
    shape = tuple(out.shape)
    if shape != (B, 1, 1, L):
        if shape == (B, L):
            raise GradingError(
                f"{what} has shape (B, L) = {shape}. Attention scores have shape "
                "(B, H, L_q, L_k), and a (B, L) mask broadcasts against their last two "
                "dimensions (L_q, L_k): it lines the batch up with the queries instead of "
                "masking the keys (and fails unless B = L). Add two singleton dimensions: "
                f"(B, 1, 1, L) = {(B, 1, 1, L)}."
            )
        if shape == (B, 1, L, 1):
            raise GradingError(
                f"{what} has shape (B, 1, L, 1) = {shape}: it masks the queries (rows of the "
                "score matrix) instead of the keys (columns). Every query may look at every real "
                f"key: use (B, 1, 1, L) = {(B, 1, 1, L)}."
            )
        if shape == (B, 1, L):
            raise GradingError(
                f"{what} has shape (B, 1, L) = {shape}: against scores (B, H, L_q, L_k) it lines "
                f"the batch up with the heads. Use (B, 1, 1, L) = {(B, 1, 1, L)}."
            )
        _core.expect_shape(out, (B, 1, 1, L), what, "(B, 1, 1, L)")
    if out.dtype != torch.bool:
        numbers = out.detach()
        polarity = ""
        if torch.equal(numbers != 0, ~expected):
            polarity = " It is also reversed: True (1) must mark the real tokens."
        raise GradingError(
            f"{what} has dtype {out.dtype}; it must be boolean (torch.bool), True = may attend. "
            f"Compare the ids with pad_id (`!=`) and keep the result as it is.{polarity}"
        )
    if torch.equal(out, expected):
        return
    if torch.equal(out, ~expected):
        raise GradingError(
            f"{what} has the wrong polarity: it is True at padding and False at real tokens. In "
            "this course True means 'may attend' (as in F.scaled_dot_product_attention), so real "
            "tokens are True. (PyTorch's key_padding_mask is the opposite: True = ignore.)"
        )
    if pad_id != 0 and torch.equal(out, (token_ids != 0)[:, None, None, :]):
        raise GradingError(
            f"{what} compares the ids with 0 instead of pad_id = {pad_id}: use the pad_id "
            "argument, the padding id is not always 0."
        )
    b, pos = (out != expected)[:, 0, 0, :].nonzero()[0].tolist()
    raise GradingError(
        f"{what} does not match the reference: at batch {b}, position {pos} (token id "
        f"{int(token_ids[b, pos])}) it gives {bool(out[b, 0, 0, pos])}, expected "
        f"{bool(expected[b, 0, 0, pos])} (True exactly where token_ids != pad_id)."
    )


# --- (c) encoder layer ---------------------------------------------------------------------------


def _reference_layer(
    d_model: int, num_heads: int, d_ff: int, dropout: float, norm_first: bool, seed: int
) -> nn.Module:
    """An ``encoder_lib.EncoderLayer`` in float64 with every parameter random (no zero bias or
    unit gain that could hide a swapped or missing parameter), in eval mode."""
    with _core.seeded(seed):
        ref = _RefLayer(d_model, num_heads, d_ff, dropout, "relu", norm_first).double()
    g = _core.generator(seed + 1)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if name.startswith("norm") and name.endswith("weight"):
                p.copy_(1.0 + 0.3 * noise)
            elif name.endswith("bias"):
                p.copy_(0.2 * noise)
    return ref.eval()


def _layer_mistakes(ref: nn.Module, x: torch.Tensor, mask: Any, norm_first: bool):
    """The outputs of the classic layer mistakes, computed with the reference's sub-modules."""
    n1, n2 = ref.norm1, ref.norm2

    def sa(h, m=mask):
        return ref.self_attn(h, h, h, m, need_weights=False)[0]

    def ff(h, act=True):
        hidden = ref.linear1(h)
        return ref.linear2(ref.activation(hidden) if act else hidden)

    def post(x, m=mask, act=True, r1=True, r2=True):
        h = n1((x if r1 else 0) + sa(x, m))
        return n2((h if r2 else 0) + ff(h, act))

    def pre(x, m=mask, act=True, r1=True, r2=True):
        h = (x if r1 else 0) + sa(n1(x), m)
        return (h if r2 else 0) + ff(n2(h), act)

    right = pre if norm_first else post
    mode = "norm_first=True (pre-norm)" if norm_first else "norm_first=False (post-norm)"
    mistakes: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        if norm_first:
            mistakes[
                f"with {mode} it normalises after adding the residual (post-norm): with "
                "norm_first=True apply norm1/norm2 to the input of each sub-layer, "
                "x = x + sublayer(norm(x)), and leave the residual sum un-normalised. Is "
                "norm_first ignored?"
            ] = post(x)
            h = n1(x)
            h = h + sa(h)
            h2 = n2(h)
            mistakes[
                f"with {mode} the residual adds the normalised x: the skip connection must carry "
                "the un-normalised input, x = x + sublayer(norm(x))."
            ] = h2 + ff(h2)
        else:
            mistakes[
                f"with {mode} it normalises the input of each sub-layer (pre-norm): the norm is "
                "in the wrong place. Post-norm adds the residual first and then normalises, "
                "x = norm(x + sublayer(x)). Is norm_first ignored?"
            ] = pre(x)
            h = x + n1(sa(x))
            mistakes[
                f"with {mode} the norm is inside the residual branch, x + norm(sublayer(x)); "
                "post-norm normalises the sum: x = norm(x + sublayer(x))."
            ] = h + n2(ff(h))
        mistakes[
            "there is no residual (skip) connection: each sub-layer's output must be added to "
            "its input x before (post-norm) or after (pre-norm) the norm."
        ] = right(x, r1=False, r2=False)
        mistakes[
            "the residual (skip) connection around the self-attention is missing: add the "
            "sub-layer's input x to the attention output."
        ] = right(x, r1=False)
        mistakes[
            "the residual (skip) connection around the feed-forward network is missing: add "
            "the FFN's input to its output."
        ] = right(x, r2=False)
        mistakes[
            "the FFN has no activation between linear1 and linear2 (two linear maps in a row are "
            "one linear map): apply self.activation (ReLU) to linear1's output."
        ] = right(x, act=False)
        if mask is not None:
            mistakes[
                "it ignores the padding mask, so padding leaks into the real positions. Pass the "
                "mask on to self.self_attn. The check calls layer(x, mask=mask) by keyword: a "
                "parameter with another name (say src_mask) next to **kwargs swallows it."
            ] = right(x, m=None)
            mistakes[
                "it inverts the mask: True already means 'may attend', so pass it to "
                "self.self_attn as it is (no ~)."
            ] = right(x, m=~mask)
    return mistakes


def _make_layer(cls, args, kwargs, ref, seed):
    forbidden = (_FORBIDDEN_TORCH_LAYER, _FORBIDDEN_LAYER)
    with _core.student_call("EncoderLayer", *forbidden), _core.seeded(seed):
        layer = cls(*args, **kwargs)
    if not _core._isinstance(layer, nn.Module):
        raise GradingError("EncoderLayer(...) should build an nn.Module: keep the given __init__.")
    layer.double()
    try:
        layer.load_state_dict(ref.state_dict())
    except Exception as e:
        raise GradingError(
            "EncoderLayer's parameters do not have the names of nn.TransformerEncoderLayer "
            "(self_attn, linear1, linear2, norm1, norm2): keep the given __init__. "
            f"load_state_dict said: {e}"
        ) from e
    return layer.eval()


def _call_layer(layer, x, mask, what):
    try:
        with _core.student_call("EncoderLayer.forward", _FORBIDDEN_TORCH_LAYER, _FORBIDDEN_LAYER):
            return layer(x, mask=mask)
    except GradingError as e:
        raise _with_hint(e, _PAIR_HINT) from e.__cause__


def _check_layer_case(
    cls, D, H, d_ff, dropout, norm_first, B, L, lengths, seed, mask_kind="padding"
) -> None:
    mode = "norm_first=True" if norm_first else "norm_first=False"
    what = f"EncoderLayer({D}, {H}, {d_ff}, {mode}) on x of shape {(B, L, D)}"
    ref = _reference_layer(D, H, d_ff, dropout, norm_first, seed)
    x = _core.randn(B, L, D, seed=seed + 2)
    if mask_kind == "padding":
        mask = _core.keep_first(lengths, L)
    elif mask_kind == "causal":
        mask = encoder_lib.causal_mask(L)
    else:
        mask = None
    with torch.no_grad():
        expected = ref(x, mask)
        mistakes = _layer_mistakes(ref, x, mask, norm_first)
    layer = _make_layer(cls, (D, H, d_ff, dropout), {"norm_first": norm_first}, ref, seed)
    with torch.no_grad():
        out = _call_layer(layer, x.clone(), mask, what)
    _core.expect_tensor(out, what)

    def deterministic() -> str | None:
        with torch.no_grad():
            again = _call_layer(layer, x.clone(), mask, what)
        if not _core._close(again, out, 1e-12, 0.0):
            return (
                "it gives different outputs for the same input in eval mode: dropout must be "
                "off in eval. Use the nn.Dropout modules (self.dropout1, self.dropout, "
                "self.dropout2), not F.dropout(x, p), which drops even in eval mode."
            )
        return None

    def no_leak() -> str | None:
        if mask is None or bool(mask.all()):
            return None
        other = x.clone()
        pad = ~_core.keep_first(lengths, L, extra_axes=0)  # (B, L)
        other[pad] = _core.randn(int(pad.sum()), D, seed=seed + 3)
        with torch.no_grad():
            changed = _call_layer(layer, other, mask, what)
        real = ~pad
        same_shape = _core._type(changed) is _core._Tensor and changed.shape == out.shape
        if same_shape and not _core._close(changed[real], out[real]):
            return (
                "padding leaks into the real positions: changing only the padded positions "
                "of x changed the outputs at real positions. Pass the mask on to "
                "self.self_attn (as it is, True = may attend); the check calls "
                "layer(x, mask=mask) by keyword."
            )
        return None

    _core.expect_close(out, expected, what, mistakes, probes=(deterministic, no_leak))


def _check_layer_gradients(cls, D, H, d_ff, seed) -> None:
    ref = _reference_layer(D, H, d_ff, 0.1, False, seed)
    layer = _make_layer(cls, (D, H, d_ff, 0.1), {"norm_first": False}, ref, seed)
    mask = _core.keep_first([4, 2], 4)
    x_ref = _core.randn(2, 4, D, seed=seed + 2).requires_grad_()
    x = x_ref.detach().clone().requires_grad_()
    w = _core.randn(2, 4, D, seed=seed + 4)
    (ref(x_ref, mask) * w).sum().backward()
    what = "EncoderLayer's gradients"
    with _core.student_call("EncoderLayer.forward", _FORBIDDEN_TORCH_LAYER, _FORBIDDEN_LAYER):
        out = layer(x, mask=mask)
    _core.expect_tensor(out, "EncoderLayer's output")
    if not out.requires_grad:
        raise GradingError(
            f"{what}: no gradient reaches the output, so the layer cannot be trained. Do not "
            "detach tensors or use torch.no_grad() inside forward."
        )
    with _core.student_call("EncoderLayer's backward pass", _FORBIDDEN_TORCH_LAYER):
        (out * w).sum().backward()
    if x.grad is None:
        raise GradingError(
            f"{what}: no gradient reaches x. Do not detach tensors or use torch.no_grad() inside "
            "forward."
        )
    _core.expect_close(x.grad, x_ref.grad, "the gradient of EncoderLayer's output w.r.t. x")
    theirs = dict(ref.named_parameters())
    for name, p in layer.named_parameters():
        if p.grad is None:
            raise GradingError(
                f"{what}: parameter {name} gets no gradient: is it used in forward (and not "
                "detached)?"
            )
        _core.expect_close(p.grad, theirs[name].grad, f"the gradient of parameter {name}")


def _check_layer_trains_with_dropout(cls, D, H, d_ff, seed) -> None:
    ref = _reference_layer(D, H, d_ff, 0.5, False, seed)
    layer = _make_layer(cls, (D, H, d_ff, 0.5), {"norm_first": False}, ref, seed)
    layer.self_attn.dropout = 0.0  # only the layer's own dropout modules may make a difference
    x = _core.randn(2, 6, D, seed=seed + 2)
    with torch.no_grad():
        evaluated = _call_layer(layer, x, None, "EncoderLayer")
        layer.train()
        with _core.seeded(seed):
            trained = _call_layer(layer, x, None, "EncoderLayer")
    if _core._close(trained, evaluated, 1e-12, 0.0):
        raise GradingError(
            "EncoderLayer applies no dropout in training mode: pass the attention output "
            "through self.dropout1 and the FFN output through self.dropout2 (and its hidden "
            "units through self.dropout)."
        )


@_core.guarded
def check_encoder_layer(cls: type, thorough: bool = False) -> None:
    """``cls(d_model, num_heads, d_ff, dropout, norm_first=...)`` with the given ``__init__``;
    its ``forward(x, mask=None)`` must equal ``encoder_lib.EncoderLayer``, post-norm and
    pre-norm, with a padding mask passed by keyword."""
    _check_layer_case(cls, 16, 4, 32, 0.1, False, 2, 5, [5, 3], seed=61)
    _check_layer_case(cls, 16, 4, 32, 0.1, True, 2, 5, [5, 3], seed=62)
    if thorough:
        _check_layer_case(cls, 8, 2, 16, 0.0, False, 1, 1, [1], seed=63)
        _check_layer_case(cls, 12, 3, 24, 0.1, True, 3, 4, [4, 1, 2], seed=64)
        _check_layer_case(cls, 12, 3, 24, 0.1, False, 2, 6, [6, 6], seed=65, mask_kind="none")
        _check_layer_case(cls, 8, 2, 16, 0.1, True, 2, 5, [5, 5], seed=66, mask_kind="causal")
        _check_layer_gradients(cls, 8, 2, 16, seed=67)
        _check_layer_trains_with_dropout(cls, 8, 2, 16, seed=68)


# --- (d) the full encoder ------------------------------------------------------------------------


class _Recorder(nn.Module):
    """Wraps a reference layer and records the input and mask it receives and what it returns."""

    def __init__(self, layer: nn.Module, index: int, log: list[dict[str, Any]]):
        super().__init__()
        self.layer = layer
        self.index = index
        self.log = log

    def forward(self, x: Any, mask: Any = None, **kwargs: Any) -> torch.Tensor:
        if kwargs:
            raise GradingError(
                f"Encoder.forward calls the layers with the keyword {', '.join(kwargs)}, but "
                "EncoderLayer.forward takes (x, mask=None): pass the mask as mask=mask. (A "
                "misspelt keyword is dangerous: a layer whose forward has **kwargs would swallow "
                "it and silently ignore the padding mask.)"
            )
        entry: dict[str, Any] = {"index": self.index, "x": x, "mask": mask}
        self.log.append(entry)
        out = self.layer(x, mask)
        entry["out"] = out
        return out


def _mask_problem(mask: Any, expected: torch.Tensor, H: int) -> str | None:
    """What is wrong with the mask the forward passed to the layers, or None."""
    B, _, _, L = expected.shape
    after = (
        "If you build it with your make_padding_mask, check exercise (b) first; "
        "encoder_lib.padding_mask(token_ids, self.pad_id) is allowed here."
    )
    if mask is None:
        return (
            "it runs the layers without a padding mask, so padding leaks into the real "
            "positions (their outputs would change with the padded tokens). Build the mask from "
            "token_ids and pass it: x = layer(x, mask=mask)."
        )
    if _core._type(mask) is not _core._Tensor:
        return (
            f"the mask passed to the layers is a {_core._type(mask).__name__}, not a torch.Tensor."
        )
    if mask.dtype != torch.bool:
        return f"the mask passed to the layers has dtype {mask.dtype}; it must be boolean. {after}"
    if tuple(mask.shape) == (B, L) and L > 1:
        return (
            f"the mask passed to the layers has shape (B, L) = {(B, L)}, which broadcasts "
            "against the queries instead of the keys; it must be (B, 1, 1, L). " + after
        )
    target = (B, H, L, L)
    try:
        ok = torch.broadcast_shapes(mask.shape, target) == torch.Size(target)
    except RuntimeError:
        ok = False
    if not ok or mask.dim() > 4:
        return (
            f"the mask passed to the layers has shape {tuple(mask.shape)}; it must be "
            f"(B, 1, 1, L) = {(B, 1, 1, L)}. " + after
        )
    got = mask.expand(target)
    if torch.equal(got, expected.expand(target)):
        return None
    if torch.equal(got, (~expected).expand(target)):
        return (
            "the mask passed to the layers has the wrong polarity: True at padding. True means "
            "'may attend', so it must be True at the real tokens. " + after
        )
    return (
        "the mask passed to the layers does not match the padding of token_ids (True exactly "
        "where token_ids != self.pad_id, shape (B, 1, 1, L)). " + after
    )


class _EncoderCase:
    """One instance of the student's Encoder with recording reference layers."""

    def __init__(self, cls, V, D, H, d_ff, N, dropout, max_len, pad, seed):
        self.D, self.H, self.N, self.pad, self.dropout = D, H, N, pad, dropout
        self.signature = f"Encoder({V}, {D}, {H}, {d_ff}, {N}, {dropout}, {max_len}, {pad})"
        with _core.student_call("Encoder", *_FORBIDDEN_D), _core.seeded(seed):
            model = cls(V, D, H, d_ff, N, dropout, max_len, pad)
        if not _core._isinstance(model, nn.Module):
            raise GradingError(f"{self.signature} should build an nn.Module.")
        embedding = getattr(model, "embedding", None)
        if _core._type(embedding) is not _TokenEmbedding:
            raise GradingError(
                f"{self.signature}: self.embedding should be the given "
                "encoder_lib.TokenEmbedding: keep the given __init__."
            )
        layers = getattr(model, "layers", None)
        if not _core._isinstance(layers, nn.ModuleList) or len(layers) != N:
            raise GradingError(
                f"{self.signature}: self.layers should be an nn.ModuleList of num_layers = {N} "
                "EncoderLayers: keep the given __init__."
            )
        # Reference layers in place of the student's: this check does not depend on (c).
        self.refs = [_reference_layer(D, H, d_ff, 0.0, False, seed + 10 + i) for i in range(N)]
        self.log: list[dict[str, Any]] = []
        model.layers = nn.ModuleList(_Recorder(r, i, self.log) for i, r in enumerate(self.refs))
        self.model = model.double().eval()
        self.weight = embedding.embedding.weight.detach().clone()

    def first_input(self, ids: torch.Tensor, kind: str = "right") -> torch.Tensor:
        B, L = ids.shape
        emb = F.embedding(ids, self.weight)  # (B, L, D), unscaled
        scale = math.sqrt(self.D)
        table = _table(max(L, B), self.D).to(torch.float64)
        return {
            "right": emb * scale + table[:L],
            "no_pe": emb * scale,
            "by_batch": emb * scale + table[:B][:, None, :],
            "twice": emb * scale * scale + table[:L],
            "unscaled": emb + table[:L],
            "pe_scaled": (emb + table[:L]) * scale,
        }[kind]

    def expected(self, ids: torch.Tensor) -> torch.Tensor:
        mask = _padding_mask(ids, self.pad)
        x = self.first_input(ids)
        with torch.no_grad():
            for ref in self.refs:
                x = ref(x, mask)
        return x

    def run(self, ids: torch.Tensor, what: str) -> torch.Tensor:
        self.log.clear()
        try:
            with torch.no_grad(), _core.student_call("Encoder.forward", *_FORBIDDEN_D):
                out = self.model(ids.clone())
        except GradingError as e:
            if self.log:
                problem = _mask_problem(self.log[0]["mask"], _padding_mask(ids, self.pad), self.H)
                if problem:
                    raise GradingError(f"{what} is wrong: {problem} ({e})") from e
            if _core._isinstance(e.__cause__, RuntimeError) and "size" in f"{e.__cause__}":
                self._sequence_first_probe(ids, what, e)
            raise
        _core.expect_tensor(out, what)
        return out

    def _sequence_first_probe(self, ids: torch.Tensor, what: str, err: GradingError) -> None:
        L = ids.shape[1]
        self.log.clear()
        try:
            with torch.no_grad(), _core.student_call("Encoder.forward", *_FORBIDDEN_D):
                self.model(ids[:1].clone())
        except GradingError:
            return
        if self.log and tuple(self.log[0]["x"].shape) == (L, L, self.D):
            raise GradingError(
                f"{what} is wrong: the positional encoding is sequence-first, (L, 1, D), but x is "
                f"batch-first (B, L, D): with one sentence the sum has shape (L, L, D) = "
                f"{(L, L, self.D)}, with more it fails ({err.__cause__}). Add the (L, D) table "
                "self.pe[:L], which broadcasts over the batch."
            ) from err


def _check_encoder_case(cls, V, D, H, d_ff, N, dropout, max_len, pad, B, L, lengths, seed):
    case = _EncoderCase(cls, V, D, H, d_ff, N, dropout, max_len, pad, seed)
    ids = _ids(B, L, V, pad, lengths, seed + 1)
    what = f"{case.signature} on token_ids of shape {(B, L)}"
    expected = case.expected(ids)
    x0 = case.first_input(ids)
    out = case.run(ids, what)
    log = case.log
    if not log:
        raise GradingError(
            f"{what} is wrong: it never runs the layers in self.layers "
            "(for layer in self.layers: x = layer(x, mask=mask))."
        )
    problem = _mask_problem(log[0]["mask"], _padding_mask(ids, pad), H)
    if problem:
        raise GradingError(f"{what} is wrong: {problem}")
    order = [entry["index"] for entry in log]
    if order != list(range(N)):
        raise GradingError(
            f"{what} is wrong: it runs the layers in the order {order}; each of the {N} layers "
            f"in self.layers must run once, in order {list(range(N))}."
        )
    for entry in log[1:]:
        problem = _mask_problem(entry["mask"], _padding_mask(ids, pad), H)
        if problem:
            raise GradingError(f"{what} is wrong (layer {entry['index']}): {problem}")

    def permutation_probe() -> str | None:
        return _permutation_probe(case, V, L if L > 2 else 3, seed)

    first = log[0]["x"]
    mistakes = {
        "no positional encoding is added to the embeddings: without it the encoder cannot tell "
        "positions apart (permuting the input tokens would just permute the outputs). Add "
        "self.pe[:L].": case.first_input(ids, "no_pe"),
        "the token embeddings are multiplied by sqrt(D) a second time: TokenEmbedding already "
        "scales by sqrt(D), so add the positional encoding to self.embedding(token_ids) as it "
        "is.": case.first_input(ids, "twice"),
        "the token embeddings are not scaled by sqrt(D): call self.embedding(token_ids) "
        "(TokenEmbedding multiplies by sqrt(D)), not the inner nn.Embedding.": case.first_input(
            ids, "unscaled"
        ),
        "the positional encoding is scaled by sqrt(D) together with the embeddings: only the "
        "token embedding is scaled (TokenEmbedding does it); add self.pe[:L] afterwards.": (
            case.first_input(ids, "pe_scaled")
        ),
    }
    if B != L:
        mistakes[
            "the positional encoding of position b is added to every token of sentence b: the "
            "table was indexed with the batch size x.size(0), as in sequence-first code where "
            "the table has shape (max_len, 1, D). With batch-first x (B, L, D), add self.pe[:L] "
            "with L = x.size(1)."
        ] = case.first_input(ids, "by_batch")
    _core.expect_close(
        first,
        x0,
        f"{what}: the input of the first layer (embedding + positional encoding)",
        mistakes,
        probes=(permutation_probe,),
        atol=1e-5,
    )
    for entry in log[1:]:
        previous = log[entry["index"] - 1]["out"]
        if not _core._close(entry["x"], previous, 1e-9, 0.0):
            if _core._close(entry["x"], first, 1e-9, 0.0):
                raise GradingError(
                    f"{what} is wrong: it discards the layers' outputs; every layer gets the "
                    "embeddings. Feed each layer's output to the next: x = layer(x, mask=mask)."
                )
            raise GradingError(
                f"{what} is wrong: layer {entry['index']} does not get the output of layer "
                f"{entry['index'] - 1}. Feed each layer's output to the next."
            )
    if not _core._close(out, log[-1]["out"], 1e-9, 0.0) and _core._close(out, first, 1e-9, 0.0):
        raise GradingError(
            f"{what} is wrong: it returns the embeddings, not the output of the last layer."
        )
    _core.expect_close(out, expected, what, atol=1e-5)
    return case, ids, x0


def _permutation_probe(case: _EncoderCase, V: int, L: int, seed: int) -> str | None:
    ids = _ids(1, L, V, case.pad, [L], seed + 7)
    perm = torch.roll(torch.arange(L), 1)
    try:
        out = case.run(ids, "Encoder")
        moved = case.run(ids[:, perm], "Encoder")
    except GradingError:
        return None
    if _core._close(moved, out[:, perm], 1e-7, 0.0):
        return (
            "the encoder has no positional information: permuting the input tokens just "
            "permutes the outputs. Add the positional encoding self.pe[:L] to the embeddings."
        )
    return None


def _check_encoder_dropout(case: _EncoderCase, ids: torch.Tensor, x0: torch.Tensor, seed: int):
    what = f"{case.signature} in training mode"
    case.model.train()
    try:
        with _core.seeded(seed):
            case.run(ids, what)
    finally:
        case.model.eval()
    if not case.log:
        return
    got = case.log[0]["x"]
    if _core._type(got) is not _core._Tensor or got.shape != x0.shape:
        return
    p = case.dropout
    zero = got.abs() < 1e-12
    kept = (got - x0 / (1 - p)).abs() < 1e-6 * (1 + x0.abs())
    if bool((zero | kept).all()) and bool(zero[x0.abs() > 1e-9].any()):
        return
    if _core._close(got, x0, 1e-9, 0.0):
        raise GradingError(
            f"{what}: self.dropout is never applied. In training mode the sum embedding + "
            "positional encoding goes through self.dropout before the layers."
        )
    raise GradingError(
        f"{what}: dropout is in the wrong place. Apply self.dropout once, to the sum "
        "x = self.dropout(embedding + positional encoding), before the layers."
    )


@_core.guarded
def check_encoder(cls: type, thorough: bool = False) -> None:
    """``cls(vocab_size, d_model, num_heads, d_ff, num_layers, dropout, max_sequence_length,
    pad_id)`` with the given ``__init__``; its ``forward(token_ids)`` must embed (TokenEmbedding
    already scales by sqrt(D)), add ``self.pe[:L]``, apply dropout, build the padding mask and
    run every layer with it. The student's layers are replaced by reference ones here."""
    case, ids, x0 = _check_encoder_case(
        cls, 23, 16, 4, 32, 2, 0.1, 12, 0, B=2, L=7, lengths=[7, 4], seed=71
    )
    _check_encoder_dropout(case, ids, x0, seed=72)
    _check_encoder_case(cls, 30, 8, 2, 16, 3, 0.1, 5, 5, B=3, L=5, lengths=[2, 5, 3], seed=73)
    if thorough:
        _check_encoder_case(cls, 9, 8, 2, 16, 1, 0.0, 4, 2, B=1, L=1, lengths=[1], seed=74)
        _check_encoder_case(
            cls, 40, 12, 3, 24, 2, 0.2, 20, 1, B=4, L=9, lengths=[9, 1, 5, 8], seed=75
        )
