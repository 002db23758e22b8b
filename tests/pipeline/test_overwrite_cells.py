"""Autograde's log warns about a changed test cell only when the student changed it.

nbgrader 0.9 reports "Attribute 'checksum' for cell test_... has changed!" for every test cell
with hidden tests, untouched or not (the gradebook's checksum includes the hidden tests, the
released cell does not). ``encoder_lib.autograde.overwrite.HiddenTestsOverwriteCells``, wired in
nbgrader_config.py, reports only the cells a student really changed. One small course, two
submissions, plain ``nbgrader autograde``.
"""

from __future__ import annotations

import re

import pytest

from pipeline import course as C

ASSIGNMENT = "01_self_attention"
CHANGED = "has changed!"


def _hidden_test_cells(assignment: str) -> list[str]:
    nb = C.read(C.source_notebook(assignment))
    return [
        C.grade_id(cell)
        for cell in nb.cells
        if C.is_test(cell) and "### BEGIN HIDDEN TESTS" in cell.source
    ]


def _log_per_student(log: str) -> dict[str, str]:
    """nbgrader's log cut at each "Sanitizing .../submitted/<student>/..." line."""
    parts = re.split(r"(?=^.*Sanitizing \S*/submitted/)", log, flags=re.MULTILINE)
    found = {}
    for part in parts:
        m = re.match(r".*Sanitizing \S*/submitted/([^/]+)/", part)
        if m:
            found[m[1]] = part
    return found


def test_checksum_warning_names_only_the_cell_a_student_changed(tmp_path):
    reason = C.missing_reason(ASSIGNMENT)
    if reason:
        pytest.skip(reason)
    hidden = _hidden_test_cells(ASSIGNMENT)
    assert len(hidden) >= 2, "the warning's cause (test cells with hidden tests) is gone"
    course = C.Course.create(tmp_path / "course", [ASSIGNMENT])
    course.generate(ASSIGNMENT)
    layout = C.layout(C.source_notebook(ASSIGNMENT))
    answered = C.with_cells(C.read(course.release_path(ASSIGNMENT, layout.name)), layout.reference)
    edited = hidden[0]
    course.submit("untouched", ASSIGNMENT, layout.name, answered)
    course.submit(
        "edited", ASSIGNMENT, layout.name, C.with_cells(answered, {edited: 'print("Correct")'})
    )

    proc = course.nbgrader("autograde", ASSIGNMENT)
    logs = _log_per_student(proc.stdout + proc.stderr)

    assert sorted(logs) == ["edited", "untouched"]
    assert CHANGED not in logs["untouched"]
    warned = re.findall(rf"for cell (\S+) {CHANGED}", logs["edited"])
    assert warned == [edited]
    assert "the student edited a locked cell" in logs["edited"]
    # Either way the gradebook's cell, hidden tests included, is what was graded.
    for student in ("untouched", "edited"):
        assert course.cell_scores(student, ASSIGNMENT, layout.name) == layout.tests
