"""The instructor's JAX compile cache: built once from the reference solution, read by every
grading kernel, written by none.

Notebook 10's checks run the student's JAX code eagerly, and JAX compiles a program for every
operation at every new shape: about 30 s of compiling in a fresh kernel, for programs that are
the same for every student (their inputs are the grader's, not the student's). So the programs
are compiled once, from the reference solution, and every grading kernel loads them.

Why not one shared folder that every grading kernel reads and writes (as a student's own kernels
do with ``~/.cache/encoder_lab/jax``)? Because a kernel runs a student's code: it could write a
program into the shared folder that the next student's kernel loads and runs. So:

- ``build`` runs the cells grading runs (setup, answers, test cells) of the reference notebook
  in a kernel that writes a fresh folder, then lists every file with its SHA-256 in
  ``MANIFEST.json``. ``python -m encoder_lib.autograde.jax_cache build`` does it (about a minute);
  the grader does it by itself, once, when the folder has no manifest.
- The grading process reads the folder **once** (``sealed``), checking each file against the
  manifest, and keeps the files in its own memory (about 1 MB). What a kernel writes to the
  folder afterwards is never read by that process again; it reads it when its first
  ``JudgeExecute`` is made, before its first kernel, if the cache is built (else before its first
  notebook 10, which builds it). ``python -m encoder_lib.autograde``
  reads the manifest before any kernel starts and hands its digest to its workers (``pin``),
  which may read the folder later: they trust that manifest only.
- Each graded notebook that imports JAX gets a **private copy** of those files in a new folder,
  deleted when the notebook is graded (``private_copy``). Its kernel is told to read the cache
  and never write to it (``encoder_lib.course.use_jax_compilation_cache``, read-only); what its
  code writes there anyway dies with the folder.
- A notebook that does not import JAX gets no cache at all.

Where the folder is: ``$ENCODER_LAB_GRADING_JAX_CACHE``, else ``encoder_lab/jax-grading`` under
``$XDG_CACHE_HOME`` (``~/.cache`` by default). ``ENCODER_LAB_GRADING_JAX_CACHE=`` (empty): no
cache, each grading kernel compiles its own programs.

A cache goes **out of date** when what decides its programs changes: JAX, jaxlib or Flax, the
reference notebook it was built from, or ``encoder_lib``'s source (the checks' cases and their
shapes live there). Its manifest records all of them (``built_from``); a grading process that
finds them changed treats the folder as unbuilt and builds it again, once (about 25 s), rather
than grade every notebook 10 with programs that are no longer there.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from encoder_lib.course import JAX_CACHE_READ_ONLY_VARIABLE, JAX_CACHE_VARIABLE

__all__ = [
    "DIGEST_VARIABLE",
    "GRADING_CACHE_VARIABLE",
    "MANIFEST",
    "Sealed",
    "build",
    "grading_cache_dir",
    "kernel_environment",
    "pin",
    "imports_jax",
    "private_copy",
    "read_if_built",
    "sealed",
]

GRADING_CACHE_VARIABLE = "ENCODER_LAB_GRADING_JAX_CACHE"
DIGEST_VARIABLE = "ENCODER_LAB_GRADING_JAX_CACHE_DIGEST"
"""The SHA-256 of the manifest, set by ``pin`` in the grading command before its workers start:
a worker then trusts only that manifest, whenever it first reads the folder."""
MANIFEST = "MANIFEST.json"
REFERENCE = Path(__file__).resolve().parents[2] / "solutions" / "10_jax_encoder"
"""The reference solution the cache is built from (this repository's nbgrader source)."""

log = logging.getLogger(__name__)


def grading_cache_dir() -> Path | None:
    """The instructor's cache folder; None when ``$ENCODER_LAB_GRADING_JAX_CACHE`` is empty."""
    chosen = os.environ.get(GRADING_CACHE_VARIABLE)
    if chosen is not None:
        return Path(chosen).expanduser() if chosen else None
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "encoder_lab" / "jax-grading"


# --- building ------------------------------------------------------------------------------------


def _graded_cells(nb) -> list[int]:
    """The code cells autograde runs: the setup cell, answer cells and test cells."""
    from nbgrader.utils import is_grade, is_solution

    def is_setup(cell) -> bool:
        return cell.metadata.get("nbgrader", {}).get("grade_id") == "setup"

    return [
        index
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (is_setup(cell) or is_solution(cell) or is_grade(cell))
    ]


def build(folder: Path, reference: Path | None = None) -> dict[str, str]:
    """Fill ``folder`` with the programs the reference solution's graded cells compile, and its
    manifest; returns the manifest's entries (file name -> SHA-256).

    The programs are compiled into a new folder beside ``folder``, which then replaces it whole;
    a build that fails leaves ``folder`` as it was."""
    import nbformat
    from nbclient import NotebookClient

    reference = REFERENCE if reference is None else reference
    notebook = next(reference.glob("*.ipynb")) if reference.is_dir() else reference
    nb = nbformat.read(notebook, as_version=4)
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        env = {**os.environ, JAX_CACHE_VARIABLE: str(fresh)}
        env.pop(JAX_CACHE_READ_ONLY_VARIABLE, None)
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        client = NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str(notebook.parent)}},
        )
        with client.setup_kernel(env=env):
            for index in _graded_cells(nb):
                client.execute_cell(nb.cells[index], index)
        entries = {p.name: _sha256(p.read_bytes()) for p in sorted(fresh.iterdir()) if p.is_file()}
        if not entries:
            raise RuntimeError(f"{notebook.name}'s graded cells compiled no JAX program")
        manifest = {"built_from": _built_from(notebook), "entries": entries}
        (fresh / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        old = folder.with_name(f".{folder.name}-old-{os.getpid()}")
        if folder.exists():
            folder.rename(old)
        fresh.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
        return entries
    finally:
        shutil.rmtree(fresh, ignore_errors=True)


def _built_from(notebook: Path) -> dict[str, str]:
    """What the programs depend on, JAX aside: the reference notebook (where it is, and its
    SHA-256), ``encoder_lib``'s Python source (one SHA-256 over every file) and the versions of
    JAX, jaxlib and Flax."""
    library = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(library.rglob("*.py")):
        digest.update(path.relative_to(library).as_posix().encode() + b"\0" + path.read_bytes())
    return {
        "reference": str(notebook.resolve()),
        "reference_sha256": _sha256(notebook.read_bytes()),
        "encoder_lib_sha256": digest.hexdigest(),
        "versions": " ".join(f"{n}=={_version(n)}" for n in ("jax", "jaxlib", "flax")),
    }


def _is_current(folder: Path) -> bool:
    """Whether ``folder`` has a manifest built from what is here now (``_built_from``)."""
    try:
        recorded = json.loads((folder / MANIFEST).read_text())["built_from"]
        return recorded == _built_from(Path(recorded["reference"]))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@contextlib.contextmanager
def _lock(folder: Path) -> Iterator[None]:
    """One build at a time for a folder, across processes (grading workers on one machine)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(f".{folder.name}.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- reading, once per process -------------------------------------------------------------------


@dataclass(frozen=True)
class Sealed:
    """The instructor's cache as this process read it: file name -> content, each checked
    against the manifest."""

    folder: Path
    files: Mapping[str, bytes]
    rejected: tuple[str, ...] = ()
    """Files whose content did not match the manifest (changed since the build): left out."""


_SEALED: dict[Path, Sealed | None] = {}


def sealed(folder: Path | None = None, *, build_if_missing: bool = True) -> Sealed | None:
    """The instructor's cache, read and checked at this process's first call and kept in memory;
    None when there is none (no folder configured, or a build that failed: then each kernel
    compiles its own programs, slower but graded the same)."""
    folder = grading_cache_dir() if folder is None else Path(folder)
    if folder is None:
        return None
    if folder not in _SEALED:
        _SEALED[folder] = _read(folder, build_if_missing)
    return _SEALED[folder]


_UNBUILT: set[Path] = set()
"""Folders this process found without a current manifest before its first kernel: a manifest
there later may be a kernel's, so the process builds the cache itself before reading it."""


def read_if_built() -> Sealed | None:
    """``sealed()`` if the folder has a current manifest, without building it: what a grading
    process does before its first kernel, whatever it grades. A folder without one (or with an
    out-of-date one) is noted as such."""
    folder = grading_cache_dir()
    if folder is None:
        return None
    if folder not in _SEALED and not _is_current(folder):
        _UNBUILT.add(folder)
        return None
    return sealed(folder)


def _read(folder: Path, build_if_missing: bool) -> Sealed | None:
    if folder in _UNBUILT or not _is_current(folder):
        if not build_if_missing:
            return None
        with _lock(folder):
            # another process may have built it meanwhile; not trusted if it was missing when
            # this process started grading
            if folder in _UNBUILT or not _is_current(folder):
                _UNBUILT.discard(folder)
                why = "out of date" if (folder / MANIFEST).is_file() else "not built"
                print(
                    f"Building the instructor's JAX compile cache in {folder} ({why}) from "
                    f"{REFERENCE.name} (once; `python -m encoder_lib.autograde.jax_cache build`)",
                    file=sys.stderr,
                )
                try:
                    build(folder)
                except Exception as error:  # grading goes on without the cache
                    log.warning("could not build the JAX compile cache in %s: %s", folder, error)
                    return None
    try:
        text = (folder / MANIFEST).read_bytes()
        pinned = os.environ.get(DIGEST_VARIABLE)
        if pinned and _sha256(text) != pinned:
            log.warning(
                "the JAX compile cache's manifest in %s changed since grading began: "
                "graded without the cache",
                folder,
            )
            return None
        manifest = json.loads(text)
        entries = dict(manifest["entries"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("the JAX compile cache's manifest in %s is unreadable: %s", folder, error)
        return None
    files, rejected = {}, []
    for name, digest in entries.items():
        if "/" in name or name in (".", "..", MANIFEST):
            rejected.append(name)
            continue
        try:
            data = (folder / name).read_bytes()
        except OSError:
            rejected.append(name)
            continue
        if _sha256(data) == digest:
            files[name] = data
        else:
            rejected.append(name)
    if rejected:
        log.warning(
            "%d of the %d files of the JAX compile cache in %s differ from its manifest and are "
            "not used; build it again: python -m encoder_lib.autograde.jax_cache build",
            len(rejected),
            len(entries),
            folder,
        )
    return Sealed(folder, files, tuple(rejected))


_IMPORTS_JAX = re.compile(r"^\s*(import|from)\s+(jax|flax)\b", re.M)


def imports_jax(nb) -> bool:
    """Whether a code cell of the notebook has a line importing JAX or Flax."""
    return any(c.cell_type == "code" and _IMPORTS_JAX.search(c.source) for c in nb.cells)


def pin(assignments_import_jax: bool = True) -> str | None:
    """Read the manifest now, before any grading kernel has run (building the cache first if
    it has none and a graded assignment imports JAX), and put its digest in this process's
    environment, which the workers it starts inherit; returns the digest, or None."""
    folder = grading_cache_dir()
    if folder is None:
        return None
    if assignments_import_jax and sealed(folder) is None:
        return None
    try:
        digest = _sha256((folder / MANIFEST).read_bytes())
    except OSError:
        return None
    os.environ[DIGEST_VARIABLE] = digest
    return digest


# --- a kernel's private copy ---------------------------------------------------------------------


def kernel_environment(copy: Path | None) -> dict[str, str]:
    """The variables a grading kernel gets: its private copy, read-only; no cache without one."""
    if copy is None:
        return {JAX_CACHE_VARIABLE: "", JAX_CACHE_READ_ONLY_VARIABLE: "1"}
    return {JAX_CACHE_VARIABLE: str(copy), JAX_CACHE_READ_ONLY_VARIABLE: "1"}


@contextlib.contextmanager
def private_copy(cache: Sealed | None, root: Path) -> Iterator[Path | None]:
    """A new folder under ``root`` holding ``cache``'s files (None without a cache), removed at
    the end."""
    if cache is None:
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="jax-cache-", dir=root))
    try:
        for name, data in cache.files.items():
            (folder / name).write_bytes(data)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m encoder_lib.autograde.jax_cache",
        description="Build the instructor's JAX compile cache that notebook 10's grading "
        "kernels read (and never write).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("build", help="compile the reference solution's graded cells")
    make.add_argument(
        "folder", nargs="?", type=Path, help=f"default: ${GRADING_CACHE_VARIABLE} or ~/.cache/..."
    )
    args = parser.parse_args(argv)
    folder = args.folder or grading_cache_dir()
    if folder is None:
        parser.error(f"${GRADING_CACHE_VARIABLE} is empty: no cache to build")
    start = time.perf_counter()
    with _lock(folder):
        entries = build(folder)
    size = sum((folder / name).stat().st_size for name in entries)
    print(
        f"{len(entries)} programs, {size / 1e6:.1f} MB, in {folder} "
        f"({time.perf_counter() - start:.0f} s); grading kernels read them and write nothing"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
