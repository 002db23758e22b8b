"""Throwaway folders of grading processes, each named after the process that made it
(``<prefix>-<pid>-<random>``): a process that is killed cannot remove its own folder, so the next
one to make a folder with that prefix removes those whose process is gone."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psutil

__all__ = ["make", "scratch_root"]


def scratch_root() -> Path:
    """Where throwaway courses go: RAM-backed /dev/shm when it is there (sqlite commits and
    notebook writes cost nothing), else the temp folder."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


def make(prefix: str, root: Path) -> Path:
    """A new folder ``root/<prefix>-<this pid>-<random>``, after removing the ``<prefix>-<pid>-*``
    folders in ``root`` whose process has ended."""
    for folder in root.glob(f"{prefix}-*-*"):
        pid = folder.name[len(prefix) + 1 :].split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-{os.getpid()}-", dir=root))
