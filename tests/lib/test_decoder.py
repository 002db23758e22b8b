"""encoder_lib's DecoderLayer and TransformerDecoder against nn.TransformerDecoderLayer and
nn.TransformerDecoder holding the same weights: outputs and gradients (of the target, of the
encoder output and of every parameter), train-mode dropout, transplants both ways, properties
(causality, source padding) and errors for bad input.

Mask conventions: encoder_lib takes True = may attend; PyTorch's boolean ``tgt_mask``,
``memory_mask`` and ``*_key_padding_mask`` take True = ignore, hence the ``~``. As in
``test_equivalence.py``, "eval" means eval mode with autograd on (PyTorch's Python path);
``test_*_fast_path`` covers inference mode, where PyTorch's self-attention takes its C++ kernel.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_equivalence import leaf, transplant, twin
from torch import nn
from torch.testing import assert_close
from torch_reference import (
    DTYPE_IDS,
    DTYPES,
    TOL,
    assert_param_grads_close,
    assert_state_dict_keys_match,
    keep_mask,
    perturb_parameters_,
)

from encoder_lib import DecoderLayer, LayerNorm, TransformerDecoder, causal_mask

D, H, D_FF, B = 8, 2, 16, 3
L_TGT, L_SRC = 5, 7  # different on purpose: cross-attention is (L_tgt, L_src)
F64 = torch.float64

dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
directions = pytest.mark.parametrize("direction", ["from_torch", "to_torch"])
modes = pytest.mark.parametrize("mode", ["train", "eval"])
norms = pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
MASK_KINDS = ["none", "causal", "source_padding", "memory_mask", "all"]
mask_kinds = pytest.mark.parametrize("mask_kind", MASK_KINDS)


def decoder_masks(kind: str) -> tuple[dict, dict]:
    """(ours, theirs) keyword arguments for one kind of masking. Ours: ``tgt_mask`` and
    ``memory_mask``, True = may attend. PyTorch's: the same names plus ``*_key_padding_mask``,
    True = ignore."""
    causal = causal_mask(L_TGT)
    keep_src, keep_tgt = keep_mask(B, L_SRC), keep_mask(B, L_TGT)
    if kind == "none":
        return {}, {}
    if kind == "causal":
        return {"tgt_mask": causal}, {"tgt_mask": ~causal}
    if kind == "source_padding":
        return {"memory_mask": keep_src[:, None, None, :]}, {"memory_key_padding_mask": ~keep_src}
    if kind == "memory_mask":  # an arbitrary (L_tgt, L_src) mask, every query keeps a key
        allowed = torch.rand(L_TGT, L_SRC) < 0.5
        allowed[torch.arange(L_TGT), torch.randint(L_SRC, (L_TGT,))] = True
        return {"memory_mask": allowed}, {"memory_mask": ~allowed}
    # "all": causal and target padding in the self-attention, source padding in the cross one
    ours = {
        "tgt_mask": causal & keep_tgt[:, None, None, :],
        "memory_mask": keep_src[:, None, None, :],
    }
    theirs = {
        "tgt_mask": ~causal,
        "tgt_key_padding_mask": ~keep_tgt,
        "memory_key_padding_mask": ~keep_src,
    }
    return ours, theirs


def layer_pair(direction, dtype, mode, norm_first=False, activation="relu", dropout=0.0):
    return transplant(
        lambda: DecoderLayer(D, H, D_FF, dropout, activation, norm_first),
        lambda: nn.TransformerDecoderLayer(
            D, H, D_FF, dropout, activation, batch_first=True, norm_first=norm_first
        ),
        DecoderLayer,
        direction,
        dtype,
        mode,
    )


def decoder_pair(direction, dtype, mode, norm_first, final_norm, num_layers=2, dropout=0.0):
    def make_theirs():
        layer = nn.TransformerDecoderLayer(
            D, H, D_FF, dropout, batch_first=True, norm_first=norm_first
        )
        return nn.TransformerDecoder(layer, num_layers, nn.LayerNorm(D) if final_norm else None)

    def make_ours():
        layer = DecoderLayer(D, H, D_FF, dropout, "relu", norm_first)
        return TransformerDecoder(layer, num_layers, LayerNorm(D) if final_norm else None)

    return transplant(make_ours, make_theirs, TransformerDecoder, direction, dtype, mode)


def check_forward_backward(ours, theirs, dtype, mask_kind):
    ours_masks, theirs_masks = decoder_masks(mask_kind)
    x, memory = leaf(B, L_TGT, D, dtype=dtype), leaf(B, L_SRC, D, dtype=dtype)
    x2, memory2 = twin(x), twin(memory)
    out, ref = ours(x, memory, **ours_masks), theirs(x2, memory2, **theirs_masks)
    assert out.shape == (B, L_TGT, D)
    assert_close(out, ref, **TOL[dtype])
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    assert_close(x.grad, x2.grad, **TOL[dtype], msg=lambda m: f"grad of x: {m}")
    assert_close(memory.grad, memory2.grad, **TOL[dtype], msg=lambda m: f"grad of memory: {m}")
    assert_param_grads_close(ours, theirs, dtype)


# --- forward and backward against PyTorch ------------------------------------------------------


@dtypes
@directions
@modes
@norms
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@mask_kinds
def test_decoder_layer_matches_torch(dtype, direction, mode, norm_first, activation, mask_kind):
    ours, theirs = layer_pair(direction, dtype, mode, norm_first, activation)
    assert ours.activation_name == activation and ours.norm_first == theirs.norm_first
    check_forward_backward(ours, theirs, dtype, mask_kind)


@dtypes
@directions
@modes
@norms
@pytest.mark.parametrize("final_norm", [False, True], ids=["no_final_norm", "final_norm"])
@mask_kinds
def test_decoder_matches_torch(dtype, direction, mode, norm_first, final_norm, mask_kind):
    ours, theirs = decoder_pair(direction, dtype, mode, norm_first, final_norm)
    assert (ours.norm is None) == (theirs.norm is None) == (not final_norm)
    check_forward_backward(ours, theirs, dtype, mask_kind)


@dtypes
@norms
@pytest.mark.parametrize("module", ["layer", "stack"])
@mask_kinds
def test_decoder_matches_torch_fast_path(dtype, norm_first, module, mask_kind, monkeypatch):
    """Inference mode: each PyTorch layer's self-attention (query is key is value) runs the fused
    C++ kernel ``torch._native_multi_head_attention`` (we check that it did); the
    cross-attention cannot. Observed on 2.13 CPU: every position agrees, padded ones included."""
    calls = []
    native = torch._native_multi_head_attention
    monkeypatch.setattr(
        torch, "_native_multi_head_attention", lambda *a, **k: calls.append(1) or native(*a, **k)
    )
    if module == "layer":
        ours, theirs = layer_pair("from_torch", dtype, "eval", norm_first)
    else:
        ours, theirs = decoder_pair("from_torch", dtype, "eval", norm_first, final_norm=True)
    ours_masks, theirs_masks = decoder_masks(mask_kind)
    x, memory = torch.randn(B, L_TGT, D, dtype=dtype), torch.randn(B, L_SRC, D, dtype=dtype)
    with torch.inference_mode():
        out, ref = ours(x, memory, **ours_masks), theirs(x, memory, **theirs_masks)
    layers = 1 if module == "layer" else theirs.num_layers
    assert len(calls) == layers, "PyTorch did not take its fast path"
    assert_close(out, ref, **TOL[dtype])


def layout_free_dropout(calls: list[int]):
    """``F.dropout`` that draws its mask in the tensor's logical order (one ``torch.rand`` of
    its shape), whatever its memory layout. Counts its calls in ``calls``."""

    def dropout(input, p=0.5, training=True, inplace=False):
        if not training or p == 0.0:
            return input
        calls.append(1)
        keep = torch.rand(input.shape, dtype=input.dtype, device=input.device) >= p
        return input * keep / (1.0 - p)

    return dropout


@dtypes
@norms
@pytest.mark.parametrize("module", ["layer", "stack"])
def test_train_mode_dropout_matches_torch(dtype, norm_first, module, monkeypatch):
    """Dropout 0.3 everywhere, train mode, same seed: same outputs and gradients, so ours drops
    at the same places (attention weights, three sub-layer outputs, FFN hidden units), with the
    same p, in the same order.

    Why the patch: PyTorch's batch-first attention computes sequence-first and returns a
    transposed view, and ``nn.Dropout`` draws its mask in memory order, so with the same seed it
    drops *different* elements of an equal tensor than ours does. ``layout_free_dropout`` takes
    the layout out of the comparison; attention-weight dropout (inside
    ``F.scaled_dot_product_attention``) is left as it is and agrees unpatched."""
    calls: list[int] = []
    monkeypatch.setattr(F, "dropout", layout_free_dropout(calls))
    if module == "layer":
        ours, theirs = layer_pair("from_torch", dtype, "train", norm_first, dropout=0.3)
    else:
        ours, theirs = decoder_pair(
            "from_torch", dtype, "train", norm_first, final_norm=True, dropout=0.3
        )
    ours_masks, theirs_masks = decoder_masks("all")
    x, memory = leaf(B, L_TGT, D, dtype=dtype), leaf(B, L_SRC, D, dtype=dtype)
    x2, memory2 = twin(x), twin(memory)
    torch.manual_seed(1)
    out = ours(x, memory, **ours_masks)
    ours_calls = len(calls)
    torch.manual_seed(1)
    ref = theirs(x2, memory2, **theirs_masks)
    layers = 1 if module == "layer" else 2
    assert ours_calls == len(calls) - ours_calls == 4 * layers  # dropout1, 2, 3 and the FFN's
    assert_close(out, ref, **TOL[dtype])
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    assert_close(x.grad, x2.grad, **TOL[dtype])
    assert_close(memory.grad, memory2.grad, **TOL[dtype])
    assert_param_grads_close(ours, theirs, dtype)
    # and dropout really acted: eval mode gives another answer
    with torch.no_grad():
        assert not torch.allclose(ours.eval()(x, memory, **ours_masks), out)


@dtypes
@norms
@pytest.mark.parametrize("mask_kind", ["none", "source_padding", "all"])
def test_cross_attention_weights_match_torch(dtype, norm_first, mask_kind):
    """``cross_attention_weights`` returns the weights PyTorch's ``multihead_attn`` computes on
    the query it is actually given inside the layer (caught with a forward hook)."""
    ours, theirs = layer_pair("from_torch", dtype, "eval", norm_first)
    ours_masks, theirs_masks = decoder_masks(mask_kind)
    x, memory = torch.randn(B, L_TGT, D, dtype=dtype), torch.randn(B, L_SRC, D, dtype=dtype)
    seen = []
    hook = theirs.multihead_attn.register_forward_hook(
        lambda mod, args, kwargs, out: seen.append((args, kwargs)), with_kwargs=True
    )
    theirs(x, memory, **theirs_masks)
    hook.remove()
    (query, key, value), kwargs = seen[0]
    assert key is memory and value is memory
    _, ref = theirs.multihead_attn(
        query,
        key,
        value,
        key_padding_mask=kwargs["key_padding_mask"],
        attn_mask=kwargs["attn_mask"],
        need_weights=True,
        average_attn_weights=False,
    )
    weights = ours.cross_attention_weights(x, memory, **ours_masks)
    assert weights.shape == (B, H, L_TGT, L_SRC)
    assert_close(weights, ref, **TOL[dtype])
    assert_close(weights.sum(-1), torch.ones(B, H, L_TGT, dtype=dtype), **TOL[dtype])
    if "memory_mask" in ours_masks:
        assert (weights[~ours_masks["memory_mask"].expand_as(weights)] == 0).all()


# --- transplants and state dicts ---------------------------------------------------------------


@directions
@pytest.mark.parametrize("module", ["layer", "stack"])
def test_state_dict_keys_match_torch(direction, module):
    if module == "layer":
        ours, theirs = layer_pair(direction, torch.float32, "train", norm_first=True)
    else:
        ours, theirs = decoder_pair(direction, torch.float32, "train", True, final_norm=True)
    assert_state_dict_keys_match(ours, theirs)
    theirs_state = theirs.state_dict()
    for name, value in ours.state_dict().items():  # the values were copied, not shared
        assert_close(value, theirs_state[name])
        assert value.data_ptr() != theirs_state[name].data_ptr()


@dtypes
@pytest.mark.parametrize("module", ["layer", "stack"])
def test_load_state_dict_both_ways(dtype, module):
    """Modules built separately on each side take each other's ``state_dict`` as it is."""
    if module == "layer":
        ours = DecoderLayer(D, H, D_FF, 0.0).to(dtype)
        theirs = nn.TransformerDecoderLayer(D, H, D_FF, 0.0, batch_first=True).to(dtype)
    else:
        ours = TransformerDecoder(DecoderLayer(D, H, D_FF, 0.0), 2, LayerNorm(D)).to(dtype)
        theirs = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(D, H, D_FF, 0.0, batch_first=True), 2, nn.LayerNorm(D)
        ).to(dtype)
    x, memory = torch.randn(B, L_TGT, D, dtype=dtype), torch.randn(B, L_SRC, D, dtype=dtype)
    causal = causal_mask(L_TGT)
    for source, target in ((theirs, ours), (ours, theirs)):
        perturb_parameters_(source)
        target.load_state_dict(source.state_dict())  # strict: every key, no extra one
        with torch.no_grad():
            out = ours(x, memory, causal)
            ref = theirs(x, memory, tgt_mask=~causal)
        assert_close(out, ref, **TOL[dtype])


def test_decoder_layers_are_transplanted_one_by_one():
    """nn.TransformerDecoder deep-copies its layer; once the copies differ, each must land in
    the matching layer of ours (and back)."""
    theirs = nn.TransformerDecoder(nn.TransformerDecoderLayer(D, H, D_FF, batch_first=True), 3)
    perturb_parameters_(theirs)
    ours = TransformerDecoder.from_torch(theirs)
    back = ours.to_torch()
    for i in range(3):
        for name, p in theirs.layers[i].named_parameters():
            assert_close(ours.layers[i].get_parameter(name), p)
            assert_close(back.layers[i].get_parameter(name), p)


@modes
@pytest.mark.parametrize("module", ["layer", "stack"])
def test_transplant_keeps_training_mode_dropout_and_eps(mode, module):
    layer = nn.TransformerDecoderLayer(
        D, H, D_FF, dropout=0.3, layer_norm_eps=1e-3, batch_first=True, norm_first=True
    )
    if module == "layer":
        theirs, cls = layer, DecoderLayer
    else:
        theirs, cls = nn.TransformerDecoder(layer, 2), TransformerDecoder
    theirs.train(mode == "train")
    ours = cls.from_torch(theirs)
    back = ours.to_torch()
    for m in (ours, back):
        assert [x.training for x in m.modules()] == [mode == "train"] * len(list(m.modules()))
    dropouts = [m.p for m in ours.modules() if isinstance(m, nn.Dropout)]
    attention = [m.dropout for m in ours.modules() if m.__class__.__name__ == "MultiHeadAttention"]
    per_layer = 4 if module == "layer" else 8
    assert dropouts == [0.3] * per_layer and attention == [0.3] * (per_layer // 2)
    for m in (ours, back):
        first = m if module == "layer" else m.layers[0]
        assert first.norm_first and first.norm1.eps == first.norm2.eps == first.norm3.eps == 1e-3


def test_from_torch_refuses_what_it_cannot_convert():
    with pytest.raises(TypeError, match=words("expected nn.TransformerDecoderLayer, got Linear")):
        DecoderLayer.from_torch(nn.Linear(D, D))
    with pytest.raises(TypeError, match=words("nn.TransformerDecoder,", "got TransformerDecoder")):
        TransformerDecoder.from_torch(TransformerDecoder(DecoderLayer(D, H, D_FF), 1))
    custom = nn.TransformerDecoderLayer(D, H, D_FF, activation=torch.tanh, batch_first=True)
    with pytest.raises(ValueError, match="only relu and gelu"):
        DecoderLayer.from_torch(custom)


# --- properties --------------------------------------------------------------------------------


def fast(max_examples: int = 25):
    return settings(derandomize=True, max_examples=max_examples, deadline=None)


def random_decoder(d_model: int, heads: int, norm_first: bool, stack: bool) -> nn.Module:
    layer = DecoderLayer(d_model, heads, 2 * d_model, dropout=0.1, norm_first=norm_first)
    module = TransformerDecoder(layer, 2, LayerNorm(d_model)) if stack else layer
    return perturb_parameters_(module).to(F64).eval()  # perturbed: the layers differ


def random_keep(batch: int, length: int, g: torch.Generator) -> torch.Tensor:
    """``(B, L)`` True at real positions: a random prefix of 1..L positions per row."""
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    return torch.arange(length)[None, :] < lengths[:, None]


sizes = {
    "batch": st.integers(1, 3),
    "L_tgt": st.integers(1, 6),
    "L_src": st.integers(1, 6),
    "heads": st.integers(1, 3),
    "d_head": st.integers(3, 4),  # D >= 3: LayerNorm over 1 or 2 features has few outputs
    "norm_first": st.booleans(),
    "stack": st.booleans(),
    "seed": st.integers(0, 2**16),
}
smallest = {"batch": 1, "L_tgt": 1, "L_src": 1, "heads": 1, "d_head": 3, "seed": 0}


@fast(50)
@example(**smallest, norm_first=False, stack=False, position=0)
@given(**sizes, position=st.integers(0, 5))
def test_causal_mask_hides_later_tokens(
    batch, L_tgt, L_src, heads, d_head, norm_first, stack, seed, position
):
    """Changing the target at one position changes no output before it when the causal mask is
    on; without it, earlier outputs do change (the test can tell the difference)."""
    torch.manual_seed(seed)
    position = min(position, L_tgt - 1)
    D = heads * d_head
    decoder = random_decoder(D, heads, norm_first, stack)
    x, memory = torch.randn(batch, L_tgt, D, dtype=F64), torch.randn(batch, L_src, D, dtype=F64)
    changed = x.clone()
    changed[:, position] = 10 * torch.randn(batch, D, dtype=F64)
    causal = causal_mask(L_tgt)
    with torch.no_grad():
        out, out_changed = decoder(x, memory, causal), decoder(changed, memory, causal)
        leaky, leaky_changed = decoder(x, memory), decoder(changed, memory)
    assert_close(out_changed[:, :position], out[:, :position], **TOL[F64])
    assert not torch.allclose(out_changed[:, position], out[:, position])
    if position > 0:
        assert not torch.allclose(leaky_changed[:, :position], leaky[:, :position])


@fast(50)
@example(**smallest, norm_first=False, stack=False, prefix=1)
@given(**sizes, prefix=st.integers(1, 6))
def test_prefix_gives_the_same_outputs(
    batch, L_tgt, L_src, heads, d_head, norm_first, stack, seed, prefix
):
    """With the causal mask, decoding the first t target positions alone gives the first t
    outputs of the whole target: what lets greedy decoding grow its output one token at a time
    and still agree with the training-time forward pass."""
    torch.manual_seed(seed)
    prefix = min(prefix, L_tgt)
    D = heads * d_head
    decoder = random_decoder(D, heads, norm_first, stack)
    x, memory = torch.randn(batch, L_tgt, D, dtype=F64), torch.randn(batch, L_src, D, dtype=F64)
    keep = random_keep(batch, L_src, torch.Generator().manual_seed(seed))[:, None, None, :]
    with torch.no_grad():
        out = decoder(x, memory, causal_mask(L_tgt), keep)
        out_prefix = decoder(x[:, :prefix], memory, causal_mask(prefix), keep)
    assert_close(out_prefix, out[:, :prefix], **TOL[F64])


@fast(50)
@example(**smallest, norm_first=False, stack=False, extra=1)
@given(**sizes, extra=st.integers(1, 4))
def test_source_padding_does_not_change_outputs(
    batch, L_tgt, L_src, heads, d_head, norm_first, stack, seed, extra
):
    """Masked source positions, whatever they hold and however many are appended, change
    nothing; and without the mask they would."""
    torch.manual_seed(seed)
    D = heads * d_head
    decoder = random_decoder(D, heads, norm_first, stack)
    x, memory = torch.randn(batch, L_tgt, D, dtype=F64), torch.randn(batch, L_src, D, dtype=F64)
    keep = random_keep(batch, L_src, torch.Generator().manual_seed(seed))
    garbage = torch.where(keep[..., None], memory, 50 * torch.randn_like(memory))
    longer = torch.cat([garbage, 50 * torch.randn(batch, extra, D, dtype=F64)], dim=1)
    keep_longer = torch.cat([keep, torch.zeros(batch, extra, dtype=torch.bool)], dim=1)
    causal = causal_mask(L_tgt)
    with torch.no_grad():
        out = decoder(x, memory, causal, keep[:, None, None, :])
        out_garbage = decoder(x, garbage, causal, keep[:, None, None, :])
        out_longer = decoder(x, longer, causal, keep_longer[:, None, None, :])
        unmasked = decoder(x, longer, causal)
    assert_close(out_garbage, out, **TOL[F64])
    assert_close(out_longer, out, **TOL[F64])
    assert not torch.allclose(unmasked, out)


@fast(30)
@example(**smallest, norm_first=False, stack=False)
@given(**sizes)
def test_source_order_does_not_matter(batch, L_tgt, L_src, heads, d_head, norm_first, stack, seed):
    """The decoder adds no positions to the memory: permuting the source positions (with their
    mask) leaves the output unchanged. Order reaches the decoder only through the encoder."""
    torch.manual_seed(seed)
    D = heads * d_head
    decoder = random_decoder(D, heads, norm_first, stack)
    x, memory = torch.randn(batch, L_tgt, D, dtype=F64), torch.randn(batch, L_src, D, dtype=F64)
    keep = random_keep(batch, L_src, torch.Generator().manual_seed(seed))
    perm = torch.randperm(L_src)
    causal = causal_mask(L_tgt)
    with torch.no_grad():
        out = decoder(x, memory, causal, keep[:, None, None, :])
        out_perm = decoder(x, memory[:, perm], causal, keep[:, perm][:, None, None, :])
    assert_close(out_perm, out, **TOL[F64])


# --- bad input ---------------------------------------------------------------------------------


def words(*parts: str) -> str:
    return ".*".join(re.escape(p) for p in parts)


@pytest.fixture(params=["layer", "stack"])
def decoder(request) -> nn.Module:
    layer = DecoderLayer(D, H, D_FF)
    return layer if request.param == "layer" else TransformerDecoder(layer, 2)


def test_wrong_rank_of_x(decoder):
    with pytest.raises(ValueError, match=words("x", "(B, L_tgt, D)", "3 dimensions", "(5, 8)")):
        decoder(torch.randn(L_TGT, D), torch.randn(B, L_SRC, D))


def test_wrong_rank_of_memory(decoder):
    """The classic slip: one encoder output (L_src, D) without its batch dimension."""
    with pytest.raises(
        ValueError, match=words("memory", "(B, L_src, D)", "3 dimensions", "(7, 8)")
    ):
        decoder(torch.randn(B, L_TGT, D), torch.randn(L_SRC, D))


@pytest.mark.parametrize("argument", ["x", "memory"])
def test_wrong_last_dimension(decoder, argument):
    x, memory = torch.randn(B, L_TGT, D), torch.randn(B, L_SRC, D)
    if argument == "x":
        x = torch.randn(B, L_TGT, 6)
    else:
        memory = torch.randn(B, L_SRC, 6)
    given = "(3, 5, 6)" if argument == "x" else "(3, 7, 6)"
    with pytest.raises(ValueError, match=words(argument, "last dimension D = 8", given)):
        decoder(x, memory)


def test_batch_sizes_differ(decoder):
    with pytest.raises(
        ValueError, match=words("memory", "(B, L_src, D)", "B = 3", "(3, 5, 8)", "(2, 7, 8)")
    ):
        decoder(torch.randn(B, L_TGT, D), torch.randn(2, L_SRC, D))


def test_padding_mask_without_its_broadcast_dimensions(decoder):
    """A (B, L_src) source padding mask where (B, 1, 1, L_src) is needed."""
    x, memory = torch.randn(B, L_TGT, D), torch.randn(B, L_SRC, D)
    with pytest.raises(
        ValueError,
        match=words("memory_mask", "(B, H, L_tgt, L_src) = (3, 2, 5, 7)", "got shape (3, 7)"),
    ):
        decoder(x, memory, memory_mask=keep_mask(B, L_SRC))


def test_masks_swapped(decoder):
    """The causal (L_tgt, L_tgt) mask given as memory_mask, the source padding as tgt_mask."""
    x, memory = torch.randn(B, L_TGT, D), torch.randn(B, L_SRC, D)
    source_padding = keep_mask(B, L_SRC)[:, None, None, :]
    with pytest.raises(
        ValueError, match=words("tgt_mask", "(B, H, L_tgt, L_tgt) = (3, 2, 5, 5)", "(3, 1, 1, 7)")
    ):
        decoder(x, memory, tgt_mask=source_padding)
    with pytest.raises(
        ValueError, match=words("memory_mask", "(B, H, L_tgt, L_src) = (3, 2, 5, 7)", "(5, 5)")
    ):
        decoder(x, memory, memory_mask=causal_mask(L_TGT))


@pytest.mark.parametrize("argument", ["tgt_mask", "memory_mask"])
def test_float_mask(decoder, argument):
    """PyTorch's additive float masks (0 / -inf) are refused, not reinterpreted."""
    x, memory = torch.randn(B, L_TGT, D), torch.randn(B, L_SRC, D)
    additive = nn.Transformer.generate_square_subsequent_mask(L_TGT)
    if argument == "memory_mask":
        additive = torch.zeros(L_TGT, L_SRC)
    with pytest.raises(
        ValueError, match=words(argument, "boolean", "True = may attend", "torch.float32")
    ):
        decoder(x, memory, **{argument: additive})


def test_constructor_errors():
    with pytest.raises(ValueError, match=words("embed_dim (D = 10)", "num_heads (H = 3)")):
        DecoderLayer(10, 3, 16)
    with pytest.raises(ValueError, match=words("activation", "['gelu', 'relu']", "'tanh'")):
        DecoderLayer(D, H, 16, activation="tanh")
    with pytest.raises(ValueError, match=words("num_layers", "at least 1", "0")):
        TransformerDecoder(DecoderLayer(D, H, 16), 0)
