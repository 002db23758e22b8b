"""The report's page: the HTML for the instructor (its figures are PNG images inside it, so it
works offline) and the CSV of the rows beside it, from ``data.py``'s rows and counts.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import textwrap
from collections import Counter
from pathlib import Path

from encoder_lib.autograde.report.data import (
    CSV_COLUMNS,
    Report,
    Row,
    Tally,
    TestCellSummary,
    office_hours,
    ranked,
    summarize,
)

__all__ = ["write"]


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
    table = summarize(report.rows)
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
    ours |= {cell: s for (b, cell), s in table.items() if b == a and cell not in ours}
    n = report.submissions[a]
    parts = [
        f'<h2 id="{_e(a)}">{_e(a)}</h2>',
        f"<p>{n} graded submission{'s' if n != 1 else ''}.</p>",
        "<h3>Exercises ranked by the students who lost points</h3>",
        _ranking(ranked({(a, cell): s for cell, s in ours.items()})),
        _figure(
            _points_chart(list(ours.values()), f"{a}: points lost, by where the mistake lives"),
            f"points lost per exercise in {a}",
        ),
    ]
    for summary in ours.values():
        if summary.judged:
            parts += _section(summary)
    return parts


def _section(summary: TestCellSummary) -> list[str]:
    """One test cell's section: its share correct, its named mistakes, its other failures."""
    judged, correct = len(summary.judged), len(summary.correct)
    parts = [
        f'<h3 id="{_e(summary.assignment)}-{_e(summary.test_cell)}">{_e(summary.title)} '
        f"<small>(<code>{_e(summary.test_cell)}</code>, {_points(summary.points)})</small></h3>",
        f'<p class="share">{correct} of {judged} correct ({correct / judged:.0%}).',
    ]
    if summary.rooted:
        parts[-1] += (
            f" {len(summary.rooted)} made a mistake that lives here; it cost "
            f"{_points(summary.lost)} in all, here and in the exercises that call this one."
        )
    parts[-1] += "</p>"
    if summary.named:
        named = sorted(summary.named.values(), key=lambda m: (-len(m.students), m.id))
        parts.append(
            _figure(_mistakes_chart(named, summary.title), f"named mistakes in {summary.title}")
        )
        body = "".join(
            f'<tr><td class="n">{len(m.students)}</td><td><code>{_e(m.id)}</code></td>'
            f'<td>{_e(m.wording)}</td><td class="ids">{_e(", ".join(sorted(m.students)))}</td></tr>'
            for m in named
        )
        parts.append(
            '<table class="mistakes"><tr><th>students</th><th>mistake</th><th>wording</th>'
            f"<th>who</th></tr>{body}</table>"
        )
    if summary.unexplained:
        groups = sorted(summary.unexplained.values(), key=lambda m: (-len(m.students), m.id))
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
    if summary.cascaded:
        items = "".join(
            f"<li>{len(who)} because of {_e(root)}: {_e(', '.join(sorted(who)))}</li>"
            for root, who in sorted(summary.cascaded.items())
        )
        parts.append(
            "<p>Failed here because of a mistake in an earlier exercise (counted there):</p>"
            f'<ul class="cascades">{items}</ul>'
        )
    return parts


def _reasons(summary: TestCellSummary, n: int = 3) -> list[tuple[str, int]]:
    """The commonest reasons, (wording, students), named ones first."""
    named = sorted(summary.named.values(), key=lambda m: (-len(m.students), m.id))
    out = [(m.id, len(m.students)) for m in named]
    unexplained = sorted(summary.unexplained.values(), key=lambda m: -len(m.students))
    out += [(_short(m.wording, 60), len(m.students)) for m in unexplained]
    return out[:n]


def _ranking(summaries: list[TestCellSummary], with_assignment: bool = False) -> str:
    head = "<th>assignment</th>" if with_assignment else ""
    body = ""
    for i, s in enumerate(summaries, 1):
        reasons = "; ".join(f"{_e(text)} ({n})" for text, n in _reasons(s))
        cell = f"<td>{_e(s.assignment)}</td>" if with_assignment else ""
        body += (
            f'<tr><td class="n">{i}</td>{cell}<td>{_e(s.title)}</td>'
            f'<td class="n">{len(s.rooted)}</td><td class="n">{s.lost:g}</td>'
            f'<td class="n">{s.share_correct:.0%}</td><td>{reasons or "-"}</td></tr>'
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


def _points_chart(
    summaries: list[TestCellSummary], title: str, course: bool = False
) -> bytes | None:
    summaries = [s for s in summaries if s.judged]
    if not summaries:
        return None
    labels = [
        _short(f"{s.assignment[:2]} · {s.title}" if course else s.title, 50) for s in summaries
    ]
    return _barh(labels, [s.lost for s in summaries], title, "points lost", "#c44e52")
