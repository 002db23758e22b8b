"""The text front end (tokenizer, vocabulary, padded batches, corpus) and the full model."""

from __future__ import annotations

import math
import random
from collections import Counter
from importlib import resources

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from encoder_lib import (
    EncoderConfig,
    LearnedPositionalEmbedding,
    SentenceEncoder,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    Vocabulary,
    load_corpus,
    padding_mask,
    sinusoidal_table,
    tokenize,
)

TINY = EncoderConfig(d_model=8, num_heads=2, d_ff=16, num_layers=2, max_sequence_length=12)

# --- tokenizer and vocabulary ------------------------------------------------------------------


@pytest.mark.parametrize(
    "sentence,tokens",
    [
        ("Hi!", ["hi", "!"]),
        ("Hi, this lab is FUN.", ["hi", ",", "this", "lab", "is", "fun", "."]),
        ("Don't   stop 42 times?!", ["don't", "stop", "42", "times", "?", "!"]),
        ("", []),
        ("  \t ", []),
    ],
)
def test_tokenize(sentence, tokens):
    assert tokenize(sentence) == tokens


def test_vocabulary_special_ids():
    vocab = Vocabulary.from_sentences(["b a", "a c"])
    assert vocab.itos[:4] == ["<pad>", "<start>", "<end>", "<unk>"]
    assert (vocab.pad_id, vocab.start_id, vocab.end_id, vocab.unk_id) == (0, 1, 2, 3)
    assert [vocab.stoi[t] for t in Vocabulary.SPECIALS] == [0, 1, 2, 3]
    # then by decreasing count (a: 2), ties alphabetical (b, c: 1 each)
    assert vocab.itos[4:] == ["a", "b", "c"]
    assert len(vocab) == 7


def test_vocabulary_ids_are_stable():
    """The ids depend on the corpus alone: not on sentence order, nor on the run."""
    sentences = [s for s, _ in load_corpus()]
    vocab = Vocabulary.from_sentences(sentences)
    shuffled = sentences[:]
    random.Random(0).shuffle(shuffled)
    assert Vocabulary.from_sentences(shuffled).itos == vocab.itos
    assert Vocabulary.from_sentences(sentences).stoi == vocab.stoi
    # the ranking, recomputed independently
    counts = Counter(t for s in sentences for t in tokenize(s))
    assert vocab.itos[4:] == sorted(counts, key=lambda t: (-counts[t], t))
    assert all(vocab.stoi[t] == i for i, t in enumerate(vocab.itos))


def test_vocabulary_min_freq():
    vocab = Vocabulary.from_sentences(["a a b"], min_freq=2)
    assert vocab.itos == ["<pad>", "<start>", "<end>", "<unk>", "a"]
    assert vocab.encode("a b") == [1, 4, 3, 2]


def test_special_tokens_in_text_are_not_duplicated():
    vocab = Vocabulary(["<pad>", "x", "<unk>", "y", "x"])
    assert vocab.itos == ["<pad>", "<start>", "<end>", "<unk>", "x", "y"]


def test_encode_and_decode():
    vocab = Vocabulary.from_sentences(["the soup was warm", "the lab"])
    ids = vocab.encode("The soup was cold!")
    assert ids[0] == vocab.start_id and ids[-1] == vocab.end_id
    assert vocab.decode(ids) == ["<start>", "the", "soup", "was", "<unk>", "<unk>", "<end>"]
    assert vocab.decode(torch.tensor(ids)) == vocab.decode(ids)


def test_encode_batch_pads():
    vocab = Vocabulary.from_sentences(["the soup was warm", "the lab"])
    sentences = ["the lab", "the soup was warm", ""]
    ids = vocab.encode_batch(sentences, 8)
    assert ids.shape == (3, 8) and ids.dtype == torch.long
    for row, sentence in zip(ids.tolist(), sentences, strict=True):
        encoded = vocab.encode(sentence)
        assert row[: len(encoded)] == encoded
        assert row[len(encoded) :] == [vocab.pad_id] * (8 - len(encoded))
    keep = padding_mask(ids, vocab.pad_id)
    assert keep.shape == (3, 1, 1, 8)
    assert keep[:, 0, 0].sum(dim=1).tolist() == [4, 6, 2]


def test_encode_empty_batch():
    vocab = Vocabulary.from_sentences(["a"])
    assert vocab.encode_batch([], 5).shape == (0, 5)


def test_load_corpus():
    corpus = load_corpus()
    assert corpus and all(isinstance(s, str) and s.strip() for s, _ in corpus)
    labels = Counter(label for _, label in corpus)
    assert set(labels) == {0, 1} and min(labels.values()) > 0
    # one pair per data line of the shipped file (comments and blank lines skipped)
    text = resources.files("encoder_lib").joinpath("data/corpus.tsv").read_text(encoding="utf-8")
    data_lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(corpus) == len(data_lines)
    assert corpus == load_corpus()  # same order every time


# --- embeddings --------------------------------------------------------------------------------


def test_sinusoidal_table_formula():
    """PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(same), entry by entry in plain
    Python floats."""
    max_len, D = 50, 6
    table = sinusoidal_table(max_len, D)
    assert table.shape == (max_len, D) and table.dtype == torch.get_default_dtype()
    expected = [
        [(math.sin if j % 2 == 0 else math.cos)(pos / 10000 ** ((j - j % 2) / D)) for j in range(D)]
        for pos in range(max_len)
    ]
    assert_close(table, torch.tensor(expected, dtype=table.dtype))


def test_sinusoidal_encoding_adds_the_table():
    pe = SinusoidalPositionalEncoding(6, max_len=10)
    x = torch.randn(2, 4, 6)
    assert_close(pe(x), x + sinusoidal_table(10, 6)[:4])
    assert "pe" not in pe.state_dict()  # a function of the shape alone, not saved
    assert pe.to(torch.float64).pe.dtype == torch.float64


def test_token_embedding_scales_by_sqrt_d_and_zeroes_padding():
    emb = TokenEmbedding(10, 16, padding_idx=0)
    ids = torch.tensor([[1, 5, 0], [9, 0, 0]])
    out = emb(ids)
    assert out.shape == (2, 3, 16)
    assert_close(out, emb.embedding.weight[ids] * 4.0)
    assert (out[ids == 0] == 0).all()
    out.sum().backward()
    assert (emb.embedding.weight.grad[0] == 0).all()
    unscaled = TokenEmbedding(10, 16, scale=False)
    assert_close(unscaled(ids), unscaled.embedding.weight[ids])


def test_token_vectors_start_the_size_of_the_positional_encoding():
    """Scaled or not, a token vector starts with entries of size about 1 (length about sqrt(D),
    sqrt(2) times a sinusoidal row's sqrt(D/2)): the scaled table starts at nn.Embedding's draw
    divided by sqrt(D), with the same random numbers."""
    D = 64
    torch.manual_seed(0)
    plain = torch.nn.Embedding(1000, D, padding_idx=0).weight.detach()
    torch.manual_seed(0)
    scaled = TokenEmbedding(1000, D, padding_idx=0)
    assert_close(scaled.embedding.weight.detach() * 8.0, plain)  # sqrt(64) = 8
    assert (scaled.embedding.weight[0] == 0).all()
    ids = torch.arange(1, 1000)[None, :]  # (1, 999)
    encoding = sinusoidal_table(1, D).norm()
    assert_close(encoding, torch.tensor(D / 2) ** 0.5)
    for emb in (scaled, TokenEmbedding(1000, D, scale=False)):
        lengths = emb(ids).detach().norm(dim=-1)  # (1, 999)
        assert 0.95 < lengths.mean() / D**0.5 < 1.05
        assert 1.3 < lengths.mean() / encoding < 1.5


# --- the model ---------------------------------------------------------------------------------


def test_headline_example():
    """The course's headline: the default encoder turns ("Hi",) into (1, 256, 512)."""
    config = EncoderConfig()
    assert (config.num_layers, config.d_model, config.num_heads, config.d_ff) == (4, 512, 8, 2048)
    assert (config.dropout, config.max_sequence_length) == (0.1, 256)
    model = SentenceEncoder()
    out = model(("Hi",))
    assert out.shape == torch.Size([1, 256, 512])
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert isinstance(model.positional, SinusoidalPositionalEncoding)
    assert len(model.encoder.layers) == 4


def test_default_vocabulary_is_built_from_the_corpus():
    model = SentenceEncoder(config=TINY)
    assert model.vocab.itos == Vocabulary.from_sentences(s for s, _ in load_corpus()).itos
    assert model.embedding.embedding.num_embeddings == len(model.vocab)
    assert model.embedding.embedding.padding_idx == model.vocab.pad_id


def test_parameter_count():
    """Counted by hand from the architecture, against the modules' own count."""
    D, F, N = TINY.d_model, TINY.d_ff, TINY.num_layers
    model = SentenceEncoder(config=TINY)
    V = len(model.vocab)
    per_layer = (3 * D * D + 3 * D) + (D * D + D) + (D * F + F) + (F * D + D) + 2 * (2 * D)
    assert model.num_parameters() == V * D + N * per_layer
    assert model.num_parameters() == sum(p.numel() for p in model.parameters())


def test_layers_start_from_different_weights():
    model = SentenceEncoder(config=TINY)
    first, second = model.encoder.layers[0], model.encoder.layers[1]
    for name in ("self_attn.in_proj_weight", "linear1.weight", "linear2.weight"):
        assert not torch.equal(first.get_parameter(name), second.get_parameter(name)), name


def test_strings_and_token_ids_give_the_same_output():
    model = SentenceEncoder(config=TINY).eval()
    sentences = ["Hi, this lab is fun.", "The soup was warm."]
    with torch.no_grad():
        assert_close(model(sentences), model(model.tokenize(sentences)), rtol=0, atol=0)


def test_dropout_only_in_training():
    model = SentenceEncoder(config=TINY)
    sentences = ["Hi, this lab is fun."]
    with torch.no_grad():
        model.eval()
        assert torch.equal(model(sentences), model(sentences))
        model.train()
        assert not torch.equal(model(sentences), model(sentences))


def test_learned_positional_variant():
    config = EncoderConfig(
        d_model=8, num_heads=2, d_ff=16, num_layers=2, max_sequence_length=12, positional="learned"
    )
    model = SentenceEncoder(config=config)
    assert isinstance(model.positional, LearnedPositionalEmbedding)
    assert "positional.weight" in model.state_dict()
    assert model.positional.weight.shape == (12, 8)
    out = model(["Hi", "The soup was warm."])
    assert out.shape == (2, 12, 8)
    out.sum().backward()
    assert model.positional.weight.grad is not None
    # the sinusoidal table is not saved: it is a function of the shape alone
    assert not any(k.startswith("positional") for k in SentenceEncoder(config=TINY).state_dict())


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_dtype_follows_to(positional):
    config = EncoderConfig(
        d_model=8, num_heads=2, d_ff=16, num_layers=2, max_sequence_length=12, positional=positional
    )
    model = SentenceEncoder(config=config).to(torch.float64)
    assert all(t.dtype == torch.float64 for t in [*model.parameters(), *model.buffers()])
    out = model(["Hi"])
    assert out.dtype == torch.float64
    assert out.device == model.embedding.embedding.weight.device
    assert model.tokenize(["Hi"]).dtype == torch.long
    # float64 and float32 copies agree to float32 rounding
    model32 = SentenceEncoder(config=config)
    model32.load_state_dict(model.state_dict())
    model.eval()
    model32.eval()
    with torch.no_grad():
        assert_close(model(["Hi"]).float(), model32(["Hi"]), atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_follows_to():
    model = SentenceEncoder(config=TINY).to("cuda")
    assert model.tokenize(["Hi"]).device.type == "cuda"
    out = model(["Hi"])
    assert out.device.type == "cuda"
    assert model.positional.pe.device.type == "cuda"


def test_no_device_arguments():
    """The device and dtype are chosen with .to(), like any nn.Module; the constructors take
    none (the course says so)."""
    with pytest.raises(TypeError):
        SentenceEncoder(config=TINY, device="cpu")  # type: ignore[call-arg]
    assert isinstance(SentenceEncoder(config=TINY).to("cpu"), nn.Module)


def test_batch_rows_are_independent():
    """A sentence encoded alone and in a batch with another gets the same vectors."""
    model = SentenceEncoder(config=TINY).to(torch.float64).eval()
    short, long = "Hi!", "The soup was warm and full of flavour."
    with torch.no_grad():
        alone = model([short])
        batched = model([short, long])
    assert_close(batched[0], alone[0], atol=1e-10, rtol=1e-10)
