"""The instructor's whole cycle on a synthetic class: generate_assignment, submissions (folders
and zip_collect), autograde, generate_feedback, export. Scores come from the gradebook and the
exported CSV, never from exit codes. See conftest.py for how the class is built and graded."""

from __future__ import annotations

import json

import nbformat
import pytest

from encoder_lib.autograde.judge_execute import NOT_RUN
from pipeline import course as C
from pipeline import roster as R

ASSIGNMENTS = C.expected_assignments()
PRESENT = C.graded_assignments()


def need(assignment: str, variants: bool = False) -> None:
    reason = C.missing_reason(assignment, variants)
    if reason:
        pytest.skip(reason)
    if assignment not in C.graded_assignments():
        pytest.skip(f"{assignment} is not in PIPELINE_ASSIGNMENTS")


def expected_scores(layout: C.Layout, zero=()) -> dict[str, float]:
    return {cell: 0.0 if cell in zero else points for cell, points in layout.tests.items()}


def variant_params(kind: str):
    params = []
    for a in ASSIGNMENTS:
        loaded = C.load_variants(a) if C.missing_reason(a, True) is None else None
        if loaded is None:
            params.append(pytest.param(a, None, id=f"{a}-missing"))
            continue
        buggy, correct = R.variants_of(a, *loaded)
        chosen = buggy if kind == "bug" else correct
        names = [v.name for v in chosen]
        params += [
            pytest.param(
                a, v, id=f"{a}-{v.name}" if names.count(v.name) == 1 else f"{a}-{v.cell}-{v.name}"
            )
            for v in chosen
        ]
    return params


def robustness_params(case: str):
    if not PRESENT:
        return [pytest.param(ASSIGNMENTS[0], id="missing")]
    return [R.robustness_assignment(case, PRESENT)]


# --- 1-3: reference, untouched, one exercise wrong ----------------------------------------------


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_reference_answers_get_full_marks(graded, assignment):
    need(assignment)
    layout = graded.plan.layouts[assignment]
    assert graded.scores(R.REF, assignment) == expected_scores(layout)
    assert graded.total(R.REF, assignment) == layout.max_score


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_untouched_notebook_scores_zero_without_crashing(graded, assignment):
    need(assignment)
    layout = graded.plan.layouts[assignment]
    assert graded.autograded(R.BLANK, assignment).is_file(), graded.logs["autograde"][-3000:]
    assert graded.scores(R.BLANK, assignment) == expected_scores(layout, zero=layout.tests)
    assert graded.total(R.BLANK, assignment) == 0


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_one_wrong_exercise_loses_exactly_its_points(graded, assignment):
    need(assignment)
    layout = graded.plan.layouts[assignment]
    own = layout.own_tests[R.last_exercise(layout)]
    assert graded.scores(R.ONE_WRONG, assignment) == expected_scores(layout, zero=own)
    assert graded.total(R.ONE_WRONG, assignment) == layout.max_score - R.lost_points(layout, own)


# --- 4-5: the variants of tests/variants ---------------------------------------------------------


@pytest.mark.parametrize(("assignment", "variant"), variant_params("bug"))
def test_buggy_variant_loses_its_cells_and_feedback_names_the_mistake(graded, assignment, variant):
    need(assignment, variants=True)
    layout = graded.plan.layouts[assignment]
    student = R.variant_student("bug", assignment, variant)
    assert variant.fails, f"{variant.name}: a buggy variant must fail at least one test cell"
    assert set(variant.fails) <= set(layout.tests), f"unknown cells in fails: {variant.fails}"
    assert graded.scores(student, assignment) == expected_scores(layout, zero=variant.fails)
    lost = R.lost_points(layout, variant.fails)
    assert graded.total(student, assignment) == layout.max_score - lost
    feedback = graded.feedback(student, assignment)
    assert C.says(feedback, variant.says), (
        f"the feedback of {student} does not say {variant.says!r}; it says: "
        + feedback[feedback.lower().find("error") - 200 :][:1500]
    )


@pytest.mark.parametrize(("assignment", "variant"), variant_params("ok"))
def test_correct_variant_gets_full_marks(graded, assignment, variant):
    need(assignment, variants=True)
    layout = graded.plan.layouts[assignment]
    student = R.variant_student("ok", assignment, variant)
    assert graded.scores(student, assignment) == expected_scores(layout)


# --- 6-7: robustness -----------------------------------------------------------------------------


def test_infinite_loop_times_out_at_zero_and_the_rest_is_graded(graded):
    a = graded.plan.loop
    if a is None:
        pytest.skip("no assignment notebook yet")
    layout = graded.plan.layouts[a]
    own = layout.own_tests[R.last_exercise(layout)]
    assert graded.autograded(R.LOOP, a).is_file(), graded.logs["loop"][-3000:]
    assert graded.scores(R.LOOP, a) == expected_scores(layout, zero=own)
    nb = nbformat.read(graded.autograded(R.LOOP, a), as_version=4)
    timed_out = [
        c.metadata.nbgrader.grade_id
        for c in nb.cells
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
        and "ran past the time limit" in " ".join("".join(o.traceback).split())  # wrapped
    ]
    # The judge stops an exercise at its first case that times out: one timeout per test cell
    # of the looping exercise, and nothing else slow.
    assert sorted(timed_out) == sorted(own), timed_out
    assert graded.seconds["autograde (loop)"] < len(timed_out) * R.LOOP_TIMEOUT + 120


@pytest.mark.parametrize("assignment", robustness_params(R.RAISES_FIRST))
def test_exception_in_first_cell_does_not_stop_grading(graded, assignment):
    need(assignment)
    layout = graded.plan.layouts[assignment]
    assert graded.scores(R.RAISES_FIRST, assignment) == expected_scores(layout)
    nb = nbformat.read(graded.autograded(R.RAISES_FIRST, assignment), as_version=4)
    # Above the setup cell: disabled by nbgrader_config.py's DisableCodeAboveSetup, not run.
    assert nb.cells[0].source.startswith("# (disabled at grading")
    assert nb.cells[0].outputs == []
    # Right after it, a cell of the student's own: not run at grading, and its output says so.
    after = next(c for c in nb.cells if c.get("id") == "after-setup")
    assert [o.get("text", "") for o in after.outputs] == [NOT_RUN]
    # The first answer cell raises after defining its answer: the exception is recorded, and
    # the grading goes on (full marks above).
    answer = next(c for c in nb.cells if C.grade_id(c) == layout.answers[0])
    assert [o.get("ename") for o in answer.outputs if o.output_type == "error"] == ["RuntimeError"]


@pytest.mark.parametrize("assignment", robustness_params(R.DELETED_TEST))
def test_deleted_test_cell_earns_nothing_when_the_answer_is_wrong(graded, assignment):
    """By default (nbgrader 0.9.6, ``OverwriteCells.add_missing_cells = False``) a deleted test
    cell is not put back: its grade stays empty, which counts as 0, and the notebook is flagged
    "needs manual grade". With ``c.OverwriteCells.add_missing_cells = True`` nbgrader re-inserts
    the cell (with a comment saying so) and grades it: 0 here too."""
    need(assignment)
    layout = graded.plan.layouts[assignment]
    own = layout.own_tests[R.last_exercise(layout)]
    assert graded.scores(R.DELETED_TEST, assignment) == expected_scores(layout, zero=own)
    assert graded.total(R.DELETED_TEST, assignment) == layout.max_score - R.lost_points(layout, own)
    deleted = own[0]
    graded_nb = nbformat.read(graded.autograded(R.DELETED_TEST, assignment), as_version=4)
    restored = [c for c in graded_nb.cells if C.grade_id(c) == deleted]
    if restored:
        assert any(o.get("output_type") == "error" for o in restored[0].outputs)
    else:
        name = graded.plan.layouts[assignment].name
        assert graded.course.needs_manual_grade(R.DELETED_TEST, assignment, name)


@pytest.mark.parametrize("assignment", robustness_params(R.WEAKENED_TEST))
def test_weakened_test_cell_is_restored_and_earns_nothing(graded, assignment):
    need(assignment)
    layout = graded.plan.layouts[assignment]
    own = layout.own_tests[R.last_exercise(layout)]
    assert graded.scores(R.WEAKENED_TEST, assignment) == expected_scores(layout, zero=own)
    source = {C.grade_id(c): c.source for c in C.read(C.source_notebook(assignment)).cells}
    graded_nb = nbformat.read(graded.autograded(R.WEAKENED_TEST, assignment), as_version=4)
    restored = {C.grade_id(c): c.source for c in graded_nb.cells if C.grade_id(c) in own}
    assert restored == {cell: source[cell] for cell in own}  # hidden tests included


# --- 9: malformed submissions, collection, export ------------------------------------------------


@pytest.mark.parametrize("student", [R.BAD_JSON, R.NOT_NOTEBOOK])
def test_malformed_notebook_fails_alone_and_keeps_its_row(graded, student):
    """nbgrader logs "There was an error processing assignment ... for student '<id>'" with the
    reader's exception, deletes that student's autograded/ folder, grades everyone else and
    exits 1. The submission stays in the gradebook, unscored (0 in the export) and flagged
    "needs manual grade"."""
    a = graded.plan.present[0]
    log = graded.logs["autograde"]
    assert f"There was an error processing assignment '{a}' for student '{student}'" in log, log
    assert not graded.autograded(student, a).exists()
    assert (a, student) in graded.course.submissions()
    assert graded.total(student, a) == 0
    assert graded.course.needs_manual_grade(student, a, graded.plan.layouts[a].name)
    assert graded.total(R.REF, a) == graded.plan.layouts[a].max_score  # everyone else graded


def test_zip_collect_files_an_lms_export_under_submitted(graded):
    a = graded.plan.zip_assignment
    layout = graded.plan.layouts[a]
    for student in R.ZIP_STUDENTS:
        submitted = graded.course.root / "submitted" / student / a / f"{layout.name}.ipynb"
        assert submitted.is_file(), graded.logs["zip_collect"][-3000:]
        json.loads(submitted.read_text())
        assert graded.scores(student, a) == expected_scores(layout)


def test_export_has_exactly_one_row_per_student_and_assignment(graded):
    students = sorted(graded.plan.students)
    pairs = [(r["assignment"], r["student_id"]) for r in graded.grades]
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == {(a, s) for a in graded.plan.present for s in students}
    submitted = {
        (a, s)
        for a in graded.plan.present
        for s in students
        if (graded.course.root / "submitted" / s / a).is_dir()
    }
    assert set(graded.course.submissions()) == submitted
