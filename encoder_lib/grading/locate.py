"""Where a module answer goes wrong: the first given sub-module that gets something other than the
reference gives it.

When a module answer's output differs and no catalogue entry names the mistake, the runner asks
the student's kernel for the same call again with forward hooks on the sub-modules the given
``__init__`` creates (``observe.trace_parts``) and runs the reference under the same hooks.
Walking the reference's calls in order, the first difference is where the mistake is:

- a sub-module is never called, or called more or fewer times than in the reference;
- a sub-module gets another argument: named by what it equals (an input of the call, what another
  sub-module returned or was given, the sum of two of those, a mask inverted) and compared with
  what it should get;
- every sub-module gets what it should: the mistake is in how their outputs are combined into the
  result, which is named the same way.

It needs no catalogue: it knows only the reference and the names of the parts. What the kernel
records can only name a mistake after the values have already failed; it never passes a check.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from .feedback import Mistake
from .kernel.observe import TRACE, Call, Observation, named_tensors, student_mode, trace_parts

__all__ = ["Locate", "explain", "LOCATED"]

LOCATED = {
    "part-never-called": "a given sub-module is never called (localised, no catalogue entry)",
    "part-call-count": "a given sub-module is called more or fewer times than in the reference",
    "part-input": "a given sub-module gets a wrong argument (the first one that differs)",
    "part-output": "a given sub-module returns something else from the right arguments (its mode "
    "or weights changed)",
    "combination": "every given sub-module gets the right arguments; their outputs are combined "
    "wrongly",
}
"""The ids of what ``explain`` says -> what they mean (``runner.STEP_MISTAKES`` includes them)."""

INPUT_WORDS = ("x", "input", "h", "hidden", "src", "tgt", "token_ids")
"""Parameter names a message calls "its input"."""

Same = Callable[[torch.Tensor, torch.Tensor], bool]


@dataclasses.dataclass(frozen=True)
class Locate:
    """How to localise a case's mistake: the reference module (the call's ``state`` loaded) and
    the sub-modules, in the given ``__init__``'s names, whose calls are compared; or, for a
    function handed a model (a ``Part``), the reference's own record of the model's calls."""

    reference: nn.Module | Callable[[Call], list[dict]]
    parts: Sequence[str]
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """How messages call the call's tensor arguments (``{"args[1]": "memory (the encoder's
    output)"}``); default: the case's ``inputs`` names."""
    named: Mapping[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    """More tensors of the reference's computation with their names (a mask it builds)."""
    functions: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] = dataclasses.field(
        default_factory=dict
    )
    """Functions (not sub-modules) the reference applies, by a name with ``{}`` for the argument
    (``{"relu({})": F.relu}``): a tensor is also described as one of these of a known one."""
    names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """How messages call a part (default ``self.<part>``) and its arguments (``"args[1]"`` ->
    ``"tgt_in"``; a sub-module's arguments have their parameter names already)."""


def explain(
    locate: Locate,
    call: Call,
    inputs: Mapping[str, str],
    got: Any,
    want: Any,
    ask: Callable[[Call], Observation],
    same: Same,
) -> Mistake | None:
    """The mistake's place, or None when the traces cannot be compared (the answer raised on the
    traced call, or the kernel's record is not one). ``ask`` runs a call on the answer (a
    ``vocabulary.Ask``)."""
    ref = locate.reference
    if isinstance(ref, nn.Module):
        named = dict(ref.named_modules())
        parts = tuple(
            p
            for p in locate.parts
            if p in named and (call.train or not isinstance(named[p], nn.Dropout))
        )
    else:
        parts = tuple(locate.parts)
    traced = ask(dataclasses.replace(call, options={**call.options, TRACE: parts}))
    mine = _valid(traced.info.get(TRACE), parts) if traced.failure is None else None
    if mine is None:
        return None
    if isinstance(ref, nn.Module):
        was_training = ref.training
        with student_mode("", call.seed), torch.no_grad(), trace_parts(ref, parts) as theirs:
            try:
                ref.train(call.train)(*call.args, **call.kwargs)
            finally:
                ref.train(was_training)
    else:
        theirs = ref(call)
    words = _Names(locate.names)
    pool = _Pool(same, dict(locate.functions))
    labels = {**inputs, **locate.labels}
    for name, tensor in named_tensors(call.args, call.kwargs).items():
        pool.add(labels.get(name, name), tensor)
    for label, tensor in locate.named.items():
        pool.add(label, tensor)
    _add_calls(pool, theirs, words, "")
    pool.yours = _Pool(same)  # the answer's own intermediate results, to name its tensors by
    _add_calls(pool.yours, mine, words, " in your forward", arguments=False)
    return _first_difference(theirs, mine, parts, pool, got, want, words)


def _add_calls(pool: _Pool, calls: list[dict], words: _Names, where: str, arguments=True) -> None:
    """Name what each call returned (``what self.norm1 returns``) and then, as the weaker names,
    what it was given (``what self.norm2 gets as its input``)."""
    counts = Counter(c["part"] for c in calls)
    for kind in ("out", "args") if arguments else ("out",):
        seen: Counter[str] = Counter()
        for c in calls:
            k, seen[c["part"]] = seen[c["part"]], seen[c["part"]] + 1
            who = words.part(c["part"], k, counts[c["part"]])
            if kind == "out" and c["out"]:
                pool.add(f"what {who} returns{where}", c["out"][0])
            for arg, value in c["args"].items() if kind == "args" else ():
                if value is not None:
                    pool.add(f"what {who} gets {words.as_(arg)}{where}", value)


class _Names:
    def __init__(self, names: Mapping[str, str]):
        self.names = names

    def part(self, part: str, k: int = 0, total: int = 1) -> str:
        return self.names.get(part, f"self.{part}") + _ordinal(k, total)

    def arg(self, arg: str) -> str:
        return self.names.get(arg, arg)

    def as_(self, arg: str) -> str:
        return "as its input" if arg in INPUT_WORDS else f"as {self.arg(arg)}"


def _first_difference(theirs, mine, parts, pool, got, want, name) -> Mistake | None:
    counts = Counter(c["part"] for c in theirs)
    mine_counts = Counter(c["part"] for c in mine)
    seen: Counter[str] = Counter()
    for c in theirs:
        part = c["part"]
        k, seen[part] = seen[part], seen[part] + 1
        calls = [m for m in mine if m["part"] == part]
        if k >= len(calls):
            return _count_mistake(part, len(calls), counts, mine_counts, parts, name)
        who = name.part(part, k, counts[part])
        mistake = _argument_mistake(who, c["args"], calls[k]["args"], pool, name)
        if mistake is not None:
            return mistake
        if c["out"] and not (calls[k]["out"] and pool.same(calls[k]["out"][0], c["out"][0])):
            return Mistake(
                "part-output",
                f"{who} gets the same arguments as in the reference but returns something else, "
                "so it does not run as it should: in another mode (a .train() or .eval() call "
                "inside forward?) or with other weights.",
            )
    for part in parts:
        if mine_counts[part] > counts[part]:
            return _count_mistake(part, mine_counts[part], counts, mine_counts, parts, name)
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
        return None
    if _kind(want) != "float" and got.shape == want.shape and want.dim() == 2:
        row = int((got != want).any(dim=1).nonzero()[0, 0]) if (got != want).any() else 0
        return Mistake(
            "combination",
            f"every call of {name.part(parts[0])} gets the same arguments as in the reference, so "
            "the mistake is in how the result is assembled from what it returns: row "
            f"{row} of the output is {got[row].tolist()}, where it should be "
            f"{want[row].tolist()}.",
        )
    return Mistake(
        "combination",
        "every given sub-module gets the same arguments as in the reference, so the mistake is in "
        f"how their results are combined into the output: the output is {pool.describe(got)}, "
        f"where it should be {pool.describe(want)}.",
    )


def _count_mistake(part, n, counts, mine_counts, parts, name) -> Mistake:
    if n == 0:
        doubled = [
            f"{name.part(q)} is called {_times(mine_counts[q])} (the reference calls it "
            f"{_times(counts[q])})"
            for q in parts
            if mine_counts[q] > counts[q]
        ]
        also = f", while {' and '.join(doubled)}" if doubled else ""
        return Mistake(
            "part-never-called",
            f"{name.part(part)} is never called{also}: every sub-module the given __init__ "
            f"creates has its own place in forward; call {name.part(part)} where it belongs.",
        )
    return Mistake(
        "part-call-count",
        f"{name.part(part)} is called {_times(n)}; the reference calls it {_times(counts[part])}.",
    )


def _argument_mistake(who, want_args, got_args, pool, name) -> Mistake | None:
    for arg, want in want_args.items():
        got = got_args.get(arg)
        if want is None and got is None:
            continue
        if want is None:
            text = (
                f"{who} gets {name.as_(arg)} {pool.describe(got)}, where the reference passes none"
            )
        elif got is None:
            text = f"{who} gets no {name.arg(arg)}; it should get {pool.describe(want)}"
        elif pool.same(got, want):
            continue
        elif _kind(want) == "int" and want.dim() == 2 and got.shape == want.shape:
            row = int((got != want).any(dim=1).nonzero()[0, 0])
            text = (
                f"{who} gets {name.as_(arg)} ids whose row {row} is {got[row].tolist()}; in the "
                f"reference that row is {want[row].tolist()}"
            )
        else:
            text = (
                f"{who} gets {name.as_(arg)} {pool.describe(got)}; it should get "
                f"{pool.describe(want)}"
            )
        return Mistake("part-input", text + ".")
    return None


class _Pool:
    """The reference's tensors with their names, to describe any other tensor by."""

    def __init__(self, same: Same, functions: Mapping[str, Callable] | None = None):
        self._same = same
        self.items: list[tuple[str, torch.Tensor]] = []
        self.functions = dict(functions or {})
        self.yours: _Pool | None = None
        """Names from the answer's own run, tried after the reference's."""

    def add(self, label: str, tensor: torch.Tensor) -> None:
        if isinstance(tensor, torch.Tensor) and not any(lbl == label for lbl, _ in self.items):
            self.items.append((label, tensor))

    def same(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            return False
        if _kind(a) != _kind(b):
            return False
        if a.shape != b.shape:  # the same values written with other size-1 axes
            if a.numel() != b.numel():
                return False
            a = a.reshape(b.shape)
        if _kind(a) != "float":
            return bool(torch.equal(a, b))
        return self._same(a.to(b.dtype), b)

    def describe(self, t: torch.Tensor) -> str:
        """What ``t`` is: the first name whose tensor it equals (never its own entry: a reference
        argument described by itself would say nothing), then the answer's own results, a known
        function of one, the sum of two, a mask inverted; else only its shape."""
        everything = self.items + (self.yours.items if self.yours is not None else [])
        candidates = [(lbl, v) for lbl, v in everything if v is not t]
        for label, value in candidates:
            if self.same(t, value):
                return label
        if _kind(t) == "bool":
            for label, value in candidates:
                if _kind(value) == "bool" and self.same(~t, value):
                    return f"{label}, inverted"
        elif _kind(t) == "float":
            floats = [(lbl, v) for lbl, v in candidates if _kind(v) == "float"]
            for template, function in self.functions.items():
                for label, value in floats:
                    try:
                        if self.same(t, function(value)):
                            return template.format(label)
                    except (RuntimeError, ValueError, TypeError):
                        continue
            for (la, a), (lb, b) in itertools.combinations(floats, 2):
                if a.shape == b.shape == t.shape and self.same(t, a + b):
                    return f"{la} + {lb}"
        if _kind(t) == "int" and t.dim() == 2 and t.numel() <= 200:
            return f"ids whose first row is {t[0].tolist()}"
        kind = "a mask" if _kind(t) == "bool" else "a tensor"
        return (
            f"{kind} of shape {tuple(t.shape)} that is none of the tensors the reference computes "
            "(nor the sum of two)"
        )


def _kind(t: torch.Tensor) -> str:
    if t.dtype == torch.bool:
        return "bool"
    return "float" if t.is_floating_point() else "int"


def _valid(record: Any, parts: Sequence[str]) -> list[dict] | None:
    """The kernel's record if it has the shape ``trace_parts`` gives, else None."""
    if not isinstance(record, list):
        return None
    for c in record:
        if not (
            isinstance(c, dict)
            and c.get("part") in parts
            and isinstance(c.get("args"), dict)
            and all(v is None or isinstance(v, torch.Tensor) for v in c["args"].values())
            and isinstance(c.get("out"), tuple | list)
            and all(isinstance(v, torch.Tensor) for v in c["out"])
        ):
            return None
    return record


def _ordinal(k: int, total: int) -> str:
    if total <= 1:
        return ""
    n = k + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f" (its {n}{suffix} call)"


def _times(n: int) -> str:
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")
