"""Checks that grade the notebooks' exercises and name the student's mistake.

Every ``check_*`` takes the student's function or class, raises ``GradingError`` with a short
message in the student's terms when something is wrong (see ``feedback``), prints nothing and
returns None when all is right; ``thorough=True`` adds the hidden tests' cases. After a failed
check, ``hint()`` prints a more concrete hint for it, where the message has one.

How it is built: each exercise is data (``runner.Exercise``: how to call the student's object,
its cases, the reference, the catalogue of named mistakes, the built-ins it forbids) and one
runner judges them all (``runner.py``). The student's code runs in ``observe.py``, which only
records what happened; the judging never happens where a student could reach it at autograde:
``encoder_lib.autograde.judge`` sends the same calls into the student's kernel and judges what
comes back in nbgrader's own process.
"""

from . import (
    attention_checks,
    capstone_checks,
    decoder_checks,
    encoder_checks,
    feed_forward_checks,
    jax_checks,
    jax_training_checks,
    layer_norm_checks,
    masked_lm_checks,
    modern_checks,
    multi_head_checks,
    real_encoder_checks,
    restart_hints,
)
from .attention_checks import *  # noqa: F403
from .capstone_checks import *  # noqa: F403
from .decoder_checks import *  # noqa: F403
from .encoder_checks import *  # noqa: F403
from .feed_forward_checks import *  # noqa: F403
from .feedback import ForbiddenCallError, GradingError, NotWrittenYet, hint, show_full_tracebacks
from .jax_checks import *  # noqa: F403
from .jax_training_checks import *  # noqa: F403
from .layer_norm_checks import *  # noqa: F403
from .masked_lm_checks import *  # noqa: F403
from .modern_checks import *  # noqa: F403
from .multi_head_checks import *  # noqa: F403
from .real_encoder_checks import *  # noqa: F403
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
    *attention_checks.__all__,
    *multi_head_checks.__all__,
    *layer_norm_checks.__all__,
    *feed_forward_checks.__all__,
    *encoder_checks.__all__,
    *capstone_checks.__all__,
    *decoder_checks.__all__,
    *masked_lm_checks.__all__,
    *modern_checks.__all__,
    *jax_checks.__all__,
    *jax_training_checks.__all__,
    *real_encoder_checks.__all__,
]
