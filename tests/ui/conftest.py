"""Fixtures for the browser suite: Debian's Chromium driven by Playwright, and JupyterLab servers.

Needs Chromium (Debian's ``chromium`` package; ``.ci/run`` installs it) and the ``playwright``
Python package (no browser download: it drives /usr/bin/chromium). Every test here is skipped,
with the reason, on a machine without Chromium. Screenshots go to tests/ui/artifacts/ (ignored
by git).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools.build_course import RELEASE, ROOT, SOLUTIONS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parent / "artifacts"


def pytest_collection_modifyitems(items):
    if not Path(CHROMIUM).exists():
        skip = pytest.mark.skip(reason="Chromium is not installed (apt-get install chromium)")
        for item in items:
            item.add_marker(skip)


@dataclass
class Lab:
    url: str
    token: str
    root: Path  # the folder JupyterLab serves
    log: Path

    def address(self, path: str = "") -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.url}/{path.lstrip('/')}{sep}token={self.token}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(lab: Lab, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(lab.address("api/status"), timeout=2)
            return
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                _stop(server)
                pytest.fail(f"JupyterLab did not start:\n{lab.log.read_text()[-3000:]}")
            time.sleep(0.5)


def _stop(server: subprocess.Popen) -> None:
    """Stop the server and everything it started (make, jupyter, kernels): one process group."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def _common_args(port: int, token: str) -> list[str]:
    return [
        "--no-browser",
        f"--port={port}",
        "--ServerApp.ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        "--ServerApp.port_retries=0",  # never a silent move to another port
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp for the tests
    ]


def _env(root: Path) -> dict[str, str]:
    """This interpreter's tools first on PATH; JupyterLab's saved layouts kept in ``root``."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return dict(os.environ, PATH=path, JUPYTERLAB_WORKSPACES_DIR=str(root / "workspaces"))


@pytest.fixture(scope="session")
def solution_lab(tmp_path_factory):
    """JupyterLab (the instructor's view) on a scratch copy of solutions/."""
    root = tmp_path_factory.mktemp("solution-lab")
    shutil.copytree(SOLUTIONS, root / "solutions")
    port, token = _free_port(), secrets.token_hex(16)
    log = root / "server.log"
    command = [sys.executable, "-m", "jupyterlab", *_common_args(port, token), "--allow-root"]
    with log.open("w") as out:
        server = subprocess.Popen(
            [*command, f"--ServerApp.root_dir={root}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(root),
            cwd=root,
            start_new_session=True,
        )
    lab = Lab(f"http://127.0.0.1:{port}", token, root, log)
    _wait_until_up(lab, server)
    yield lab
    _stop(server)


def _make_server(target: str, root: Path, served: Path):
    """Run `make TARGET` (a JupyterLab target of the Makefile) in ``root`` with this
    environment's .venv (``-o setup``: no install); yield the Lab, stop it afterwards."""
    port, token = _free_port(), secrets.token_hex(16)
    log = root / "server.log"
    venv = Path(sys.executable).parent.parent
    lab_args = " ".join(_common_args(port, token))
    with log.open("w") as out:
        server = subprocess.Popen(
            ["make", "-o", "setup", target, f"VENV={venv}", f"LAB_ARGS={lab_args}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(root),
            cwd=root,
            start_new_session=True,
        )
    lab = Lab(f"http://127.0.0.1:{port}", token, served, log)
    _wait_until_up(lab, server)
    yield lab
    _stop(server)


def _copy(root: Path, *names: str) -> None:
    for name in names:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name)
        else:
            shutil.copy2(source, root / name)


@pytest.fixture(scope="session")
def student_lab(tmp_path_factory):
    """What a student gets from `make lab`: the Makefile's own target, run in a scratch copy of
    the repository's student side (Makefile, binder/, notebooks/, tools/work_copy.py). It serves
    work/, the copy of notebooks/ it makes on its first run."""
    root = tmp_path_factory.mktemp("student-lab")
    _copy(root, "Makefile", "requirements.txt", "pyproject.toml", "binder")
    (root / "tools").mkdir()
    _copy(root, "tools/work_copy.py")
    shutil.copytree(
        RELEASE, root / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints")
    )
    yield from _make_server("lab", root, root / "work")


@pytest.fixture(scope="session")
def instructor_lab(tmp_path_factory):
    """`make instructor` in a scratch copy of the course directory's configuration."""
    root = tmp_path_factory.mktemp("instructor-lab")
    _copy(root, "Makefile", "requirements.txt", "pyproject.toml", "binder", "nbgrader_config.py")
    _copy(root, "tools/instructor_jupyter")
    yield from _make_server("instructor", root, root)


@pytest.fixture(scope="session")
def browser():
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield b
        b.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
