"""The runner's generic checks are each needed: switching any one of them off (``runner.STEPS``)
makes some answer of tests/variants misjudged (a buggy answer accepted, or its mistake no longer
named). A step without a witness here fails the suite, so a new generic check comes with one."""

from __future__ import annotations

import pytest
from notebook_namespace import SolutionNotebook, returning_subclass
from test_catalogue import NOTEBOOKS, own_test_cell, run_test_cells
from variants import Variant

from encoder_lib.grading import runner

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
