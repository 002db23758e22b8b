"""The checks of notebook 11 (a real encoder, all-MiniLM-L6-v2): what is particular to them (the
references the checks use agree with the library's, the text of the cases splits the same
before and after normalising, the real weights are never read, the returned layer is judged by
running it, list answers, the library's own answers refused). Every answer of tests/variants,
buggy, correct or stub, is graded in test_catalogue.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from grading.notebook_namespace import Check, SolutionNotebook
from variants import Variant

import encoder_lib
from encoder_lib import minilm
from encoder_lib.grading import ForbiddenCallError, GradingError, vocabulary
from encoder_lib.grading.checks import n11_real_encoder
from encoder_lib.wordpiece import normalize, split_words, wordpiece

R = n11_real_encoder
CHECKS = {
    "test_wordpiece": Check("answer_wordpiece", "wordpiece", R.check_wordpiece),
    "test_tokenize": Check("answer_tokenize", "tokenize", R.check_tokenize),
    "test_bert_embeddings": Check(
        "answer_bert_embeddings", "BertEmbeddings", R.check_bert_embeddings
    ),
    "test_load_bert_layer": Check(
        "answer_load_bert_layer", "load_bert_layer", R.check_load_bert_layer
    ),
    "test_sentence_embedding": Check(
        "answer_sentence_embedding", "sentence_embedding", R.check_sentence_embedding
    ),
    "test_contrastive_loss": Check(
        "answer_contrastive_loss", "contrastive_loss", R.check_contrastive_loss
    ),
}
POINTS = {
    "test_wordpiece": 2,
    "test_tokenize": 1,
    "test_bert_embeddings": 2,
    "test_load_bert_layer": 3,
    "test_sentence_embedding": 2,
    "test_contrastive_loss": 2,
}
NOTEBOOK = SolutionNotebook("11_real_encoder", CHECKS)


def test_notebook_has_the_cells_and_points_the_checks_expect():
    NOTEBOOK.assert_cells_and_points(POINTS)
    assert sum(POINTS.values()) == 12


# --- the references the checks use -------------------------------------------------------------


def test_the_catalogues_without_a_mistake_are_the_library():
    """Each catalogue's "mistake switched off" is the library's answer on every case."""
    for case in R._wordpiece_cases(thorough=True):
        word, vocab = case.call.args
        unk, max_chars = (
            case.call.kwargs.get("unk", "[UNK]"),
            case.call.kwargs.get("max_chars", 100),
        )
        assert R._wordpiece_variant(word, vocab, unk, max_chars) == wordpiece(
            word, vocab, unk, max_chars
        )
    for case in R._tokenize_cases(thorough=True):
        text, vocab = case.call.args
        assert R._tokenize_variant(text, vocab) == R._tokenize_reference(text, vocab)
    for case in R._embeddings_cases(thorough=False):
        module = case.reference
        state = {k: v for k, v in module.state_dict().items()}
        ids, *types = case.call.args
        eps = module.norm.eps
        got = R._embeddings_variant(state, ids, types[0] if types else None, eps=eps)
        torch.testing.assert_close(got, case.expected)


def test_the_texts_split_the_same_before_and_after_normalising():
    """The notebook's tokenize normalises each word of split_words(text); the library
    normalises the text, then splits it (as Hugging Face does). They differ only for characters
    whose decomposition holds punctuation (such as ≠), which no case's text has: on every case
    the two, and the notebook's own answer (str.lower per word), agree."""
    tokenize = NOTEBOOK.namespace()["tokenize"]
    for case in R._tokenize_cases(thorough=True):
        text, vocab = case.call.args
        assert split_words(normalize(text)) == [normalize(w) for w in split_words(text)]
        library = encoder_lib.WordPieceTokenizer(["[PAD]", "[CLS]", "[SEP]", *vocab]).tokenize(text)
        assert R._tokenize_reference(text, vocab) == library == tokenize(text, vocab)


def test_the_reference_layer_is_the_library_s():
    """The check's reference layer (``_bert_layer``) is the layer ``BertEncoder`` builds from the
    same weights with ``bert_layer_state``."""
    config = minilm.BertConfig(vocab_size=20, d_model=8, num_heads=2, d_ff=16, num_layers=2)
    weights = minilm.random_bert_weights(config, seed=5)
    model = minilm.BertEncoder(config)
    model.load_bert_state(weights)
    ours = R._bert_layer(weights, "encoder.layer.1.", 2)
    for name, tensor in model.encoder.layers[1].state_dict().items():
        assert torch.equal(ours.state_dict()[name], tensor), name
    x, keep = torch.randn(2, 4, 8) * 0.1, vocabulary.keep_first([4, 2], 4)
    torch.testing.assert_close(ours.eval()(x, keep), model.encoder.layers[1].eval()(x, keep))


def test_the_real_weights_are_never_read(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a check read the real model's files")

    for name in ("minilm_files", "read_bert_weights", "load_minilm"):
        monkeypatch.setattr(minilm, name, refuse)
    namespace = NOTEBOOK.namespace()
    for test_cell in CHECKS:
        NOTEBOOK.autograde(test_cell, namespace)


def test_the_models_are_tiny():
    for case in [*R._layer_cases(True), *R._embeddings_cases(True)]:
        tensors = [*case.call.args[0].values()] if case.call.scenario != "call" else []
        tensors += list((case.call.state or {}).values())
        assert tensors and sum(t.numel() for t in tensors) < 10_000, case.what


# --- forbidden built-ins -------------------------------------------------------------------------

FORBIDDEN = [v for v in NOTEBOOK.buggy if v.name.startswith(("calls_", "uses_", "subclasses_"))]


@pytest.mark.parametrize("variant", FORBIDDEN, ids=[v.name for v in FORBIDDEN])
def test_the_library_s_answers_are_refused_with_a_reason(variant: Variant):
    namespace = NOTEBOOK.namespace({variant.cell: variant.source})
    with pytest.raises(ForbiddenCallError) as info:
        NOTEBOOK.run(variant.fails[0], namespace, thorough=False)
    assert variant.says in str(info.value)
    assert "already does what this exercise asks you to write" in str(info.value)


def test_every_exercise_refuses_the_library_s_answer():
    assert {CHECKS[v.fails[0]].name for v in FORBIDDEN} == {c.name for c in CHECKS.values()}


# --- lists of strings ----------------------------------------------------------------------------


def test_a_list_that_no_mistake_explains_says_where_it_first_differs():
    namespace = NOTEBOOK.namespace()
    right = namespace["wordpiece"]

    def wordpiece_backwards(word, vocab, unk="[UNK]", max_chars=100):
        pieces = right(word, vocab, unk, max_chars)
        return pieces[:1] + pieces[:0:-1]  # the continuations in reverse order

    with pytest.raises(GradingError) as info:
        R.check_wordpiece(wordpiece_backwards)
    assert info.value.mistake == "pieces-do-not-spell-word"

    def tokenize_doubled(text, vocab):
        return namespace["tokenize"](text, vocab) * 2

    with pytest.raises(GradingError) as info:
        R.check_tokenize(tokenize_doubled)
    assert info.value.mistake == "mismatch"
    assert "more than BERT's" in info.value.problem


def test_a_mistake_in_wordpiece_is_charged_there_alone_when_dependents_are_spared(monkeypatch):
    variant = next(v for v in NOTEBOOK.buggy if v.name == "shortest_match_first")
    namespace = NOTEBOOK.namespace({variant.cell: variant.source})
    with pytest.raises(GradingError, match="comes from your wordpiece"):
        NOTEBOOK.run("test_tokenize", namespace, thorough=True)
    monkeypatch.setenv("ENCODER_LAB_SPARE_DEPENDENTS", "1")
    NOTEBOOK.run("test_tokenize", namespace, thorough=True)


# --- the layer returned by load_bert_layer -------------------------------------------------------

_LAYER = NOTEBOOK.source("answer_load_bert_layer")


def _layer_error(old: str, new: str) -> GradingError:
    source = _LAYER.replace(old, new)
    assert source != _LAYER
    namespace = NOTEBOOK.namespace({"answer_load_bert_layer": source})
    with pytest.raises(GradingError) as info:
        R.check_load_bert_layer(namespace["load_bert_layer"], thorough=True)
    return info.value


def test_a_tensor_no_mistake_explains_is_named_from_the_layer_s_state():
    error = _layer_error(
        '"norm1.bias": w["attention.output.LayerNorm.bias"]',
        '"norm1.bias": w["output.LayerNorm.bias"]',
    )
    assert error.mistake == "wrong-tensor"
    assert "norm1.bias" in error.problem


def test_two_wrong_settings_are_named_from_the_layer_s_settings():
    error = _layer_error('        activation="gelu",\n', "")
    assert error.mistake == "relu-not-gelu"  # one mistake: the catalogue's own
    error = _layer_error(
        '        activation="gelu",\n        norm_first=False,\n        layer_norm_eps=1e-12,\n',
        "        norm_first=False,\n",
    )
    assert error.mistake == "wrong-setting"
    assert "activation is relu" in error.problem


def test_the_layer_is_run_in_the_mode_of_the_case_whatever_mode_it_is_returned_in():
    for mode in ("layer.train()", "layer.eval()"):
        source = _LAYER.replace("    return layer\n", f"    return {mode}\n")
        namespace = NOTEBOOK.namespace({"answer_load_bert_layer": source})
        R.check_load_bert_layer(namespace["load_bert_layer"], thorough=True)


def test_the_layer_s_first_norm_sees_small_sums_so_that_eps_shows():
    """The check's weights shrink the attention's output, the input is BERT-sized: the first
    LayerNorm's input has a variance well below 1e-2, where eps 1e-5 changes the output."""
    for case in R._layer_cases(thorough=True):
        weights, prefix, heads = case.call.args
        layer = R._bert_layer(weights, prefix, heads).eval()
        x, mask = case.call.options["x"], case.call.options["mask"]
        with torch.no_grad():
            attended, _ = layer.self_attn(x, x, x, mask)
        assert float((x + attended).var(dim=-1).max()) < 1e-2, case.what


# --- contrastive_loss: gradients along the unit sphere -------------------------------------------


def test_a_cosine_of_unit_vectors_is_right_although_its_raw_gradients_differ():
    """Normalising the unit inputs again changes nothing in the loss, and its gradient only in
    the direction of each vector, which the sentence vectors' normalisation removes: the check
    compares the gradients along the sphere."""
    q = F.normalize(torch.randn(3, 8, dtype=torch.float64), dim=-1).requires_grad_()
    d = F.normalize(torch.randn(5, 8, dtype=torch.float64), dim=-1).requires_grad_()
    minilm.contrastive_loss(q, d).backward()
    raw = q.grad.clone()
    q.grad = None
    minilm.contrastive_loss(F.normalize(q, dim=-1), F.normalize(d, dim=-1)).backward()
    assert not torch.allclose(raw, q.grad)
    along = lambda g: g - (g * q).sum(-1, keepdim=True) * q  # noqa: E731
    torch.testing.assert_close(along(raw), along(q.grad))
    cosine = next(v for v in NOTEBOOK.correct if v.name == "cosine_similarity_again")
    namespace = NOTEBOOK.namespace({cosine.cell: cosine.source})
    R.check_contrastive_loss(namespace["contrastive_loss"], thorough=True)
