"""The checks of notebook 06 (the sentiment capstone) against answers written the way students
write them (tests/variants/a06_sentiment_capstone.py).

Every answer runs in a namespace like the notebook's: the setup cell's imports, the reference
solution's answer cells (read from the solution notebook), then the variant's cell in place of
the one it replaces. A buggy answer must fail the test cells it names with a message naming the
mistake and keep full marks on the others; a correct one must pass everything, hidden tests
included, without printing or warning.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from variants import Variant, load

import encoder_lib
from encoder_lib import grading
from encoder_lib.grading import GradingError, capstone

NOTEBOOK = (
    Path(__file__).resolve().parents[2]
    / "solutions/06_sentiment_capstone/06_sentiment_capstone.ipynb"
)
BUGGY, CORRECT = load("06_sentiment_capstone")

# test cell -> (answer cell, the name the answer defines, its check, its points)
CHECKS = {
    "test_masked_mean": ("masked_mean", "masked_mean", capstone.check_masked_mean, 2),
    "test_sentiment_classifier": (
        "sentiment_classifier",
        "SentimentClassifier",
        capstone.check_sentiment_classifier,
        3,
    ),
}
ANSWERS = [answer for answer, _, _, _ in CHECKS.values()]


def _nbgrader_cells() -> dict[str, dict]:
    """grade_id -> cell, for every nbgrader cell of the solution notebook."""
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    cells = {}
    for cell in notebook["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id:
            cells[grade_id] = {**cell, "source": "".join(cell["source"])}
    return cells


CELLS = _nbgrader_cells()


def _stub(source: str) -> str:
    """An answer cell as nbgrader's generate_assignment releases it."""
    solution = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION", re.S | re.M)
    return solution.sub(r"\1# YOUR CODE HERE\n\1raise NotImplementedError()", source)


def _namespace(replace: dict[str, str] | None = None) -> dict:
    """The notebook's globals once its answer cells have run, some of them replaced."""
    namespace = {
        "__name__": "__main__",
        "math": math,
        "torch": torch,
        "F": F,
        "nn": nn,
        "encoder_lib": encoder_lib,
        "grading": grading,
    }
    for answer in ANSWERS:
        source = (replace or {}).get(answer, CELLS[answer]["source"])
        exec(compile(source, f"<{answer}>", "exec"), namespace)
    return namespace


def _grade(test_cell: str, namespace: dict, thorough: bool = True) -> None:
    """What the test cell does: the visible check, then (thorough) the hidden one."""
    _, name, check, _ = CHECKS[test_cell]
    check(namespace[name])
    if thorough:
        check(namespace[name], thorough=True)


def _failure(test_cell: str, namespace: dict) -> GradingError:
    with pytest.raises(GradingError) as caught:
        _grade(test_cell, namespace)
    return caught.value


# --- the notebook and the variants fit together -------------------------------------------------


def test_notebook_has_the_cells_and_points_the_checks_expect():
    for test_cell, (answer, name, check, points) in CHECKS.items():
        assert "### BEGIN SOLUTION" in CELLS[answer]["source"]
        meta = CELLS[test_cell]["metadata"]["nbgrader"]
        assert meta["grade"] and meta["locked"] and meta["points"] == points
        source = CELLS[test_cell]["source"]
        assert f"grading.{check.__name__}({name})" in source
        assert f"grading.{check.__name__}({name}, thorough=True)" in source
        assert "### BEGIN HIDDEN TESTS" in source
    assert CELLS["setup"]["metadata"]["nbgrader"]["locked"]
    for variant in BUGGY + CORRECT:
        assert variant.cell in ANSWERS, variant.name
        assert set(variant.fails) <= set(CHECKS), variant.name
        assert not variant.fails or variant.says, variant.name


def test_capstone_module_lists_its_checks():
    assert set(capstone.__all__) == {"check_masked_mean", "check_sentiment_classifier"}


# --- reference, buggy and correct answers --------------------------------------------------------


def test_reference_solution_passes_every_test_cell_silently(capsys, recwarn):
    namespace = _namespace()
    for test_cell in CHECKS:
        _grade(test_cell, namespace)
    assert capsys.readouterr() == ("", "")
    assert len(recwarn) == 0, [str(w.message) for w in recwarn]


@pytest.mark.parametrize("variant", BUGGY, ids=lambda v: v.name)
def test_buggy_answer_is_rejected_and_named(variant: Variant):
    namespace = _namespace({variant.cell: variant.source})
    for test_cell in CHECKS:
        if test_cell in variant.fails:
            message = str(_failure(test_cell, namespace))
            assert variant.says.lower() in message.lower(), message
        else:
            _grade(test_cell, namespace)  # the other exercise keeps its points


@pytest.mark.parametrize("variant", CORRECT, ids=lambda v: v.name)
def test_correct_answer_passes_silently(variant: Variant, capsys, recwarn):
    namespace = _namespace({variant.cell: variant.source})
    for test_cell in CHECKS:
        _grade(test_cell, namespace)
    assert capsys.readouterr() == ("", "")
    assert len(recwarn) == 0, [str(w.message) for w in recwarn]


# --- the untouched student version ---------------------------------------------------------------


@pytest.mark.parametrize("test_cell", CHECKS)
def test_untouched_stub_is_not_written_yet(test_cell):
    answer = CHECKS[test_cell][0]
    namespace = _namespace({answer: _stub(CELLS[answer]["source"])})
    with pytest.raises(GradingError, match="not written yet"):
        _grade(test_cell, namespace, thorough=False)  # the visible part, as students see it


def test_release_keeps_the_given_init():
    """The classifier stub still builds its encoder and head: only forward is left to write."""
    stub = _stub(CELLS["sentiment_classifier"]["source"])
    namespace = _namespace({"sentiment_classifier": stub})
    config = encoder_lib.EncoderConfig(d_model=8, num_heads=2, d_ff=16, num_layers=1)
    model = namespace["SentimentClassifier"](encoder_lib.SentenceEncoder(config=config))
    assert [name for name, _ in model.named_children()] == ["encoder", "head"]
    assert (model.head.in_features, model.head.out_features) == (8, 2)
    assert model.pad_id == 0


# --- (b) is graded independently of (a), and the notebook's state is left alone ------------------


def test_classifier_is_graded_with_the_reference_pooling_and_restores_it():
    wrong_mean = "def masked_mean(h, keep):\n    return h.mean(dim=1)\n"
    namespace = _namespace({"masked_mean": wrong_mean})
    student_mean = namespace["masked_mean"]
    _grade("test_sentiment_classifier", namespace)
    assert namespace["masked_mean"] is student_mean


def test_checks_leave_the_global_random_state_and_threads_alone():
    namespace = _namespace()
    torch.manual_seed(123)
    expected = torch.rand(5)
    torch.manual_seed(123)
    threads = torch.get_num_threads()
    for test_cell in CHECKS:
        _grade(test_cell, namespace)
    assert torch.equal(torch.rand(5), expected)
    assert torch.get_num_threads() == threads


def test_tensor_subclass_output_is_rejected():
    source = """\
class Liar(torch.Tensor):
    pass

def masked_mean(h, keep):
    k = keep.to(h.dtype)[:, :, None]
    return ((h * k).sum(1) / k.sum(1)).as_subclass(Liar)
"""
    with pytest.raises(GradingError, match="Tensor subclass"):
        _grade("test_masked_mean", _namespace({"masked_mean": source}), thorough=False)


def test_silent_broadcast_along_the_features_is_named():
    """keep without its trailing axis broadcasts silently when B = 1 and L = D (hidden case)."""
    source = "def masked_mean(h, keep):\n    return (h * keep).sum(1) / keep.sum(1, keepdim=True)\n"
    namespace = _namespace({"masked_mean": source})
    message = str(_failure("test_masked_mean", namespace))
    assert "trailing axis" in message, message


def test_checks_are_fast():
    import time

    namespace = _namespace()
    start = time.perf_counter()
    for test_cell in CHECKS:
        _grade(test_cell, namespace)
    assert time.perf_counter() - start < 2.0
