"""An answer that hangs and ignores the interrupt costs its own exercise only.

nbgrader interrupts a cell that runs past ``Execute.timeout``. Code that ignores SIGINT keeps
the kernel busy, and nbclient then raises ``CellTimeoutError`` (no reply on IOPub); before
``JudgeExecute.recover`` that ended the autograde of the submission (nbgrader exited 1). Two
ways to hang, each through the real commands, plain ``nbgrader autograde`` and the Dask
command: the judged call of the last exercise never returns, or the answer cell of the last
exercise never finishes running. Either scores 0 on that exercise's test cells and "ran past the
time limit"; every other test cell of that student keeps its points, and the next student in
the same run is graded in full.
"""

from __future__ import annotations

import textwrap

import nbformat
import pytest

from pipeline import course as C
from pipeline import roster as R

ASSIGNMENT = "01_self_attention"
TIMEOUT = 20  # Execute.timeout (s); the repository says 60. The setup cell must fit under load.
IGNORE_SIGINT = "import signal\n\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"


def _hangs_when_called(layout: C.Layout, gid: str) -> str:
    name = layout.defines[gid]
    assert f"def {name}(" in layout.reference[gid], "the last exercise is no longer a function"
    body = textwrap.indent(IGNORE_SIGINT + "while True:\n    pass\n", "    ")
    return layout.reference[gid] + f"\n\ndef {name}(*args, **kwargs):\n{body}"


def _hangs_when_run(layout: C.Layout, gid: str) -> str:
    return layout.reference[gid] + "\n\n" + IGNORE_SIGINT + "while True:\n    pass\n"


STUDENTS = {"call-hangs": _hangs_when_called, "cell-hangs": _hangs_when_run}


def _course(tmp_path) -> tuple[C.Course, C.Layout, str]:
    reason = C.missing_reason(ASSIGNMENT)
    if reason:
        pytest.skip(reason)
    course = C.Course.create(tmp_path / "course", [ASSIGNMENT])
    course.generate(ASSIGNMENT)
    layout = C.layout(C.source_notebook(ASSIGNMENT))
    last = R.last_exercise(layout)
    ref = C.with_cells(C.read(course.release_path(ASSIGNMENT, layout.name)), layout.reference)
    for student, hang in STUDENTS.items():
        course.submit(
            student, ASSIGNMENT, layout.name, C.with_cells(ref, {last: hang(layout, last)})
        )
    course.submit("right", ASSIGNMENT, layout.name, ref)  # graded after the others
    return course, layout, last


def _check(course: C.Course, layout: C.Layout, last: str, log: str) -> None:
    zero = set(layout.own_tests[last])
    assert zero, "the last exercise has no test cell"
    for student in STUDENTS:
        scores = course.cell_scores(student, ASSIGNMENT, layout.name)
        assert scores, f"{student} was not graded:\n{log[-4000:]}"
        want = {cell: 0.0 if cell in zero else points for cell, points in layout.tests.items()}
        assert scores == want, student
        path = course.root / "autograded" / student / ASSIGNMENT / f"{layout.name}.ipynb"
        nb = nbformat.read(path, as_version=4)
        said = " ".join(
            str(out.get("evalue", ""))
            for cell in nb.cells
            if C.grade_id(cell) in zero
            for out in cell.get("outputs", [])
        )
        assert "ran past the time limit" in said and "did not stop when interrupted" in said, (
            student,
            said,
        )
    assert course.cell_scores("right", ASSIGNMENT, layout.name) == layout.tests


def test_plain_nbgrader_grades_a_class_with_answers_that_ignore_the_interrupt(tmp_path):
    course, layout, last = _course(tmp_path)
    proc = course.nbgrader("autograde", ASSIGNMENT, f"--Execute.timeout={TIMEOUT}", check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    _check(course, layout, last, log)


def test_the_dask_command_grades_a_class_with_answers_that_ignore_the_interrupt(tmp_path):
    course, layout, last = _course(tmp_path)
    log = course.autograde(ASSIGNMENT, f"--Execute.timeout={TIMEOUT}")
    _check(course, layout, last, log)
