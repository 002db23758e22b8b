"""The runner's generic checks are each needed: switching any one of them off (``runner.STEPS``)
makes some answer of tests/variants misjudged (a buggy answer accepted, or its mistake no longer
named). A step without a witness here fails the suite, so a new generic check comes with one."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from notebook_namespace import SolutionNotebook, returning_subclass
from test_catalogue import NOTEBOOKS, own_test_cell, run_test_cells
from variants import Variant

from encoder_lib import grading
from encoder_lib.grading import GradingError, runner

# step -> answers it alone gets right: (assignment, variant name). "subclass:<cell>" is the
# reference answer of that cell rewritten to return a Tensor subclass.
WITNESSES: dict[str, list[tuple[str, str]]] = {
    "module": [("03_layer_norm", "module_renamed_parameters")],
    "failure": [("03_layer_norm", "calls_F_layer_norm"), ("03_layer_norm", "uses_encoder_lib")],
    "structure": [("03_layer_norm", "returns_tuple")],
    "plain tensor": [("03_layer_norm", "subclass:answer_layer_norm")],
    "shape": [("04_feed_forward", "pooled_over_positions")],
    "in place": [("03_layer_norm", "modifies_x_in_place")],
    "dtype": [("03_layer_norm", "returns_float32")],
    "values": [("03_layer_norm", "unbiased_variance")],
    "requires": [("03_layer_norm", "sublayer_called_twice")],
    "gradients": [("03_layer_norm", "detached"), ("03_layer_norm", "residual_detached")],
}


def _variant(notebook: SolutionNotebook, name: str) -> Variant:
    if name.startswith("subclass:"):
        cell = name.split(":", 1)[1]
        test_cell = own_test_cell(notebook, cell)
        source = returning_subclass(notebook.source(cell))
        return Variant(name, cell, source, (test_cell,), "Tensor subclass")
    return next(v for v in notebook.buggy if v.name == name)


def _judged_right(notebook: SolutionNotebook, variant: Variant) -> bool:
    errors = run_test_cells(notebook, {variant.cell: variant.source})
    failing = {cell for cell, error in errors.items() if error is not None}
    message = str(errors.get(own_test_cell(notebook, variant.cell)) or "")
    return failing == set(variant.fails) and variant.says.lower() in message.lower()


def test_every_step_has_a_witness():
    assert set(WITNESSES) == set(runner.STEPS)


@pytest.mark.parametrize(
    ("step", "assignment", "name"),
    [(step, a, name) for step, answers in WITNESSES.items() for a, name in answers],
)
def test_switching_a_step_off_misjudges_its_witness(monkeypatch, step, assignment, name):
    notebook = NOTEBOOKS[assignment]
    variant = _variant(notebook, name)
    assert _judged_right(notebook, variant), "the witness must be judged right to begin with"
    monkeypatch.setitem(runner.STEPS, step, lambda trial: None)
    assert not _judged_right(notebook, variant), f"with '{step}' off, {name} is still caught"


# --- the visible check tries the hidden cases' properties, not their values ---------------------


@pytest.mark.parametrize("test_cell", sorted(runner.EXERCISES))
def test_the_thorough_cases_hold_the_visible_ones(test_cell):
    """``trials_of`` tells the hidden cases from the visible ones by ``what``."""
    exercise = runner.EXERCISES[test_cell]
    visible = Counter(case.what for case in exercise.cases(False))
    thorough = Counter(case.what for case in exercise.cases(True))
    assert visible <= thorough
    hidden = [case for case, full in runner.trials_of(exercise, False) if not full]
    assert len(hidden) <= thorough.total() - visible.total()


def test_hidden_values_are_compared_only_by_the_thorough_check():
    # right on the visible inputs (2-D and 3-D), wrong values on the hidden 4-D ones
    def scores(query, key):
        right = query @ key.transpose(-2, -1) / query.shape[-1] ** 0.5
        return right * 2 if query.dim() == 4 else right

    grading.check_attention_scores(scores)
    with pytest.raises(GradingError, match="does not match the reference"):
        grading.check_attention_scores(scores, thorough=True)


def test_hidden_properties_are_tried_by_the_visible_check():
    def detached(query, key):
        return (query @ key.transpose(-2, -1) / query.shape[-1] ** 0.5).detach()

    with pytest.raises(GradingError, match="does not require grad"):
        grading.check_attention_scores(detached)


# --- one mistake, one place -------------------------------------------------------------------


def _notebook_01(scores_body: str, attention_body: str) -> dict:
    namespace = {"torch": torch, "math": math, "__name__": "__main__"}
    exec(
        "def attention_scores(query, key):\n" + scores_body + "\n"
        "def masked_softmax(scores, mask=None):\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    return torch.softmax(scores, dim=-1).nan_to_num(0.0)\n\n"
        "def scaled_dot_product_attention(query, key, value, mask=None):\n" + attention_body,
        namespace,
    )
    return namespace


_BY_D_K = "    return query @ key.transpose(-2, -1) / query.shape[-1]\n"
_CALLS = "    weights = masked_softmax(attention_scores(query, key), mask)\n"


def test_a_dependent_exercise_names_where_the_mistake_lives():
    ns = _notebook_01(_BY_D_K, _CALLS + "    return weights @ value, weights\n")
    with pytest.raises(GradingError) as caught:
        grading.check_scaled_dot_product_attention(ns["scaled_dot_product_attention"])
    problem = caught.value.problem
    assert problem.startswith("this comes from your attention_scores (exercise 1)"), problem
    assert "divided by d_k instead of sqrt(d_k)" in problem


def test_an_answer_that_does_not_call_the_wrong_one_is_judged_on_its_own():
    inline = (
        "    s = query @ key.transpose(-2, -1) / query.shape[-1]\n"
        "    weights = masked_softmax(s, mask)\n    return weights @ value, weights\n"
    )
    ns = _notebook_01(_BY_D_K, inline)
    with pytest.raises(GradingError) as caught:
        grading.check_scaled_dot_product_attention(ns["scaled_dot_product_attention"])
    assert "comes from" not in caught.value.problem
    assert "divided by d_k" in caught.value.problem


def test_spare_dependents_judges_again_with_the_reference(monkeypatch):
    monkeypatch.setattr(runner, "SPARE_DEPENDENTS", True)
    right = _notebook_01(_BY_D_K, _CALLS + "    return weights @ value, weights\n")
    grading.check_scaled_dot_product_attention(right["scaled_dot_product_attention"], True)
    assert right["attention_scores"].__name__ == "attention_scores"  # the student's, put back
    forgot_v = _notebook_01(_BY_D_K, _CALLS + "    return weights, weights\n")
    with pytest.raises(GradingError, match="multiply the weights by the values"):
        grading.check_scaled_dot_product_attention(forgot_v["scaled_dot_product_attention"], True)


# --- hints on request, stubs ----------------------------------------------------------------------


def test_hint_gives_a_more_concrete_hint_for_the_last_failure(capsys):
    ns = _notebook_01("    return query @ key / query.shape[-1] ** 0.5\n", _CALLS)
    with pytest.raises(GradingError, match="Is key transposed") as caught:
        grading.check_attention_scores(ns["attention_scores"])
    assert "grading.hint() prints a more concrete hint" in "\n".join(caught.value.lines())
    grading.hint()
    out = capsys.readouterr().out
    assert out.startswith("Hint for Exercise 1 · attention_scores: ") and "axes" in out
    assert "transpose(-2, -1)" not in out and ".mT" not in out


def test_hint_says_so_when_the_message_is_all_there_is(capsys):
    ns = _notebook_01(_BY_D_K, _CALLS)
    with pytest.raises(GradingError):
        grading.check_attention_scores(ns["attention_scores"])
    grading.hint()
    assert capsys.readouterr().out.startswith("No more concrete hint for Exercise 1")


def test_only_the_given_stub_is_not_written_yet():
    def stub(query, key):
        raise NotImplementedError()

    def own(query, key):
        raise NotImplementedError("batched inputs are not supported yet")

    with pytest.raises(GradingError, match="not written yet"):
        grading.check_attention_scores(stub)
    with pytest.raises(GradingError) as caught:
        grading.check_attention_scores(own)
    assert "not written yet" not in str(caught.value)
    assert "raised NotImplementedError: batched inputs are not supported yet" in str(caught.value)


def test_a_returned_report_offers_no_hint():
    from encoder_lib.autograde.judge import for_report

    error = GradingError(grading.feedback.Hinted("the problem.", "a hint"), "f(x)", "Exercise 1")
    assert error.hint == "a hint"
    assert "stuck?" not in "\n".join(for_report(error).lines())


@pytest.mark.parametrize(
    ("assignment", "name"),
    [
        ("01_self_attention", "scores_scaled_by_d_k"),
        ("01_self_attention", "mask_polarity_reversed"),
        ("02_multi_head_attention", "split_forgot_transpose"),
        ("02_multi_head_attention", "merge_reshape_without_transpose"),
        ("05_encoder", "mask_reversed_polarity"),
        ("09_modern_encoder", "off_by_one"),
    ],
)
def test_spared_dependents_lose_only_the_cell_of_the_mistake(monkeypatch, assignment, name):
    """``ENCODER_LAB_SPARE_DEPENDENTS=1``: a mistake in an earlier answer costs only its own test
    cell; the exercises that call it are judged with the reference in its place."""
    notebook = NOTEBOOKS[assignment]
    variant = _variant(notebook, name)
    assert len(variant.fails) == 2  # charged twice by default
    monkeypatch.setenv("ENCODER_LAB_SPARE_DEPENDENTS", "1")
    errors = run_test_cells(notebook, {variant.cell: variant.source})
    failing = {cell for cell, error in errors.items() if error is not None}
    assert failing == {own_test_cell(notebook, variant.cell)}
