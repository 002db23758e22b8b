"""The checks of notebook 03 (layer norm, residual blocks): what is particular to them (how the
notebook and its checks fit together, forbidden built-ins, tensor subclasses, the behaviour the
notebook promises). Every answer of tests/variants, buggy, correct or
stub, is graded in test_catalogue.py.
"""

from __future__ import annotations

import pytest
from grading.notebook_namespace import (
    Check,
    SolutionNotebook,
)
from variants import Variant

from encoder_lib import grading
from encoder_lib.grading import ForbiddenCallError, GradingError

# test cell grade_id -> (answer cell grade_id, name the answer defines, check)
CHECKS = {
    "test_layer_norm": Check("answer_layer_norm", "layer_norm", grading.check_layer_norm),
    "test_layer_norm_module": Check(
        "answer_layer_norm_module", "LayerNorm", grading.check_layer_norm_module
    ),
    "test_residual_block": Check(
        "answer_residual_block", "residual_block", grading.check_residual_block
    ),
}
NOTEBOOK = SolutionNotebook("03_layer_norm", CHECKS)
BUGGY, CORRECT = NOTEBOOK.buggy, NOTEBOOK.correct
ANSWERS = NOTEBOOK.answers


def test_notebook_has_the_cells_the_variants_replace():
    assert list(ANSWERS) == [answer for answer, _, _ in CHECKS.values()]
    for answer, _, _ in CHECKS.values():
        assert "### BEGIN SOLUTION" in NOTEBOOK.source(answer)
    for test_cell in CHECKS:
        assert "grading.check_" in NOTEBOOK.source(test_cell)
    for variant in BUGGY + CORRECT:
        assert variant.cell in ANSWERS, variant.name
        assert set(variant.fails) <= set(CHECKS), variant.name


FORBIDDEN = [
    v for v in BUGGY if v.name.startswith(("calls_", "uses_", "module_calls_", "module_wraps_"))
]


@pytest.mark.parametrize("variant", FORBIDDEN, ids=[v.name for v in FORBIDDEN])
def test_forbidden_builtins_are_refused_with_a_reason(variant: Variant):
    namespace = NOTEBOOK.namespace({variant.cell: variant.source})
    (test_cell,) = variant.fails
    with pytest.raises(ForbiddenCallError) as info:
        NOTEBOOK.run(test_cell, namespace, thorough=False)
    message = str(info.value)
    assert variant.says in message
    assert "already does what this exercise asks you to write" in message


def test_forbidden_list_covers_the_spec():
    assert len(FORBIDDEN) >= 8
    said = {v.says for v in FORBIDDEN}
    assert {"F.layer_norm", "torch.layer_norm", "F.group_norm"} <= said
    assert "encoder_lib.layer_norm.LayerNorm" in said


def test_eps_inside_or_outside_is_told_apart_on_tiny_variance():
    """The message names eps outside the square root even when the default eps is used."""
    variant = next(v for v in BUGGY if v.name == "eps_outside_sqrt")
    namespace = NOTEBOOK.namespace({variant.cell: variant.source})
    with pytest.raises(GradingError, match="outside the square root"):
        grading.check_layer_norm(namespace["layer_norm"])
