"""Re-execute the solution notebooks and regenerate the student versions.

    python -m tools.build_course execute [ASSIGNMENT ...]   # run solutions/ in place, keep outputs
    python -m tools.build_course release [ASSIGNMENT ...]   # solutions/ -> notebooks/ via nbgrader
    python -m tools.build_course check                      # fail if notebooks/ is out of date

``release`` runs ``nbgrader generate_assignment`` in a throwaway copy of the course, so no
gradebook is written into the repository. ``make notebooks`` runs execute then release.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
RELEASE = ROOT / "notebooks"


def assignments() -> list[str]:
    """Assignment folders in course order (their names start with a two-digit number)."""
    return sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and p.name[:2].isdigit())


def _env() -> dict[str, str]:
    """Subprocesses use this interpreter's environment (its nbgrader, its python3 kernel)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def execute(names: list[str]) -> None:
    """Execute each solution notebook top to bottom and save it with its outputs."""
    import nbformat
    from nbclient import NotebookClient

    for name in names:
        for path in sorted((SOLUTIONS / name).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            client = NotebookClient(
                nb,
                timeout=600,
                kernel_name="python3",
                record_timing=False,
                resources={"metadata": {"path": str(path.parent)}},
            )
            client.execute()
            for cell in nb.cells:  # timestamps of the run: noise in diffs
                cell.metadata.pop("execution", None)
            # The widgets' saved state holds random model ids and a copy of every figure they
            # drew: noise in diffs, and nbval ignores widgets anyway.
            nb.metadata.pop("widgets", None)
            nbformat.write(nb, path)
            print(f"executed {path.relative_to(ROOT)}")


def generate(names: list[str], out: Path) -> None:
    """Run ``nbgrader generate_assignment`` for ``names`` in a temporary course; copy the student
    versions to ``out/<assignment>/``."""
    with tempfile.TemporaryDirectory() as tmp:
        course = Path(tmp)
        shutil.copy(ROOT / "nbgrader_config.py", course)
        for name in names:
            shutil.copytree(
                SOLUTIONS / name,
                course / "solutions" / name,
                ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"),
            )
        # One nbgrader process for every assignment copied ("*"): its start-up, paid once, took
        # most of the time when each assignment had its own (11 processes, about 10 s each).
        subprocess.run(
            ["nbgrader", "generate_assignment", "*", "--force", "--log-level=WARN"],
            cwd=course,
            env=_env(),
            check=True,
        )
        for name in names:
            shutil.rmtree(out / name, ignore_errors=True)
            shutil.copytree(course / "notebooks" / name, out / name)


def release(names: list[str]) -> None:
    RELEASE.mkdir(exist_ok=True)
    generate(names, RELEASE)
    for name in names:
        print(f"released notebooks/{name}")


def ignored_by_git(folder: Path, paths: set[Path]) -> set[Path]:
    """The ``paths`` (relative to ``folder``) that git ignores: JupyterLab's
    ``.ipynb_checkpoints/`` once a notebook was opened, ``__pycache__/``. Outside a git checkout,
    the folders .gitignore names for that reason."""
    if not paths:
        return set()
    try:
        done = subprocess.run(
            ["git", "check-ignore", "--no-index", "--stdin", "-z"],
            cwd=folder,
            input="\0".join(str(p) for p in sorted(paths)),
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:  # no git on this machine
        done = None
    if done is not None and done.returncode in (0, 1):  # 1: nothing is ignored
        return {Path(p) for p in done.stdout.split("\0") if p}
    return {p for p in paths if {".ipynb_checkpoints", "__pycache__"} & set(p.parts)}


def stale() -> list[str]:
    """Paths under notebooks/ that differ from what nbgrader makes from solutions/ now."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(assignments(), fresh)
        expected = {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}
        actual = {p.relative_to(RELEASE) for p in RELEASE.rglob("*") if p.is_file()}
        actual -= ignored_by_git(RELEASE, actual)
        problems += [f"missing notebooks/{p}" for p in sorted(expected - actual)]
        problems += [f"unexpected notebooks/{p}" for p in sorted(actual - expected)]
        for rel in sorted(expected & actual):
            a, b = fresh / rel, RELEASE / rel
            same = (
                json.loads(a.read_text()) == json.loads(b.read_text())
                if rel.suffix == ".ipynb"
                else a.read_bytes() == b.read_bytes()
            )
            if not same:
                problems.append(f"out of date: notebooks/{rel}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["execute", "release", "check"])
    parser.add_argument("assignments", nargs="*", help="default: all")
    args = parser.parse_args()
    names = args.assignments or assignments()
    if args.command == "execute":
        execute(names)
    elif args.command == "release":
        release(names)
    else:
        problems = stale()
        for p in problems:
            print(p)
        if problems:
            sys.exit("notebooks/ is out of date: run `make notebooks` and commit the result")
        print("notebooks/ is up to date")


if __name__ == "__main__":
    main()
