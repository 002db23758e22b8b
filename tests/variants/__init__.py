"""Answers written the way students write them, shared by the grader unit tests
(tests/grading) and the end-to-end nbgrader tests (tests/pipeline).

Each assignment has a module here (``a01_self_attention.py`` ...) defining ``BUGGY`` and
``CORRECT``: lists of ``Variant``. A variant is the complete source of one answer cell. The unit
tests execute it in a namespace like the notebook's and run the check; the pipeline tests paste
it into a student's copy of the notebook and autograde it with nbgrader.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass

ASSIGNMENTS = (
    "01_self_attention",
    "02_multi_head_attention",
    "03_layer_norm",
    "04_feed_forward",
    "05_encoder",
    "06_sentiment_capstone",
    "07_decoder",
    "08_pretraining",
    "09_modern_encoder",
    "10_jax_encoder",
    "11_real_encoder",
)


@dataclass(frozen=True)
class Variant:
    name: str
    """Short identifier, e.g. ``"scale_by_d_model"``."""
    cell: str
    """grade_id of the answer cell whose whole source ``source`` replaces."""
    source: str
    """The cell as a student would write it (including the ``def``/``class`` line)."""
    fails: tuple[str, ...] = ()
    """grade_ids of the test cells that must score 0; every other test cell keeps full marks."""
    says: str = ""
    """Words the failure message must contain (case-insensitive), naming the mistake."""
    also_says: tuple[tuple[str, str], ...] = ()
    """``(test cell, words)``: what another failing test cell's message must contain, e.g. that
    the mistake lives in this answer (an exercise that calls it)."""
    mistake: str = ""
    """The id of the mistake a buggy answer makes (``feedback.Mistake``, or a generic step's
    id of ``runner.STEP_MISTAKES``): the failure of its own test cell must carry it, and every
    id of the catalogue must be made by some buggy answer
    (tests/grading/checks/test_catalogue.py)."""


def load(assignment: str) -> tuple[list[Variant], list[Variant]]:
    """``(BUGGY, CORRECT)`` for an assignment such as ``"03_layer_norm"``."""
    module = importlib.import_module(f"variants.a{assignment}")
    ids = getattr(module, "MISTAKES", {})  # for buggy answers built from a table
    buggy = [
        v if v.mistake else dataclasses.replace(v, mistake=ids.get((v.cell, v.name), ""))
        for v in module.BUGGY
    ]
    return buggy, list(module.CORRECT)
