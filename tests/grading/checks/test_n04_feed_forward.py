"""The checks of notebook 04 (the feed-forward network): what is particular to them (how the
notebook and its checks fit together, forbidden built-ins, tensor subclasses, dropout in train
mode, the behaviour the notebook promises). Every answer of tests/variants, buggy, correct or
stub, is graded in test_catalogue.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from grading.notebook_namespace import Check, SolutionNotebook, stub

from encoder_lib import grading
from encoder_lib.grading import ForbiddenCallError, GradingError, runner, vocabulary

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
GIVEN_INIT = NOTEBOOK.source("answer_feed_forward").split("    def forward")[0]


def with_forward(body: str) -> str:
    """The given FeedForward class with ``body`` (indented by 8) as forward's body."""
    return GIVEN_INIT + "    def forward(self, x):\n" + body


def failure(test_cell: str, answer: str, source: str) -> GradingError:
    return NOTEBOOK.failure(test_cell, NOTEBOOK.namespace({answer: source}))


# --- the notebook and the checks fit together ----------------------------------------------------


def test_notebook_has_the_cells_and_points_the_checks_expect():
    NOTEBOOK.assert_cells_and_points(POINTS)


def test_exercises_are_registered_under_the_test_cells():
    for test_cell, (_, name, check) in CHECKS.items():
        exercise = runner.EXERCISES[test_cell]
        assert exercise.target == name and check.__name__ == f"check_{exercise.name}"


def test_release_keeps_the_given_init():
    """The FeedForward stub still builds its layers: only forward is left to write."""
    namespace = NOTEBOOK.namespace(
        {"answer_feed_forward": stub(NOTEBOOK.source("answer_feed_forward"))}
    )
    module = namespace["FeedForward"](4, 8, activation="gelu")
    assert [name for name, _ in module.named_children()] == ["linear1", "dropout", "linear2"]
    assert module.activation is F.gelu


def test_visible_cases_try_train_mode_for_both_activations():
    """Where dropout sits shows only in train mode, and dropout before the activation only with
    GELU: the visible tests try both, so the student sees it before submitting."""
    calls = [case.call for case in runner.EXERCISES["test_feed_forward"].cases(False)]
    trained = {call.init[1]["activation"] for call in calls if call.train}
    assert trained == {"relu", "gelu"}


# --- forbidden built-ins, subclasses, global state -----------------------------------------------

_FFN_CALLING_THE_FAST_PATH = with_forward(
    """\
        D = self.linear1.in_features
        eye, zeros = torch.eye(D, dtype=x.dtype), torch.zeros(D, dtype=x.dtype)
        return torch._transformer_encoder_layer_fwd(
            x, D, 2, torch.cat([eye, eye, eye]), torch.cat([zeros, zeros, zeros]), eye, zeros,
            self.activation is F.gelu, False, 1e-5, zeros + 1, zeros, zeros + 1, zeros,
            self.linear1.weight, self.linear1.bias, self.linear2.weight, self.linear2.bias,
            None, None,
        )
"""
)
_FFN_SUBCLASSING_THE_REFERENCE = "class FeedForward(encoder_lib.FeedForward):\n    pass\n"
_FFN_WRAPPING_TORCH = with_forward(
    """\
        layer = nn.TransformerEncoderLayer(self.linear1.in_features, 1, batch_first=True)
        return layer(x)
"""
)

FORBIDDEN = {
    "torch._transformer_encoder_layer_fwd": ("answer_feed_forward", _FFN_CALLING_THE_FAST_PATH),
    "encoder_lib.feed_forward.FeedForward": ("answer_feed_forward", _FFN_SUBCLASSING_THE_REFERENCE),
    "nn.TransformerEncoderLayer": ("answer_feed_forward", _FFN_WRAPPING_TORCH),
    "F.gelu": ("answer_gelu", "def gelu(x):\n    return F.gelu(x)\n"),
    "torch.ops.aten.gelu": ("answer_gelu", "def gelu(x):\n    return torch.ops.aten.gelu(x)\n"),
    "nn.GELU": ("answer_gelu", "def gelu(x):\n    return nn.GELU()(x)\n"),
    "nn.Linear": (
        "answer_count_parameters",
        "def count_parameters(d_model, d_ff):\n"
        "    return sum(p.numel() for p in nn.Linear(d_model, d_ff).parameters()) * 2\n",
    ),
}


@pytest.mark.parametrize("builtin", FORBIDDEN)
def test_forbidden_builtin_is_refused_with_the_reason(builtin):
    answer, source = FORBIDDEN[builtin]
    test_cell = next(t for t, (a, *_) in CHECKS.items() if a == answer)
    namespace = NOTEBOOK.namespace({answer: source})
    with pytest.raises(ForbiddenCallError) as caught:
        NOTEBOOK.run(test_cell, namespace, thorough=False)
    message = str(caught.value)
    assert builtin in message
    if answer == "answer_count_parameters":
        assert "builds a module" in message and "asks for the formula" in message, message
    else:
        assert "already does what this exercise asks you to write" in message, message


def test_the_ffn_may_use_f_gelu_but_gelu_may_not():
    """F.gelu is forbidden in exercise 3 only: FeedForward's self.activation is F.gelu."""
    assert grading.check_feed_forward(NOTEBOOK.namespace()["FeedForward"]) is None
    with pytest.raises(ForbiddenCallError, match=r"F\.gelu"):
        grading.check_gelu(F.gelu)


# --- dropout in train mode -----------------------------------------------------------------------


def test_scaling_without_dropping_is_rejected():
    """Kept units scaled by 1 / (1 - p) but none dropped."""
    never_drops = with_forward(
        "        h = self.activation(self.linear1(x))\n"
        "        if self.training:\n"
        "            h = h / (1 - self.dropout.p)\n"
        "        return self.linear2(h)\n"
    )
    message = str(failure("test_feed_forward", "answer_feed_forward", never_drops))
    assert "drops 0% of the hidden units" in message, message


def test_a_mask_of_its_own_is_told_to_use_self_dropout():
    """Inverted dropout drawn by hand is right on average, but only self.dropout or F.dropout
    make the reproducible decisions the train-mode comparison needs: the answer is told so
    (the hidden units read back are dropped and rescaled as dropout does)."""
    own_mask = with_forward(
        "        h = self.activation(self.linear1(x))\n"
        "        if self.training:\n"
        "            p = self.dropout.p\n"
        "            h = h * (torch.rand_like(h) >= p) / (1 - p)\n"
        "        return self.linear2(h)\n"
    )
    message = str(failure("test_feed_forward", "answer_feed_forward", own_mask))
    assert "mask of its own" in message and "self.dropout" in message, message


def test_hand_drawn_mask_too_sparse_is_measured():
    """A hand-drawn mask at the right place and scale that drops far too much is named by the
    fraction it drops."""
    sparse = with_forward(
        "        h = self.activation(self.linear1(x))\n"
        "        if self.training:\n"
        "            p = self.dropout.p\n"
        "            keep = torch.rand_like(h) >= p\n"
        "            keep[..., ::2] = False\n"
        "            h = h * keep / (1 - p)\n"
        "        return self.linear2(h)\n"
    )
    message = str(failure("test_feed_forward", "answer_feed_forward", sparse))
    assert "of the hidden units, but dropout with p = " in message, message


def test_hand_drawn_mask_before_gelu_is_named():
    """The read-back probe itself (the ReLU case, where the order does not matter, would stop
    the check first with the mask-of-its-own message)."""
    from encoder_lib.grading.checks import n04_feed_forward as ff

    before = with_forward(
        "        z = self.linear1(x)\n"
        "        if self.training:\n"
        "            p = self.dropout.p\n"
        "            z = z * (torch.rand_like(z) >= p) / (1 - p)\n"
        "        return self.linear2(self.activation(z))\n"
    )
    ask = runner.local(NOTEBOOK.namespace({"answer_feed_forward": before}))
    assert ff._read_back(0.3, "gelu")(None, ask) == ff._BEFORE_ACTIVATION
    assert ff._read_back(0.3, "relu")(None, ask) == ff._OWN_MASK


@pytest.mark.parametrize("p", [0.1, 0.3, 0.4, 0.75])
def test_every_dropout_mistake_differs_from_the_reference(p):
    """No entry of the train-mode catalogue coincides with the right output (where it could, as
    for dropout before ReLU, the answer is right and the reference comes first)."""
    from encoder_lib.grading.checks import n04_feed_forward as ff

    weights = ff._weights(8, 12, seed=1)
    x = vocabulary.randn(3, 4, 8, seed=2)
    for act in ("relu", "gelu"):
        ffn = ff._FFN(12, p, act, weights)
        right = ffn.reference(x, train=True)
        for description, wrong in ffn.mistakes(x, train=True).items():
            same = vocabulary.close(wrong, right)
            assert same == (act == "relu" and "before the activation" in description), description


# --- count_parameters and gelu -------------------------------------------------------------------


def test_count_parameters_never_builds_a_module_for_huge_sizes():
    """The reference count is taken on the meta device: D = 12288 costs no memory."""
    assert grading.check_count_parameters(NOTEBOOK.namespace()["count_parameters"], True) is None


def test_count_parameters_explains_an_unknown_count():
    source = "def count_parameters(d_model, d_ff):\n    return d_model + d_ff\n"
    message = str(failure("test_count_parameters", "answer_count_parameters", source))
    assert "it returned 26, expected 266" in message and "Count linear1" in message, message


def test_gelu_accepts_any_shape_and_float32():
    namespace = NOTEBOOK.namespace()
    cases = list(runner.EXERCISES["test_gelu"].cases(True))
    assert {case.call.args[0].dim() for case in cases} >= {0, 1, 3}
    assert torch.float32 in {case.call.args[0].dtype for case in cases}
    assert grading.check_gelu(namespace["gelu"], thorough=True) is None
