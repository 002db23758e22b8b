"""A namespace like a solution notebook's, shared by the grader tests of tests/grading.

Each test file builds a ``SolutionNotebook`` for its assignment: the nbgrader cells of
``solutions/NN_topic/NN_topic.ipynb`` (the single source of truth, read once), its answer cells
in notebook order, and the answers of ``tests/variants/aNN_topic.py``. ``namespace`` executes the
setup cell's imports, then every answer cell, with some replaced by a variant or a stub, the way
the notebook runs them; ``grade`` runs a test cell's checks on the result the way nbgrader
scores it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from variants import ASSIGNMENTS, Variant, load

import encoder_lib
from encoder_lib import grading
from encoder_lib.grading import GradingError, runner, vocabulary, wire
from encoder_lib.grading.kernel import observe

ROOT = Path(__file__).resolve().parents[2]

SNEAKY_RETURNS = """\
class Sneaky(torch.Tensor):
    pass


_SNEAK_AT = None
_SNEAKED = []


def _sneaky(value):
    if isinstance(value, torch.Tensor):
        _SNEAKED.append("tensor")
        return value.as_subclass(Sneaky)
    if isinstance(value, tuple):
        _SNEAKED.append(tuple(isinstance(v, torch.Tensor) for v in value))
        return tuple(
            v.as_subclass(Sneaky) if isinstance(v, torch.Tensor) and _SNEAK_AT in (None, i) else v
            for i, v in enumerate(value)
        )
    _SNEAKED.append(type(value).__name__)
    return value


"""
"""Put in front of an answer by ``returning_subclass``: ``Sneaky``, a Tensor subclass (which could
lie in ``__torch_function__``), and ``_sneaky(value)``, which returns the tensors ``value`` holds
(itself, or the items of a tuple: only item ``_SNEAK_AT`` unless that global is None) as
``Sneaky`` and keeps in the global list ``_SNEAKED`` what each value held."""


class Check(NamedTuple):
    """What a test cell grades: its answer cell, the name that cell defines, and the check."""

    answer: str
    name: str
    check: Callable[..., None]


def setup_namespace(with_jax: bool = False, with_text: bool = False) -> dict[str, Any]:
    """The globals after the setup cell: its imports, in a module named ``__main__`` as in a
    kernel; ``with_jax`` adds notebook 10's (``jax``, ``jnp``, ``nnx``, ``jax_bridge``),
    ``with_text`` notebook 11's (``unicodedata``, ``split_words``)."""
    namespace = {
        "__name__": "__main__",
        "math": math,
        "torch": torch,
        "F": F,
        "nn": nn,
        "encoder_lib": encoder_lib,
        "grading": grading,
    }
    if with_jax:
        import jax
        import jax.numpy as jnp
        from flax import nnx

        from encoder_lib import jax_bridge

        namespace |= {"jax": jax, "jnp": jnp, "nnx": nnx, "jax_bridge": jax_bridge}
    if with_text:
        import unicodedata

        from encoder_lib.wordpiece import split_words

        namespace |= {"unicodedata": unicodedata, "split_words": split_words}
    return namespace


def stub(source: str) -> str:
    """An answer cell as nbgrader's generate_assignment releases it: the solution region replaced
    by the code stub, at the region's indentation."""
    pattern = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION", re.S | re.M)
    stubbed = pattern.sub(r"\1# YOUR CODE HERE\n\1raise NotImplementedError()", source)
    assert stubbed != source, "the cell has no solution region"
    return stubbed


def returning_subclass(source: str) -> str:
    """``source`` with every ``return X`` turned into ``return _sneaky((X))``, after
    ``SNEAKY_RETURNS``."""
    pattern = r"^(\s*)return (.+?)(\s*#.*)?$"
    return SNEAKY_RETURNS + re.sub(pattern, r"\1return _sneaky((\2))", source, flags=re.M)


class SolutionNotebook:
    """The nbgrader cells of one assignment's solution notebook and its answer variants."""

    def __init__(self, assignment: str, checks: Mapping[str, Check] | None = None):
        self.path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
        self.checks: dict[str, Check] = dict(checks or {})
        """test cell grade_id -> ``Check``."""
        self.cells: dict[str, dict[str, Any]] = {}
        """grade_id -> the cell (its metadata, and its source as one string)."""
        for cell in json.loads(self.path.read_text(encoding="utf-8"))["cells"]:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if grade_id:
                source = cell["source"]
                self.cells[grade_id] = {
                    **cell,
                    "source": source if isinstance(source, str) else "".join(source),
                }
        self.answers: dict[str, str] = {
            gid: cell["source"]
            for gid, cell in self.cells.items()
            if cell["metadata"]["nbgrader"].get("solution") and cell["cell_type"] == "code"
        }
        """answer cell grade_id -> source, in notebook order."""
        self.tests: dict[str, str] = {
            gid: cell["source"]
            for gid, cell in self.cells.items()
            if cell["metadata"]["nbgrader"].get("grade")
            and not cell["metadata"]["nbgrader"].get("solution")
        }
        """test cell grade_id -> source, in notebook order."""
        self.buggy: list[Variant]
        self.correct: list[Variant]
        self.buggy, self.correct = load(assignment)

    def source(self, grade_id: str) -> str:
        return self.cells[grade_id]["source"]

    def assert_cells_and_points(self, points: Mapping[str, int]) -> None:
        """One answer cell per check, in order, with the solution markers; each test cell
        locked, worth ``points[test cell]``, calling its check visibly and thoroughly on the
        answer's name, and registered as the exercise of that name."""
        from encoder_lib.grading import runner

        assert list(self.answers) == [answer for answer, _, _ in self.checks.values()]
        for test_cell, (answer, name, check) in self.checks.items():
            assert "### BEGIN SOLUTION" in self.source(answer)
            meta = self.cells[test_cell]["metadata"]["nbgrader"]
            assert meta["grade"] and meta["locked"] and meta["points"] == points[test_cell]
            source = self.source(test_cell)
            assert f"grading.{check.__name__}({name})" in source
            assert f"grading.{check.__name__}({name}, thorough=True)" in source
            assert runner.EXERCISES[test_cell].target == name

    def namespace(self, replace: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The notebook's globals once its answer cells have run, those in ``replace`` (answer
        grade_id -> source) replaced."""
        setup = self.source("setup")
        namespace = setup_namespace(
            with_jax="import jax" in setup, with_text="import split_words" in setup
        )
        for grade_id, source in self.answers.items():
            self.execute(grade_id, namespace, (replace or {}).get(grade_id, source))
        return namespace

    def execute(self, grade_id: str, namespace: dict[str, Any], source: str | None = None) -> None:
        """Run cell ``grade_id`` (or ``source`` in its place) in ``namespace``."""
        code = self.source(grade_id) if source is None else source
        exec(compile(code, f"<cell {grade_id}>", "exec"), namespace)

    def run(self, test_cell: str, namespace: dict[str, Any], thorough: bool) -> None:
        """One part of a test cell: its check on the answer, visible (``thorough=False``) or
        hidden (``thorough=True``)."""
        _, name, check = self.checks[test_cell]
        check(namespace[name], thorough=thorough)

    def autograde(
        self, test_cell: str, namespace: dict[str, Any], visible: bool = True, hidden: bool = True
    ) -> None:
        """What the test cell does when nbgrader autogrades it: the check's visible part, then
        its hidden part; a ``GradingError`` (which scores the cell 0) propagates."""
        if visible:
            self.run(test_cell, namespace, thorough=False)
        if hidden:
            self.run(test_cell, namespace, thorough=True)

    def grade(
        self, test_cell: str, namespace: dict[str, Any], visible: bool = True, hidden: bool = True
    ) -> GradingError | None:
        """The ``GradingError`` that scores the test cell 0 (``autograde``), or None when it
        keeps its points."""
        try:
            self.autograde(test_cell, namespace, visible, hidden)
        except GradingError as e:
            return e
        return None

    def failure(self, test_cell: str, namespace: dict[str, Any]) -> GradingError:
        """The ``GradingError`` that scores the test cell 0; the test fails if there is none."""
        error = self.grade(test_cell, namespace)
        if error is None:
            pytest.fail(f"{test_cell} accepted this answer")
        return error


def expect_silence(capsys: Any, recwarn: Any) -> None:
    """Nothing printed (nbgrader scores any stderr output 0) and nothing warned."""
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "", captured
    assert len(recwarn) == 0, [str(w.message) for w in recwarn]


def expect_exported(module: Any, names: set[str]) -> None:
    """``module.__all__`` is ``names``, and ``encoder_lib.grading`` exports each of them."""
    assert set(module.__all__) == names
    for name in names:
        assert getattr(grading, name) is getattr(module, name)


def through_the_wire(objects: Mapping[str, Any]) -> vocabulary.Ask:
    """An ``Ask`` that sends each call and its observation through ``wire``, as the autograder
    does with the student's kernel: every call of a check must survive the trip."""

    def ask(call: observe.Call) -> observe.Observation:
        sent = wire.decode_call(wire.encode_call(call))
        seen = observe.observe(objects.__getitem__, sent)
        return wire.decode_observation(wire.encode_observation(seen))

    return ask


def verdicts_here_and_wired(namespace: Mapping[str, Any], test_cell: str) -> list[str | None]:
    """The thorough verdict of ``test_cell``'s exercise on ``namespace`` (None: passed, else the
    error's text), asked in this process and then through the wire."""
    exercise = runner.EXERCISES[test_cell]
    verdicts: list[str | None] = []
    for ask in (runner.local(namespace), through_the_wire(namespace)):
        try:
            runner.run(exercise, ask, thorough=True)
            verdicts.append(None)
        except GradingError as error:
            verdicts.append(str(error))
    return verdicts


# --- grading a notebook's test cells, as nbgrader does (test_catalogue and its neighbours) ----

NOTEBOOKS: dict[str, SolutionNotebook] = {a: SolutionNotebook(a) for a in ASSIGNMENTS}
"""Every solution notebook of tests/variants, read once."""


def own_test_cell(notebook: SolutionNotebook, answer: str) -> str:
    """The test cell that grades ``answer``: the first one after it in the notebook."""
    return cells_below(notebook, answer)[0]


def cells_below(notebook: SolutionNotebook, answer: str) -> list[str]:
    """The test cells below ``answer`` in the notebook: the only ones its source can change. At
    autograde, as in Run All, cells run in order, so a test cell above an answer has given its
    verdict before the answer exists (the reference's verdict, which
    test_reference_solution_keeps_every_point_silently proves is full points)."""
    order = list(notebook.cells)
    return [t for t in order[order.index(answer) :] if t in notebook.tests]


def run_test_cells(
    notebook: SolutionNotebook, replace: dict[str, str], test_cells: list[str] | None = None
) -> dict[str, GradingError | None]:
    """Each of ``test_cells``' ``GradingError`` (which scores it 0), or None when it keeps its
    points, with the answer cells in ``replace`` (grade_id -> source) replaced. By default the
    test cells below the first replaced answer (``cells_below``)."""
    if test_cells is None:
        first = next(answer for answer in notebook.answers if answer in replace)
        test_cells = cells_below(notebook, first)
    return grade_test_cells(notebook, notebook.namespace(replace), test_cells)


def grade_test_cells(
    notebook: SolutionNotebook, namespace: dict, test_cells: list[str] | None = None
) -> dict[str, GradingError | None]:
    """``run_test_cells`` in a namespace already built (default: every test cell)."""
    errors: dict[str, GradingError | None] = {}
    for test_cell in notebook.tests if test_cells is None else test_cells:
        try:
            notebook.execute(test_cell, namespace)
            errors[test_cell] = None
        except GradingError as e:
            errors[test_cell] = e
    return errors
