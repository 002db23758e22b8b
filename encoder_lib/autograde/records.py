"""The verdict autograde keeps for every test cell: which mistake, in which exercise.

Where records live: in the autograded notebook itself, in the metadata of the test cell they
judge (``cell.metadata["encoder_lib"]["verdict"]``), written by ``judge_execute.JudgeExecute`` in
nbgrader's process. The autograded notebook is what nbgrader keeps for every graded submission,
so the records go wherever it goes, with nothing else to write or merge:

- plain ``nbgrader autograde`` writes it to ``autograded/<student>/<assignment>/``;
- ``python -m encoder_lib.autograde`` gets it back from the worker with the grades and writes the
  folder in one piece after merging the grades (``distributed.Course.write_folder``): a worker
  that dies loses nothing (the scheduler grades the task again), and a submission graded again
  replaces its notebook, records included, so a re-run changes nothing and doubles nothing.

A record says, for one student, assignment and test cell::

    {"schema": 1, "exercise": "scaled_dot_product_attention",
     "title": "Exercise 4 · scaled_dot_product_attention", "passed": false,
     "mistake": "scaled-by-d-k", "root": "test_attention_scores",
     "root_title": "Exercise 1 · attention_scores", "message": "this comes from your ..."}

``mistake`` is the stable id of the mistake (``encoder_lib.grading.feedback.Mistake``, or a
generic step's id, ``runner.STEP_MISTAKES``); ``root`` the test cell of the earlier exercise
where the mistake lives when the failure comes from there (a cascade), else null; ``parts`` the
values filled into the message's wording (``{"name": "layer_norm"}`` for a function not written),
kept only when the wording has some. A test cell that no registered exercise judges (it ran
in the kernel) gets a record too, with its exercise named after the cell and, when it fails, no
mistake id and the error as its message.

nbconvert's ``ClearMetadataPreprocessor`` (off in this course's configuration) would remove the
records: whoever switches it on keeps them with
``c.ClearMetadataPreprocessor.preserve_cell_metadata_mask = {"nbgrader", "encoder_lib"}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["KEY", "SCHEMA", "RecordError", "Verdict", "read_notebook", "store"]

KEY = "encoder_lib"
"""The cell metadata key under which the verdict is kept."""

SCHEMA = 1
"""The record format's version."""


class RecordError(ValueError):
    """A notebook or a record that cannot be read; the message is one line."""


@dataclass(frozen=True)
class Verdict:
    """What autograde decided for one test cell."""

    exercise: str
    """The exercise's name (``runner.Exercise.name``), or the test cell's grade_id."""
    title: str
    passed: bool
    mistake: str | None = None
    """The mistake's stable id; None when passed, or when nothing names the failure."""
    root: str | None = None
    """The test cell of the earlier exercise where the mistake lives; None: it lives here."""
    root_title: str | None = None
    message: str | None = None
    """What the student was told (None when passed)."""
    parts: dict[str, str] = field(default_factory=dict, hash=False)
    """The values filled into the message's wording (``GradingError.parts``: the function not
    written, the built-in called...), so that a reader needs not parse ``message``; empty when
    the wording has none (and in records kept before parts were)."""

    def to_json(self) -> dict:
        """The record as JSON; ``parts`` only when the wording has some."""
        data = {"schema": SCHEMA, **asdict(self)}
        if not self.parts:
            del data["parts"]
        return data

    @classmethod
    def from_json(cls, data: object) -> Verdict:
        """The verdict of a stored record; ``RecordError`` says what is wrong with it."""
        if not isinstance(data, dict):
            raise RecordError(f"the record is {type(data).__name__}, not an object")
        if data.get("schema") != SCHEMA:
            raise RecordError(f"the record has schema {data.get('schema')!r}, expected {SCHEMA}")
        fields = {
            "exercise": str,
            "title": str,
            "passed": bool,
            "mistake": (str, type(None)),
            "root": (str, type(None)),
            "root_title": (str, type(None)),
            "message": (str, type(None)),
        }
        for name, kind in fields.items():
            if name not in data:
                raise RecordError(f"the record has no {name!r}")
            if not isinstance(data[name], kind):
                raise RecordError(f"the record's {name!r} is {data[name]!r}")
        parts = data.get("parts", {})
        if not isinstance(parts, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in parts.items()
        ):
            raise RecordError(f"the record's 'parts' is {parts!r}")
        return cls(**{name: data[name] for name in fields}, parts=dict(parts))


def store(cell, verdict: Verdict) -> None:
    """Keep ``verdict`` in the test cell's metadata."""
    cell.metadata.setdefault(KEY, {})["verdict"] = verdict.to_json()


def read_notebook(path: Path) -> Iterator[tuple[str, Verdict | None]]:
    """``(grade_id, verdict)`` of every test cell of an autograded notebook, the verdict None
    where the cell has no record (graded before records existed). ``RecordError`` for a file
    that is not a notebook or a record that is malformed, naming the cell."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        cells = nb["cells"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        raise RecordError(f"{path}: not a readable notebook ({error})") from None
    for cell in cells:
        if not isinstance(cell, dict):
            raise RecordError(f"{path}: not a readable notebook (a cell is {cell!r})")
        metadata = cell.get("metadata", {})
        nbgrader = metadata.get("nbgrader", {})
        if cell.get("cell_type") != "code" or not nbgrader.get("grade"):
            continue
        if nbgrader.get("solution"):
            continue
        grade_id = nbgrader.get("grade_id", "?")
        if KEY not in metadata:
            yield grade_id, None
            continue
        ours = metadata[KEY]
        try:
            if not isinstance(ours, dict) or "verdict" not in ours:
                raise RecordError(f"its {KEY!r} metadata holds no verdict")
            yield grade_id, Verdict.from_json(ours["verdict"])
        except RecordError as error:
            raise RecordError(f"{path}, test cell {grade_id}: {error}") from None
