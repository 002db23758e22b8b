"""How fast graded results go into the instructor's gradebook: before and after batching.

    python bench/bench_merge.py                     # 100,000 results batched, samples of the rest
    python bench/bench_merge.py --results 20000 --batch 50 200

A synthetic course shaped like this one (11 assignments of one notebook each, 5 test cells and
5 answer cells per notebook: the course has 3-7 of each) in a fresh nbgrader gradebook (sqlite,
in a temporary folder), and synthetic results (every cell scored and commented, a few
submissions flagged, a few that could not be graded at all), merged three ways:

1. ``one by one``: nbgrader's ORM, ``gradebook.merge`` per result, one commit per batch (what
   the grading command did before bulk merging);
2. ``batched``: ``gradebook.merge_many`` per batch (a few bulk statements and one commit), the
   gradebook only;
3. ``whole result``: the grading command's own ``distributed._record`` per batch with finished
   futures: ``merge_many`` plus writing each result's autograded notebook and feedback page and
   its ledger line (the files are of the sizes given by ``--files-kb``).

Each prints seconds per result, wall and this process's CPU, and what 100,000 results take at
that rate; ``batched`` merges ``--results`` for real (100,000 by default, a gradebook of 1.1
million grade and comment rows at the end); the others a sample (``--sample``) into a gradebook
that already holds ``--results`` submissions, so they pay for a full gradebook too. A batch is
what the grading command merges at once: every result that finished since the last merge, so
batches grow when merging falls behind (up to 4 x the workers' threads in flight).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

from nbgrader.api import Gradebook  # noqa: E402

from encoder_lib.autograde import distributed as D  # noqa: E402
from encoder_lib.autograde import gradebook as G  # noqa: E402
from encoder_lib.autograde import tasks as T  # noqa: E402

COURSE = "bench-merge"
ASSIGNMENTS = tuple(f"{i:02d}_notebook" for i in range(1, 12))
CELLS = 5


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min: {five:.1f})"


def make_course(root: Path) -> D.Course:
    """A course folder whose gradebook holds the synthetic assignments and no student."""
    root.mkdir(parents=True)
    (root / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.course_id = {COURSE!r}\n"
    )
    course = D.Course.open(root)
    with Gradebook(course.db_url, COURSE) as gb:
        for a in ASSIGNMENTS:
            gb.add_assignment(a)
            gb.add_notebook(a, a)
            for c in range(CELLS):
                gb.add_grade_cell(f"test_{c}", a, a, max_score=2, cell_type="code")
                gb.add_solution_cell(f"answer_{c}", a, a)
    return course


def result(i: int, files_kb: tuple[int, int] = (0, 0)) -> T.TaskResult:
    """The i-th synthetic result: student i // 11 on assignment i % 11; every 50th flagged with
    its grades kept, every 500th not graded at all (``notebooks=None``)."""
    a, student = ASSIGNMENTS[i % len(ASSIGNMENTS)], f"s{i // len(ASSIGNMENTS):06d}"
    outcome = G.NotebookOutcome(
        a,
        0.0,
        grades={f"GradeCell/test_{c}": (float((i + c) % 3), False) for c in range(CELLS)},
        comments={f"SolutionCell/answer_{c}": f"verdict {i}/{c}" for c in range(CELLS)},
    )
    graded = None if i % 500 == 499 else [outcome]
    notebook, page = (b"x" * (kb * 1024) for kb in files_kb)
    return T.TaskResult(
        student,
        a,
        "digest",
        i % 50 == 49 or graded is None,
        ["synthetic"] if i % 50 == 49 or graded is None else [],
        datetime(2026, 11, 29, 12, 0, tzinfo=UTC),
        graded,
        autograded=[(f"{a}.ipynb", notebook, 0o644)] if files_kb[0] else [],
        feedback=[(f"{a}.html", page, 0o644)] if files_kb[1] else [],
        worker="bench:1",
    )


def item(r: T.TaskResult) -> G.GradedSubmission:
    return G.GradedSubmission(r.assignment, r.student, r.timestamp, r.notebooks, r.flagged)


def _timed(merge, *args) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    merge(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def merge_one_by_one(gb, results: list[T.TaskResult]) -> None:
    for r in results:
        G.merge(gb, r.assignment, r.student, r.timestamp, r.notebooks, r.flagged, commit=False)
    gb.db.commit()


def merge_batched(gb, results: list[T.TaskResult]) -> None:
    G.merge_many(gb, [item(r) for r in results])


def merge_whole(course: D.Course, gb, results: list[T.TaskResult]) -> None:
    batch = []
    for r in results:
        future = Future()
        future.set_result(r)
        batch.append((future, r.student, r.assignment))
    D._record(course, gb, batch, D.Summary())


def run(course: D.Course, how: str, first: int, n: int, batch: int, files_kb) -> dict:
    """Merge results first .. first + n - 1 in batches; seconds per result, wall and CPU."""
    wall = cpu = 0.0
    with Gradebook(course.db_url, COURSE) as gb:
        for start in range(first, first + n, batch):
            results = [result(i, files_kb) for i in range(start, min(start + batch, first + n))]
            if how == "one by one":
                w, c = _timed(merge_one_by_one, gb, results)
            elif how == "batched":
                w, c = _timed(merge_batched, gb, results)
            else:
                w, c = _timed(merge_whole, course, gb, results)
            wall, cpu = wall + w, cpu + c
    return {"n": n, "wall": wall / n, "cpu": cpu / n}


def measure(
    results: int = 100_000,
    sample: int = 1_000,
    batches: tuple[int, ...] = (1, 8, 200),
    files_kb: tuple[int, int] = (40, 300),
    say=print,
) -> dict:
    """Seconds per result of each way (see the module's docstring), keyed (way, batch)."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="bench_merge_") as tmp:
        course = make_course(Path(tmp) / "course")
        big = max(batches)
        out["batched", big] = run(course, "batched", 0, results, big, (0, 0))
        say(f"merged {results} results in batches of {big}; {load()}")
        template = Path(tmp) / "full.db"
        shutil.copyfile(course.root / "gradebook.db", template)
        first = results  # new students after the ones already there
        for how in ("one by one", "batched", "whole result"):
            for batch in batches:
                if (how, batch) in out:
                    continue
                shutil.copyfile(template, course.root / "gradebook.db")
                kb = files_kb if how == "whole result" else (0, 0)
                out[how, batch] = run(course, how, first, sample, batch, kb)
                shutil.rmtree(course.root / "autograded", ignore_errors=True)
                shutil.rmtree(course.root / "feedback", ignore_errors=True)
        say(f"merged samples of {sample} the other ways; {load()}")
    return out


def report(out: dict, files_kb: tuple[int, int], say=print) -> None:
    say("\nmerging results into the gradebook (s per result; 100,000 results at that rate):")
    say(
        f"| {'how':<12} | {'batch':>5} | {'results':>7} | {'wall ms':>7} | {'cpu ms':>6} "
        f"| {'100,000 wall':>12} | {'100,000 cpu':>11} |"
    )
    say(f"|{'-' * 14}|{'-' * 7}|{'-' * 9}|{'-' * 9}|{'-' * 8}|{'-' * 14}|{'-' * 13}|")
    for (how, batch), r in out.items():
        say(
            f"| {how:<12} | {batch:>5} | {r['n']:>7} | {r['wall'] * 1000:7.2f} "
            f"| {r['cpu'] * 1000:6.2f} | {r['wall'] * 1e5 / 60:8.1f} min "
            f"| {r['cpu'] * 1e5 / 60:7.1f} min |"
        )
    say(
        f"(whole result: the gradebook, an autograded notebook of {files_kb[0]} KB and a feedback "
        f"page of {files_kb[1]} KB written, the ledger line)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=int, default=100_000, help="merged batched, for real")
    parser.add_argument("--sample", type=int, default=1_000, help="results of the other ways")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 200])
    parser.add_argument(
        "--files-kb", type=int, nargs=2, default=[40, 300], help="notebook, page (whole result)"
    )
    args = parser.parse_args(argv)
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {len(os.sched_getaffinity(0))} cores, {load()}")
    files_kb = tuple(args.files_kb)
    out = measure(args.results, args.sample, tuple(args.batch), files_kb)
    report(out, files_kb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
