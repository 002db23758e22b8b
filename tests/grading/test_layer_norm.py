"""The checks of notebook 03 (layer normalisation and residual connections) against answers
written the way students write them (tests/variants/a03_layer_norm.py).

Each answer runs in a namespace like the notebook's: the setup cell's imports, then the
reference solution's answer cells (taken from the solution notebook), then the variant's cell in
place of the one it replaces. Every buggy answer must fail the test cells it names, with a
message that names the mistake, and keep full marks on the others; every correct one must pass
everything, hidden tests included, silently.
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
from encoder_lib.grading import ForbiddenCallError, GradingError, TamperingError

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions/03_layer_norm/03_layer_norm.ipynb"
BUGGY, CORRECT = load("03_layer_norm")

# test cell grade_id -> (answer cell grade_id, name the answer defines, check)
CHECKS = {
    "test_layer_norm": ("answer_layer_norm", "layer_norm", grading.check_layer_norm),
    "test_layer_norm_module": (
        "answer_layer_norm_module",
        "LayerNorm",
        grading.check_layer_norm_module,
    ),
    "test_residual_block": (
        "answer_residual_block",
        "residual_block",
        grading.check_residual_block,
    ),
}


def _cells() -> dict[str, str]:
    """grade_id -> source of every nbgrader cell of the solution notebook."""
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    found = {}
    for cell in notebook["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id:
            source = cell["source"]
            found[grade_id] = "".join(source) if isinstance(source, list) else source
    return found


CELLS = _cells()
ANSWERS = [answer for answer, _, _ in CHECKS.values()]


def _stub(source: str) -> str:
    """What nbgrader's generate_assignment leaves of an answer cell."""
    pattern = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION", re.S | re.M)
    return pattern.sub(r"\1# YOUR CODE HERE\n\1raise NotImplementedError()", source)


def _namespace(replace: dict[str, str] | None = None) -> dict:
    """The notebook's namespace after its answer cells ran, with some cells replaced."""
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
        source = (replace or {}).get(answer, CELLS[answer])
        exec(compile(source, f"<{answer}>", "exec"), namespace)
    return namespace


def _run(test_cell: str, namespace: dict, thorough: bool) -> None:
    _, name, check = CHECKS[test_cell]
    check(namespace[name], thorough=thorough)


def _failure(test_cell: str, namespace: dict) -> GradingError:
    """The error the test cell (visible part, then hidden part) raises; fails if none."""
    for thorough in (False, True):
        try:
            _run(test_cell, namespace, thorough)
        except GradingError as e:
            return e
    pytest.fail(f"{test_cell} accepted this answer")


def test_notebook_has_the_cells_the_variants_replace():
    for answer, _, _ in CHECKS.values():
        assert "### BEGIN SOLUTION" in CELLS[answer]
    for test_cell in CHECKS:
        assert "grading.check_" in CELLS[test_cell]
    for variant in BUGGY + CORRECT:
        assert variant.cell in ANSWERS, variant.name
        assert set(variant.fails) <= set(CHECKS), variant.name


def test_public_checks_are_exported():
    assert set(grading.layer_norm.__all__) == {
        "check_layer_norm",
        "check_layer_norm_module",
        "check_residual_block",
    }
    for name in grading.layer_norm.__all__:
        assert getattr(grading, name) is getattr(grading.layer_norm, name)


def test_reference_solution_passes_silently(capsys, recwarn):
    namespace = _namespace()
    state = torch.get_rng_state()
    for test_cell in CHECKS:
        _run(test_cell, namespace, thorough=False)
        _run(test_cell, namespace, thorough=True)
    assert torch.equal(torch.get_rng_state(), state), "the checks used the global random state"
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert len(recwarn) == 0, [str(w.message) for w in recwarn]


@pytest.mark.parametrize("test_cell", list(CHECKS))
def test_test_cells_run_on_the_reference(test_cell, capsys):
    namespace = _namespace()
    exec(compile(CELLS[test_cell], f"<{test_cell}>", "exec"), namespace)
    captured = capsys.readouterr()
    assert captured.out.startswith("Correct:") and captured.err == ""


@pytest.mark.parametrize("variant", BUGGY, ids=[v.name for v in BUGGY])
def test_buggy_answer_is_rejected_and_named(variant: Variant):
    namespace = _namespace({variant.cell: variant.source})
    assert variant.fails, "a buggy variant must fail some test cell"
    for test_cell in CHECKS:
        if test_cell in variant.fails:
            message = str(_failure(test_cell, namespace))
            assert variant.says.lower() in message.lower(), message
        else:
            _run(test_cell, namespace, thorough=True)  # later exercises keep their marks


@pytest.mark.parametrize("variant", CORRECT, ids=[v.name for v in CORRECT])
def test_correct_answer_is_accepted_silently(variant: Variant, capsys, recwarn):
    namespace = _namespace({variant.cell: variant.source})
    for test_cell in CHECKS:
        _run(test_cell, namespace, thorough=True)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert len(recwarn) == 0, [str(w.message) for w in recwarn]


FORBIDDEN = [
    v for v in BUGGY if v.name.startswith(("calls_", "uses_", "module_calls_", "module_wraps_"))
]


@pytest.mark.parametrize("variant", FORBIDDEN, ids=[v.name for v in FORBIDDEN])
def test_forbidden_builtins_are_refused_with_a_reason(variant: Variant):
    namespace = _namespace({variant.cell: variant.source})
    (test_cell,) = variant.fails
    with pytest.raises(ForbiddenCallError) as info:
        _run(test_cell, namespace, thorough=False)
    message = str(info.value)
    assert variant.says in message
    assert "already does what this exercise asks you to write" in message


def test_forbidden_list_covers_the_spec():
    assert len(FORBIDDEN) >= 8
    said = {v.says for v in FORBIDDEN}
    assert {"F.layer_norm", "torch.layer_norm", "F.group_norm"} <= said
    assert "encoder_lib.layer_norm.LayerNorm" in said


SUBCLASS = "class Sneaky(torch.Tensor):\n    pass\n\n"


def _subclass_source(answer: str) -> str:
    """The reference answer, but returning a Tensor subclass."""
    source = CELLS[answer]
    source = re.sub(
        r"return (.+?)(\s*#.*)?$", r"return (\1).as_subclass(Sneaky)", source, flags=re.M
    )
    return SUBCLASS + source


@pytest.mark.parametrize("test_cell", list(CHECKS))
def test_tensor_subclass_output_is_rejected(test_cell):
    answer = CHECKS[test_cell][0]
    namespace = _namespace({answer: _subclass_source(answer)})
    with pytest.raises(GradingError, match="Tensor subclass"):
        _run(test_cell, namespace, thorough=False)


@pytest.mark.parametrize("test_cell", list(CHECKS))
def test_untouched_stub_says_not_written_yet(test_cell):
    answer = CHECKS[test_cell][0]
    stub = _stub(CELLS[answer])
    assert "### BEGIN SOLUTION" not in stub and "raise NotImplementedError()" in stub
    namespace = _namespace({a: _stub(CELLS[a]) for a in ANSWERS})
    with pytest.raises(GradingError, match="is not written yet") as info:
        _run(test_cell, namespace, thorough=False)
    assert "raise NotImplementedError()" in str(info.value)


def test_eps_inside_or_outside_is_told_apart_on_tiny_variance():
    """The message names eps outside the square root even when the default eps is used."""
    variant = next(v for v in BUGGY if v.name == "eps_outside_sqrt")
    namespace = _namespace({variant.cell: variant.source})
    with pytest.raises(GradingError, match="outside the square root"):
        grading.check_layer_norm(namespace["layer_norm"])


LYING_MODE = """
from torch.overrides import TorchFunctionMode


class EverythingMatches(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.Tensor.allclose, torch.Tensor.equal):
            return True
        return func(*args, **(kwargs or {}))
"""


@pytest.fixture
def clean_mode_stack():
    yield
    while torch._C._len_torch_function_stack() > 0:
        torch._C._pop_torch_function_stack()


@pytest.mark.parametrize("when", ["in the answer cell", "during the call"])
def test_a_lying_function_mode_is_refused(when, clean_mode_stack):
    if when == "in the answer cell":
        source = CELLS["answer_layer_norm"] + LYING_MODE + "EverythingMatches().__enter__()\n"
    else:
        source = LYING_MODE + (
            "def layer_norm(x, weight, bias, eps=1e-5):\n"
            "    EverythingMatches().__enter__()\n"
            "    return torch.zeros_like(x)\n"
        )
    namespace = _namespace({"answer_layer_norm": source})
    with pytest.raises(TamperingError, match="TorchFunctionMode"):
        _run("test_layer_norm", namespace, thorough=False)
