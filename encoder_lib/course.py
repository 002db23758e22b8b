"""What every notebook's setup cell calls: the same seed, thread count and quiet warnings
locally, on Binder and under nbgrader."""

from __future__ import annotations

import os
import warnings

import torch

__all__ = ["setup_notebook"]


def setup_notebook(seed: int = 0, threads: int = 1) -> None:
    """Seed torch, cap its thread pool and silence warnings that are not the student's fault.

    Binder containers see the host's cores but get 1-2 of them, and torch sizes its pool from
    the host, so without the cap every matmul oversubscribes. The course's tensors are small:
    one thread is as fast on an idle laptop and much faster on a busy or throttled machine
    (measured while writing the notebooks: a tiny matmul took ~50 ms with 2 threads on a loaded
    2-core machine, under 1 ms with one). ``threads`` is also capped at the usable cores.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(max(1, min(threads, cores or 1)))
    torch.manual_seed(seed)
    # PyTorch warns when nn.TransformerEncoder cannot use nested tensors; nbgrader would score a
    # test cell that prints it on stderr 0.
    warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
