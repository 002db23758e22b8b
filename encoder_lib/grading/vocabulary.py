"""What an author writes an exercise's cases with: the vocabulary of the checks modules.

A ``Case`` is one call of the student's code and everything needed to judge it: the ``Call``
(``kernel.observe``), the reference's value or the reference itself (``reference_value``,
``reference_grads``, run as the student's code is: ``reference_mode``), the named mistakes, the
``Probe``s and ``Unchanged`` invariances that explain a wrong value, the ``Intermediate`` values
judged on the way, the ``ModuleSpec`` of a constructed module. Around it: inputs
(``randn``, ``redrawn``, ``keep_first``), the backward variant of a case (``backpropagating``),
fields shared by an exercise's cases (``with_case_fields``), and how values are compared
(``close``, ``tolerance``, ``HALF_PRECISION``, ``mismatch``'s wording of a difference).

Nothing here runs a check: ``runner`` holds the run loop (``run``, ``judge`` and its ``STEPS``),
the exercises' registration (``register_given``, ``EXERCISES``) and the generic wordings; it
imports this module, never the other way round.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

import torch

from .kernel.observe import (
    Call,
    Failure,
    Observation,
    Opaque,
    arguments,
    named_tensors,
    student_mode,
    tensors_of,
)
from .locate import Locate

__all__ = [
    "Ask",
    "Probe",
    "ModuleSpec",
    "Case",
    "Intermediate",
    "Unchanged",
    "with_case_fields",
    "backpropagating",
    "redrawn",
    "randn",
    "keep_first",
    "reference_mode",
    "reference_value",
    "reference_grads",
    "HALF_PRECISION",
    "tolerance",
    "close",
    "mismatch",
    "describe",
]

Ask = Callable[[Call], Observation]
"""Runs a call on the student's code and returns what was observed. An Ask may also have a
``prefetch(calls)`` method: ``run`` then hands it every case's call first (the autograder
sends them into the kernel together)."""

Probe = Callable[[Observation, Ask], "str | None"]
"""Looks for a property the answer breaks; returns a description of the problem or None (or
raises a ``GradingError`` of its own)."""


# --- cases ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleSpec:
    """What a constructed module must look like (mostly: the given ``__init__`` kept)."""

    parameters: Sequence[str] | None = None
    """The expected parameter names (order does not matter)."""
    names_message: str = ""
    """Said when the names differ; may use ``{got}`` and ``{expected}``."""
    initial: Mapping[str, float] = field(default_factory=dict)
    """Parameter name -> the value it is filled with after construction."""
    attrs: Mapping[str, Any] = field(default_factory=dict)
    """Attribute -> expected value (e.g. ``{"eps": 1e-5}``)."""
    forbidden_submodules: Mapping[str, str] = field(default_factory=dict)
    """Qualified class name of a sub-module the answer must not hold -> its name in messages."""
    not_module_message: str = "{call} should build an nn.Module: keep the given class and __init__."
    keep_init: str = "keep the given __init__"
    not_parameter_message: str = (
        "{names} should be parameters, but {call} holds them as {kinds}: no optimiser "
        "would train them. Wrap each in nn.Parameter."
    )
    """Said when an expected parameter is held as a plain array (``facts["not_parameters"]``:
    name -> class); may use ``{names}``, ``{kinds}`` and ``{call}``."""


@dataclass
class Case:
    """One call of the student's code and everything needed to judge it."""

    call: Call
    what: str
    """The call as the student reads it: ``"layer_norm(x, weight, bias) with x of shape ..."``."""
    expected: Any = None
    """The reference's value (a tensor, a tuple of tensors, an int...), or a function giving it;
    derived from ``reference`` when that is given instead."""
    mistakes: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None
    """Description -> the value that mistake gives (same structure as ``expected``; a None slot
    is not compared). Computed only when the answer is wrong if given as a function."""
    probes: Sequence[Probe] = ()
    requires: Sequence[Probe] = ()
    """Properties checked once the values are right (e.g. a sub-layer called exactly once); a
    description returned is the message."""
    slots: Sequence[str] = ()
    """How messages call each output: ``("the output of ...", "the weights returned by ...")``;
    by default ``what`` (one output) or ``"output i of what"``."""
    letters: Sequence[str] = ()
    """The expected shape of each slot in the course's letters, e.g. ``"(..., L_q, L_k)"``."""
    shape_hints: Sequence[Mapping[tuple[int, ...], str]] = ()
    """Per slot: a wrong shape -> what it means."""
    order: Sequence[int] | None = None
    """Which slots are compared first (default: in order)."""
    atol: float | None = None
    rtol: float | None = None
    grads: Mapping[str, torch.Tensor] | Callable[[], Mapping[str, torch.Tensor]] | None = None
    """The reference's gradients by the names ``Call.grad`` uses (``"args[0]"``,
    ``"parameters.linear1.weight"``...) when ``Call.upstream`` is given."""
    grad_names: Mapping[str, str] = field(default_factory=dict)
    """How messages call each gradient's input (``{"args[0]": "x"}``)."""
    grad_mistakes: Mapping[str, Mapping[str, torch.Tensor]] = field(default_factory=dict)
    """Input name -> {description: the gradient that mistake gives}."""
    module: ModuleSpec | None = None
    precheck: Callable[[Observation], str | None] | None = None
    """Looked at before the generic structure, shape and value steps: for a problem those would
    name less well (a swapped pair, an additive mask); returns the message or None."""
    before: Sequence[Probe | Intermediate] = ()
    """Looked at, in order, after ``precheck`` and before the generic comparison of the output:
    probes (what the answer did on the way, e.g. the calls recorded of its sub-modules; a
    description returned is the message) and ``Intermediate``s, values on the way judged as cases of
    their own (the input of an encoder's first layer). A hidden case with any is left to the
    thorough check, as one with a ``judge``."""
    any_float: bool = False
    """Any floating-point dtype is a right answer: the expected value is compared in the
    answer's own (a table whose dtype the exercise does not fix)."""
    inputs: Mapping[str, str] = field(default_factory=dict)
    """How messages call the tensor arguments (``{"args[0]": "x"}``); default: their names."""
    failure_hint: Callable[[Failure], str | None] | None = None
    """Adds the exercise's explanation to an exception from the student's code."""
    judge: Callable[[Observation, Ask], None] | None = None
    """Replaces steps 3-7 for values the generic comparison does not fit."""
    messages: Mapping[str, str] = field(default_factory=dict)
    """Overrides of the generic wordings: ``"in_place"``, ``"dtype"``, ``"no_grad"``."""
    locate: Locate | None = None
    """For a module answer: the reference module and its given sub-modules. A wrong value that
    no catalogue entry and no probe names is then localised (``locate.explain``): the first
    sub-module that gets something else than in the reference, or the combination of their
    results."""
    reference: Callable[..., Any] | None = None
    """What a right answer computes: the reference function, or the reference module built,
    in the call's dtype and mode. ``expected`` and ``grads``, when not given, are derived from
    it (``reference_value``, ``reference_grads``): the case then holds only its inputs."""

    def __post_init__(self) -> None:
        if self.reference is None:
            return
        if self.expected is None:
            self.expected = reference_value(self.reference, self.call)
        if self.grads is None and self.call.upstream is not None:
            self.grads = reference_grads(self.reference, self.call)


@dataclass
class Intermediate:
    """An intermediate value of a case (``Case.before``), judged as a case of its own by the
    generic steps before the case's output is: how the input of the first layer of an encoder is
    told right or wrong before its output is compared."""

    observed: Callable[[Observation], Observation]
    """The intermediate value out of the case's observation, as an observation of its own."""
    case: Callable[[Observation], Case]
    """The case that judges it (may look at the whole observation, e.g. for its mistakes)."""


_CASE_DEFAULTS = {
    f.name: f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    for f in fields(Case)
    if f.default is not MISSING or f.default_factory is not MISSING
}


def with_case_fields(
    cases: Callable[[bool], Iterable[Case]], **case_fields: Any
) -> Callable[[bool], Iterable[Case]]:
    """``cases`` with ``case_fields`` (``Case`` field -> value) set on every case that leaves
    that field at its default: what all of an exercise's cases share, said once. A case that
    sets the field keeps its own; ``expected`` and ``grads`` are derived again when the shared
    fields give the reference."""
    unknown = sorted(set(case_fields) - set(_CASE_DEFAULTS))
    if unknown:
        raise TypeError(f"not fields of Case with a default: {', '.join(unknown)}")
    if not case_fields:
        return cases

    @functools.wraps(cases)
    def each(thorough: bool) -> Iterator[Case]:
        for case in cases(thorough):
            for name, value in case_fields.items():
                if _is_default(getattr(case, name), _CASE_DEFAULTS[name]):
                    setattr(case, name, value)
            case.__post_init__()
            yield case

    return each


def _is_default(value: Any, default: Any) -> bool:
    if default is None:
        return value is None
    return type(value) is type(default) and not value


# --- comparing -----------------------------------------------------------------------------------


HALF_PRECISION = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2)}
"""(atol, rtol) for expected values in 16 bits: a few units in the last place of their 11
(float16) or 8 (bfloat16) significant bits, where an answer that sums in another order lands."""


def tolerance(case: Case, want: torch.Tensor) -> tuple[float, float]:
    """(atol, rtol): the case's, else 1e-6 and 1e-5 (float64), 1e-5 and 1e-4 (float32) or
    ``HALF_PRECISION``'s."""
    if want.dtype in HALF_PRECISION:
        default = HALF_PRECISION[want.dtype]
    else:
        low = want.dtype not in (torch.float64, torch.complex128)
        default = (1e-5, 1e-4) if low else (1e-6, 1e-5)
    atol = case.atol if case.atol is not None else default[0]
    rtol = case.rtol if case.rtol is not None else default[1]
    return atol, rtol


def close(a: Any, b: Any, atol: float = 1e-6, rtol: float = 1e-5) -> bool:
    """Whether ``a`` equals ``b`` to the tolerance: tensors of one shape compared in float64
    (NaN never close, booleans and integers exactly), other values with ``==``."""
    if isinstance(b, torch.Tensor):
        if not isinstance(a, torch.Tensor) or a.shape != b.shape:
            return False
        if not b.is_floating_point():
            return a.dtype == b.dtype and bool(torch.equal(a, b))
        with torch.no_grad():
            a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
            return bool(torch.allclose(a64, b64, rtol=rtol, atol=atol, equal_nan=False))
    if isinstance(b, tuple):
        return (
            isinstance(a, tuple | list)
            and len(a) == len(b)
            and all(y is None or close(x, y, atol, rtol) for x, y in zip(a, b, strict=True))
        )
    return type(a) is type(b) and a == b


def describe(value: Any) -> str:
    """A value as a message names it: ``"a tensor of shape (2, 3)"``, ``"a tuple of 2"``,
    ``"NoneType"``, ``"int (3)"``."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, Opaque):
        return value.type
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__ + ("" if value is None else f" ({value!r})")


def mismatch(name: str, got: Any, want: Any, atol: float = 1e-6, rtol: float = 1e-5) -> str:
    """The generic message: what differs, where, by how much (``torch.testing.assert_close``'s
    account of it)."""
    if not isinstance(want, torch.Tensor):
        return f"{name} is {got!r}, expected {want!r}."
    try:
        torch.testing.assert_close(
            got.to(torch.float64) if want.is_floating_point() else got,
            want.to(torch.float64) if want.is_floating_point() else want,
            atol=atol if want.is_floating_point() else 0,
            rtol=rtol if want.is_floating_point() else 0,
            check_dtype=False,
            equal_nan=False,
        )
    except AssertionError as e:
        details = [line.strip() for line in str(e).splitlines()[1:] if line.strip()]
        nan = " It contains NaN." if want.is_floating_point() and bool(got.isnan().any()) else ""
        return f"{name} does not match the reference. {' '.join(details)}{nan}"
    return f"{name} does not match the reference."


# --- probes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unchanged:
    """A probe for an invariance of the reference: ``call`` with ``args`` in place of its own
    arguments gives the same output (the first of a pair) at ``where``. When the answer's output
    changes there (the padding leaks into real positions, the last position into earlier ones),
    ``mistake`` is the message. ``when`` False: the case has no such invariance to try."""

    call: Call
    args: tuple[Any, ...]
    mistake: str
    where: Any = Ellipsis
    when: bool = True

    def __call__(self, obs: Observation, ask: Ask) -> str | None:
        if not self.when:
            return None
        before, after = obs.value, ask(replace(self.call, args=self.args)).value
        if isinstance(before, tuple | list):
            before, after = before[0], after[0] if isinstance(after, tuple | list) else None
        if not isinstance(after, torch.Tensor) or after.shape != before.shape:
            return None
        return None if close(after[self.where], before[self.where], 1e-5, 1e-4) else self.mistake


# --- inputs --------------------------------------------------------------------------------------


def redrawn(x: torch.Tensor, where: Any, seed: int, scale: float = 1.0) -> torch.Tensor:
    """A copy of ``x`` with ``x[where]`` drawn again (``randn`` with ``seed``, times ``scale``):
    the input of an ``Unchanged`` probe."""
    other = x.clone()
    other[where] = randn(*other[where].shape, seed=seed).to(x.dtype) * scale
    return other


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Reproducible inputs from a private generator (the notebook's random state is untouched)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def keep_first(lengths: Sequence[int], length: int, extra_axes: int = 2) -> torch.Tensor:
    """A padding mask ``(B, 1, ..., 1, L)`` with ``extra_axes`` singleton axes (two by default,
    broadcasting against scores ``(B, H, L_q, L_k)``): True at the first ``lengths[b]`` positions
    of sequence b (may attend), False at the padding after them."""
    keep = torch.arange(length)[None, :] < torch.tensor(list(lengths))[:, None]  # (B, L)
    return keep.reshape(len(lengths), *([1] * extra_axes), length)


# --- the reference side --------------------------------------------------------------------------


def reference_mode(seed: int = 0):
    """Run the reference the way the student's code runs: deterministic dropout, torch's
    generator seeded with ``seed`` (no forbidden built-ins are trapped for it)."""
    return student_mode("", seed)


def reference_value(reference: Callable[..., Any], call: Call) -> Any:
    """``reference`` on copies of ``call``'s arguments, run as the student's code is (one
    thread, the call's seed), without gradients."""
    args, kwargs = arguments(call)
    with reference_mode(call.seed), torch.no_grad():
        return reference(*args, **kwargs)


def backpropagating(
    case: Case, *upstream: torch.Tensor, grad: Sequence[str] | None = None, **fields: Any
) -> Case:
    """``case``, its backward variant: ``upstream`` (one tensor per output) backpropagated into
    ``grad`` (by default every floating-point tensor argument), the wording saying so, and the
    reference's gradients derived again (now, or once ``with_case_fields`` gives the reference).
    ``fields``: other fields of the variant (``grad_names=``, ``grad_mistakes=``)."""
    if grad is None:
        tensors = enumerate(case.call.args)
        grad = [f"args[{i}]" for i, a in tensors if torch.is_tensor(a) and a.is_floating_point()]
    case.call = replace(case.call, grad=tuple(grad), upstream=tuple(upstream))
    case.what += ", backpropagating"
    for name, value in fields.items():
        setattr(case, name, value)
    case.grads = None
    case.__post_init__()
    return case


def reference_grads(reference: Callable[..., Any], call: Call) -> dict[str, torch.Tensor]:
    """The gradients a right answer gives on ``call``: ``reference`` (a function, or a module
    with its parameters) run on copies of the arguments as the student's code is, then
    ``sum(output * upstream)`` backpropagated into the inputs ``call.grad`` names ("parameters":
    every parameter of the module), by the names ``Observation.grads`` uses, in the order of
    ``call.grad``."""
    args, kwargs = arguments(call)
    inputs = named_tensors(args, kwargs)
    tracked: dict[str, torch.Tensor] = {}
    for name in call.grad:  # in the call's order: the first wrong gradient is the one reported
        if name == "parameters" and isinstance(reference, torch.nn.Module):
            tracked |= {f"parameters.{n}": p for n, p in reference.named_parameters()}
        elif name in inputs:
            tracked[name] = inputs[name].requires_grad_()
    with reference_mode(call.seed):
        outputs = tensors_of(reference(*args, **kwargs))
    upstream = call.upstream or ()
    pairs = [(o, u) for o, u in zip(outputs, upstream, strict=False) if o.requires_grad]
    loss = sum((o * u.to(o.dtype)).sum() for o, u in pairs)
    grads = torch.autograd.grad(loss, list(tracked.values()), allow_unused=True)
    return {name: g for name, g in zip(tracked, grads, strict=True) if g is not None}
