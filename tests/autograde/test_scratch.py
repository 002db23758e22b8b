"""encoder_lib/autograde/scratch.py: a grading process's throwaway folder is named after it, and
the folders of processes that have ended are removed by the next one with the same prefix."""

from __future__ import annotations

import os
import subprocess
import sys

from encoder_lib.autograde import scratch


def test_folders_of_ended_processes_go_and_the_others_stay(tmp_path):
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    orphan = tmp_path / f"grade-{ended}-abc"
    (orphan / "course").mkdir(parents=True)
    mine = tmp_path / f"grade-{os.getpid()}-def"
    mine.mkdir()
    other_prefix = tmp_path / f"grade-cache-{ended}-ghi"  # another prefix: left to its own
    other_prefix.mkdir()
    made = scratch.make("grade", tmp_path)
    assert made.is_dir() and made.name.startswith(f"grade-{os.getpid()}-")
    assert not orphan.exists()
    assert mine.is_dir() and other_prefix.is_dir()
    scratch.make("grade-cache", tmp_path)
    assert not other_prefix.exists()
