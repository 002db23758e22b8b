"""The checks of notebook 05 (assembling the encoder): what is particular to them (how the
notebook and its checks fit together, forbidden built-ins, tensor subclasses, the Encoder's
scenario of recording layers, dropout in training mode, the behaviour the notebook promises).
Every answer of tests/variants, buggy, correct or stub, is graded in test_catalogue.py.
"""

from __future__ import annotations

import re

import pytest
import torch
from grading.notebook_namespace import (
    Check,
    SolutionNotebook,
    stub,
)
from variants import Variant

import encoder_lib
from encoder_lib import grading
from encoder_lib.grading import ForbiddenCallError, GradingError, runner, vocabulary, wire
from encoder_lib.grading.checks import n05_encoder
from encoder_lib.grading.kernel import observe

# test cell grade_id -> (answer cell grade_id, the name the answer defines, its check)
CHECKS = {
    "test_sinusoidal_positional_encoding": Check(
        "sinusoidal_positional_encoding",
        "sinusoidal_positional_encoding",
        grading.check_sinusoidal_positional_encoding,
    ),
    "test_make_padding_mask": Check(
        "make_padding_mask", "make_padding_mask", grading.check_make_padding_mask
    ),
    "test_encoder_layer": Check("encoder_layer", "EncoderLayer", grading.check_encoder_layer),
    "test_encoder": Check("encoder", "Encoder", grading.check_encoder),
}
NOTEBOOK = SolutionNotebook("05_encoder", CHECKS)
BUGGY, CORRECT = NOTEBOOK.buggy, NOTEBOOK.correct
ANSWERS = NOTEBOOK.answers
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- the notebook and the module ----------------------------------------------------------------


def test_notebook_has_the_cells_the_checks_and_variants_use():
    assert list(ANSWERS) == [answer for answer, _, _ in CHECKS.values()]
    for test_cell, (answer, name, check) in CHECKS.items():
        assert "### BEGIN SOLUTION" in NOTEBOOK.source(answer)
        assert re.search(rf"^(def|class) {name}\b", NOTEBOOK.source(answer), re.M)
        assert f"grading.{check.__name__}(" in NOTEBOOK.source(test_cell)
        assert "### BEGIN HIDDEN TESTS" in NOTEBOOK.source(test_cell)
        exercise = runner.EXERCISES[test_cell]
        assert (exercise.target, f"check_{exercise.name}") == (name, check.__name__)


def test_the_spec_mistakes_are_all_covered():
    names = {v.name for v in BUGGY}
    assert {
        "pe_concatenated",
        "pe_column_index_exponent",
        "encoder_pe_indexed_by_batch",
        "encoder_sequence_first_pe",
        "mask_reversed_polarity",
        "mask_shape_b_l",
        "layer_ignores_mask",
        "layer_mask_swallowed_by_kwargs",
        "encoder_ignores_mask",
        "layer_no_residual",
        "layer_always_pre_norm",
        "layer_ignores_norm_first",
        "layer_no_activation",
        "encoder_scales_twice",
        "encoder_not_scaled",
        "encoder_no_positional_encoding",
    } <= names
    assert {v.cell for v in CORRECT} == set(ANSWERS)


def test_where_dropout_sits_is_checked_in_training_mode():
    """Answers that are right in eval mode and wrong in training mode, each named."""
    names = {v.name for v in BUGGY}
    assert {
        "layer_no_dropout",
        "layer_no_dropout2",
        "layer_no_hidden_dropout",
        "layer_dropout_after_norm",
        "layer_dropout_on_attention_input",
        "layer_dropout_on_residual_sum",
        "layer_prenorm_without_dropout",
        "layer_dropout_in_eval",
        "encoder_no_dropout",
        "encoder_dropout_before_pe",
        "encoder_dropout_on_pe_only",
        "encoder_dropout_twice",
        "encoder_dropout_between_layers",
        "encoder_dropout_on_output",
        "encoder_functional_dropout_in_eval",
    } <= names
    assert {"layer_functional_dropout", "encoder_functional_dropout"} <= {v.name for v in CORRECT}
    trained = [case for case in n05_encoder._layer_cases(False) if case.call.train]
    assert {case.call.init[1]["norm_first"] for case in trained} == {False, True}
    assert any(case.call.train for case in n05_encoder._encoder_cases(False))


def test_attention_dropout_is_deterministic_on_both_paths_of_the_given_attention():
    """The given MultiHeadAttention drops attention weights itself, through F.dropout or inside
    F.scaled_dot_product_attention depending on need_weights: both are deterministic in student
    mode and agree, so a training-mode layer is comparable with the reference."""
    attention = encoder_lib.MultiHeadAttention(8, 2, dropout=0.3).double().train()
    x = vocabulary.randn(2, 5, 8, seed=1)
    mask = vocabulary.keep_first([5, 3], 5)
    with observe.student_mode("encoder_layer"):
        fused, _ = attention(x, x, x, mask, need_weights=False)
        again, _ = attention(x, x, x, mask, need_weights=False)
        explicit, _ = attention(x, x, x, mask, need_weights=True)
    with observe.student_mode("encoder_layer"):
        undropped, _ = attention.eval()(x, x, x, mask)
    assert torch.equal(fused, again)
    torch.testing.assert_close(fused, explicit, atol=1e-12, rtol=0)
    assert not torch.allclose(fused, undropped)


# --- defences -----------------------------------------------------------------------------------

FORBIDDEN = [v for v in BUGGY if v.name.startswith(("calls_", "uses_", "module_wraps_"))]


@pytest.mark.parametrize("variant", FORBIDDEN, ids=[v.name for v in FORBIDDEN])
def test_delegating_to_a_forbidden_builtin_is_refused_with_a_reason(variant: Variant):
    namespace = NOTEBOOK.namespace({variant.cell: variant.source})
    with pytest.raises(ForbiddenCallError) as info:
        NOTEBOOK.run(f"test_{variant.cell}", namespace, thorough=False)
    message = str(info.value)
    assert variant.says in message
    assert "already does what this exercise asks you to write" in message


def test_every_exercise_has_a_forbidden_delegation():
    assert {v.cell for v in FORBIDDEN} == set(ANSWERS)


# --- the Encoder's scenario: recording layers in the kernel, judging here -------------------------


ENCODER_ANSWERS = [v for v in BUGGY + CORRECT if v.cell == "encoder"]


def test_the_encoder_calls_carry_no_expected_value():
    """What enters the kernel is the inputs, the embedding weights and the layers' weights."""
    for case in n05_encoder._encoder_cases(thorough=True):
        sent = wire.decode_call(wire.encode_call(case.call))
        assert set(sent.options) == {"embedding", "layers", "shape"}
        tensors = [sent.args[0], sent.options["embedding"]]
        tensors += [t for state in sent.options["layers"] for t in state.values()]
        assert not any(t.shape == case.expected.shape for t in tensors), case.what


def test_the_scenario_records_what_each_layer_receives():
    namespace = NOTEBOOK.namespace()
    case = next(iter(n05_encoder._encoder_cases(False)))
    obs = runner.local(namespace)(case.call)
    assert obs.failure is None
    log = obs.info["log"]
    assert [entry["index"] for entry in log] == [0, 1]
    assert all(entry["keywords"] == [] for entry in log)
    ids = case.call.args[0]
    assert torch.equal(log[0]["mask"], encoder_lib.padding_mask(ids, 0))
    assert log[0]["x"].shape == (*ids.shape, 16)


# --- design choices the notebook promises --------------------------------------------------------


def test_encoder_check_does_not_depend_on_the_layer_exercise():
    """A student stuck on (c) can still earn (d): the check swaps in reference layers."""
    namespace = NOTEBOOK.namespace({"encoder_layer": stub(NOTEBOOK.source("encoder_layer"))})
    with pytest.raises(GradingError, match="not written yet"):
        NOTEBOOK.run("test_encoder_layer", namespace, thorough=False)
    NOTEBOOK.run("test_encoder", namespace, thorough=True)


def test_encoder_may_use_the_library_mask_when_stuck_on_the_mask_exercise():
    released = stub(NOTEBOOK.source("make_padding_mask"))
    namespace = NOTEBOOK.namespace({"make_padding_mask": released})
    with pytest.raises(GradingError, match="not written yet"):
        NOTEBOOK.run("test_encoder", namespace, thorough=False)
    library = next(v for v in CORRECT if v.name == "encoder_library_mask_and_unsqueeze")
    namespace = NOTEBOOK.namespace({"make_padding_mask": released, "encoder": library.source})
    NOTEBOOK.run("test_encoder", namespace, thorough=True)


def test_a_float64_table_is_as_right_as_a_float32_one():
    source = NOTEBOOK.source("sinusoidal_positional_encoding").replace("float32", "float64")
    source = source.replace(
        "torch.zeros(max_len, d_model)", "torch.zeros(max_len, d_model, dtype=torch.float64)"
    )
    namespace = NOTEBOOK.namespace({"sinusoidal_positional_encoding": source})
    assert namespace["sinusoidal_positional_encoding"](3, 4).dtype == torch.float64
    NOTEBOOK.run("test_sinusoidal_positional_encoding", namespace, thorough=True)
