"""How long grading takes, where the time of one notebook goes, and what a big class would take.

    python bench/bench_grading.py                 # 20 students x every notebook, K = 1 and 2
    python bench/bench_grading.py --students 8 --workers 2
    python bench/bench_grading.py --quick         # 3 students, 2 notebooks, K = 2
    python bench/bench_grading.py --students 2 --workers 2   # the issue-42 figures, in minutes

Builds a temporary course from this repo's nbgrader_config.py and solutions/ in which every
student submits the reference answers, then prints, side by side and from the same run:

1. the floor: start a python3 kernel and ``import torch`` in it (jupyter_client; the median of
   runs before and after grading), which no grader avoids per notebook;
2. where the time of one graded notebook goes, from one submission per notebook graded in this
   process by the task the workers run (``encoder_lib.autograde.tasks.grade_submission``), with
   nbclient and the execute preprocessor timed: kernel start, the setup cell, answer cells, test
   cells, other cells, nbgrader's own steps (everything else in autograde), feedback HTML;
3. the class graded by ``python -m encoder_lib.autograde``'s own code on local Dask clusters of
   K workers: seconds per graded notebook (wall time / notebooks; the start of the cluster, and
   with warm kernels of each worker's kernel source, excluded), the mean time of a task on its
   worker, of fetching its result here and of merging it (wall time, and this process's CPU
   time: results that finish together share one gradebook transaction);
4. the scheduler's overhead per task (no-op tasks through the same cluster, one at a time and
   all at once);
5. the merge rate: synthetic results merged into a gradebook that already holds
   ``--merge-results`` of them, by ``bench/bench_merge.py`` (batched as the grading command
   merges, and one by one through nbgrader's ORM, as it merged before);
6. each notebook's seconds beside the floor, warm and cold, their mean and the highest ratio;
7. projections: 100 students x N notebooks on this machine, and 10,000 students x N notebooks on
   50 workers with the merge included, N being the course's notebooks (how: see
   docs/BENCHMARKS.md, "Grading a class").

Steps 2, 3, 6 and 7 run twice, with warm kernels (forked from a process that has imported torch:
``encoder_lib.autograde.warm_kernels``, nbgrader_config.py's choice) and with cold ones
(jupyter_client's own kernel manager), unless ``--kernels`` names one.

Every graded notebook must score full marks, or the run fails. Timings on a shared machine vary:
the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import operator
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

import bench_merge as M  # noqa: E402
from nbgrader.api import Gradebook  # noqa: E402

from encoder_lib.autograde import distributed as D  # noqa: E402
from encoder_lib.autograde import jax_cache as J  # noqa: E402
from encoder_lib.autograde import tasks as T  # noqa: E402
from tools import throwaway_course as C  # noqa: E402
from tools.build_course import assignments as course_assignments  # noqa: E402

QUICK = ("01_self_attention", "04_feed_forward")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min: {five:.1f})"


# --- 1. the floor --------------------------------------------------------------------------------


def floor_once() -> float:
    """Seconds to start a python3 kernel and run `import torch` in it."""
    from jupyter_client.manager import start_new_kernel

    start = time.perf_counter()
    km, kc = start_new_kernel(kernel_name="python3", stderr=subprocess.DEVNULL)
    try:
        reply = kc.execute_interactive("import torch", timeout=120, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok", reply["content"]
        seconds = time.perf_counter() - start
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return seconds


# --- the class -----------------------------------------------------------------------------------


def build_class(root: Path, assignments: list[str], students: int) -> C.Course:
    course = C.Course.create(root, assignments)
    ids = [f"s{i:03d}" for i in range(students)]
    course.generate("*")
    for a in assignments:
        layout = C.layout(C.source_notebook(a))
        ref = C.with_cells(C.read(course.release_path(a, layout.name)), layout.reference)
        for s in ids:
            course.submit(s, a, layout.name, ref)
    course.add_students(ids)
    return course


def full_marks_problems(course: C.Course, assignments: list[str], students: int) -> list[str]:
    problems = []
    for a in assignments:
        layout = C.layout(C.source_notebook(a))
        for i in range(students):
            scores = course.cell_scores(f"s{i:03d}", a, layout.name)
            if scores != layout.tests:
                problems.append(f"{course.root}: s{i:03d}/{a} scored {scores}, not full marks")
    return problems


# --- 2. where the time of one notebook goes -------------------------------------------------------


class CellClock:
    """Times nbclient's kernel start and stop and the execute preprocessor's cells, by kind."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self._depth = threading.local()
        self._undo: list = []

    def _wrap(self, cls, name: str, label) -> None:
        original = cls.__dict__[name]
        clock = self

        @functools.wraps(original)
        def timed(self_, *args, **kwargs):
            depth = getattr(clock._depth, "n", 0)
            clock._depth.n = depth + 1
            start = time.perf_counter()
            try:
                return original(self_, *args, **kwargs)
            finally:
                clock._depth.n = depth
                if depth == 0:
                    clock.seconds[label(*args)] += time.perf_counter() - start

        setattr(cls, name, timed)
        self._undo.append((cls, name, original))

    def __enter__(self):
        from nbclient.client import NotebookClient
        from nbconvert.preprocessors import ExecutePreprocessor
        from nbgrader.utils import is_grade, is_solution

        def kind(cell, *_):
            if cell.cell_type != "code":
                return "other cells"
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup":
                return "setup cell"
            if is_grade(cell) and not is_solution(cell):
                return "test cells"
            return "answer cells" if is_solution(cell) else "other cells"

        self._wrap(NotebookClient, "start_new_kernel", lambda *a: "kernel start")
        self._wrap(NotebookClient, "start_new_kernel_client", lambda *a: "kernel start")
        self._wrap(NotebookClient, "_cleanup_kernel", lambda *a: "kernel stop")
        self._wrap(ExecutePreprocessor, "preprocess_cell", kind)
        with contextlib.suppress(ImportError):
            from encoder_lib.autograde.judge_execute import JudgeExecute

            if "preprocess_cell" in JudgeExecute.__dict__:
                self._wrap(JudgeExecute, "preprocess_cell", kind)
        return self

    def __exit__(self, *exc):
        for cls, name, original in reversed(self._undo):
            setattr(cls, name, original)


KERNELS = {
    "warm": ("--JudgeExecute.kernels=warm",),
    "cold": ("--JudgeExecute.kernels=cold",),
}


def _import_jax(assignments) -> bool:
    """Whether a graded notebook imports JAX (its warm kernels come from a source of their own,
    started before the clock as the other one is)."""
    return any(
        J.imports_jax(C.read(path))
        for path in map(C.source_notebook, assignments)
        if path is not None
    )


def profile(
    course: C.Course, assignments: list[str], overrides: tuple[str, ...] = ()
) -> dict[str, dict[str, float]]:
    """Seconds of each step for one submission (s000) of each assignment, graded in-process."""
    dc = D.Course.open(course.root)
    out = {}
    with Gradebook(dc.db_url, dc.course_id) as gb:
        specs = {a: dc.spec(gb, a, overrides) for a in assignments}
    T.grade_submission(  # once before the clock: imports and the worker's caches
        specs[assignments[0]],
        T.Submission("s001", assignments[0], dc.files("submitted", "s001", assignments[0])),
    )
    T.warm_up("--JudgeExecute.kernels=warm" in overrides, with_jax=_import_jax(assignments))
    for a in assignments:
        sub = T.Submission("s000", a, dc.files("submitted", "s000", a))
        with CellClock() as clock:
            result = T.grade_submission(specs[a], sub)
        if result.flagged:
            raise SystemExit(f"profile: s000/{a} flagged: {result.reasons}")
        steps = dict(clock.seconds)
        inside = sum(steps.values())
        steps["nbgrader's own steps"] = result.seconds["autograde"] - inside
        steps["feedback HTML"] = result.seconds.get("feedback", 0.0)
        steps["task set-up"] = result.seconds["prepare"]
        steps["total"] = result.seconds["total"]
        out[a] = steps
    return out


# --- 3. and 4. the class on Dask, the scheduler's overhead --------------------------------------


def grade_class(
    course: C.Course, workers: int, overrides: tuple[str, ...] = ()
) -> dict[str, float]:
    dc = D.Course.open(course.root)
    start = time.perf_counter()
    with D.open_client(None, workers) as client:
        client.wait_for_workers(workers)
        client.run(
            T.warm_up,
            "--JudgeExecute.kernels=warm" in overrides,
            _import_jax(p.name for p in (course.root / "solutions").iterdir()),
        )
        started = time.perf_counter() - start
        summary = D.grade(dc, ["*"], client, progress=False, overrides=overrides)
        overhead = scheduler_overhead(client) if workers > 1 else {}
    if summary.flagged or summary.failed:
        print(f"{course.root}: " + "\n".join(summary.lines()))
    n = len(summary.graded) + len(summary.flagged)
    return {
        "n": n,
        "start": started,
        "wall": summary.seconds,
        "per notebook": summary.seconds / n,
        "task": statistics.mean(summary.task_seconds),
        "fetch": statistics.mean(summary.fetch_seconds),
        "merge": statistics.mean(summary.merge_seconds),
        "merge cpu": statistics.mean(summary.merge_cpu_seconds),
        **overhead,
    }


def scheduler_overhead(client, n: int = 200) -> dict[str, float]:
    """Seconds per no-op task: one at a time (submit, wait, repeat) and all at once."""
    from distributed import wait

    start = time.perf_counter()
    for i in range(n // 4):
        client.submit(operator.add, i, 1, pure=False).result()
    one_at_a_time = (time.perf_counter() - start) / (n // 4)
    start = time.perf_counter()
    wait([client.submit(operator.add, i, 1, pure=False) for i in range(n)])
    all_at_once = (time.perf_counter() - start) / n
    return {"round trip": one_at_a_time, "pipelined": all_at_once}


# --- 5. and the report ---------------------------------------------------------------------------


def _sources(assignment: str) -> list[Path]:
    return sorted((ROOT / "solutions" / assignment).glob("*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="one run per K")
    parser.add_argument("--quick", action="store_true", help="3 students, 2 notebooks, K = 2")
    parser.add_argument("--repeats", type=int, default=3, help="floor runs, before and after")
    parser.add_argument("--assignments", nargs="*", help="default: every notebook in solutions/")
    parser.add_argument("--keep", type=Path, help="build the courses here and keep them")
    parser.add_argument(
        "--merge-results", type=int, default=20_000, help="results merged for the merge rate"
    )
    parser.add_argument(
        "--kernels", nargs="+", choices=list(KERNELS), default=list(KERNELS), help="warm, cold"
    )
    args = parser.parse_args(argv)
    present = course_assignments()
    if args.quick:
        args.students, args.workers, args.repeats = 3, [2], 2
        args.assignments = args.assignments or [a for a in QUICK if a in present]
    assignments = args.assignments or present
    if not assignments:
        raise SystemExit("no assignment notebook in solutions/")

    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_grading_"))
    problems: list[str] = []
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {len(os.sched_getaffinity(0))} cores, {load()}")
    try:
        t = time.perf_counter()
        base = build_class(work / "base", assignments, args.students)
        seconds = time.perf_counter() - t
        print(f"class of {args.students} x {len(assignments)} built in {seconds:.0f} s")
        # the instructor's JAX compile cache, built before grading as the docs say (and read
        # by this process now, not inside the first notebook 10 it times)
        if any(J.imports_jax(C.read(p)) for a in assignments for p in _sources(a)):
            t = time.perf_counter()
            cache = J.sealed()
            said = f"{len(cache.files)} programs" if cache else "none (graded without)"
            print(f"instructor's JAX compile cache: {said}, {time.perf_counter() - t:.1f} s")
        floors = [floor_once() for _ in range(args.repeats)]
        steps, runs = {}, {}
        for kind in args.kernels:
            steps[kind] = profile(base, assignments, KERNELS[kind])
            print(f"profiled one notebook of each assignment, {kind} kernels; {load()}")
            for k in args.workers:
                course = C.Course(work / f"{kind}-k{k}")
                shutil.copytree(base.root, course.root)
                runs[kind, k] = grade_class(course, k, KERNELS[kind])
                problems += full_marks_problems(course, assignments, args.students)
                print(f"graded the class with K = {k}, {kind} kernels; {load()}")
        floors += [floor_once() for _ in range(args.repeats)]
        merge = M.measure(
            args.merge_results, sample=300, batches=(1, 200), say=lambda line: print(line)
        )
    finally:
        if not args.keep and not problems:
            shutil.rmtree(work, ignore_errors=True)
    report(floors, steps, runs, args.students, assignments, len(present), merge)
    if problems:  # the timings stand, but something graded wrongly: the courses are kept
        print("\nNOT full marks (courses kept for a look):\n  " + "\n  ".join(problems))
        return 1
    return 0


def report(
    floors, steps, runs, students: int, assignments: list[str], course_size: int, merge: dict
) -> None:
    floor = statistics.median(floors)
    half = len(floors) // 2
    print(
        f"\nfloor (kernel start + import torch): median {floor:.2f} s "
        f"(before grading: {', '.join(f'{x:.2f}' for x in floors[:half])}; "
        f"after: {', '.join(f'{x:.2f}' for x in floors[half:])}); {load()}\n"
    )
    columns = [(kind, a) for kind in steps for a in steps[kind]]
    names = [n for n in next(iter(next(iter(steps.values())).values())) if n != "total"]
    width = max(len(f"{a[:14]} {kind}") for kind, a in columns)
    print("where one notebook's time goes (s), graded in this process by the workers' task:")
    heads = " | ".join(f"{f'{a[:14]} {kind}':>{width}}" for kind, a in columns)
    print(f"| {'step':<22} | {heads} |")
    print(f"|{'-' * 24}|" + "|".join("-" * (width + 2) for _ in columns) + "|")
    for name in [*names, "total"]:
        cells = " | ".join(f"{steps[kind][a].get(name, 0.0):>{width}.2f}" for kind, a in columns)
        print(f"| {name:<22} | {cells} |")

    print("\none graded notebook (the total above) beside the floor:")
    kinds = list(steps)
    print("| notebook              | " + " | ".join(f"{k:>6} s | x floor" for k in kinds) + " |")
    print("|-----------------------|" + "|".join("----------|---------" for _ in kinds) + "|")
    for a in assignments:
        cells = " | ".join(
            f"{steps[k][a]['total']:8.2f} | {steps[k][a]['total'] / floor:7.2f}" for k in kinds
        )
        print(f"| {a[:21]:<21} | {cells} |")
    for kind in kinds:
        totals = {a: s["total"] for a, s in steps[kind].items()}
        mean = statistics.mean(totals.values())
        worst = max(totals, key=totals.get)
        print(
            f"{kind} kernels: mean {mean:.2f} s = {mean / floor:.2f} x floor (target 1.0), "
            f"highest {worst} {totals[worst] / floor:.2f} x floor (target 2)"
        )

    n = students * len(assignments)
    print(f"\nthe class ({students} students x {len(assignments)} notebooks = {n}) on local Dask:")
    print(
        f"| {'kernels':>7} | {'workers':>7} | {'start s':>7} | {'wall s':>7} "
        f"| {'s / notebook':>12} | {'x floor':>7} | {'task s':>6} | {'fetch ms':>8} "
        f"| {'merge ms':>8} | {'cpu ms':>6} |"
    )
    print(
        f"|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 14}|{'-' * 9}|{'-' * 8}|{'-' * 10}"
        f"|{'-' * 10}|{'-' * 8}|"
    )
    for (kind, k), r in runs.items():
        print(
            f"| {kind:>7} | {k:>7} | {r['start']:7.1f} | {r['wall']:7.1f} "
            f"| {r['per notebook']:12.2f} | {r['per notebook'] / floor:7.2f} | {r['task']:6.2f} "
            f"| {r['fetch'] * 1000:8.0f} | {r['merge'] * 1000:8.0f} "
            f"| {r['merge cpu'] * 1000:6.0f} |"
        )
    overhead = next((r for r in runs.values() if "round trip" in r), None)
    if overhead:
        print(
            f"\nscheduler overhead per no-op task: {overhead['round trip'] * 1000:.1f} ms one at "
            f"a time, {overhead['pipelined'] * 1000:.2f} ms pipelined"
        )

    big = max(b for _, b in merge)
    batched, whole = merge["batched", big], merge["whole result", big]
    one_by_one = merge["one by one", 1]
    print(
        f"\nmerge rate (bench/bench_merge.py, synthetic results): {batched['n']} merged in "
        f"batches of {big}, {batched['wall'] * 1000:.2f} ms a result (the gradebook only); "
        f"{whole['n']} more into that gradebook, files and ledger line written too: "
        f"{whole['wall'] * 1000:.2f} ms a result ({whole['cpu'] * 1000:.2f} ms CPU), 100,000 "
        f"results in {whole['wall'] * 1e5 / 60:.1f} min; one by one through nbgrader's ORM (as "
        f"before): {one_by_one['wall'] * 1000:.2f} ms a result, 100,000 in "
        f"{one_by_one['wall'] * 1e5 / 60:.1f} min"
    )

    print("\nprojections:")
    N = course_size
    for (kind, k), r in runs.items():
        minutes = r["per notebook"] * 100 * N / 60
        verdict = "within" if minutes <= 15 else "over"
        print(
            f"  100 students x {N} notebooks, K = {k} here: {minutes:5.1f} min ({verdict} 15 min), "
            f"{kind} kernels"
        )
    for kind in steps:
        one = runs.get((kind, 1)) or next(r for (kd, _), r in runs.items() if kd == kind)
        tasks, workers = 10_000 * N, 50
        compute = tasks * one["task"] / workers
        # Each result's time in the instructor's process, on cores of its own (here the workers
        # share them): fetching it (measured on Dask above) and merging it in batches as large
        # as the results in flight (4 x 50 workers), files and ledger included (CPU time).
        serial = one["fetch"] + whole["cpu"]
        merging = tasks * serial
        sched = tasks * (overhead["pipelined"] if overhead else 0.0)
        total = max(compute, merging, sched)
        print(
            f"  10,000 students x {N} notebooks on {workers} workers, {kind} kernels: "
            f"{total / 3600:.2f} h = max(tasks x {one['task']:.2f} s / {workers} workers "
            f"= {compute / 3600:.2f} h, merging {tasks} results x {serial * 1000:.1f} ms "
            f"(fetch {one['fetch'] * 1000:.1f} + merge {whole['cpu'] * 1000:.1f}) "
            f"= {merging / 3600:.2f} h, scheduler {tasks} x "
            f"{(overhead or {}).get('pipelined', 0) * 1000:.2f} ms = {sched / 3600:.2f} h); "
            f"target 1 h"
        )


if __name__ == "__main__":
    sys.exit(main())
