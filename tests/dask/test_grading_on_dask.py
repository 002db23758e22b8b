"""``python -m encoder_lib.autograde`` on a real Dask scheduler with two workers on 127.0.0.1.

The same small class (see conftest.py) is graded several times from the same starting point:
once by plain ``nbgrader autograde`` with cold kernels (the reference), once on the cluster with
warm ones (the course's default: encoder_lib/autograde/warm_kernels.py), once on the cluster
while one worker is killed in the middle, and once stopped halfway and started again. Every
gradebook must equal the reference cell by cell, with exactly one submission per student and
assignment, and so must the verdicts kept in the autograded notebooks (the mistake and the
exercise of every test cell, which the instructor's report counts)."""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import UTC, datetime

import psutil
import pytest
from grading_cluster import (
    ASSIGNMENTS,
    copy_of,
    gradebook_rows,
    row_counts,
    stray_kernels,
    verdicts,
)
from pipeline import course as C
from pipeline import roster as R


@pytest.fixture(scope="module")
def plain(small_class, tmp_path_factory) -> C.Course:
    """The class graded by plain ``nbgrader autograde``, one assignment after the other, each
    kernel a new Python (cold): what warm kernels on Dask must reproduce cell by cell."""
    course = copy_of(small_class, tmp_path_factory.mktemp("plain"))
    for a in ASSIGNMENTS:
        course.nbgrader("autograde", a, "--JudgeExecute.kernels=cold", check=False)
    return course


@pytest.fixture(scope="module")
def on_dask(small_class, cluster, tmp_path_factory):
    course = copy_of(small_class, tmp_path_factory.mktemp("on-dask"))
    proc = course.grade("*", scheduler=cluster.address)
    return course, proc


def pairs(course: C.Course) -> set[tuple[str, str]]:
    root = course.root / "submitted"
    return {(p.parent.name, p.name) for p in root.glob("*/*") if p.is_dir()}


def test_plain_nbgrader_graded_everyone(plain):
    rows = gradebook_rows(plain)
    assert set(rows) == pairs(plain)
    for a in ASSIGNMENTS:
        layout = C.layout(C.source_notebook(a))
        ref = rows[R.REF, a]["notebooks"][layout.name]["grades"]
        blank = rows[R.BLANK, a]["notebooks"][layout.name]["grades"]
        # The reference is worth checking against: full marks here, nothing there.
        assert {name: v[0] for (kind, name), v in ref.items() if kind == "GradeCell"} == {
            cell: points for cell, points in layout.tests.items()
        }
        assert sum(v[0] or 0 for v in blank.values()) == 0


def test_grades_on_dask_equal_plain_nbgrader_cell_by_cell(plain, on_dask):
    course, proc = on_dask
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert gradebook_rows(course) == gradebook_rows(plain)
    assert row_counts(course) == row_counts(plain)


def test_verdicts_on_dask_equal_plain_nbgrader_and_the_reports_agree(plain, on_dask):
    from encoder_lib.autograde.report.data import build

    course, _ = on_dask
    recorded = verdicts(course)
    assert recorded == verdicts(plain)
    assert None not in recorded.values()
    blank = {v.mistake for (s, _, _), v in recorded.items() if s == R.BLANK}
    assert blank == {"not-written"}
    rows = [build(c.root, list(ASSIGNMENTS)).rows for c in (course, plain)]
    assert [r.csv() for r in rows[0]] == [r.csv() for r in rows[1]]


def test_dask_run_writes_autograded_notebooks_feedback_and_a_summary(plain, on_dask):
    course, proc = on_dask
    for student, a in pairs(course):
        name = C.layout(C.source_notebook(a)).name
        graded = course.root / "autograded" / student / a / f"{name}.ipynb"
        assert graded.is_file()
        assert (plain.root / "autograded" / student / a / f"{name}.ipynb").is_file()
        assert (course.root / "feedback" / student / a / f"{name}.html").is_file()
    n = len(pairs(course))
    assert f"graded {n}, flagged 0, failed 0, skipped 0" in proc.stdout
    ledger = course.ledger()
    assert sorted((e["student"], e["assignment"]) for e in ledger) == sorted(pairs(course))
    assert {e["status"] for e in ledger} == {"graded"}
    assert len({e["worker"] for e in ledger}) == 2, "both workers should have graded"
    assert not stray_kernels()


def test_second_run_grades_nothing_and_changes_nothing(on_dask, cluster):
    course, _ = on_dask
    before, lines = gradebook_rows(course, with_ids=True), len(course.ledger())
    kept = verdicts(course)
    again = course.grade("*", scheduler=cluster.address)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"graded 0, flagged 0, failed 0, skipped {len(pairs(course))}" in again.stdout
    assert gradebook_rows(course, with_ids=True) == before
    assert len(course.ledger()) == lines
    assert verdicts(course) == kept


def test_forced_regrade_updates_the_same_rows(on_dask, cluster):
    course, _ = on_dask
    before = gradebook_rows(course, with_ids=True)
    counts = row_counts(course)
    kept = verdicts(course)
    forced = course.grade(ASSIGNMENTS[0], "--force", "--student", R.REF, scheduler=cluster.address)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "graded 1, flagged 0, failed 0" in forced.stdout
    assert gradebook_rows(course, with_ids=True) == before  # same values, same row ids
    assert row_counts(course) == counts
    assert verdicts(course) == kept  # the regraded notebook's records replaced, not added


def test_killed_worker_loses_and_duplicates_nothing(small_class, plain, cluster, tmp_path):
    cluster.ensure_workers()
    course = copy_of(small_class, tmp_path)
    grading = subprocess.Popen(
        course.grade_command("*", scheduler=cluster.address),
        env=C.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    victim = "w1"
    try:
        # Wait until the victim is in the middle of a notebook: its kernel has run for a while.
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and grading.poll() is None:
            kernels = cluster.kernels_of(victim)
            if kernels and time.time() - min(k.create_time() for k in kernels) > 1.0:
                break
            time.sleep(0.1)
        assert grading.poll() is None, "grading ended before the victim got a submission"
        cluster.kill_worker(victim)
        killed_at = datetime.now(UTC)
        out, _ = grading.communicate(timeout=900)
    finally:
        if grading.poll() is None:
            grading.kill()
        cluster.ensure_workers()
    assert grading.returncode == 0, out
    rows = gradebook_rows(course)
    assert set(rows) == pairs(course)
    assert rows == gradebook_rows(plain)
    assert row_counts(course) == row_counts(plain)
    assert verdicts(course) == verdicts(plain)  # none lost, none doubled
    ledger = course.ledger()
    recorded = sorted((e["student"], e["assignment"]) for e in ledger)
    assert recorded == sorted(pairs(course)), "each submission recorded exactly once"
    assert {e["status"] for e in ledger} == {"graded"}
    # What was in flight on the victim was graded again, by the survivor alone.
    after = [e for e in ledger if datetime.fromisoformat(e["time"]) >= killed_at]
    assert after, "nothing was graded after the kill"
    survivors = {e["worker"] for e in after}
    assert len(survivors) == 1
    assert psutil.pid_exists(int(survivors.pop().rsplit(":", 1)[1]))


def test_interrupted_run_started_again_grades_only_what_is_missing(
    small_class, plain, cluster, tmp_path
):
    cluster.ensure_workers()
    course = copy_of(small_class, tmp_path)
    first = subprocess.Popen(
        course.grade_command("*", scheduler=cluster.address),
        env=C.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600
        while len(course.ledger()) < 2 and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.1)
        assert first.poll() is None, "the first run ended before it could be interrupted"
        first.send_signal(signal.SIGKILL)  # no chance to tidy up: the harshest interruption
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    autograded = course.root / "autograded"
    graded_first = {(s, a) for s, a in pairs(course) if (autograded / s / a).is_dir()}
    assert 2 <= len(graded_first) < len(pairs(course))
    lines = len(course.ledger())

    second = course.grade("*", scheduler=cluster.address)
    assert second.returncode == 0, second.stdout + second.stderr
    graded_second = [(e["student"], e["assignment"]) for e in course.ledger()[lines:]]
    assert sorted(graded_second) == sorted(pairs(course) - graded_first)
    assert f"skipped {len(graded_first)}" in second.stdout
    assert gradebook_rows(course) == gradebook_rows(plain)
    assert row_counts(course) == row_counts(plain)
    assert verdicts(course) == verdicts(plain)
