"""The synthetic class graded by the end-to-end tests: one student per case.

Every student's submission is made from the student version that ``nbgrader generate_assignment``
wrote (``notebooks/<assignment>/``), with answer cells filled in from the solution notebook, from
``tests/variants`` or from ``cheats``. Student ids say what the student did, so that a failing
test points at the submission to open: ``<course>/submitted/<student>/<assignment>/``.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, field

import nbformat

from pipeline import cheats as K
from pipeline import course as C

REF = "ref"  # the reference answers pasted into every answer cell
BLANK = "blank"  # the student version, untouched
ONE_WRONG = "one-wrong"  # the last exercise wrong (zeros of the right shape), the rest right
RAISES_FIRST = "raises-first"  # raising above setup, in an added cell and after an answer; right
DELETED_TEST = "deleted-test"  # last exercise empty and its first test cell deleted
WEAKENED_TEST = "weakened-test"  # last exercise empty and its test cells replaced by `pass`
LOOP = "loop"  # the last exercise's function loops forever
BAD_JSON = "bad-json"  # a submission that is not JSON
NOT_NOTEBOOK = "not-a-notebook"  # valid JSON, but not a notebook
ZIP_STUDENTS = ("zipalice", "zipbob")  # collected with `nbgrader zip_collect` from an LMS export

LOOP_TIMEOUT = 15  # Execute.timeout (s) for the looping student only; the repo config says 60

# Which variants get a student. "sample" (the default, to stay within the suite's time budget):
# for every answer cell and every distinct set of failing cells, the first buggy variant of
# tests/variants, and the first correct variant of every answer cell. "all": every variant (one
# notebook each: about 5 s of CPU per notebook). Every variant's verdict is proved in process and
# again through the wire by tests/grading/checks/test_catalogue.py; the class proves that the real
# nbgrader scores each kind of mistake (its own cell, and the cells that depend on it) the same.
# Until 2026-11-29 the sample also took the last buggy variant of each group: 91 buggy students
# where 51 now show every (cell, failing cells) pattern once.
VARIANTS = os.environ.get("PIPELINE_VARIANTS", "sample")

# Assignments whose submissions cost several times the others' to grade get fewer variant
# students: one buggy variant per answer cell and one correct variant ("one per cell"). Measured
# in the clean-clone run of 2026-11-27 (two workers, the other pytest half running beside):
# notebook 10 (JAX compiles as it goes) 94 s per submission, notebooks 01-09 9-13 s; its 21
# graded submissions were half of the class's grading time and the command ran into its 30-min
# limit. Every variant of every notebook is still judged in-process by tests/grading.
HEAVY = {"10_jax_encoder": "one per cell"}

# Buggy answers of tests/variants (by name) that always get a student, whatever the sample: the
# mistakes of issue 38, whose ids, feedback words and report rows test_named_mistakes.py reads
# from the class. (Until 2026-11-29 they were graded in a small class of their own.)
NAMED_MISTAKES: dict[str, tuple[str, ...]] = {
    "06_sentiment_capstone": ("divided_by_batch_count", "divided_by_mean_length", "prefix_lengths"),
    "07_decoder": (
        "causal_padding_on_query_rows",
        "causal_padding_without_head_axis",
        "cross_source_mask_without_head_axis",
        "greedy_samples",
        "greedy_finished_forgotten",
    ),
    "08_pretraining": (
        "raw_logits_as_log_probabilities",
        "least_likely_first",
        "special_tokens_zeroed",
    ),
    "10_jax_encoder": (
        "kernel_replaced_by_an_array",
        "not_transposed",
        "plain_arrays",
        "one_draw_for_the_whole_array",
        "key_made_in_init",
        "mask_hides_query_rows",
    ),
}

# LMS-style file names: <student>_<lms user id>_<submission id>_<notebook>.ipynb; the named
# groups are what `nbgrader zip_collect` needs (it matches the regex against the full path).
ZIP_REGEX = r".*/(?P<student_id>[A-Za-z0-9-]+)_\d+_\d+_(?P<file_id>[^/]+\.ipynb)$"


def variant_student(kind: str, assignment: str, variant) -> str:
    """``bug-03-<answer cell>-<variant name>``: names are unique per cell, not per notebook."""
    return f"{kind}-{assignment[:2]}-{C.slug(variant.cell)}-{C.slug(variant.name)}"


def cheat_student(assignment: str, name: str) -> str:
    return f"cheat-{assignment[:2]}-{C.slug(name)}"


def last_exercise(layout: C.Layout) -> str:
    return [g for g in layout.answers if layout.defines[g] and layout.own_tests[g]][-1]


def lost_points(layout: C.Layout, cells) -> float:
    return sum(layout.tests[c] for c in cells)


def variants_of(assignment: str, buggy: list, correct: list) -> tuple[list, list]:
    """The variants of ``assignment`` that get a student: ``VARIANTS``, or ``HEAVY``'s mode, and
    the ``NAMED_MISTAKES``, in tests/variants' order."""
    mode = VARIANTS if VARIANTS == "all" else HEAVY.get(assignment, VARIANTS)
    chosen, correct = select_variants(buggy, correct, mode)
    named = NAMED_MISTAKES.get(assignment, ())
    missing = set(named) - {v.name for v in buggy}
    assert not missing, f"{assignment}: no buggy variant named {sorted(missing)}"
    keep = {id(v) for v in chosen} | {id(v) for v in buggy if v.name in named}
    return [v for v in buggy if id(v) in keep], correct


def select_variants(buggy: list, correct: list, mode: str = VARIANTS) -> tuple[list, list]:
    """The variants that get a student (see ``VARIANTS`` and ``HEAVY``)."""
    if mode == "all":
        return list(buggy), list(correct)
    if mode == "one per cell":
        first_bug: dict[str, object] = {}
        for v in buggy:
            first_bug.setdefault(v.cell, v)
        return list(first_bug.values()), list(correct[:1])
    groups: dict[tuple, list] = {}
    for v in buggy:
        groups.setdefault((v.cell, tuple(sorted(v.fails))), []).append(v)
    chosen = {id(g[0]) for g in groups.values()}
    first_ok: dict[str, object] = {}
    for v in correct:
        first_ok.setdefault(v.cell, v)
    return [v for v in buggy if id(v) in chosen], list(first_ok.values())


def robustness_assignment(case: str, present: list[str]) -> str:
    """The assignment a robustness case (raises-first, deleted-test, weakened-test) is tried
    on: one each, rotating, so that together they cover different notebooks."""
    cases = (RAISES_FIRST, DELETED_TEST, WEAKENED_TEST)
    return present[cases.index(case) % len(present)]


def loop_target(layouts: dict[str, C.Layout]) -> str | None:
    """The assignment whose last exercise has the fewest test cells: each of them times out
    once with the looping answer."""
    if not layouts:
        return None
    return min(layouts, key=lambda a: (len(layouts[a].own_tests[last_exercise(layouts[a])]), a))


def cheat_targets(present: list[str], layouts: dict[str, C.Layout]) -> dict[str, list[str]]:
    """Cheat name -> the assignments it is tried on (computed from the solution notebooks):
    every assignment it fits (``spread="all"``) or one, dealt round-robin."""
    targets: dict[str, list[str]] = {}
    dealt = 0
    for cheat in K.ALL:
        fits = [
            a for a in present if cheat.build(C.read(C.source_notebook(a)), layouts[a]) is not None
        ]
        if cheat.spread == "all" or not fits:
            targets[cheat.name] = fits
        else:
            targets[cheat.name] = [fits[dealt % len(fits)]]
            dealt += 1
    return targets


@dataclass
class Plan:
    present: list[str]
    layouts: dict[str, C.Layout]
    students: set[str] = field(default_factory=set)
    variants: dict[str, tuple[list, list]] = field(default_factory=dict)
    cheats: dict[str, list[str]] = field(default_factory=dict)
    loop: str | None = None
    zip_assignment: str | None = None


def make_plan(present: list[str]) -> Plan:
    """Everything about the class that is known from the repository alone."""
    layouts = {a: C.layout(C.source_notebook(a)) for a in present}
    plan = Plan(present, layouts)
    for a in present:
        loaded = C.load_variants(a)
        if loaded is not None:
            plan.variants[a] = variants_of(a, *loaded)
    plan.cheats = cheat_targets(present, layouts)
    plan.loop = loop_target(layouts)
    plan.zip_assignment = present[0] if present else None
    return plan


def write_submissions(course: C.Course, plan: Plan) -> None:
    """Write every student's submission into ``course``'s submitted/ (and downloaded/)."""

    def submit(student, assignment, nb_or_text):
        plan.students.add(student)
        course.submit(student, assignment, plan.layouts[assignment].name, nb_or_text)

    for a in plan.present:
        layout = plan.layouts[a]
        blank = C.read(course.release_path(a, layout.name))
        ref = C.with_cells(blank, layout.reference)
        last = last_exercise(layout)
        stub = {last: next(c.source for c in blank.cells if C.grade_id(c) == last)}

        submit(REF, a, ref)
        submit(BLANK, a, blank)
        submit(ONE_WRONG, a, C.with_cells(ref, {last: K.zeroed(layout, last)}))
        if a == robustness_assignment(RAISES_FIRST, plan.present):
            raising = 'raise RuntimeError("a typo here")\n'
            first = C.with_first_cell(ref, raising)  # above setup: disabled at grading
            added = C.with_cell_after(first, "setup", raising, "after-setup")  # not run
            answer = layout.answers[0]  # defines its answer, then raises: recorded, graded on
            raised = C.with_cells(added, {answer: layout.reference[answer] + "\n" + raising})
            submit(RAISES_FIRST, a, raised)
        if a == robustness_assignment(DELETED_TEST, plan.present):
            deleted = C.without_cell(C.with_cells(ref, stub), layout.own_tests[last][0])
            submit(DELETED_TEST, a, deleted)
        if a == robustness_assignment(WEAKENED_TEST, plan.present):
            weakened = {t: "pass\n" for t in layout.own_tests[last]}
            submit(WEAKENED_TEST, a, C.with_cells(ref, {**stub, **weakened}))

        buggy, correct = plan.variants.get(a, ([], []))
        for kind, variants in (("bug", buggy), ("ok", correct)):
            for v in variants:
                submit(variant_student(kind, a, v), a, C.with_cells(ref, {v.cell: v.source}))

        for cheat in K.ALL:
            if a in plan.cheats.get(cheat.name, []):
                submit(cheat_student(a, cheat.name), a, cheat.build(blank, layout))

    if plan.loop:
        layout = plan.layouts[plan.loop]
        ref = C.with_cells(C.read(course.release_path(plan.loop, layout.name)), layout.reference)
        last = last_exercise(layout)
        looping = C.with_cells(ref, {last: K.looping(layout, last)})
        # The student also deleted the demo cells that call the function (students may delete
        # ungraded cells): only the test cells time out, LOOP_TIMEOUT seconds each.
        name = layout.defines[last]
        start = [C.grade_id(c) for c in looping.cells].index(last)
        looping.cells = [
            c
            for i, c in enumerate(looping.cells)
            if i <= start or C.is_test(c) or c.cell_type != "code" or name not in c.source
        ]
        submit(LOOP, plan.loop, looping)

    first = plan.present[0]
    submit(BAD_JSON, first, '{"cells": [ this is not JSON')
    submit(NOT_NOTEBOOK, first, '{"student": "bad-json", "answer": 42}\n')

    # An LMS export: one file as downloaded, the other inside a zip archive.
    a = plan.zip_assignment
    layout = plan.layouts[a]
    ref = C.with_cells(C.read(course.release_path(a, layout.name)), layout.reference)
    archive = course.root / "downloaded" / a / "archive"
    archive.mkdir(parents=True, exist_ok=True)
    text = nbformat.writes(ref)
    first_name, second_name = (
        f"{s}_{1000 + i}_{2000 + i}_{layout.name}.ipynb" for i, s in enumerate(ZIP_STUDENTS)
    )
    (archive / first_name).write_text(text)
    with zipfile.ZipFile(archive / "export.zip", "w") as z:
        z.writestr(f"submissions/{second_name}", text)
    plan.students.update(ZIP_STUDENTS)
