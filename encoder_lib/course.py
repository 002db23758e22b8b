"""What every notebook's setup cell calls: the same seed, thread count and quiet warnings
locally, on Binder and under nbgrader, and the hints that tell a student which cells to run
after a kernel restart (``encoder_lib.grading.restart_hints``, installed from here and
by every test cell's ``from encoder_lib import grading``)."""

from __future__ import annotations

import os
import sys
import warnings

import torch

__all__ = [
    "JAX_CACHE_READ_ONLY_VARIABLE",
    "JAX_CACHE_VARIABLE",
    "jax_cache_dir",
    "setup_notebook",
    "use_jax_compilation_cache",
]


def setup_notebook(seed: int = 0, threads: int = 1) -> None:
    """Seed torch, cap its thread pool and silence warnings that are not the student's fault.

    Binder containers see the host's cores but get 1-2 of them, and torch sizes its pool from
    the host, so without the cap every matmul oversubscribes. The course's tensors are small:
    one thread is as fast on an idle laptop and much faster on a busy or throttled machine
    (measured while writing the notebooks: a tiny matmul took ~50 ms with 2 threads on a loaded
    2-core machine, under 1 ms with one). ``threads`` is also capped at the usable cores.

    Prints one line when it is done, so that a beginner sees that the cell worked (importing
    torch takes seconds). The line is the same on every machine with the pinned torch: its
    version is given as major.minor, without the build's ``+cpu`` suffix (nbval compares it).
    """
    from . import __version__

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    used = max(1, min(threads, cores or 1))
    torch.set_num_threads(used)
    torch.manual_seed(seed)
    # PyTorch warns when nn.TransformerEncoder cannot use nested tensors; nbgrader would score a
    # test cell that prints it on stderr 0.
    warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
    from .grading import restart_hints  # below this module: the notebook's grading package

    restart_hints.install_hints(setup_done=True)
    if "jax" in sys.modules:  # notebook 10
        use_jax_compilation_cache()
    versions = [f"torch {_major_minor(torch.__version__)}"]
    for name in ("jax", "flax"):  # notebook 10 imports them; the others never do
        if name in sys.modules:
            versions.append(f"{name} {_major_minor(sys.modules[name].__version__)}")
    print(
        f"Setup done: {', '.join(versions)}, encoder_lib {__version__}, random seed {seed}, "
        f"{used} torch thread{'s' if used > 1 else ''}. Now run the cells below in order."
    )


JAX_CACHE_VARIABLE = "ENCODER_LAB_JAX_CACHE"
JAX_CACHE_READ_ONLY_VARIABLE = "ENCODER_LAB_JAX_CACHE_READ_ONLY"
"""Set to 1 (grading kernels: ``encoder_lib.autograde.jax_cache``): programs are loaded from the
cache, and none is ever written to it."""


def jax_cache_dir() -> str | None:
    """Where notebook 10's kernels keep the programs JAX compiled: ``$ENCODER_LAB_JAX_CACHE``
    if it is set (set to the empty string: no cache), else ``encoder_lab/jax`` under
    ``$XDG_CACHE_HOME`` (``~/.cache`` by default). None when JAX's own
    ``JAX_COMPILATION_CACHE_DIR`` is set: the user's choice is left alone."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    chosen = os.environ.get(JAX_CACHE_VARIABLE)
    if chosen is not None:
        return chosen or None
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(home, "encoder_lab", "jax")


def use_jax_compilation_cache(path: str | None = None) -> str | None:
    """Keep the programs JAX compiles on disk, so that the next kernel loads them instead of
    compiling them again; returns the folder, or None when there is none.

    Run eagerly, JAX compiles every operation for every new input shape (about 90 ms each here);
    notebook 10's checks need about 160 such programs, and every fresh kernel (a restart, Run
    All, each submission at autograde) compiled them all again. From JAX's persistent cache a
    program loads in about 25 ms (measured on this course's 2-core machine: 400 additions of new
    shapes, 36 s compiled, 11 s loaded; the judged cells of notebook 10, 18-22 s compiled,
    9 s loaded). A loaded program is the same machine code, so results do not change.

    Every program is kept, however fast it compiled (JAX keeps only those over 1 s by default);
    notebook 10 writes about 4 MB, and deleting the folder at any time only means compiling again.
    The folder is not capped: JAX's cap makes it re-read the whole folder at every write (the
    first Run All of notebook 10 took 53-62 s with it, 44 s without, as without a cache). Without
    the cap JAX takes no lock, so a kernel may read an entry another kernel (a grading worker)
    is still writing; JAX then warns and compiles the program itself, and that warning is
    silenced here: a cache miss is not the student's business. Must run before JAX compiles
    anything in the process (JAX decides at its first compilation whether to use a cache): the
    setup cell calls it through ``setup_notebook``. A folder that cannot be created means no
    cache, without a message.

    With ``$ENCODER_LAB_JAX_CACHE_READ_ONLY`` set to 1 (grading kernels, which get a private copy
    of the instructor's cache: ``encoder_lib.autograde.jax_cache``) programs are read and never
    written: JAX writes only programs that took at least ``min_compile_time`` to compile and
    weigh at least ``min_entry_size``, and both are set out of reach.
    """
    import jax

    path = path if path is not None else jax_cache_dir()
    if path is None:
        return None
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    # JAX otherwise also points XLA's GPU autotuning cache into the folder, and that folder's
    # path becomes part of every program's key: a copy of the cache elsewhere (a grading
    # kernel's) would then find none of its programs. This course runs on CPUs.
    jax.config.update("jax_persistent_cache_enable_xla_caches", "none")
    if os.environ.get(JAX_CACHE_READ_ONLY_VARIABLE) == "1":
        jax.config.update("jax_persistent_cache_min_compile_time_secs", float("inf"))
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 2**62)
    else:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    warnings.filterwarnings("ignore", message="Error reading persistent compilation cache entry")
    return path


def _major_minor(version: str) -> str:
    """``2.13.0+cpu`` -> ``2.13``: the same on every machine with the pinned package."""
    return ".".join(version.split("+")[0].split(".")[:2])
