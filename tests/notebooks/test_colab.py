"""The notebooks' setup cell on Colab: it installs encoder_lib and keeps the torch it finds.

Colab itself cannot run here, so the test builds what Colab would see: a Python environment with
torch, Jupyter and matplotlib but no encoder_lib (a throwaway venv that sees this environment's
packages, minus encoder_lib), and a kernel in which ``google.colab`` is imported, as it is on
Colab. The setup cell's ``%pip install`` then installs a wheel of the student edition's
encoder_lib, named by ``ENCODER_LIB_SOURCE``, with the package index switched off: if pip wanted
another torch it would fail rather than download one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tools import student_edition
from tools.build_course import SOLUTIONS
from tools.student_edition import released

pytestmark = pytest.mark.slow

# Start an IPython kernel the way Colab's is: google.colab already imported, with its `output`
# module (JAX's debugger imports google.colab.output as soon as it sees Colab: notebook 10).
FAKE_COLAB_KERNEL = (
    "import sys, types; colab = types.ModuleType('google.colab'); "
    "colab.output = types.ModuleType('google.colab.output'); "
    "sys.modules.update({'google.colab': colab, 'google.colab.output': colab.output}); "
    "from ipykernel import kernelapp; kernelapp.launch_new_instance()"
)
REPORT = (
    "import encoder_lib, torch; print(encoder_lib.__file__); print(torch.__file__); "
    "print(torch.__version__)"
)


def _setup_cell(nb) -> int:
    return next(
        i
        for i, c in enumerate(nb.cells)
        if c.metadata.get("nbgrader", {}).get("grade_id") == "setup"
    )


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """(kernel name, JUPYTER_PATH, venv site-packages, wheel, student edition) of a simulated
    Colab runtime."""
    root = tmp_path_factory.mktemp("colab")
    edition = student_edition.build(root / "edition")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(root / "wheels"),
            str(edition),
        ],
        check=True,
        env=dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1"),
    )
    (wheel,) = (root / "wheels").glob("encoder_lib-*.whl")

    # A venv with this environment's packages but not encoder_lib (its editable install points
    # here), linked into its own site-packages as Colab's are in its interpreter's: grading
    # trusts code from there. No pip or setuptools of its own: the shared (newer) ones are used.
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
        if "encoder_lib" not in entry.name.lower():
            (site / entry.name).symlink_to(entry)
    # pip may install the wheel and nothing else: no index, no find-links, and the linked
    # packages held at their versions, so it can never replace (uninstall) one of ours.
    held = root / "held.txt"
    held.write_text("".join(f"{n}=={metadata.version(n)}\n" for n in ("torch", "safetensors")))

    kernels = root / "jupyter"
    spec = kernels / "kernels" / "fake-colab"
    spec.mkdir(parents=True)
    env = {
        "ENCODER_LIB_SOURCE": str(wheel),
        "PIP_CONFIG_FILE": os.devnull,  # no find-links: nothing but the wheel to install from
        "PIP_NO_INDEX": "1",
        "PIP_CONSTRAINT": str(held),
        "PYTHONPATH": "",  # nothing but the venv: no path to a checkout's encoder_lib
    }
    kernel = {
        "argv": [str(python), "-c", FAKE_COLAB_KERNEL, "-f", "{connection_file}"],
        "display_name": "fake Colab",
        "language": "python",
        "env": env,
    }
    (spec / "kernel.json").write_text(json.dumps(kernel))
    return "fake-colab", kernels, site, wheel, edition


def _run(nb, kernel: str, jupyter_path: Path | None, cwd: Path) -> None:
    env_before = os.environ.get("JUPYTER_PATH")
    if jupyter_path is not None:
        os.environ["JUPYTER_PATH"] = str(jupyter_path)
    try:
        NotebookClient(
            nb, timeout=300, kernel_name=kernel, resources={"metadata": {"path": str(cwd)}}
        ).execute()
    finally:
        if env_before is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = env_before


def _stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_setup_cell_on_colab_installs_encoder_lib_and_keeps_torch(colab, tmp_path):
    kernel, jupyter_path, site, wheel, _ = colab
    name = released()[0]
    nb = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    _run(nb, kernel, jupyter_path, tmp_path)  # raises CellExecutionError on any failing cell

    encoder_lib_file, torch_file, version = _stdout(nb.cells[-1]).split()
    assert Path(encoder_lib_file).is_relative_to(site), "encoder_lib was not installed by the cell"
    assert (site / "torch").is_symlink(), "the setup cell replaced torch"
    import torch

    # The torch this environment has (reached through the shared folder's link), same version.
    assert Path(torch_file).resolve() == Path(torch.__file__).resolve()
    assert version == torch.__version__
    assert "encoder_lib" in wheel.name


def test_the_wheel_holds_every_file_of_encoder_lib(colab):
    """What Colab installs is the wheel: every module and data file of the student edition's
    encoder_lib must be in it (a file left out of the package data would fail only there)."""
    _, _, _, wheel, edition = colab
    source = edition / "encoder_lib"
    expected = {
        p.relative_to(edition).as_posix()
        for p in source.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    with zipfile.ZipFile(wheel) as archive:
        packed = {n for n in archive.namelist() if n.startswith("encoder_lib/")}
    assert expected <= packed, sorted(expected - packed)
    assert any(n.startswith("encoder_lib/data/") for n in packed)


# Every module of the installed package imported, every data file read, in the Colab kernel.
IMPORT_EVERYTHING = """
import importlib, pkgutil
from importlib import resources
import encoder_lib
modules = [m.name for m in pkgutil.walk_packages(encoder_lib.__path__, "encoder_lib.")]
for name in modules:
    importlib.import_module(name)
data = [p for p in resources.files("encoder_lib").joinpath("data").iterdir() if p.is_file()]
print(len(modules), "modules,", sum(len(p.read_bytes()) > 0 for p in data), "data files")
"""


def test_every_setup_cell_and_every_module_work_on_the_installed_wheel(colab, tmp_path):
    """Each notebook's setup cell in turn (the first installs the wheel, the others find it),
    then every module of the installed package imported and every data file read."""
    kernel, jupyter_path, site, _, edition = colab
    setups = []
    for name in released():
        nb = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4)
        setups.append(nbformat.v4.new_code_cell(nb.cells[_setup_cell(nb)].source))
    check = nbformat.v4.new_code_cell(IMPORT_EVERYTHING)
    report = nbformat.v4.new_code_cell(REPORT)
    nb = nbformat.v4.new_notebook(cells=[*setups, check, report])
    _run(nb, kernel, jupyter_path, tmp_path)  # raises CellExecutionError on any failing cell

    for cell in setups:
        assert _stdout(cell).splitlines()[-1].startswith("Setup done: torch ")
    modules = [p for p in (edition / "encoder_lib").rglob("*.py") if "__pycache__" not in p.parts]
    data = [p for p in (edition / "encoder_lib" / "data").iterdir() if p.is_file()]
    counted = f"{len(modules) - 1} modules, {len(data)} data files"  # minus __init__.py
    assert _stdout(check).strip() == counted
    assert Path(_stdout(report).split()[0]).is_relative_to(site)


# The first notebook (PyTorch) and notebook 10 (JAX, which looks for google.colab's own modules)
# run whole on the wheel; the others differ from them on Colab only in what their setup cells
# import (the test above) and what they execute, which nbval and the browser suite run locally.
@pytest.mark.parametrize("name", ["01_self_attention", "10_jax_encoder"])
def test_a_notebook_runs_whole_on_the_installed_wheel(colab, tmp_path, name):
    kernel, jupyter_path, _, _, _ = colab
    nb = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4)
    _run(nb, kernel, jupyter_path, tmp_path)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in errors if o.output_type == "error"], name


def test_locally_the_colab_branch_does_nothing(tmp_path):
    """Outside Colab the same cell must not call pip: a source that cannot be installed changes
    nothing."""
    name = released()[0]
    nb = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4)
    index = _setup_cell(nb)
    nb.cells = [nb.cells[index], nbformat.v4.new_code_cell(REPORT)]
    os.environ["ENCODER_LIB_SOURCE"] = str(tmp_path / "no-such-wheel.whl")
    try:
        _run(nb, "python3", None, tmp_path)
    finally:
        del os.environ["ENCODER_LIB_SOURCE"]
    # Only setup_notebook's line: pip printed nothing.
    (line,) = _stdout(nb.cells[0]).splitlines()
    assert line.startswith("Setup done: torch ") and len(nb.cells[0].outputs) == 1
    assert _stdout(nb.cells[1]).split()[0] == str(
        Path(__file__).parents[2] / "encoder_lib" / "__init__.py"
    )
