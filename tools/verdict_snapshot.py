"""Grade every known answer twice, with warm and with cold kernels, and compare what was decided.

    python -m tools.verdict_snapshot                       # every notebook, every variant
    python -m tools.verdict_snapshot --assignments 03_layer_norm 04_feed_forward
    python -m tools.verdict_snapshot --variants 3 --save /tmp/snapshot   # 3 per answer cell
    python -m tools.verdict_snapshot --kernels warm --against /tmp/snapshot  # after a change

The class: for every notebook, the reference answers, the student version untouched (every answer
still the stub) and one submission per variant of ``tests/variants`` (the reference with that
one answer cell replaced: every buggy and every correct answer the course knows). Each submission
is graded by the task the grading workers run (``encoder_lib.autograde.tasks.grade_submission``:
nbgrader's autograde with this repository's nbgrader_config.py, in a throwaway course) once with
``--JudgeExecute.kernels=warm`` and once with ``cold``, in ``--processes`` worker processes that
take warm and cold tasks alike from one queue.

What is compared, for every submission and every graded test cell: the score nbgrader recorded,
the verdict the judge kept (passed, mistake id, exercise, root, message: ``records``) and the
text of the cell's outputs (what the student reads); and for every submission whether it was
flagged, and why. Every difference is printed, and the exit status is 1 if there is one. Each
variant's failing cells are also checked against the cells it declares (``Variant.fails``), so
that "identical" cannot mean "identically wrong".

``--save DIR`` writes both snapshots as JSON (``warm.json``, ``cold.json``: student -> cell ->
what was decided) for a diff by eye. ``--against DIR`` compares each snapshot taken now with the
one of the same kernel kind saved there (by an earlier ``--save``, of the same submissions or
more): how a change of the checks is shown to decide every submission as before.
``--kernels warm`` (or ``cold``) grades with one kind only. The whole class (722 submissions)
takes about an hour on two cores with both kinds: notebook 10's submissions compile JAX programs
and cost several times the others'.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import throwaway_course as C  # noqa: E402

MODES = ("warm", "cold")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Planned:
    """One submission of the class and what its variant declares."""

    student: str
    assignment: str
    fails: tuple[str, ...] | None
    """The test cells the variant must fail (None: reference or stub, checked otherwise)."""


def load_variants(assignment: str) -> tuple[list, list]:
    """``(BUGGY, CORRECT)`` of ``tests/variants/a<assignment>.py``: the test suite's data,
    read from its folder (this tool is not part of the tests)."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import variants

    return variants.load(assignment)


def write_class(course: C.Course, assignments: list[str], per_cell: int | None) -> list[Planned]:
    """Write every submission into ``course``; ``per_cell``: at most that many buggy and that
    many correct variants per answer cell (None: all)."""
    planned = []
    for a in assignments:
        layout = C.layout(C.source_notebook(a))
        blank = C.read(course.release_path(a, layout.name))
        ref = C.with_cells(blank, layout.reference)
        course.submit("ref", a, layout.name, ref)
        course.submit("stub", a, layout.name, blank)
        planned += [Planned("ref", a, None), Planned("stub", a, None)]
        buggy, correct = load_variants(a)
        for kind, variants in (("bug", buggy), ("ok", correct)):
            taken: dict[str, int] = {}
            for v in variants:
                taken[v.cell] = taken.get(v.cell, 0) + 1
                if per_cell is not None and taken[v.cell] > per_cell:
                    continue
                student = f"{kind}-{C.slug(v.cell)}-{C.slug(v.name)}"
                course.submit(student, a, layout.name, C.with_cells(ref, {v.cell: v.source}))
                planned.append(Planned(student, a, tuple(v.fails)))
    return planned


# --- in the worker processes ---------------------------------------------------------------------


def _start_worker() -> None:
    from encoder_lib.autograde import tasks

    tasks.warm_up(warm_kernels=True)


def decided(spec, submission) -> dict:
    """Grade one submission; what was decided, cell by cell, as plain JSON."""
    from encoder_lib.autograde import records, tasks

    result = tasks.grade_submission(spec, submission, tasks.Limits(feedback=False))
    cells: dict[str, dict] = {}
    for outcome in result.notebooks or []:
        for key, (score, manual) in outcome.grades.items():
            cells.setdefault(key.split("/", 1)[1], {})["score"] = [score, manual]
    for path, content, _ in result.autograded:
        if not path.endswith(".ipynb"):
            continue
        for cell in json.loads(content)["cells"]:
            nbgrader = cell.get("metadata", {}).get("nbgrader", {})
            if cell["cell_type"] != "code" or not nbgrader.get("grade") or nbgrader.get("solution"):
                continue
            mine = cells.setdefault(nbgrader["grade_id"], {})
            mine["verdict"] = cell["metadata"].get(records.KEY, {}).get("verdict")
            mine["outputs"] = [_text(o) for o in cell.get("outputs", [])]
    return {
        "flagged": result.flagged,
        "reasons": result.reasons,
        "cells": cells,
        "seconds": result.seconds.get("total", 0.0),
    }


def _text(output: dict) -> str:
    if output.get("output_type") == "stream":
        text = output.get("text", "")
    elif output.get("output_type") == "error":
        text = "\n".join(output.get("traceback", [])) or output.get("evalue", "")
    else:
        text = "".join(output.get("data", {}).get("text/plain", ""))
    return ANSI.sub("", "".join(text) if isinstance(text, list) else text)


# --- comparing -----------------------------------------------------------------------------------


def differences(warm: dict, cold: dict, names: tuple[str, str] = MODES) -> list[str]:
    """Every way the two snapshots (student/assignment -> decided) differ, one line each;
    ``names``: what the two are called in the lines."""
    lines = []
    a, b = names
    for sub in sorted(set(warm) | set(cold)):
        w, c = warm.get(sub), cold.get(sub)
        if w is None or c is None:
            lines.append(f"{sub}: graded {a if w else b} only")
            continue
        for what in ("flagged", "reasons"):
            if w[what] != c[what]:
                lines.append(f"{sub}: {what} {a} {w[what]!r}, {b} {c[what]!r}")
        for cell in sorted(set(w["cells"]) | set(c["cells"])):
            wc, cc = w["cells"].get(cell, {}), c["cells"].get(cell, {})
            for what in sorted(set(wc) | set(cc)):
                if wc.get(what) != cc.get(what):
                    lines.append(
                        f"{sub}, {cell}: {what} {a} {wc.get(what)!r}, {b} {cc.get(what)!r}"
                    )
    return lines


def against_saved(saved: Path, mode: str, now: dict) -> list[str]:
    """``differences`` between the snapshot of ``mode`` saved in ``saved`` (only the submissions
    graded now) and ``now``."""
    before = json.loads((saved / f"{mode}.json").read_text())
    kept = {sub: before.get(sub) for sub in now}
    missing = [f"{sub}: not in {saved}/{mode}.json" for sub, d in kept.items() if d is None]
    kept = {sub: d for sub, d in kept.items() if d is not None}
    now = {sub: d for sub, d in now.items() if sub in kept}
    return missing + differences(kept, now, (f"saved {mode}", f"now {mode}"))


def declared_problems(snapshot: dict, planned: list[Planned], tests: dict[str, dict]) -> list[str]:
    """Submissions whose failing test cells are not those their variant declares; the reference
    must pass every test cell and the stub none."""
    lines = []
    for p in planned:
        sub = f"{p.student}/{p.assignment}"
        got = snapshot.get(sub)
        if got is None:
            continue
        points = tests[p.assignment]
        failed = {
            cell
            for cell in points
            if got["cells"].get(cell, {}).get("score", [None])[0] != points[cell]
        }
        if p.student == "ref":
            expected = set()
        elif p.student == "stub":
            expected = set(points)
        else:
            expected = set(p.fails)
        if got["flagged"] or failed != expected:
            lines.append(
                f"{sub}: failed {sorted(failed)}, declared {sorted(expected)}"
                + (f" (flagged: {got['reasons']})" if got["flagged"] else "")
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignments", nargs="*", help="default: every notebook in solutions/")
    parser.add_argument("--variants", type=int, help="at most N buggy and N correct per cell")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--save", type=Path, help="write warm.json and cold.json here")
    parser.add_argument("--against", type=Path, help="compare with the snapshots saved here")
    parser.add_argument("--kernels", choices=MODES, help="one kind of kernel only")
    args = parser.parse_args(argv)
    modes = (args.kernels,) if args.kernels else MODES

    from nbgrader.api import Gradebook

    from encoder_lib.autograde import distributed as D
    from encoder_lib.autograde import tasks
    from tools.build_course import assignments as course_assignments

    assignments = args.assignments or course_assignments()
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="verdict-snapshot-") as tmp:
        course = C.Course.create(Path(tmp), assignments)
        course.generate("*")
        planned = write_class(course, assignments, args.variants)
        dc = D.Course.open(course.root)
        with Gradebook(dc.db_url, dc.course_id) as gb:
            specs = {
                (a, mode): dc.spec(gb, a, (f"--JudgeExecute.kernels={mode}",))
                for a in assignments
                for mode in modes
            }
        jobs = {}
        snapshots: dict[str, dict] = {mode: {} for mode in modes}
        seconds: dict[str, list[float]] = {mode: [] for mode in modes}
        print(f"{len(planned)} submissions x {len(modes)} kernels, {args.processes} processes")
        context = get_context("spawn")
        with ProcessPoolExecutor(args.processes, context, initializer=_start_worker) as pool:
            for p in planned:
                files = dc.files("submitted", p.student, p.assignment)
                submission = tasks.Submission(p.student, p.assignment, files)
                for mode in modes:
                    job = pool.submit(decided, specs[p.assignment, mode], submission)
                    jobs[job] = (f"{p.student}/{p.assignment}", mode)
            for done, job in enumerate(as_completed(jobs), 1):
                sub, mode = jobs[job]
                snapshots[mode][sub] = job.result()
                seconds[mode].append(snapshots[mode][sub].pop("seconds"))
                if done % 50 == 0 or done == len(jobs):
                    print(f"  {done}/{len(jobs)} graded, {time.perf_counter() - start:.0f} s")
        tests = {a: C.layout(C.source_notebook(a)).tests for a in assignments}

    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        for mode in modes:
            text = json.dumps(snapshots[mode], indent=1, sort_keys=True)
            (args.save / f"{mode}.json").write_text(text + "\n")
    n_cells = sum(len(s["cells"]) for s in snapshots[modes[0]].values())
    for mode in modes:
        mean = sum(seconds[mode]) / max(len(seconds[mode]), 1)
        print(f"{mode}: {len(snapshots[mode])} submissions, {mean:.2f} s a task on its worker")
    diff = differences(snapshots["warm"], snapshots["cold"]) if len(modes) == 2 else []
    changed = {m: against_saved(args.against, m, snapshots[m]) for m in modes if args.against}
    declared = {mode: declared_problems(snapshots[mode], planned, tests) for mode in modes}
    for line in diff:
        print("DIFFERENT", line)
    for line in (line for lines in changed.values() for line in lines):
        print("CHANGED", line)
    for mode in modes:
        for line in declared[mode]:
            print(f"NOT AS DECLARED ({mode})", line)
    one, five, _ = os.getloadavg()
    kinds = "identical" if not diff else f"{len(diff)} differences"
    kinds = f"{kinds} warm and cold" if len(modes) == 2 else f"{modes[0]} kernels only"
    if args.against:
        kinds += f"; {sum(map(len, changed.values()))} changed from {args.against}"
    print(
        f"{len(planned)} submissions, {n_cells} graded cells: {kinds}; "
        f"{sum(map(len, declared.values()))} not as declared; "
        f"{time.perf_counter() - start:.0f} s (load average {one:.1f}, 5 min {five:.1f})"
    )
    return 1 if diff or any(changed.values()) or any(declared.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
