"""The checks of notebook 05 (assembling the encoder): what is particular to them (how the
notebook and its checks fit together, forbidden built-ins, tensor subclasses, tampering,
the behaviour the notebook promises). Every answer of tests/variants, buggy, correct or
stub, is graded in test_catalogue.py.
"""

from __future__ import annotations

import re

import pytest
import torch
from notebook_namespace import (
    Check,
    SolutionNotebook,
    expect_exported,
    expect_silence,
    returning_subclass,
    stub,
)
from variants import Variant

from encoder_lib import grading
from encoder_lib.grading import ForbiddenCallError, GradingError

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


def _error(test_cell: str, namespace: dict) -> GradingError | None:
    """What the test cell raises, or None if it passes. ``thorough=True`` runs the visible cases
    first, so the message is the one the student sees when the visible part fails."""
    return NOTEBOOK.grade(test_cell, namespace, visible=False)


# --- the notebook and the module ----------------------------------------------------------------


def test_notebook_has_the_cells_the_checks_and_variants_use():
    assert list(ANSWERS) == [answer for answer, _, _ in CHECKS.values()]
    for test_cell, (answer, name, check) in CHECKS.items():
        assert "### BEGIN SOLUTION" in NOTEBOOK.source(answer)
        assert re.search(rf"^(def|class) {name}\b", NOTEBOOK.source(answer), re.M)
        assert f"grading.{check.__name__}(" in NOTEBOOK.source(test_cell)
        assert "### BEGIN HIDDEN TESTS" in NOTEBOOK.source(test_cell)
    for variant in BUGGY + CORRECT:
        assert variant.cell in ANSWERS, variant.name
        assert set(variant.fails) <= set(CHECKS), variant.name
    names = [v.name for v in BUGGY + CORRECT]
    assert len(names) == len(set(names))


def test_public_checks_are_exported():
    expect_exported(grading.encoder, {check.__name__ for _, _, check in CHECKS.values()})


# --- the reference solution ---------------------------------------------------------------------


def test_reference_solution_passes_silently_and_leaves_the_random_state(capsys, recwarn):
    namespace = NOTEBOOK.namespace()
    state = torch.get_rng_state()
    for test_cell in CHECKS:
        NOTEBOOK.run(test_cell, namespace, thorough=True)
    assert torch.equal(torch.get_rng_state(), state), "a check used the notebook's random state"
    expect_silence(capsys, recwarn)


# --- answers as students write them -------------------------------------------------------------


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


@pytest.mark.parametrize("test_cell", list(CHECKS))
def test_tensor_subclass_output_is_rejected(test_cell):
    answer = CHECKS[test_cell][0]
    namespace = NOTEBOOK.namespace({answer: returning_subclass(NOTEBOOK.source(answer))})
    with pytest.raises(GradingError, match="Tensor subclass"):
        NOTEBOOK.run(test_cell, namespace, thorough=False)


def test_rebinding_torch_is_refused():
    namespace = NOTEBOOK.namespace()
    original = torch.allclose
    torch.allclose = lambda *args, **kwargs: True
    try:
        with pytest.raises(grading.TamperingError):
            grading.check_encoder(namespace["Encoder"])
    finally:
        torch.allclose = original


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
