"""Build the student edition (what a class publishes for its students) and Binder's pin list.

    python -m tools.student_edition build OUT [--repo OWNER/NAME] [--branch BRANCH]
    python -m tools.student_edition binder        # rewrite binder/requirements.txt
    python -m tools.student_edition check         # fail if binder/requirements.txt is stale

The student edition holds ``notebooks/`` (the student versions), ``encoder_lib/`` without the
instructor's ``autograde/`` package, ``pyproject.toml``, a complete ``requirements.txt``,
``binder/``, a ``Makefile`` with ``make lab`` (which serves ``work/``, the student's own copy of
``notebooks/``, made by ``tools/work_copy.py``, the one file of ``tools/`` it ships) and a README
with Binder and Colab links. It holds no ``solutions/``, no hidden tests, no ``tests/`` (the
variants are answers too) and no nbgrader configuration. ``--repo`` and ``--branch`` name where
it will be published: the links and the notebooks' Colab install line point there (default: the
``OWNER`` placeholder of this repository's own links).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from tools.build_course import RELEASE, ROOT

PLACEHOLDER_REPO = "OWNER/transformer-encoder-lab"
PLACEHOLDER_BRANCH = "main"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

TEST_ONLY = {
    "pytest",
    "hypothesis",
    "ruff",
    "nbval",
    "playwright",
    "jupyter-repo2docker",
    "transformers",
    "tokenizers",
}
"""Top-level requirements only the repository's own tests use."""
INSTRUCTOR_ONLY = {"dask", "distributed", "latex2mathml"}
"""Top-level requirements only grading and feedback use (encoder_lib.autograde)."""

STUDENT_PATHS = (
    ".gitignore",
    "Makefile",
    "README.md",
    "binder",
    "constraints.txt",
    "encoder_lib",
    "notebooks",
    "pyproject.toml",
    "requirements.txt",
    "requirements-nodeps.txt",
)
"""Top-level entries of this repository that a student may see (Binder keeps exactly these)."""
INSTRUCTOR_PATHS = (
    ".ci",
    "bench",
    "docs",
    "encoder_lib/autograde",
    "nbgrader_config.py",
    "solutions",
    "tests",
    "tools",
)
"""What ``binder/postBuild`` deletes and the student edition never copies (but STUDENT_TOOLS)."""
STUDENT_TOOLS = ("tools/work_copy.py",)
"""The files of ``tools/`` the student edition ships: ``make lab``'s working copy. (Binder
deletes them with the rest of ``tools/``: a session is never regenerated, so it needs none.)"""


# --- pins ----------------------------------------------------------------------------------------
def _name(requirement: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", requirement).lower()


def pins(path: Path) -> dict[str, str]:
    """``{normalised name: version}`` of the ``name==version`` lines of a requirements file."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            name, version = line.split("==")
            found[_name(name)] = version.strip()
    return found


def student_top_level() -> dict[str, str]:
    """The root requirements a student's environment needs, in requirements.txt's order."""
    return {
        name: version
        for name, version in pins(ROOT / "requirements.txt").items()
        if name not in TEST_ONLY | INSTRUCTOR_ONLY
    }


def _dependencies(roots: list[str]) -> set[str]:
    """Every project the installed ``roots`` need (markers evaluated here, extras followed)."""
    from packaging.requirements import Requirement

    wanted: dict[str, set[str]] = {}
    todo = [(root, frozenset()) for root in roots]
    while todo:
        name, extras = todo.pop()
        key = _name(name)
        if key in wanted and extras <= wanted[key]:
            continue
        wanted.setdefault(key, set()).update(extras)
        environments = [{"extra": extra} for extra in {"", *wanted[key]}]
        for line in metadata.distribution(name).requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate(env) for env in environments):
                todo.append((requirement.name, frozenset(requirement.extras)))
    return set(wanted)


FREEZE_OMITS = ("setuptools",)


def student_pins() -> dict[str, str]:
    """Top-level student requirements, then every dependency of them and of encoder_lib, each
    at the version constraints.txt pins."""
    top = student_top_level()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    library = [re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0] for dep in project["dependencies"]]
    constraints = pins(ROOT / "constraints.txt")
    # `pip freeze` leaves out pip's own tools; torch and nbgrader need setuptools at run time.
    constraints |= {name: metadata.version(name) for name in FREEZE_OMITS}
    needed = _dependencies([*top, *library]) - {_name(project["name"])}
    missing = sorted(needed - constraints.keys() - top.keys())
    if missing:
        sys.exit(f"not pinned in constraints.txt: {', '.join(missing)}")
    rest = {name: constraints[name] for name in sorted(needed - top.keys())}
    return top | rest


def binder_requirements() -> str:
    """The text of binder/requirements.txt: every package pinned, torch from the CPU index."""
    top = student_top_level()
    lines = [
        "# Binder (repo2docker) installs this instead of the root requirements.txt: every",
        "# package a student's session needs, pinned as in requirements.txt and constraints.txt",
        "# (test, grading and Dask packages left out), torch from PyTorch's CPU wheel index (the",
        "# PyPI wheel pulls ~3 GB of CUDA libraries Binder cannot use). postBuild installs",
        "# encoder_lib.",
        "# Generated: python -m tools.student_edition binder",
        "# (tests/binder/test_binder.py checks it).",
        f"--extra-index-url {TORCH_CPU_INDEX}",
    ]
    for name, version in student_pins().items():
        if name == "torch":
            version += "+cpu"
        if name not in top and lines[-1].split("==")[0] in top:
            lines.append("# their dependencies")
        lines.append(f"{name}=={version}")
    return "\n".join(lines) + "\n"


def student_requirements() -> str:
    """The student edition's requirements.txt (complete pins, then encoder_lib itself)."""
    lines = [
        "# Everything the notebooks need, pinned. torch is the CPU build when installed with",
        f"#   pip install --extra-index-url {TORCH_CPU_INDEX} -r requirements.txt",
        "# (`make lab` does this).",
    ]
    lines += [f"{name}=={version}" for name, version in student_pins().items()]
    lines.append("-e .")
    return "\n".join(lines) + "\n"


# --- the edition ---------------------------------------------------------------------------------
def released() -> list[str]:
    """The assignments whose student version is in notebooks/, in course order."""
    return sorted(p.parent.name for p in RELEASE.glob("*/*.ipynb") if p.stem == p.parent.name)


def _title(notebook: Path) -> str:
    """The first heading of a notebook, without its number: "Multi-head attention"."""
    import nbformat

    first = nbformat.read(notebook, as_version=4).cells[0].source.splitlines()[0]
    return first.lstrip("# ").split("·", 1)[-1].strip()


def links(repo: str, branch: str, name: str) -> tuple[str, str]:
    """(Binder URL, Colab URL) that open notebook ``name`` of the published ``repo``."""
    path = f"notebooks/{name}/{name}.ipynb"
    binder = f"https://mybinder.org/v2/gh/{repo}/{branch}?labpath={path.replace('/', '%2F')}"
    colab = f"https://colab.research.google.com/github/{repo}/blob/{branch}/{path}"
    return binder, colab


BINDER_BADGE = "https://mybinder.org/badge_logo.svg"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"


def student_readme(repo: str, branch: str) -> str:
    rows = []
    for number, name in enumerate(released(), start=1):
        binder, colab = links(repo, branch, name)
        title = _title(RELEASE / name / f"{name}.ipynb")
        rows.append(
            f"| {number} | {title} | [![Binder]({BINDER_BADGE})]({binder}) "
            f"| [![Open In Colab]({COLAB_BADGE})]({colab}) |"
        )
    binder_first, _ = links(repo, branch, released()[0])
    return STUDENT_README.format(
        binder=binder_first,
        badge=BINDER_BADGE,
        rows="\n".join(rows),
        count=len(rows),
        first=released()[0],
        index=TORCH_CPU_INDEX,
    )


STUDENT_README = """\
# Transformer Encoder Lab

Write a Transformer yourself, one piece per notebook: {count} notebooks, listed under "The
notebooks" below. Every exercise has a test cell right below it that tells you at once whether
your code is right, and if not, what looks wrong.

[![Binder]({badge})]({binder})

## Start

Pick one; all three run the same notebooks.

- **Binder** (nothing to install): click the badge above or a notebook's Binder link below. The
  first start can take a few minutes. Binder deletes your session after about 10 minutes without
  activity: download your notebook (File > Download) before you stop.
- **Google Colab** (a Google account): click a notebook's Colab link. Its first cell installs
  the course's package `encoder_lib` (about 30 s); Colab's own PyTorch is kept. Save a copy to
  your Drive (File > Save a copy in Drive) to keep your work.
- **Your own computer** (Python 3.11, `make`, Linux or macOS):

  ```bash
  make lab
  ```

  creates `.venv/` (PyTorch's CPU-only build included, about 1.5 GB on disk; a few minutes the
  first time), copies the notebooks into `work/` (your working copy, see "Keep your work") and
  opens JupyterLab there on the first notebook, with every notebook's folder in the file browser
  on the left. Without `make`:

  ```bash
  python3.11 -m venv .venv
  .venv/bin/pip install --extra-index-url {index} -r requirements.txt
  .venv/bin/pip install --no-deps -r requirements-nodeps.txt
  .venv/bin/python tools/work_copy.py notebooks work
  JUPYTER_CONFIG_PATH=binder/jupyter .venv/bin/jupyter lab --ServerApp.root_dir=work
  ```

## Keep your work

On Binder and Colab, save your notebooks as said above. On your own computer, `make lab` keeps
your work in `work/`, a copy of `notebooks/`:

- The first `make lab` copies every notebook into `work/`. JupyterLab opens there. Write your
  answers there.
- `git pull` brings your instructor's updates into `notebooks/`. git ignores `work/`, so it never
  touches your answers. The next `make lab` copies in only the notebooks `work/` does not have
  yet. It never changes a file that is already in `work/`.
- Want a fresh copy of a notebook? Rename yours in `work/`, then run `make lab` again.
- Hand your work in under the notebook's own name (`{first}.ipynb` for the first):
  that is the name the grader looks for. It is in `work/{first}/`.

## The notebooks

Work through them in order; each takes about an hour. Each notebook imports the earlier pieces
from `encoder_lib`, so if you are stuck on one you can still do the next.

| # | notebook | Binder | Colab |
|---|---|---|---|
{rows}

## How the tests work

Run the setup cell first (the first code cell; keep your answers below it). A test cell prints
"Correct: ..." when your answer matches the reference, and otherwise stops with a message that
names the problem, for example that your scores were scaled by the wrong width. An exercise you
have not started says so ("not written yet"). Some cells are locked (you cannot edit them):
your instructor's grader uses its own copy of them. `encoder_lib/` is the reference
implementation the tests compare with: read it when you are stuck, but write your own.
"""

STUDENT_MAKEFILE = """\
# make lab: create .venv (first time only) and open JupyterLab on the first notebook.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_INDEX ?= {index}
PROBE := import urllib.request as u; u.urlopen('$(TORCH_INDEX)/torch/', timeout=10)
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: setup lab

setup: $(VENV)/.installed
# pip 26 shows setuptools' boxed "Editable installation" notice for `-e .`: information only.
comma := ,
QUIET := $(if $(PYTHONWARNINGS),$(PYTHONWARNINGS)$(comma))ignore:Editable installation:UserWarning
$(VENV)/.installed: export PYTHONWARNINGS := $(QUIET)

$(VENV)/.installed: requirements.txt requirements-nodeps.txt pyproject.toml
\t@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required"'
\t$(PYTHON) -m venv $(VENV)
\t$(BIN)/pip install --quiet --upgrade pip
\t@if $(BIN)/python -c "$(PROBE)" 2>/dev/null; then \\
\t\techo "Installing (torch: the CPU build from $(TORCH_INDEX))"; \\
\t\t$(BIN)/pip install --quiet --extra-index-url $(TORCH_INDEX) -r requirements.txt; \\
\telse \\
\t\techo "$(TORCH_INDEX) is not reachable: installing torch from the default index"; \\
\t\t$(BIN)/pip install --quiet -r requirements.txt; \\
\tfi
\t$(BIN)/pip install --quiet --no-deps -r requirements-nodeps.txt
\ttouch $@

# Your answers live in work/, your copy of notebooks/: the first run copies every notebook, later
# runs only the new ones, and never change a file already there (git pull only writes notebooks/).
# The first notebook opens with the file browser at the root, where every notebook's folder is.
LAB_HOME := /lab/tree/{first}/{first}.ipynb?file-browser-path=/
lab: setup
\t@$(BIN)/python tools/work_copy.py notebooks work
\t@echo "JupyterLab serves work/. Open the first http://...?token=... address it prints."
\tJUPYTER_CONFIG_PATH="$(CURDIR)/binder/jupyter$${{JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}}" \\
\t\t$(BIN)/jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir=work \\
\t\t'--LabApp.default_url=$(LAB_HOME)' --ServerApp.custom_display_url=/ $(LAB_ARGS)
"""

_INSTALL_SOURCE = re.compile(r"git\+https://github\.com/[\w.-]+/[\w.-]+@[\w./-]+")
"""The default of the setup cell's ENCODER_LIB_SOURCE: where Colab installs encoder_lib from."""

STUDENT_GITIGNORE = ".venv/\n__pycache__/\n*.egg-info/\n.ipynb_checkpoints/\n/work/\n"


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in {"__pycache__", ".ipynb_checkpoints"} or n.endswith(".pyc")}


def build(out: Path, repo: str = PLACEHOLDER_REPO, branch: str = PLACEHOLDER_BRANCH) -> Path:
    """Write the student edition into ``out`` (which must not exist or be empty)."""
    if out.exists() and any(out.iterdir()):
        sys.exit(f"{out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(RELEASE, out / "notebooks", ignore=_ignore)
    shutil.copytree(
        ROOT / "encoder_lib",
        out / "encoder_lib",
        ignore=lambda d, names: _ignore(d, names) | ({"autograde"} & set(names)),
    )
    shutil.copytree(ROOT / "binder", out / "binder", ignore=_ignore)
    (out / "pyproject.toml").write_text(student_pyproject())
    (out / "requirements.txt").write_text(student_requirements())
    shutil.copy(ROOT / "requirements-nodeps.txt", out / "requirements-nodeps.txt")
    (out / "README.md").write_text(student_readme(repo, branch))
    first = released()[0]
    (out / "Makefile").write_text(STUDENT_MAKEFILE.format(index=TORCH_CPU_INDEX, first=first))
    (out / ".gitignore").write_text(STUDENT_GITIGNORE)
    for path in STUDENT_TOOLS:
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, out / path)
    # The notebooks' Colab install line names the published repository (whatever it named).
    for notebook in (out / "notebooks").rglob("*.ipynb"):
        text = _INSTALL_SOURCE.sub(f"git+https://github.com/{repo}@{branch}", notebook.read_text())
        notebook.write_text(text)
    problems = leaks(out)
    if problems:
        sys.exit("the student edition would give answers away:\n" + "\n".join(problems))
    return out


def student_pyproject() -> str:
    """pyproject.toml without the entry points of ``encoder_lib.autograde``, which the edition
    does not ship (a tool that looked them up would find a module that is not there)."""
    text = (ROOT / "pyproject.toml").read_text()
    return re.sub(r"(?m)^(#[^\n]*\n)*\[project\.entry-points\.[^\n]*\n([^\n\[]+\n)*\n?", "", text)


# --- leaks ---------------------------------------------------------------------------------------
_BLOCKS = {
    "### BEGIN SOLUTION": "### END SOLUTION",
    "### BEGIN HIDDEN TESTS": "### END HIDDEN TESTS",
}


def secret_lines() -> tuple[set[str], set[str]]:
    """(solution lines, hidden-test lines) of solutions/: the stripped lines inside the nbgrader
    blocks that appear nowhere else in the solution notebooks (so `return x` in given code does
    not count)."""
    import nbformat

    inside: dict[str, set[str]] = {"### BEGIN SOLUTION": set(), "### BEGIN HIDDEN TESTS": set()}
    outside: set[str] = set()
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            block = None
            for line in cell.source.splitlines():
                text = line.strip()
                if text in _BLOCKS or (block and text == _BLOCKS[block]):
                    block = text if text in _BLOCKS else None
                elif text:
                    (inside[block] if block else outside).add(text)
    solution, hidden = inside.values()
    return solution - outside, hidden - outside


def _text_lines(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        import nbformat

        cells = nbformat.read(path, as_version=4).cells
        return [line for cell in cells for line in cell.source.splitlines()]
    try:
        return path.read_text().splitlines()
    except UnicodeDecodeError:
        return []


def leaks(edition: Path) -> list[str]:
    """Everything in ``edition`` that gives an answer away: instructor paths, nbgrader's block
    markers, hidden-test lines anywhere, solution lines outside ``encoder_lib/`` (the reference
    package is published on purpose, and a few of its lines, such as ``return x``, coincide
    with an answer's)."""
    solution, hidden = secret_lines()
    shipped = {edition / p for p in STUDENT_TOOLS}
    found = [
        f"{p}: instructor material"
        for p in INSTRUCTOR_PATHS
        if (edition / p).is_file()
        or any(f.is_file() and f not in shipped for f in (edition / p).rglob("*"))
    ]
    for path in sorted(p for p in edition.rglob("*") if p.is_file()):
        rel = path.relative_to(edition)
        if path.name == "nbgrader_config.py" or path.name == "gradebook.db":
            found.append(f"{rel}: instructor material")
        for number, line in enumerate(_text_lines(path), start=1):
            text = line.strip()
            if text in _BLOCKS or text in _BLOCKS.values():
                found.append(f"{rel}:{number}: nbgrader marker {text!r}")
            elif text in hidden:
                found.append(f"{rel}:{number}: hidden-test line {text!r}")
            elif text in solution and rel.parts[0] != "encoder_lib":
                found.append(f"{rel}:{number}: solution line {text!r}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("build", help="write the student edition into OUT")
    make.add_argument("out", type=Path)
    make.add_argument("--repo", default=PLACEHOLDER_REPO, help="OWNER/NAME on GitHub")
    make.add_argument("--branch", default=PLACEHOLDER_BRANCH)
    sub.add_parser("binder", help="rewrite binder/requirements.txt")
    sub.add_parser("check", help="fail if binder/requirements.txt is out of date")
    args = parser.parse_args()
    target = ROOT / "binder" / "requirements.txt"
    if args.command == "build":
        out = build(args.out, args.repo, args.branch)
        print(f"student edition written to {out}")
    elif args.command == "binder":
        target.write_text(binder_requirements())
        print(f"wrote {target.relative_to(ROOT)}")
    elif target.read_text() != binder_requirements():
        sys.exit("binder/requirements.txt is out of date: python -m tools.student_edition binder")
    else:
        print("binder/requirements.txt is up to date")


if __name__ == "__main__":
    main()
