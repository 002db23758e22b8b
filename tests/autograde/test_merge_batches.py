"""The grading command's merge (encoder_lib/autograde/distributed.py): the results that finished
together go into the instructor's gradebook in one transaction, and a result the gradebook
refuses fails alone, leaving no folder that would make it count as graded.

A real nbgrader gradebook (sqlite, made with nbgrader's own API) and finished futures; the whole
command on a real Dask cluster is tested in tests/dask."""

from __future__ import annotations

import json
from concurrent.futures import Future
from datetime import UTC, datetime

import pytest
from nbgrader.api import Gradebook
from sqlalchemy import event

from encoder_lib.autograde import distributed as D
from encoder_lib.autograde import gradebook as G
from encoder_lib.autograde import tasks as T

COURSE = "merge-test"
STUDENTS = ("s1", "s2", "s3")


@pytest.fixture
def course(tmp_path):
    (tmp_path / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.course_id = {COURSE!r}\n"
    )
    course = D.Course.open(tmp_path)
    with Gradebook(course.db_url, COURSE) as gb:
        gb.add_assignment("a")
        gb.add_notebook("nb", "a")
        gb.add_grade_cell("test_one", "nb", "a", max_score=2, cell_type="code")
        for s in STUDENTS:
            gb.add_student(s)
    return course


def finished(result) -> Future:
    future = Future()
    future.set_result(result)
    return future


def result(student: str, assignment: str = "a", score: float = 2.0) -> T.TaskResult:
    outcome = G.NotebookOutcome("nb", 0.0, grades={"GradeCell/test_one": (score, False)})
    return T.TaskResult(
        student,
        assignment,
        "digest",
        False,
        [],
        datetime(2026, 11, 28, tzinfo=UTC),
        [outcome],
        autograded=[("nb.ipynb", b"{}", 0o644)],
        worker="here:1",
    )


def scores(course) -> dict[str, float]:
    with Gradebook(course.db_url, COURSE) as gb:
        return {
            sub.student.id: sub.notebooks[0].grades[0].auto_score
            for sub in gb.assignment_submissions("a")
        }


def test_a_batch_is_merged_in_one_transaction(course):
    summary = D.Summary()
    batch = [(finished(result(s, score=i)), s, "a") for i, s in enumerate(STUDENTS)]
    with Gradebook(course.db_url, COURSE) as gb:
        commits = []
        event.listen(gb.db, "after_commit", lambda session: commits.append(1))
        D._record(course, gb, batch, summary)
    assert len(commits) == 1
    assert scores(course) == {"s1": 0.0, "s2": 1.0, "s3": 2.0}
    assert sorted(summary.graded) == [(s, "a") for s in STUDENTS]
    assert all(course.is_graded(s, "a") for s in STUDENTS)
    ledger = [json.loads(line) for line in course.ledger.read_text().splitlines()]
    assert sorted((e["student"], e["status"]) for e in ledger) == [(s, "graded") for s in STUDENTS]


def test_a_result_the_gradebook_refuses_fails_alone(course):
    """s2's result names an assignment the gradebook does not hold: the batch's transaction is
    rolled back and each result merged on its own; s1 and s3 are graded, s2 fails with the
    gradebook's reason and loses its autograded folder, even one an earlier run wrote (so the next
    run grades it again)."""
    summary = D.Summary()
    course.write_folder("autograded", "s2", "gone", [])  # as graded by an earlier run
    batch = [
        (finished(result("s1")), "s1", "a"),
        (finished(result("s2", assignment="gone")), "s2", "gone"),
        (finished(result("s3")), "s3", "a"),
    ]
    with Gradebook(course.db_url, COURSE) as gb:
        D._record(course, gb, batch, summary)
    assert scores(course) == {"s1": 2.0, "s3": 2.0}
    assert sorted(summary.graded) == [("s1", "a"), ("s3", "a")]
    assert list(summary.failed) == [("s2", "gone")]
    assert "could not record the result: MissingEntry" in summary.failed["s2", "gone"]
    assert not course.is_graded("s2", "gone")
    statuses = {
        e["student"]: e["status"] for e in map(json.loads, course.ledger.read_text().splitlines())
    }
    assert statuses == {"s1": "graded", "s2": "failed", "s3": "graded"}


def test_a_task_that_raised_fails_and_the_rest_is_merged(course):
    broken = Future()
    broken.set_exception(OSError("the worker's disk is full"))
    summary = D.Summary()
    batch = [(broken, "s1", "a"), (finished(result("s2")), "s2", "a")]
    with Gradebook(course.db_url, COURSE) as gb:
        D._record(course, gb, batch, summary)
    assert summary.failed == {("s1", "a"): "OSError: the worker's disk is full"}
    assert summary.graded == [("s2", "a")]
    assert scores(course) == {"s2": 2.0}
