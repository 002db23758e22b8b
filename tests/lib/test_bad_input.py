"""Bad input raises ValueError with a message that names the argument, what was expected and
what was given (shapes written with the course's letters and as numbers)."""

from __future__ import annotations

import re

import pytest
import torch

from encoder_lib import (
    EncoderConfig,
    EncoderLayer,
    FeedForward,
    LayerNorm,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    SentenceEncoder,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    TransformerEncoder,
    Vocabulary,
    padding_mask,
    scaled_dot_product_attention,
    sinusoidal_table,
)

D, H, B, L = 8, 2, 2, 3


def words(*parts: str) -> str:
    """A regex that finds each part (escaped, so "(B, L, D)" is literal) in order."""
    return ".*".join(re.escape(p) for p in parts)


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.from_sentences(["hi there", "the soup was warm"])


@pytest.fixture(scope="module")
def tiny_config() -> EncoderConfig:
    return EncoderConfig(d_model=D, num_heads=H, d_ff=16, num_layers=1, max_sequence_length=6)


# --- sizes at construction ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: MultiHeadAttention(10, 3),
        lambda: EncoderLayer(10, 3, 16),
        lambda: SentenceEncoder(config=EncoderConfig(d_model=10, num_heads=3)),
    ],
    ids=["MultiHeadAttention", "EncoderLayer", "SentenceEncoder"],
)
def test_d_model_not_divisible_by_heads(build):
    with pytest.raises(ValueError, match=words("embed_dim (D = 10)", "num_heads (H = 3)")):
        build()


def test_zero_heads():
    with pytest.raises(ValueError, match=words("num_heads (H = 0)")):
        MultiHeadAttention(8, 0)


@pytest.mark.parametrize(
    "build",
    [
        lambda: sinusoidal_table(10, 5),
        lambda: SinusoidalPositionalEncoding(5, 10),
        lambda: SentenceEncoder(config=EncoderConfig(d_model=5, num_heads=1, d_ff=4)),
    ],
    ids=["sinusoidal_table", "SinusoidalPositionalEncoding", "SentenceEncoder"],
)
def test_odd_d_model_for_sinusoidal_encoding(build):
    with pytest.raises(ValueError, match=words("d_model (D = 5)", "even")):
        build()


@pytest.mark.parametrize(
    "build",
    [
        lambda: FeedForward(D, 16, activation="tanh"),
        lambda: EncoderLayer(D, H, 16, activation="tanh"),
        lambda: SentenceEncoder(config=EncoderConfig(d_model=D, num_heads=H, activation="tanh")),
    ],
    ids=["FeedForward", "EncoderLayer", "SentenceEncoder"],
)
def test_unknown_activation(build):
    with pytest.raises(ValueError, match=words("activation", "['gelu', 'relu']", "'tanh'")):
        build()


def test_unknown_positional_kind():
    with pytest.raises(
        ValueError, match=words("positional", "'sinusoidal'", "'learned'", "'rope'")
    ):
        EncoderConfig(positional="rope")


def test_zero_layers():
    with pytest.raises(ValueError, match=words("num_layers", "at least 1", "0")):
        TransformerEncoder(EncoderLayer(D, H, 16), 0)


# --- masks -------------------------------------------------------------------------------------


def test_mask_that_does_not_broadcast_in_attention():
    mha = MultiHeadAttention(D, H)
    x = torch.randn(B, L, D)
    mask = torch.ones(B, 1, 1, L + 1, dtype=torch.bool)
    with pytest.raises(
        ValueError, match=words("mask", "(B, H, L_q, L_k) = (2, 2, 3, 3)", "(2, 1, 1, 4)")
    ):
        mha(x, x, x, mask)


def test_mask_that_would_enlarge_the_scores():
    """A mask with more batch rows than the input broadcasts, but would change the shape."""
    q = torch.randn(B, L, 4)
    mask = torch.ones(3, B, L, L, dtype=torch.bool)
    with pytest.raises(
        ValueError, match=words("mask", "(..., L_q, L_k) = (2, 3, 3)", "(3, 2, 3, 3)")
    ):
        scaled_dot_product_attention(q, q, q, mask)


def test_mask_that_does_not_broadcast_in_encoder():
    """The classic slip: a (B, L) padding mask where (B, 1, 1, L) is needed."""
    enc = TransformerEncoder(EncoderLayer(D, H, 16), 2)
    mask = torch.ones(B, L, dtype=torch.bool)
    with pytest.raises(
        ValueError, match=words("mask", "(B, H, L_q, L_k) = (2, 2, 3, 3)", "got shape (2, 3)")
    ):
        enc(torch.randn(B, L, D), mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
@pytest.mark.parametrize("need_weights", [True, False])
def test_non_boolean_mask(dtype, need_weights):
    """A float mask would be *added* to the scores by F.scaled_dot_product_attention, so it is
    refused rather than silently reinterpreted."""
    mha = MultiHeadAttention(D, H)
    x = torch.randn(B, L, D)
    mask = torch.ones(B, 1, 1, L, dtype=dtype)
    with pytest.raises(
        ValueError,
        match=words(
            "mask", "boolean", "(B, H, L_q, L_k) = (2, 2, 3, 3)", str(dtype), "(2, 1, 1, 3)"
        ),
    ):
        mha(x, x, x, mask, need_weights)


def test_mask_that_is_not_a_tensor():
    q = torch.randn(1, L, 4)
    with pytest.raises(ValueError, match=words("mask", "boolean", "(..., L_q, L_k)", "list")):
        scaled_dot_product_attention(q, q, q, [[True] * L] * L)


# --- ranks and last dimensions -----------------------------------------------------------------


@pytest.mark.parametrize("argument", ["query", "key", "value"])
def test_wrong_rank_in_multi_head_attention(argument):
    mha = MultiHeadAttention(D, H)
    inputs = {
        "query": torch.randn(B, L, D),
        "key": torch.randn(B, L, D),
        "value": torch.randn(B, L, D),
    }
    inputs[argument] = torch.randn(L, D)
    with pytest.raises(ValueError, match=words(argument, "(B, L, D)", "3 dimensions", "(3, 8)")):
        mha(**inputs)


@pytest.mark.parametrize(
    "module",
    [
        lambda: EncoderLayer(D, H, 16),
        lambda: SinusoidalPositionalEncoding(D, 10),
        lambda: LearnedPositionalEmbedding(10, D),
    ],
    ids=["EncoderLayer", "SinusoidalPositionalEncoding", "LearnedPositionalEmbedding"],
)
def test_wrong_rank_of_x(module):
    with pytest.raises(ValueError, match=words("x", "(B, L, D)", "3 dimensions", "(2, 1, 3, 8)")):
        module()(torch.randn(B, 1, L, D))


def test_wrong_rank_in_scaled_dot_product_attention():
    q = torch.randn(B, L, 4)
    with pytest.raises(
        ValueError, match=words("query, key and value", "rank", "(2, 3, 4)", "(3, 4)")
    ):
        scaled_dot_product_attention(q, q[0], q)


def test_wrong_rank_of_token_ids():
    with pytest.raises(ValueError, match=words("token_ids", "(B, L)", "2 dimensions", "(3,)")):
        padding_mask(torch.tensor([1, 2, 0]), 0)


@pytest.mark.parametrize(
    "call",
    [
        lambda: MultiHeadAttention(D, H)(*[torch.randn(B, L, 6)] * 3),
        lambda: LayerNorm(D)(torch.randn(B, L, 6)),
        lambda: FeedForward(D, 16)(torch.randn(B, L, 6)),
        lambda: SinusoidalPositionalEncoding(D, 10)(torch.randn(B, L, 6)),
    ],
    ids=["MultiHeadAttention", "LayerNorm", "FeedForward", "SinusoidalPositionalEncoding"],
)
def test_wrong_last_dimension(call):
    with pytest.raises(ValueError, match=words("last dimension D = 8", "(2, 3, 6)")):
        call()


def test_key_and_value_lengths_differ():
    mha = MultiHeadAttention(D, H)
    q, k, v = torch.randn(B, L, D), torch.randn(B, 4, D), torch.randn(B, 5, D)
    with pytest.raises(
        ValueError, match=words("key and value", "(B, L_k, D)", "(2, 4, 8)", "(2, 5, 8)")
    ):
        mha(q, k, v)
    with pytest.raises(ValueError, match=words("key and value", "L_k", "(2, 4, 8)", "(2, 5, 8)")):
        scaled_dot_product_attention(q, k, v)


# --- token ids ---------------------------------------------------------------------------------


def test_float_token_ids(vocab, tiny_config):
    emb = TokenEmbedding(len(vocab), D)
    with pytest.raises(
        ValueError, match=words("token_ids", "integer", "(B, L)", "torch.float32", "(2, 3)")
    ):
        emb(torch.zeros(B, L))
    model = SentenceEncoder(vocab, tiny_config)
    with pytest.raises(
        ValueError, match=words("token_ids", "integer", "(B, L)", "torch.float32", "(2, 6)")
    ):
        model(torch.zeros(B, 6))


@pytest.mark.parametrize("bad_id", [-1, "vocab_size"])
def test_out_of_range_token_ids(vocab, tiny_config, bad_id):
    bad = len(vocab) if bad_id == "vocab_size" else bad_id
    ids = torch.tensor([[1, 4, 2, 0, 0, 0], [1, bad, 2, 0, 0, 0]])
    low, high = min(0, bad), max(4, bad)
    message = words("token_ids", f"[0, {len(vocab)})", f"from {low} to {high}", "(2, 6)")
    with pytest.raises(ValueError, match=message):
        TokenEmbedding(len(vocab), D)(ids)
    with pytest.raises(ValueError, match=message):
        SentenceEncoder(vocab, tiny_config)(ids)


def test_token_ids_of_the_wrong_length(vocab, tiny_config):
    model = SentenceEncoder(vocab, tiny_config)
    with pytest.raises(ValueError, match=words("max_sequence_length", "(B, 6)", "(2, 5)")):
        model(torch.zeros(B, 5, dtype=torch.long))


# --- lengths -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module",
    [lambda: SinusoidalPositionalEncoding(D, 5), lambda: LearnedPositionalEmbedding(5, D)],
    ids=["sinusoidal", "learned"],
)
def test_sequence_longer_than_positional_table(module):
    with pytest.raises(ValueError, match=words("L = 7", "max_len = 5", "(2, 7, 8)")):
        module()(torch.randn(B, 7, D))


def test_sentence_too_long(vocab, tiny_config):
    sentence = "the soup was warm the soup"  # 6 tokens + <start> + <end> = 8 > 6
    with pytest.raises(
        ValueError, match=words("sentence 1", "8 tokens", "max_sequence_length = 6")
    ):
        vocab.encode_batch(["hi", sentence], 6)
    with pytest.raises(
        ValueError, match=words("sentence 0", "8 tokens", "max_sequence_length = 6")
    ):
        SentenceEncoder(vocab, tiny_config)([sentence])


def test_single_string_instead_of_a_batch(vocab, tiny_config):
    with pytest.raises(ValueError, match=words("sentences", "sequence of strings", "('Hi',)")):
        SentenceEncoder(vocab, tiny_config)("Hi")


def test_sentence_that_just_fits(vocab, tiny_config):
    """The boundary: 4 tokens + <start> + <end> = 6 = max_sequence_length is accepted."""
    ids = vocab.encode_batch(["the soup was warm"], 6)
    assert ids.shape == (1, 6) and (ids != vocab.pad_id).all()
    assert SentenceEncoder(vocab, tiny_config)(["the soup was warm"]).shape == (1, 6, D)
