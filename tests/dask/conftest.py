"""A real Dask cluster on 127.0.0.1 and a small class for it to grade.

``cluster`` starts one ``dask scheduler`` and two ``dask worker`` processes (one thread each, each
under its nanny, in a session of its own so that a test can kill one whole) as subprocesses for
the test session and stops them afterwards. ``small_class`` builds, once, a course with two fast
assignments and a few students made with tests/pipeline's builders; tests grade copies of it.
There is no ``__init__.py`` here on purpose: a package named ``dask`` would hide the real one.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from grading_cluster import ASSIGNMENTS, Cluster, students_for
from pipeline import course as C


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dask-cluster")
    info = folder / "scheduler.json"
    scheduler = subprocess.Popen(
        [
            str(C.VENV_BIN / "dask"),
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--scheduler-file",
            str(info),
        ],
        env=C.env(),
        stdout=(folder / "scheduler.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not info.is_file() and time.monotonic() < deadline and scheduler.poll() is None:
        time.sleep(0.2)
    if not info.is_file():
        scheduler.kill()
        pytest.fail("dask scheduler did not start:\n" + (folder / "scheduler.log").read_text())
    running = Cluster(folder, scheduler, json.loads(info.read_text())["address"])
    try:
        running.ensure_workers()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def small_class(tmp_path_factory) -> C.Course:
    """A course (generated, students imported, submissions written) nobody has graded."""
    for a in ASSIGNMENTS:
        reason = C.missing_reason(a)
        if reason:
            pytest.skip(reason)
    course = C.Course.create(tmp_path_factory.mktemp("class") / "course", list(ASSIGNMENTS))
    course.generate("*")
    students = set()
    for i, a in enumerate(ASSIGNMENTS):
        layout = C.layout(C.source_notebook(a))
        blank = C.read(course.release_path(a, layout.name))
        for student, nb in students_for(layout, blank, raising=i == 1).items():
            course.submit(student, a, layout.name, nb)
            students.add(student)
    course.add_students(sorted(students))
    return course
