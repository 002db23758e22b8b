"""The report's data: one row per student and test cell, read from the gradebook and the
records autograde kept, and what happened at each test cell, every mistake counted once at the
exercise where it lives (its root). ``page.py`` shows it; nothing here writes HTML.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from encoder_lib.autograde import records
from encoder_lib.grading import runner

__all__ = [
    "CSV_COLUMNS",
    "Problems",
    "Report",
    "ReportError",
    "Row",
    "Tally",
    "TestCellSummary",
    "build",
    "office_hours",
    "ranked",
    "summarize",
]

CSV_COLUMNS = (
    "assignment",
    "student_id",
    "notebook",
    "test_cell",
    "exercise",
    "points",
    "score",
    "status",
    "mistake_id",
    "counted_at",
    "counted_at_exercise",
    "message",
)
"""One CSV row per student and test cell (docs/INSTRUCTORS.md, "6. Which mistakes did the class
make")."""


class ReportError(Exception):
    """Nothing can be reported; the message is one line."""


# --- the rows: one per student and test cell ------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One student's verdict on one test cell, with the points the gradebook gave."""

    assignment: str
    student: str
    notebook: str
    test_cell: str
    exercise: str
    """The exercise's title, e.g. ``"Exercise 1 · attention_scores"``."""
    points: float
    score: float
    passed: bool
    mistake: str | None
    counted_at: str
    """The test cell of the exercise the mistake is counted at: its root, else this one."""
    counted_at_exercise: str
    message: str | None

    @property
    def status(self) -> str:
        """``correct``, ``named`` (a mistake id that names the mistake) or ``unexplained``."""
        if self.passed:
            return "correct"
        if self.mistake is None or self.mistake in runner.UNEXPLAINED:
            return "unexplained"
        return "named"

    @property
    def cascade(self) -> bool:
        return self.counted_at != self.test_cell

    @property
    def lost(self) -> float:
        return max(0.0, self.points - self.score)

    def csv(self) -> dict[str, str]:
        return {
            "assignment": self.assignment,
            "student_id": self.student,
            "notebook": self.notebook,
            "test_cell": self.test_cell,
            "exercise": self.exercise,
            "points": f"{self.points:g}",
            "score": f"{self.score:g}",
            "status": self.status,
            "mistake_id": self.mistake or "",
            "counted_at": "" if self.passed else self.counted_at,
            "counted_at_exercise": "" if self.passed else self.counted_at_exercise,
            "message": self.message or "",
        }


@dataclass
class Problems:
    """Submissions left out of the report, by assignment and reason."""

    missing: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Assignment -> students whose autograded notebooks hold no records."""
    malformed: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Assignment -> one line per student: where and what."""
    ungraded: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Assignment -> students with a submission but no autograded notebook (flagged by
    autograde: a malformed notebook, a crash)."""

    def lines(self, graded: Counter) -> list[str]:
        """One line per assignment and kind of problem, saying what to do."""
        out = []
        for a, students in sorted(self.missing.items()):
            again = (
                f"nbgrader autograde {a} --force (or python -m encoder_lib.autograde {a} --force)"
            )
            out.append(
                f"{a}: {len(students)} of {graded[a] + len(students)} graded submissions have no "
                f"mistake records ({_some(students)}): they were graded before records existed "
                f"or without this course's nbgrader_config.py; to include them, grade them "
                f"again: {again}"
            )
        for a, found in sorted(self.malformed.items()):
            out.append(
                f"{a}: {len(found)} submissions have malformed mistake records, left out (first: "
                f"{found[0]}); grade them again with nbgrader autograde {a} --force"
            )
        for a, students in sorted(self.ungraded.items()):
            out.append(
                f"{a}: {len(students)} submissions have no autograded notebook "
                f"({_some(students)}): autograde could not grade them (see its log)"
            )
        return out

    def __bool__(self) -> bool:
        return bool(self.missing or self.malformed or self.ungraded)


def _some(names: list[str], n: int = 3) -> str:
    shown = ", ".join(sorted(names)[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


@dataclass
class Report:
    """The rows of a report and what was left out."""

    course: str
    assignments: list[str]
    rows: list[Row]
    problems: Problems
    submissions: Counter
    """Assignment -> submissions whose verdicts are in the rows."""
    order: dict[str, list[str]]
    """Assignment -> its test cells in notebook order."""
    built: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))


def build(course_dir: Path, assignments: list[str], student: str = "*") -> Report:
    """Read the gradebook and the records of ``assignments`` (names or globs); ``student`` (a
    glob) picks students. ``ReportError`` when nothing can be read."""
    from nbgrader.api import Gradebook

    course = _open(course_dir)
    db = course.db_url
    if db.startswith("sqlite:///"):
        path = Path(db.removeprefix("sqlite:///").split("?")[0])
        if not path.is_file():
            raise ReportError(f"no gradebook at {path}: run autograde first")
    rows: list[Row] = []
    problems = Problems()
    submissions: Counter = Counter()
    order: dict[str, list[str]] = {}
    with Gradebook(db, course.course_id) as gb:
        known = sorted(a.name for a in gb.assignments)
        chosen = sorted({a for pattern in assignments for a in fnmatch.filter(known, pattern)})
        unknown = [p for p in assignments if not fnmatch.filter(known, p)]
        if unknown:
            raise ReportError(
                f"no assignment {', '.join(map(repr, unknown))} in the gradebook (it has: "
                f"{', '.join(known) or 'none'})"
            )
        for a in chosen:
            order[a] = _test_cells(gb, a)
            for sub in sorted(gb.assignment_submissions(a), key=lambda s: s.student.id):
                if not fnmatch.fnmatchcase(sub.student.id, student):
                    continue
                found = _submission_rows(course, a, sub, problems)
                if found is not None:
                    rows += found
                    submissions[a] += 1
    if not rows:
        lines = problems.lines(submissions) or [f"no graded submission of {', '.join(chosen)}"]
        raise ReportError("nothing to report: " + " | ".join(lines))
    return Report(course.course_id, chosen, rows, problems, submissions, order)


def _open(course_dir: Path):
    from encoder_lib.autograde.distributed import Course

    try:
        return Course.open(course_dir)
    except SystemExit as error:  # Course.open's one-line reason
        raise ReportError(str(error)) from None


def _test_cells(gb, assignment: str) -> list[str]:
    """The assignment's test cells (graded code cells), notebook by notebook, in order."""
    cells = []
    for nb in sorted(gb.find_assignment(assignment).notebooks, key=lambda n: n.name):
        source = [c for c in nb.source_cells if c.cell_type == "code"]
        graded = {c.name for c in nb.grade_cells if c.cell_type == "code"}
        cells += [c.name for c in source if c.name in graded]
        cells += sorted(graded - {c.name for c in source})
    return cells


def _submission_rows(course, assignment: str, sub, problems: Problems) -> list[Row] | None:
    """The rows of one submission, or None (and the reason in ``problems``)."""
    student = sub.student.id
    folder = course.path("autograded", student, assignment)
    rows: list[Row] = []
    for nb in sorted(sub.notebooks, key=lambda n: n.name):
        path = folder / f"{nb.name}.ipynb"
        if not path.is_file():
            problems.ungraded[assignment].append(student)
            return None
        try:
            verdicts = dict(records.read_notebook(path))
        except records.RecordError as error:
            problems.malformed[assignment].append(str(error))
            return None
        if verdicts and all(v is None for v in verdicts.values()):
            problems.missing[assignment].append(student)
            return None
        for grade in nb.grades:
            cell = grade.cell
            if cell.type != "GradeCell" or cell.cell_type != "code":
                continue
            verdict = verdicts.get(grade.name)
            if verdict is None:  # the cell was deleted and not put back: it earned nothing
                verdict = records.Verdict(
                    grade.name,
                    grade.name,
                    passed=False,
                    message="the test cell is missing from the submission",
                )
            root = verdict.root or grade.name
            rows.append(
                Row(
                    assignment,
                    student,
                    nb.name,
                    grade.name,
                    verdict.title,
                    float(grade.max_score or 0.0),
                    float(grade.score or 0.0),
                    verdict.passed,
                    None if verdict.passed else verdict.mistake,
                    root,
                    verdict.root_title or verdict.title,
                    verdict.message,
                )
            )
    return rows


# --- counting -------------------------------------------------------------------------------------


@dataclass
class Tally:
    """One named mistake at one exercise (or one group of failures nothing named): who, and the
    words they read."""

    id: str
    students: set[str] = field(default_factory=set)
    wordings: Counter = field(default_factory=Counter)

    @property
    def wording(self) -> str:
        """The wording most students read (their own cell's, not the dependents')."""
        return self.wordings.most_common(1)[0][0] if self.wordings else self.id


@dataclass
class TestCellSummary:
    """What happened at one test cell, mistakes counted at their root."""

    __test__ = False  # not a pytest test class, whatever its name

    assignment: str
    test_cell: str
    title: str = ""
    points: float = 0.0
    judged: set[str] = field(default_factory=set)
    correct: set[str] = field(default_factory=set)
    named: dict[str, Tally] = field(default_factory=dict)
    unexplained: dict[tuple[str, str], Tally] = field(default_factory=dict)
    """(mistake id or "", the message with its numbers masked) -> who."""
    cascaded: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """Root exercise title -> students who failed here because of it."""
    rooted: set[str] = field(default_factory=set)
    """Students with a mistake that lives here."""
    lost: float = 0.0
    """Points lost to mistakes that live here, at this test cell and at the ones calling it."""

    @property
    def share_correct(self) -> float:
        return len(self.correct) / len(self.judged) if self.judged else 0.0


_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def summarize(rows: list[Row]) -> dict[tuple[str, str], TestCellSummary]:
    """(assignment, test cell) -> what happened there, each mistake counted at its root."""
    table: dict[tuple[str, str], TestCellSummary] = {}
    later: list[Row] = []  # unexplained cascades: grouped with their root's own failure

    def at(assignment: str, cell: str) -> TestCellSummary:
        return table.setdefault((assignment, cell), TestCellSummary(assignment, cell))

    def group(root: TestCellSummary, row: Row) -> None:
        key = (row.mistake or "", _NUMBER.sub("N", row.message or ""))
        tally = root.unexplained.setdefault(key, Tally(row.mistake or ""))
        tally.students.add(row.student)
        tally.wordings[row.message or "(no message)"] += 1

    for row in rows:
        here = at(row.assignment, row.test_cell)
        here.title, here.points = row.exercise, max(here.points, row.points)
        here.judged.add(row.student)
        if row.passed:
            here.correct.add(row.student)
            continue
        root = at(row.assignment, row.counted_at)
        if row.cascade:
            here.cascaded[row.counted_at_exercise].add(row.student)
            root.title = root.title or row.counted_at_exercise
        root.rooted.add(row.student)
        root.lost += row.lost
        if row.status == "named":
            mistake = root.named.setdefault(row.mistake, Tally(row.mistake))
            mistake.students.add(row.student)
            if not row.cascade and row.message:
                mistake.wordings[row.message] += 1
        elif row.cascade:
            later.append(row)
        else:
            group(root, row)
    for row in later:  # counted with the root's own failure, if the root failed that way
        root = table[row.assignment, row.counted_at]
        if not any(row.student in tally.students for tally in root.unexplained.values()):
            group(root, row)
    for summary in table.values():  # a named mistake seen only through its dependents
        for mistake in summary.named.values():
            if not mistake.wordings:
                mistake.wordings[runner.STEP_MISTAKES.get(mistake.id, mistake.id)] += 1
    return table


def ranked(table: dict[tuple[str, str], TestCellSummary]) -> list[TestCellSummary]:
    """Test cells by the students who lost points to a mistake that lives there, then by the
    points those mistakes cost."""
    return sorted(
        (s for s in table.values() if s.judged),
        key=lambda s: (-len(s.rooted), -s.lost, s.assignment, s.test_cell),
    )


def office_hours(rows: list[Row]) -> dict[str, list[Row]]:
    """Student -> one row per named mistake (at its root), in course order."""
    seen: dict[str, dict[tuple[str, str, str], Row]] = defaultdict(dict)
    for row in rows:
        if row.status == "named":
            key = (row.assignment, row.counted_at, row.mistake or "")
            current = seen[row.student].get(key)
            if current is None or (current.cascade and not row.cascade):
                seen[row.student][key] = row
    return {student: list(found.values()) for student, found in sorted(seen.items())}
