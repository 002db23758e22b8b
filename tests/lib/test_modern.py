"""The encoder as built today: RMSNorm, gated FFNs, rotary embeddings, grouped-query and local
attention, and the ModernBERT-style layer and stack.

Where PyTorch has the piece (``nn.RMSNorm``, ``F.rms_norm``, ``F.scaled_dot_product_attention``
with ``enable_gqa=True``, ``nn.LayerNorm(bias=False)``) ours is compared with it, forward and
backward, in float64 and float32. Where it has not (rotary embeddings, the gated FFN, the layer),
ours is compared with a formula written out here from PyTorch's primitives, and with properties.
Masks: True = may attend, as ``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

import re

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

from encoder_lib.gated_feed_forward import (
    GatedFeedForward,
    feed_forward_parameter_counts,
    gated_d_ff,
)
from encoder_lib.masks import padding_mask, sliding_window_mask
from encoder_lib.modern_encoder import (
    ModernEncoder,
    ModernEncoderLayer,
    ModernSelfAttention,
    grouped_query_attention,
)
from encoder_lib.rms_norm import RMSNorm, rms_norm
from encoder_lib.rotary import RotaryEmbedding, apply_rotary, rotary_angles

D, H, H_KV, B, L = 8, 4, 2, 3, 5  # d_head = 2: the smallest head rotary embeddings allow

dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
directions = pytest.mark.parametrize("direction", ["from_torch", "to_torch"])
pairings = pytest.mark.parametrize("pairing", ["halves", "adjacent"])


def leaf(*shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, requires_grad=True)


def twin(x: torch.Tensor) -> torch.Tensor:
    """An independent leaf with the same values, for the PyTorch side of a comparison."""
    return x.detach().clone().requires_grad_(x.requires_grad)


def words(*parts: str) -> str:
    """A regex that finds each part (escaped, so "(B, L, D)" is literal) in order."""
    return ".*".join(re.escape(p) for p in parts)


# --- RMSNorm -----------------------------------------------------------------------------------


@dtypes
@directions
@pytest.mark.parametrize("shape", [(D,), (B, L, D)], ids=["1d", "3d"])
@pytest.mark.parametrize("eps", [None, 1e-5, 1e-2])
def test_rms_norm_module_matches_torch(dtype, direction, shape, eps):
    if direction == "from_torch":
        theirs = perturb_parameters_(nn.RMSNorm(D, eps=eps).to(dtype))
        ours = RMSNorm.from_torch(theirs)
    else:
        ours = perturb_parameters_(RMSNorm(D, eps).to(dtype))
        theirs = ours.to_torch()
    assert isinstance(ours, RMSNorm) and isinstance(theirs, nn.RMSNorm)
    assert ours.eps == theirs.eps == eps
    assert_state_dict_keys_match(ours, theirs)
    assert ours.weight.data_ptr() != theirs.weight.data_ptr(), "copied, not shared"
    x = leaf(*shape, dtype=dtype)
    x2 = twin(x)
    out, ref = ours(x), theirs(x2)
    assert_close(out, ref, **TOL[dtype])
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    assert_close(x.grad, x2.grad, **TOL[dtype])
    assert_param_grads_close(ours, theirs, dtype)


@dtypes
@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("eps", [None, 1e-3])
def test_rms_norm_function_matches_torch(dtype, with_weight, eps):
    x, w = leaf(B, L, D, dtype=dtype), leaf(D, dtype=dtype) if with_weight else None
    x2, w2 = twin(x), None if w is None else twin(w)
    out = rms_norm(x, w, eps)
    ref = F.rms_norm(x2, (D,), w2, eps)
    assert_close(out, ref, **TOL[dtype])
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    assert_close(x.grad, x2.grad, **TOL[dtype])
    if with_weight:
        assert_close(w.grad, w2.grad, **TOL[dtype])


def test_rms_norm_properties():
    """Unit root-mean-square output, invariant to scaling (not to shifting) the input."""
    x = torch.randn(B, L, D, dtype=torch.float64)
    y = rms_norm(x, eps=0.0)
    assert_close(y.square().mean(-1), torch.ones(B, L, dtype=torch.float64))
    assert_close(rms_norm(3.0 * x, eps=0.0), y)
    assert not torch.allclose(rms_norm(x + 1.0, eps=0.0), y), "RMSNorm does not centre"


def test_rms_norm_from_torch_rejects_what_it_cannot_copy():
    with pytest.raises(TypeError, match=r"nn\.RMSNorm"):
        RMSNorm.from_torch(nn.LayerNorm(D))
    with pytest.raises(ValueError, match="elementwise_affine=True"):
        RMSNorm.from_torch(nn.RMSNorm(D, elementwise_affine=False))


# --- grouped-query attention -------------------------------------------------------------------


def gqa_mask(kind: str, L_q: int, L_k: int) -> torch.Tensor | None:
    if kind == "none":
        return None
    if kind == "padding":  # (B, 1, 1, L_k)
        return keep_mask(B, L_k)[:, None, None, :]
    mask = torch.rand(B, H, L_q, L_k) < 0.5  # (B, H, L_q, L_k)
    mask[..., torch.randint(L_k, ())] = True  # every query keeps a key...
    if kind == "dead_row":
        mask[0, 1, 2] = False  # ...except this one: zero weights, zero output
    return mask


@dtypes
@pytest.mark.parametrize("num_kv_heads", [1, 2, 4], ids=["mqa", "gqa", "mha"])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "random", "dead_row"])
@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_grouped_query_attention_matches_torch(dtype, num_kv_heads, mask_kind, need_weights):
    L_q, L_k, d_head = 4, 6, 3
    q = leaf(B, H, L_q, d_head, dtype=dtype)
    k = leaf(B, num_kv_heads, L_k, d_head, dtype=dtype)
    v = leaf(B, num_kv_heads, L_k, 5, dtype=dtype)  # d_v = 5 differs from d_head
    q2, k2, v2 = twin(q), twin(k), twin(v)
    mask = gqa_mask(mask_kind, L_q, L_k)

    out, weights = grouped_query_attention(q, k, v, mask, need_weights=need_weights)
    ref = F.scaled_dot_product_attention(q2, k2, v2, attn_mask=mask, enable_gqa=True)
    assert out.shape == (B, H, L_q, 5)
    assert_close(out, ref, **TOL[dtype])
    if mask_kind == "dead_row":
        assert not out[0, 1, 2].any(), "a query that may attend to nothing gets a zero output"
    g = torch.randn_like(out)
    loss, ref_loss = (out * g).sum(), (ref * g).sum()
    if need_weights:
        # PyTorch's weights: attention applied to the identity matrix as values.
        eye = torch.eye(L_k, dtype=dtype).expand(B, num_kv_heads, L_k, L_k)
        ref_weights = F.scaled_dot_product_attention(q2, k2, eye, attn_mask=mask, enable_gqa=True)
        assert_close(weights, ref_weights, **TOL[dtype])
        g_w = torch.randn_like(weights)
        loss, ref_loss = loss + (weights * g_w).sum(), ref_loss + (ref_weights * g_w).sum()
    else:
        assert weights is None
    loss.backward()
    ref_loss.backward()
    for name, ours_x, theirs_x in (("query", q, q2), ("key", k, k2), ("value", v, v2)):
        assert_close(ours_x.grad, theirs_x.grad, **TOL[dtype], msg=lambda m, n=name: f"{n}: {m}")


def test_grouped_query_attention_groups_consecutive_heads():
    """With H = 4 and H_kv = 2, query heads 0 and 1 read key/value head 0, heads 2 and 3 head 1."""
    q = torch.randn(1, 1, 3, 2).expand(1, 4, 3, 2)  # the same query in every head
    k, v = torch.randn(1, 2, 3, 2), torch.randn(1, 2, 3, 2)
    out, _ = grouped_query_attention(q, k, v)
    assert_close(out[:, 0], out[:, 1])
    assert_close(out[:, 2], out[:, 3])
    assert not torch.allclose(out[:, 1], out[:, 2])


# --- sliding-window mask -----------------------------------------------------------------------


@pytest.mark.parametrize("length,window", [(1, 2), (7, 2), (7, 4), (9, 6), (5, 100)])
def test_sliding_window_mask_is_a_symmetric_band(length, window):
    mask = sliding_window_mask(length, window)
    assert mask.shape == (length, length) and mask.dtype == torch.bool
    assert torch.equal(mask, mask.T), "symmetric: i sees j exactly when j sees i"
    assert mask.diagonal().all(), "every query sees its own position"
    half = window // 2
    for i in range(length):
        seen = mask[i].nonzero().flatten().tolist()
        assert seen == list(range(max(0, i - half), min(length, i + half + 1))), (i, seen)


def test_sliding_window_mask_modernbert_width():
    """ModernBERT's window = 128: 64 keys on each side, 129 with the query itself."""
    mask = sliding_window_mask(300, 128)
    assert mask[150].sum() == 129
    assert mask[0].sum() == 65


def test_sliding_window_mask_wide_window_is_global():
    assert sliding_window_mask(L, 2 * (L - 1)).all()
    assert not sliding_window_mask(L, 2 * (L - 1) - 2).all()


def test_sliding_window_mask_combined_with_padding():
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])  # pad id 0
    combined = padding_mask(ids, 0) & sliding_window_mask(5, 2)  # (B, 1, 5, 5)
    assert combined.shape == (2, 1, 5, 5)
    assert torch.equal(combined[0, 0], sliding_window_mask(5, 2))
    expected = sliding_window_mask(5, 2).clone()
    expected[:, 3:] = False  # nobody attends to the padding
    assert torch.equal(combined[1, 0], expected)


# --- rotary embeddings -------------------------------------------------------------------------


def rope_reference(x: torch.Tensor, pairing: str, base: float = 10000.0) -> torch.Tensor:
    """Rotation as multiplication by e^{i m theta_k} of the complex numbers a feature pair forms
    (Meta's Llama code), written independently of ``apply_rotary``."""
    *_, length, d = x.shape
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    turn = torch.polar(
        torch.ones(length, d // 2, dtype=torch.float64), torch.arange(length)[:, None] * theta
    )
    if pairing == "adjacent":
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
        return torch.view_as_real(z * turn.to(z.dtype)).flatten(-2)
    z = torch.complex(x[..., : d // 2], x[..., d // 2 :])
    z = z * turn.to(z.dtype)
    return torch.cat((z.real, z.imag), dim=-1)


def rotate(x: torch.Tensor, pairing: str, base: float = 10000.0) -> torch.Tensor:
    angles = rotary_angles(x.shape[-2], x.shape[-1], base, dtype=torch.float64)
    return apply_rotary(x, angles.cos().to(x.dtype), angles.sin().to(x.dtype), pairing)


@dtypes
@pairings
def test_apply_rotary_matches_complex_multiplication(dtype, pairing):
    x = torch.randn(B, H, L, 6, dtype=dtype)
    assert_close(rotate(x, pairing), rope_reference(x, pairing), **TOL[dtype])


def test_rotary_angles_formula():
    angles = rotary_angles(4, 6, base=100.0, dtype=torch.float64)
    assert angles.shape == (4, 3)
    for m in range(4):
        for i in range(3):
            assert angles[m, i].item() == pytest.approx(m * 100.0 ** (-2 * i / 6), rel=1e-14)


@pairings
def test_rotary_position_zero_is_identity_and_norm_is_kept(pairing):
    x = torch.randn(B, L, 6, dtype=torch.float64)
    y = rotate(x, pairing)
    assert_close(y[:, 0], x[:, 0])
    assert_close(y.norm(dim=-1), x.norm(dim=-1))
    assert not torch.allclose(y[:, 1:], x[:, 1:])


def test_rotary_pairings_agree_up_to_a_permutation():
    """Reading features 0, 2, 4, ..., 1, 3, 5, ... turns the adjacent layout into the halves one."""
    d = 8
    perm = torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))  # [0, 2, 4, 6, 1, 3, 5, 7]
    x = torch.randn(B, L, d, dtype=torch.float64)
    assert_close(rotate(x, "adjacent")[..., perm], rotate(x[..., perm], "halves"))
    assert not torch.allclose(rotate(x, "adjacent"), rotate(x, "halves"))


@pairings
def test_rotary_scores_depend_on_relative_position_only(pairing):
    """q rotated to position m against k rotated to n gives the score of m + s against n + s."""
    d, length = 6, 16
    angles = rotary_angles(length, d, dtype=torch.float64)
    cos, sin = angles.cos(), angles.sin()
    q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)

    def score(m: int, n: int) -> torch.Tensor:
        q_m = apply_rotary(q[None], cos[m : m + 1], sin[m : m + 1], pairing)  # (1, d)
        k_n = apply_rotary(k[None], cos[n : n + 1], sin[n : n + 1], pairing)  # (1, d)
        return (q_m * k_n).sum()

    for m, n in [(0, 3), (5, 2), (4, 4)]:
        for shift in (1, 4, 7):
            assert_close(score(m + shift, n + shift), score(m, n))
    assert not torch.allclose(score(0, 3), score(0, 4))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_rotary_embedding_follows_input_dtype(dtype):
    q, k = torch.randn(B, H, L, 4, dtype=dtype), torch.randn(B, H_KV, L, 4, dtype=dtype)
    q_rot, k_rot = RotaryEmbedding(4)(q, k)
    assert q_rot.dtype == k_rot.dtype == dtype
    assert q_rot.shape == q.shape and k_rot.shape == k.shape
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else TOL[dtype]
    assert_close(q_rot.double(), rope_reference(q.double(), "halves"), **tol)


# --- gated feed-forward ------------------------------------------------------------------------


@dtypes
@pytest.mark.parametrize("activation,act", [("gelu", F.gelu), ("silu", F.silu)])
def test_gated_feed_forward_matches_formula(dtype, activation, act):
    """GeGLU(x) = W_o (GELU(W_a x) * W_l x), SwiGLU with SiLU; W_a the first half of ``wi``."""
    d_ff = 6
    w_a, w_l = nn.Linear(D, d_ff, bias=False), nn.Linear(D, d_ff, bias=False)
    w_o = nn.Linear(d_ff, D, bias=False)
    for m in (w_a, w_l, w_o):
        m.to(dtype)
    ffn = GatedFeedForward(D, d_ff, activation).to(dtype)
    with torch.no_grad():
        ffn.wi.weight.copy_(torch.cat((w_a.weight, w_l.weight)))  # (2 d_ff, D)
        ffn.wo.weight.copy_(w_o.weight)
    x = leaf(B, L, D, dtype=dtype)
    x2 = twin(x)
    out = ffn(x)
    ref = w_o(act(w_a(x2)) * w_l(x2))
    assert_close(out, ref, **TOL[dtype])
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    assert_close(x.grad, x2.grad, **TOL[dtype])
    assert_close(ffn.wi.weight.grad, torch.cat((w_a.weight.grad, w_l.weight.grad)), **TOL[dtype])
    assert_close(ffn.wo.weight.grad, w_o.weight.grad, **TOL[dtype])


@pytest.mark.parametrize("d_model", [*range(1, 25), 512, 768, 1024, 4096])
def test_two_thirds_rule_matches_the_plain_ffn_count(d_model):
    """d_ff = round(8D / 3): 3 D d_ff weights against the plain network's 8 D^2, within D."""
    d_ff = gated_d_ff(d_model)
    assert d_ff == round(8 * d_model / 3)
    gated, plain = feed_forward_parameter_counts(d_model)
    assert plain == 8 * d_model**2
    assert abs(gated - plain) <= d_model, "relative difference at most 1 / (8 D)"
    if d_model in (8, 768):
        ffn = GatedFeedForward(d_model)
        assert ffn.d_ff == d_ff == {8: 21, 768: 2048}[d_model]
        assert sum(p.numel() for p in ffn.parameters()) == gated


def test_gated_feed_forward_has_no_biases_and_takes_an_explicit_width():
    ffn = GatedFeedForward(D, 10, "silu")
    assert [name for name, _ in ffn.named_parameters()] == ["wi.weight", "wo.weight"]
    assert ffn.wi.weight.shape == (20, D) and ffn.wo.weight.shape == (D, 10)
    assert feed_forward_parameter_counts(D, 10) == (3 * D * 10, 8 * D * D)


# --- the layer against a formula written from PyTorch's primitives ------------------------------


def reference_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    if isinstance(norm, nn.LayerNorm):
        assert norm.bias is None
        return F.layer_norm(x, (D,), norm.weight, None, norm.eps)
    return F.rms_norm(x, (D,), norm.weight, norm.eps)


def reference_layer(layer: ModernEncoderLayer, x: torch.Tensor, mask) -> torch.Tensor:
    """x + attn(norm1(x)), then + ffn(norm2(.)): F.linear, ``rope_reference`` on q and k,
    F.scaled_dot_product_attention with enable_gqa, F.gelu or F.silu."""
    attn, ffn = layer.self_attn, layer.ffn
    B, L, _ = x.shape
    d_head, H_kv = attn.head_dim, attn.num_kv_heads
    h = reference_norm(layer.norm1, x)
    q = F.linear(h, attn.q_proj.weight).reshape(B, L, -1, d_head).transpose(1, 2)
    k = F.linear(h, attn.k_proj.weight).reshape(B, L, H_kv, d_head).transpose(1, 2)
    v = F.linear(h, attn.v_proj.weight).reshape(B, L, H_kv, d_head).transpose(1, 2)
    q, k = rope_reference(q, attn.rotary.pairing), rope_reference(k, attn.rotary.pairing)
    if attn.window is not None:
        i = torch.arange(L)
        band = (i[:, None] - i[None, :]).abs() <= attn.window // 2
        mask = band if mask is None else mask & band
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    x = x + F.linear(a.transpose(1, 2).reshape(B, L, D), attn.out_proj.weight)
    h = reference_norm(layer.norm2, x)
    w_a, w_l = ffn.wi.weight.chunk(2)
    act = {"gelu": F.gelu, "silu": F.silu}[ffn.activation_name]
    return x + F.linear(act(F.linear(h, w_a)) * F.linear(h, w_l), ffn.wo.weight)


@dtypes
@pytest.mark.parametrize(
    "norm,activation,pairing",
    [("layer", "gelu", "halves"), ("rms", "silu", "adjacent")],
    ids=["modernbert_like", "llama_like"],
)
@pytest.mark.parametrize("num_kv_heads", [None, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("window", [None, 2], ids=["global", "local"])
@pytest.mark.parametrize("padding", [False, True], ids=["no_mask", "padding"])
def test_modern_encoder_layer_matches_reference(
    dtype, norm, activation, pairing, num_kv_heads, window, padding
):
    layer = ModernEncoderLayer(
        D, H, 6, num_kv_heads, window, activation, norm=norm, pairing=pairing
    ).to(dtype)
    perturb_parameters_(layer)
    mask = keep_mask(B, L)[:, None, None, :] if padding else None
    x = leaf(B, L, D, dtype=dtype)
    x2 = twin(x)
    out, ref = layer(x, mask), reference_layer(layer, x2, mask)
    assert_close(out, ref, **TOL[dtype])
    g = torch.randn_like(out)
    params = list(layer.parameters())
    ours = torch.autograd.grad((out * g).sum(), [x, *params])
    theirs = torch.autograd.grad((ref * g).sum(), [x2, *params])
    names = ["x", *(name for name, _ in layer.named_parameters())]
    for name, a, b in zip(names, ours, theirs, strict=True):
        assert_close(a, b, **TOL[dtype], msg=lambda m, n=name: f"grad {n}: {m}")


# --- the layer's properties --------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_no_biases_anywhere(norm):
    encoder = ModernEncoder(D, H, 4, window=2, num_kv_heads=H_KV, norm=norm)
    names = [name for name, _ in encoder.named_parameters()]
    assert names and not [name for name in names if "bias" in name]
    assert all(getattr(m, "bias", None) is None for m in encoder.modules())


def test_layer_is_pre_norm():
    """Pre-norm keeps the residual stream apart from the norms: LayerNorm ignores a shift of its
    input by c in every feature, so the layer passes that shift straight through,
    layer(x + c) = layer(x) + c. A post-norm layer's output would be normalised, its mean 0."""
    layer = perturb_parameters_(ModernEncoderLayer(D, H, num_kv_heads=H_KV).double())
    x = torch.randn(B, L, D, dtype=torch.float64)
    assert_close(layer(x + 5.0), layer(x) + 5.0)
    with torch.no_grad():  # no sub-layer output: the layer is the identity
        layer.self_attn.out_proj.weight.zero_()
        layer.ffn.wo.weight.zero_()
    assert_close(layer(x), x)


@pytest.mark.parametrize("module", ["layer", "local_layer", "encoder"])
def test_padding_does_not_change_real_positions(module):
    if module == "encoder":
        model = ModernEncoder(D, H, 3, global_every=2, window=2, num_kv_heads=H_KV)
    else:
        model = ModernEncoderLayer(
            D, H, num_kv_heads=H_KV, window=2 if module == "local_layer" else None
        )
    model = perturb_parameters_(model.double())
    keep = keep_mask(B, L)  # (B, L), True at real positions
    x = torch.randn(B, L, D, dtype=torch.float64)
    noisy = torch.where(keep[..., None], x, torch.randn_like(x) * 10)
    out, out_noisy = model(x, keep[:, None, None, :]), model(noisy, keep[:, None, None, :])
    assert_close(out[keep], out_noisy[keep])
    assert not torch.allclose(out[~keep], out_noisy[~keep])


def test_rotary_makes_the_layer_not_permutation_equivariant():
    """Without positions, attention layers commute with permutations; RoPE breaks that."""
    layer = perturb_parameters_(ModernEncoderLayer(D, H).double())
    x = torch.randn(1, L, D, dtype=torch.float64)
    perm = torch.tensor([4, 2, 0, 1, 3])
    assert not torch.allclose(layer(x[:, perm]), layer(x)[:, perm])


@pairings
def test_values_are_not_rotated(pairing):
    """With the query projection zeroed every score is 0, so each position averages the values
    uniformly. Unrotated values give every position out_proj(mean of v); rotated ones would
    not."""
    attn = perturb_parameters_(ModernSelfAttention(D, H, H_KV, pairing=pairing).double())
    with torch.no_grad():
        attn.q_proj.weight.zero_()
    x = torch.randn(B, L, D, dtype=torch.float64)
    out, _ = attn(x)
    v = attn.v_proj(x).view(B, L, H_KV, 2).repeat_interleave(H // H_KV, dim=2)  # (B, L, H, 2)
    expected = attn.out_proj(v.mean(dim=1).reshape(B, 1, D)).expand(B, L, D)
    assert_close(out, expected)


def test_local_layer_with_a_wide_window_equals_the_global_layer():
    global_layer = perturb_parameters_(ModernEncoderLayer(D, H, num_kv_heads=H_KV).double())
    wide = ModernEncoderLayer(D, H, num_kv_heads=H_KV, window=2 * (L - 1)).double()
    narrow = ModernEncoderLayer(D, H, num_kv_heads=H_KV, window=2).double()
    wide.load_state_dict(global_layer.state_dict())
    narrow.load_state_dict(global_layer.state_dict())
    x, mask = torch.randn(B, L, D, dtype=torch.float64), keep_mask(B, L)[:, None, None, :]
    assert_close(wide(x, mask), global_layer(x, mask))
    assert not torch.allclose(narrow(x, mask), global_layer(x, mask))


def test_attention_weights_respect_the_window():
    attn = ModernSelfAttention(D, H, H_KV, window=2)
    _, weights = attn(torch.randn(B, L, D))
    assert weights.shape == (B, H, L, L)
    assert not weights[..., ~sliding_window_mask(L, 2)].any()
    assert_close(weights.sum(-1), torch.ones(B, H, L))


@pytest.mark.parametrize(
    "num_layers,global_every,expected",
    [(7, 3, "GLLGLLG"), (4, 2, "GLGL"), (3, 1, "GGG"), (2, 5, "GL")],
)
def test_encoder_alternates_global_and_local_layers(num_layers, global_every, expected):
    encoder = ModernEncoder(D, H, num_layers, global_every=global_every, window=4)
    pattern = "".join("G" if layer.self_attn.window is None else "L" for layer in encoder.layers)
    assert pattern == expected
    assert all(layer.self_attn.window in (None, 4) for layer in encoder.layers)
    assert isinstance(encoder.norm, nn.LayerNorm) and encoder.norm.bias is None
    w0, w1 = (layer.ffn.wi.weight for layer in encoder.layers[:2])
    assert w0.data_ptr() != w1.data_ptr() and not torch.equal(w0, w1), "own weights per layer"


def test_encoder_is_its_layers_then_the_final_norm():
    encoder = perturb_parameters_(ModernEncoder(D, H, 3, window=2, norm="rms").double())
    x, mask = torch.randn(B, L, D, dtype=torch.float64), keep_mask(B, L)[:, None, None, :]
    y = x
    for layer in encoder.layers:
        y = layer(y, mask)
    assert_close(encoder(x, mask), encoder.norm(y))
    assert isinstance(encoder.norm, RMSNorm)


def test_dropout_acts_in_training_mode_only():
    layer = ModernEncoderLayer(D, H, dropout=0.5)
    x = torch.randn(B, L, D)
    assert not torch.allclose(layer(x), layer(x))
    layer.eval()
    assert_close(layer(x), layer(x))


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module",
    [RMSNorm(D), GatedFeedForward(D), ModernEncoderLayer(D, H), ModernEncoder(D, H, 2)],
    ids=["RMSNorm", "GatedFeedForward", "ModernEncoderLayer", "ModernEncoder"],
)
def test_wrong_last_dimension(module):
    with pytest.raises(ValueError, match=words("x", "D = 8", "(2, 3, 5)")):
        module(torch.randn(2, 3, 5))


def test_wrong_rank_for_the_layer():
    with pytest.raises(ValueError, match=words("x", "(B, L, D)", "(3, 8)")):
        ModernEncoderLayer(D, H)(torch.randn(3, D))


def test_query_heads_not_a_multiple_of_kv_heads():
    with pytest.raises(ValueError, match=words("num_heads (H = 4)", "num_kv_heads (H_kv = 3)")):
        ModernSelfAttention(12, 4, 3)
    q, k = torch.randn(1, 4, 3, 2), torch.randn(1, 3, 3, 2)
    with pytest.raises(
        ValueError, match=words("H = 4", "H_kv = 3", "(1, 4, 3, 2)", "(1, 3, 3, 2)")
    ):
        grouped_query_attention(q, k, k)


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match=words("d_model (D = 10)", "num_heads (H = 3)")):
        ModernEncoderLayer(10, 3)


@pytest.mark.parametrize(
    "build",
    [
        lambda: RotaryEmbedding(5),
        lambda: rotary_angles(4, 5),
        lambda: ModernSelfAttention(6, 2),  # d_head = 3
        lambda: apply_rotary(torch.randn(4, 5), torch.ones(4, 2), torch.zeros(4, 2)),
    ],
    ids=["RotaryEmbedding", "rotary_angles", "ModernSelfAttention", "apply_rotary"],
)
def test_odd_head_width_for_rotary(build):
    with pytest.raises(ValueError, match=words("d_head = ", "even")):
        build()


@pytest.mark.parametrize("window", [0, 1, 3, -2])
def test_bad_window(window):
    with pytest.raises(ValueError, match=words("window", "even", f"got {window}")):
        sliding_window_mask(L, window)
    with pytest.raises(ValueError, match=words("window", "even", f"got {window}")):
        ModernEncoderLayer(D, H, window=window)


@pytest.mark.parametrize(
    "mask,expected",
    [
        (torch.ones(B, 1, 1, L), ("boolean", "True = may attend", "torch.float32")),
        (
            torch.ones(B, 1, 1, L + 1, dtype=torch.bool),
            ("(B, H, L, L) = (3, 4, 5, 5)", "(3, 1, 1, 6)"),
        ),
    ],
    ids=["float", "wrong_shape"],
)
def test_bad_mask(mask, expected):
    with pytest.raises(ValueError, match=words("mask", *expected)):
        ModernEncoderLayer(D, H, window=2)(torch.randn(B, L, D), mask)


def test_bad_names():
    with pytest.raises(ValueError, match=words("activation", "['gelu', 'silu']", "'relu'")):
        GatedFeedForward(D, activation="relu")
    with pytest.raises(ValueError, match=words("norm", "['layer', 'rms']", "'batch'")):
        ModernEncoderLayer(D, H, norm="batch")
    with pytest.raises(ValueError, match=words("pairing", "['halves', 'adjacent']", "'odd'")):
        RotaryEmbedding(4, pairing="odd")


def test_bad_rotary_cos_sin_width():
    with pytest.raises(ValueError, match=words("cos", "d_head / 2 = 2", "(5, 3)")):
        apply_rotary(torch.randn(5, 4), torch.ones(5, 3), torch.zeros(5, 3))
