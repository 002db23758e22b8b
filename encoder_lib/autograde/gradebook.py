"""What crosses between the instructor's gradebook and a worker's throwaway one.

Three moves, all through nbgrader's ``Gradebook`` and its ORM classes:

- ``assignment_spec`` reads, from the instructor's gradebook, everything ``nbgrader autograde``
  needs to know about one assignment (its notebooks, graded cells, locked sources, due date) and
  writes it into a small sqlite gradebook of its own, whose bytes travel with the grading tasks
  (a worker copies it into each throwaway course: nothing to build there);
- ``read_outcome`` reads back what autograde wrote for one submission there, and ``merge`` puts it
  into the instructor's gradebook in a single transaction: the submission lands whole or not at
  all, and grading it again updates the same rows instead of adding new ones.
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
)

__all__ = [
    "AssignmentSpec",
    "NotebookOutcome",
    "assignment_data",
    "assignment_spec",
    "build_gradebook",
    "merge",
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
