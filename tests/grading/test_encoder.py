"""The checks of notebook 05 (assembling the encoder) against answers written the way students
write them (tests/variants/a05_encoder.py).

Every answer runs in a namespace like the notebook's: the setup cell's imports, the solution
notebook's four answer cells in order, and the variant's cell in place of the one it replaces
(``Encoder`` uses the ``EncoderLayer`` and ``make_padding_mask`` defined before it). A buggy
answer must fail exactly the test cells it lists, with a message naming the mistake; a correct
one must pass every test cell, hidden part included, without printing or warning.
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
from encoder_lib.grading import ForbiddenCallError, GradingError

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions/05_encoder/05_encoder.ipynb"
BUGGY, CORRECT = load("05_encoder")

# test cell grade_id -> (answer cell grade_id, the name the answer defines, its check)
CHECKS = {
    "test_sinusoidal_positional_encoding": (
        "sinusoidal_positional_encoding",
        "sinusoidal_positional_encoding",
        grading.check_sinusoidal_positional_encoding,
    ),
    "test_make_padding_mask": (
        "make_padding_mask",
        "make_padding_mask",
        grading.check_make_padding_mask,
    ),
    "test_encoder_layer": ("encoder_layer", "EncoderLayer", grading.check_encoder_layer),
    "test_encoder": ("encoder", "Encoder", grading.check_encoder),
}
ANSWERS = [answer for answer, _, _ in CHECKS.values()]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The checks are tiny; one thread avoids thread contention on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _cells() -> dict[str, str]:
    """grade_id -> source of every nbgrader cell of the solution notebook."""
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    cells = {}
    for cell in notebook["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id:
            source = cell["source"]
            cells[grade_id] = source if isinstance(source, str) else "".join(source)
    return cells


CELLS = _cells()


def _stub(source: str) -> str:
    """An answer cell as `nbgrader generate_assignment` hands it to students."""
    block = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION", re.S | re.M)
    return block.sub(r"\1# YOUR CODE HERE\n\1raise NotImplementedError()", source)


def _namespace(replace: dict[str, str] | None = None) -> dict:
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


def _error(test_cell: str, namespace: dict) -> GradingError | None:
    """What the test cell raises, or None if it passes. ``thorough=True`` runs the visible cases
    first, so the message is the one the student sees when the visible part fails."""
    try:
        _run(test_cell, namespace, thorough=True)
    except GradingError as e:
        return e
    return None


# --- the notebook and the module ----------------------------------------------------------------


def test_notebook_has_the_cells_the_checks_and_variants_use():
    for test_cell, (answer, name, _) in CHECKS.items():
        assert "### BEGIN SOLUTION" in CELLS[answer]
        assert re.search(rf"^(def|class) {name}\b", CELLS[answer], re.M)
        assert f"grading.{CHECKS[test_cell][2].__name__}(" in CELLS[test_cell]
        assert "### BEGIN HIDDEN TESTS" in CELLS[test_cell]
    for variant in BUGGY + CORRECT:
        assert variant.cell in ANSWERS, variant.name
        assert set(variant.fails) <= set(CHECKS), variant.name
    names = [v.name for v in BUGGY + CORRECT]
    assert len(names) == len(set(names))


def test_public_checks_are_exported():
    expected = {check.__name__ for _, _, check in CHECKS.values()}
    assert set(grading.encoder.__all__) == expected
    for name in expected:
        assert getattr(grading, name) is getattr(grading.encoder, name)


# --- the reference solution ---------------------------------------------------------------------


def test_reference_solution_passes_silently_and_leaves_the_random_state(capsys, recwarn):
    namespace = _namespace()
    state = torch.get_rng_state()
    for test_cell in CHECKS:
        _run(test_cell, namespace, thorough=True)
    assert torch.equal(torch.get_rng_state(), state), "a check used the notebook's random state"
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert len(recwarn) == 0, [str(w.message) for w in recwarn]


@pytest.mark.parametrize("test_cell", list(CHECKS))
def test_test_cell_prints_correct_on_the_reference(test_cell, capsys):
    namespace = _namespace()
    exec(compile(CELLS[test_cell], f"<{test_cell}>", "exec"), namespace)
    captured = capsys.readouterr()
    assert captured.out.startswith("Correct:") and captured.err == ""


# --- answers as students write them -------------------------------------------------------------


@pytest.mark.parametrize("variant", BUGGY, ids=[v.name for v in BUGGY])
def test_buggy_answer_fails_its_cells_and_is_named(variant: Variant):
    assert variant.fails and variant.says
    namespace = _namespace({variant.cell: variant.source})
    own_test = f"test_{variant.cell}"
    assert own_test in variant.fails, "a buggy answer fails at least its own test cell"
    errors = {test_cell: _error(test_cell, namespace) for test_cell in CHECKS}
    for test_cell, error in errors.items():
        if test_cell in variant.fails:
            assert error is not None, f"{test_cell} accepted this answer"
        else:
            assert error is None, f"{test_cell} should keep its marks, but said: {error}"
    message = str(errors[own_test])
    assert variant.says.lower() in message.lower(), message


@pytest.mark.parametrize("variant", CORRECT, ids=[v.name for v in CORRECT])
def test_correct_answer_passes_silently(variant: Variant, capsys, recwarn):
    namespace = _namespace({variant.cell: variant.source})
    for test_cell in CHECKS:
        _run(test_cell, namespace, thorough=True)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert len(recwarn) == 0, [str(w.message) for w in recwarn]


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
    namespace = _namespace({variant.cell: variant.source})
    with pytest.raises(ForbiddenCallError) as info:
        _run(f"test_{variant.cell}", namespace, thorough=False)
    message = str(info.value)
    assert variant.says in message
    assert "already does what this exercise asks you to write" in message


def test_every_exercise_has_a_forbidden_delegation():
    assert {v.cell for v in FORBIDDEN} == set(ANSWERS)


_SNEAKY = "class Sneaky(torch.Tensor):\n    pass\n\n\n"


def _returning_subclass(answer: str) -> str:
    """The reference answer with each `return value` turned into a Tensor subclass."""
    source = re.sub(
        r"^(\s*)return (.+?)(\s*#.*)?$",
        r"\1return (\2).as_subclass(Sneaky)",
        CELLS[answer],
        flags=re.M,
    )
    return _SNEAKY + source


@pytest.mark.parametrize("test_cell", list(CHECKS))
def test_tensor_subclass_output_is_rejected(test_cell):
    answer = CHECKS[test_cell][0]
    namespace = _namespace({answer: _returning_subclass(answer)})
    with pytest.raises(GradingError, match="Tensor subclass"):
        _run(test_cell, namespace, thorough=False)


@pytest.mark.parametrize("test_cell", list(CHECKS))
def test_untouched_stub_is_not_written_yet(test_cell):
    stubs = {answer: _stub(CELLS[answer]) for answer in ANSWERS}
    for stub in stubs.values():
        assert "### BEGIN SOLUTION" not in stub and "raise NotImplementedError()" in stub
    namespace = _namespace(stubs)
    with pytest.raises(GradingError, match="is not written yet") as info:
        _run(test_cell, namespace, thorough=False)
    assert "raise NotImplementedError()" in str(info.value)


def test_rebinding_torch_is_refused():
    namespace = _namespace()
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
    namespace = _namespace({"encoder_layer": _stub(CELLS["encoder_layer"])})
    with pytest.raises(GradingError, match="not written yet"):
        _run("test_encoder_layer", namespace, thorough=False)
    _run("test_encoder", namespace, thorough=True)


def test_encoder_may_use_the_library_mask_when_stuck_on_the_mask_exercise():
    stub = _stub(CELLS["make_padding_mask"])
    with pytest.raises(GradingError, match="not written yet"):
        _run("test_encoder", _namespace({"make_padding_mask": stub}), thorough=False)
    library = next(v for v in CORRECT if v.name == "encoder_library_mask_and_unsqueeze")
    namespace = _namespace({"make_padding_mask": stub, "encoder": library.source})
    _run("test_encoder", namespace, thorough=True)
