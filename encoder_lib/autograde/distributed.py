"""Grade every submission of a course on Dask: one machine by default, many if you have them.

    python -m encoder_lib.autograde "*"                                  # local cluster
    python -m encoder_lib.autograde 01_self_attention --workers 2
    python -m encoder_lib.autograde "*" --scheduler tcp://10.0.0.5:8786  # a running cluster

Run it in the course folder (or pass ``--course-dir``), where ``nbgrader_config.py`` and the
gradebook are. Each ungraded ``submitted/<student>/<assignment>/`` becomes one task,
``tasks.grade_submission``, which a worker grades in a throwaway nbgrader course of its own; the
inputs travel with the task, so workers need this package installed and nothing else (no shared
file system). Only this process touches the instructor's gradebook: it merges the results as
they arrive, those that finished together in one transaction of a few bulk statements, then
writes ``autograded/`` and ``feedback/``. A submission counts as graded once its
``autograded/<student>/<assignment>/`` folder exists (nbgrader's own rule), so an interrupted run
started again grades only what is missing; ``--force`` grades everything again, replacing rows
rather than adding them.

Every result is also appended to ``logs/grading.jsonl`` (status, reasons, worker, seconds), and
nbgrader's log of each flagged submission goes to ``logs/autograde/<assignment>/<student>.log``
(of every submission with ``--all-logs``).
A flagged submission is not graded again while its files are unchanged, unless
``--retry-flagged``.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import re
import shutil
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psutil

from encoder_lib.autograde import gradebook as G
from encoder_lib.autograde import tasks as T

__all__ = ["Course", "Summary", "grade", "main"]


# --- the instructor's course ---------------------------------------------------------------------


@dataclass
class Course:
    """The instructor's course folder, read through nbgrader's own CourseDirectory."""

    root: Path
    coursedir: object
    config_text: str

    @classmethod
    def open(cls, root: Path, db_url: str | None = None) -> Course:
        from nbgrader.coursedir import CourseDirectory
        from traitlets.config import Config
        from traitlets.config.loader import PyFileConfigLoader

        root = root.resolve()
        path = root / "nbgrader_config.py"
        if not path.is_file():
            raise SystemExit(f"no nbgrader_config.py in {root}: pass the course's --course-dir")
        G.own_bin_first_on_path()
        config = PyFileConfigLoader(path.name, path=str(root)).load_config()
        cd = CourseDirectory(config=config if config else Config())
        cd.root = str(root)
        if db_url:
            cd.db_url = db_url
        return cls(root, cd, path.read_text())

    @property
    def db_url(self) -> str:
        url = self.coursedir.db_url
        if url.startswith("sqlite:") and "?" not in url:
            url += "?timeout=600"  # wait for a formgrader's write instead of failing
        return url

    @property
    def course_id(self) -> str:
        return self.coursedir.course_id

    def path(self, step: str, student: str, assignment: str) -> Path:
        cd = self.coursedir
        folder = {
            "submitted": cd.submitted_directory,
            "autograded": cd.autograded_directory,
            "feedback": cd.feedback_directory,
            "source": cd.source_directory,
        }[step]
        return Path(cd.format_path(folder, student, assignment))

    def submissions(self, assignment: str, student: str = "*") -> list[tuple[str, str]]:
        """(student, assignment) of every submitted folder matching the two globs."""
        cd = self.coursedir
        pattern = cd.format_path(cd.submitted_directory, "(?P<s>[^/]+)", "(?P<a>[^/]+)", True)
        found = []
        for path in glob.glob(str(self.path("submitted", student, assignment))):
            m = re.fullmatch(pattern, path)
            if m and os.path.isdir(path):
                found.append((m["s"], m["a"]))
        return sorted(found)

    def is_graded(self, student: str, assignment: str) -> bool:
        return self.path("autograded", student, assignment).is_dir()

    def files(self, step: str, student: str, assignment: str, notebooks: bool = True):
        """(relative path, content) of the files of one folder, less nbgrader's ignore list."""
        from nbgrader.utils import find_all_files

        folder = self.path(step, student, assignment)
        ignore = list(self.coursedir.ignore) + ([] if notebooks else ["*.ipynb"])
        return tuple(
            (os.path.relpath(p, folder), Path(p).read_bytes())
            for p in sorted(find_all_files(str(folder), ignore))
        )

    def spec(self, gb, assignment: str, overrides: tuple[str, ...]) -> G.AssignmentSpec:
        source = self.files("source", ".", assignment, notebooks=False)
        return G.assignment_spec(gb, assignment, self.config_text, source, overrides)

    # --- writing results (this process only) ---

    def write_folder(self, step: str, student: str, assignment: str, files) -> None:
        """Replace the folder with these files: written beside it, then renamed into place."""
        dest = self.path(step, student, assignment)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.parent / f".{dest.name}.incoming-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        for rel, content, mode in files:
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            path.chmod(mode)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.mkdir(exist_ok=True)
        tmp.rename(dest)

    def remove_folder(self, step: str, student: str, assignment: str) -> None:
        shutil.rmtree(self.path(step, student, assignment), ignore_errors=True)

    @property
    def ledger(self) -> Path:
        return self.root / "logs" / "grading.jsonl"

    def last_entries(self) -> dict[tuple[str, str], dict]:
        """The latest ledger line of each (student, assignment)."""
        last = {}
        if self.ledger.is_file():
            for line in self.ledger.read_text().splitlines():
                try:
                    entry = json.loads(line)
                    last[entry["student"], entry["assignment"]] = entry
                except (ValueError, KeyError):
                    continue  # a line cut short by an interruption
        return last

    def append_ledger(self, entry: dict) -> None:
        self.ledger.parent.mkdir(parents=True, exist_ok=True)
        with self.ledger.open("a") as f:
            f.write(json.dumps(entry, default=str) + "\n")


# --- the run -------------------------------------------------------------------------------------


@dataclass
class Summary:
    graded: list[tuple[str, str]] = field(default_factory=list)
    flagged: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    failed: dict[tuple[str, str], str] = field(default_factory=dict)
    still_flagged: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """Flagged by an earlier run, files unchanged since: not graded again."""
    skipped: int = 0
    left: int = 0
    """Submissions not graded because the run was interrupted."""
    seconds: float = 0.0
    """The whole run: ``grade``'s own time; the command replaces it with its process's lifetime
    (Python's start and the cluster's start and stop included), what ``time`` would say."""
    grading_seconds: float = 0.0
    """From the first task handed to the cluster to the last result merged: what the progress
    bar counts."""
    task_seconds: list[float] = field(default_factory=list)
    """Each result's time on its worker."""
    fetch_seconds: list[float] = field(default_factory=list)
    """Each result's time to reach this process from its worker."""
    merge_seconds: list[float] = field(default_factory=list)
    """Each result's time in this process after that (its share of the gradebook transaction,
    files, ledger)."""
    merge_cpu_seconds: list[float] = field(default_factory=list)
    """The same, counted in this thread's CPU time: what merging costs where workers do not share
    the instructor's cores."""
    workers: set[str] = field(default_factory=set)
    by_worker: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return 1 if self.flagged or self.still_flagged or self.failed or self.left else 0

    def lines(self) -> list[str]:
        n = len(self.graded) + len(self.flagged)
        head = (
            f"graded {len(self.graded)}, flagged {len(self.flagged)}, failed {len(self.failed)}"
            f", skipped {self.skipped} (already graded)"
        )
        if self.still_flagged:
            head += f", still flagged {len(self.still_flagged)} (unchanged)"
        if self.left:
            head += f", not graded {self.left} (interrupted)"
        head += f" in {self.seconds:.1f} s"
        if n:
            workers = len(self.workers)
            head += (
                f", of which {self.grading_seconds:.1f} s grading ({self.grading_seconds / n:.2f} s"
                f" per submission with {workers} worker{'s' if workers != 1 else ''}; the rest "
                "starts and stops the cluster and reads the gradebook)"
            )
        out = [head]
        out += [f"  flagged {s}/{a}: " + "; ".join(r) for (s, a), r in sorted(self.flagged.items())]
        out += [f"  failed {s}/{a}: {why}" for (s, a), why in sorted(self.failed.items())]
        out += [
            f"  still flagged {s}/{a}: " + "; ".join(r) + " (--retry-flagged grades it again)"
            for (s, a), r in sorted(self.still_flagged.items())
        ]
        return out


def _local_cluster(workers: int | None):
    import logging

    from distributed import LocalCluster

    return LocalCluster(
        n_workers=workers or len(os.sched_getaffinity(0)),
        threads_per_worker=1,  # tasks.grade_submission grades one submission per process
        processes=True,
        dashboard_address=":0",  # any free port: several clusters can run side by side
        silence_logs=logging.ERROR,
    )


@contextlib.contextmanager
def open_client(scheduler: str | None, workers: int | None):
    """A Dask client: on ``scheduler`` if given, else on a local cluster of ``workers``."""
    from distributed import Client

    if scheduler:
        with Client(scheduler, timeout="60s") as client:
            yield client
    else:
        with _local_cluster(workers) as cluster, Client(cluster) as client:
            yield client


def _progress(total: int, enabled: bool | None):
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit="submission",
        disable=(not enabled) if enabled is not None else None,
        file=sys.stderr,
        dynamic_ncols=True,
        smoothing=0,  # the mean rate since the start: at the end, the summary's per submission
    )


def grade(
    course: Course,
    assignments: list[str],
    client,
    *,
    student: str = "*",
    force: bool = False,
    retry_flagged: bool = False,
    limits: T.Limits | None = None,
    overrides: tuple[str, ...] = (),
    progress: bool | None = None,
    all_logs: bool = False,
    say=print,
) -> Summary:
    """Grade the submissions of ``assignments`` (names or globs) on ``client``'s cluster."""
    from distributed import as_completed
    from nbgrader.api import Gradebook, MissingEntry

    limits = limits or T.Limits()
    start = time.perf_counter()
    summary = Summary()
    found = sorted({p for a in assignments for p in course.submissions(a, student)})
    last = course.last_entries()
    todo = []
    for s, a in found:
        entry = last.get((s, a), {})
        if not force and course.is_graded(s, a):
            summary.skipped += 1
        elif not (force or retry_flagged) and entry.get("status") == "flagged":
            digest = T.Submission(s, a, course.files("submitted", s, a)).digest
            if entry.get("digest") == digest:
                summary.still_flagged[s, a] = entry.get("reasons", [])
                continue
            todo.append((s, a))
        else:
            todo.append((s, a))
    if not todo:
        summary.seconds = time.perf_counter() - start
        return summary

    with Gradebook(course.db_url, course.course_id) as gb:
        specs = {}
        for a in sorted({a for _, a in todo}):
            try:
                specs[a] = _share(client, course.spec(gb, a, overrides))
            except MissingEntry:
                why = f"{a} is not in the gradebook (run nbgrader generate_assignment {a})"
                summary.failed.update({(s, b): why for s, b in todo if b == a})
        queue = deque((s, a) for s, a in todo if a in specs)
        keys = {}

        def submit(s: str, a: str):
            files = course.files("submitted", s, a)
            future = client.submit(
                T.grade_submission,
                specs[a],
                T.Submission(s, a, files),
                limits,
                key=f"grade-{a}-{s}-{time.time_ns()}",
                retries=1,
            )
            keys[future.key] = (s, a)
            return future

        bar = _progress(len(queue), progress)
        grading_start = time.perf_counter()
        pending = as_completed()
        window, sized, batch = 8, 0.0, []
        try:
            while queue or pending.count():
                if time.monotonic() - sized > 5:  # workers may come and go (dask-jobqueue)
                    window, sized = max(8, 4 * sum(client.nthreads().values())), time.monotonic()
                while queue and pending.count() < window:
                    pending.add(submit(*queue.popleft()))
                # Every task finished by now, at least one: merged in one gradebook transaction.
                batch = [(f, *keys.pop(f.key)) for f in pending.next_batch(block=True)]
                _record(course, gb, batch, summary, all_logs)
                for future, s, a in batch:
                    future.release()
                    if (s, a) in summary.flagged or (s, a) in summary.failed:
                        reasons = summary.flagged.get((s, a)) or [summary.failed.get((s, a))]
                        bar.write(f"{s}/{a}: " + "; ".join(map(str, reasons)), file=sys.stderr)
                bar.update(len(batch))
                batch = []
                bar.set_postfix(
                    graded=len(summary.graded),
                    flagged=len(summary.flagged),
                    failed=len(summary.failed),
                    refresh=False,
                )
        except KeyboardInterrupt:
            done = {*summary.graded, *summary.flagged, *summary.failed}
            summary.left = (
                len(queue) + pending.count() + sum((s, a) not in done for _, s, a in batch)
            )
            client.cancel(list(pending.futures))
            say("interrupted: what was merged is kept; run the same command again to go on")
        finally:
            bar.close()
    summary.grading_seconds = time.perf_counter() - grading_start
    summary.seconds = time.perf_counter() - start
    return summary


def _share(client, spec: G.AssignmentSpec):
    """The spec as a task every grading task depends on: the workers fetch it once each.

    Not ``client.scatter``: scattered data has no recipe, so when the only worker holding it dies
    it is lost, and every task that needs it is cancelled ("already forgotten"). Broadcasting does
    not prevent that: Dask's active memory manager drops the replicas that no waiting task on a
    worker needs, so one copy may be all that is left. A task's result is computed again
    elsewhere, from the spec the scheduler keeps in the task."""
    return client.submit(_same, spec, key=f"spec-{spec.name}-{spec.digest}")


def _same(spec: G.AssignmentSpec) -> G.AssignmentSpec:
    return spec


def _record(course: Course, gb, batch, summary: Summary, all_logs: bool = False) -> None:
    """Merge finished tasks, ``(future, student, assignment)``, into the gradebook (one
    transaction for all of them) and then the course folder, and note them.

    The folders are written after the commit: a submission whose ``autograded/`` folder exists
    counts as graded, so it must never exist for grades the gradebook does not hold (an
    interruption between the two only means grading that submission again next run)."""
    from distributed import KilledWorker

    results = []
    t = time.perf_counter()
    for future, s, a in batch:
        entry = {"time": datetime.now(UTC).isoformat(), "student": s, "assignment": a}
        try:
            results.append((entry, future.result()))
        except KilledWorker as e:
            # The scheduler gave up after the task's workers died several times (for example,
            # the student's code killed its parent process): flag the submission, as nbgrader
            # would.
            reason = f"its grading killed {e.args[-1] if e.args else 'several'} workers"
            results.append((entry, T.TaskResult(s, a, "", True, [reason], None, None)))
        except Exception as e:  # not the submission's fault: leave it ungraded, report it
            _failed(course, summary, entry, f"{type(e).__name__}: {e}")
    summary.fetch_seconds += [(time.perf_counter() - t) / len(batch)] * len(batch)
    t, cpu = time.perf_counter(), time.thread_time()
    for entry, result in _merge(gb, results, course, summary):
        s, a = entry["student"], entry["assignment"]
        try:
            if result.notebooks is not None:
                course.write_folder("autograded", s, a, result.autograded)
                if result.feedback:
                    course.write_folder("feedback", s, a, result.feedback)
            else:
                course.remove_folder("autograded", s, a)
        except Exception as e:  # in the gradebook but not on disk: graded again next run
            course.remove_folder("autograded", s, a)
            _failed(course, summary, entry, f"could not write its files: {type(e).__name__}: {e}")
            continue
        _note(course, summary, entry, result, all_logs)
    summary.merge_seconds += [(time.perf_counter() - t) / len(batch)] * len(batch)
    summary.merge_cpu_seconds += [(time.thread_time() - cpu) / len(batch)] * len(batch)


def _merge(gb, results: list, course: Course, summary: Summary) -> list:
    """The results the gradebook took: all of them in one transaction of a few bulk statements
    (``gradebook.merge_many``); if it refuses one (or the commit fails), each again in a
    transaction of its own, so that only the ones it refuses fail (they are graded next run)."""

    def item(entry, result) -> G.GradedSubmission:
        a, s = entry["assignment"], entry["student"]
        return G.GradedSubmission(a, s, result.timestamp, result.notebooks, result.flagged)

    try:
        G.merge_many(gb, [item(entry, result) for entry, result in results])
        return results
    except Exception:
        pass  # merge_many rolled the batch back
    taken = []
    for entry, result in results:
        try:
            G.merge_many(gb, [item(entry, result)])
            taken.append((entry, result))
        except Exception as e:  # graded next run, even if an earlier run had graded it
            course.remove_folder("autograded", entry["student"], entry["assignment"])
            why = f"could not record the result: {type(e).__name__}: {e}"
            _failed(course, summary, entry, why)
    return taken


def _failed(course: Course, summary: Summary, entry: dict, why: str) -> None:
    summary.failed[entry["student"], entry["assignment"]] = why
    course.append_ledger({**entry, "status": "failed", "error": why})


def _note(course: Course, summary: Summary, entry: dict, result, all_logs: bool) -> None:
    """The summary's and the ledger's line for a merged result."""
    s, a = entry["student"], entry["assignment"]
    if result.flagged:
        summary.flagged[s, a] = result.reasons
    if (result.flagged or all_logs) and result.log:
        log = course.root / "logs" / "autograde" / a / f"{s}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(result.log)
    if not result.flagged:
        summary.graded.append((s, a))
    summary.workers.add(result.worker)
    summary.by_worker[s, a] = result.worker
    summary.task_seconds.append(result.seconds.get("total", 0.0))
    course.append_ledger(
        {
            **entry,
            "status": "flagged" if result.flagged else "graded",
            "reasons": result.reasons,
            "digest": result.digest,
            "worker": result.worker,
            "seconds": {k: round(v, 3) for k, v in result.seconds.items()},
        }
    )


# --- command line --------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    overrides: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, overrides = argv[:cut], argv[cut + 1 :]
    args = argument_parser().parse_args(argv)
    args.overrides = tuple(overrides)
    return args


def argument_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m encoder_lib.autograde``."""
    doc = __doc__.split("\n\n")
    parser = argparse.ArgumentParser(
        prog="python -m encoder_lib.autograde",
        description=doc[0] + " Arguments after -- are nbgrader settings for every submission"
        " (e.g. -- --Execute.timeout=120).",
    )
    parser.add_argument("assignments", nargs="+", help='assignment names or globs, e.g. "*"')
    parser.add_argument(
        "--course-dir",
        type=Path,
        default=Path.cwd(),
        help="the nbgrader course folder, where nbgrader_config.py and the gradebook are "
        "(default: the current folder)",
    )
    parser.add_argument("--scheduler", help="address of a running Dask scheduler (tcp://HOST:8786)")
    parser.add_argument(
        "--workers", type=int, help="size of the local cluster (default: one per core)"
    )
    parser.add_argument("--student", default="*", help="only these students (a glob)")
    parser.add_argument("--force", action="store_true", help="grade graded submissions again")
    parser.add_argument(
        "--retry-flagged", action="store_true", help="grade unchanged flagged submissions again"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=T.Limits.timeout,
        help="seconds for one submission, all its notebooks (default %(default)g)",
    )
    parser.add_argument(
        "--memory-mb",
        type=int,
        default=T.Limits.memory_mb,
        help="data memory of each kernel in MiB (default %(default)d)",
    )
    parser.add_argument("--no-feedback", action="store_true", help="skip the feedback HTML")
    parser.add_argument(
        "--all-logs",
        action="store_true",
        help="keep nbgrader's log of every submission, not only of flagged ones",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar (default: when stderr is a terminal)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    course = Course.open(args.course_dir)
    limits = T.Limits(args.timeout, args.memory_mb, not args.no_feedback)
    where = args.scheduler or f"a local cluster of {args.workers or len(os.sched_getaffinity(0))}"
    print(f"grading {' '.join(args.assignments)} in {course.root} on {where}", flush=True)
    with open_client(args.scheduler, args.workers) as client:
        summary = grade(
            course,
            args.assignments,
            client,
            student=args.student,
            force=args.force,
            retry_flagged=args.retry_flagged,
            limits=limits,
            overrides=args.overrides,
            progress=args.progress,
            all_logs=args.all_logs,
        )
    summary.seconds = time.time() - psutil.Process().create_time()  # as `time` would measure
    print("\n".join(summary.lines()), flush=True)
    return summary.exit_code


if __name__ == "__main__":
    sys.exit(main())
