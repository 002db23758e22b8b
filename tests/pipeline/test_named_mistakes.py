"""The mistakes of issue 38, named through the real nbgrader: in the class that conftest.py
grades, one student per buggy answer (tests/variants) that makes one of them
(``roster.NAMED_MISTAKES``), autograded by ``python -m encoder_lib.autograde``, given feedback by
``nbgrader generate_feedback`` and reported by ``encoder_lib.autograde.report``.

For each student: the test cell of the planted answer scores 0, its recorded verdict carries the
mistake id the answer declares (``Variant.mistake``), the feedback page says the answer's words
(``Variant.says``), and the instructor's report counts the student under that id with the
check's own wording. The answers that raise (a kernel left untransposed in ``load_linear``)
are named by the check's diagnosis in the report, not by the exception's text.

``PIPELINE_ASSIGNMENTS`` (comma separated) narrows the class as for the other pipeline tests.
"""

from __future__ import annotations

import pytest

from encoder_lib.autograde import records
from encoder_lib.autograde.report import data as R
from encoder_lib.autograde.report.page import write
from pipeline import course as C
from pipeline import roster

NAMED = roster.NAMED_MISTAKES
"""Assignment -> the buggy answers of tests/variants checked here (by name); the class grades
them whatever its sample."""


def _planted(graded, assignment: str) -> list:
    buggy, _ = graded.plan.variants[assignment]
    chosen = [v for v in buggy if v.name in NAMED[assignment]]
    assert {v.name for v in chosen} == set(NAMED[assignment]), assignment
    return chosen


@pytest.fixture(scope="module")
def named_class(graded):
    """The class's students who made one of ``NAMED``: (course, layouts, student -> (assignment,
    variant), autograde's log, the assignments)."""
    assignments = [a for a in NAMED if a in graded.plan.present]
    if not assignments:
        pytest.skip("none of 06, 07, 08, 10 is in PIPELINE_ASSIGNMENTS")
    students = {
        roster.variant_student("bug", a, v): (a, v)
        for a in assignments
        for v in _planted(graded, a)
    }
    logs = dict.fromkeys(assignments, graded.logs.get("autograde", ""))
    return graded.course, graded.plan.layouts, students, logs, assignments


def _own_test_cell(layout, cell: str) -> str:
    return layout.own_tests[cell][0]


def test_each_planted_mistake_is_recorded_by_its_id_and_said_on_the_feedback_page(named_class):
    course, layouts, students, logs, _ = named_class
    for student, (a, variant) in students.items():
        layout = layouts[a]
        own = _own_test_cell(layout, variant.cell)
        scores = course.cell_scores(student, a, layout.name)
        assert scores[own] == 0.0, (student, logs[a][-2000:])
        path = course.root / "autograded" / student / a / f"{layout.name}.ipynb"
        verdicts = dict(records.read_notebook(path))
        assert verdicts[own] is not None and not verdicts[own].passed, student
        assert verdicts[own].mistake == variant.mistake, (student, verdicts[own].message)
        text = course.feedback_text(student, a, layout.name)
        assert C.says(text, variant.says), (student, variant.says)


def test_the_report_counts_each_under_its_id_with_the_checks_wording(named_class):
    course, layouts, students, _, assignments = named_class
    report = R.build(course.root, assignments, student="bug-*")
    table = R.summarize(report.rows)
    for student, (a, variant) in students.items():
        own = _own_test_cell(layouts[a], variant.cell)
        named = table[a, own].named
        assert variant.mistake in named, (student, sorted(named))
        tally = named[variant.mistake]
        assert student in tally.students
        # the wording is the check's diagnosis: the answer's words lead it (an exception's
        # text, when there is one, only follows in brackets)
        assert C.says(tally.wording, variant.says), tally.wording
        if " raised " in tally.wording:
            low = tally.wording.lower()
            assert low.find(variant.says.lower()) < low.find(" raised "), tally.wording
    page, _ = write(report, course.root / "report" / "report.html")
    assert " 1 points" not in page.read_text()
