"""Which mistakes did the class make: a report for the instructor, from the named mistakes.

    python -m encoder_lib.autograde.report 01_self_attention
    python -m encoder_lib.autograde.report "*" --course-dir /srv/course --output mistakes.html

Run it after autograde, in the course folder (or pass ``--course-dir``). It reads the gradebook
(who submitted, every test cell's points) and the verdict autograde kept in every test cell of
the autograded notebooks (``records``: the mistake's id, the exercise, and for a mistake that
lives in an earlier exercise, that one), and writes an HTML page that works offline (its figures
are PNG images inside the page) and a CSV of the same rows beside it:

- per exercise: the share of the class that got it right; the named mistakes by the number of
  students who made them, as a bar chart and a table with their wording and the students' ids;
  the failures no catalogue entry named, grouped by their message; the students who lost points
  there because of an earlier exercise. A mistake is counted once, at the exercise where it
  lives (its root): exercise 4 failing because exercise 1's function is wrong counts at
  exercise 1;
- per assignment, and across the assignments of the report: the exercises ranked by how many
  students lost points to a mistake that lives there, and the commonest reasons;
- per student: the named mistakes, what to talk about in office hours.

The page names students: it is the instructor's copy. A submission graded before records existed
(or whose records are malformed) is left out and said so in one line per assignment; the exit
status is then 1 (2 when nothing could be reported).
"""

from __future__ import annotations

import argparse
import base64
import csv
import fnmatch
import html
import io
import re
import sys
import textwrap
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from encoder_lib.autograde import records
from encoder_lib.grading import runner

__all__ = ["Report", "ReportError", "Row", "build", "main", "write"]

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
class Exercise:
    """What happened at one test cell, mistakes counted at their root."""

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

    def reasons(self, n: int = 3) -> list[tuple[str, int]]:
        """The commonest reasons, (wording, students), named ones first."""
        named = sorted(self.named.values(), key=lambda m: (-len(m.students), m.id))
        out = [(m.id, len(m.students)) for m in named]
        unexplained = sorted(self.unexplained.values(), key=lambda m: -len(m.students))
        out += [(_short(m.wording, 60), len(m.students)) for m in unexplained]
        return out[:n]


_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def exercises(rows: list[Row]) -> dict[tuple[str, str], Exercise]:
    """(assignment, test cell) -> what happened there, each mistake counted at its root."""
    table: dict[tuple[str, str], Exercise] = {}
    later: list[Row] = []  # unexplained cascades: grouped with their root's own failure

    def at(assignment: str, cell: str) -> Exercise:
        return table.setdefault((assignment, cell), Exercise(assignment, cell))

    def group(root: Exercise, row: Row) -> None:
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
    for ex in table.values():  # a named mistake seen only through its dependents
        for mistake in ex.named.values():
            if not mistake.wordings:
                mistake.wordings[runner.STEP_MISTAKES.get(mistake.id, mistake.id)] += 1
    return table


def ranked(table: dict[tuple[str, str], Exercise]) -> list[Exercise]:
    """Exercises by the students who lost points to a mistake that lives there, then by the
    points those mistakes cost."""
    return sorted(
        (ex for ex in table.values() if ex.judged),
        key=lambda ex: (-len(ex.rooted), -ex.lost, ex.assignment, ex.test_cell),
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


# --- writing --------------------------------------------------------------------------------------


def write(report: Report, path: Path) -> tuple[Path, Path]:
    """Write the HTML page at ``path`` and the CSV beside it; return both paths."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table_csv = path.with_suffix(".csv")
    with table_csv.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in report.rows:
            writer.writerow(row.csv())
    path.write_text(_page(report), encoding="utf-8")
    return path, table_csv


_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 70em; padding: 0 1em;
       color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 2.2em; border-bottom: 1px solid #ccc; }
h3 { margin-top: 1.8em; }
table { border-collapse: collapse; margin: 0.8em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.n { text-align: right; white-space: nowrap; }
td.ids { font-size: 0.85em; color: #555; max-width: 22em; }
code { font-size: 0.9em; background: #f4f4f4; padding: 0 0.2em; }
.note { background: #fff4e0; border: 1px solid #e0b060; padding: 0.6em 1em; }
.lede { color: #444; } img.figure { display: block; max-width: 100%; margin: 0.8em 0; }
"""


def _page(report: Report) -> str:
    table = exercises(report.rows)
    names = report.assignments
    if len(names) > 3:
        named = f"{len(names)} assignments, {names[0]} to {names[-1]}"
    else:
        named = ", ".join(names)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Mistakes: {_e(named)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Which mistakes did the class make: {_e(named)}</h1>",
        _lede(report),
    ]
    if report.problems:
        items = "".join(
            f"<li>{_e(line)}</li>" for line in report.problems.lines(report.submissions)
        )
        parts.append(f'<div class="note"><p>Left out of this report:</p><ul>{items}</ul></div>')
    if len(report.assignments) > 1:
        top = ranked(table)
        chart = _points_chart(top[:15], "Points lost, by where the mistake lives", course=True)
        parts += [
            '<h2 id="course">The course: exercises ranked by the students who lost points</h2>',
            _ranking(top[:25], with_assignment=True),
            _figure(chart, "points lost per exercise, all assignments"),
        ]
    for a in report.assignments:
        parts += _assignment(report, a, table)
    parts += _students(report.rows)
    parts.append(_how())
    parts.append("</body></html>")
    return "\n".join(parts)


def _lede(report: Report) -> str:
    total = sum(report.submissions.values())
    return (
        f'<p class="lede">Course <code>{_e(report.course)}</code>, built {_e(report.built)} from '
        f"{total} graded submission{'s' if total != 1 else ''} and the verdict autograde kept for "
        "each test cell. A mistake is counted once, at the exercise where it lives. "
        "<strong>Instructor's copy: it names students.</strong></p>"
    )


def _assignment(report: Report, a: str, table: dict) -> list[str]:
    ours = {cell: table[a, cell] for cell in report.order.get(a, []) if (a, cell) in table}
    ours |= {cell: ex for (b, cell), ex in table.items() if b == a and cell not in ours}
    n = report.submissions[a]
    parts = [
        f'<h2 id="{_e(a)}">{_e(a)}</h2>',
        f"<p>{n} graded submission{'s' if n != 1 else ''}.</p>",
        "<h3>Exercises ranked by the students who lost points</h3>",
        _ranking(ranked({(a, cell): ex for cell, ex in ours.items()})),
        _figure(
            _points_chart(list(ours.values()), f"{a}: points lost, by where the mistake lives"),
            f"points lost per exercise in {a}",
        ),
    ]
    for ex in ours.values():
        if ex.judged:
            parts += _exercise(ex)
    return parts


def _exercise(ex: Exercise) -> list[str]:
    judged, correct = len(ex.judged), len(ex.correct)
    parts = [
        f'<h3 id="{_e(ex.assignment)}-{_e(ex.test_cell)}">{_e(ex.title)} '
        f"<small>(<code>{_e(ex.test_cell)}</code>, {_points(ex.points)})</small></h3>",
        f'<p class="share">{correct} of {judged} correct ({correct / judged:.0%}).',
    ]
    if ex.rooted:
        parts[-1] += (
            f" {len(ex.rooted)} made a mistake that lives here; it cost {_points(ex.lost)} in "
            "all, here and in the exercises that call this one."
        )
    parts[-1] += "</p>"
    if ex.named:
        named = sorted(ex.named.values(), key=lambda m: (-len(m.students), m.id))
        parts.append(_figure(_mistakes_chart(named, ex.title), f"named mistakes in {ex.title}"))
        body = "".join(
            f'<tr><td class="n">{len(m.students)}</td><td><code>{_e(m.id)}</code></td>'
            f'<td>{_e(m.wording)}</td><td class="ids">{_e(", ".join(sorted(m.students)))}</td></tr>'
            for m in named
        )
        parts.append(
            '<table class="mistakes"><tr><th>students</th><th>mistake</th><th>wording</th>'
            f"<th>who</th></tr>{body}</table>"
        )
    if ex.unexplained:
        groups = sorted(ex.unexplained.values(), key=lambda m: (-len(m.students), m.id))
        body = "".join(
            f'<tr><td class="n">{len(g.students)}</td><td><code>{_e(g.id or "-")}</code></td>'
            f'<td>{_e(g.wording)}</td><td class="ids">{_e(", ".join(sorted(g.students)))}</td></tr>'
            for g in groups
        )
        parts += [
            "<p>Failures no catalogue entry named, grouped by their message:</p>",
            '<table class="unexplained"><tr><th>students</th><th>step</th><th>message (one of '
            f"them)</th><th>who</th></tr>{body}</table>",
        ]
    if ex.cascaded:
        items = "".join(
            f"<li>{len(who)} because of {_e(root)}: {_e(', '.join(sorted(who)))}</li>"
            for root, who in sorted(ex.cascaded.items())
        )
        parts.append(
            "<p>Failed here because of a mistake in an earlier exercise (counted there):</p>"
            f'<ul class="cascades">{items}</ul>'
        )
    return parts


def _ranking(exs: list[Exercise], with_assignment: bool = False) -> str:
    head = "<th>assignment</th>" if with_assignment else ""
    body = ""
    for i, ex in enumerate(exs, 1):
        reasons = "; ".join(f"{_e(text)} ({n})" for text, n in ex.reasons())
        cell = f"<td>{_e(ex.assignment)}</td>" if with_assignment else ""
        body += (
            f'<tr><td class="n">{i}</td>{cell}<td>{_e(ex.title)}</td>'
            f'<td class="n">{len(ex.rooted)}</td><td class="n">{ex.lost:g}</td>'
            f'<td class="n">{ex.share_correct:.0%}</td><td>{reasons or "-"}</td></tr>'
        )
    return (
        f'<table class="ranking"><tr><th>#</th>{head}<th>exercise</th><th>students with a '
        "mistake here</th><th>points it cost</th><th>correct</th><th>why (students)</th></tr>"
        f"{body}</table>"
    )


def _students(rows: list[Row]) -> list[str]:
    found = office_hours(rows)
    other = Counter(r.student for r in rows if r.status == "unexplained" and not r.cascade)
    body = ""
    for student in sorted(set(found) | set(other)):
        items = "".join(
            f"<li>{_e(r.assignment)} · {_e(r.counted_at_exercise)}: <code>{_e(r.mistake)}</code>"
            f" {_e(_short(r.message or '', 110))}</li>"
            for r in found.get(student, [])
        )
        items = items or "<li>none named</li>"
        body += (
            f"<tr><td>{_e(student)}</td><td><ul>{items}</ul></td>"
            f'<td class="n">{other.get(student, 0)}</td></tr>'
        )
    return [
        '<h2 id="students">Per student: the named mistakes (for office hours)</h2>',
        '<table class="students"><tr><th>student</th><th>named mistakes</th><th>other '
        f"failures</th></tr>{body}</table>",
    ]


def _how() -> str:
    return (
        '<h2 id="how">How this is counted</h2><p>Every test cell keeps the verdict autograde '
        "gave it: the id of the mistake (an entry of the exercise's catalogue, or a generic "
        "step: not written, a forbidden built-in, an exception, the dtype, an input changed in "
        "place, the shape, gradients, the time limit), which does not change when its wording "
        "does. A student is counted once per mistake and exercise. When an exercise fails "
        "because an earlier exercise it calls is wrong, the mistake is counted at the earlier "
        "one, and the points it cost in the later one are added there. Failures that only say "
        "that values differ (<code>mismatch</code>) or that the code raised "
        "(<code>exception</code>) are grouped by their message. The CSV beside this page has "
        "one row per student and test cell.</p>"
    )


def _points(n: float) -> str:
    """``"1 point"``, ``"0.5 points"``, ``"2 points"``."""
    return f"{n:g} point" + ("" if n == 1 else "s")


def _e(text: object) -> str:
    return html.escape(str(text))


def _short(text: str, width: int) -> str:
    return textwrap.shorten(text, width, placeholder=" …") if text else text


# --- figures: PNG images inside the page ----------------------------------------------------------


def _figure(png: bytes | None, alt: str) -> str:
    if png is None:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return f'<img class="figure" alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _barh(labels: list[str], values: list[float], title: str, xlabel: str, colour="#4c72b0"):
    """A horizontal bar chart as PNG bytes (matplotlib's Agg canvas: no display, no pyplot)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(9.5, 0.9 + 0.42 * len(labels)))
    ax = fig.subplots()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    positions = range(len(labels))[::-1]
    ax.barh(list(positions), values, color=colour)
    ax.set_yticks(list(positions), labels, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=11, loc="left")
    for y, v in zip(positions, values, strict=True):
        ax.text(v, y, f" {v:g}", va="center", fontsize=9)
    ax.spines[["top", "right"]].set_visible(False)
    ax.margins(x=0.12)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def _mistakes_chart(named: list[Tally], title: str) -> bytes:
    shown = named[:12]
    labels = [f"{_short(m.wording, 58)}  [{m.id}]" for m in shown]
    counts = [len(m.students) for m in shown]
    return _barh(labels, counts, f"{title}: named mistakes", "students")


def _points_chart(exs: list[Exercise], title: str, course: bool = False) -> bytes | None:
    exs = [ex for ex in exs if ex.judged]
    if not exs:
        return None
    labels = [_short(f"{ex.assignment[:2]} · {ex.title}" if course else ex.title, 50) for ex in exs]
    return _barh(labels, [ex.lost for ex in exs], title, "points lost", "#c44e52")


# --- command line ---------------------------------------------------------------------------------


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m encoder_lib.autograde.report",
        description="Which mistakes did the class make: an HTML report (and a CSV beside it) "
        "from the verdicts autograde kept. Run it after autograde.",
    )
    parser.add_argument("assignments", nargs="+", help='assignment names or globs, e.g. "*"')
    parser.add_argument(
        "--course-dir",
        type=Path,
        default=Path.cwd(),
        help="the nbgrader course folder, where nbgrader_config.py and the gradebook are "
        "(default: the current folder)",
    )
    parser.add_argument("--student", default="*", help="only these students (a glob)")
    parser.add_argument(
        "--output",
        type=Path,
        help="the HTML file to write (default: reports/mistakes.html in the course folder); "
        "the CSV goes beside it, with the same name",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    try:
        report = build(args.course_dir, args.assignments, args.student)
    except ReportError as error:
        print(f"report: {error}", file=sys.stderr)
        return 2
    for line in report.problems.lines(report.submissions):
        print(f"report: {line}", file=sys.stderr)
    output = args.output or args.course_dir.resolve() / "reports" / "mistakes.html"
    page, table = write(report, output)
    print(f"wrote {page} and {table} ({len(report.rows)} verdicts)")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
