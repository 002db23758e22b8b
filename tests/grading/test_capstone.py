"""The checks of notebook 06 (the sentiment capstone): what is particular to them (how the
notebook and its checks fit together, forbidden built-ins, tensor subclasses, tampering,
the behaviour the notebook promises). Every answer of tests/variants, buggy, correct or
stub, is graded in test_catalogue.py.
"""

from __future__ import annotations

import pytest
import torch
from notebook_namespace import Check, SolutionNotebook, expect_exported, stub

import encoder_lib
from encoder_lib.grading import GradingError, capstone

# test cell -> (answer cell, the name the answer defines, its check)
CHECKS = {
    "test_masked_mean": Check("masked_mean", "masked_mean", capstone.check_masked_mean),
    "test_sentiment_classifier": Check(
        "sentiment_classifier", "SentimentClassifier", capstone.check_sentiment_classifier
    ),
}
POINTS = {"test_masked_mean": 2, "test_sentiment_classifier": 3}
NOTEBOOK = SolutionNotebook("06_sentiment_capstone", CHECKS)
BUGGY, CORRECT = NOTEBOOK.buggy, NOTEBOOK.correct
ANSWERS = NOTEBOOK.answers


# --- the notebook and the variants fit together -------------------------------------------------


def test_notebook_has_the_cells_and_points_the_checks_expect():
    assert list(ANSWERS) == [answer for answer, _, _ in CHECKS.values()]
    for test_cell, (answer, name, check) in CHECKS.items():
        assert "### BEGIN SOLUTION" in NOTEBOOK.source(answer)
        meta = NOTEBOOK.cells[test_cell]["metadata"]["nbgrader"]
        assert meta["grade"] and meta["locked"] and meta["points"] == POINTS[test_cell]
        source = NOTEBOOK.source(test_cell)
        assert f"grading.{check.__name__}({name})" in source
        assert f"grading.{check.__name__}({name}, thorough=True)" in source
        assert "### BEGIN HIDDEN TESTS" in source
    assert NOTEBOOK.cells["setup"]["metadata"]["nbgrader"]["locked"]
    for variant in BUGGY + CORRECT:
        assert variant.cell in ANSWERS, variant.name
        assert set(variant.fails) <= set(CHECKS), variant.name
        assert not variant.fails or variant.says, variant.name


def test_capstone_module_lists_its_checks():
    expect_exported(capstone, {"check_masked_mean", "check_sentiment_classifier"})


# --- the untouched student version ---------------------------------------------------------------


def test_release_keeps_the_given_init():
    """The classifier stub still builds its encoder and head: only forward is left to write."""
    released = stub(NOTEBOOK.source("sentiment_classifier"))
    namespace = NOTEBOOK.namespace({"sentiment_classifier": released})
    config = encoder_lib.EncoderConfig(d_model=8, num_heads=2, d_ff=16, num_layers=1)
    model = namespace["SentimentClassifier"](encoder_lib.SentenceEncoder(config=config))
    assert [name for name, _ in model.named_children()] == ["encoder", "head"]
    assert (model.head.in_features, model.head.out_features) == (8, 2)
    assert model.pad_id == 0


# --- (b) is graded independently of (a), and the notebook's state is left alone ------------------


def test_classifier_is_graded_with_the_reference_pooling_and_restores_it():
    wrong_mean = "def masked_mean(h, keep):\n    return h.mean(dim=1)\n"
    namespace = NOTEBOOK.namespace({"masked_mean": wrong_mean})
    student_mean = namespace["masked_mean"]
    NOTEBOOK.autograde("test_sentiment_classifier", namespace)
    assert namespace["masked_mean"] is student_mean


def test_checks_leave_the_global_random_state_and_threads_alone():
    namespace = NOTEBOOK.namespace()
    torch.manual_seed(123)
    expected = torch.rand(5)
    torch.manual_seed(123)
    threads = torch.get_num_threads()
    for test_cell in CHECKS:
        NOTEBOOK.autograde(test_cell, namespace)
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
        NOTEBOOK.autograde(
            "test_masked_mean", NOTEBOOK.namespace({"masked_mean": source}), hidden=False
        )


def test_silent_broadcast_along_the_features_is_named():
    """keep without its trailing axis broadcasts silently when B = 1 and L = D (hidden case)."""
    source = "def masked_mean(h, keep):\n    return (h * keep).sum(1) / keep.sum(1, keepdim=True)\n"
    namespace = NOTEBOOK.namespace({"masked_mean": source})
    message = str(NOTEBOOK.failure("test_masked_mean", namespace))
    assert "trailing axis" in message, message


def test_checks_are_fast():
    import time

    namespace = NOTEBOOK.namespace()
    start = time.perf_counter()
    for test_cell in CHECKS:
        NOTEBOOK.autograde(test_cell, namespace)
    assert time.perf_counter() - start < 2.0
