"""A throwaway nbgrader course built from this repository, driven through the real commands.

``Course.create`` copies ``nbgrader_config.py`` and ``solutions/`` into a folder, lets ``nbgrader
generate_assignment`` write the student versions; submissions made from those versions go into
``submitted/<student>/<assignment>/<notebook>.ipynb``, are graded with nbgrader's own autograde,
run on Dask workers by ``python -m encoder_lib.autograde`` (or plain ``nbgrader autograde``), and
the scores are read back from the gradebook and ``nbgrader export``'s CSV, never from exit codes.

The end-to-end tests (``tests/pipeline``, ``tests/dask``, which add the answers of
``tests/variants`` in ``tests/pipeline/course.py``) and ``bench/bench_grading.py`` both build
their classes with it. ``PIPELINE_REPO`` points it at another checkout with the same layout (used
to develop it against a small demo course).
"""

from __future__ import annotations

import ast
import copy
import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry

__all__ = [
    "REPO",
    "REPO_DEFAULT",
    "SOLUTION_MARKERS",
    "VENV_BIN",
    "Course",
    "Layout",
    "NbgraderError",
    "defined_name",
    "env",
    "grade_id",
    "html_text",
    "is_answer",
    "is_test",
    "layout",
    "read",
    "says",
    "slug",
    "source_notebook",
    "with_cell_after",
    "with_cells",
    "with_first_cell",
    "without_cell",
]

REPO_DEFAULT = Path(__file__).resolve().parents[1]
REPO = Path(os.environ.get("PIPELINE_REPO") or REPO_DEFAULT)
VENV_BIN = Path(sys.executable).parent

SOLUTION_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.MULTILINE)


def env() -> dict[str, str]:
    """The environment of every nbgrader command: the venv first on PATH, so that ``nbgrader``
    and the ``python3`` kernel are this interpreter's."""
    e = dict(os.environ)
    e["PATH"] = f"{VENV_BIN}{os.pathsep}{e.get('PATH', '')}"
    e.pop("JUPYTER_CONFIG_DIR", None)
    e.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return e


# --- what the repository holds -------------------------------------------------------------------


def source_notebook(assignment: str) -> Path | None:
    """``solutions/<assignment>/<assignment>.ipynb`` (or the folder's only notebook)."""
    folder = REPO / "solutions" / assignment
    preferred = folder / f"{assignment}.ipynb"
    if preferred.is_file():
        return preferred
    found = sorted(folder.glob("*.ipynb")) if folder.is_dir() else []
    return found[0] if len(found) == 1 else None


# --- notebooks -----------------------------------------------------------------------------------


def grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def is_answer(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("solution")) and not meta.get("grade")


def is_test(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


@dataclass
class Layout:
    """The graded structure of one source notebook."""

    name: str
    """Notebook name without ``.ipynb``."""
    answers: list[str]
    """Answer cells' grade_ids, in order."""
    tests: dict[str, float]
    """Test cells' grade_ids and points, in order."""
    reference: dict[str, str]
    """The solution's source of each answer cell, markers removed."""
    own_tests: dict[str, list[str]] = field(default_factory=dict)
    """Answer grade_id -> the test cells between it and the next answer cell."""
    defines: dict[str, str] = field(default_factory=dict)
    """Answer grade_id -> the name of the function or class the cell defines."""

    @property
    def max_score(self) -> float:
        return sum(self.tests.values())


def layout(path: Path) -> Layout:
    nb = nbformat.read(path, as_version=4)
    answers, tests, reference, own, defines = [], {}, {}, {}, {}
    current = None
    for cell in nb.cells:
        if is_answer(cell):
            current = grade_id(cell)
            answers.append(current)
            reference[current] = SOLUTION_MARKERS.sub("", cell.source)
            own[current] = []
            defines[current] = defined_name(reference[current])
        elif is_test(cell):
            tests[grade_id(cell)] = float(cell.metadata["nbgrader"]["points"])
            if current is not None:
                own[current].append(grade_id(cell))
    return Layout(path.stem, answers, tests, reference, own, defines)


def defined_name(source: str) -> str:
    """The last top-level ``def``/``class`` name of an answer cell ("" if none)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    names = [
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    return names[-1] if names else ""


def read(path: Path):
    return nbformat.read(path, as_version=4)


def with_cells(nb, sources: dict[str, str]):
    """A copy of ``nb`` whose cells with these grade_ids hold these sources."""
    nb = copy.deepcopy(nb)
    left = dict(sources)
    for cell in nb.cells:
        if grade_id(cell) in left:
            cell.source = left.pop(grade_id(cell))
    if left:
        raise KeyError(f"no cells with grade_id {sorted(left)} in the notebook")
    return nb


def without_cell(nb, gid: str):
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if grade_id(c) != gid]
    return nb


def with_first_cell(nb, source: str):
    """A copy of ``nb`` with a new (student) code cell inserted before every other cell."""
    nb = copy.deepcopy(nb)
    cell = nbformat.v4.new_code_cell(source)
    cell["id"] = "student-first-cell"
    nb.cells.insert(0, cell)
    return nb


def with_cell_after(nb, grade_id_before: str, source: str, cell_id: str):
    """A copy of ``nb`` with a new (student) code cell right after the cell ``grade_id_before``."""
    nb = copy.deepcopy(nb)
    cell = nbformat.v4.new_code_cell(source)
    cell["id"] = cell_id
    index = [grade_id(c) for c in nb.cells].index(grade_id_before)
    nb.cells.insert(index + 1, cell)
    return nb


# --- the course ----------------------------------------------------------------------------------


def slug(text: str) -> str:
    """``text`` as part of a student id: runs of anything but letters, digits and ``-`` become
    one ``-``."""
    return re.sub(r"[^A-Za-z0-9-]+", "-", text).strip("-")


class NbgraderError(RuntimeError):
    pass


@dataclass
class Course:
    """A course folder: nbgrader_config.py, solutions/, notebooks/, submitted/, gradebook.db."""

    root: Path

    @classmethod
    def create(cls, root: Path, assignments: list[str]) -> Course:
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "nbgrader_config.py", root / "nbgrader_config.py")
        for a in assignments:
            shutil.copytree(
                REPO / "solutions" / a,
                root / "solutions" / a,
                ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"),
            )
        return cls(root)

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.root / 'gradebook.db'}"

    def nbgrader(self, *args: str, check: bool = True, timeout: float = 900):
        """Run ``nbgrader ARGS`` in the course folder; returns the CompletedProcess."""
        proc = subprocess.run(
            [str(VENV_BIN / "nbgrader"), *args],
            cwd=self.root,
            env=env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise NbgraderError(
                f"nbgrader {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
            )
        return proc

    def add_students(self, students: list[str]) -> None:
        """``nbgrader db student import`` (one command, however many students)."""
        table = self.root / "students.csv"
        with table.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["id", "last_name", "first_name", "email"])
            for s in students:
                writer.writerow([s, s, "Test", f"{s}@example.org"])
        self.nbgrader("db", "student", "import", str(table))

    def generate(self, assignment: str = "*") -> None:
        """``nbgrader generate_assignment`` (which also adds the assignment to the gradebook);
        ``"*"``: every assignment in solutions/, with one command."""
        self.nbgrader("generate_assignment", assignment, "--force")

    def release_path(self, assignment: str, notebook: str) -> Path:
        return self.root / "notebooks" / assignment / f"{notebook}.ipynb"

    def submit(self, student: str, assignment: str, notebook: str, nb_or_text) -> Path:
        """Write a submission; ``nb_or_text`` is a notebook node or the file's raw text."""
        folder = self.root / "submitted" / student / assignment
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{notebook}.ipynb"
        if isinstance(nb_or_text, str):
            path.write_text(nb_or_text)
        else:
            nbformat.write(nb_or_text, path)
        (folder / "timestamp.txt").write_text("2030-01-01 12:00:00.000000 UTC")
        return path

    def grade_command(
        self, assignment: str, *options: str, workers: int = 1, scheduler: str | None = None
    ) -> list[str]:
        """``python -m encoder_lib.autograde ASSIGNMENT`` for this course: on a local cluster of
        ``workers`` processes, or on the Dask ``scheduler`` given. ``options`` are the command's
        own; put nbgrader settings after ``"--"``."""
        where = ["--scheduler", scheduler] if scheduler else ["--workers", str(workers)]
        return [
            str(VENV_BIN / "python"),
            "-m",
            "encoder_lib.autograde",
            assignment,
            "--course-dir",
            str(self.root),
            *where,
            *options,
        ]

    def grade(self, assignment: str, *options: str, workers: int = 1, scheduler=None, timeout=3600):
        """Run ``grade_command``; returns the CompletedProcess (exit status 1 when a submission
        was flagged or failed, so it is not checked here)."""
        return subprocess.run(
            self.grade_command(assignment, *options, workers=workers, scheduler=scheduler),
            cwd=self.root,
            env=env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def autograde(self, assignment: str, *extra: str, workers: int = 1) -> str:
        """Grade every submission of ``assignment`` not graded yet, on a local Dask cluster of
        ``workers`` processes (``extra``: nbgrader settings such as ``--Execute.timeout=15``);
        returns the command's output and nbgrader's log of every flagged submission."""
        proc = self.grade(assignment, *(["--", *extra] if extra else []), workers=workers)
        logs = sorted((self.root / "logs" / "autograde").glob("*/*.log"))
        return proc.stdout + proc.stderr + "".join(p.read_text() for p in logs)

    def ledger(self) -> list[dict]:
        """The lines of ``logs/grading.jsonl``: one per result the grading command recorded."""
        path = self.root / "logs" / "grading.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def feedback(self, assignment: str, students: list[str] | None = None) -> str:
        """``nbgrader generate_feedback`` for every graded student, or only ``students``."""
        args = ["generate_feedback", assignment, "--force"]
        if students is not None:
            graded = self.root / "autograded"
            others = sorted(p.name for p in graded.iterdir() if p.name not in students)
            if others:
                args.append("--CourseDirectory.student_id_exclude=" + ",".join(others))
        proc = self.nbgrader(*args, check=False)
        return proc.stdout + proc.stderr

    def feedback_text(self, student: str, assignment: str, notebook: str) -> str:
        """The feedback HTML as plain text (tags removed, entities decoded, spaces collapsed)."""
        path = self.root / "feedback" / student / assignment / f"{notebook}.html"
        return html_text(path.read_text())

    def export(self) -> list[dict[str, str]]:
        out = self.root / "grades.csv"
        self.nbgrader("export", "--to", str(out))
        with out.open(newline="") as f:
            return list(csv.DictReader(f))

    def cell_scores(self, student: str, assignment: str, notebook: str) -> dict[str, float]:
        """Score of every test cell of one submitted notebook, from the gradebook."""
        with Gradebook(self.db_url) as gb:
            try:
                nb = gb.find_submission_notebook(notebook, assignment, student)
            except MissingEntry:
                return {}
            return {g.name: float(g.score) for g in nb.grades if g.cell.cell_type == "code"}

    def needs_manual_grade(self, student: str, assignment: str, notebook: str) -> bool:
        with Gradebook(self.db_url) as gb:
            return bool(
                gb.find_submission_notebook(notebook, assignment, student).needs_manual_grade
            )

    def submissions(self) -> list[tuple[str, str]]:
        """Every (assignment, student) submission row in the gradebook."""
        with Gradebook(self.db_url) as gb:
            return [
                (a.name, s.student.id)
                for a in gb.assignments
                for s in gb.assignment_submissions(a.name)
            ]


def html_text(page: str) -> str:
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.DOTALL | re.IGNORECASE)
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    return re.sub(r"\s+", " ", text)


def says(text: str, words: str) -> bool:
    """Whether ``text`` contains ``words`` (case- and whitespace-insensitive)."""
    return re.sub(r"\s+", " ", words).strip().lower() in text.lower()
