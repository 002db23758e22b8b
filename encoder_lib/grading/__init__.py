"""Checks that grade the notebooks' exercises and name the student's mistake.

Import this module in a locked cell before any student cell (the notebooks' setup cell does):
importing it snapshots torch and ``encoder_lib`` so that later rebinding is detected, and makes
``encoder_lib``'s modules read-only. See ``_core`` for how checks and their defences work.

Every ``check_*`` takes the student's function or class, raises ``GradingError`` (an
``AssertionError``) with a message in the student's terms when something is wrong, prints
nothing and returns None when all is right. ``thorough=True`` adds the hidden tests' cases.
"""

import sys as _sys

from . import _core, attention, capstone, encoder, feed_forward, layer_norm, multi_head
from ._core import ForbiddenCallError, GradingError, TamperingError
from .attention import *  # noqa: F403
from .capstone import *  # noqa: F403
from .encoder import *  # noqa: F403
from .feed_forward import *  # noqa: F403
from .layer_norm import *  # noqa: F403
from .multi_head import *  # noqa: F403

__all__ = [
    "ForbiddenCallError",
    "GradingError",
    "TamperingError",
    *attention.__all__,
    *multi_head.__all__,
    *layer_norm.__all__,
    *feed_forward.__all__,
    *encoder.__all__,
    *capstone.__all__,
]

for _name, _module in list(_sys.modules.items()):
    if _name == "encoder_lib" or _name.startswith("encoder_lib."):
        _core.make_read_only(_module)
_core.take_snapshot()
