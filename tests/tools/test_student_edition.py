"""The student edition (tools/student_edition.py) holds what students need and gives no answer
away."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest

from tools import student_edition as se
from tools.build_course import RELEASE, ROOT
from tools.student_edition import released

REPO, BRANCH = "someone/their-course", "student"


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    return se.build(tmp_path_factory.mktemp("edition") / "out", REPO, BRANCH)


def test_it_holds_what_students_need(edition):
    for name in released():
        assert (edition / "notebooks" / name / f"{name}.ipynb").is_file()
    for path in (
        "README.md",
        "Makefile",
        "requirements.txt",
        "requirements-nodeps.txt",
        "pyproject.toml",
        "binder/postBuild",
        *se.STUDENT_TOOLS,
    ):
        assert (edition / path).is_file(), path
    assert (edition / "binder/jupyter/labconfig/page_config.json").is_file()
    assert (edition / "encoder_lib/grading/__init__.py").is_file()
    assert not (edition / "encoder_lib/autograde").exists()
    # nor anything that names it: the warm kernels' entry point stays in the instructor's copy
    assert "autograde" not in (edition / "pyproject.toml").read_text()
    assert "encoder_lib.autograde" in (se.ROOT / "pyproject.toml").read_text()


def test_nothing_from_solutions_leaks(edition):
    assert se.leaks(edition) == []
    solution, hidden = se.secret_lines()
    assert len(solution) > 20 and len(hidden) > 5  # the scan has something to look for
    for path in (*se.INSTRUCTOR_PATHS, "nbgrader_config.py"):
        shipped = [p for p in se.STUDENT_TOOLS if p.startswith(f"{path}/")]
        files = sorted(str(f.relative_to(edition)) for f in (edition / path).rglob("*"))
        assert files == shipped and not (edition / path).is_file(), path


def test_the_leak_scan_finds_an_answer_put_back(edition, tmp_path):
    copy = shutil.copytree(edition, tmp_path / "copy")
    solution, hidden = se.secret_lines()
    answer, test = sorted(solution, key=len)[-1], sorted(hidden)[0]
    notebook = copy / "notebooks" / released()[0] / f"{released()[0]}.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    nb.cells[-1].source += f"\n{answer}\n### BEGIN HIDDEN TESTS\n"
    nbformat.write(nb, notebook)
    (copy / "encoder_lib" / "extra.py").write_text(f"{test}\n")
    (copy / "solutions").mkdir()
    (copy / "solutions" / "notes.txt").write_text("")
    (copy / "tools" / "verdict_snapshot.py").write_text("")
    found = "\n".join(se.leaks(copy))
    assert f"solution line {answer!r}" in found
    assert "nbgrader marker '### BEGIN HIDDEN TESTS'" in found
    assert f"encoder_lib/extra.py:1: hidden-test line {test!r}" in found
    assert "solutions: instructor material" in found
    assert "tools: instructor material" in found


def test_student_notebooks_are_the_released_ones_with_the_published_repository(edition):
    for name in released():
        ours = json.loads((edition / "notebooks" / name / f"{name}.ipynb").read_text())
        theirs = json.loads((RELEASE / name / f"{name}.ipynb").read_text())
        code = [cell for cell in ours["cells"] if cell["cell_type"] == "code"]
        setup = "".join(code[0]["source"])  # the first code cell (docs/AUTHORING.md)
        assert f"git+https://github.com/{REPO}@{BRANCH}" in setup
        # Apart from that URL, the notebook is the released one.
        text = se._INSTALL_SOURCE.sub(f"git+https://github.com/{REPO}@{BRANCH}", json.dumps(theirs))
        assert json.loads(text) == ours
    assert not [p for p in edition.rglob("*") if p.is_file() and "OWNER" in p.read_text()]


def test_readme_links_every_notebook_on_binder_and_colab(edition):
    readme = (edition / "README.md").read_text()
    for name in released():
        path = f"notebooks/{name}/{name}.ipynb"
        assert f"https://colab.research.google.com/github/{REPO}/blob/{BRANCH}/{path}" in readme
        assert f"https://mybinder.org/v2/gh/{REPO}/{BRANCH}?labpath={path.replace('/', '%2F')}" in (
            readme
        )


def test_requirements_are_binders_pins_with_encoder_lib(edition):
    lines = (edition / "requirements.txt").read_text().splitlines()
    assert lines[-1] == "-e ."
    binder = se.pins(ROOT / "binder" / "requirements.txt")
    binder["torch"] = binder["torch"].removesuffix("+cpu")
    assert se.pins(edition / "requirements.txt") == binder


def test_encoder_lib_works_without_the_instructors_package(edition):
    """Import the edition's encoder_lib and its checks with no path into this repository (-S: no
    .pth files, so not the editable install of the repository's encoder_lib)."""
    site = sysconfig.get_paths()["purelib"]
    code = (
        f"import sys; sys.path.insert(0, {str(edition)!r}); sys.path.append({site!r})\n"
        "import encoder_lib, encoder_lib.grading\n"
        "print(encoder_lib.__file__)\n"
        "try:\n    import encoder_lib.autograde\nexcept ImportError:\n    print('no autograde')\n"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=edition, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [str(edition / "encoder_lib" / "__init__.py"), "no", "autograde"]


def test_student_makefile_serves_notebooks_without_instructor_tools(edition):
    dry_run = subprocess.run(
        ["make", "--no-print-directory", "-n", "-o", "setup", "lab"],
        cwd=edition,
        capture_output=True,
        text=True,
    )
    assert dry_run.returncode == 0, dry_run.stderr
    # the student's answers live in work/, which git ignores (tools/work_copy.py makes it)
    assert dry_run.stdout.splitlines()[0].endswith("python tools/work_copy.py notebooks work")
    assert "--ServerApp.root_dir=work" in dry_run.stdout
    assert "/work/" in (edition / ".gitignore").read_text().splitlines()
    assert f'JUPYTER_CONFIG_PATH="{edition}/binder/jupyter' in dry_run.stdout
    first = released()[0]  # open, with the file browser at the root (every notebook's folder)
    assert f"default_url=/lab/tree/{first}/{first}.ipynb?file-browser-path=/'" in dry_run.stdout


def test_readme_lists_every_notebook_found_and_says_how_to_keep_work(edition):
    readme = (edition / "README.md").read_text()
    titles = [se._title(RELEASE / name / f"{name}.ipynb") for name in released()]
    assert f"{len(titles)} notebooks" in readme.split("## Start")[0]
    for number, title in enumerate(titles, start=1):
        assert f"| {number} | {title} |" in readme
    keep = readme.split("## Keep your work")[1].split("\n## ")[0]
    assert "git pull" in keep and "`work/`" in keep and "never changes a file" in keep


def test_repository_readme_links_every_notebook_on_colab():
    """The course map of this repository's README opens each notebook on Colab."""
    readme = (ROOT / "README.md").read_text()
    for name in released():
        path = f"notebooks/{name}/{name}.ipynb"
        assert re.search(
            rf"https://colab\.research\.google\.com/github/[\w.-]+/[\w.-]+/blob/[\w.-]+/{path}",
            readme,
        ), name
