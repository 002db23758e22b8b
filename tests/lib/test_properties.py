"""Properties that hold for every size, checked with hypothesis on small random sizes (1
included: one batch row, one position, one head). Every example seeds torch itself, and
``derandomize=True`` makes hypothesis pick the same examples on every run."""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close
from torch_reference import TOL, perturb_parameters_

from encoder_lib import (
    EncoderConfig,
    EncoderLayer,
    LayerNorm,
    MultiHeadAttention,
    SentenceEncoder,
    TransformerEncoder,
    Vocabulary,
    load_corpus,
    scaled_dot_product_attention,
)

F64 = torch.float64
EXACT = TOL[F64]

small = st.integers(1, 3)
lengths = st.integers(1, 5)
seeds = st.integers(0, 2**16)


def fast(max_examples: int = 25):
    return settings(derandomize=True, max_examples=max_examples, deadline=None)


def random_keep(batch: int, length: int, g: torch.Generator) -> torch.Tensor:
    """``(B, L)`` True at real positions: a random prefix of 1..L positions per row."""
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    return torch.arange(length)[None, :] < lengths[:, None]


def random_mask(shape: tuple[int, ...], g: torch.Generator, allow_dead: bool) -> torch.Tensor:
    """A random ``(..., L_q, L_k)`` mask; unless ``allow_dead``, every row keeps a key."""
    mask = torch.rand(shape, generator=g) < 0.5
    if not allow_dead:
        mask[..., 0] |= ~mask.any(dim=-1)
    return mask


def encoder(d_model: int, heads: int, norm_first: bool, layers: int = 2) -> TransformerEncoder:
    layer = EncoderLayer(d_model, heads, 2 * d_model, dropout=0.1, norm_first=norm_first)
    enc = TransformerEncoder(layer, layers, LayerNorm(d_model) if norm_first else None)
    return perturb_parameters_(enc).to(F64).eval()  # perturbed: the layers differ


# --- attention ---------------------------------------------------------------------------------


@fast(100)
@example(batch=1, heads=1, L_q=1, L_k=1, d_k=1, masked=True, seed=0)
@given(
    batch=small, heads=small, L_q=lengths, L_k=lengths, d_k=small, masked=st.booleans(), seed=seeds
)
def test_attention_weight_rows_sum_to_one(batch, heads, L_q, L_k, d_k, masked, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, L_q, d_k, generator=g, dtype=F64) * 3
    k = torch.randn(batch, heads, L_k, d_k, generator=g, dtype=F64) * 3
    v = torch.randn(batch, heads, L_k, 2, generator=g, dtype=F64)
    mask = random_mask((batch, heads, L_q, L_k), g, allow_dead=False) if masked else None
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    assert weights.shape == (batch, heads, L_q, L_k)
    assert (weights >= 0).all()
    assert_close(weights.sum(dim=-1), torch.ones(batch, heads, L_q, dtype=F64), **EXACT)
    if mask is not None:
        assert (weights[~mask] == 0).all()


@fast(60)
@example(batch=1, L_q=1, L_k=1, heads=1, d_head=1, need_weights=True, seed=0)
@given(
    batch=small,
    L_q=lengths,
    L_k=lengths,
    heads=small,
    d_head=small,
    need_weights=st.booleans(),
    seed=seeds,
)
def test_masked_keys_and_values_do_not_matter(batch, L_q, L_k, heads, d_head, need_weights, seed):
    torch.manual_seed(seed)
    D = heads * d_head
    mha = perturb_parameters_(MultiHeadAttention(D, heads)).to(F64).eval()
    q, k, v = (torch.randn(batch, n, D, dtype=F64) for n in (L_q, L_k, L_k))
    keep = random_keep(batch, L_k, torch.Generator().manual_seed(seed))
    # replace every masked key and value by something else, and large
    k2 = torch.where(keep[..., None], k, 100 * torch.randn_like(k))
    v2 = torch.where(keep[..., None], v, 100 * torch.randn_like(v))
    mask = keep[:, None, None, :]
    out, weights = mha(q, k, v, mask, need_weights)
    out2, weights2 = mha(q, k2, v2, mask, need_weights)
    assert_close(out2, out, **EXACT)
    if need_weights:
        assert_close(weights2, weights, **EXACT)


@fast(100)
@example(batch=1, heads=1, L_q=1, L_k=1, d_k=1, seed=0)
@given(batch=small, heads=small, L_q=lengths, L_k=lengths, d_k=small, seed=seeds)
def test_fused_path_equals_explicit_path(batch, heads, L_q, L_k, d_k, seed):
    """need_weights=False (PyTorch's fused kernel) against the explicit softmax, output and
    gradients, with random masks that may leave rows fully masked."""
    g = torch.Generator().manual_seed(seed)
    leaves = [
        torch.randn(batch, heads, n, d, generator=g, dtype=F64)
        for n, d in ((L_q, d_k), (L_k, d_k), (L_k, 3))
    ]
    mask = random_mask((batch, heads, L_q, L_k), g, allow_dead=True)
    grad_out = torch.randn(batch, heads, L_q, 3, generator=g, dtype=F64)
    results = []
    for need_weights in (True, False):
        q, k, v = (t.clone().requires_grad_() for t in leaves)
        out, _ = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
        (out * grad_out).sum().backward()
        results.append((out, q.grad, k.grad, v.grad))
    for explicit, fused in zip(*results, strict=True):
        assert_close(fused, explicit, **EXACT)


@fast(100)
@example(batch=1, heads=1, L_q=1, L_k=1, d_k=1, need_weights=True, seed=0)
@example(batch=1, heads=1, L_q=1, L_k=1, d_k=1, need_weights=False, seed=0)
@given(
    batch=small,
    heads=small,
    L_q=lengths,
    L_k=lengths,
    d_k=small,
    need_weights=st.booleans(),
    seed=seeds,
)
def test_fully_masked_rows_give_zeros_not_nan(batch, heads, L_q, L_k, d_k, need_weights, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, L_q, d_k, generator=g, dtype=F64, requires_grad=True)
    k = torch.randn(batch, heads, L_k, d_k, generator=g, dtype=F64, requires_grad=True)
    v = torch.randn(batch, heads, L_k, 2, generator=g, dtype=F64, requires_grad=True)
    mask = random_mask((batch, heads, L_q, L_k), g, allow_dead=True)
    mask[0, 0, 0] = False  # at least one dead row
    dead = ~mask.any(dim=-1)
    out, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert (out[dead] == 0).all()
    loss = (out * torch.randn(out.shape, generator=g, dtype=F64)).sum()
    if need_weights:
        assert torch.isfinite(weights).all() and (weights[dead] == 0).all()
        loss = loss + (weights * torch.randn(weights.shape, generator=g, dtype=F64)).sum()
    loss.backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[dead] == 0).all()  # a dead query influences nothing


@fast(50)
@example(batch=1, length=1, heads=1, need_weights=True, seed=0)
@given(batch=small, length=lengths, heads=small, need_weights=st.booleans(), seed=seeds)
def test_fully_padded_row_in_multi_head_attention_is_finite(
    batch, length, heads, need_weights, seed
):
    """A batch row with no real key at all: weights zero, outputs and all gradients finite."""
    torch.manual_seed(seed)
    D = 2 * heads
    mha = perturb_parameters_(MultiHeadAttention(D, heads)).to(F64)
    x = torch.randn(batch, length, D, dtype=F64, requires_grad=True)
    keep = torch.ones(batch, length, dtype=torch.bool)
    keep[0] = False
    out, weights = mha(x, x, x, keep[:, None, None, :], need_weights)
    assert torch.isfinite(out).all()
    if need_weights:
        assert (weights[0] == 0).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


# --- LayerNorm ---------------------------------------------------------------------------------


@fast(100)
@example(rows=1, d_model=2, shift=0.0, scale=1.0, seed=0)
@given(
    rows=small,
    d_model=st.integers(2, 6),
    shift=st.floats(-100, 100),
    scale=st.floats(0.01, 100),
    seed=seeds,
)
def test_layer_norm_ignores_shift_and_positive_scale(rows, d_model, shift, scale, seed):
    torch.manual_seed(seed)
    x = torch.randn(rows, 3, d_model, dtype=F64)
    row_shift = shift * torch.rand(rows, 3, 1, dtype=F64)  # a different constant per position
    # Shift invariance is exact whatever eps is ...
    ln = perturb_parameters_(LayerNorm(d_model)).to(F64)
    assert_close(ln(x + row_shift), ln(x), atol=1e-9, rtol=1e-9)
    # ... scale invariance only with eps = 0 (eps does not scale with the input).
    ln0 = perturb_parameters_(LayerNorm(d_model, eps=0.0)).to(F64)
    assert_close(ln0(scale * x + row_shift), ln0(x), atol=1e-9, rtol=1e-9)


# --- the encoder -------------------------------------------------------------------------------


@fast(50)
@example(batch=1, length=1, heads=1, d_head=1, norm_first=False, masked=False, seed=0)
@given(
    batch=small,
    length=st.integers(1, 6),
    heads=small,
    d_head=st.integers(1, 2),
    norm_first=st.booleans(),
    masked=st.booleans(),
    seed=seeds,
)
def test_encoder_is_permutation_equivariant(batch, length, heads, d_head, norm_first, masked, seed):
    """No positional encoding: permuting the positions (and the mask with them) permutes the
    output the same way."""
    torch.manual_seed(seed)
    perm = torch.randperm(length)
    enc = encoder(heads * d_head, heads, norm_first)
    x = torch.randn(batch, length, heads * d_head, dtype=F64)
    keep = random_keep(batch, length, torch.Generator().manual_seed(seed)) if masked else None
    keep_p = None if keep is None else keep[:, perm]
    with torch.no_grad():
        out = enc(x, None if keep is None else keep[:, None, None, :])
        out_p = enc(x[:, perm], None if keep_p is None else keep_p[:, None, None, :])
    assert_close(out_p, out[:, perm], **EXACT)


@fast(50)
@example(batch=1, length=1, extra=1, heads=1, d_head=1, norm_first=False, seed=0)
@given(
    batch=small,
    length=lengths,
    extra=st.integers(1, 4),
    heads=small,
    d_head=st.integers(1, 2),
    norm_first=st.booleans(),
    seed=seeds,
)
def test_encoder_ignores_appended_padding(batch, length, extra, heads, d_head, norm_first, seed):
    torch.manual_seed(seed)
    D = heads * d_head
    enc = encoder(D, heads, norm_first)
    x = torch.randn(batch, length, D, dtype=F64)
    keep = random_keep(batch, length, torch.Generator().manual_seed(seed))
    x_long = torch.cat([x, 50 * torch.randn(batch, extra, D, dtype=F64)], dim=1)
    keep_long = torch.cat([keep, torch.zeros(batch, extra, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        out = enc(x, keep[:, None, None, :])
        out_long = enc(x_long, keep_long[:, None, None, :])
    assert_close(out_long[:, :length][keep], out[keep], **EXACT)


VOCAB = Vocabulary.from_sentences(s for s, _ in load_corpus())
WORDS = ["hi", "the", "soup", "was", "warm", "!", ",", "zyzzyva"]  # the last one is unknown


@fast(30)
@example(sentences=[""], slack=0, extra=1, positional="sinusoidal", norm_first=False, seed=0)
@given(
    sentences=st.lists(
        st.lists(st.sampled_from(WORDS), max_size=5).map(" ".join), min_size=1, max_size=3
    ),
    slack=st.integers(0, 2),
    extra=st.integers(1, 6),
    positional=st.sampled_from(["sinusoidal", "learned"]),
    norm_first=st.booleans(),
    seed=seeds,
)
def test_sentence_encoder_ignores_appended_padding(
    sentences, slack, extra, positional, norm_first, seed
):
    """The same model with a longer max_sequence_length (so more padding after every sentence)
    gives the same vectors at the real positions."""
    torch.manual_seed(seed)
    short_len = max(len(VOCAB.encode(s)) for s in sentences) + slack
    config = EncoderConfig(
        d_model=8,
        num_heads=2,
        d_ff=16,
        num_layers=2,
        max_sequence_length=short_len,
        positional=positional,
        norm_first=norm_first,
    )
    short = SentenceEncoder(VOCAB, config)
    long = SentenceEncoder(
        VOCAB, dataclasses.replace(config, max_sequence_length=short_len + extra)
    )
    state = short.state_dict()
    if positional == "learned":  # the longer table starts with the shorter one
        tail = long.state_dict()["positional.weight"][short_len:]
        state["positional.weight"] = torch.cat([state["positional.weight"], tail])
    long.load_state_dict(state)
    short, long = short.to(F64).eval(), long.to(F64).eval()
    keep = short.tokenize(sentences) != VOCAB.pad_id
    with torch.no_grad():
        out, out_long = short(sentences), long(sentences)
    assert out.shape == (len(sentences), short_len, 8)
    assert out_long.shape == (len(sentences), short_len + extra, 8)
    assert_close(out_long[:, :short_len][keep], out[keep], **EXACT)
