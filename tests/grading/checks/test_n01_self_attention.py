"""The checks of notebook 01 (self-attention): what is particular to them (how the notebook and
its checks fit together, forbidden built-ins, tensor subclasses, the behaviour the notebook
promises). Every answer of tests/variants, buggy, correct or stub, is graded in
test_catalogue.py.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from grading.notebook_namespace import Check, SolutionNotebook, stub

import encoder_lib
from encoder_lib import grading
from encoder_lib.grading import ForbiddenCallError, GradingError, runner, vocabulary
from encoder_lib.grading.checks import n01_self_attention as checks

# test cell grade_id -> (answer cell grade_id, name the answer defines, check)
CHECKS = {
    f"test_{name}": Check(name, name, getattr(grading, f"check_{name}"))
    for name in (
        "attention_scores",
        "masked_softmax",
        "causal_mask",
        "scaled_dot_product_attention",
    )
}
NOTEBOOK = SolutionNotebook("01_self_attention", CHECKS)
BUGGY, CORRECT = NOTEBOOK.buggy, NOTEBOOK.correct
# The test cells whose checks call each answer cell's function (the reference attention calls
# attention_scores and masked_softmax).
DEPENDENTS = {
    "attention_scores": ("test_attention_scores", "test_scaled_dot_product_attention"),
    "masked_softmax": ("test_masked_softmax", "test_scaled_dot_product_attention"),
    "causal_mask": ("test_causal_mask",),
    "scaled_dot_product_attention": ("test_scaled_dot_product_attention",),
}


def test_notebook_has_the_expected_cells():
    answers, tests = NOTEBOOK.answers, NOTEBOOK.tests
    assert list(answers) == list(DEPENDENTS)
    assert set(tests) == set(CHECKS)
    for test_cell in CHECKS:
        assert "grading.check_" in NOTEBOOK.source(test_cell)
        assert test_cell in runner.EXERCISES
    for variant in BUGGY + CORRECT:
        assert variant.cell in answers, variant.name
        assert set(variant.fails) <= set(DEPENDENTS[variant.cell]), variant.name


# --- the untouched release --------------------------------------------------------------------


def test_attention_names_the_helper_that_is_still_a_stub():
    ns = NOTEBOOK.namespace({"attention_scores": stub(NOTEBOOK.answers["attention_scores"])})
    with pytest.raises(GradingError, match="calls attention_scores, which is not written yet"):
        NOTEBOOK.run("test_scaled_dot_product_attention", ns, thorough=False)


def test_stub_keeps_the_signature_and_docstring():
    for grade_id, source in NOTEBOOK.answers.items():
        released = stub(source)
        assert "### BEGIN SOLUTION" not in released
        assert f"def {grade_id}(" in released
        assert '"""' in released
        assert released.rstrip().endswith("raise NotImplementedError()")


# --- forbidden built-ins and tensor subclasses --------------------------------------------------


def _scores(query, key):
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])


def _softmax(scores, mask=None):
    if mask is None:
        return torch.softmax(scores, dim=-1)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)


def _causal(L):
    return torch.ones(L, L, dtype=torch.bool).tril()


def _attention(query, key, value, mask=None):
    weights = _softmax(_scores(query, key), mask)
    return weights @ value, weights


def _sdpa_with_torch(query, key, value, mask=None):
    weights = _softmax(_scores(query, key), mask)
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, mask), weights


def _sdpa_with_encoder_lib(query, key, value, mask=None):
    return encoder_lib.scaled_dot_product_attention(query, key, value, mask)


def _sdpa_with_encoder_lib_module(query, key, value, mask=None):
    encoder_lib.MultiHeadAttention(query.shape[-1], 1)  # building it is enough to be caught
    return _attention(query, key, value, mask)


def _sdpa_with_torch_module(query, key, value, mask=None):
    module = torch.nn.MultiheadAttention(query.shape[-1], 1, batch_first=True)
    return module(query, key, value, attn_mask=None if mask is None else ~mask)


def _scores_with_encoder_lib(query, key):
    _, weights = encoder_lib.scaled_dot_product_attention(query, key, key)
    return torch.log(weights)


def _causal_with_encoder_lib(L):
    return encoder_lib.causal_mask(L)


@pytest.mark.parametrize(
    ("check", "answer", "name"),
    [
        (grading.check_scaled_dot_product_attention, _sdpa_with_torch, "F.scaled_dot_product"),
        (grading.check_scaled_dot_product_attention, _sdpa_with_encoder_lib, "encoder_lib"),
        (grading.check_scaled_dot_product_attention, _sdpa_with_encoder_lib_module, "MultiHead"),
        (grading.check_scaled_dot_product_attention, _sdpa_with_torch_module, "multi_head"),
        (grading.check_attention_scores, _scores_with_encoder_lib, "encoder_lib"),
        (grading.check_causal_mask, _causal_with_encoder_lib, "causal_mask"),
    ],
    ids=["F.sdpa", "encoder_lib.sdpa", "encoder_lib.MHA", "nn.MHA", "scores", "causal"],
)
def test_forbidden_built_ins_are_refused_with_a_reason(check, answer, name):
    with pytest.raises(ForbiddenCallError) as info:
        check(answer)
    message = str(info.value)
    assert name in message
    assert "already does what this exercise asks you to write" in message


# --- what the checks promise --------------------------------------------------------------------

RIGHT = {
    "attention_scores": _scores,
    "masked_softmax": _softmax,
    "causal_mask": _causal,
    "scaled_dot_product_attention": _attention,
}


@pytest.mark.parametrize("name", list(RIGHT))
def test_right_answer_prints_nothing_and_warns_nothing(name, capsys, recwarn):
    check = getattr(grading, f"check_{name}")
    assert check(RIGHT[name]) is None
    assert check(RIGHT[name], thorough=True) is None
    assert capsys.readouterr() == ("", "")
    assert len(recwarn) == 0


def test_batched_key_dot_t_is_named_although_it_warns():
    """``key.T`` on a 3-D tensor warns (deprecated) and then fails: the check names the batch
    problem and the warning does not reach the notebook's stderr."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(GradingError, match="not with a batch axis in front"):
            grading.check_attention_scores(lambda q, k: q @ k.T / math.sqrt(q.shape[-1]))
    assert seen == []


def test_a_mistake_after_the_batched_case_is_not_blamed_on_batch_axes():
    """Only the first batched input after a single sequence that passed is read as a batch
    problem: a mask mistake found later is named alone."""

    def ignores_mask(query, key, value, mask=None):
        return _attention(query, key, value, None)

    with pytest.raises(GradingError) as info:
        grading.check_scaled_dot_product_attention(ignores_mask)
    assert "mask is ignored" in str(info.value)
    assert "batch axis" not in str(info.value)


def test_weights_in_float64_for_float32_inputs_are_refused():
    def float64_weights(query, key, value, mask=None):
        out, weights = _attention(query.double(), key.double(), value.double(), mask)
        return out.to(query.dtype), weights

    # the visible inputs are float64, but the visible check also tries the hidden float32 inputs
    # on the generic properties: the dtype is refused in the notebook, not first at grading
    for thorough in (False, True):
        with pytest.raises(GradingError, match=r"the weights tensor has dtype torch\.float64"):
            grading.check_scaled_dot_product_attention(float64_weights, thorough=thorough)


def test_reference_weights_agree_with_encoder_lib():
    query, key = checks.randn(2, 3, 4, seed=1), checks.randn(2, 5, 4, seed=2)
    value = checks.randn(2, 5, 6, seed=3)
    for mask in (None, checks._pattern_mask(), checks._dead_row_mask()):
        scores = checks._reference_scores(query, key)
        _, expected = encoder_lib.scaled_dot_product_attention(query, key, value, mask)
        torch.testing.assert_close(checks._reference_weights(scores, mask), expected)


def test_visible_cases_use_distinct_mistakes():
    """Every named mistake must give an output different from the right one on the visible
    cases, otherwise the check could not tell them apart."""
    query, key = checks.randn(2, 3, 4, seed=4), checks.randn(2, 5, 4, seed=5)
    scores = checks._reference_scores(query, key)
    for mask in (checks._pattern_mask(), checks._dead_row_mask()):
        right = checks._reference_weights(scores, mask)
        for description, wrong in checks._weight_mistakes(scores, mask).items():
            assert not vocabulary.close(wrong, right), description
    for description, wrong in checks._scale_mistakes(query, key).items():
        assert not vocabulary.close(wrong, scores), description
