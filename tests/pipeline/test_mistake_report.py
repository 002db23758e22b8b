"""The instructor's mistake report (``python -m encoder_lib.autograde.report``) on the class of
conftest.py, graded for real: the verdicts autograde recorded and the report's counts equal what
was planted.

What was planted is known without the report: each ``bug-`` student answers one cell with a
variant of tests/variants, which fails exactly ``variant.fails``; the mistake each failing test
cell names, and the exercise where it lives, come from running the check on that answer in this
process (as the notebook's own test cell does). The class is graded on a local Dask cluster
(``python -m encoder_lib.autograde``); one assignment's variants are graded again here by plain
``nbgrader autograde`` and must give the same verdicts and counts. The page itself is opened in
Chromium with the network blocked (a screenshot goes to tests/ui/artifacts/).
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from encoder_lib.autograde import records
from encoder_lib.autograde.report import data as R
from encoder_lib.grading import GradingError, runner
from pipeline import course as C
from pipeline import roster

PLAIN = "01_self_attention"
"""The assignment whose variants plain nbgrader grades again."""

ARTIFACTS = Path(__file__).resolve().parents[1] / "ui" / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


# --- what was planted -----------------------------------------------------------------------------


def planted(plan: roster.Plan, assignments: list[str]) -> dict[tuple[str, str], dict]:
    """(student, assignment) -> {test cell: None (passes) or (mistake id, root test cell)} for
    every ``bug-`` student of ``assignments``, from the check run here on the planted answer."""
    from grading.notebook_namespace import SolutionNotebook

    out = {}
    for a in assignments:
        notebook = SolutionNotebook(a)
        for variant in plan.variants.get(a, ([], []))[0]:
            namespace = notebook.namespace({variant.cell: variant.source})
            verdicts: dict[str, tuple[str | None, str] | None] = {}
            for cell in plan.layouts[a].tests:
                verdicts[cell] = None
                if cell not in variant.fails:
                    continue
                try:
                    runner.run(runner.EXERCISES[cell], runner.local(namespace), thorough=True)
                except GradingError as error:
                    verdicts[cell] = (error.mistake, error.root or cell)
                else:
                    pytest.fail(f"{variant.name}: the check passes {cell} here")
            out[roster.variant_student("bug", a, variant), a] = verdicts
    return out


def recorded(course_root: Path, plan: roster.Plan, keys) -> dict[tuple[str, str], dict]:
    """The same, read from the records in the autograded notebooks."""
    out = {}
    for student, a in keys:
        path = course_root / "autograded" / student / a / f"{plan.layouts[a].name}.ipynb"
        out[student, a] = {
            cell: None if v is None or v.passed else (v.mistake, v.root or cell)
            for cell, v in records.read_notebook(path)
        }
    return out


def expected_counts(truth: dict, plan: roster.Plan) -> dict:
    """What the report must say about these students, counted here from ``truth``."""
    correct, named, unexplained, rooted = (
        Counter(),
        defaultdict(set),
        defaultdict(set),
        defaultdict(set),
    )
    lost: Counter = Counter()
    for (student, a), cells in truth.items():
        for cell, verdict in cells.items():
            if verdict is None:
                correct[a, cell] += 1
                continue
            mistake, root = verdict
            rooted[a, root].add(student)
            lost[a, root] += plan.layouts[a].tests[cell]
            if mistake in runner.UNEXPLAINED:
                unexplained[a, root].add(student)
            else:
                named[a, root, mistake].add(student)
    return {
        "correct": dict(correct),
        "named": dict(named),
        "unexplained": dict(unexplained),
        "rooted": dict(rooted),
        "lost": dict(lost),
    }


def report_counts(report: R.Report) -> dict:
    table = R.summarize(report.rows)
    return {
        "correct": {key: len(s.correct) for key, s in table.items() if s.correct},
        "named": {
            (a, cell, m.id): m.students for (a, cell), s in table.items() for m in s.named.values()
        },
        "unexplained": {
            key: set().union(*(g.students for g in s.unexplained.values()))
            for key, s in table.items()
            if s.unexplained
        },
        "rooted": {key: s.rooted for key, s in table.items() if s.rooted},
        "lost": {key: s.lost for key, s in table.items() if s.lost},
    }


@pytest.fixture(scope="module")
def truth(graded):
    present = [a for a in graded.plan.present if a in graded.plan.variants]
    return planted(graded.plan, present)


# --- the records ----------------------------------------------------------------------------------


def test_every_planted_mistake_is_recorded_at_the_exercise_where_it_lives(graded, truth):
    assert truth, "no variant in the class"
    assert recorded(graded.course.root, graded.plan, truth) == truth
    for (student, a), cells in truth.items():
        variant = next(
            v for v in graded.plan.variants[a][0] if roster.variant_student("bug", a, v) == student
        )
        own = graded.plan.layouts[a].own_tests[variant.cell]
        for cell in own:  # named by an id, and counted where it was planted
            if cells[cell] is not None:
                assert cells[cell][0] is not None and cells[cell][1] == cell, (student, cells)
        for cell, _ in variant.also_says:  # "this comes from your ...": counted there too
            assert cells[cell][1] in own, (student, cell, cells[cell])


def test_a_looping_answer_is_recorded_as_past_the_time_limit(graded):
    a = graded.plan.loop
    layout = graded.plan.layouts[a]
    path = graded.autograded(roster.LOOP, a)
    verdicts = dict(records.read_notebook(path))
    for cell in layout.own_tests[roster.last_exercise(layout)]:  # graded by plain nbgrader
        assert verdicts[cell].mistake == "time-limit", verdicts[cell]


# --- the report -----------------------------------------------------------------------------------


def test_report_counts_equal_the_planted_mistakes(graded, truth):
    present = sorted({a for _, a in truth})
    report = R.build(graded.course.root, present, student="bug-*")
    assert report.submissions == Counter(a for _, a in truth)
    assert report_counts(report) == expected_counts(truth, graded.plan)
    # a cascade is counted once, at its root, and shown where it cost points
    table = R.summarize(report.rows)
    cascades = sum(len(who) for s in table.values() for who in s.cascaded.values())
    planted_cascades = sum(
        1 for cells in truth.values() for cell, v in cells.items() if v and v[1] != cell
    )
    assert cascades == planted_cascades > 0


@pytest.fixture(scope="module")
def whole_class(graded, tmp_path_factory):
    """The report of the whole class, made by the command."""
    out = tmp_path_factory.mktemp("report") / "mistakes.html"
    command = [sys.executable, "-m", "encoder_lib.autograde.report", "*"]
    proc = subprocess.run(
        [*command, "--course-dir", str(graded.course.root), "--output", str(out)],
        capture_output=True,
        text=True,
        env=C.env(),
        timeout=600,
    )
    return proc, out


def test_the_whole_class_report_agrees_with_the_gradebook(graded, whole_class):
    proc, page = whole_class
    # Two submissions are not notebooks: no autograded notebook, said in one line, exit 1.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    problems = [line for line in proc.stderr.splitlines() if line.startswith("report: ")]
    first = graded.plan.present[0]
    assert problems == [
        f"report: {first}: 2 submissions have no autograded notebook ({roster.BAD_JSON}, "
        f"{roster.NOT_NOTEBOOK}): autograde could not grade them (see its log)"
    ], proc.stderr
    assert "Traceback" not in proc.stderr
    with page.with_suffix(".csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == R.CSV_COLUMNS
    # One row per graded student and test cell; full marks exactly where it says correct.
    with Gradebook(graded.course.db_url) as gb:
        scores = {
            (a.name, s.student.id, g.name): (g.score, g.max_score)
            for a in gb.assignments
            for s in gb.assignment_submissions(a.name)
            for nb in s.notebooks
            for g in nb.grades
            if g.cell.cell_type == "code"
        }
    graded_keys = {
        k for k in scores if k[1] not in (roster.BAD_JSON, roster.NOT_NOTEBOOK) or k[0] != first
    }
    assert {(r["assignment"], r["student_id"], r["test_cell"]) for r in rows} == graded_keys
    assert len(rows) == len(graded_keys)
    for r in rows:
        score, points = scores[r["assignment"], r["student_id"], r["test_cell"]]
        assert (r["status"] == "correct") == (score == points), r
        assert float(r["score"]) == score and float(r["points"]) == points
        assert (r["mistake_id"] == "") == (r["status"] == "correct"), r
    statuses = Counter(r["status"] for r in rows)
    assert statuses["named"] > statuses["unexplained"] > 0, statuses


def test_blank_submissions_are_counted_as_not_written(graded, whole_class):
    _, page = whole_class
    with page.with_suffix(".csv").open(newline="", encoding="utf-8") as f:
        blank = [r for r in csv.DictReader(f) if r["student_id"] == roster.BLANK]
    layouts = graded.plan.layouts
    assert len(blank) == sum(len(layouts[a].tests) for a in graded.plan.present)
    assert {r["mistake_id"] for r in blank} == {"not-written"}


# --- plain nbgrader gives the same ----------------------------------------------------------------


@pytest.fixture(scope="module")
def plain(graded, tmp_path_factory):
    """A copy of the class whose ``PLAIN`` variants plain ``nbgrader autograde`` grades again,
    with cold kernels (the class was graded on Dask with warm ones, the course's default)."""
    copy = C.Course(tmp_path_factory.mktemp("plain") / "course")
    shutil.copytree(graded.course.root, copy.root, ignore=shutil.ignore_patterns("feedback"))
    students = f"bug-{PLAIN[:2]}-*"
    for folder in (copy.root / "autograded").glob(f"{students}/{PLAIN}"):
        shutil.rmtree(folder)
    copy.nbgrader(
        "autograde",
        PLAIN,
        f"--student={students}",
        "--JudgeExecute.kernels=cold",
        check=False,
        timeout=1800,
    )
    return copy


def test_plain_nbgrader_records_and_counts_equal_the_planted_ones(graded, truth, plain):
    ours = {key: cells for key, cells in truth.items() if key[1] == PLAIN}
    assert ours, f"no variant of {PLAIN} in the class"
    for student, a in ours:
        assert (plain.root / "autograded" / student / a).is_dir(), "plain nbgrader graded nothing"
    assert recorded(plain.root, graded.plan, ours) == ours
    # Every verdict whole (mistake, exercise, root, message's id...): cold kernels under plain
    # nbgrader, warm ones on Dask.
    name = graded.plan.layouts[PLAIN].name
    verdicts = [
        {
            key: list(records.read_notebook(root / "autograded" / key[0] / PLAIN / f"{name}.ipynb"))
            for key in ours
        }
        for root in (plain.root, graded.course.root)
    ]
    assert verdicts[0] == verdicts[1]
    report = R.build(plain.root, [PLAIN], student=f"bug-{PLAIN[:2]}-*")
    assert report_counts(report) == expected_counts(ours, graded.plan)


# --- missing or malformed records: one line, no traceback -----------------------------------------


def _course_of(graded, assignment: str, folder: Path) -> C.Course:
    """A course folder with the class's config, gradebook and ``assignment``'s autograded
    notebooks (nothing else is read by the report)."""
    root = folder / "course"
    root.mkdir(parents=True)
    for name in ("nbgrader_config.py", "gradebook.db"):
        shutil.copy(graded.course.root / name, root / name)
    for path in (graded.course.root / "autograded").glob(f"*/{assignment}"):
        shutil.copytree(path, root / "autograded" / path.parent.name / assignment)
    return C.Course(root)


def _report(course: C.Course, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "encoder_lib.autograde.report",
            *args,
            "--course-dir",
            str(course.root),
        ],
        capture_output=True,
        text=True,
        env=C.env(),
        timeout=600,
    )


def _rewrite_records(course: C.Course, assignment: str, change, notebooks: int = 10**6) -> int:
    """Apply ``change(metadata)`` to the metadata of every test cell of the first ``notebooks``
    autograded notebooks of ``assignment``; returns how many notebooks changed."""
    paths = sorted((course.root / "autograded").glob(f"*/{assignment}/*.ipynb"))[:notebooks]
    for path in paths:
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if records.KEY in cell.get("metadata", {}):
                change(cell["metadata"])
        path.write_text(json.dumps(nb))
    return len(paths)


def _drop(metadata: dict) -> None:
    del metadata[records.KEY]


def _break(metadata: dict) -> None:
    del metadata[records.KEY]["verdict"]["passed"]


def test_records_missing_or_malformed_give_one_line_each(graded, tmp_path):
    a = "04_feed_forward" if "04_feed_forward" in graded.plan.present else graded.plan.present[0]
    course = _course_of(graded, a, tmp_path)
    n = _rewrite_records(course, a, _drop)  # as graded before records existed
    proc = _report(course, a)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"report: nothing to report: {a}: {n} of {n} graded submissions ")
    assert "have no mistake records" in lines[0] and f"nbgrader autograde {a} --force" in lines[0]

    course = _course_of(graded, a, tmp_path / "malformed")
    _rewrite_records(course, a, _break, notebooks=1)
    proc = _report(course, a)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"report: {a}: 1 submissions have malformed mistake records"), line
    assert "the record has no 'passed'" in line

    proc = _report(course, "no_such_assignment")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("report: no assignment 'no_such_assignment' in the gradebook")


# --- the page in a browser ------------------------------------------------------------------------

_IMAGES = """() => [...document.images].map(i => ({src: i.src.slice(0, 22), w: i.naturalWidth,
  h: i.naturalHeight, alt: i.alt}))"""


def test_the_page_shows_its_figures_and_tables_offline(whole_class):
    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    playwright = pytest.importorskip("playwright.sync_api")
    _, page_file = whole_class
    ARTIFACTS.mkdir(exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1280, "height": 1600})
        refused: list[str] = []

        def route(request_route):
            if request_route.request.url.startswith(("file://", "data:")):
                request_route.continue_()
            else:
                refused.append(request_route.request.url)
                request_route.abort()

        context.route("**/*", route)
        page = context.new_page()
        page.goto(page_file.as_uri())
        page.wait_for_load_state("load")
        page.screenshot(path=str(ARTIFACTS / "mistake-report-top.png"))
        first = page.locator("table.mistakes").first
        first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "mistake-report-exercise.png"))
        images = page.evaluate(_IMAGES)
        tables = {
            kind: page.locator(f"table.{kind}").count()
            for kind in ("ranking", "mistakes", "unexplained", "students")
        }
        headings = page.locator("h2").all_inner_texts()
        browser.close()
    assert refused == []
    assert len(images) >= 10
    assert all(
        i["src"] == "data:image/png;base64," and i["w"] > 100 and i["h"] > 50 for i in images
    )
    assert tables["ranking"] >= 2 and tables["mistakes"] >= 10 and tables["students"] == 1
    assert tables["unexplained"] >= 1
    assert headings[0].startswith("The course") and "Per student" in headings[-2]
