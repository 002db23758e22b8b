"""Binder's configuration stays in step with the repository's own."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST_ONLY = {"pytest", "hypothesis", "ruff", "nbval", "playwright"}


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "-")):
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def test_binder_pins_the_same_versions_with_cpu_torch():
    root, binder = _pins(ROOT / "requirements.txt"), _pins(ROOT / "binder" / "requirements.txt")
    assert binder.pop("torch") == root.pop("torch") + "+cpu"
    assert binder == {name: v for name, v in root.items() if name not in TEST_ONLY}
    assert "download.pytorch.org/whl/cpu" in (ROOT / "binder" / "requirements.txt").read_text()


def test_binder_scripts_are_executable_and_strict():
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
    for name in ("postBuild", "start"):
        script = ROOT / "binder" / name
        assert os.access(script, os.X_OK), f"binder/{name} is not executable"
        assert script.read_text().startswith("#!/bin/bash")
    assert "set -euo pipefail" in (ROOT / "binder" / "postBuild").read_text()
