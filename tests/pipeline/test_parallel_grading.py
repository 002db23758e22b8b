"""The default way to grade, ``python -m encoder_lib.autograde`` on a local Dask cluster, gives
what plain ``nbgrader autograde`` gives. The same submissions (more students than workers) are
graded in two copies of a course, once by plain nbgrader and once on a local cluster of two
workers: both gradebooks must hold exactly one submission per student and the same scores, cell
by cell. (tests/dask does the same on a scheduler with workers started by hand, and kills one.)
The whole class of conftest.py is also graded this way; its record is checked here."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from pipeline import cheats as K
from pipeline import course as C
from pipeline import roster as R

WORKERS = 2


# The notebooks that grade fastest.
PREFERRED = ("04_feed_forward", "01_self_attention")


def cheapest_assignment(present: list[str]) -> str:
    return next((a for a in PREFERRED if a in present), present[0])


@pytest.fixture(scope="module")
def two_gradings(tmp_path_factory):
    present = [a for a in C.expected_assignments() if C.source_notebook(a) is not None]
    if not present:
        pytest.skip("no assignment notebook in solutions/ yet")
    a = cheapest_assignment(present)
    layout = C.layout(C.source_notebook(a))
    plain = C.Course.create(tmp_path_factory.mktemp("plain"), [a])
    plain.generate(a)
    blank = C.read(plain.release_path(a, layout.name))
    ref = C.with_cells(blank, layout.reference)
    answers = {
        "p-ref": ref,
        "p-blank": blank,
        "p-wrong-first": C.with_cells(
            ref, {layout.answers[0]: K.zeroed(layout, layout.answers[0])}
        ),
        "p-wrong-last": C.with_cells(
            ref, {R.last_exercise(layout): K.zeroed(layout, R.last_exercise(layout))}
        ),
    }
    plain.add_students(sorted(answers))
    for student, nb in answers.items():
        plain.submit(student, a, layout.name, nb)
    local = C.Course(tmp_path_factory.mktemp("local") / "course")
    shutil.copytree(plain.root, local.root)  # same db (students, assignment), same submissions
    plain.nbgrader("autograde", a, check=False)
    proc = local.grade(a, workers=WORKERS)
    return a, layout, sorted(answers), plain, local, proc


def submission_counts(course: C.Course) -> dict[tuple[str, str], int]:
    with sqlite3.connect(course.root / "gradebook.db") as db:
        rows = db.execute(
            "SELECT assignment.name, submitted_assignment.student_id, COUNT(*) "
            "FROM submitted_assignment JOIN assignment "
            "ON submitted_assignment.assignment_id = assignment.id "
            "GROUP BY assignment.name, submitted_assignment.student_id"
        ).fetchall()
    return {(a, s): n for a, s, n in rows}


def test_local_cluster_graded_everyone_once_on_both_workers(two_gradings):
    _, _, students, _, local, proc = two_gradings
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"graded {len(students)}, flagged 0, failed 0" in proc.stdout
    ledger = local.ledger()
    assert sorted(e["student"] for e in ledger) == students  # nobody graded twice
    assert len({e["worker"] for e in ledger}) == WORKERS


def test_local_gradebook_has_one_submission_per_student(two_gradings):
    a, _, students, plain, local, _ = two_gradings
    expected = {(a, s): 1 for s in students}
    assert submission_counts(plain) == expected
    assert submission_counts(local) == expected


def test_local_scores_equal_plain_nbgrader_scores(two_gradings):
    a, layout, students, plain, local, _ = two_gradings
    by_nbgrader = {s: plain.cell_scores(s, a, layout.name) for s in students}
    on_dask = {s: local.cell_scores(s, a, layout.name) for s in students}
    assert on_dask == by_nbgrader
    assert by_nbgrader["p-ref"] == layout.tests  # and the scores are the right ones
    assert sum(by_nbgrader["p-blank"].values()) == 0


def test_the_class_was_graded_once_each_and_malformed_ones_flagged(graded):
    """conftest.py graded the whole class with the same command (the looping student first, by
    plain nbgrader): one record per submission, the two malformed notebooks flagged."""
    ledger = graded.course.ledger()
    pairs = [(e["student"], e["assignment"]) for e in ledger]
    assert len(pairs) == len(set(pairs))
    submitted = {
        (p.parent.name, p.name) for p in (graded.course.root / "submitted").glob("*/*")
    } - {(R.LOOP, graded.plan.loop)}
    assert set(pairs) == submitted
    flagged = {e["student"] for e in ledger if e["status"] == "flagged"}
    assert {R.BAD_JSON, R.NOT_NOTEBOOK} <= flagged
