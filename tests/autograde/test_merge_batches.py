"""The grading command's merge (encoder_lib/autograde/distributed.py): the results that finished
together go into the instructor's gradebook in one transaction, and a result the gradebook
refuses fails alone, leaving no folder that would make it count as graded; the batched merge
(gradebook.merge_many) writes what nbgrader's ORM, one submission after another
(gradebook.merge), writes.

A real nbgrader gradebook (sqlite, made with nbgrader's own API) and finished futures; the whole
command on a real Dask cluster is tested in tests/dask."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import Future
from datetime import UTC, datetime

import pytest
from nbgrader.api import Gradebook, MissingEntry
from sqlalchemy import event, text

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


# --- merge_many writes what merge writes ---------------------------------------------------------


def _assignment_course(path) -> str:
    """A gradebook with two assignments: "a" of two notebooks (a test cell, an answer cell, a task
    cell; a manually graded answer, which is a grade cell and a solution cell of one name) and
    "b" of one; students s1 and s2, s1 with a submission of "a" that a grader has scored by
    hand."""
    url = f"sqlite:///{path}"
    G.own_bin_first_on_path()  # nbgrader runs alembic to stamp a new gradebook
    with Gradebook(url, COURSE) as gb:
        for a, notebooks in (("a", ("nb1", "nb2")), ("b", ("nb1",))):
            gb.add_assignment(a)
            for nb in notebooks:
                gb.add_notebook(nb, a)
                gb.add_grade_cell("test_one", nb, a, max_score=2, cell_type="code")
                gb.add_solution_cell("answer", nb, a)
            gb.add_task_cell("task", notebooks[0], a, max_score=1, cell_type="markdown")
        gb.add_grade_cell("manual", "nb2", "a", max_score=3, cell_type="code")
        gb.add_solution_cell("manual", "nb2", "a")
        gb.add_student("s1", first_name="Ada")
        gb.add_student("s2")
        G.merge(gb, "a", "s1", datetime(2026, 11, 1), [_outcome("nb1", 1.0)])
        grade = gb.find_grade("manual", "nb2", "a", "s1")
        grade.manual_score = 2.5
        gb.db.commit()
    return url


def _outcome(name: str, score: float, penalty: float | None = 0.0) -> G.NotebookOutcome:
    return G.NotebookOutcome(
        name,
        penalty,
        grades={"GradeCell/test_one": (score, False), "TaskCell/task": (None, True)},
        comments={"SolutionCell/answer": f"{name}: {score}", "TaskCell/task": None},
    )


def _submissions() -> list[G.GradedSubmission]:
    """Every kind of result the grading command merges."""
    t = datetime(2026, 11, 28, 9, 30, tzinfo=UTC)
    return [
        # graded again: s1's manual score stays and needs review; nb2 has no outcome this time
        G.GradedSubmission("a", "s1", t, [_outcome("nb1", 2.0, 0.5)]),
        # a student already in the gradebook, a first submission
        G.GradedSubmission("a", "s2", t, [_outcome("nb1", 0.0), _outcome("nb2", 2.0)]),
        # a new student, flagged, an outcome for a notebook the assignment does not have
        G.GradedSubmission("a", "s3", t, [_outcome("nb2", 1.5), _outcome("ghost", 2.0)], True),
        # nothing could be graded: every cell needs a manual grade
        G.GradedSubmission("b", "s3", None, None, True),
        G.GradedSubmission("b", "s4", t, [_outcome("nb1", 2.0, None)]),
        # s2 of "a" again in the same batch, no timestamp: the later result wins, the time stays
        G.GradedSubmission("a", "s2", None, [_outcome("nb2", 0.5)]),
        # s1 of "a" once more, flagged, nothing graded
        G.GradedSubmission("a", "s1", t, None, True),
    ]


def _grade_row(g) -> tuple:
    return (G._key(g.cell), g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)


def _contents(url: str) -> dict:
    """Everything the gradebook holds about students and submissions, rows named by their
    natural keys (ids are random), and how many rows each table has."""
    with Gradebook(url, COURSE) as gb:
        students = sorted(
            (s.id, s.first_name, s.last_name, s.email, s.lms_user_id) for s in gb.students
        )
        submissions = {}
        for a in gb.assignments:
            for sub in a.submissions:
                submissions[a.name, sub.student.id] = (
                    sub.timestamp,
                    sub.extension,
                    {
                        nb.name: (
                            nb.flagged,
                            nb.late_submission_penalty,
                            sorted(map(_grade_row, nb.grades)),
                            sorted(
                                (G._key(c.cell), c.auto_comment or "", c.manual_comment or "")
                                for c in nb.comments
                            ),
                        )
                        for nb in sub.notebooks
                    },
                )
        tables = ("student", "submitted_assignment", "submitted_notebook", "grade", "comment")
        counts = {t: gb.db.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar() for t in tables}
        order = {t: gb.db.execute(text(sql)).all() for t, sql in _IN_ORDER.items()}
    return {"students": students, "submissions": submissions, "rows": counts, "order": order}


# Each table's rows by natural keys in the order they were inserted: a reader that does not sort
# (the report, nbgrader's relationships) sees them in this order.
_NOTEBOOK = (
    "submitted_notebook sn JOIN submitted_assignment sa ON sn.assignment_id = sa.id "
    "JOIN assignment a ON sa.assignment_id = a.id JOIN notebook n ON sn.notebook_id = n.id"
)
_IN_ORDER = {
    "student": "SELECT id FROM student ORDER BY rowid",
    "submitted_assignment": "SELECT a.name, sa.student_id FROM submitted_assignment sa "
    "JOIN assignment a ON sa.assignment_id = a.id ORDER BY sa.rowid",
    "submitted_notebook": f"SELECT a.name, sa.student_id, n.name FROM {_NOTEBOOK} "
    "ORDER BY sn.rowid",
    "grade": f"SELECT a.name, sa.student_id, n.name, c.type, c.name FROM grade r "
    f"JOIN base_cell c ON r.cell_id = c.id, {_NOTEBOOK} WHERE r.notebook_id = sn.id "
    "ORDER BY r.rowid",
    "comment": f"SELECT a.name, sa.student_id, n.name, c.type, c.name FROM comment r "
    f"JOIN base_cell c ON r.cell_id = c.id, {_NOTEBOOK} WHERE r.notebook_id = sn.id "
    "ORDER BY r.rowid",
}


def test_merge_many_writes_what_merge_writes_one_by_one(tmp_path):
    url = _assignment_course(tmp_path / "before.db")
    one_by_one, batched = tmp_path / "one_by_one.db", tmp_path / "batched.db"
    for path in (one_by_one, batched):
        shutil.copyfile(tmp_path / "before.db", path)
    items = _submissions()
    with Gradebook(f"sqlite:///{one_by_one}", COURSE) as gb:
        for i in items:
            G.merge(gb, i.assignment, i.student, i.timestamp, i.notebooks, i.flagged)
    with Gradebook(f"sqlite:///{batched}", COURSE) as gb:
        G.merge_many(gb, items)

    expected = _contents(f"sqlite:///{one_by_one}")
    assert _contents(f"sqlite:///{batched}") == expected
    assert expected != _contents(url)  # the merge did write something
    assert expected["rows"]["submitted_assignment"] == 5  # a: s1, s2, s3; b: s3, s4
    assert expected["submissions"]["a", "s1"][2]["nb2"][2][0][2] == 2.5  # the manual score kept


def test_a_batch_with_an_unknown_assignment_writes_nothing(tmp_path):
    url = _assignment_course(tmp_path / "gradebook.db")
    before = _contents(url)
    items = [*_submissions()[:3], G.GradedSubmission("gone", "s9", None, None)]
    with Gradebook(url, COURSE) as gb, pytest.raises(MissingEntry, match="gone"):
        G.merge_many(gb, items)
    assert _contents(url) == before
