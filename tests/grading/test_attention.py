"""The checks of notebook 01 (self-attention): what is particular to them (how the
notebook and its checks fit together, forbidden built-ins, tensor subclasses, tampering,
the behaviour the notebook promises). Every answer of tests/variants, buggy, correct or
stub, is graded in test_catalogue.py.
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import pytest
import torch
from notebook_namespace import ROOT, SolutionNotebook, stub
from torch.overrides import TorchFunctionMode

import encoder_lib
from encoder_lib import grading
from encoder_lib.grading import ForbiddenCallError, GradingError, TamperingError, _core
from encoder_lib.grading import attention as checks

NOTEBOOK = SolutionNotebook("01_self_attention")
BUGGY, CORRECT = NOTEBOOK.buggy, NOTEBOOK.correct
# The test cells whose checks call each answer cell's function (the reference attention calls
# attention_scores and masked_softmax).
DEPENDENTS = {
    "attention_scores": ("test_attention_scores", "test_scaled_dot_product_attention"),
    "masked_softmax": ("test_masked_softmax", "test_scaled_dot_product_attention"),
    "causal_mask": ("test_causal_mask",),
    "scaled_dot_product_attention": ("test_scaled_dot_product_attention",),
}


def run_test_cell(ns: dict, grade_id: str) -> GradingError | None:
    """Execute a test cell as nbgrader does; the error that would score it 0, or None."""
    try:
        NOTEBOOK.execute(grade_id, ns)
    except GradingError as e:
        return e
    return None


def test_notebook_has_the_expected_cells():
    answers, tests = NOTEBOOK.answers, NOTEBOOK.tests
    assert list(answers) == list(DEPENDENTS)
    assert set(tests) == {f"test_{name}" for name in DEPENDENTS}
    for variant in BUGGY + CORRECT:
        assert variant.cell in answers, variant.name
        assert set(variant.fails) <= set(DEPENDENTS[variant.cell]), variant.name


# --- the untouched release --------------------------------------------------------------------


def test_attention_names_the_helper_that_is_still_a_stub():
    answers = NOTEBOOK.answers
    ns = NOTEBOOK.namespace({"attention_scores": stub(answers["attention_scores"])})
    error = run_test_cell(ns, "test_scaled_dot_product_attention")
    assert error is not None
    assert "calls attention_scores, which is not written yet" in str(error)


def test_stub_keeps_the_signature_and_docstring():
    answers = NOTEBOOK.answers
    for grade_id, source in answers.items():
        released = stub(source)
        assert "### BEGIN SOLUTION" not in released
        assert f"def {grade_id}(" in released
        assert '"""' in released
        assert released.rstrip().endswith("raise NotImplementedError()")


# --- defences ---------------------------------------------------------------------------------


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


class Sneaky(torch.Tensor):
    pass


@pytest.mark.parametrize(
    ("check", "answer"),
    [
        (grading.check_attention_scores, lambda q, k: _scores(q, k).as_subclass(Sneaky)),
        (grading.check_masked_softmax, lambda s, m=None: _softmax(s, m).as_subclass(Sneaky)),
        (grading.check_causal_mask, lambda L: _causal(L).as_subclass(Sneaky)),
        (
            grading.check_scaled_dot_product_attention,
            lambda q, k, v, m=None: (
                _attention(q, k, v, m)[0].as_subclass(Sneaky),
                _softmax(_scores(q, k), m),
            ),
        ),
    ],
    ids=["scores", "softmax", "causal", "attention"],
)
def test_tensor_subclass_output_is_rejected(check, answer):
    with pytest.raises(GradingError, match="Tensor subclass"):
        check(answer)


@pytest.mark.parametrize(
    ("check", "answer"),
    [
        (grading.check_attention_scores, _scores),
        (grading.check_masked_softmax, _softmax),
        (grading.check_causal_mask, _causal),
        (grading.check_scaled_dot_product_attention, _attention),
    ],
    ids=["scores", "softmax", "causal", "attention"],
)
def test_right_answer_prints_nothing_and_warns_nothing(check, answer, capsys, recwarn):
    assert check(answer) is None
    assert check(answer, thorough=True) is None
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


def test_reference_weights_agree_with_encoder_lib():
    query, key = (
        torch.randn(2, 3, 4, dtype=torch.float64),
        torch.randn(2, 5, 4, dtype=torch.float64),
    )
    value = torch.randn(2, 5, 6, dtype=torch.float64)
    for mask in (None, checks._pattern_mask(), checks._dead_row_mask()):
        scores = checks._reference_scores(query, key)
        _, expected = encoder_lib.scaled_dot_product_attention(query, key, value, mask)
        torch.testing.assert_close(checks._reference_weights(scores, mask), expected)


def test_visible_cases_use_distinct_mistakes():
    """Every named mistake must give an output different from the right one on the visible
    cases, otherwise the check could not tell them apart."""
    query, key = (
        torch.randn(2, 3, 4, dtype=torch.float64),
        torch.randn(2, 5, 4, dtype=torch.float64),
    )
    scores = checks._reference_scores(query, key)
    for mask in (checks._pattern_mask(), checks._dead_row_mask()):
        right = checks._reference_weights(scores, mask)
        for description, wrong in checks._weight_mistakes(scores, mask).items():
            assert not _core._close(wrong, right), description
    for description, wrong in checks._scale_mistakes(query, key).items():
        assert not _core._close(wrong, scores), description


class _EverythingMatches(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal):
            return True
        return func(*args, **(kwargs or {}))


def test_function_mode_left_active_is_refused():
    """A mode entered in a notebook cell and never left would make every comparison pass."""
    mode = _EverythingMatches()
    mode.__enter__()
    try:
        with pytest.raises(TamperingError, match="TorchFunctionMode"):
            grading.check_attention_scores(lambda q, k: torch.zeros(q.shape[-2], k.shape[-2]))
    finally:
        mode.__exit__(None, None, None)


def test_function_mode_entered_by_the_answer_is_refused(clean_mode_stack):
    def answer(query, key):
        _EverythingMatches().__enter__()
        return torch.zeros(*query.shape[:-1], key.shape[-2])

    with pytest.raises(TamperingError, match="TorchFunctionMode"):
        grading.check_attention_scores(answer)


def test_comparisons_rebound_before_the_setup_cell_are_noticed():
    """A cell run above the setup cell can rebind torch.allclose before grading captures it; the
    checks test their comparisons first and refuse to grade."""
    script = (
        "import torch\n"
        "torch.allclose = lambda *args, **kwargs: True\n"
        "torch.equal = lambda *args, **kwargs: True\n"
        "from encoder_lib import grading\n"
        "try:\n"
        "    grading.check_causal_mask(lambda L: torch.zeros(L, L, dtype=torch.bool))\n"
        "except grading.TamperingError as e:\n"
        "    print('refused:', e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert "refused: torch's comparison functions give wrong answers" in done.stdout, done.stderr
