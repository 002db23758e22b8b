"""Checks that grade the notebooks' exercises and name the student's mistake.

Every ``check_*`` takes the student's function or class, raises ``GradingError`` with a short
message in the student's terms when something is wrong (see ``feedback``), prints nothing and
returns None when all is right; ``thorough=True`` adds the hidden tests' cases. After a failed
check, ``hint()`` prints a more concrete hint for it, where the message has one.

How it is built: each exercise is data (``runner.Exercise``: how to call the student's object,
its cases, written with ``vocabulary``, the reference, the catalogue of named mistakes, the
built-ins it forbids), described in its notebook's module of ``checks/``, and one runner judges
them all (``runner.py``). The student's code runs in ``kernel/observe.py``, which only records
what happened; the judging never happens where a student could reach it at autograde:
``encoder_lib.autograde.kernel_ask`` sends the same calls into the student's kernel and the
judge weighs what comes back in nbgrader's own process. docs/AUTHORING.md walks through it.
"""

from . import checks, restart_hints
from .checks import *  # noqa: F403  every check_* function, from its notebook's module
from .feedback import ForbiddenCallError, GradingError, NotWrittenYet, hint, show_full_tracebacks
from .runner import EXERCISES

# Every test cell's first line imports this package: its NameErrors say what to run even when
# the setup cell has not run since the kernel restarted.
restart_hints.install_hints()

__all__ = [
    "EXERCISES",
    "ForbiddenCallError",
    "GradingError",
    "NotWrittenYet",
    "hint",
    "show_full_tracebacks",
    *checks.__all__,
]
