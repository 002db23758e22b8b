"""How long autograding takes: a synthetic class graded with the real nbgrader, next to the floor.

    python bench/bench_grading.py                      # 20 students x every notebook, K = 2
    python bench/bench_grading.py --students 8 --workers 2 3
    python bench/bench_grading.py --quick              # 3 students, fewer floor repeats

Builds a temporary course from this repo's nbgrader_config.py and solutions/, gives every
student the reference answers, then grades the class from the same starting point:
sequentially (one `nbgrader autograde` per assignment) and, for each K given, with
tools/grade_parallel.py's K workers (every assignment at once). The floor is what no grader can
avoid per notebook: start a python3 kernel, run `import torch`, shut it down (jupyter_client,
measured in the same run before and after grading; the median). Prints seconds per graded
notebook (wall time / notebooks graded), the ratio to the floor, and the projected time for 100
students x the notebooks present. Every graded notebook must score full marks, or the run fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tools")]
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

import grade_parallel  # noqa: E402
from pipeline import course as C  # noqa: E402


def floor_once() -> float:
    """Seconds to start a python3 kernel, `import torch` in it and shut it down."""
    from jupyter_client.manager import start_new_kernel

    start = time.perf_counter()
    km, kc = start_new_kernel(kernel_name="python3", stderr=subprocess.DEVNULL)
    try:
        reply = kc.execute_interactive("import torch", timeout=120, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    return time.perf_counter() - start


def build_class(root: Path, assignments: list[str], students: int) -> C.Course:
    course = C.Course.create(root, assignments)
    ids = [f"s{i:03d}" for i in range(students)]
    for a in assignments:
        course.generate(a)
        layout = C.layout(C.source_notebook(a))
        ref = C.with_cells(C.read(course.release_path(a, layout.name)), layout.reference)
        for s in ids:
            course.submit(s, a, layout.name, ref)
    course.add_students(ids)
    return course


def grade_sequentially(course: C.Course, assignments: list[str]) -> tuple[float, dict]:
    """One `nbgrader autograde` per assignment; returns (seconds, seconds per notebook of each)."""
    per_assignment = {}
    start = time.perf_counter()
    for a in assignments:
        graded, failed, seconds = grade_parallel.grade(course.root, a, 1, [], quiet=True)
        if failed:
            raise SystemExit(f"{a}: grading failed for {failed}; see {course.root}/logs")
        per_assignment[a] = seconds / max(1, len(graded))
    return time.perf_counter() - start, per_assignment


def grade_in_parallel(course: C.Course, workers: int) -> float:
    """tools/grade_parallel.py on every assignment at once."""
    start = time.perf_counter()
    _, failed, _ = grade_parallel.grade(course.root, "*", workers, [], quiet=True)
    if failed:
        raise SystemExit(f"grading failed for {failed}; see {course.root}/logs")
    return time.perf_counter() - start


def check_full_marks(course: C.Course, assignments: list[str], students: int) -> None:
    for a in assignments:
        layout = C.layout(C.source_notebook(a))
        for i in range(students):
            scores = course.cell_scores(f"s{i:03d}", a, layout.name)
            if scores != layout.tests:
                raise SystemExit(f"s{i:03d}/{a} scored {scores}, expected {layout.tests}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[2], help="one run per K")
    parser.add_argument("--quick", action="store_true", help="3 students, 2 floor repeats")
    parser.add_argument("--repeats", type=int, default=5, help="floor measurements")
    parser.add_argument("--assignments", nargs="*", help="default: every notebook in solutions/")
    parser.add_argument("--keep", type=Path, help="build the course here and keep it")
    args = parser.parse_args(argv)
    if args.quick:
        args.students, args.repeats = 3, 2
    assignments = args.assignments or [
        a for a in C.expected_assignments() if C.source_notebook(a) is not None
    ]
    if not assignments:
        raise SystemExit("no assignment notebook in solutions/")

    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_grading_"))
    try:
        t = time.perf_counter()
        seq = build_class(work / "sequential", assignments, args.students)
        setup = time.perf_counter() - t
        copies = {k: C.Course(work / f"parallel{k}") for k in args.workers}
        for par in copies.values():
            shutil.copytree(seq.root, par.root)
        floors = [floor_once() for _ in range(args.repeats)]
        seq_wall, seq_each = grade_sequentially(seq, assignments)
        rows = [("sequential (K = 1)", seq_wall)]
        for k, par in copies.items():
            rows.append((f"parallel (K = {k})", grade_in_parallel(par, k)))
        floors += [floor_once() for _ in range(args.repeats)]  # before and after: load drifts
        for course in (seq, *copies.values()):
            check_full_marks(course, assignments, args.students)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    floor = statistics.median(floors)
    n = args.students * len(assignments)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\n{args.students} students x {len(assignments)} notebooks = {n} graded per run; "
        f"{cores} cores, load average {load:.1f}; course setup {setup:.0f} s"
    )
    print(
        f"floor (kernel start + import torch + shutdown): median {floor:.2f} s "
        f"(min {min(floors):.2f}, max {max(floors):.2f}, {len(floors)} runs)\n"
    )
    print(f"| {'grading':<22} | {'wall s':>7} | {'s / notebook':>12} | {'x floor':>7} |")
    print(f"|{'-' * 24}|{'-' * 9}|{'-' * 14}|{'-' * 9}|")
    for name, wall in rows:
        print(f"| {name:<22} | {wall:7.1f} | {wall / n:12.2f} | {wall / n / floor:7.2f} |")
    print("\nper notebook, sequential: " + ", ".join(f"{a} {s:.2f} s" for a, s in seq_each.items()))
    print("\nprojection for 100 students x the same notebooks:")
    for name, wall in rows:
        minutes = wall / n * 100 * len(assignments) / 60
        verdict = "more" if minutes > 15 else "less"
        print(f"  {name:<22} {minutes:5.1f} min ({verdict} than 15 min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
