"""The unit of grading work: one student's submission of one assignment, graded on a worker.

``grade_submission(spec, submission, limits)`` is what a Dask worker runs. It builds a throwaway
nbgrader course in a temporary folder (the instructor's ``nbgrader_config.py`` verbatim, a
gradebook holding only this assignment, the source folder's extra files, the submitted files;
the gradebook is one file per worker process, opened through engines the process keeps),
runs nbgrader's own ``Autograde`` converter in this process (and ``GenerateFeedback`` after it),
and returns what the instructor needs: the grade rows, the autograded notebooks and the feedback
HTML. Everything it needs travels with the task; nothing is read from or written to the
instructor's course, and the student's code runs in a kernel whose working folder is the
throwaway course.

A watchdog thread finds the kernels nbgrader starts for this task, caps their data memory
(``RLIMIT_DATA``: an allocation past the cap raises ``MemoryError`` in the cell) and kills them
when the submission runs past its time limit. Anything unusual (a kernel that died, a cell that
timed out or ran out of memory, a notebook nbgrader could not read, the time limit) flags the
submission with the reason; the grades nbgrader could record are kept.

Grading runs one submission at a time per process (nbgrader changes the working directory while
it converts): start workers with one thread each (``--nthreads 1``).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import hashlib
import io
import logging
import os
import shutil
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import nbformat
import psutil

from encoder_lib.autograde import gradebook as G
from encoder_lib.autograde import scratch

__all__ = ["Limits", "Submission", "TaskResult", "grade_submission", "warm_up"]

SOURCE, SUBMITTED, AUTOGRADED, FEEDBACK = "source", "submitted", "autograded", "feedback"


@dataclass(frozen=True)
class Limits:
    """What one submission may use on a worker."""

    timeout: float = 900.0
    """Seconds for the whole submission (all its notebooks); its kernel is killed after that.
    nbgrader's ``Execute.timeout`` still limits each cell."""
    memory_mb: int = 4096
    """Data memory of each kernel (a torch + matplotlib kernel needs about 400 MB)."""
    feedback: bool = True
    """Also render the feedback HTML (nbgrader's ``generate_feedback``)."""


@dataclass(frozen=True)
class Submission:
    """One student's submitted folder for one assignment, as (relative path, content) pairs."""

    student: str
    assignment: str
    files: tuple[tuple[str, bytes], ...]

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for path, content in sorted(self.files):
            h.update(path.encode() + b"\0" + hashlib.sha256(content).digest())
        return h.hexdigest()[:16]


@dataclass
class TaskResult:
    """What a worker sends back for one submission."""

    student: str
    assignment: str
    digest: str
    flagged: bool
    reasons: list[str]
    timestamp: datetime | None
    notebooks: list[G.NotebookOutcome] | None
    """None when nbgrader could not grade the submission at all."""
    autograded: list[tuple[str, bytes, int]] = field(default_factory=list)
    """(path relative to autograded/<student>/<assignment>/, content, mode)."""
    feedback: list[tuple[str, bytes, int]] = field(default_factory=list)
    log: str = ""
    """nbgrader's log for this submission."""
    seconds: dict[str, float] = field(default_factory=dict)
    worker: str = ""


# --- per-process state ---------------------------------------------------------------------------

_LOCK = threading.Lock()
_CONFIGS: dict[str, object] = {}
# What the worker adds to the instructor's config (only where that config leaves it unset),
# none of it about what is graded:
# - nbclient's default "graceful" shutdown waits about 1 s per notebook for the kernel to exit
#   after every cell has run and its outputs are in; killing it then changes nothing graded;
# - kernels talk to nbgrader over local sockets (files named after the kernel's id) instead of
#   TCP ports picked at random, which two workers on one machine can both pick.
_WORKER_DEFAULTS = {
    "Execute": {"shutdown_kernel": "immediate"},
    "KernelManager": {"transport": "ipc"},
}
_TEMPLATES: dict[str, Path] = {}
_CACHE: Path | None = None
_ENGINES: dict[tuple, object] = {}


def _cache() -> Path:
    global _CACHE
    if _CACHE is None:
        _CACHE = scratch.make("grade-cache", scratch.scratch_root())
        atexit.register(shutil.rmtree, _CACHE, True)
    return _CACHE


def _config(text: str, overrides: tuple[str, ...] = ()):
    """The traitlets Config of an nbgrader_config.py text and command-line settings (loaded once
    per process)."""
    from traitlets.config.loader import KVArgParseConfigLoader, PyFileConfigLoader

    key = hashlib.sha256("\0".join((text, *overrides)).encode()).hexdigest()
    if key not in _CONFIGS:
        folder = _cache() / f"config-{key[:16]}"
        folder.mkdir(exist_ok=True)
        (folder / "nbgrader_config.py").write_text(text)
        config = PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config()
        if overrides:
            config.merge(KVArgParseConfigLoader(list(overrides)).load_config())
        for section, values in _WORKER_DEFAULTS.items():
            for name, value in values.items():
                if name not in config[section]:
                    config[section][name] = value
        _CONFIGS[key] = config
    return copy.deepcopy(_CONFIGS[key])


def _template(spec: G.AssignmentSpec) -> Path:
    """The spec's gradebook as a file (written once per process)."""
    key = spec.digest
    if key not in _TEMPLATES:
        path = _cache() / f"gradebook-{spec.name}-{key}.db"
        path.write_bytes(spec.gradebook)
        _TEMPLATES[key] = path
    return _TEMPLATES[key]


def _gradebook_path() -> Path:
    """Where this process's task keeps its gradebook: the same file for every task, so that
    nbgrader's queries are compiled once per process (``_shared_engines``)."""
    return _cache() / "gradebook.db"


def _shared_engine(url, **kwargs):
    """``sqlalchemy.create_engine``, one engine per URL and arguments in this process.

    nbgrader opens the gradebook about ten times per notebook (``Gradebook(db_url)`` in
    autograde, its preprocessors and generate_feedback), each time with an engine of its own,
    and SQLAlchemy keeps compiled statements per engine: every open compiled nbgrader's queries
    again (its scores are subqueries), about 0.2 s per notebook. ``Gradebook.close`` disposes
    of the engine's connections, not of the engine, so a later open of the same file reuses
    it."""
    from sqlalchemy import create_engine

    key = (str(url), tuple(sorted(kwargs.items())))
    if key not in _ENGINES:
        _ENGINES[key] = create_engine(url, **kwargs)
    return _ENGINES[key]


@contextlib.contextmanager
def _shared_engines():
    """nbgrader's gradebooks opened meanwhile share ``_shared_engine``'s engines; their
    connections are closed at the end, before the gradebook's file is replaced."""
    import nbgrader.api

    own = nbgrader.api.create_engine
    nbgrader.api.create_engine = _shared_engine
    try:
        yield
    finally:
        nbgrader.api.create_engine = own
        for engine in _ENGINES.values():
            engine.dispose()


def warm_up(warm_kernels: bool = False, with_jax: bool = False) -> str:
    """Import what grading needs (run once per worker before the clock starts, optional); with
    ``warm_kernels``, also start the warm kernel source, which the first kernel would start
    (and, ``with_jax``, the source of the kernels of notebooks that import JAX)."""
    import nbconvert.exporters  # noqa: F401
    import nbgrader.converters
    import nbgrader.preprocessors  # noqa: F401

    # nbgrader_config.py names the grader's preprocessors as strings: import them (and torch).
    import encoder_lib.autograde.disable_code_above_setup
    import encoder_lib.autograde.judge_execute
    import encoder_lib.autograde.overwrite  # noqa: F401

    if warm_kernels:
        from encoder_lib.autograde.warm_kernels import start_source

        start_source()
        if with_jax:
            start_source(with_jax=True)
    return f"{socket.gethostname()}:{os.getpid()}"


# --- the watchdog --------------------------------------------------------------------------------


class _Watchdog(threading.Thread):
    """Caps the memory of this task's kernels and kills them past the deadline.

    A kernel is a process descending from this one whose working folder is inside the task's
    folder (nbgrader runs each notebook's kernel in the notebook's folder): a child, or a
    grandchild forked by the warm kernel source (``warm_kernels``; its own folder is elsewhere).
    """

    def __init__(self, root: Path, limits: Limits, poll: float = 0.05):
        super().__init__(daemon=True)
        self.root = str(root)
        self.limits = limits
        self.poll = poll
        self.deadline = time.monotonic() + limits.timeout
        self.kernels: dict[int, psutil.Process] = {}
        self.descendants: dict[int, psutil.Process] = {}
        self.first_seen: float | None = None
        self.reason: str | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        cap = self.limits.memory_mb * 2**20
        while not self._stop_event.wait(self.poll):
            for child in me.children(recursive=True):
                if child.pid in self.kernels:
                    continue
                try:
                    if not child.cwd().startswith(self.root):
                        continue
                    self.kernels[child.pid] = child
                    self.first_seen = self.first_seen or time.monotonic()
                    if cap > 0 and hasattr(psutil, "RLIMIT_DATA"):
                        child.rlimit(psutil.RLIMIT_DATA, (cap, cap))
                except (psutil.Error, OSError):
                    continue
            for kernel in self.kernels.values():
                with contextlib.suppress(psutil.Error):
                    self.descendants.update((p.pid, p) for p in kernel.children(recursive=True))
            if time.monotonic() > self.deadline and self.kernels:
                if self.reason is None:
                    self.reason = (
                        f"ran longer than the time limit of {self.limits.timeout:g} s "
                        "(its kernel was stopped)"
                    )
                self.kill()

    def kill(self) -> None:
        """Kill this task's kernels and every process they started (psutil checks that a pid
        still names the same process before it sends a signal)."""
        for p in [*self.kernels.values(), *self.descendants.values()]:
            with contextlib.suppress(psutil.Error):
                p.kill()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.kill()  # normally already shut down by nbgrader; children it left behind go too


# --- grading -------------------------------------------------------------------------------------


def _coursedir(config, root: Path, spec: G.AssignmentSpec, student: str, db: Path):
    from nbgrader.coursedir import CourseDirectory

    cd = CourseDirectory(config=config)
    cd.root = str(root)
    cd.course_id = spec.course_id
    cd.db_url = f"sqlite:///{db}"
    cd.source_directory = SOURCE
    cd.submitted_directory = SUBMITTED
    cd.autograded_directory = AUTOGRADED
    cd.feedback_directory = FEEDBACK
    cd.student_id_exclude = ""
    cd.assignment_id = spec.name
    cd.student_id = student
    cd.notebook_id = "*"
    return cd


def _run(converter_class, coursedir, config) -> tuple[bool, str]:
    """Run an nbgrader converter in this process; returns (succeeded, its log)."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("[%(asctime)s %(levelname)s] %(message)s"))
    log = logging.getLogger(f"encoder_lib.autograde.{converter_class.__name__}")
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    app = converter_class(coursedir=coursedir, config=config, log=log)
    app.force = True
    if hasattr(app, "create_student"):
        app.create_student = True
    try:
        app.start()
        ok = True
    except Exception:  # nbgrader already logged why; its NbGraderException says only "see above"
        ok = False
    finally:
        handler.flush()
        log.handlers[:] = []
    return ok, buffer.getvalue()


@contextlib.contextmanager
def _stderr_into(path: Path):
    """Send this process's file descriptor 2 to ``path`` for a while: the kernels nbgrader
    starts inherit it, so what they print there (a crash message) lands in the task's log
    instead of the worker's terminal. Warnings this process prints meanwhile go there too."""
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("wb") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _write(root: Path, files) -> None:
    for rel, content in files:
        path = root / rel
        if not path.resolve().is_relative_to(root.resolve()):
            raise ValueError(f"file outside its folder: {rel!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def _collect(folder: Path) -> list[tuple[str, bytes, int]]:
    if not folder.is_dir():
        return []
    return [
        (str(p.relative_to(folder)), p.read_bytes(), p.stat().st_mode & 0o777)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    ]


def _failure_reason(log: str) -> str:
    """One line saying why nbgrader could not grade the submission, from its log."""
    if "DeadKernelError" in log or "Kernel died" in log:
        return "its kernel died (the code ended or crashed the Python process)"
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if "There was an error processing assignment:" in line:
            trace = []
            for later in lines[i + 1 :]:
                if later.startswith("[") and trace:
                    break
                trace.append(later)
            last = [t.strip() for t in trace if t.strip() and not t.startswith("[")]
            if last:
                return "nbgrader could not grade it: " + last[-1][:300]
    errors = [line for line in lines if line.startswith("[ERROR]")]
    return "nbgrader could not grade it: " + (errors[0][8:300] if errors else "no log")


def _cell_troubles(folder: Path, limits: Limits) -> list[str]:
    """Cells of the autograded notebooks that timed out, ran out of memory or lost their kernel
    (a grader that judges cells outside the kernel may record a dead kernel and go on)."""
    reasons = []
    for path in sorted(folder.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"#{i}"
            for out in cell.get("outputs", []):
                if out.get("output_type") != "error":
                    continue
                ename, evalue = out.get("ename", ""), out.get("evalue", "")
                if ename == "CellTimeoutError":
                    reasons.append(f"{path.stem}: cell {name} timed out")
                elif ename == "MemoryError" or "can't allocate memory" in evalue:
                    reasons.append(
                        f"{path.stem}: cell {name} ran out of memory (limit {limits.memory_mb} MiB)"
                    )
                elif ename == "DeadKernelError" or "kernel died" in (
                    f"{evalue} {out.get('traceback', '')}".lower()
                ):
                    reasons.append(f"{path.stem}: its kernel died in cell {name}")
    return reasons


def grade_submission(
    spec: G.AssignmentSpec, submission: Submission, limits: Limits = Limits()
) -> TaskResult:
    """Grade one submission in a throwaway course; see the module's docstring."""
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.converters import Autograde, GenerateFeedback

    if submission.assignment != spec.name:
        raise ValueError(f"{submission.assignment} graded against the spec of {spec.name}")
    student, a = submission.student, spec.name
    G.own_bin_first_on_path()
    with _LOCK, _shared_engines():
        t0 = time.perf_counter()
        seconds: dict[str, float] = {}
        root = scratch.make("grade", scratch.scratch_root()) / "course"
        watchdog = None
        try:
            root.mkdir()
            (root / "nbgrader_config.py").write_text(spec.config_text)
            _write(root / SOURCE / a, spec.source_files)
            _write(root / SUBMITTED / student / a, submission.files)
            db = _gradebook_path()
            shutil.copyfile(_template(spec), db)
            config = _config(spec.config_text, spec.config_overrides)
            if config.KernelManager.get("transport") == "ipc" and "ip" not in config.KernelManager:
                config.KernelManager.ip = str(root.parent / "kernel")  # an absolute socket path
            coursedir = _coursedir(config, root, spec, student, db)
            seconds["prepare"] = time.perf_counter() - t0

            t = time.perf_counter()
            watchdog = _Watchdog(root, limits)
            watchdog.start()
            stderr = root.parent / "stderr.txt"
            with _stderr_into(stderr):
                ok, log = _run(Autograde, coursedir, config)
            watchdog.stop()
            seconds["autograde"] = time.perf_counter() - t
            if watchdog.first_seen is not None:
                seconds["to first kernel"] = watchdog.first_seen - (t0 + seconds["prepare"])

            with Gradebook(coursedir.db_url, spec.course_id) as gb:
                try:
                    timestamp, notebooks = G.read_outcome(gb, a, student)
                except MissingEntry:  # failed before the submission row was made
                    timestamp, notebooks = None, None
            graded_dir = root / AUTOGRADED / student / a
            produced = ok and any(graded_dir.glob("*.ipynb"))
            reasons = []
            if watchdog.reason:
                reasons.append(watchdog.reason)
            if not produced:
                notebooks = None
                if not watchdog.reason:
                    reasons.append(_failure_reason(log))
            else:
                reasons += _cell_troubles(graded_dir, limits)

            feedback = []
            if produced and limits.feedback:
                t = time.perf_counter()
                with _stderr_into(stderr.with_name("stderr-feedback.txt")):
                    fb_ok, fb_log = _run(GenerateFeedback, coursedir, config)
                seconds["feedback"] = time.perf_counter() - t
                if not fb_ok:
                    log += "\n--- generate_feedback ---\n" + fb_log
                feedback = _collect(root / FEEDBACK / student / a)
            printed = stderr.read_text(errors="replace").strip()
            if printed:
                log += "\n--- stderr of nbgrader and the kernels ---\n" + printed[-20000:]
            result = TaskResult(
                student=student,
                assignment=a,
                digest=submission.digest,
                flagged=bool(reasons),
                reasons=reasons,
                timestamp=timestamp,
                notebooks=notebooks,
                autograded=_collect(graded_dir) if produced else [],
                feedback=feedback,
                log=log,
                worker=f"{socket.gethostname()}:{os.getpid()}",
            )
        finally:
            if watchdog is not None and watchdog.is_alive():
                watchdog.stop()
            shutil.rmtree(root.parent, ignore_errors=True)
            _gradebook_path().unlink(missing_ok=True)
        seconds["total"] = time.perf_counter() - t0
        result.seconds = seconds
        return result
