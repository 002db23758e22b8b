"""Helpers of the Dask grading tests: the cluster's processes, the class, reading a gradebook.

(Not in conftest.py, so that the tests can import them by a name no other folder uses.)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from nbgrader.api import Gradebook
from pipeline import cheats as K
from pipeline import course as C
from pipeline import roster as R

ASSIGNMENTS = ("01_self_attention", "04_feed_forward")  # the two that grade fastest
WORKERS = ("w0", "w1")


@dataclass
class Cluster:
    folder: Path
    scheduler: subprocess.Popen
    address: str
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start_worker(self, name: str) -> None:
        log = (self.folder / f"{name}.log").open("ab")
        self.workers[name] = subprocess.Popen(
            [
                str(C.VENV_BIN / "dask"),
                "worker",
                self.address,
                "--name",
                name,
                "--nthreads",
                "1",
                "--no-dashboard",
                "--host",
                "127.0.0.1",
            ],
            env=C.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_for_workers(self, n: int, timeout: float = 180) -> None:
        from distributed import Client

        with Client(self.address, timeout="60s") as client:
            client.wait_for_workers(n, timeout=timeout)

    def ensure_workers(self) -> None:
        """Restart any worker a test killed, and wait until all are connected."""
        for name in WORKERS:
            proc = self.workers.get(name)
            if proc is None or proc.poll() is not None:
                self.start_worker(name)
        self.wait_for_workers(len(WORKERS))

    def kernels_of(self, name: str) -> list[psutil.Process]:
        """The Jupyter kernels running under a worker (its grading in progress): cold ones run
        ipykernel; warm ones are children of the worker's warm kernel source, whose command line
        they keep (they are forked, not started: encoder_lib/autograde/warm_kernels.py)."""
        try:
            tree = psutil.Process(self.workers[name].pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        out = []
        for p in tree:
            try:
                if "ipykernel" in " ".join(p.cmdline()) or _is_warm_kernel(p):
                    out.append(p)
            except psutil.Error:
                continue
        return out

    def kill_worker(self, name: str) -> None:
        """SIGKILL a worker's nanny, worker process and kernels at once (a machine that dies)."""
        proc = self.workers[name]
        try:
            family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            family = []
        for p in family:
            with contextlib.suppress(psutil.Error):
                p.kill()
        proc.wait(timeout=30)

    def stop(self) -> None:
        for name in list(self.workers):
            self.kill_worker(name)
        self.scheduler.send_signal(signal.SIGTERM)
        try:
            self.scheduler.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.scheduler.kill()


# --- the class -----------------------------------------------------------------------------------


def students_for(layout: C.Layout, blank, raising: bool) -> dict[str, object]:
    """Three students per assignment, made with tests/pipeline's builders (see roster.py)."""
    ref = C.with_cells(blank, layout.reference)
    last = R.last_exercise(layout)
    out = {
        R.REF: ref,
        R.BLANK: blank,
        R.ONE_WRONG: C.with_cells(ref, {last: K.zeroed(layout, last)}),
    }
    if raising:  # a raising cell of the student's own below setup: not run, the rest graded
        out[R.RAISES_FIRST] = C.with_cell_after(
            ref, "setup", 'raise RuntimeError("a typo here")\n', "after-setup"
        )
    return out


def copy_of(course: C.Course, folder: Path) -> C.Course:
    shutil.copytree(course.root, folder / "course")
    return C.Course(folder / "course")


# --- reading a gradebook -------------------------------------------------------------------------


def gradebook_rows(course: C.Course, with_ids: bool = False) -> dict:
    """Every submission of the gradebook, cell by cell: (student, assignment) -> its timestamp and,
    per notebook, the late penalty, the flag and every grade and comment row (auto score, manual
    score, needs manual grade; auto comment). ``with_ids`` adds the rows' database ids."""
    out = {}
    with Gradebook(course.db_url, "transformer-encoder-lab") as gb:
        for assignment in gb.assignments:
            for sub in gb.assignment_submissions(assignment.name):
                notebooks = {}
                for nb in sub.notebooks:
                    grades = {
                        (g.cell.type, g.name): (g.auto_score, g.manual_score, g.needs_manual_grade)
                        + ((g.id,) if with_ids else ())
                        for g in nb.grades
                    }
                    comments = {
                        (c.cell.type, c.name): (c.auto_comment,) + ((c.id,) if with_ids else ())
                        for c in nb.comments
                    }
                    notebooks[nb.name] = {
                        "late_submission_penalty": nb.late_submission_penalty,
                        "flagged": nb.flagged,
                        "grades": grades,
                        "comments": comments,
                        **({"id": nb.id} if with_ids else {}),
                    }
                key = (sub.student.id, assignment.name)
                assert key not in out, f"two submissions of {key}"
                out[key] = {
                    "timestamp": sub.timestamp,
                    "notebooks": notebooks,
                    **({"id": sub.id} if with_ids else {}),
                }
    return out


def verdicts(course: C.Course) -> dict[tuple[str, str, str], object]:
    """The verdict autograde recorded for every test cell of every autograded notebook:
    (student, assignment, test cell) -> ``records.Verdict`` (None: no record)."""
    from encoder_lib.autograde import records

    return {
        (path.parent.parent.name, path.parent.name, cell): verdict
        for path in sorted((course.root / "autograded").glob("*/*/*.ipynb"))
        for cell, verdict in records.read_notebook(path)
    }


def row_counts(course: C.Course) -> dict[str, int]:
    """How many rows each submission table holds (a duplicate would show here)."""
    import sqlite3

    with sqlite3.connect(course.root / "gradebook.db") as db:
        return {
            t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("submitted_assignment", "submitted_notebook", "grade", "comment")
        }


def stray_kernels() -> list[str]:
    """Processes still running in a throwaway grading folder (a kernel nobody stopped)."""
    from encoder_lib.autograde import scratch

    prefix = os.path.join(str(scratch.scratch_root()), "grade-")
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.cwd().startswith(prefix):
                out.append(f"{p.pid} {' '.join(p.info['cmdline'] or [])[:120]} in {p.cwd()}")
        except psutil.Error:
            continue
    return out


def _is_warm_kernel(p: psutil.Process) -> bool:
    """A child of a warm kernel source (the source itself is the worker's child)."""
    source = "encoder_lib.autograde.warm_kernels"
    parent = p.parent()
    return (
        source in " ".join(p.cmdline())
        and parent is not None
        and source in " ".join(parent.cmdline())
    )
