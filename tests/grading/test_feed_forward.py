"""The checks of notebook 04 (the feed-forward network): what is particular to them (how the
notebook and its checks fit together, forbidden built-ins, tensor subclasses, tampering,
the behaviour the notebook promises). Every answer of tests/variants, buggy, correct or
stub, is graded in test_catalogue.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from notebook_namespace import Check, SolutionNotebook, expect_exported, stub

from encoder_lib import grading
from encoder_lib.grading import ForbiddenCallError, GradingError

# test cell -> (answer cell, the name the answer defines, its check)
CHECKS = {
    "test_feed_forward": Check("answer_feed_forward", "FeedForward", grading.check_feed_forward),
    "test_count_parameters": Check(
        "answer_count_parameters", "count_parameters", grading.check_count_parameters
    ),
    "test_gelu": Check("answer_gelu", "gelu", grading.check_gelu),
}
POINTS = {"test_feed_forward": 4, "test_count_parameters": 2, "test_gelu": 2}
NOTEBOOK = SolutionNotebook("04_feed_forward", CHECKS)
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
    for variant in BUGGY + CORRECT:
        assert variant.cell in ANSWERS, variant.name
        assert set(variant.fails) <= set(CHECKS), variant.name
        assert not variant.fails or variant.says, variant.name


def test_checks_are_exported_by_grading():
    expect_exported(
        grading.feed_forward, {"check_feed_forward", "check_count_parameters", "check_gelu"}
    )


# --- the untouched student version ---------------------------------------------------------------


def test_release_keeps_the_given_init():
    """The FeedForward stub still builds its layers: only forward is left to write."""
    namespace = NOTEBOOK.namespace(
        {"answer_feed_forward": stub(NOTEBOOK.source("answer_feed_forward"))}
    )
    module = namespace["FeedForward"](4, 8, activation="gelu")
    assert [name for name, _ in module.named_children()] == ["linear1", "dropout", "linear2"]
    assert module.activation is F.gelu


# --- forbidden built-ins, subclasses, global state -----------------------------------------------

_FFN_CALLING_THE_FAST_PATH = """\
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1, activation="relu"):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x):
        D, d_ff = self.linear1.in_features, self.linear1.out_features
        eye, zeros = torch.eye(D, dtype=x.dtype), torch.zeros(D, dtype=x.dtype)
        return torch._transformer_encoder_layer_fwd(
            x, D, 2, torch.cat([eye, eye, eye]), torch.cat([zeros, zeros, zeros]), eye, zeros,
            self.activation is F.gelu, False, 1e-5, zeros + 1, zeros, zeros + 1, zeros,
            self.linear1.weight, self.linear1.bias, self.linear2.weight, self.linear2.bias,
            None, None,
        )
"""

_FFN_SUBCLASSING_THE_REFERENCE = """\
class FeedForward(encoder_lib.FeedForward):
    pass
"""

FORBIDDEN = {
    "torch._transformer_encoder_layer_fwd": ("answer_feed_forward", _FFN_CALLING_THE_FAST_PATH),
    "encoder_lib.feed_forward.FeedForward": ("answer_feed_forward", _FFN_SUBCLASSING_THE_REFERENCE),
    "F.gelu": ("answer_gelu", "def gelu(x):\n    return F.gelu(x)\n"),
    "torch.ops.aten.gelu": ("answer_gelu", "def gelu(x):\n    return torch.ops.aten.gelu(x)\n"),
    "Linear": (
        "answer_count_parameters",
        "def count_parameters(d_model, d_ff):\n"
        "    return sum(p.numel() for p in nn.Linear(d_model, d_ff).parameters()) * 2\n",
    ),
}


@pytest.mark.parametrize("builtin", FORBIDDEN)
def test_forbidden_builtin_is_refused_with_the_reason(builtin):
    answer, source = FORBIDDEN[builtin]
    test_cell = next(t for t, (a, *_) in CHECKS.items() if a == answer)
    with pytest.raises(ForbiddenCallError) as caught:
        NOTEBOOK.autograde(test_cell, NOTEBOOK.namespace({answer: source}), hidden=False)
    message = str(caught.value)
    assert builtin in message
    assert "already does what this exercise asks" in message or "asks for the formula" in message, (
        message
    )


def test_tensor_subclass_output_is_rejected():
    source = """\
class Liar(torch.Tensor):
    pass

def gelu(x):
    return (0.5 * x * (1 + torch.erf(x / math.sqrt(2)))).as_subclass(Liar)
"""
    with pytest.raises(GradingError, match="Tensor subclass"):
        NOTEBOOK.autograde("test_gelu", NOTEBOOK.namespace({"answer_gelu": source}), hidden=False)


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


def test_scaling_without_dropping_is_rejected():
    """Kept units scaled by 1 / (1 - p) but none dropped: the train-mode check counts drops."""
    given_init = NOTEBOOK.source("answer_feed_forward").split("    def forward")[0]
    never_drops = given_init + (
        "    def forward(self, x):\n"
        "        h = self.activation(self.linear1(x))\n"
        "        if self.training:\n"
        "            h = h / (1 - self.dropout.p)\n"
        "        return self.linear2(h)\n"
    )
    namespace = NOTEBOOK.namespace({"answer_feed_forward": never_drops})
    message = str(NOTEBOOK.failure("test_feed_forward", namespace))
    assert "drops 0% of the hidden units" in message, message
