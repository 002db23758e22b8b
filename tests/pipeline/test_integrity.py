"""Cheating through nbgrader: every submission of ``cheats.CHEATS`` has wrong or empty answers
and tries to earn points anyway (by rebinding torch, the checks, the modules, the import system,
frames, closures, the tracer, or the kernel's answers to the grader). None may earn any: at
autograde the verdict of every test cell is decided outside the student's kernel
(encoder_lib.autograde.judge_execute). An answer that delegates to the built-in scores 0 for that
exercise and its feedback says why, also with the kernel's trap switched off or gone around
(``cheats.TRAPS_OFF``): the judge reads the answer cells' source in nbgrader's process
(encoder_lib.autograde.authorship) and names the construct.

The cheats of issue 37 (``cheats.LOOPHOLES``: reflection, threads, serialisation, the operator
registry, rebuilt functions, private names and the grader's own references, spread over notebooks
06-11; and ``cheats.CELLS``, two submissions of notebook 10 with one class per answer cell,
each cell's tests recorded under that cell's own mistake id) are also graded again by plain
``nbgrader autograde`` (``plain``): each scores 0 there too, its test cell saying why.

The ratchet: ``cheats.REQUIRED`` lists every trick known so far and none may disappear; a new
trick is added to ``cheats.CHEATS`` (and to ``REQUIRED``) first, as a test. A cheat that still
earns points goes in ``HOLES`` (``xfail(strict=True)`` with what it earns) until the grader is
fixed; ``HOLES`` must be empty on main.
"""

from __future__ import annotations

import shutil

import nbformat
import pytest

from encoder_lib.autograde import records
from pipeline import cheats as K
from pipeline import course as C
from pipeline import roster as R

HOLES: dict[str, str] = {}


def cheat_params():
    params = []
    for cheat in K.CHEATS:
        marks = []
        if cheat.name in HOLES:
            marks = [pytest.mark.xfail(strict=True, reason=HOLES[cheat.name])]
        params.append(pytest.param(cheat, id=cheat.name, marks=marks))
    return params


def test_the_ratchet_holds():
    names = [cheat.name for cheat in K.CHEATS]
    assert len(names) == len(set(names))
    missing, unlisted = K.REQUIRED - set(names), set(names) - K.REQUIRED
    assert not missing, f"cheats removed: {sorted(missing)}"
    assert not unlisted, f"add new cheats to REQUIRED: {sorted(unlisted)}"
    assert HOLES == {}, "a cheat earns points: fix the grader before landing"


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
        if cheat.expect == "cells":
            problems = _cells_refused(graded.course, student, a, layout, scores, cheat.name)
            assert not problems, f"{cheat.what} ({a}):\n" + "\n".join(problems)
            continue
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


def _cells_refused(course, student, assignment, layout, scores, name) -> list[str]:
    """What is wrong with the grading of a submission of ``cheats.CELLS[name]``: each answer
    cell's test cells must score 0, their records give the mistake id of the cell's own rule
    (not another cell's, nor an unrelated failure) and their output names the construct."""
    path = course.root / "autograded" / student / assignment / f"{layout.name}.ipynb"
    verdicts = dict(records.read_notebook(path))
    said = {
        K.C.grade_id(cell): " ".join(
            str(out.get("evalue", "")) + str(out.get("text", "")) for out in cell.get("outputs", [])
        )
        for cell in nbformat.read(path, as_version=4).cells
    }
    problems = []
    for gid, (family, _, says, mistake) in K.CELLS[name].items():
        for test in layout.own_tests[gid]:
            verdict = verdicts.get(test)
            if scores.get(test):
                problems.append(f"{gid} ({family}) earned {scores[test]:g} in {test}")
            if verdict is None or verdict.mistake != mistake:
                got = None if verdict is None else (verdict.mistake, verdict.message[:300])
                problems.append(f"{test} ({family}): recorded {got}, not {mistake}")
            if not K.C.says(said.get(test, ""), says):
                problems.append(f"{test} ({family}) does not say {says!r}: {said.get(test)!r}")
    return problems


def _changed_cells(graded, student, assignment) -> set[str]:
    """Answer cells of the submission that differ from the student version."""
    layout = graded.plan.layouts[assignment]
    root = graded.course.root
    blank = K.C.read(graded.course.release_path(assignment, layout.name))
    sub = K.C.read(root / "submitted" / student / assignment / f"{layout.name}.ipynb")
    before = {K.C.grade_id(c): c.source for c in blank.cells}
    return {K.C.grade_id(c) for c in sub.cells if before.get(K.C.grade_id(c)) != c.source}


# --- issue 37: its cheats graded again by plain nbgrader ---------------------------------------


@pytest.fixture(scope="module")
def plain(graded, tmp_path_factory):
    """A copy of the class in which plain ``nbgrader autograde`` grades the submissions of
    ``cheats.LOOPHOLES`` again (the class was graded by the Dask command): their autograded
    notebooks are removed, and the other cheats' submissions, so that ``--student=cheat-*``
    grades only these. Returns (course, command outputs)."""
    copy = C.Course(tmp_path_factory.mktemp("plain") / "course")
    shutil.copytree(graded.course.root, copy.root, ignore=shutil.ignore_patterns("feedback"))
    ours = {(R.cheat_student(a, name), a) for name in PLAIN for a in graded.plan.cheats[name]}
    for folder in ("autograded", "submitted"):
        for path in (copy.root / folder).glob("cheat-*/*"):
            if folder == "autograded" or (path.parent.name, path.name) not in ours:
                shutil.rmtree(path)
    logs = []
    for a in sorted({a for _, a in ours}):
        proc = copy.nbgrader("autograde", a, "--student=cheat-*", check=False, timeout=1800)
        logs.append(proc.stdout + proc.stderr)
    return copy, "".join(logs)


PLAIN = [*K.LOOPHOLES, *K.CELLS]
"""The cheats graded again by plain nbgrader: issue 37's."""


@pytest.mark.parametrize("name", PLAIN)
def test_loophole_earns_nothing_under_plain_nbgrader(graded, plain, name):
    course, log = plain
    targets = graded.plan.cheats.get(name, [])
    if not targets:
        pytest.skip(f"no notebook has the exercise {name} needs yet")
    for a in targets:
        student, layout = R.cheat_student(a, name), graded.plan.layouts[a]
        scores = course.cell_scores(student, a, layout.name)
        assert scores, f"{student} was not graded by plain nbgrader:\n{log[-3000:]}"
        if name in K.CELLS:
            problems = _cells_refused(course, student, a, layout, scores, name)
            assert not problems, f"{name} ({a}) under plain nbgrader:\n" + "\n".join(problems)
            continue
        gid = next(g for g in layout.answers if g in _changed_cells(graded, student, a))
        earned = {cell: scores[cell] for cell in layout.own_tests[gid] if scores[cell]}
        assert not earned, f"{name} ({a}) earned {sum(earned.values()):g} under plain nbgrader"
        path = course.root / "autograded" / student / a / f"{layout.name}.ipynb"
        nb = nbformat.read(path, as_version=4)
        said = " ".join(
            str(out.get("evalue", "")) + str(out.get("text", ""))
            for cell in nb.cells
            if K.C.grade_id(cell) in layout.own_tests[gid]
            for out in cell.get("outputs", [])
        )
        assert K.C.says(said, K.LOOPHOLES[name][3]), f"{student}'s test cell does not say why"
