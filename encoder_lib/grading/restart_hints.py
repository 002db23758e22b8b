"""After a kernel restart nothing is defined until the cells run again: the hints that make a
cell which needs cells that have not run say which to run (the setup cell first), instead of
Python's traceback. Installed by ``encoder_lib.course.setup_notebook`` and by ``import
encoder_lib.grading`` (every test cell's first line)."""

from __future__ import annotations

import re
import sys
import traceback

from .feedback import GradingError

__all__ = ["SETUP_NAMES", "install_hints"]


SETUP_NAMES = frozenset(
    "math os sys torch F nn plt widgets encoder_lib grading pretraining "
    "jax jnp nnx jax_bridge unicodedata retrieval split_words".split()
)
"""The names the notebooks' setup cell imports for the student's code
(tests/grading/engine/test_restart_hints.py checks the list against every setup cell)."""

_setup_done = [False]


def install_hints(shell=None, setup_done: bool = False) -> None:
    """Make the NameErrors of a kernel that has not run what it needs say what to run.

    After a kernel restart nothing is defined until the cells run again, and students often run
    the cell in front of them first. Then:

    - a test cell naming an answer that is not defined says which cells to run (the setup cell
      first if it has not run) in three lines, instead of Python's traceback;
    - a check whose answer raised ``NameError`` for a name the setup cell imports (``math``,
      ``torch``, ``F``...) says to run the setup cell (the first code cell);
    - every other error is shown as IPython always shows it.

    ``setup_notebook`` calls it (``setup_done``: the setup cell has run in this kernel), and so
    does ``import encoder_lib.grading`` (every test cell's first line), so that it holds before
    the setup cell has run. Outside IPython it does nothing.
    """
    if setup_done:
        _setup_done[0] = True
    shell = shell if shell is not None else _ipython()
    if shell is None:
        return
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
    else:
        value = _with_setup_hint(shell, value)
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)
    return None


_UNDEFINED = re.compile(r"name '(\w+)' is not defined")
"""Python's own message of a NameError (the kernel sends the exception's text, not its name)."""
_SETUP_CELL = "the setup cell (the first code cell)"


def _with_setup_hint(shell, error):
    """``error``, or, when it is a failed check whose answer raised NameError for a setup-cell
    name the kernel lacks, a copy of it that says to run the setup cell."""
    parts = getattr(error, "parts", None) or {}
    found = _UNDEFINED.search(parts.get("message") or "")
    if parts.get("raised") != "NameError" or not found:
        return error
    if found[1] not in SETUP_NAMES or found[1] in shell.user_ns:
        return error
    told = error.replaced(
        problem=f"{error.problem.rstrip('.')}. {found[1]} is imported by {_SETUP_CELL}, which has "
        "not run in this kernel (after a restart nothing has): run the setup cell first, then "
        "this cell again."
    )
    told.headline = "cannot be checked yet"
    return told


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
    block = GradingError(problem)
    block.headline = headline
    return block.lines(colour=True)
