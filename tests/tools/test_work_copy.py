"""The students' working copy (tools/work_copy.py, `make lab`): made from notebooks/ once, then
only added to; regenerating the course with the real commands never touches it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import build_course, work_copy
from tools.build_course import ROOT

FIRST = "01_self_attention"


def _course(root: Path, *names: str) -> None:
    """notebooks/ with one folder per name, each holding its notebook."""
    for name in names:
        (root / "notebooks" / name).mkdir(parents=True)
        (root / "notebooks" / name / f"{name}.ipynb").write_text(f'{{"released": "{name}"}}')


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_first_run_copies_every_notebook_and_no_checkpoint(tmp_path):
    _course(tmp_path, "01_a", "02_b")
    checkpoints = tmp_path / "notebooks" / "01_a" / ".ipynb_checkpoints"
    checkpoints.mkdir()
    (checkpoints / "01_a-checkpoint.ipynb").write_text("{}")
    copied = work_copy.update(tmp_path / "notebooks", tmp_path / "work")
    assert [str(p) for p in copied] == ["01_a/01_a.ipynb", "02_b/02_b.ipynb"]
    assert not (tmp_path / "work" / "01_a" / ".ipynb_checkpoints").exists()


def test_later_runs_add_what_is_new_and_touch_nothing_there(tmp_path):
    _course(tmp_path, "01_a")
    work = tmp_path / "work"
    work_copy.update(tmp_path / "notebooks", work)
    mine = work / "01_a" / "01_a.ipynb"
    mine.write_text('{"my": "answers"}')
    (work / "01_a" / "notes.txt").write_text("mine too")
    before = _snapshot(work)
    # the course changes: the notebook is regenerated, a new one arrives
    (tmp_path / "notebooks" / "01_a" / "01_a.ipynb").write_text('{"released": "again"}')
    _course(tmp_path, "02_b")
    copied = work_copy.update(tmp_path / "notebooks", work)
    assert [str(p) for p in copied] == ["02_b/02_b.ipynb"]
    after = _snapshot(work)
    assert {k: after[k] for k in before} == before
    assert work_copy.update(tmp_path / "notebooks", work) == []


def test_make_lab_serves_the_working_copy_it_makes_first():
    dry_run = subprocess.run(
        ["make", "--no-print-directory", "-n", "-o", "setup", "lab"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert dry_run.returncode == 0, dry_run.stderr
    lines = dry_run.stdout.splitlines()
    assert lines[0].endswith("python tools/work_copy.py notebooks work")
    assert "--ServerApp.root_dir=work" in dry_run.stdout
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "work/01_self_attention/01_self_attention.ipynb"], cwd=ROOT
    )
    assert ignored.returncode == 0, "git must ignore work/"


@pytest.mark.slow  # three nbgrader runs: about a minute here (make test runs it)
def test_regenerating_the_course_never_touches_the_working_copy(tmp_path):
    """The real commands, in a copy of the course: `tools.build_course release` and `nbgrader
    generate_assignment --force` rewrite notebooks/; the student's answers in work/ stay."""
    course = tmp_path / "course"
    shutil.copytree(ROOT / "solutions" / FIRST, course / "solutions" / FIRST)
    shutil.copy2(ROOT / "nbgrader_config.py", course)
    (course / "tools").mkdir()
    for name in ("__init__.py", "build_course.py", "work_copy.py"):
        shutil.copy2(ROOT / "tools" / name, course / "tools" / name)
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"

    def run(*command: str) -> None:
        done = subprocess.run(command, cwd=course, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr

    run(sys.executable, "-m", "tools.build_course", "release", FIRST)
    run(sys.executable, "tools/work_copy.py")  # what `make lab` runs, with its defaults
    released = course / "notebooks" / FIRST / f"{FIRST}.ipynb"
    mine = course / "work" / FIRST / f"{FIRST}.ipynb"
    assert mine.read_bytes() == released.read_bytes()
    mine.write_text(mine.read_text().replace("raise NotImplementedError()", "return 42  # mine"))
    (released.parent / ".ipynb_checkpoints").mkdir()  # JupyterLab opened the released one
    before = _snapshot(course / "work")

    run(sys.executable, "-m", "tools.build_course", "release", FIRST)
    run("nbgrader", "generate_assignment", FIRST, "--force", "--log-level=WARN")
    run(sys.executable, "tools/work_copy.py")

    assert _snapshot(course / "work") == before
    assert "# mine" in mine.read_text() and "# mine" not in released.read_text()


def test_what_jupyterlab_writes_beside_the_release_is_not_unexpected():
    """`tools.build_course check` (make quick, make test) skips what git ignores, so opening a
    notebook in notebooks/ (a checkpoint) does not make the release look stale."""
    first = Path(FIRST)
    opened = {
        first / f"{FIRST}.ipynb",
        first / ".ipynb_checkpoints" / f"{FIRST}-checkpoint.ipynb",
        first / "__pycache__" / "x.cpython-311.pyc",
        first / "notes.ipynb",
    }
    ignored = {opened_path for opened_path in opened if opened_path.parts[1].startswith((".", "_"))}
    assert build_course.ignored_by_git(build_course.RELEASE, opened) == ignored
