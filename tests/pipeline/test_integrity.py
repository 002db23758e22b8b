"""Cheating through nbgrader: every submission below has wrong or empty answers and tries to
earn points anyway (see ``cheats.CHEATS``). None may earn any; an answer that delegates to the
built-in scores 0 for that exercise and its feedback says why.

A cheat that still earns points is marked ``xfail(strict=True)`` in ``HOLES`` with what it earns,
so the suite stays green until the grader is fixed, then demands that the mark be removed.
"""

from __future__ import annotations

import pytest

from pipeline import cheats as K
from pipeline import roster as R

# Cheats that earned points when this file was written: name -> what happens. The grader is
# encoder_lib/grading (not owned by these tests); remove an entry once the hole is closed.
HOLES: dict[str, str] = {}


def cheat_params():
    params = []
    for cheat in K.CHEATS:
        marks = []
        if cheat.name in HOLES:
            marks = [pytest.mark.xfail(strict=True, reason=HOLES[cheat.name])]
        params.append(pytest.param(cheat, id=cheat.name, marks=marks))
    return params


@pytest.mark.parametrize("cheat", cheat_params())
def test_cheat_earns_no_points(graded, cheat):
    targets = graded.plan.cheats.get(cheat.name, [])
    if not targets:
        pytest.skip(f"no notebook has the exercise {cheat.name} needs yet")
    for a in targets:
        student = R.cheat_student(a, cheat.name)
        layout = graded.plan.layouts[a]
        scores = graded.scores(student, a)
        assert scores, f"{student} was not graded:\n{graded.logs['autograde'][-3000:]}"
        if cheat.expect == "nothing":
            earned = {cell: s for cell, s in scores.items() if s}
            assert not earned, (
                f"{cheat.what} ({a}) earned {sum(earned.values()):g} points: {earned}"
            )
        else:
            gid = next(g for g in layout.answers if g in _changed_cells(graded, student, a))
            own = layout.own_tests[gid]
            earned = {cell: scores[cell] for cell in own if scores[cell]}
            assert not earned, f"{cheat.what} ({a}) earned {sum(earned.values()):g}: {earned}"
        if cheat.says:
            text = graded.feedback(student, a)
            assert K.C.says(text, cheat.says), f"feedback of {student} does not say why"


def _changed_cells(graded, student, assignment) -> set[str]:
    """Answer cells of the submission that differ from the student version."""
    layout = graded.plan.layouts[assignment]
    root = graded.course.root
    blank = K.C.read(graded.course.release_path(assignment, layout.name))
    sub = K.C.read(root / "submitted" / student / assignment / f"{layout.name}.ipynb")
    before = {K.C.grade_id(c): c.source for c in blank.cells}
    return {K.C.grade_id(c) for c in sub.cells if before.get(K.C.grade_id(c)) != c.source}
