"""encoder_lib against PyTorch's own modules: same weights (transplanted with ``from_torch`` or
``to_torch``), same outputs and the same gradients of inputs and parameters.

Mask conventions: encoder_lib and ``F.scaled_dot_product_attention`` take True = may attend;
``nn.MultiheadAttention`` and ``nn.TransformerEncoder(Layer)`` take True = ignore, hence the ``~``.

"eval" below means eval mode *with autograd on* (we need gradients), where PyTorch takes its
ordinary Python path. Its C++ fast path (and, in ``nn.TransformerEncoder``, nested tensors) is
only taken without autograd; ``test_*_fast_path`` cover that case separately.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
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

from encoder_lib import (
    EncoderLayer,
    LayerNorm,
    MultiHeadAttention,
    TransformerEncoder,
    scaled_dot_product_attention,
)

D, H, D_FF, B, L = 8, 2, 16, 3, 5

dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
directions = pytest.mark.parametrize("direction", ["from_torch", "to_torch"])
modes = pytest.mark.parametrize("mode", ["train", "eval"])


def leaf(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, requires_grad=True)


def twin(x: torch.Tensor) -> torch.Tensor:
    """An independent leaf with the same values, for the PyTorch side of a comparison."""
    return x.detach().clone().requires_grad_(x.requires_grad)


def transplant(make_ours, make_theirs, ours_type, direction: str, dtype: torch.dtype, mode: str):
    """Build one module on one side with perturbed weights and convert it to the other side."""
    if direction == "from_torch":
        theirs = perturb_parameters_(make_theirs().to(dtype))
        ours = ours_type.from_torch(theirs)
    else:
        ours = perturb_parameters_(make_ours().to(dtype))
        theirs = ours.to_torch()
    assert isinstance(ours, ours_type)
    # Both directions must keep the dtype (and copy the values at that precision).
    assert all(p.dtype == dtype for p in [*ours.parameters(), *theirs.parameters()])
    return ours.train(mode == "train"), theirs.train(mode == "train")


# --- scaled dot-product attention --------------------------------------------------------------


def sdpa_mask(kind: str, B: int, H: int, L_q: int, L_k: int) -> torch.Tensor | None:
    if kind == "none":
        return None
    if kind == "padding":  # (B, 1, 1, L_k)
        return keep_mask(B, L_k)[:, None, None, :]
    if kind == "causal":  # (L_q, L_k)
        return torch.ones(L_q, L_k, dtype=torch.bool).tril()
    mask = torch.rand(B, H, L_q, L_k) < 0.5  # "random", (B, H, L_q, L_k)
    mask[..., torch.randint(L_k, ())] = True  # every query keeps at least one key
    return mask


@dtypes
@pytest.mark.parametrize("L_q,L_k", [(5, 5), (3, 6)], ids=["square", "rectangular"])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "random"])
@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_sdpa_matches_torch(dtype, L_q, L_k, mask_kind, need_weights):
    B, H, d_k, d_v = 2, 3, 4, 6
    q, k = leaf(B, H, L_q, d_k, dtype=dtype), leaf(B, H, L_k, d_k, dtype=dtype)
    v = leaf(B, H, L_k, d_v, dtype=dtype)
    q2, k2, v2 = twin(q), twin(k), twin(v)
    mask = sdpa_mask(mask_kind, B, H, L_q, L_k)

    out, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    ref = F.scaled_dot_product_attention(q2, k2, v2, attn_mask=mask)
    assert_close(out, ref, **TOL[dtype])
    g = torch.randn_like(out)
    loss, ref_loss = (out * g).sum(), (ref * g).sum()

    if need_weights:
        # PyTorch's own weights: attention applied to the identity matrix as values.
        eye = torch.eye(L_k, dtype=dtype).expand(B, H, L_k, L_k)
        ref_weights = F.scaled_dot_product_attention(q2, k2, eye, attn_mask=mask)
        assert_close(weights, ref_weights, **TOL[dtype])
        g_w = torch.randn_like(weights)
        loss, ref_loss = loss + (weights * g_w).sum(), ref_loss + (ref_weights * g_w).sum()
    else:
        assert weights is None

    loss.backward()
    ref_loss.backward()
    for name, ours_x, theirs_x in (("query", q, q2), ("key", k, k2), ("value", v, v2)):
        assert_close(ours_x.grad, theirs_x.grad, **TOL[dtype], msg=lambda m, n=name: f"{n}: {m}")


# --- multi-head attention ----------------------------------------------------------------------


def mha_pair(direction, dtype, mode):
    return transplant(
        lambda: MultiHeadAttention(D, H),
        lambda: nn.MultiheadAttention(D, H, dropout=0.0, batch_first=True),
        MultiHeadAttention,
        direction,
        dtype,
        mode,
    )


@dtypes
@directions
@modes
@pytest.mark.parametrize("attention", ["self", "cross"])
@pytest.mark.parametrize("padding", [False, True], ids=["no_mask", "padding_mask"])
@pytest.mark.parametrize("need_weights", [True, False], ids=["weights", "no_weights"])
def test_multi_head_attention_matches_torch(
    dtype, direction, mode, attention, padding, need_weights
):
    ours, theirs = mha_pair(direction, dtype, mode)
    if attention == "self":
        x = leaf(B, L, D, dtype=dtype)
        x2 = twin(x)
        inputs, inputs2, L_k = (x, x, x), (x2, x2, x2), L
    else:  # cross-attention: L_q != L_k, and key != value
        L_k = L + 2
        inputs = (leaf(B, L, D, dtype=dtype), leaf(B, L_k, D, dtype=dtype))
        inputs += (leaf(B, L_k, D, dtype=dtype),)
        inputs2 = tuple(twin(t) for t in inputs)
    keep = keep_mask(B, L_k) if padding else None

    out, weights = ours(*inputs, None if keep is None else keep[:, None, None, :], need_weights)
    ref, ref_weights = theirs(
        *inputs2,
        key_padding_mask=None if keep is None else ~keep,
        need_weights=need_weights,
        average_attn_weights=False,
    )
    assert_close(out, ref, **TOL[dtype])
    g = torch.randn_like(out)
    loss, ref_loss = (out * g).sum(), (ref * g).sum()
    if need_weights:
        assert weights.shape == (B, H, L, L_k)
        assert_close(weights, ref_weights, **TOL[dtype])
        g_w = torch.randn_like(weights)
        loss, ref_loss = loss + (weights * g_w).sum(), ref_loss + (ref_weights * g_w).sum()
    else:
        assert weights is None and ref_weights is None

    loss.backward()
    ref_loss.backward()
    for name, ours_x, theirs_x in zip(("query", "key", "value"), inputs, inputs2, strict=True):
        assert_close(ours_x.grad, theirs_x.grad, **TOL[dtype], msg=lambda m, n=name: f"{n}: {m}")
    assert_param_grads_close(ours, theirs, dtype)


@dtypes
@pytest.mark.parametrize("need_weights", [True, False], ids=["weights", "no_weights"])
def test_multi_head_attention_matches_torch_fast_path(dtype, need_weights, monkeypatch):
    """Eval mode without autograd, self-attention, even H: PyTorch runs its fused C++ kernel
    ``torch._native_multi_head_attention``. Observed on 2.13 CPU: it agrees with the Python path
    (and with ours) at every position, padded queries included."""
    calls = []
    native = torch._native_multi_head_attention
    monkeypatch.setattr(
        torch, "_native_multi_head_attention", lambda *a, **k: calls.append(1) or native(*a, **k)
    )
    ours, theirs = mha_pair("from_torch", dtype, "eval")
    x, keep = torch.randn(B, L, D, dtype=dtype), keep_mask(B, L)
    with torch.no_grad():
        out, weights = ours(x, x, x, keep[:, None, None, :], need_weights)
        ref, ref_weights = theirs(
            x, x, x, key_padding_mask=~keep, need_weights=need_weights, average_attn_weights=False
        )
    assert calls, "PyTorch did not take its fast path; this test would compare nothing new"
    assert_close(out, ref, **TOL[dtype])
    if need_weights:
        assert_close(weights, ref_weights, **TOL[dtype])


# --- LayerNorm ---------------------------------------------------------------------------------


@dtypes
@directions
@pytest.mark.parametrize("shape", [(D,), (L, D), (B, L, D)], ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_layer_norm_matches_torch(dtype, direction, shape, eps):
    ours, theirs = transplant(
        lambda: LayerNorm(D, eps),
        lambda: nn.LayerNorm(D, eps),
        LayerNorm,
        direction,
        dtype,
        "train",
    )
    assert ours.eps == theirs.eps == eps
    x = leaf(*shape, dtype=dtype)
    x2 = twin(x)
    out, ref = ours(x), theirs(x2)
    assert_close(out, ref, **TOL[dtype])
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    assert_close(x.grad, x2.grad, **TOL[dtype])
    assert_param_grads_close(ours, theirs, dtype)


# --- encoder layer and encoder stack -----------------------------------------------------------


def encoder_masks(kind: str, mask_arg: str):
    """(ours, theirs) keyword arguments: ours True = may attend, PyTorch's True = ignore.
    ``mask_arg`` is PyTorch's name for the (L, L) mask: ``src_mask`` in the layer, ``mask`` in
    the stack."""
    if kind == "none":
        return {}, {}
    if kind == "padding":
        keep = keep_mask(B, L)
        return {"mask": keep[:, None, None, :]}, {"src_key_padding_mask": ~keep}
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    return {"mask": causal}, {mask_arg: ~causal}


def check_forward_backward(ours, theirs, dtype, mask_kind, mask_arg):
    ours_mask, theirs_mask = encoder_masks(mask_kind, mask_arg)
    x = leaf(B, L, D, dtype=dtype)
    x2 = twin(x)
    out, ref = ours(x, **ours_mask), theirs(x2, **theirs_mask)
    assert_close(out, ref, **TOL[dtype])
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    assert_close(x.grad, x2.grad, **TOL[dtype])
    assert_param_grads_close(ours, theirs, dtype)


def layer_pair(direction, dtype, mode, norm_first, activation):
    return transplant(
        lambda: EncoderLayer(D, H, D_FF, 0.0, activation, norm_first),
        lambda: nn.TransformerEncoderLayer(
            D, H, D_FF, 0.0, activation, batch_first=True, norm_first=norm_first
        ),
        EncoderLayer,
        direction,
        dtype,
        mode,
    )


@dtypes
@directions
@modes
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal"])
def test_encoder_layer_matches_torch(dtype, direction, mode, norm_first, activation, mask_kind):
    ours, theirs = layer_pair(direction, dtype, mode, norm_first, activation)
    assert ours.activation_name == activation and ours.norm_first == theirs.norm_first
    check_forward_backward(ours, theirs, dtype, mask_kind, "src_mask")


def encoder_pair(direction, dtype, mode, norm_first, final_norm, num_layers=2):
    def make_theirs():
        layer = nn.TransformerEncoderLayer(D, H, D_FF, 0.0, batch_first=True, norm_first=norm_first)
        norm = nn.LayerNorm(D) if final_norm else None
        # nested tensors are not available with norm_first (PyTorch warns if asked)
        return nn.TransformerEncoder(layer, num_layers, norm, enable_nested_tensor=not norm_first)

    def make_ours():
        layer = EncoderLayer(D, H, D_FF, 0.0, "relu", norm_first)
        return TransformerEncoder(layer, num_layers, LayerNorm(D) if final_norm else None)

    return transplant(make_ours, make_theirs, TransformerEncoder, direction, dtype, mode)


@dtypes
@directions
@modes
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("final_norm", [False, True], ids=["no_final_norm", "final_norm"])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal"])
def test_encoder_matches_torch(dtype, direction, mode, norm_first, final_norm, mask_kind):
    ours, theirs = encoder_pair(direction, dtype, mode, norm_first, final_norm)
    assert (ours.norm is None) == (theirs.norm is None) == (not final_norm)
    check_forward_backward(ours, theirs, dtype, mask_kind, "mask")


@dtypes
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("final_norm", [False, True], ids=["no_final_norm", "final_norm"])
@pytest.mark.parametrize("padding", [False, True], ids=["no_mask", "padding_mask"])
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
def test_encoder_matches_torch_fast_path(dtype, norm_first, final_norm, padding, monkeypatch):
    """Eval mode without autograd: every nn.TransformerEncoderLayer runs the fused C++ kernel
    ``torch._transformer_encoder_layer_fwd`` (we check that it did, float64 included).

    Observed on PyTorch 2.13 CPU: with a padding mask and post-norm, nn.TransformerEncoder also
    packs the batch into a nested tensor, and the padded positions come back as exact zeros
    (then the final norm, if any, maps them to its bias), where ours and PyTorch's own Python
    path return the layer's output for those queries. Pre-norm disables the nested tensor, and
    then every position agrees. So the real positions are compared always, the padded ones only
    where no nested tensor was used."""
    calls = []
    fused = torch._transformer_encoder_layer_fwd
    monkeypatch.setattr(
        torch, "_transformer_encoder_layer_fwd", lambda *a, **k: calls.append(1) or fused(*a, **k)
    )
    ours, theirs = encoder_pair("from_torch", dtype, "eval", norm_first, final_norm)
    x, keep = torch.randn(B, L, D, dtype=dtype), keep_mask(B, L)
    if not padding:
        keep = torch.ones_like(keep)
    with torch.no_grad():
        out = ours(x, keep[:, None, None, :] if padding else None)
        ref = theirs(x, src_key_padding_mask=~keep if padding else None)
        nested_padding = torch.zeros_like(ref) if theirs.norm is None else theirs.norm(0 * ref)
    assert len(calls) == theirs.num_layers, "PyTorch did not take its fast path"
    assert_close(out[keep], ref[keep], **TOL[dtype])
    if padding and not norm_first:
        assert_close(ref[~keep], nested_padding[~keep], **TOL[dtype])  # observed, see above
        assert not torch.allclose(out[~keep], ref[~keep])
    else:
        assert_close(out, ref, **TOL[dtype])


# --- structure ---------------------------------------------------------------------------------


@directions
@pytest.mark.parametrize("module", ["mha", "layer_norm", "encoder_layer", "encoder"])
def test_state_dict_keys_match_torch(direction, module):
    if module == "mha":
        ours, theirs = mha_pair(direction, torch.float32, "train")
    elif module == "layer_norm":
        ours, theirs = transplant(
            lambda: LayerNorm(D),
            lambda: nn.LayerNorm(D),
            LayerNorm,
            direction,
            torch.float32,
            "train",
        )
    elif module == "encoder_layer":
        ours, theirs = layer_pair(direction, torch.float32, "train", False, "relu")
    else:
        ours, theirs = encoder_pair(direction, torch.float32, "train", True, final_norm=True)
    assert_state_dict_keys_match(ours, theirs)
    # the values were copied, not shared
    theirs_state = theirs.state_dict()
    for name, value in ours.state_dict().items():
        assert_close(value, theirs_state[name])
        assert value.data_ptr() != theirs_state[name].data_ptr()


def test_encoder_layers_are_transplanted_one_by_one():
    """nn.TransformerEncoder deep-copies its layer; after training the copies differ, and each
    must land in the matching layer of ours (and back)."""
    theirs = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(D, H, D_FF, batch_first=True), 3, enable_nested_tensor=False
    )
    perturb_parameters_(theirs)
    ours = TransformerEncoder.from_torch(theirs)
    back = ours.to_torch()
    for i in range(3):
        for name, p in theirs.layers[i].named_parameters():
            assert_close(ours.layers[i].get_parameter(name), p)
            assert_close(back.layers[i].get_parameter(name), p)


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("module", ["mha", "encoder_layer", "encoder"])
def test_transplant_keeps_training_mode_and_dropout(mode, module):
    """With dropout > 0 the mode matters: an eval-mode module must stay in eval mode."""
    if module == "mha":
        theirs = nn.MultiheadAttention(D, H, dropout=0.3, batch_first=True)
        cls = MultiHeadAttention
    elif module == "encoder_layer":
        theirs = nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.3, batch_first=True)
        cls = EncoderLayer
    else:
        theirs = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.3, batch_first=True),
            2,
            enable_nested_tensor=False,
        )
        cls = TransformerEncoder
    theirs.train(mode == "train")
    ours = cls.from_torch(theirs)
    back = ours.to_torch()
    for m in (ours, back):
        assert m.training == (mode == "train")
        assert [x.training for x in m.modules()] == [mode == "train"] * len(list(m.modules()))
    dropouts = [m.p for m in ours.modules() if isinstance(m, nn.Dropout)]
    if module == "mha":
        assert ours.dropout == back.dropout == 0.3
    else:
        assert dropouts and all(p == 0.3 for p in dropouts)
