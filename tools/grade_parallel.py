"""Autograde with several `nbgrader autograde` processes sharing one gradebook.

    python tools/grade_parallel.py 01_self_attention --workers 2
    python tools/grade_parallel.py "*" --workers 2                 # every assignment at once
    python tools/grade_parallel.py 05_encoder -k 4 -- --Execute.timeout=120

Run it in the course folder (or pass --course-dir). The ungraded submissions of the assignment
(or glob) -- submitted/<student>/<assignment>/ without autograded/<student>/<assignment>/ -- are
split by student into K shares of about equal work, and worker i runs one plain

    nbgrader autograde ASSIGNMENT --student=* --CourseDirectory.student_id_exclude=<others>

so every student is graded by exactly one process, each process starts once (nbgrader itself
takes about 2 s to start), and nbgrader writes the grades as usual. The workers share the
course's sqlite gradebook. nbgrader's writes are short transactions; the tool gives sqlite a
long busy timeout (``?timeout=`` on the database URL, unless nbgrader_config.py sets db_url) so
that a worker waits for the other's write instead of failing with "database is locked", which
would abort that worker's run. Workers are pinned to distinct cores when there are enough, so
each kernel's torch uses one thread instead of oversubscribing the machine.

Afterwards every submission must have its autograded folder; a missing one is retried once on
its own, and those still missing (e.g. a malformed notebook, which nbgrader reports in the log
and skips) are listed and make the exit status 1. Arguments after ``--`` go to every
``nbgrader autograde``. Logs: <course>/logs/autograde-<assignment>-worker<i>.log.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def submissions(root: Path, assignment: str) -> list[tuple[str, str]]:
    """(student, assignment) for every submitted/<student>/<assignment>/ matching the glob."""
    submitted = root / "submitted"
    if not submitted.is_dir():
        return []
    return sorted((p.parent.name, p.name) for p in submitted.glob(f"*/{assignment}") if p.is_dir())


def is_graded(root: Path, student: str, assignment: str) -> bool:
    return (root / "autograded" / student / assignment).is_dir()


def db_url_args(root: Path, busy_timeout: float) -> list[str]:
    """Point nbgrader at the course's sqlite gradebook with a busy timeout, unless the course's
    config chooses its own database."""
    config = root / "nbgrader_config.py"
    if config.is_file() and "db_url" in config.read_text():
        return []
    return [f"--CourseDirectory.db_url=sqlite:///{root / 'gradebook.db'}?timeout={busy_timeout:g}"]


def nbgrader_command() -> list[str]:
    here = Path(sys.executable).parent / "nbgrader"
    return [str(here)] if here.exists() else ["nbgrader"]


def deal(todo: list[tuple[str, str]], workers: int) -> list[list[str]]:
    """Students split into at most ``workers`` shares with about the same number of notebooks
    each (largest first, each to the lightest share)."""
    load: dict[str, int] = {}
    for student, _ in todo:
        load[student] = load.get(student, 0) + 1
    shares: list[list[str]] = [[] for _ in range(max(1, min(workers, len(load))))]
    weight = [0] * len(shares)
    for student in sorted(load, key=lambda s: (-load[s], s)):
        i = weight.index(min(weight))
        shares[i].append(student)
        weight[i] += load[student]
    return [sorted(s) for s in shares if s]


def run_workers(
    root: Path, assignment: str, shares: list[list[str]], extra: list[str], pin: bool
) -> list[tuple[list[str], int, float, str]]:
    """Start one nbgrader process per share; returns (share, exit code, seconds, log tail)."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = pin and len(shares) > 1 and len(cores) >= len(shares)
    everyone = {s for share in shares for s in share} | {
        p.name for p in (root / "submitted").iterdir() if p.is_dir()
    }
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    tag = "all" if assignment == "*" else assignment.replace("*", "_")
    running = []
    for i, share in enumerate(shares):
        others = sorted(everyone - set(share))
        cmd = [*nbgrader_command(), "autograde", assignment, "--student=*", *extra]
        if others:
            cmd.append("--CourseDirectory.student_id_exclude=" + ",".join(others))
        log = (logs / f"autograde-{tag}-worker{i}.log").open("w")
        core = cores[i] if pin else None
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=(lambda c=core: os.sched_setaffinity(0, {c})) if core is not None else None,
        )
        running.append((share, proc, start, log))
    results = []
    for share, proc, start, log in running:
        code = proc.wait()
        seconds = time.perf_counter() - start
        log.close()
        results.append((share, code, seconds, Path(log.name).read_text()[-3000:]))
    return results


def grade(
    root: Path,
    assignment: str,
    workers: int,
    extra: list[str],
    pin: bool = True,
    busy_timeout: float = 600,
    quiet: bool = False,
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], float]:
    """Grade the ungraded submissions of ``assignment`` (a name or a glob such as ``*``).

    Returns (graded, failed, seconds), graded and failed as (student, assignment) pairs."""
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    found = submissions(root, assignment)
    force = "--force" in extra
    todo = [(s, a) for s, a in found if force or not is_graded(root, s, a)]
    if not todo:
        say(f"{assignment}: nothing to grade ({len(found)} submissions already graded)")
        return [], [], 0.0
    extra = [*db_url_args(root, busy_timeout), *extra]
    start = time.perf_counter()
    shares = deal(todo, workers)
    for share, code, seconds, tail in run_workers(root, assignment, shares, extra, pin):
        n = sum(1 for s, _ in todo if s in share)
        say(f"{assignment}: a worker graded {n} notebooks in {seconds:.1f} s (exit {code})")
        if code != 0 and not quiet:
            say("  last lines of its log:\n    " + "\n    ".join(tail.splitlines()[-6:]))
    for student, a in todo:
        if not is_graded(root, student, a):
            say(f"{a}: retrying {student} on its own")
            cmd = [*nbgrader_command(), "autograde", a, f"--student={student}", *extra]
            subprocess.run(cmd, cwd=root, capture_output=True)
    failed = [(s, a) for s, a in todo if not is_graded(root, s, a)]
    graded = [pair for pair in todo if pair not in failed]
    seconds = time.perf_counter() - start
    summary = f"{assignment}: {len(graded)} graded, {len(failed)} failed, {seconds:.1f} s"
    if failed:
        summary += "; failed: " + ", ".join(f"{s}/{a}" for s, a in failed)
    say(summary + f" ({len(shares)} workers)")
    return graded, failed, seconds


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assignments", nargs="+", help='assignment names or globs, e.g. "*"')
    parser.add_argument("--workers", "-k", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--course-dir", type=Path, default=Path.cwd())
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin workers")
    parser.add_argument(
        "--busy-timeout", type=float, default=600, help="seconds sqlite waits for a lock"
    )
    args = parser.parse_args(argv)
    root = args.course_dir.resolve()
    failed_any = False
    for assignment in args.assignments:
        _, failed, _ = grade(root, assignment, args.workers, extra, args.pin, args.busy_timeout)
        failed_any |= bool(failed)
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())
