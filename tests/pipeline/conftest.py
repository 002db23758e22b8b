"""One synthetic class, graded once per test session with the real nbgrader commands.

``graded`` builds a course from this repository's nbgrader_config.py and solutions/, writes one
submission per case (see ``roster``), collects two more with ``zip_collect``, autogrades every
assignment (``python -m encoder_lib.autograde`` on a local Dask cluster of PIPELINE_WORKERS
processes, default 2), generates the feedback and exports the grades. The tests only read the
results.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pipeline import course as C
from pipeline import roster as R

WORKERS = int(os.environ.get("PIPELINE_WORKERS", "2"))


@dataclass
class Graded:
    course: C.Course
    plan: R.Plan
    grades: list[dict[str, str]]
    """The rows of `nbgrader export`'s CSV."""
    logs: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def scores(self, student: str, assignment: str) -> dict[str, float]:
        return self.course.cell_scores(student, assignment, self.plan.layouts[assignment].name)

    def total(self, student: str, assignment: str) -> float:
        """The student's score for the assignment in the exported CSV."""
        rows = [
            r for r in self.grades if r["student_id"] == student and r["assignment"] == assignment
        ]
        assert len(rows) == 1, f"{len(rows)} rows for {student}/{assignment} in grades.csv"
        return float(rows[0]["score"])

    def feedback(self, student: str, assignment: str) -> str:
        return self.course.feedback_text(student, assignment, self.plan.layouts[assignment].name)

    def autograded(self, student: str, assignment: str) -> Path:
        name = self.plan.layouts[assignment].name
        return self.course.root / "autograded" / student / assignment / f"{name}.ipynb"


@pytest.fixture(scope="session")
def graded(tmp_path_factory, request) -> Graded:
    present = C.graded_assignments()
    if not present:
        pytest.skip("no assignment notebook in solutions/ yet")
    seconds: dict[str, float] = {}
    logs: dict[str, str] = {}

    def timed(step, fn, *args):
        start = time.perf_counter()
        out = fn(*args)
        seconds[step] = seconds.get(step, 0.0) + time.perf_counter() - start
        return out

    course = C.Course.create(tmp_path_factory.mktemp("course"), present)
    timed("generate_assignment", course.generate, "*")
    plan = R.make_plan(present)
    R.write_submissions(course, plan)
    course.add_students(sorted(plan.students))

    a = plan.zip_assignment
    logs["zip_collect"] = timed(
        "zip_collect",
        lambda: (
            course.nbgrader(
                "zip_collect", a, f"--FileNameCollectorPlugin.named_regexp={R.ZIP_REGEX}"
            ).stderr
        ),
    )

    if plan.loop:
        proc = timed(
            "autograde (loop)",
            lambda: course.nbgrader(
                "autograde",
                plan.loop,
                f"--student={R.LOOP}",
                f"--Execute.timeout={R.LOOP_TIMEOUT}",
                check=False,
            ),
        )
        logs["loop"] = proc.stdout + proc.stderr
    logs["autograde"] = timed("autograde", lambda: course.autograde("*", workers=WORKERS))
    readers = [*sorted(s for s in plan.students if s.startswith(("bug-", "cheat-"))), R.REF]
    logs["feedback"] = timed("generate_feedback", course.feedback, "*", readers)
    grades = timed("export", course.export)
    # Into the run's log (not captured): where the class's grading time went.
    line = "pipeline timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items())
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print("\n" + line, flush=True)
    return Graded(course, plan, grades, logs, seconds)
