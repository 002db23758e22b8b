"""Authorship rules, checked in nbgrader's process from the answer cells' source.

The forbidden-call trap of ``encoder_lib.grading.kernel.observe`` lives in the student's kernel,
where it tells a student at once that a built-in does the exercise's work. Code in the same kernel
can switch it off or go around it (``sys.setprofile(None)``, ``torch._C.DisableTorchFunction()``, a
thread, ``torch.ops.aten``, a function fetched by a string...). So at autograde the judge also
reads the answer cells' source from the submitted notebook, before any call reaches the kernel,
and an exercise whose answer breaks a rule scores 0 with a message that names the construct and
where it is, counted in the instructor's report under the rule's id
(``source_rules.MISTAKES``: ``authorship-reflection``, ``authorship-thread``...; the exercise's
own rule is ``forbidden-built-in``).

The rules themselves are ``encoder_lib.grading.kernel.source_rules`` (the visible checks apply the
same ones in the kernel, to the cell that defines the answer). Here they are applied to a notebook:

- **the exercise's own** (``forbidden.rules``: its forbidden built-ins in every form, or the
  course-wide list when it has none) to its own answer cells (those between the previous judged
  test cell and its own). Only the exercise's own cells: a later exercise may forbid what an
  earlier one needs (``count_parameters`` forbids the ``nn.Linear`` that ``FeedForward`` is
  built from).
- **everyone's** to every answer cell before the test cell: such a construct in any answer cell
  changes what every later check sees, so every exercise graded after it scores 0; the first
  says what and where, the later ones point back to it.

Imports anywhere before the test cell (the setup cell's included) say what each name is.

This is a rule check, not a sandbox: see docs/GRADING.md, "What is guaranteed, and what is not".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nbgrader.utils import is_grade, is_solution

from encoder_lib.grading import runner
from encoder_lib.grading.feedback import ForbiddenCallError, GradingError
from encoder_lib.grading.kernel.forbidden import rules
from encoder_lib.grading.kernel.source_rules import (
    BUILTINS,
    DUNDERS,
    EVASIONS,
    MISTAKE,
    MISTAKES,
    Breach,
    aliases,
    cell_breaches,
    parse,
)

__all__ = [
    "Breach",
    "EVASIONS",
    "BUILTINS",
    "DUNDERS",
    "MISTAKE",
    "MISTAKES",
    "breaches",
    "cell_breaches",
    "refusal",
]


def breaches(cells: Sequence[Any], index: int, exercise: str) -> tuple[list[Breach], list[Breach]]:
    """``(own, earlier)``: the rules broken by the answer cells before ``cells[index]`` (the
    test cell of ``exercise``, a key of ``forbidden.FORBIDDEN``). ``own``: by the exercise's own
    answer cells (those after the previous judged test cell): everyone's rules and the
    exercise's forbidden built-ins; ``earlier``: everyone's rules, broken by the answer cells of
    exercises graded before it. Imports anywhere before the test cell (the setup cell's
    included) say what each name is."""
    names = aliases(parse(cell.source) for cell in cells[:index] if cell.cell_type == "code")
    previous_test = max((i for i in range(index) if _is_judged_test(cells[i])), default=-1)
    forbidden = rules(exercise)
    own: list[Breach] = []
    earlier: list[Breach] = []
    for i, cell in enumerate(cells[:index]):
        if cell.cell_type != "code" or not is_solution(cell):
            continue
        gid = cell.metadata.get("nbgrader", {}).get("grade_id", f"cell {i + 1}")
        if i > previous_test:
            own += cell_breaches(gid, cell.source, names, forbidden)
        else:
            earlier += [b for b in cell_breaches(gid, cell.source, names, None) if b.spreads]
    return own, earlier


def _is_judged_test(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return is_grade(cell) and not is_solution(cell) and meta.get("grade_id") in runner.EXERCISES


OWN_FORBIDDEN = (
    "the answer calls {name}, which already does what this exercise asks you to write, so it "
    "earns no points (the grader read `{construct}` on line {line} of the answer cell {cell!r}). "
    "Write it yourself from basic operations; you may use {name} afterwards, in a cell of your "
    "own, to check your answer."
)
OWN_EVASION = (
    "the answer cell {cell!r} uses `{construct}` (line {line}): {rule}. No answer needs it and it "
    "can switch the grader's checks off, so this exercise earns no points (the grader read it in "
    "the submitted notebook). Take it out: answers use the operations and the names the "
    "exercise gives."
)
EARLIER_EVASION = (
    "an earlier answer cell, {cell!r}, uses `{construct}` (line {line}): {rule}. It can change "
    "what every later check sees, so this exercise earns no points either. Take it out of that "
    "cell."
)


def refusal(exercise: runner.Exercise, own: Sequence[Breach], earlier: Sequence[Breach]):
    """The ``GradingError`` that scores ``exercise`` 0, from its first breach (its own first):
    a ``ForbiddenCallError`` (id ``forbidden-built-in``, the kernel's trap's for the same
    mistake, phrased by the exercise's ``rewrite`` as its check would) or a ``GradingError``
    with the rule's id (``source_rules.MISTAKES``)."""
    first = (list(own) or list(earlier))[0]
    fields = {"cell": first.cell, "construct": first.construct, "line": first.line}
    if first.own:
        error: GradingError = ForbiddenCallError(
            OWN_FORBIDDEN.format(name=first.rule, **fields),
            mistake="forbidden-built-in",
            parts={"name": first.rule},
        )
        if exercise.rewrite is not None:
            error = exercise.rewrite(error, None, [])
    else:
        template = OWN_EVASION if own else EARLIER_EVASION
        error = GradingError(template.format(rule=first.rule, **fields), mistake=first.mistake)
    return error.replaced(exercise=exercise.title)
