"""tools/grade_parallel.py: K nbgrader processes sharing one sqlite gradebook lose and duplicate
nothing. The same submissions (more students than workers) are graded once sequentially and
once with K = 2 in two copies of a course; both gradebooks must hold exactly one submission per
student and the same scores, cell by cell."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from pipeline import cheats as K
from pipeline import course as C
from pipeline import roster as R

WORKERS = 2


# The notebook that grades fastest (bench/bench_grading.py: 3.7 s against 4.2-8.2 s).
PREFERRED = ("02_multi_head_attention", "04_feed_forward")


def cheapest_assignment(present: list[str]) -> str:
    return next((a for a in PREFERRED if a in present), present[0])


@pytest.fixture(scope="module")
def two_gradings(tmp_path_factory):
    present = [a for a in C.expected_assignments() if C.source_notebook(a) is not None]
    if not present:
        pytest.skip("no assignment notebook in solutions/ yet")
    a = cheapest_assignment(present)
    layout = C.layout(C.source_notebook(a))
    seq = C.Course.create(tmp_path_factory.mktemp("sequential"), [a])
    seq.generate(a)
    blank = C.read(seq.release_path(a, layout.name))
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
    seq.add_students(sorted(answers))
    for student, nb in answers.items():
        seq.submit(student, a, layout.name, nb)
    par = C.Course(tmp_path_factory.mktemp("parallel") / "course")
    shutil.copytree(seq.root, par.root)  # same db (students, assignment), same submissions
    seq.autograde(a, workers=1)
    log = par.autograde(a, workers=WORKERS)
    return a, layout, sorted(answers), seq, par, log


def submission_counts(course: C.Course) -> dict[tuple[str, str], int]:
    with sqlite3.connect(course.root / "gradebook.db") as db:
        rows = db.execute(
            "SELECT assignment.name, submitted_assignment.student_id, COUNT(*) "
            "FROM submitted_assignment JOIN assignment "
            "ON submitted_assignment.assignment_id = assignment.id "
            "GROUP BY assignment.name, submitted_assignment.student_id"
        ).fetchall()
    return {(a, s): n for a, s, n in rows}


def test_parallel_workers_each_graded_a_disjoint_share(two_gradings):
    a, _, students, _, par, log = two_gradings
    shares = []
    for i in range(WORKERS):
        text = (par.root / "logs" / f"autograde-{a}-worker{i}.log").read_text()
        shares.append({s for s in students if f"/submitted/{s}/{a}/" in text})
    assert all(shares), log
    assert set.union(*shares) == set(students)
    assert sum(len(s) for s in shares) == len(students)  # nobody graded twice


def test_parallel_gradebook_has_one_submission_per_student(two_gradings):
    a, _, students, seq, par, _ = two_gradings
    expected = {(a, s): 1 for s in students}
    assert submission_counts(seq) == expected
    assert submission_counts(par) == expected


def test_parallel_scores_equal_sequential_scores(two_gradings):
    a, layout, students, seq, par, _ = two_gradings
    sequential = {s: seq.cell_scores(s, a, layout.name) for s in students}
    parallel = {s: par.cell_scores(s, a, layout.name) for s in students}
    assert parallel == sequential
    assert sequential["p-ref"] == layout.tests  # and the scores are the right ones
    assert sum(sequential["p-blank"].values()) == 0
