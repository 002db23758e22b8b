"""The students' working copy: ``work/``, made from ``notebooks/``, never overwritten.

    python tools/work_copy.py [SOURCE [WORK]]     # default: notebooks work

``make lab`` runs this, then serves ``work/``. The first run copies every notebook. Later runs
copy only files that ``work/`` does not have yet (a notebook added to the course, or one the
student deleted), and never open, rewrite or delete a file that is already there. ``notebooks/``
is what the course regenerates (``make notebooks``, ``nbgrader generate_assignment --force``,
``git pull``); ``work/`` is ignored by git and by every one of those commands.

Standard library only: the student edition ships this file as it is.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

SKIPPED = {".ipynb_checkpoints", "__pycache__"}
"""Folders JupyterLab and Python write beside the notebooks (git ignores them): never copied."""


def _wanted(rel: Path) -> bool:
    return not (SKIPPED & set(rel.parts)) and rel.suffix != ".pyc"


def update(source: Path, work: Path) -> list[Path]:
    """Copy into ``work`` every file of ``source`` that ``work`` lacks; return what was copied
    (relative paths, sorted). A file already in ``work`` is left exactly as it is."""
    copied = []
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        rel = path.relative_to(source)
        target = work / rel
        if not _wanted(rel) or target.exists() or target.is_symlink():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        copied.append(rel)
    return copied


def main(argv: list[str]) -> None:
    source = Path(argv[0] if argv else "notebooks")
    work = Path(argv[1] if len(argv) > 1 else "work")
    if not source.is_dir():
        sys.exit(f"{source}/ not found: run this from the course's folder")
    first = not work.exists()
    copied = update(source, work)
    if first:
        print(f"Your working copy is {work}/: {len(copied)} files copied from {source}/.")
    elif copied:
        names = ", ".join(str(p) for p in copied)
        print(f"Your work is in {work}/. New from {source}/: {names}.")
    else:
        print(f"Your work is in {work}/ (nothing new in {source}/).")


if __name__ == "__main__":
    main(sys.argv[1:])
