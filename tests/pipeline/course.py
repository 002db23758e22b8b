"""The pipeline's course: ``tools/throwaway_course.py`` (the course folder, its notebooks and
nbgrader's commands), plus what comes from ``tests/variants``: which assignments the class
submits and each one's buggy and correct answers.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from tools.throwaway_course import *  # noqa: F403
from tools.throwaway_course import REPO, REPO_DEFAULT, source_notebook


def graded_assignments() -> list[str]:
    """The assignments the pipeline's class submits: every one in solutions/, or those named in
    ``PIPELINE_ASSIGNMENTS`` (comma separated: a quicker loop while working on one notebook's
    grading, e.g. ``PIPELINE_ASSIGNMENTS=03_layer_norm pytest tests/pipeline/test_integrity.py``;
    CI grades them all). The tests of another assignment skip; test_mistake_report.py counts
    the whole class's mistakes and is only meaningful without it."""
    present = [a for a in expected_assignments() if source_notebook(a) is not None]
    chosen = os.environ.get("PIPELINE_ASSIGNMENTS")
    return [a for a in present if a in chosen.split(",")] if chosen else present


def expected_assignments() -> list[str]:
    """The course's assignments: those named in tests/variants plus any folder in solutions/."""
    import variants

    names = set(variants.ASSIGNMENTS) if REPO == REPO_DEFAULT else set()
    solutions = REPO / "solutions"
    if solutions.is_dir():
        names |= {p.name for p in solutions.iterdir() if p.is_dir() and not p.name.startswith(".")}
    return sorted(names)


def variants_file(assignment: str) -> Path:
    return REPO / "tests" / "variants" / f"a{assignment}.py"


def load_variants(assignment: str):
    """``(BUGGY, CORRECT)`` from ``tests/variants/a<assignment>.py``, or None if it is missing."""
    path = variants_file(assignment)
    if not path.is_file():
        return None
    name = f"variants.a{assignment}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        module = sys.modules[name]
    else:
        import variants  # noqa: F401  (the parent package the modules import Variant from)

        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return list(module.BUGGY), list(module.CORRECT)


def missing_reason(assignment: str, need_variants: bool = False) -> str | None:
    """Why an assignment cannot be tested yet (None when it can)."""
    if source_notebook(assignment) is None:
        return f"solutions/{assignment}/{assignment}.ipynb does not exist yet"
    if need_variants and not variants_file(assignment).is_file():
        return f"tests/variants/a{assignment}.py does not exist yet"
    return None
