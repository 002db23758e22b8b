"""What a student reads when a check fails: a short block, not a traceback.

A failed check raises ``GradingError``. IPython shows an exception through its
``_render_traceback_()`` when it has one, so a failure reads like a compiler error: which
exercise, the call it was tried on, what is wrong (the named mistake and how to fix it) and, when
the student's own code raised, their line. No frame of the grader is shown and no chained
"direct cause". nbgrader still sees an error output, so the test cell scores 0.

Whoever debugs the grader gets the ordinary traceback back with ``show_full_tracebacks(True)``
or the environment variable ``ENCODER_LAB_FULL_TRACEBACK=1``.
"""

from __future__ import annotations

import os
import re
import textwrap
import traceback
from collections.abc import Mapping

__all__ = [
    "GradingError",
    "ForbiddenCallError",
    "Hinted",
    "Mistake",
    "hint",
    "show_full_tracebacks",
]

WIDTH = 96
"""Lines are wrapped to this width: the notebook's and the feedback page's boxes show them whole."""

_RED, _BOLD, _RESET = "\x1b[31m", "\x1b[1m", "\x1b[0m"
_full = [os.environ.get("ENCODER_LAB_FULL_TRACEBACK", "") not in ("", "0")]


def show_full_tracebacks(on: bool = True) -> None:
    """Show failed checks as ordinary tracebacks (with the grader's frames) instead of the short
    block: for whoever debugs a check."""
    _full[0] = on


class Hinted(str):
    """A message that has a more concrete hint, shown on request (``hint()``): the message
    explains the concept, the hint points at the tool, neither hands over the line to paste."""

    hint: str

    def __new__(cls, message: str, hint: str) -> Hinted:
        self = super().__new__(cls, message)
        self.hint = hint
        return self


MISTAKE_ID = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
"""What a mistake id looks like: lowercase words joined by hyphens (``scaled-by-d-k``)."""


class Mistake(str):
    """A named mistake: its wording, and an id that does not change when the wording does.

    A catalogue entry is written ``Mistake("scaled-by-d-k", "the scores are divided by d_k
    ..."): value``, and a probe returns a ``Mistake`` too. It reads as its wording everywhere
    (the catalogue stays ``{wording: value}``); the id goes with the ``GradingError`` it
    becomes, into the verdict autograde records (``encoder_lib.autograde.judge_execute``) and
    the instructor's report, which counts mistakes by id. One mistake, one id: entries that word
    it for different cases share it, and so may the same mistake in two exercises. ``format``
    keeps the id (and the hint) and fills in the wording.

    Args:
        id: lowercase words joined by hyphens.
        text: the wording the student reads (a ``Hinted`` keeps its hint).
        hint: a more concrete hint, shown on request (``hint()``).
    """

    id: str
    hint: str | None

    def __new__(cls, id: str, text: str, hint: str | None = None) -> Mistake:
        if not MISTAKE_ID.fullmatch(id):
            raise ValueError(f"a mistake id is lowercase words joined by hyphens, got {id!r}")
        self = super().__new__(cls, text)
        self.id = id
        self.hint = hint or getattr(text, "hint", None)
        return self

    def __getnewargs__(self) -> tuple[str, str, str | None]:  # type: ignore[override]
        return self.id, str(self), self.hint

    def format(self, *args: object, **kwargs: object) -> Mistake:
        return Mistake(self.id, str.format(self, *args, **kwargs), self.hint)


_last: list[GradingError] = []


def hint() -> None:
    """Print a more concrete hint for the check that failed last in this kernel."""
    if not _last:
        print("No check has failed yet in this kernel: hint() helps after a failed test cell.")
        return
    error = _last[-1]
    title = error.exercise or "the last failed check"
    if error.hint:
        print(f"Hint for {title}: {error.hint}")
    else:
        print(
            f"No more concrete hint for {title}: its message is already as precise as it gets. "
            "Re-read it next to your code, and print the shapes of your intermediate tensors."
        )


def remember(error: GradingError) -> GradingError:
    """Keep ``error`` for ``hint()`` (the checks run in the notebook call this)."""
    _last[:] = [error]
    return error


class GradingError(AssertionError):
    """A check failed. ``problem`` says what is wrong in the student's terms.

    Args:
        problem: the named mistake and what to do about it (one or more sentences).
        tried: the call the check made, with shapes, e.g. ``"layer_norm(x, weight, bias) with
            x of shape (3, 5, 4)"``.
        exercise: which exercise, e.g. ``"Exercise 1 · layer_norm"``.
        where: the student's line that raised, when the failure is an exception from their code.
        hint: a more concrete hint, printed by ``hint()`` on request (by default the one
            carried by a ``Hinted`` or ``Mistake`` problem).
        mistake: the id of the mistake (by default the one carried by a ``Mistake`` problem);
            None for a message nothing names.
        root: when the mistake lives in an earlier exercise that this one calls, that
            exercise's test cell (``root_title`` its title); None when it lives here.
        parts: the values filled into the wording (``{"name": "attention_scores"}``), so that
            whoever words it again (a returned report, an exercise's ``rewrite``) reads them
            here instead of parsing ``problem``.
    """

    headline = "not right yet"

    def __init__(
        self,
        problem: str,
        tried: str | None = None,
        exercise: str | None = None,
        where: str | None = None,
        hint: str | None = None,
        mistake: str | None = None,
        root: str | None = None,
        root_title: str | None = None,
        parts: Mapping[str, str] | None = None,
    ):
        super().__init__(problem)
        self.problem = str(problem)
        self.hint = hint or getattr(problem, "hint", None)
        self.tried = tried
        self.exercise = exercise
        self.where = where
        self.mistake = mistake or getattr(problem, "id", None)
        self.root = root
        self.root_title = root_title
        self.parts = dict(parts or {})

    def replaced(self, **changes: object) -> GradingError:
        """A new error of the same kind with ``changes`` (``problem=...``, ``hint=None``...) in
        place of this one's fields, and its other attributes kept; this one is not changed."""
        unknown = sorted(set(changes) - set(_FIELDS))
        if unknown:
            raise TypeError(f"a GradingError has no field {unknown[0]!r}; its fields: {_FIELDS}")
        fields = {name: getattr(self, name) for name in _FIELDS}
        new = type(self)(**{**fields, **changes})  # type: ignore[arg-type]
        new.__dict__.update({k: v for k, v in vars(self).items() if k not in fields})
        return new

    def located(self, exercise: str | None = None, tried: str | None = None) -> GradingError:
        """A new error with ``exercise`` and ``tried`` filled in where they were missing."""
        return self.replaced(exercise=self.exercise or exercise, tried=self.tried or tried)

    def __str__(self) -> str:
        parts = [f"{self.tried}:" if self.tried else "", self.problem]
        if self.where:
            parts.append(f"(your code: {self.where})")
        return " ".join(p for p in parts if p)

    def lines(self, colour: bool = False) -> list[str]:
        """The short block, one string per line, wrapped to ``WIDTH``."""
        title = f"{self.exercise}: {self.headline}" if self.exercise else self.headline.capitalize()
        head = f"{_BOLD}{_RED}{title}{_RESET}" if colour else title
        out = [head]
        tried = None if isinstance(self, NotWrittenYet) else self.tried  # nothing was tried
        for label, text in (("tried", tried), ("problem", self.problem)):
            if text:
                out += _field(label, text)
        if self.where:
            out += _field("your code", self.where)
        if self.hint:
            out += _field("stuck?", "grading.hint() prints a more concrete hint")
        return out

    def _render_traceback_(self) -> list[str]:
        if _full[0]:
            return "".join(traceback.format_exception(self)).splitlines()
        return self.lines(colour=True)


_FIELDS = tuple("problem tried exercise where hint mistake root root_title parts".split())
"""``GradingError``'s constructor arguments, each kept as the attribute of the same name."""


class ForbiddenCallError(GradingError):
    """The student's code called a built-in that already does what the exercise asks for."""

    headline = "uses a built-in this exercise asks you to write"


class NotWrittenYet(GradingError):  # noqa: N818 (reads as the student's situation)
    """The exercise still raises the ``NotImplementedError`` of its stub."""

    headline = "not written yet"


def _field(label: str, text: str) -> list[str]:
    """``label`` and ``text``, the text wrapped and indented under its first line."""
    indent = " " * 13
    lines: list[str] = []
    for paragraph in text.splitlines() or [""]:
        lines += textwrap.wrap(
            paragraph,
            WIDTH - len(indent),
            break_long_words=False,
            break_on_hyphens=False,
        ) or [""]
    first = f"  {label + ':':<11}"
    return [first + lines[0]] + [indent + line for line in lines[1:]]
