"""What every exercise's cases hold, saved and compared: a reshaping of a checks module checked in
seconds.

    python -m tools.case_snapshot save /tmp/before.pt      # before the change
    python -m tools.case_snapshot compare /tmp/before.pt   # after it: every difference, exit 1

For every exercise of ``runner.EXERCISES`` and every case of ``cases(True)`` (visible and hidden),
the snapshot keeps what judging reads from the case: the call (arguments, gradients asked for,
upstream, module set-up), the wording, the expected value, the reference's gradients, every
catalogue entry (wording, id and value), the gradient mistakes, slots, letters, shape hints,
tolerances and message overrides (not ``Case.reference`` itself: what it gives is kept, the
expected value and the gradients). Tensors are compared bit for bit (dtype and shape included,
NaN equal to NaN). Functions (probes, prechecks, hints) cannot be compared by value: the snapshot
keeps only which fields hold one, so a change there is not seen here.

This is the fast half of the check of a reshaping; the slow half, ``tools.verdict_snapshot``,
grades real submissions (every variant of ``tests/variants``) and compares the verdicts.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from encoder_lib.grading import runner, vocabulary  # noqa: E402
from encoder_lib.grading.feedback import Mistake  # noqa: E402


def _plain(value: Any) -> Any:
    """``value`` with what cannot be saved or compared by value replaced by a marker."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, Mistake):
        return ["Mistake", value.id, str(value), value.hint]
    if isinstance(value, enum.Enum):
        return repr(value)
    if value is None or isinstance(value, bool | int | float | str | torch.dtype):
        return value
    if isinstance(value, dict) or hasattr(value, "items"):
        return {"<map>": [[_plain(k), _plain(v)] for k, v in value.items()]}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"<" + type(value).__name__ + ">": fields}
    if callable(value):
        return "<function>"
    return f"<{type(value).__name__}>"


_DEFAULTS = {
    f.name: _plain(f.default if f.default is not dataclasses.MISSING else f.default_factory())
    for f in dataclasses.fields(vocabulary.Case)
    if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
}
"""The fields of ``Case`` with a default, as recorded: a field at its default is left out of a
record, so that a new field of ``Case`` changes no snapshot of the cases that do not use it."""


def _case(case: vocabulary.Case) -> dict[str, Any]:
    record = {}
    for f in dataclasses.fields(case):
        if f.name == "reference":  # what it gives is kept: expected and grads
            continue
        value = getattr(case, f.name)
        if f.name in ("expected", "mistakes", "grads") and callable(value):
            value = value()
        record[f.name] = _plain(value)
    return _without_defaults(record)


def _without_defaults(record: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v for k, v in record.items() if k not in _DEFAULTS or differences(_DEFAULTS[k], v) != []
    }


def take() -> dict[str, Any]:
    """Test cell -> the records of its exercise's cases (``cases(True)``), in order, or the error
    that building them raised."""
    torch.manual_seed(0)
    snapshot: dict[str, Any] = {}
    for cell, exercise in sorted(runner.EXERCISES.items()):
        try:
            snapshot[cell] = [_case(case) for case in exercise.cases(True)]
        except Exception as error:  # one broken exercise must not hide the others
            snapshot[cell] = f"<error> {type(error).__name__}: {error}"
    return snapshot


def _normalised(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A snapshot saved before defaults were left out, read as one saved now."""
    return {
        cell: [_without_defaults(r) for r in records] if isinstance(records, list) else records
        for cell, records in snapshot.items()
    }


def differences(before: Any, after: Any, path: str = "") -> list[str]:
    """Where ``after`` differs from ``before``, one line each."""
    if isinstance(before, torch.Tensor) or isinstance(after, torch.Tensor):
        if not (isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor)):
            return [f"{path}: {type(before).__name__} -> {type(after).__name__}"]
        if before.dtype != after.dtype or before.shape != after.shape:
            was, now = (f"{t.dtype} {tuple(t.shape)}" for t in (before, after))
            return [f"{path}: {was} -> {now}"]
        if torch.equal(before, after) or (
            before.is_floating_point() and torch.equal(before.nan_to_num(), after.nan_to_num())
        ):
            return []
        gap = (before.double() - after.double()).abs().nan_to_num(float("inf")).max()
        return [f"{path}: values differ (largest difference {float(gap):.3g})"]
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in [*before, *(k for k in after if k not in before)]:
            if key not in before or key not in after:
                out.append(f"{path}.{key}: {'added' if key not in before else 'removed'}")
            else:
                out += differences(before[key], after[key], f"{path}.{key}")
        return out
    if isinstance(before, list) and isinstance(after, list):
        if len(before) != len(after):
            return [f"{path}: {len(before)} items -> {len(after)}"]
        pairs = enumerate(zip(before, after, strict=True))
        return [d for i, (b, a) in pairs for d in differences(b, a, f"{path}[{i}]")]
    if isinstance(after, str) and after.startswith("<error>"):
        return [f"{path}: {after}"[:300]]
    return [] if before == after else [f"{path}: {before!r} -> {after!r}"[:300]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("save", "compare"))
    parser.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    now = take()
    cases = sum(len(v) for v in now.values() if isinstance(v, list))
    if args.action == "save":
        torch.save(now, args.file)
        print(f"saved {len(now)} exercises, {cases} cases to {args.file}")
        return 0
    found = differences(_normalised(torch.load(args.file, weights_only=False)), now)
    for line in found:
        print(line)
    print(f"{len(now)} exercises, {cases} cases: {len(found)} differences")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
