"""Submissions that crash their kernel, loop forever, eat memory or are not notebooks: each is
flagged with its reason, nobody else suffers, and a second run leaves them alone.

One class of five graded on the two-worker cluster with a 40 s limit per submission and 1 GiB of
data memory per kernel (a torch kernel needs about 400 MB)."""

from __future__ import annotations

import pytest
from grading_cluster import gradebook_rows, row_counts, stray_kernels
from pipeline import course as C
from pipeline import roster as R

A = "04_feed_forward"
TIMEOUT, MEMORY_MB = 40, 1024

CRASH = "crash"  # ends its own kernel: os._exit(1)
LOOP = "endless"  # loops and swallows the interrupt nbgrader sends at Execute.timeout
HOG = "hog"  # asks for 3 GiB
POISON = {
    CRASH: "import os\nos._exit(1)\n",
    LOOP: (
        "import time\n"
        "while True:\n"
        "    try:\n"
        "        time.sleep(0.2)\n"
        "    except KeyboardInterrupt:\n"
        "        pass\n"
    ),
    HOG: "_hog = bytearray(3 * 2**30)\n",
}


@pytest.fixture(scope="module")
def poisoned(cluster, tmp_path_factory):
    reason = C.missing_reason(A)
    if reason:
        pytest.skip(reason)
    cluster.ensure_workers()
    course = C.Course.create(tmp_path_factory.mktemp("poisoned") / "course", [A])
    course.generate(A)
    layout = C.layout(C.source_notebook(A))
    ref = C.with_cells(C.read(course.release_path(A, layout.name)), layout.reference)
    # At the end of the first answer cell, after a correct answer (a cell of their own would
    # not run at grading); the other answers are all correct.
    first = layout.answers[0]
    for student, source in POISON.items():
        poisoned = C.with_cells(ref, {first: layout.reference[first] + "\n" + source})
        course.submit(student, A, layout.name, poisoned)
    course.submit(R.REF, A, layout.name, ref)
    course.submit(R.BAD_JSON, A, layout.name, '{"cells": [ this is not JSON')
    course.add_students([*POISON, R.REF, R.BAD_JSON])
    options = ("--timeout", str(TIMEOUT), "--memory-mb", str(MEMORY_MB))
    proc = course.grade(A, *options, scheduler=cluster.address)
    return course, layout, proc, options


def test_everyone_else_is_graded(poisoned):
    course, layout, proc, _ = poisoned
    assert "graded 1, flagged 4, failed 0" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 1  # something needs the instructor's eye
    assert course.cell_scores(R.REF, A, layout.name) == layout.tests
    assert (course.root / "autograded" / R.REF / A / f"{layout.name}.ipynb").is_file()


@pytest.mark.parametrize(
    ("student", "says"),
    [
        (CRASH, "its kernel died"),
        (LOOP, f"ran longer than the time limit of {TIMEOUT} s"),
        (HOG, f"ran out of memory (limit {MEMORY_MB} MiB)"),
        (R.BAD_JSON, "NotJSONError"),
    ],
)
def test_poisoned_submission_is_flagged_with_its_reason(poisoned, student, says):
    course, _, proc, _ = poisoned
    line = next((x for x in proc.stdout.splitlines() if x.startswith(f"  flagged {student}/")), "")
    assert says in line, proc.stdout
    entry = [e for e in course.ledger() if e["student"] == student]
    assert len(entry) == 1 and entry[0]["status"] == "flagged"
    assert any(says in r for r in entry[0]["reasons"])
    assert (course.root / "logs" / "autograde" / A / f"{student}.log").read_text()
    notebook = gradebook_rows(course)[student, A]["notebooks"]
    assert all(nb["flagged"] for nb in notebook.values())


@pytest.mark.parametrize("student", [CRASH, LOOP, R.BAD_JSON])
def test_ungradable_submission_keeps_one_unscored_row(poisoned, student):
    course, layout, _, _ = poisoned
    assert not (course.root / "autograded" / student / A).exists()
    assert (A, student) in course.submissions()
    assert course.needs_manual_grade(student, A, layout.name)
    grades = gradebook_rows(course)[student, A]["notebooks"][layout.name]["grades"]
    assert {auto for auto, _, _ in grades.values()} == {None}


def test_memory_eater_is_stopped_in_its_cell_and_the_rest_is_graded(poisoned):
    course, layout, _, _ = poisoned
    assert course.cell_scores(HOG, A, layout.name) == layout.tests
    graded = C.read(course.root / "autograded" / HOG / A / f"{layout.name}.ipynb")
    hog = next(c for c in graded.cells if C.grade_id(c) == layout.answers[0])
    assert [o.get("ename") for o in hog.outputs] == ["MemoryError"]


def test_no_kernel_outlives_its_grading(poisoned):
    assert not stray_kernels()


def test_one_row_per_student_and_a_second_run_leaves_flagged_ones_alone(poisoned, cluster):
    course, _, _, options = poisoned
    rows, counts = gradebook_rows(course, with_ids=True), row_counts(course)
    assert len(rows) == 5 and counts["submitted_assignment"] == 5
    lines = len(course.ledger())
    again = course.grade(A, *options, scheduler=cluster.address)
    assert "graded 0, flagged 0, failed 0, skipped 2 (already graded), still flagged 3" in (
        again.stdout
    ), again.stdout + again.stderr
    assert len(course.ledger()) == lines
    assert gradebook_rows(course, with_ids=True) == rows
