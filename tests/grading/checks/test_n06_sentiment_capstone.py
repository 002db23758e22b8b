"""The checks of notebook 06 (the capstone): what is particular to them (how the notebook and its
checks fit together, the training step's scenario, the classifier graded apart from the pooling
exercise, the wire). Every answer of tests/variants, buggy, correct or stub, is graded in
test_catalogue.py.
"""

from __future__ import annotations

import pytest
import torch
from grading.notebook_namespace import (
    Check,
    SolutionNotebook,
    stub,
)

from encoder_lib.grading import GradingError, runner, wire
from encoder_lib.grading.checks import n06_sentiment_capstone

# test cell -> (answer cell, the name the answer defines, its check)
CHECKS = {
    "test_masked_mean": Check(
        "masked_mean", "masked_mean", n06_sentiment_capstone.check_masked_mean
    ),
    "test_train_step": Check("train_step", "train_step", n06_sentiment_capstone.check_train_step),
    "test_sentiment_classifier": Check(
        "sentiment_classifier",
        "SentimentClassifier",
        n06_sentiment_capstone.check_sentiment_classifier,
    ),
}
POINTS = {"test_masked_mean": 2, "test_train_step": 3, "test_sentiment_classifier": 3}
NOTEBOOK = SolutionNotebook("06_sentiment_capstone", CHECKS)
BUGGY, CORRECT = NOTEBOOK.buggy, NOTEBOOK.correct
ANSWERS = NOTEBOOK.answers


# --- the notebook and the variants fit together -------------------------------------------------


def test_notebook_has_the_cells_and_points_the_checks_expect():
    NOTEBOOK.assert_cells_and_points(POINTS)


def test_the_reference_classifier_is_the_notebook_s():
    """The checks' ``_Classifier`` has the given __init__'s parameters, in the same order, and
    computes what the solution's forward computes."""
    namespace = NOTEBOOK.namespace()
    torch.manual_seed(5)
    theirs = namespace["SentimentClassifier"](13, 2, 9, d_model=8, num_heads=2, d_ff=16).eval()
    torch.manual_seed(5)
    ours = n06_sentiment_capstone._Classifier(13, 2, 9, d_model=8, num_heads=2, d_ff=16).eval()
    assert [n for n, _ in theirs.named_parameters()] == [n for n, _ in ours.named_parameters()]
    pairs = zip(theirs.parameters(), ours.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    ids = n06_sentiment_capstone._token_ids([9, 4, 1], 9, 13, 2, seed=3)
    with torch.no_grad():
        assert torch.allclose(theirs(ids), ours(ids), atol=1e-6)


def test_release_keeps_the_given_init():
    """The classifier stub still builds its parts: only forward is left to write."""
    released = stub(NOTEBOOK.source("sentiment_classifier"))
    namespace = NOTEBOOK.namespace({"sentiment_classifier": released})
    model = namespace["SentimentClassifier"](39, 0, 15)
    names = [name for name, _ in model.named_children()]
    assert names == ["embedding", "positional", "encoder", "head"]
    assert model.embedding.scale == 1.0  # scale=False: see the notebook's note
    assert (model.head.in_features, model.head.out_features) == (32, 2)
    assert sum(p.numel() for p in model.parameters()) == 18402  # bench/bench_capstone.py's model


# --- (b) the training step -----------------------------------------------------------------------


def test_the_step_scenario_records_the_steps_and_their_order():
    namespace = NOTEBOOK.namespace()
    case = next(iter(n06_sentiment_capstone._step_cases(False)))
    obs = runner.local(namespace)(case.call)
    assert obs.failure is None
    steps = obs.info["steps"]
    assert len(steps) == 2
    for step in steps:
        assert type(step["value"]) is float
        assert step["events"] == ["zero_grad", "forward", "backward", "step"]
        assert step["modes"] == [True]  # model.train() was called: the model came in eval mode
    before = case.call.options["state"]
    assert not torch.equal(steps[0]["parameters"]["head.weight"], before["head.weight"])


def test_the_step_calls_carry_no_expected_value():
    """What enters the kernel: sizes, the initial weights, the stale gradients, the learning rate
    and the batches; never a parameter after a step."""
    for case in n06_sentiment_capstone._step_cases(thorough=True):
        sent = wire.decode_call(wire.encode_call(case.call))
        assert set(sent.options) == {"sizes", "state", "stale", "lr", "weight_decay", "batches"}
        assert case.call.scenario == "capstone.train_step"


def test_a_step_in_eval_mode_shows_in_the_values_alone():
    """Deterministic dropout, not only the recorded mode, names a forward in eval mode: a step
    that calls ``model.forward`` directly (no hooks fire) is still caught."""
    source = (
        "def train_step(model, optimizer, token_ids, labels):\n"
        "    optimizer.zero_grad()\n"
        "    loss = F.cross_entropy(model.forward(token_ids), labels)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    return loss.item()\n"
    )
    namespace = NOTEBOOK.namespace({"train_step": source})
    with pytest.raises(GradingError, match=r"model\.eval\(\) is left on"):
        NOTEBOOK.run("test_train_step", namespace, thorough=False)


def test_a_step_that_trains_only_from_clean_gradients_fails_with_stale_ones():
    """The model comes with gradients in .grad: a step that zeroes them at the end (right only
    when nothing ever left gradients behind) is told to zero them first."""
    source = next(v for v in BUGGY if v.name == "zero_grad_after_step").source
    namespace = NOTEBOOK.namespace({"train_step": source})
    error = NOTEBOOK.failure("test_train_step", namespace)
    assert "zero_grad() first" in str(error)


# --- (c) the classifier --------------------------------------------------------------------------


def test_classifier_is_graded_with_the_reference_pooling_and_restores_it():
    wrong_mean = "def masked_mean(h, keep):\n    return h.mean(dim=1)\n"
    namespace = NOTEBOOK.namespace({"masked_mean": wrong_mean})
    student_mean = namespace["masked_mean"]
    NOTEBOOK.autograde("test_sentiment_classifier", namespace)
    assert namespace["masked_mean"] is student_mean
    assert NOTEBOOK.grade("test_masked_mean", namespace) is not None


# --- every exercise ------------------------------------------------------------------------------


def test_silent_broadcast_along_the_features_is_named():
    """keep without its trailing axis broadcasts silently when B = 1 and L = D (hidden case)."""
    source = "def masked_mean(h, keep):\n    return (h * keep).sum(1) / keep.sum(1, keepdim=True)\n"
    namespace = NOTEBOOK.namespace({"masked_mean": source})
    message = str(NOTEBOOK.failure("test_masked_mean", namespace))
    assert "trailing axis" in message, message
