"""The student versions are what nbgrader makes from the solutions, and the solutions are
committed executed.

That the solutions pass every test and the untouched student versions fail every one is proved
through the real ``nbgrader autograde`` of a class, for every notebook, in
tests/pipeline/test_grading_pipeline.py (``test_reference_answers_get_full_marks`` and
``test_untouched_notebook_scores_zero_without_crashing``). Until 2026-11-29 this file also ran ``nbgrader validate`` on each solution and
each student version: 22 executions of whole notebooks (47 s for notebook 10 alone) that proved
the same things more weakly (no gradebook, no hidden tests' points)."""

from __future__ import annotations

import re

import nbformat
import pytest
import variants

from tools.build_course import RELEASE, SOLUTIONS, assignments, stale

ASSIGNMENTS = assignments()
EXPECTED = list(variants.ASSIGNMENTS)


def _notebooks(folder, name):
    return sorted((folder / name).glob("*.ipynb"))


def _graded_ids(path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [
        c.metadata["nbgrader"]["grade_id"]
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"
    ]


def test_the_assignments_exist_in_course_order():
    assert ASSIGNMENTS == EXPECTED
    for name in ASSIGNMENTS:
        assert [p.name for p in _notebooks(SOLUTIONS, name)] == [f"{name}.ipynb"]


def test_student_versions_are_generated_from_the_solutions():
    assert stale() == []


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_solution_is_committed_executed_on_python3(name):
    for path in _notebooks(SOLUTIONS, name):
        nb = nbformat.read(path, as_version=4)
        assert nb.metadata["kernelspec"]["name"] == "python3"
        code = [c for c in nb.cells if c.cell_type == "code"]
        unexecuted = [c.get("id") for c in code if c.execution_count is None]
        assert unexecuted == [], f"{path.name}: cells never executed, so nbval skips them"
        counts = [c.execution_count for c in code]
        assert counts == list(range(1, len(code) + 1)), f"{path.name}: not run top to bottom"
        errors = [c.get("id") for c in code for o in c.outputs if o.output_type == "error"]
        assert errors == []


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_solution_and_student_version_have_graded_tests(name):
    for folder in (SOLUTIONS, RELEASE):
        for path in _notebooks(folder, name):
            assert len(_graded_ids(path)) >= 2, path


_BLOCK = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.S)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_no_solution_code_or_hidden_test_reaches_students(name):
    source = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4)
    release = nbformat.read(RELEASE / name / f"{name}.ipynb", as_version=4)
    released_text = "\n".join(c.source for c in release.cells)
    assert "### BEGIN" not in released_text and "### END" not in released_text
    secrets = [
        line.strip()
        for cell in source.cells
        for _, block in _BLOCK.findall(cell.source)
        for line in block.splitlines()
        if len(line.strip()) > 12  # short lines such as `return out` may be given elsewhere
    ]
    assert secrets, "the source notebook has no solution or hidden-test blocks"
    student_lines = {line.strip() for line in released_text.splitlines()}
    leaked = [s for s in secrets if s in student_lines and s not in _given_lines(source)]
    assert leaked == []
    for cell in release.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def _given_lines(nb) -> set[str]:
    """Lines that also appear outside the solution and hidden-test blocks (given code)."""
    outside = (_BLOCK.sub("", c.source) for c in nb.cells)
    return {line.strip() for text in outside for line in text.splitlines()}


def test_headline_example_output_is_committed():
    nb = nbformat.read(SOLUTIONS / "05_encoder" / "05_encoder.ipynb", as_version=4)
    texts = [
        o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    ]
    assert any("torch.Size([1, 256, 512])" in t for t in texts)
