"""Run All of every solution notebook: wall time and the kernel's peak memory.

    python bench/bench_notebooks.py [--repeat N] [ASSIGNMENT ...]

Targets: each notebook's Run All within 15 s on a 2-core laptop (issue 3; the capstone, which
trains a model, within 60 s: issue 9; notebook 08, which pretrains one, within 90 s: issue 16;
notebook 09 within 30 s: issue 17), and its kernel's peak memory under 450 MB, the memory
mybinder.org guarantees a user (issue 8). The kernel start is timed separately (it is paid once
per notebook whatever the notebook does). Peak memory is the kernel process's high-water mark of
resident memory (VmHWM in /proc), in MiB.

A notebook that imports JAX (10) gets two rows: its kernels with JAX's compilation cache empty
(a fresh folder per run: the first Run All on a machine) and filled (what every later kernel
finds; see ``encoder_lib.course.use_jax_compilation_cache``). The user's own cache is not touched.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from encoder_lib.course import JAX_CACHE_VARIABLE
from tools.build_course import SOLUTIONS, assignments

TIME_TARGET_S = 15.0
TIME_TARGETS_S = {  # notebooks that train a model (or compile JAX) in Run All
    "06_sentiment_capstone": 60.0,  # the capstone (issue 9)
    "08_pretraining": 90.0,  # pretraining and fine-tuning (issue 16)
    "09_modern_encoder": 30.0,  # a length-generalisation experiment (issue 17)
    "10_jax_encoder": 60.0,  # JAX compiles every operation at its first call (issue 23)
    "11_real_encoder": 60.0,  # a real model: search, then fine-tuning (issue 36)
}
MEMORY_TARGET_MB = 450.0  # Binder's guaranteed memory per user


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_once(path: Path) -> tuple[float, float, float]:
    """(kernel start s, run all s, peak RSS MB) for one fresh kernel."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    t0 = time.perf_counter()
    with client.setup_kernel():
        started = time.perf_counter()
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        finished = time.perf_counter()
        peak = _peak_rss_mb(client.km.provisioner.process.pid)
    return started - t0, finished - started, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    names = args.assignments or assignments()
    header = f"{'notebook':<34} {'kernel start s':>14} {'run all s':>10} {'peak MB':>8}"
    print(f"load average {os.getloadavg()[0]:.2f} (timings are noisy on a shared machine)")
    print(header + f"  target s  within target / {MEMORY_TARGET_MB:.0f} MB")
    for name in names:
        path = SOLUTIONS / name / f"{name}.ipynb"
        target = TIME_TARGETS_S.get(name, TIME_TARGET_S)
        if "import jax" not in path.read_text():
            _row(name, [run_once(path) for _ in range(args.repeat)], target)
            continue
        previous = os.environ.get(JAX_CACHE_VARIABLE)
        with tempfile.TemporaryDirectory() as scratch:
            try:
                empty = []
                for k in range(args.repeat):  # a fresh folder each time
                    os.environ[JAX_CACHE_VARIABLE] = os.path.join(scratch, str(k))
                    empty.append(run_once(path))
                _row(f"{name} (JAX cache empty)", empty, target)
                _row(f"{name} (filled)", [run_once(path) for _ in range(args.repeat)], target)
            finally:
                os.environ.pop(JAX_CACHE_VARIABLE, None)
                if previous is not None:
                    os.environ[JAX_CACHE_VARIABLE] = previous
    print(f"(medians of {args.repeat} runs; peak = largest of the runs)")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


def _row(label: str, runs: list[tuple[float, float, float]], target: float) -> None:
    start = statistics.median(r[0] for r in runs)
    run_all = statistics.median(r[1] for r in runs)
    peak = max(r[2] for r in runs)
    verdict = "yes" if run_all <= target and peak <= MEMORY_TARGET_MB else "NO"
    print(f"{label:<34} {start:>14.2f} {run_all:>10.2f} {peak:>8.0f}  {target:>8.0f}  {verdict}")


if __name__ == "__main__":
    main()
