"""A real browser drives a real JupyterLab: a student opens a notebook, runs every cell, sees the
widgets and the grader's feedback.

Needs Chromium (Debian's ``chromium`` package; ``.ci/run`` installs it) and the ``playwright``
Python package (no browser download: it drives /usr/bin/chromium). Skipped, with the reason, on a
machine without Chromium.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tools.build_course import RELEASE, SOLUTIONS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Chromium is not installed (apt-get install chromium)"
)
playwright = pytest.importorskip("playwright.sync_api")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on loopback, serving a scratch copy of one solution and one student notebook."""
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(SOLUTIONS / "01_self_attention", root / "solution")
    shutil.copytree(RELEASE / "01_self_attention", root / "student")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={port}",
            "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={token}",
            "--ServerApp.port_retries=0",
            "--LabApp.expose_app_in_browser=True",
            "--allow-root",
            f"--ServerApp.root_dir={root}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=root,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail("JupyterLab did not start within 60 s")
            time.sleep(0.5)
    yield url, token, root
    server.terminate()
    server.wait(timeout=20)


@pytest.fixture(scope="module")
def browser():
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


def _open_and_run_all(browser, lab, relpath: str, screenshot: Path):
    url, token, _ = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # ?reset: start from an empty workspace, not the layout an earlier test left behind.
    page.goto(f"{url}/lab/tree/{relpath}?reset&token={token}")
    page.wait_for_function("window.jupyterapp !== undefined", timeout=60_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    name = relpath.rsplit("/", 1)[-1]
    page.wait_for_function(
        f"() => {{ const w = window.jupyterapp.shell.currentWidget;"
        f" return !!(w && w.context && w.context.path.endsWith({name!r})); }}",
        timeout=60_000,
    )
    page.wait_for_function(_KERNEL_IDLE, timeout=60_000)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    # Wait until the first code cell has run (its prompt shows a number), then until all are done.
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-InputPrompt')]"
        ".some(p => /\\d/.test(p.textContent))",
        timeout=60_000,
        polling=250,
    )
    page.wait_for_function(_ALL_DONE, timeout=120_000, polling=500)
    page.screenshot(path=str(screenshot), full_page=False)
    return page


# The kernel is idle and no cell prompt shows "[*]" (queued or running).
_KERNEL_IDLE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  return !!(w && w.sessionContext && w.sessionContext.session
            && w.sessionContext.session.kernel
            && w.sessionContext.session.kernel.status === 'idle');
}"""
_ALL_DONE = (
    "() => (" + _KERNEL_IDLE + ")() && "
    "![...document.querySelectorAll('.jp-InputPrompt')].some(p => p.textContent.includes('*'))"
)


def test_solution_runs_in_the_browser_with_live_widgets(lab, browser, tmp_path):
    page = _open_and_run_all(browser, lab, "solution/01_self_attention.ipynb", tmp_path / "a.png")
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    tracebacks = [t for t in errors.all_text_contents() if "Traceback" in t or "Error" in t]
    assert tracebacks == []
    sliders = page.locator(".widget-slider")
    assert sliders.count() >= 1, "the ipywidgets explorer did not render"
    # Moving the slider re-draws the figure below it.
    output = page.locator(".widget-output").first
    before = output.inner_html()
    sliders.first.locator(".noUi-handle, .ui-slider-handle").first.focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.wait_for_function(_ALL_DONE, timeout=30_000)
    page.wait_for_timeout(500)
    assert output.inner_html() != before, "moving the slider did not change the figure"
    page.close()


def test_student_sees_specific_feedback_in_the_browser(lab, browser, tmp_path):
    page = _open_and_run_all(browser, lab, "student/01_self_attention.ipynb", tmp_path / "b.png")
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    text = "\n".join(errors.all_text_contents())
    assert "not written yet" in text  # the grader's message for an untouched exercise
    page.close()
