"""One runner for every exercise: exercises are data, the generic checks are written once.

What lives here: the exercises' registration (``register_given``, ``EXERCISES``, ``catalogue``),
the run loop (``run``, ``trials_of``, ``dependencies``; ``judge`` and its ``STEPS``), the generic
wordings and their ids (``NOT_WRITTEN``..., ``STEP_MISTAKES``, ``UNEXPLAINED``). What a checks
module writes its cases with (``Case``, ``ModuleSpec``, ``Intermediate``, ``Unchanged``,
``randn``, ``reference_value``, ``close``...) lives in ``vocabulary``, which this module imports.

An ``Exercise`` says what the student writes (a function or a class, under which name, graded by
which test cell) and produces its ``Case``s (``vocabulary.Case``): the ``Call`` to make, the
reference's value, the values that named mistakes give (the catalogue), property probes for when
nothing in the catalogue matches, the expected gradients. ``run`` makes each call through an
``Ask`` (in the notebook: ``local``, which runs the student's object in this process; at
autograde: the grader's kernel client, which runs it in the student's kernel) and judges the
``Observation`` here, in this order, the first failure raising a ``GradingError`` that names the
problem:

1. the call did not return: not written yet, a forbidden built-in, an exception (with the
   student's line and the case's hint), the name not defined;
2. a constructed module: an ``nn.Module``, with the expected parameters (names, initial values),
   attributes and no forbidden sub-module;
3. the value's structure (a tensor, a pair, an int), each tensor a plain ``torch.Tensor`` with
   the expected shape;
4. no input changed in place;
5. every tensor has the expected dtype;
6. the values: equal to the reference, or else the first named mistake whose value they equal,
   or the first probe that explains the difference, or a generic mismatch message;
7. gradients: the output still requires grad, every expected gradient arrives and is right.

The visible check (``thorough=False``) judges the visible cases fully and then tries the hidden
cases' inputs on the generic properties only (steps 1-5, and that gradients arrive): the hidden
tests hide only which *values* are compared, so an answer that keeps the visible tests' dtype
but not the inputs' (``.double()``), breaks with more batch axes, changes an input in place or
cuts the gradient is told so in the notebook, not first at grading.

When an answer fails and its code calls the answer to an earlier exercise of the same notebook
(``scaled_dot_product_attention`` calling ``attention_scores``), that earlier exercise is checked
too; if it is wrong, the message says that the mistake lives there (``DEPENDS``). The dependent
exercise still scores 0 unless ``SPARE_DEPENDENTS`` is set (docs/GRADING.md).

Every failure carries the id of its mistake (``GradingError.mistake``), which does not change
when the wording does: a catalogue entry's or a probe's own (``feedback.Mistake``), else the id
of the generic step that objected (``STEP_MISTAKES``). A failure that comes from an earlier
exercise carries that exercise's mistake and test cell (``GradingError.root``). Autograde
records both for every test cell (``encoder_lib.autograde.judge_execute``), for the instructor's
report.

Dropout is deterministic while the student's code runs (``observe.deterministic_dropout``) and
the reference runs under the same rule, so a case in training mode is compared like any other:
where dropout sits shows in the values.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from . import locate as _locate
from .feedback import ForbiddenCallError, GradingError, Mistake, NotWrittenYet, remember
from .kernel.forbidden import Forbidden, forbid, note_exercise
from .kernel.observe import (
    AFTER_CHECK,
    Call,
    Failure,
    Observation,
    named_tensors,
    namespace_of,
    observe,
)
from .kernel.source_rules import MISTAKES as RULE_MISTAKES
from .vocabulary import (
    Ask,
    Case,
    Intermediate,
    ModuleSpec,
    close,
    describe,
    mismatch,
    tolerance,
    with_case_fields,
)

__all__ = [
    "Exercise",
    "EXERCISES",
    "STEP_MISTAKES",
    "UNEXPLAINED",
    "SPARE_DEPENDENTS",
    "STEPS",
    "catalogue",
    "register",
    "register_given",
    "run",
    "trials_of",
    "dependencies",
    "judge",
    "run_steps",
    "failure_error",
    "local",
    "make_check",
]

# --- wordings shared by every exercise -----------------------------------------------------------

NOT_WRITTEN = (
    "{name} is not written yet: replace `raise NotImplementedError()` with your code, run its "
    "cell, then this one."
)
CALLS_STUB = "it calls {name}, which is not written yet: write {name} first (and run its cell)."
CALLS_FORBIDDEN = (
    "{who} calls {name}, which already does what this exercise asks you to write, so it earns no "
    "points. Write it yourself from basic tensor operations (matmul, softmax, mean, ...); you may "
    "use it afterwards to check your answer."
)
IN_PLACE = (
    "it changed its input in place: {name} is not the same after the call (an operation ending "
    "in _, such as masked_fill_ or add_, or an assignment such as x -= ... or x[...] = ...). The "
    "caller still needs its tensor: compute a new tensor instead."
)
WRONG_DTYPE = (
    "{slot} has dtype {got}, but the inputs were {expected}: keep the inputs' dtype (no "
    ".float() or .double(), no new tensors made with a fixed dtype)."
)
NO_GRAD = (
    "{slot} does not require grad: no gradient reaches the inputs, so nothing could train. Keep "
    "the computation differentiable with autograd: no .detach(), .data, .item(), numpy or "
    "torch.no_grad()."
)
DEPENDS = (
    "this comes from your {dep} ({number}), which {target} calls and which is not right yet: "
    "{problem} Fix it in {dep} (its own test cell says the same), then run this cell again."
)
SPARE_DEPENDENTS = False
"""False (the default): an exercise whose failure comes from an earlier exercise it calls scores
0 too (its message names the earlier one). True, or the environment variable
``ENCODER_LAB_SPARE_DEPENDENTS=1`` in the process that grades: it is judged again with the
earlier exercise's reference (``Exercise.reference``) in place of the student's answer, and
passes if it is then right."""


def _spare_dependents() -> bool:
    return SPARE_DEPENDENTS or os.environ.get("ENCODER_LAB_SPARE_DEPENDENTS", "") not in ("", "0")


GRAD_MISSING = (
    "after backward, {name}.grad is None, so training would never update it: no gradient "
    "reaches {name}. Use {name} itself in the computation (not .data, .detach() or a copy)."
)

STEP_MISTAKES: dict[str, str] = {
    "not-written": "not written: the stub still raises NotImplementedError",
    "calls-unwritten": "calls an earlier exercise that is not written",
    "not-defined": "the name the exercise asks for is not defined",
    "missing-part": "the module lacks a part the given __init__ creates (a layer, forward)",
    "forbidden-built-in": "calls the built-in the exercise asks to write",
    **RULE_MISTAKES,  # the source rules' families (kernel.source_rules.MISTAKES)
    "exception": "the code raised an exception",
    "time-limit": "ran past the time limit",
    "kernel-died": "the kernel died",
    "no-answer": "the kernel gave no answer the grader could read",
    "wrong-kind": "a function where a class is asked for, or a class where a function is",
    "not-a-module": "the class does not build an nn.Module",
    "parameter-names": "the module's parameters are not the given ones",
    "not-a-parameter": "a parameter is held as a plain array or tensor, not as a parameter",
    "initial-values": "a parameter does not start at its given value",
    "attribute": "an attribute the given __init__ sets is wrong",
    "parameters-do-not-load": "load_state_dict refuses the reference's parameters",
    "wrong-structure": "returns the wrong structure (a tensor for a pair, a list for an int...)",
    "not-a-tensor": "an output is not a tensor",
    "not-an-int": "an output is not a Python int",
    "tensor-subclass": "returns a Tensor subclass",
    "shape": "an output has the wrong shape",
    "in-place": "changes an input in place",
    "dtype": "an output does not keep the inputs' dtype",
    "mismatch": "wrong values that no catalogue entry names",
    "no-grad": "the output does not require grad",
    "gradient-missing": "no gradient reaches an input or a parameter",
    "gradient-mismatch": "a wrong gradient that no catalogue entry names",
    **_locate.LOCATED,
}
"""The id of each generic step's failure -> what it means. A catalogue entry or a probe names
its own mistake instead (``feedback.Mistake``) and never takes one of these ids, except
``mismatch`` for a probe that only says where the values differ."""

UNEXPLAINED = frozenset({"mismatch", "gradient-mismatch", "exception"})
"""Step ids that say only that something differs or raised: the report groups these failures
by their message instead of counting them as a named mistake."""


# --- exercises -----------------------------------------------------------------------------------


@dataclass
class Exercise:
    """A graded exercise: what the student writes and how it is tried."""

    name: str
    """The check's name (``check_<name>``) and the key of its forbidden built-ins."""
    title: str
    """How the feedback names it: ``"Exercise 1 · layer_norm"``."""
    target: str
    """The name the notebook defines."""
    test_cell: str
    """The grade_id of the nbgrader test cell that grades it."""
    kind: str
    """``"function"``, ``"class"`` (an ``nn.Module`` subclass) or ``"nnx class"`` (a Flax
    ``nnx.Module`` subclass, notebook 10)."""
    wrong_kind: str
    """Said when the target is not of that kind, e.g. "keep the given `def layer_norm(...)`"."""
    cases: Callable[[bool], Iterable[Case]]
    """The cases; ``True`` adds the hidden tests' (the autograder always runs those too)."""
    rewrite: Callable[[GradingError, Case, list[Case]], GradingError] | None = None
    """May rephrase a failure in the light of the cases that passed before it."""
    reference: Any = None
    """The reference the student's ``target`` can be replaced by when a later exercise calls it
    (``SPARE_DEPENDENTS``): a function or class importable in the student's kernel."""

    @property
    def topic(self) -> str:
        """The module that describes it (one per notebook)."""
        return getattr(self.cases, "__module__", "")


EXERCISES: dict[str, Exercise] = {}
"""Test cell grade_id -> its exercise (the checks modules register theirs)."""


def register(exercise: Exercise) -> Callable[..., None]:
    """Add ``exercise`` to ``EXERCISES`` and return its in-notebook check."""
    if exercise.test_cell in EXERCISES:
        raise ValueError(f"two exercises are graded by the test cell {exercise.test_cell!r}")
    EXERCISES[exercise.test_cell] = exercise
    note_exercise(exercise.name, exercise.target, exercise.reference)
    return make_check(exercise)


def register_given(
    number: int | str,
    given: str,
    cases: Callable[[bool], Iterable[Case]],
    name: str | None = None,
    rewrite: Callable[[GradingError, Case, list[Case]], GradingError] | None = None,
    reference: Any = None,
    forbidden: Forbidden | None = None,
    wrong_kind: str = "",
    **case_fields: Any,
) -> Callable[..., None]:
    """Register the exercise whose given code opens with ``given`` and return its check.

    ``given`` is the line the answer cell hands the student: ``"def masked_softmax(scores,
    mask=None):"`` (a function), ``"class FeedForward(nn.Module):"`` (a module class, whose
    ``__init__`` is given too) or ``"class FeedForward(nnx.Module):"`` (a Flax NNX class, whose
    ``__call__`` the student writes). The rest follows from it: the target (``FeedForward``), the
    exercise's name (``feed_forward``, or ``name``), its test cell (``test_feed_forward``), its
    title (``Exercise 1 · FeedForward``) and what to keep when the target is of the wrong kind
    (or ``wrong_kind``).

    What is the exercise's rather than one case's is said here once: ``forbidden``, what the
    answer may not call (``forbidden.forbid``), and ``case_fields``, fields of ``Case``
    (``slots=``, ``letters=``, ``inputs=``, ``module=``, ``failure_hint=``...) given to every
    case that leaves them at their default (``with_case_fields``). ``reference``, a function
    importable in the student's kernel, stands in for the answer when a later exercise calls it
    (``SPARE_DEPENDENTS``); of a function exercise, it is also every case's reference (what a
    right answer computes) unless the case or ``case_fields`` name another."""
    target = given.split()[1].split("(")[0]
    kind = "function"
    if given.startswith("class "):
        kind = "nnx class" if "(nnx.Module)" in given else "class"
    name = name or "".join(f"_{c.lower()}" if c.isupper() else c for c in target).lstrip("_")
    shown = given.rstrip(":") if kind == "nnx class" else given  # notebook 10's wording
    keep = wrong_kind or f"keep the given `{shown}`"
    if kind != "function" and not wrong_kind:
        keep += f" and its __init__, and write {'__call__' if kind == 'nnx class' else 'forward'}."
    title = f"Exercise {number} · {target}"
    if forbidden is not None:
        forbid(name, forbidden)
    if kind == "function" and reference is not None:
        case_fields.setdefault("reference", reference)
    cases = with_case_fields(cases, **case_fields)
    return register(
        Exercise(name, title, target, f"test_{name}", kind, keep, cases, rewrite, reference)
    )


def catalogue(exercise: Exercise) -> list[tuple[Case, str]]:
    """``(case, wording)`` of every catalogue entry of ``exercise``'s cases, visible and hidden
    (``Case.mistakes`` and ``Case.grad_mistakes``): each should be a ``Mistake`` with its id."""
    entries: list[tuple[Case, str]] = []
    for case in exercise.cases(True):
        entries += [(case, wording) for wording in _computed(case.mistakes) or {}]
        for wrong in case.grad_mistakes.values():
            entries += [(case, wording) for wording in wrong]
    return entries


def make_check(exercise: Exercise) -> Callable[..., None]:
    """``check_<name>(obj, thorough=False)``: run ``exercise`` on ``obj`` in this process."""

    def check(obj: Any, thorough: bool = False) -> None:
        try:
            run(exercise, local({exercise.target: obj}, _namespace_of(obj)), thorough)
        except GradingError as error:
            raise remember(error) from None
        finally:
            for hook in AFTER_CHECK:
                hook()

    check.__name__ = check.__qualname__ = f"check_{exercise.name}"
    check.__doc__ = (
        f"Grade {exercise.title}: raise GradingError naming the problem, or return None. "
        "``thorough=True`` adds the hidden tests' cases."
    )
    return check


def local(objects: Mapping[str, Any], namespace: Mapping[str, Any] | None = None) -> Ask:
    """An ``Ask`` that runs the student's objects in this process (the notebook's visible
    tests); other names (an earlier exercise's answer) are looked up in ``namespace``."""

    def lookup(name: str) -> Any:
        if name in objects:
            return objects[name]
        if namespace is not None and name in namespace:
            return namespace[name]
        raise KeyError(name)

    def ask(call: Call) -> Observation:
        return observe(lookup, call)

    return ask


def _namespace_of(obj: Any) -> Mapping[str, Any] | None:
    """The notebook's namespace, where the student's function or class was defined."""
    return namespace_of(obj)


# --- running -------------------------------------------------------------------------------------


def run(exercise: Exercise, ask: Ask, thorough: bool = False) -> None:
    """Try every case of ``exercise``; raise the first ``GradingError``, located.

    ``thorough=False`` judges the visible cases fully and the hidden cases on their generic
    properties only (``trials``)."""
    trials = trials_of(exercise, thorough)
    prefetch = getattr(ask, "prefetch", None)
    if prefetch is not None:  # a remote Ask answers all the cases' calls in one round trip
        prefetch([case.call for case, _ in trials])
    try:
        _run_trials(exercise, ask, trials)
    except GradingError as error:
        try:
            traced = _trace(exercise, ask, thorough, error)
        except _Spared:
            return
        raise traced from None


def trials_of(exercise: Exercise, thorough: bool) -> list[tuple[Case, bool]]:
    """``(case, full)`` for each case tried: every case in full when ``thorough``; else the
    visible ones in full, then the hidden ones (the cases of ``exercise.cases(True)`` that are not
    visible ones, told apart by ``what``) on the generic properties only. A hidden case whose own
    ``judge`` decides everything, or whose ``before`` looks at what the call recorded, is left to
    the thorough check."""
    if thorough:
        return [(case, True) for case in exercise.cases(True)]
    visible = list(exercise.cases(False))
    unmatched = Counter(case.what for case in visible)
    hidden = []
    for case in exercise.cases(True):
        if unmatched[case.what] > 0:
            unmatched[case.what] -= 1
        else:
            hidden.append(case)
    return [(case, True) for case in visible] + [
        (case, False) for case in hidden if case.judge is None and not case.before
    ]


def _run_trials(exercise: Exercise, ask: Ask, trials: list[tuple[Case, bool]]) -> None:
    passed: list[Case] = []
    for case, full in trials:
        obs = None
        try:
            obs = ask(case.call)
            _check_kind(exercise, obs)
            judge(case, obs, ask, full)
        except GradingError as error:
            error = error.located(exercise.title, case.what)
            if exercise.rewrite is not None:
                error = exercise.rewrite(error, case, passed).located(exercise.title, case.what)
            error.observation = obs  # type: ignore[attr-defined]  (on the copy made just above)
            raise error from None
        passed.append(case)


def dependencies(exercise: Exercise, obs: Observation | None) -> list[Exercise]:
    """The earlier exercises of the same notebook whose answers ``exercise``'s code calls (by
    their names, as the observation reports them: ``info["globals"]``)."""
    names = set((obs.info.get("globals") or ()) if obs is not None else ())
    earlier: list[Exercise] = []
    for other in EXERCISES.values():
        if other is exercise:
            break
        if other.topic == exercise.topic and other.target in names:
            earlier.append(other)
    return earlier


def _trace(exercise: Exercise, ask: Ask, thorough: bool, error: GradingError) -> GradingError:
    """``error``, or the message naming the earlier exercise where the mistake lives."""
    if error.mistake == "calls-unwritten":  # the mistake: that exercise is not written
        stub = _stub_exercise(exercise, getattr(error, "observation", None))
        if stub is None:
            return error
        return error.replaced(mistake="not-written", root=stub.test_cell, root_title=stub.title)
    if isinstance(error, ForbiddenCallError):
        return _forbidden_root(exercise, ask, thorough, error)
    if isinstance(error, NotWrittenYet):
        return error
    for dep in dependencies(exercise, getattr(error, "observation", None)):
        try:
            run(dep, ask, thorough)
        except NotWrittenYet:
            continue  # the stub already says which function is unfinished
        except GradingError as cause:
            seen = getattr(cause, "observation", None)
            if seen is not None and seen.failure is not None and seen.failure.kind != "error":
                continue  # not defined here, or no answer: nothing to blame it for
            if _spare_dependents() and dep.reference is not None:
                return _spared(exercise, ask, thorough, dep, cause)
            number = dep.title.split(" · ")[0].lower().replace("(", "").replace(")", "")
            problem = cause.problem.rstrip()
            problem += "" if problem.endswith(".") else "."
            return GradingError(
                DEPENDS.format(
                    dep=dep.target, number=number, target=exercise.target, problem=problem
                ),
                tried=error.tried,
                exercise=error.exercise,
                where=cause.where,
                hint=cause.hint,
                mistake=cause.mistake,
                root=cause.root or dep.test_cell,
                root_title=cause.root_title or dep.title,
                parts=cause.parts,  # its wording holds the cause's whole, values included
            )
    return error


def _forbidden_root(
    exercise: Exercise, ask: Ask, thorough: bool, error: ForbiddenCallError
) -> ForbiddenCallError:
    """``error``, with the earlier exercise it calls as its root when that one calls the
    forbidden built-in too (the message stays: it names the built-in, which is enough)."""
    for dep in dependencies(exercise, getattr(error, "observation", None)):
        try:
            run(dep, ask, thorough)
        except ForbiddenCallError as cause:
            return error.replaced(
                root=cause.root or dep.test_cell, root_title=cause.root_title or dep.title
            )
        except GradingError:
            continue
    return error


def _stub_exercise(exercise: Exercise, obs: Observation | None) -> Exercise | None:
    """The earlier exercise of the same notebook whose unwritten stub ``exercise``'s code
    called (``Failure.function``: ``"LayerNorm.forward"`` names the class ``LayerNorm``)."""
    failure = obs.failure if obs is not None else None
    name = (failure.function or "").split(".")[0] if failure is not None else ""
    for other in EXERCISES.values():
        if other is exercise:
            break
        if other.topic == exercise.topic and other.target == name:
            return other
    return None


def _spared(
    exercise: Exercise, ask: Ask, thorough: bool, dep: Exercise, cause: GradingError
) -> GradingError:
    """``SPARE_DEPENDENTS``: judge ``exercise`` again with ``dep``'s reference in place of the
    student's answer; passing means the mistake is only ``dep``'s (and is charged there)."""
    substitute = f"{dep.reference.__module__}:{dep.reference.__qualname__}"

    def with_reference(call: Call) -> Observation:
        return ask(replace(call, substitute={**call.substitute, dep.target: substitute}))

    try:
        _run_trials(exercise, with_reference, trials_of(exercise, thorough))
    except GradingError as error:
        error.observation = None  # type: ignore[attr-defined]
        return error
    raise _Spared(f"{exercise.title} passes once {dep.target} is right: {cause.problem}")


class _Spared(Exception):  # noqa: N818 (control flow: the check passes)
    """The dependent exercise is right; only the earlier one it calls is wrong."""


def _check_kind(exercise: Exercise, obs: Observation) -> None:
    kind = obs.info.get("target")
    wanted = {"class": "module class", "nnx class": "nnx module class"}.get(
        exercise.kind, exercise.kind
    )
    if kind is None or kind == wanted:
        return
    noun = {
        "function": "a function",
        "class": "a class derived from nn.Module",
        "nnx class": "a class derived from nnx.Module",
    }[exercise.kind]
    raise GradingError(
        f"{exercise.target} should be {noun}, got {kind}: {exercise.wrong_kind}",
        mistake="wrong-kind",
    )


@dataclass
class Trial:
    """One case being judged: what was asked, what was observed, and the slots of the value."""

    case: Case
    obs: Observation
    ask: Ask
    slots: list[tuple[str, Any, Any, str]] = field(default_factory=list)
    """``(name, got, expected, path)`` per output slot."""
    full: bool = True
    """False: a hidden case in the visible check, judged on the generic properties only (no
    values, no ``requires``, gradients only for arriving)."""


PROPERTY_STEPS = ("module", "failure", "structure", "plain tensor", "shape", "in place", "dtype")
"""The steps a hidden case goes through in the visible check (and, of ``"gradients"``, only
whether they arrive)."""


def judge(case: Case, obs: Observation, ask: Ask, full: bool = True) -> None:
    """Run the generic steps (``STEPS``) in order; the first that objects raises. ``full=False``:
    the generic properties only (``PROPERTY_STEPS``)."""
    trial = Trial(case, obs, ask, full=full)
    try:
        for name, step in STEPS.items():
            if full or name in PROPERTY_STEPS or name == "gradients":
                step(trial)
    except _Done:
        return


def run_steps(case: Case, obs: Observation, ask: Ask, steps: Sequence[str]) -> None:
    """Run the generic steps named in ``steps`` (keys of ``STEPS``, in the order given) on
    ``obs``: for a case's own ``judge`` that keeps some of them. The value's slots come from its
    structure against ``case.expected`` (the structure step's own comparison, without its
    ``precheck``, ``before`` or ``judge``)."""
    trial = Trial(case, obs, ask, slots=_structure(case, _computed(case.expected), obs.value))
    for name in steps:
        STEPS[name](trial)


def _step_module(t: Trial) -> None:
    facts = t.obs.info.get("module")
    if facts is not None and (t.obs.failure is None or t.obs.failure.phase != "construct"):
        _check_module(t.case, facts)


def _step_failure(t: Trial) -> None:
    if t.obs.failure is not None:
        raise failure_error(t.case, t.obs.failure)


def _step_structure(t: Trial) -> None:
    """The value's structure; a case with its own ``judge`` takes over from here."""
    if t.case.precheck is not None:
        problem = t.case.precheck(t.obs)
        if problem:
            raise GradingError(problem)
    for item in t.case.before:
        if isinstance(item, Intermediate):
            judge(item.case(t.obs), item.observed(t.obs), t.ask, t.full)
        else:
            problem = item(t.obs, t.ask)
            if problem:
                raise GradingError(problem)
    if t.case.judge is not None:
        t.case.judge(t.obs, t.ask)
        raise _Done
    expected = _computed(t.case.expected)
    got = t.obs.value
    if t.case.any_float and isinstance(got, torch.Tensor) and got.is_floating_point():
        expected = expected.to(got.dtype)
    t.slots = _structure(t.case, expected, got)


def _step_plain(t: Trial) -> None:
    facts = t.obs.info.get("tensors", {})
    for name, _, want, path in t.slots:
        if isinstance(want, torch.Tensor) and facts.get(path, {}).get("class"):
            raise GradingError(
                f"{name} should be a torch.Tensor, got {facts[path]['class']} (a Tensor subclass: "
                "return a plain torch.Tensor).",
                mistake="tensor-subclass",
            )


def _step_shape(t: Trial) -> None:
    letters = list(t.case.letters) + [""] * len(t.slots)
    hints = list(t.case.shape_hints) + [{}] * len(t.slots)
    for i, (name, got, want, _) in enumerate(t.slots):
        if isinstance(want, torch.Tensor):
            _check_shape(name, got, want, letters[i], hints[i])


def _step_in_place(t: Trial) -> None:
    for name, original in named_tensors(t.case.call.args, t.case.call.kwargs).items():
        after = t.obs.after.get(name)
        if after is not None and not _same(after, original):
            label = t.case.inputs.get(name, name)
            problem = t.case.messages.get("in_place", IN_PLACE).format(name=label)
            raise GradingError(problem, mistake=getattr(problem, "id", None) or "in-place")


def _step_dtype(t: Trial) -> None:
    for name, got, want, _ in t.slots:
        if isinstance(want, torch.Tensor) and got.dtype != want.dtype:
            template = t.case.messages.get("dtype", WRONG_DTYPE)
            original = _first_input_dtype(t.case) or want.dtype
            problem = template.format(slot=name, got=got.dtype, expected=original)
            raise GradingError(problem, mistake=getattr(problem, "id", None) or "dtype")


def _step_values(t: Trial) -> None:
    _check_values(t.case, t.slots, t.obs, t.ask)


def _step_requires(t: Trial) -> None:
    for rule in t.case.requires:
        problem = rule(t.obs, t.ask)
        if problem:
            raise GradingError(problem)


def _step_grads(t: Trial) -> None:
    if t.case.call.upstream is not None and t.case.grads is not None:
        _check_grads(t.case, t.slots, t.obs, t.full)


class _Done(Exception):  # noqa: N818 (control flow, never shown)
    """A case's own ``judge`` has decided."""


STEPS: dict[str, Callable[[Trial], None]] = {
    "module": _step_module,
    "failure": _step_failure,
    "structure": _step_structure,
    "plain tensor": _step_plain,
    "shape": _step_shape,
    "in place": _step_in_place,
    "dtype": _step_dtype,
    "values": _step_values,
    "requires": _step_requires,
    "gradients": _step_grads,
}
"""The generic checks, in the order they run. Each is tested by switching it off
(tests/grading/engine/test_runner.py): some answer of tests/variants must then be misjudged."""


def failure_error(case: Case, failure: Failure) -> GradingError:
    """The message for a call that did not return."""
    target = case.call.target
    who = {
        "construct": f"{target}(...)",
        "load": f"{target}'s load_state_dict",
        "backward": f"the backward pass of {target}",
    }.get(failure.phase, target)
    if failure.kind == "stub":
        own = failure.function in (None, target) or (failure.function or "").startswith(
            target + "."
        )
        if own:
            parts = {"name": target}
            return NotWrittenYet(NOT_WRITTEN.format(**parts), mistake="not-written", parts=parts)
        parts = {"name": failure.function or target}
        return NotWrittenYet(CALLS_STUB.format(**parts), mistake="calls-unwritten", parts=parts)
    if failure.kind == "rule":  # a source rule or the threads rule (observe.source_refusal)
        return GradingError(failure.message, where=failure.where, mistake=failure.error)
    if failure.kind == "forbidden":
        parts = {"who": who, "name": failure.error}
        return ForbiddenCallError(
            CALLS_FORBIDDEN.format(**parts), mistake="forbidden-built-in", parts=parts
        )
    if failure.kind == "missing":  # the name, or (``observe.Unfit``) a part of the module
        kind = "not-defined" if failure.error == "NameError" else "missing-part"
        return GradingError(failure.message, mistake=kind)
    if failure.kind == "no answer":  # ``error``: why, as a step id (the autograder sets it)
        return GradingError(
            f"the notebook's kernel gave no answer when {target} was called: {failure.message}.",
            mistake=failure.error if failure.error in STEP_MISTAKES else "no-answer",
        )
    if failure.phase == "load" and case.module is not None:
        return GradingError(
            f"{target}'s parameters do not load: {case.module.keep_init} "
            f"(load_state_dict said: {failure.message})",
            mistake="parameters-do-not-load",
        )
    hint = case.failure_hint(failure) if case.failure_hint is not None else None
    parts = {"who": who, "raised": failure.error, "message": failure.message}
    text = "{who} raised {raised}: {message}".format(**parts).rstrip()
    if isinstance(hint, Mistake):  # a diagnosis: it leads, the exception says what happened
        text = f"{hint} ({text.rstrip('.')}.)"
    elif hint:
        text = f"{text}{'' if text.endswith('.') else '.'} {hint}"
    return GradingError(
        text,
        where=failure.where,
        hint=getattr(hint, "hint", None),
        mistake=getattr(hint, "id", None) or "exception",
        parts=parts,
    )


def _check_module(case: Case, facts: Mapping[str, Any] | None) -> None:
    spec = case.module or ModuleSpec()
    call = case.what.split(" with ")[0].split(" on ")[0]
    if not facts or not facts.get("is_module"):
        kind = facts.get("type", "?") if facts else "?"
        raise GradingError(
            spec.not_module_message.format(call=call, type=kind), mistake="not-a-module"
        )
    for sub, qualified in facts.get("submodules", {}).items():
        name = spec.forbidden_submodules.get(qualified)
        if name:
            parts = {"who": f"{case.call.target} (self.{sub})", "name": name}
            raise ForbiddenCallError(
                CALLS_FORBIDDEN.format(**parts), mistake="forbidden-built-in", parts=parts
            )
    params: Mapping[str, torch.Tensor] = facts.get("parameters", {})
    plain = facts.get("not_parameters", {})
    loose = sorted(n for n in spec.parameters or () if n in plain and n not in params)
    if loose:
        raise GradingError(
            spec.not_parameter_message.format(
                names=", ".join(f"self.{n}" for n in loose),
                kinds=" and ".join(sorted({plain[n] for n in loose})),
                call=call,
            ),
            mistake="not-a-parameter",
        )
    if spec.parameters is not None and sorted(params) != sorted(spec.parameters):
        raise GradingError(
            spec.names_message.format(got=sorted(params), expected=sorted(spec.parameters)),
            mistake="parameter-names",
        )
    for name, fill in spec.initial.items():
        p = params.get(name)
        if p is None or not bool((p == fill).all()):
            raise GradingError(
                f"{call}.{name} should start filled with {fill:g}: {spec.keep_init}.",
                mistake="initial-values",
            )
    attrs = facts.get("attrs", {})
    for name, value in spec.attrs.items():
        if attrs.get(name) != value:
            raise GradingError(
                f"{call}.{name} should be {value!r}: {spec.keep_init} (it stores the argument in "
                f"self.{name}).",
                mistake="attribute",
            )


# --- values --------------------------------------------------------------------------------------


def _computed(value: Any) -> Any:
    return value() if callable(value) else value


def _structure(case: Case, expected: Any, got: Any) -> list[tuple[str, Any, Any, str]]:
    """``[(name, got, expected, path)]`` per output, after checking that the value has the
    expected structure (a tensor, a pair...)."""
    if isinstance(expected, tuple):
        n = len(expected)
        names = list(case.slots) or [f"output {i}" for i in range(n)]
        wanted = f"the {'pair' if n == 2 else 'tuple'} ({', '.join(_short(s) for s in names)})"
        if isinstance(got, torch.Tensor):
            raise GradingError(
                f"it returned a single tensor of shape {tuple(got.shape)}: it must return "
                f"{wanted}, e.g. `return {', '.join(_short(s) for s in names)}`.",
                mistake="wrong-structure",
            )
        if not isinstance(got, tuple | list) or len(got) != n:
            raise GradingError(
                f"it returned {describe(got)}: it must return {wanted}.", mistake="wrong-structure"
            )
        items = [(names[i], got[i], expected[i], f"[{i}]") for i in range(n)]
    else:
        items = [((case.slots or ["the result"])[0], got, expected, "")]
    for name, g, e, _ in items:
        if isinstance(e, torch.Tensor) and not isinstance(g, torch.Tensor):
            raise GradingError(
                f"{name} should be a torch.Tensor, got {describe(g)}.", mistake="not-a-tensor"
            )
        if isinstance(e, int) and type(e) is not bool and type(g) is not int:
            parts = {"name": name, "got": describe(g)}
            raise GradingError(
                "{name} should be a Python int, got {got}.".format(**parts),
                mistake="not-an-int",
                parts=parts,
            )
    return items


def _short(slot: str) -> str:
    """``"the weights returned by f(...)"`` -> ``"weights"``."""
    words = slot.split()
    return words[1] if len(words) > 1 and words[0] == "the" else words[0]


def _check_shape(name: str, got: torch.Tensor, want: torch.Tensor, letters: str, hints) -> None:
    shape, expected = tuple(got.shape), tuple(want.shape)
    if shape == expected:
        return
    hint = hints.get(shape, "")
    if not hint and sorted(shape) == sorted(expected):
        hint = "The sizes are right but in the wrong order: check your transposes."
    raise GradingError(
        f"{name} has the wrong shape: expected {letters + ' = ' if letters else ''}{expected}, "
        f"got {shape}.{' ' + hint if hint else ''}",
        mistake=getattr(hint, "id", None) or "shape",
    )


def _first_input_dtype(case: Case) -> torch.dtype | None:
    for t in named_tensors(case.call.args, case.call.kwargs).values():
        if t.is_floating_point():
            return t.dtype
    return None


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b.detach()))


def _check_values(case: Case, slots, obs: Observation, ask: Ask) -> None:
    def slot_close(got: Any, want: Any) -> bool:
        if want is None:
            return True
        if isinstance(want, torch.Tensor):
            return close(got, want, *tolerance(case, want))
        return close(got, want)

    if all(slot_close(g, e) for _, g, e, _ in slots):
        return
    mistakes = _computed(case.mistakes) or {}
    got = [g for _, g, _, _ in slots]
    for description, wrong in mistakes.items():
        wrong_slots = list(wrong) if len(slots) > 1 else [wrong]
        if all(slot_close(g, w) for g, w in zip(got, wrong_slots, strict=True)):
            raise GradingError(description)
    for probe in case.probes:
        description = probe(obs, ask)
        if description:
            raise GradingError(description)
    if case.locate is not None:
        located = _locate.explain(
            case.locate,
            case.call,
            case.inputs,
            got[0],
            slots[0][2],
            ask,
            lambda a, b: close(a, b, *tolerance(case, b)),
        )
        if located is not None:
            raise GradingError(located)
    order = case.order or range(len(slots))
    for i in order:
        name, g, e, _ = slots[i]
        if not slot_close(g, e):
            raise GradingError(mismatch(name, g, e, *tolerance(case, e)), mistake="mismatch")


def _check_grads(case: Case, slots, obs: Observation, full: bool = True) -> None:
    facts = obs.info.get("tensors", {})
    tracked = [path for _, _, e, path in slots if isinstance(e, torch.Tensor)]
    if not any(facts.get(path, {}).get("requires_grad") for path in tracked):
        slot = slots[0][0] if len(slots) == 1 else "the result"
        problem = case.messages.get("no_grad", NO_GRAD).format(slot=slot)
        raise GradingError(problem, mistake=getattr(problem, "id", None) or "no-grad")
    for name, want in (_computed(case.grads) or {}).items():
        label = case.grad_names.get(name, case.inputs.get(name, name))
        got = obs.grads.get(name)
        if got is None:
            raise GradingError(GRAD_MISSING.format(name=label), mistake="gradient-missing")
        if not full:
            continue
        atol, rtol = tolerance(case, want)
        if close(got, want, atol, rtol):
            continue
        for description, wrong in case.grad_mistakes.get(name, {}).items():
            if close(got, wrong, atol, rtol):
                raise GradingError(
                    f"the gradient of {label} is wrong: {description}",
                    mistake=getattr(description, "id", None),
                )
        raise GradingError(
            mismatch(f"the gradient of {label}", got, want, atol, rtol), mistake="gradient-mismatch"
        )
