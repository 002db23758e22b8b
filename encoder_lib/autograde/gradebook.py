"""What crosses between the instructor's gradebook and a worker's throwaway one.

Three moves, all through nbgrader's ``Gradebook`` and its ORM classes:

- ``assignment_spec`` reads, from the instructor's gradebook, everything ``nbgrader autograde``
  needs to know about one assignment (its notebooks, graded cells, locked sources, due date) and
  writes it into a small sqlite gradebook of its own, whose bytes travel with the grading tasks
  (a worker copies it into each throwaway course: nothing to build there);
- ``read_outcome`` reads back what autograde wrote for one submission there, and ``merge`` puts it
  into the instructor's gradebook in a single transaction: the submission lands whole or not at
  all, and grading it again updates the same rows instead of adding new ones. ``merge_many``
  writes the same rows for many submissions at once (a few bulk statements per batch instead of
  the ORM's queries and inserts per row), which is what the grading command uses; ``merge``,
  nbgrader's ORM step by step, is the reference it is tested against.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from nbgrader.api import (
    Assignment,
    Comment,
    Grade,
    Gradebook,
    GradeCell,
    MissingEntry,
    Notebook,
    SolutionCell,
    SourceCell,
    Student,
    SubmittedAssignment,
    SubmittedNotebook,
    TaskCell,
    new_uuid,
)
from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm.exc import NoResultFound

__all__ = [
    "AssignmentSpec",
    "GradedSubmission",
    "NotebookOutcome",
    "assignment_data",
    "assignment_spec",
    "build_gradebook",
    "merge",
    "merge_many",
    "own_bin_first_on_path",
    "read_outcome",
]


@dataclass(frozen=True)
class AssignmentSpec:
    """One assignment, as much of it as a worker needs to grade a submission of it."""

    name: str
    course_id: str
    config_text: str
    """The instructor's ``nbgrader_config.py``, verbatim."""
    gradebook: bytes
    """A sqlite gradebook holding this assignment only (its notebooks, graded cells, locked
    sources and due date, as in the instructor's gradebook) and no student."""
    source_files: tuple[tuple[str, bytes], ...] = ()
    """Non-notebook files of ``<source>/<assignment>/`` (autograde copies them over the
    submission's), as (relative path, content)."""
    config_overrides: tuple[str, ...] = ()
    """nbgrader settings from the command line (``--Execute.timeout=120``), applied after the
    config file."""

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for part in (self.name, self.course_id, self.config_text, *self.config_overrides):
            h.update(part.encode() + b"\0")
        h.update(hashlib.sha256(self.gradebook).digest())
        for path, content in self.source_files:
            h.update(path.encode() + b"\0" + hashlib.sha256(content).digest())
        return h.hexdigest()[:16]


@dataclass
class NotebookOutcome:
    """What autograde recorded for one submitted notebook."""

    name: str
    late_submission_penalty: float | None
    grades: dict[str, tuple[float | None, bool]] = field(default_factory=dict)
    """``"<cell type>/<cell name>"`` -> (auto_score, needs_manual_grade)."""
    comments: dict[str, str | None] = field(default_factory=dict)
    """``"<cell type>/<cell name>"`` -> auto_comment."""


def own_bin_first_on_path() -> None:
    """Put this interpreter's folder first on PATH: nbgrader runs the ``alembic`` command when
    it creates a gradebook, and a ``python3`` kernel must be this environment's Python."""
    here = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != here:
        os.environ["PATH"] = here + os.pathsep + path


def _key(cell) -> str:
    return f"{cell.type}/{cell.name}"


# --- instructor -> worker ------------------------------------------------------------------------


def assignment_data(gb: Gradebook, assignment: str) -> dict:
    """Everything ``nbgrader autograde`` reads about ``assignment`` from a gradebook, as plain
    data (MissingEntry if the assignment is not there)."""
    a = gb.find_assignment(assignment)
    notebooks = []
    for nb in sorted(a.notebooks, key=lambda n: n.name):
        notebooks.append(
            {
                "name": nb.name,
                "kernelspec": nb.kernelspec,
                "grade_cells": [(c.name, c.max_score, c.cell_type) for c in nb.grade_cells],
                "solution_cells": [c.name for c in nb.solution_cells],
                "task_cells": [(c.name, c.max_score, c.cell_type) for c in nb.task_cells],
                "source_cells": [
                    (c.name, c.cell_type, c.locked, c.source, c.checksum) for c in nb.source_cells
                ],
            }
        )
    return {"name": a.name, "duedate": a.duedate, "notebooks": notebooks}


def build_gradebook(data: dict, db_url: str, course_id: str) -> None:
    """Create, in an empty gradebook, the assignment described by ``data`` (one transaction)."""
    own_bin_first_on_path()
    with Gradebook(db_url, course_id) as gb:
        a = Assignment(name=data["name"], duedate=data["duedate"], course_id=course_id)
        for nb_data in data["notebooks"]:
            nb = Notebook(name=nb_data["name"], assignment=a, kernelspec=nb_data["kernelspec"])
            for name, points, cell_type in nb_data["grade_cells"]:
                GradeCell(name=name, max_score=points, cell_type=cell_type, notebook=nb)
            for name in nb_data["solution_cells"]:
                SolutionCell(name=name, notebook=nb)
            for name, points, cell_type in nb_data["task_cells"]:
                TaskCell(name=name, max_score=points, cell_type=cell_type, notebook=nb)
            for name, cell_type, locked, source, checksum in nb_data["source_cells"]:
                SourceCell(
                    name=name,
                    cell_type=cell_type,
                    locked=locked,
                    source=source,
                    checksum=checksum,
                    notebook=nb,
                )
        gb.db.add(a)
        gb.db.commit()


_EMPTY: dict[str, bytes] = {}


def _empty_gradebook(course_id: str) -> bytes:
    """A new gradebook's file, made once per process: nbgrader stamps every new gradebook with
    its schema version by running the ``alembic`` command, which takes seconds."""
    if course_id not in _EMPTY:
        own_bin_first_on_path()
        with tempfile.TemporaryDirectory(prefix="grade-spec-") as tmp:
            path = Path(tmp) / "gradebook.db"
            Gradebook(f"sqlite:///{path}", course_id).close()
            _EMPTY[course_id] = path.read_bytes()
    return _EMPTY[course_id]


def assignment_spec(
    gb: Gradebook,
    assignment: str,
    config_text: str,
    source_files: tuple[tuple[str, bytes], ...] = (),
    config_overrides: tuple[str, ...] = (),
) -> AssignmentSpec:
    """The spec of ``assignment``, read from an open instructor gradebook."""
    data = assignment_data(gb, assignment)
    with tempfile.TemporaryDirectory(prefix="grade-spec-") as tmp:
        path = Path(tmp) / "gradebook.db"
        path.write_bytes(_empty_gradebook(gb.course_id))
        build_gradebook(data, f"sqlite:///{path}", gb.course_id)
        template = path.read_bytes()
    return AssignmentSpec(
        assignment, gb.course_id, config_text, template, source_files, config_overrides
    )


# --- worker -> instructor ------------------------------------------------------------------------


def read_outcome(
    gb: Gradebook, assignment: str, student: str
) -> tuple[datetime | None, list[NotebookOutcome]]:
    """The submission's timestamp and what autograde recorded for each of its notebooks."""
    sub = gb.find_submission(assignment, student)
    notebooks = []
    for nb in sorted(sub.notebooks, key=lambda n: n.name):
        out = NotebookOutcome(nb.name, nb.late_submission_penalty)
        for g in nb.grades:
            out.grades[_key(g.cell)] = (g.auto_score, bool(g.needs_manual_grade))
        for c in nb.comments:
            out.comments[_key(c.cell)] = c.auto_comment
        notebooks.append(out)
    return sub.timestamp, notebooks


def _new_submission(gb: Gradebook, assignment: Assignment, student: Student):
    """A submission with one notebook, grade and comment row per cell (as nbgrader's
    ``Gradebook.add_submission`` builds it, without its commit)."""
    with gb.db.no_autoflush:
        sub = SubmittedAssignment(assignment=assignment, student=student)
        for notebook in assignment.notebooks:
            nb = SubmittedNotebook(notebook=notebook, assignment=sub)
            for cell in notebook.grade_cells:
                Grade(cell=cell, notebook=nb)
            for cell in notebook.solution_cells:
                Comment(cell=cell, notebook=nb)
            for cell in notebook.task_cells:
                Comment(cell=cell, notebook=nb)
                Grade(cell=cell, notebook=nb)
        gb.db.add(sub)
    gb.db.flush()
    return sub


def merge(
    gb: Gradebook,
    assignment: str,
    student: str,
    timestamp: datetime | None,
    notebooks: list[NotebookOutcome] | None,
    flagged: bool = False,
    commit: bool = True,
) -> None:
    """Write one graded submission into an open instructor gradebook, in one transaction
    (``commit=False``: in the caller's, which commits or rolls back).

    The student and the submission rows are created if missing, otherwise updated in place (one
    submission per student and assignment, whatever happens). Grades follow nbgrader's own
    ``SaveAutoGrades``: the auto score is replaced and a grade with a manual score keeps it and
    needs review. ``notebooks=None`` (nothing could be graded) clears the auto scores so that every
    cell needs a manual grade. ``flagged`` sets nbgrader's flag on every notebook of the
    submission, the one the formgrader shows."""
    try:
        a = gb.find_assignment(assignment)
        try:
            s = gb.find_student(student)
        except MissingEntry:
            s = Student(id=student)
            gb.db.add(s)
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            sub = _new_submission(gb, a, s)
        if timestamp is not None:
            sub.timestamp = timestamp
        outcomes = {o.name: o for o in notebooks or []}
        for nb in sub.notebooks:
            out = outcomes.get(nb.name)
            nb.flagged = flagged
            if out is not None:
                nb.late_submission_penalty = out.late_submission_penalty
            for g in nb.grades:
                auto, needs = out.grades.get(_key(g.cell), (None, True)) if out else (None, True)
                g.auto_score = auto
                g.needs_manual_grade = g.manual_score is not None or needs or auto is None
            for c in nb.comments:
                c.auto_comment = out.comments.get(_key(c.cell)) if out else None
        if commit:
            gb.db.commit()
        else:
            gb.db.flush()
    except BaseException:
        if commit:
            gb.db.rollback()
        raise


# --- many submissions at once --------------------------------------------------------------------


@dataclass(frozen=True)
class GradedSubmission:
    """One graded submission to merge: ``merge``'s arguments as one value."""

    assignment: str
    student: str
    timestamp: datetime | None
    notebooks: list[NotebookOutcome] | None
    flagged: bool = False


# Rows per "IN (...)" list: far below SQLite's limit on a statement's parameters.
_CHUNK = 500


def _chunks(values: list) -> list[list]:
    return [values[i : i + _CHUNK] for i in range(0, len(values), _CHUNK)]


def _rows(conn, column, values, *columns, also=None):
    """``columns`` of the rows whose ``column`` is in ``values`` (and that meet ``also``), a
    chunk of values per query. ``also`` names the leading column of the table's unique index
    where ``column`` is its second one (nbgrader indexes no foreign key alone): SQLite then
    looks rows up in the index instead of reading the whole table."""
    found = []
    for chunk in _chunks(sorted(set(values))):
        where = column.in_(chunk) if also is None else (column.in_(chunk) & also)
        found += conn.execute(select(*columns).where(where)).all()
    return found


def _shapes(db, names: list[str]) -> dict[str, tuple[str, dict]]:
    """assignment name -> (its id, {notebook name: (notebook id, graded cells, commented
    cells)}), each cell as (id, ``_key``), read through nbgrader's ORM: notebooks and cells
    come in the order ``_new_submission`` meets them, so rows are inserted in the same order
    (a reader that does not sort sees what it saw before)."""
    shapes = {}
    for name in names:
        try:
            a = db.query(Assignment).filter(Assignment.name == name).one()
        except NoResultFound:
            raise MissingEntry(f"No such assignment: {name}") from None
        notebooks = {}
        for nb in a.notebooks:
            graded = [(c.id, _key(c)) for c in [*nb.grade_cells, *nb.task_cells]]
            commented = [(c.id, _key(c)) for c in [*nb.solution_cells, *nb.task_cells]]
            notebooks[nb.name] = (nb.id, graded, commented)
        shapes[name] = (a.id, notebooks)
    return shapes


def _grade_values(out: NotebookOutcome | None, key: str, manual: float | None) -> dict:
    """A grade row's auto score and flag, as ``merge`` sets them."""
    auto, needs = out.grades.get(key, (None, True)) if out else (None, True)
    return {"b_auto": auto, "b_needs": manual is not None or needs or auto is None}


def _merge_unique(db, items: list[GradedSubmission]) -> None:
    """``merge_many`` for items that name each (student, assignment) once."""
    s_t, sa_t = Student.__table__, SubmittedAssignment.__table__
    sn_t, g_t, c_t = SubmittedNotebook.__table__, Grade.__table__, Comment.__table__
    shapes = _shapes(db, list(dict.fromkeys(i.assignment for i in items)))
    conn = db.connection()

    known = {r[0] for r in _rows(conn, s_t.c.id, [i.student for i in items], s_t.c.id)}
    new_students = [s for s in dict.fromkeys(i.student for i in items) if s not in known]
    if new_students:
        conn.execute(insert(s_t), [{"id": s} for s in new_students])

    wanted = {(shapes[i.assignment][0], i.student) for i in items}
    existing = {
        (a_id, s_id): sub_id
        for sub_id, a_id, s_id in _rows(
            conn,
            sa_t.c.student_id,
            [i.student for i in items],
            *sa_t.c["id", "assignment_id", "student_id"],
            also=sa_t.c.assignment_id.in_(sorted({a_id for a_id, _ in wanted})),
        )
        if (a_id, s_id) in wanted
    }

    # New submissions: every row inserted with its final values.
    subs, nbs, grades, comments = [], [], [], []
    # Submissions already there: their rows updated in place, as merge does.
    old = []
    for item in items:
        a_id, notebooks = shapes[item.assignment]
        sub_id = existing.get((a_id, item.student))
        if sub_id is not None:
            old.append((sub_id, item))
            continue
        sub_id = new_uuid()
        subs.append(
            {
                "id": sub_id,
                "assignment_id": a_id,
                "student_id": item.student,
                "timestamp": item.timestamp,
                "extension": None,
            }
        )
        outcomes = {o.name: o for o in item.notebooks or []}
        for name, (nb_id, graded, commented) in notebooks.items():
            out = outcomes.get(name)
            snb_id = new_uuid()
            nbs.append(
                {
                    "id": snb_id,
                    "assignment_id": sub_id,
                    "notebook_id": nb_id,
                    "flagged": item.flagged,
                    "late_submission_penalty": out.late_submission_penalty if out else None,
                }
            )
            for cell_id, key in graded:
                values = _grade_values(out, key, None)
                grades.append(
                    {
                        "id": new_uuid(),
                        "notebook_id": snb_id,
                        "cell_id": cell_id,
                        "auto_score": values["b_auto"],
                        "manual_score": None,
                        "extra_credit": None,
                        "needs_manual_grade": values["b_needs"],
                    }
                )
            for cell_id, key in commented:
                comments.append(
                    {
                        "id": new_uuid(),
                        "notebook_id": snb_id,
                        "cell_id": cell_id,
                        "auto_comment": out.comments.get(key) if out else None,
                        "manual_comment": None,
                    }
                )
    for table, rows in ((sa_t, subs), (sn_t, nbs), (g_t, grades), (c_t, comments)):
        if rows:
            conn.execute(insert(table), rows)
    if old:
        _update(conn, shapes, old)


def _update(conn, shapes: dict, old: list[tuple[str, GradedSubmission]]) -> None:
    """Rewrite the rows of submissions already in the gradebook, as ``merge`` does: the rows
    there, and only those, get the new auto scores, comments, flag and penalty; a manual score
    stays and makes its grade need review; a missing timestamp keeps the old one."""
    sa_t, sn_t = SubmittedAssignment.__table__, SubmittedNotebook.__table__
    g_t, c_t = Grade.__table__, Comment.__table__
    by_sub = dict(old)
    notebook_name, cell_key = {}, {}
    for _, notebooks in shapes.values():
        for name, (nb_id, graded, commented) in notebooks.items():
            notebook_name[nb_id] = name
            cell_key.update([*graded, *commented])

    stamps = [{"b_id": s, "b_time": i.timestamp} for s, i in old if i.timestamp is not None]
    if stamps:
        conn.execute(
            update(sa_t)
            .where(sa_t.c.id == bindparam("b_id"))
            .values(timestamp=bindparam("b_time")),
            stamps,
        )
    outcome = {}  # submitted notebook id -> its NotebookOutcome (or None)
    flags, penalties = [], []
    for snb_id, sub_id, nb_id in _rows(
        conn,
        sn_t.c.assignment_id,
        by_sub,
        *sn_t.c["id", "assignment_id", "notebook_id"],
        also=sn_t.c.notebook_id.in_(list(notebook_name)),
    ):
        item = by_sub[sub_id]
        out = next((o for o in item.notebooks or [] if o.name == notebook_name.get(nb_id)), None)
        outcome[snb_id] = out
        flags.append({"b_id": snb_id, "b_flag": item.flagged})
        if out is not None:
            penalties.append({"b_id": snb_id, "b_pen": out.late_submission_penalty})
    by_id = sn_t.c.id == bindparam("b_id")
    if flags:
        conn.execute(update(sn_t).where(by_id).values(flagged=bindparam("b_flag")), flags)
    if penalties:
        conn.execute(
            update(sn_t).where(by_id).values(late_submission_penalty=bindparam("b_pen")), penalties
        )
    grades = [
        {"b_id": g_id, **_grade_values(outcome[snb_id], cell_key.get(cell_id), manual)}
        for g_id, snb_id, cell_id, manual in _rows(
            conn,
            g_t.c.notebook_id,
            outcome,
            *g_t.c["id", "notebook_id", "cell_id", "manual_score"],
            also=g_t.c.cell_id.in_(list(cell_key)),
        )
    ]
    if grades:
        conn.execute(
            update(g_t)
            .where(g_t.c.id == bindparam("b_id"))
            .values(auto_score=bindparam("b_auto"), needs_manual_grade=bindparam("b_needs")),
            grades,
        )
    comments = []
    for c_id, snb_id, cell_id in _rows(
        conn,
        c_t.c.notebook_id,
        outcome,
        *c_t.c["id", "notebook_id", "cell_id"],
        also=c_t.c.cell_id.in_(list(cell_key)),
    ):
        out = outcome[snb_id]
        comments.append(
            {"b_id": c_id, "b_text": out.comments.get(cell_key.get(cell_id)) if out else None}
        )
    if comments:
        conn.execute(
            update(c_t)
            .where(c_t.c.id == bindparam("b_id"))
            .values(auto_comment=bindparam("b_text")),
            comments,
        )


def merge_many(gb: Gradebook, items: list[GradedSubmission], commit: bool = True) -> None:
    """``merge`` for every item, in one transaction (``commit=False``: in the caller's), with a
    few bulk statements per batch rather than the ORM's statements per row: the rows written are
    the ones ``merge`` writes, item after item (tests/autograde/test_merge_batches.py compares
    the two gradebooks). If one item cannot be merged (an assignment the gradebook does not
    hold: ``MissingEntry``), nothing of the batch is; the caller merges the items alone then."""
    parts: list[list[GradedSubmission]] = [[]]
    seen: set[tuple[str, str]] = set()
    for item in items:  # a submission named twice: the later one is merged after the earlier
        if (item.assignment, item.student) in seen:
            parts.append([])
            seen.clear()
        seen.add((item.assignment, item.student))
        parts[-1].append(item)
    try:
        for part in parts:
            if part:
                _merge_unique(gb.db, part)
        if commit:
            gb.db.commit()
    except BaseException:
        if commit:
            gb.db.rollback()
        raise
