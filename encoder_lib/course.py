"""What every notebook's setup cell calls: the same seed, thread count and quiet warnings
locally, on Binder and under nbgrader; and the hints that tell a student which cells to run
when a cell needs one that has not run (after a kernel restart, for example)."""

from __future__ import annotations

import os
import re
import sys
import traceback
import warnings

import torch

__all__ = [
    "SETUP_NAMES",
    "install_hints",
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
    _setup_done[0] = True
    install_hints()
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
    notebook 10's checks need about 240 such programs, and every fresh kernel (a restart, Run
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
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    warnings.filterwarnings("ignore", message="Error reading persistent compilation cache entry")
    return path


def _major_minor(version: str) -> str:
    """``2.13.0+cpu`` -> ``2.13``: the same on every machine with the pinned package."""
    return ".".join(version.split("+")[0].split(".")[:2])


SETUP_NAMES = frozenset(
    "math os sys torch F nn plt widgets encoder_lib grading pretraining "
    "jax jnp nnx jax_bridge".split()
)
"""The names the notebooks' setup cell imports for the student's code
(tests/test_restart_hints.py checks the list against every setup cell)."""

_setup_done = [False]


def install_hints(shell=None) -> None:
    """Make the NameErrors of a kernel that has not run what it needs say what to run.

    After a kernel restart nothing is defined until the cells run again, and students often run
    the cell in front of them first. Then:

    - a test cell naming an answer that is not defined says which cells to run (the setup cell
      first if it has not run) in three lines, instead of Python's traceback;
    - a check whose answer raised ``NameError`` for a name the setup cell imports (``math``,
      ``torch``, ``F``...) says to run the setup cell (the first code cell);
    - every other error is shown as IPython always shows it.

    ``setup_notebook`` calls it, and so does ``import encoder_lib.grading`` (every test cell's
    first line), so that it holds before the setup cell has run. Outside IPython it does nothing.
    """
    shell = shell if shell is not None else _ipython()
    if shell is None:
        return
    from .grading.feedback import GradingError

    shell.set_custom_exc((NameError, GradingError), _explain)


def _ipython():
    module = sys.modules.get("IPython")
    return module.get_ipython() if module is not None else None


def _explain(shell, etype, value, tb, tb_offset=None):
    """IPython calls this instead of showing a NameError or a failed check: it must show it."""
    if isinstance(value, NameError):
        lines = _name_error(shell, value, tb)
        if lines is not None:
            shell._showtraceback(etype, value, lines)
            return None
    elif _setup_name_missing(shell, value):
        value.headline = "cannot be checked yet"
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)
    return None


_RAISED = re.compile(r"raised NameError: name '(\w+)' is not defined\.?")
_SETUP_CELL = "the setup cell (the first code cell)"


def _setup_name_missing(shell, error) -> bool:
    """If ``error`` (a failed check) comes from a setup-cell name the kernel lacks, say so in it."""
    found = _RAISED.search(getattr(error, "problem", ""))
    if not found or found[1] not in SETUP_NAMES or found[1] in shell.user_ns:
        return False
    error.problem = (
        f"{error.problem.rstrip('.')}. {found[1]} is imported by {_SETUP_CELL}, which has not "
        "run in this kernel (after a restart nothing has): run the setup cell first, then this "
        "cell again."
    )
    return True


def _name_error(shell, error: NameError, tb) -> list[str] | None:
    """The short block for a NameError that running earlier cells would fix, else None."""
    name = getattr(error, "name", None)
    frames = traceback.extract_tb(tb)
    line = (frames[-1].line or "") if frames else ""
    if not name:
        return None
    headline = "cannot be checked yet"
    if name in SETUP_NAMES and name not in shell.user_ns:
        headline = "needs the setup cell"
        problem = (
            f"{name} is not defined: {_SETUP_CELL} imports it and has not run in this kernel "
            "(after a restart nothing has). Run the setup cell first, then the cells above this "
            "one, then this one."
        )
    elif "grading.check_" in line and not _setup_done[0]:
        problem = (
            f"{name} is not defined, and the setup cell has not run in this kernel (after a "
            f"restart nothing has). Run {_SETUP_CELL} first, then the cell that defines {name} "
            "(and the cells above it), then this one."
        )
    elif "grading.check_" in line:
        problem = (
            f"{name} is not defined: run the cell that defines it (and the cells above it), "
            "then this one."
        )
    else:
        return None
    from .grading.feedback import GradingError

    block = GradingError(problem)
    block.headline = headline
    return block.lines(colour=True)
