"""The student's side of a check: run their code on given inputs and record what happened.

Nothing here compares anything. A ``Call`` says what to run (a notebook function, or a notebook
class to construct and call), on which inputs and in which mode; ``observe`` runs it and returns
an ``Observation``: the value returned (tensors as plain detached copies), the inputs as they are
afterwards (in-place changes show), gradients when asked for, facts about a constructed module,
or the ``Failure`` that stopped it (an exception from the student's code and their line, an
unfinished stub, a forbidden built-in). The runner (``runner.py``) judges observations.

While the student's code runs, inside ``student_mode``:
- the built-ins the exercise forbids are trapped: a call to one is recorded and stops the call
  (``F.layer_norm`` inside a ``layer_norm`` answer...);
- dropout is deterministic: ``F.dropout`` (hence ``nn.Dropout``) keeps or drops each element
  according to its value, not a random stream, so a check can compare where dropout sits with
  the reference's, whatever order the answer draws its masks in (the dropout on attention
  weights inside ``F.scaled_dot_product_attention`` too);
- warnings are silenced and torch runs on one thread (the tensors are tiny).

Two ways to observe, one code path: in the notebook the visible tests call ``observe`` directly;
at autograde the grader (``encoder_lib.autograde.kernel_ask``) sends the same ``Call`` into the
student's kernel through ``wire.serve`` and reads the ``Observation`` back (JSON and raw
tensors, never pickle). What the kernel sends back is data the grader judges: it cannot pass a
check unless the tensors are right.
"""

from __future__ import annotations

import _thread
import contextlib
import dis
import importlib
import inspect
import linecache
import math
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from . import source_rules
from .forbidden import Expanded, expanded, rules

__all__ = [
    "Call",
    "Part",
    "Failure",
    "Observation",
    "Unfit",
    "source_refusal",
    "PARTS",
    "PREPARE",
    "SCENARIOS",
    "AFTER_CHECK",
    "scenario",
    "part",
    "preparation",
    "after_each_check",
    "lookup_target",
    "failure_of",
    "run_call",
    "TRACE",
    "observe",
    "trace_parts",
    "record_call",
    "student_mode",
    "deterministic_dropout",
]


# --- what to run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """A callable the check hands to the student's code (a sub-layer, a norm...), built on the
    student's side from ``PARTS[kind]`` and counted: how often it was called is observed."""

    kind: str
    tensors: Mapping[str, torch.Tensor] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """What to run. With ``init`` the target is a class: ``target(*init[0], **init[1])`` is
    built, converted to ``dtype``, given ``state`` (``load_state_dict``), put in train or eval
    mode and then called; without, the target itself is called.

    Args:
        target: the name the notebook defines, e.g. ``"layer_norm"`` or ``"LayerNorm"``.
        exercise: whose forbidden built-ins are trapped (a key of ``forbidden.FORBIDDEN``).
        args, kwargs: tensors, numbers, strings, None, ``Part``s, or tuples of these.
        grad: names of tensor arguments (``"args[0]"``, ``"mask"``) that require gradients,
            and ``"parameters"`` for every parameter of a constructed module.
        upstream: when given, ``sum(output * upstream)`` is backpropagated (one tensor per tensor
            of the output, in order) and the gradients of ``grad`` are observed.
        inspect: report the constructed module's parameters (names, shapes, initial values) and
            the attributes named in ``attrs``.
        prepare: a key of ``PREPARE``: what gets a constructed module ready, after ``state`` is
            loaded and before it is put in train or eval mode.
        scenario: a key of ``SCENARIOS``: how to run it (``"call"``, the default, is the above).
        options: what a topic-specific scenario needs besides the above; ``options[TRACE]``,
            names of the constructed module's sub-modules, records every call of those
            (``trace_parts``) into ``Observation.info[TRACE]``.
        substitute: notebook name -> ``"module:qualname"`` of a reference bound to that name
            while the call runs (an earlier exercise's answer replaced by its reference).
    """

    target: str
    exercise: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    init: tuple[tuple[Any, ...], Mapping[str, Any]] | None = None
    dtype: torch.dtype | None = None
    state: Mapping[str, torch.Tensor] | None = None
    train: bool = False
    grad: tuple[str, ...] = ()
    upstream: tuple[torch.Tensor, ...] | None = None
    inspect: bool = False
    attrs: tuple[str, ...] = ()
    prepare: str = ""
    scenario: str = "call"
    options: Mapping[str, Any] = field(default_factory=dict)
    substitute: Mapping[str, str] = field(default_factory=dict)
    seed: int = 0
    """torch's global generator is seeded with it for the call (module initialisation, any
    randomness of the answer) and restored afterwards: the notebook's own stream is untouched."""


@dataclass
class Failure:
    """Why a call did not return: ``kind`` is ``"stub"`` (the ``NotImplementedError`` of an
    unfinished exercise), ``"forbidden"`` (``error`` names the built-in), ``"error"`` (an
    exception from the student's code), ``"missing"`` (the name is not defined) or
    ``"no answer"`` (the kernel timed out, died or answered nonsense: autograde only)."""

    kind: str
    error: str = ""
    message: str = ""
    phase: str = "call"
    """``"construct"``, ``"load"`` (load_state_dict), ``"call"`` or ``"backward"``."""
    where: str | None = None
    """The student's line that raised: ``Cell In[12], line 3, in f: x = y.var()``."""
    function: str | None = None
    """The qualified name of the innermost notebook function in the traceback (for a stub: which
    one, e.g. ``"LayerNorm.forward"``)."""


@dataclass
class Observation:
    value: Any = None
    """What the call returned: tensors (plain, detached, on the CPU), numbers, strings, None,
    tuples and lists of these; any other object as ``Opaque``."""
    failure: Failure | None = None
    after: dict[str, torch.Tensor] = field(default_factory=dict)
    """Every tensor argument as it is after the call, by name (``"args[0]"``, ``"mask"``)."""
    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    """Gradients by argument name or ``"parameters.<name>"`` (None: no gradient reached it)."""
    info: dict[str, Any] = field(default_factory=dict)
    """Plain facts: ``"tensors"`` (per returned tensor path: its class when not exactly
    torch.Tensor, whether it requires grad), ``"module"``, ``"parts"``, scenario extras."""


@dataclass(frozen=True)
class Opaque:
    """A returned object that is neither a tensor nor a plain value: only its type is kept."""

    type: str


# --- the parts handed to student code -----------------------------------


PARTS: dict[str, Callable[[Part], Callable[..., Any]]] = {}
"""Part kind -> a builder of the callable (checks modules register theirs with ``part``)."""

PREPARE: dict[str, Callable[[nn.Module, Call, Observation], bool]] = {}
"""How to get a constructed module ready besides ``load_state_dict`` (``Call.prepare`` names one):
copy weights into a layout the grader does not know, swap sub-modules for recording ones. It gets
the module, the call and the observation (for the facts it finds); it returns False to stop
before the call, and raises ``Unfit`` when the module cannot take what the check gives it."""


class Unfit(Exception):  # noqa: N818 (an outcome, reported as a failure of kind "missing")
    """Raised by a ``PREPARE`` step: the student's module cannot take what the check gives it
    (e.g. weights, for lack of the given layers); the message says what to keep."""


SCENARIOS: dict[str, Callable[[Callable[[str], Any], Call], Observation]] = {}
"""How to run a ``Call``: ``"call"`` and topic-specific ones (e.g. the capstone's ``train_step``,
handed a model and an optimiser). A scenario gets a lookup of notebook names and the call;
checks modules register theirs with ``scenario``."""

AFTER_CHECK: list[Callable[[], None]] = []
"""Run when a check made in this process (a test cell in the student's kernel) has ended,
passed or not: a scenario's moment to let go of what its calls left behind (notebook 10's
compiled JAX programs); registered with ``after_each_check``."""


def _register(table: dict[str, Any], what: str, name: str, value: Any) -> Any:
    if name in table:
        raise ValueError(f"the {what} {name!r} is registered twice: each name is registered once")
    table[name] = value
    return value


def scenario(name: str) -> Callable[[Callable[..., Observation]], Callable[..., Observation]]:
    """Register the decorated function as the scenario ``name`` (``SCENARIOS``: how a ``Call``
    whose ``scenario`` is ``name`` runs); a name registered twice raises ``ValueError``."""
    return partial(_register, SCENARIOS, "scenario", name)


def part(kind: str) -> Callable[[Callable[[Part], Any]], Callable[[Part], Any]]:
    """Register the decorated function as the builder of the ``Part``s of ``kind`` (``PARTS``);
    a kind registered twice raises ``ValueError``."""
    return partial(_register, PARTS, "part kind", kind)


def preparation(name: str) -> Callable[[Callable[..., bool]], Callable[..., bool]]:
    """Register the decorated function as the preparation ``name`` (``PREPARE``, named by
    ``Call.prepare``); a name registered twice raises ``ValueError``."""
    return partial(_register, PREPARE, "preparation", name)


def after_each_check(hook: Callable[[], None]) -> Callable[[], None]:
    """Run ``hook`` when each check made in this process has ended (``AFTER_CHECK``); a hook
    registered twice raises ``ValueError``. Returns ``hook`` (usable as a decorator)."""
    if hook in AFTER_CHECK:
        raise ValueError(f"the hook {hook.__qualname__} is registered twice after each check")
    AFTER_CHECK.append(hook)
    return hook


class _Counted:
    def __init__(self, fn: Callable[..., Any], kind: str = "", trace: list[dict] | None = None):
        self.fn, self.calls, self.kind, self.trace = fn, 0, kind, trace

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        out = self.fn(*args, **kwargs)
        if self.trace is not None:  # the call's tensors, as trace_parts records a sub-module's
            record_call(self.trace, self.kind, [(f"args[{i}]", a) for i, a in enumerate(args)], out)
        return out


# --- the mode student code runs in ---------------------------------------------------------------

_DROPOUT = (F.dropout, torch.dropout, torch.dropout_)
_GOLDEN = 0.6180339887498949


def deterministic_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Inverted dropout whose keep/drop decision is a function of each element's value.

    An element is kept when frac(|x| * 7919.0 + 0.5 * golden ratio) >= p and then scaled by
    1 / (1 - p), as ``F.dropout`` scales. Two computations that apply dropout to the same values,
    in any order or in slices, make the same decisions, so the student's module and the
    reference can be compared in training mode. Rounding differences flip a decision only for
    values within about 1e-12 of a threshold."""
    if not training or p == 0.0:
        return x
    if p >= 1.0:
        return x * 0.0
    with torch.no_grad():
        u = torch.frac(x.detach().abs().to(torch.float64) * 7919.0 + 0.5 * _GOLDEN)
        keep = (u >= p).to(x.dtype)
    return x * keep / (1.0 - p)


class _StudentMode(TorchFunctionMode):
    """Trap forbidden torch functions (in every form: ``Expanded``); make dropout
    deterministic. Only while ``watch.active``: a mode left on a thread the answer started
    (``student_mode``) lets everything through once the call is over."""

    def __init__(self, forbidden: Expanded, watch: _Watch):
        super().__init__()
        self.forbidden = forbidden
        self.watch = watch
        self.violation: str | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.watch.active:
            return func(*args, **kwargs)
        name = self.forbidden.name_of(func)
        if name is not None:
            self.violation = self.violation or name
            self.watch.seen.append(name)
            raise _ForbiddenCallError(name)
        if func in _DROPOUT:
            x, p, training = _dropout_arguments(func, args, kwargs)
            return deterministic_dropout(x, p, training)
        if func is F.scaled_dot_product_attention:
            return _attention(func, args, kwargs)
        return func(*args, **kwargs)


@dataclass
class _Watch:
    """What ``student_mode`` watches with, shared by the threads the answer starts."""

    forbidden: Expanded
    codes: dict[Any, str]
    seen: list[str]
    active: bool = True
    threads: set[int] = field(default_factory=set)

    def profiler(self, frame, event, arg):
        if self.active and event == "call" and frame.f_code in self.codes:
            self.seen.append(self.codes[frame.f_code])

    def new_thread(self, frame, event, arg):
        """``threading.setprofile``'s hook: the first thing a thread started while the answer
        runs does is install the same watch (the profile hook and the trap) on itself."""
        self.enter_thread()
        return self.profiler(frame, event, arg)

    def enter_thread(self) -> None:
        """Install the watch on the calling thread, once."""
        ident = threading.get_ident()
        if ident not in self.threads:
            self.threads.add(ident)
            sys.setprofile(self.profiler if self.codes else None)
            _StudentMode(self.forbidden, self).__enter__()  # left on: inert once inactive

    def start_new_thread(self, start: Callable, function: Callable, args: tuple, kwargs=None):
        """``_thread.start_new_thread`` while the answer runs: ``threading``'s hook never
        reaches a thread started there, so the new thread installs the watch itself first."""

        def watched(*a, **k):
            self.enter_thread()
            return function(*a, **k)

        return start(watched, args, {} if kwargs is None else kwargs)


_RAW_STARTS = ("start_new_thread", "start_new")
"""``_thread``'s functions that start a thread without ``threading`` (``start_new``: an alias)."""

_SETUP_THREADS: set[int] = {t.ident for t in threading.enumerate() if t.ident is not None}
"""The threads alive when the grader was imported (the setup cell): the kernel's own."""

_QUIET_THREADS = ("tqdm", "IPython", "ipykernel", "jupyter_client", "zmq", "comm", "ipywidgets")
"""Modules whose threads run no student code (tqdm's monitor, IPython's history saver...)."""


def _notebook_threads() -> list[str]:
    """Threads started after the setup cell by the notebook's code, still alive: the watch,
    installed on the thread that calls the answer (and on the threads it starts), cannot see
    what they run."""
    current = threading.current_thread()
    return [
        t.name
        for t in threading.enumerate()
        if t is not current
        and t.ident not in _SETUP_THREADS
        and not isinstance(t, threading._DummyThread | threading._MainThread)
        and not type(t).__module__.startswith(_QUIET_THREADS)
        and not getattr(getattr(t, "_target", None), "__module__", "").startswith(_QUIET_THREADS)
    ]


def _attention(func: Any, args: tuple, kwargs: dict) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` whose dropout on the attention weights is
    ``deterministic_dropout`` (the fused kernel draws its own random mask, which nothing else
    could reproduce); without dropout, the fused kernel itself."""
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    values = dict(zip(names, args, strict=False)) | kwargs
    p = float(values.get("dropout_p", 0.0))
    if p == 0.0 or values.get("enable_gqa"):
        return func(*args, **kwargs)
    q, k, v = values["query"], values["key"], values["value"]
    scale = values.get("scale")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (..., L_q, L_k)
    mask = values.get("attn_mask")
    if values.get("is_causal"):
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    weights = torch.softmax(scores, dim=-1)
    if mask is not None and mask.dtype == torch.bool:  # a fully masked row: zeros, as fused
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return deterministic_dropout(weights, p) @ v


def _dropout_arguments(func: Any, args: tuple, kwargs: dict) -> tuple[torch.Tensor, float, bool]:
    names = ("input", "p", "training") if func is F.dropout else ("input", "p", "train")
    defaults = {"p": 0.5, "training": True, "train": True}
    values = dict(zip(names, args, strict=False)) | kwargs
    training = values.get("training", values.get("train", defaults["training"]))
    return values["input"], float(values.get("p", defaults["p"])), bool(training)


class _ForbiddenCallError(Exception):
    def __init__(self, name: str):
        super().__init__(f"called {name}")
        self.name = name


@contextlib.contextmanager
def student_mode(exercise: str, seed: int = 0) -> Iterator[list[str]]:
    """Run student code with ``exercise``'s built-ins trapped (``rules``, in every form),
    dropout deterministic and torch's generator seeded with ``seed`` (restored afterwards);
    yields the list of forbidden built-ins seen (empty when all is well).

    The trap is a torch function mode and a profile hook, which are per thread: both are also
    installed on every thread started while the answer runs (``threading.setprofile``, and
    ``_thread.start_new_thread`` wrapped for the call), and a thread the notebook started
    earlier, which neither could see, counts as a violation."""
    forbidden = rules(exercise)
    codes: dict[Any, str] = {}
    for obj, name in forbidden.resolved().items():
        for fn in _functions_of(obj):
            codes[fn.__code__] = name
    seen: list[str] = []
    others = _notebook_threads()
    if others:
        seen.append(OTHER_THREADS.format(names=", ".join(sorted(others))))
    watch = _Watch(expanded(forbidden, modules=False), codes, seen)
    mode = _StudentMode(watch.forbidden, watch)
    threads = torch.get_num_threads()
    previous = sys.getprofile()
    previous_threads = getattr(threading, "_profile_hook", None)
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]), mode:
            torch.manual_seed(seed)
            warnings.simplefilter("ignore")
            threading.setprofile(watch.new_thread)
            raw = {name: getattr(_thread, name) for name in _RAW_STARTS if hasattr(_thread, name)}
            for name, start in raw.items():
                setattr(_thread, name, partial(watch.start_new_thread, start))
            if codes:
                sys.setprofile(watch.profiler)
            try:
                yield seen
            finally:
                watch.active = False
                threading.setprofile(previous_threads)
                for name, start in raw.items():
                    setattr(_thread, name, start)
                if codes:
                    _restore_profile(previous)
    finally:
        watch.active = False
        torch.set_num_threads(threads)
        if mode.violation and mode.violation not in seen:
            seen.insert(0, mode.violation)


OTHER_THREADS = (
    "code in another thread ({names}), started by the notebook's code, which the grader cannot "
    "watch"
)


def _functions_of(obj: Any) -> list[Any]:
    if isinstance(obj, type):
        return [
            getattr(v, "__func__", v)
            for v in vars(obj).values()
            if hasattr(getattr(v, "__func__", v), "__code__")
        ]
    return [obj] if hasattr(obj, "__code__") else []


def _restore_profile(previous: Any) -> None:
    try:
        sys.setprofile(previous)
    except TypeError:  # a C-level profiler such as cProfile's cannot be re-installed from Python
        sys.setprofile(None)


# --- the student's line --------------------------------------------------------------------------


def _is_notebook_code(filename: str) -> bool:
    """Whether code comes from a notebook cell: IPython registers each cell's file name (its
    temporary file), and code compiled from text has a name in angle brackets (``<cell x>``).
    Library code, wherever it is installed, is neither."""
    if filename.startswith("<"):
        return True
    cells = getattr(getattr(_ipython(), "compile", None), "_filename_map", None)
    return bool(cells) and filename in cells


def _student_frame(error: BaseException) -> tuple[str | None, str | None]:
    """(where, function) of the innermost frame of notebook code in ``error``'s traceback."""
    found = None
    tb = error.__traceback__
    while tb is not None:
        if _is_notebook_code(tb.tb_frame.f_code.co_filename):
            found = tb
        tb = tb.tb_next
    if found is None:
        return None, None
    code = found.tb_frame.f_code
    line = linecache.getline(code.co_filename, found.tb_lineno).strip()
    where = f"{_cell_name(code.co_filename)}, line {found.tb_lineno}, in {code.co_name}"
    return (f"{where}: {line}" if line else where), code.co_qualname


def _cell_name(filename: str) -> str:
    """``Cell In[12]`` for a notebook cell, as IPython names it; the file name otherwise."""
    shell = _ipython()
    count = getattr(getattr(shell, "compile", None), "_filename_map", {}).get(filename)
    if count is not None:
        return f"Cell In[{count}]"
    return filename if filename.startswith("<") else os.path.basename(filename)


def _ipython() -> Any:
    module = sys.modules.get("IPython")
    get = getattr(module, "get_ipython", None)
    return get() if get is not None else None


def failure_of(error: BaseException, phase: str, seen: list[str]) -> Failure:
    """The ``Failure`` for ``error``, raised by the student's code in ``phase`` while
    ``student_mode`` saw ``seen`` (a forbidden built-in seen first is the reason): what a
    scenario records when the call it makes raises."""
    where, function = _student_frame(error)
    if seen or isinstance(error, _ForbiddenCallError):
        name = seen[0] if seen else error.name  # type: ignore[attr-defined]
        return seen_failure(name, phase, where, function)
    # the given stub is `raise NotImplementedError()`: one raised with a message is the
    # student's own exception, reported as any other
    stub = isinstance(error, NotImplementedError) and not str(error)
    kind = "stub" if stub else "error"
    return Failure(kind, type(error).__name__, str(error), phase, where, function)


def seen_failure(
    name: str, phase: str, where: str | None = None, function: str | None = None
) -> Failure:
    """The failure for the first thing the watch saw: a forbidden built-in, or code in a
    thread it cannot watch (kind ``"rule"``, id ``authorship-thread``)."""
    if name.startswith(OTHER_THREADS.partition("(")[0]):
        message = (
            f"while the answer ran there was {name}, so this exercise earns no points. Answers "
            "run in the thread that calls them: take the threads out of the notebook."
        )
        return Failure("rule", "authorship-thread", message, phase, where, function)
    return Failure("forbidden", name, "", phase, where, function)


# --- the source rules, in the kernel -------------------------------------------------------------

_REFUSALS: dict[tuple[str, str, str], Failure | None] = {}
"""(cell file, exercise, source) -> the refusal: each source is read once per exercise."""


def source_refusal(target: Any, exercise: str) -> Failure | None:
    """The source rules (``source_rules``) on the notebook cells that define ``target``, as the
    judge applies them to the submitted notebook at autograde: the visible check refuses what
    autograde would, naming the construct and its line. None: no rule broken, or no source to
    read (code not from a notebook cell)."""
    files = []
    for fn in _functions_of(target):
        filename = fn.__code__.co_filename
        if filename not in files and _is_notebook_code(filename):
            files.append(filename)
    for filename in files:
        source = "".join(linecache.getlines(filename))
        key = (filename, exercise, source)
        if key not in _REFUSALS:
            tree = source_rules.parse(source)
            names = {**_global_aliases(target), **source_rules.aliases([tree])}
            found = (
                source_rules.cell_breaches(
                    _cell_name(filename), source, names, rules(exercise), modules=False
                )
                if source
                else []
            )
            _REFUSALS[key] = _refusal_failure(found[0]) if found else None
        if _REFUSALS[key] is not None:
            return _REFUSALS[key]
    return None


def _refusal_failure(breach: Any) -> Failure:
    where = f"{breach.cell}, line {breach.line}: {breach.construct}"
    if breach.own:
        return Failure("forbidden", breach.rule, "", "call", where)
    return Failure("rule", breach.mistake, source_rules.said(breach), "call", where)


def _global_aliases(target: Any) -> dict[str, str]:
    """What the names of the notebook's namespace are, as dotted names: modules by their name,
    library functions and classes by module and qualified name."""
    namespace = namespace_of(target) or {}
    names: dict[str, str] = {}
    for key, value in list(namespace.items()):
        if key.startswith("__") or not isinstance(key, str):
            continue
        if inspect.ismodule(value):
            names[key] = value.__name__
            continue
        module = getattr(value, "__module__", None)
        qualname = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
        if (
            isinstance(module, str)
            and isinstance(qualname, str)
            and module in sys.modules
            and module != "__main__"
            and (callable(value))
        ):
            names[key] = f"{module}.{qualname}"
    return names


# --- observing a call ----------------------------------------------------------------------------


def observe(lookup: Callable[[str], Any], call: Call) -> Observation:
    """Run ``call`` with ``lookup(name)`` giving the notebook's objects; never raises for
    anything the student's code does."""
    scenario = SCENARIOS[call.scenario]
    try:
        target = lookup(call.target)
    except Exception:  # not defined: the scenario says so
        target = None
    refused = source_refusal(target, call.exercise) if target is not None else None
    if refused is not None:
        return Observation(failure=refused)
    try:
        return scenario(lookup, call)
    except _MissingError as e:
        return Observation(failure=Failure("missing", "NameError", str(e)))


class _MissingError(Exception):
    pass


def lookup_target(lookup: Callable[[str], Any], name: str) -> Any:
    """The notebook's object ``name``; if it is not defined, the scenario stops and ``observe``
    reports a failure of kind ``"missing"`` that says which cell to run."""
    try:
        return lookup(name)
    except (KeyError, NameError):
        raise _MissingError(
            f"{name} is not defined: run the cell that defines it (and the cells above it)."
        ) from None


def _materialise(value: Any, counted: list[_Counted], trace: list[dict] | None = None) -> Any:
    """Arguments as the student's code receives them: copies of the tensors (one copy per
    distinct tensor, so self-attention still gets one tensor three times) and built parts."""
    copies: dict[int, torch.Tensor] = {}

    def walk(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            if id(v) not in copies:
                copies[id(v)] = v.detach().clone()
            return copies[id(v)]
        if isinstance(v, Part):
            part = _Counted(PARTS[v.kind](v), v.kind, trace)
            counted.append(part)
            return part
        if isinstance(v, tuple):
            return tuple(walk(x) for x in v)
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(value)


def arguments(
    call: Call, counted: list[_Counted] | None = None, trace: list[dict] | None = None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``call``'s arguments as the code it calls receives them (``_materialise``): the student's
    here, and the reference's in ``vocabulary.reference_value`` and ``reference_grads``."""
    counted = [] if counted is None else counted
    args = _materialise(call.args, counted, trace)
    return args, {k: _materialise(v, counted, trace) for k, v in call.kwargs.items()}


def named_tensors(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The tensor arguments by name: ``"args[0]"``... for positional ones, the keyword for the
    others (the first name wins when one tensor is passed twice)."""
    named: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, value in [*((f"args[{i}]", a) for i, a in enumerate(args)), *kwargs.items()]:
        if isinstance(value, torch.Tensor) and id(value) not in seen:
            named[name] = value
            seen.add(id(value))
    return named


def kind_of(obj: Any) -> str:
    """``"function"``, ``"module class"`` (an ``nn.Module`` subclass), ``"class X"`` or the type
    of anything else."""
    if isinstance(obj, type):
        return "module class" if issubclass(obj, nn.Module) else f"class {obj.__qualname__}"
    if callable(obj):
        return "function"
    return f"a {type(obj).__qualname__}"


def run_call(lookup: Callable[[str], Any], call: Call) -> Observation:
    """The scenario ``"call"``: look the target up, construct it if ``call.init`` says so, call
    it on the arguments, backpropagate if asked; what a scenario of its own runs once or more."""
    target = lookup_target(lookup, call.target)
    obs = Observation(info={"target": kind_of(target), "globals": global_names(target)})
    wanted = callable(target) if call.init is None else isinstance(target, type)
    if not wanted:
        return obs
    with _substituted(target, call.substitute):
        return _run_target(target, call, obs)


def global_names(obj: Any) -> list[str]:
    """The global names a function's code (or a class's methods') loads: which other notebook
    functions an answer calls."""
    names: set[str] = set()
    try:
        stack = [fn.__code__ for fn in _functions_of(obj)]
        while stack:
            code = stack.pop()
            for ins in dis.get_instructions(code):
                if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
                    names.add(ins.argval)
            stack += [c for c in code.co_consts if hasattr(c, "co_code")]
    except Exception:  # an object whose code cannot be read: it calls nothing we can name
        return []
    return sorted(names)


def namespace_of(obj: Any) -> dict[str, Any] | None:
    """The namespace a notebook function or class was defined in (its methods' globals)."""
    for fn in _functions_of(obj):
        found = getattr(fn, "__globals__", None)
        if isinstance(found, dict):
            return found
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    return vars(module) if isinstance(obj, type) and module is not None else None


@contextlib.contextmanager
def _substituted(target: Any, substitute: Mapping[str, str]) -> Iterator[None]:
    """Bind each name of ``substitute`` to the reference it names, in the namespace where
    ``target`` was defined, for the duration of the call."""
    namespace = namespace_of(target)
    if not substitute or not isinstance(namespace, dict):
        yield
        return
    saved = {name: namespace.get(name, _ABSENT) for name in substitute}
    for name, where in substitute.items():
        module, _, qualname = where.partition(":")
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        namespace[name] = obj
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is _ABSENT:
                namespace.pop(name, None)
            else:
                namespace[name] = value


def _run_target(target: Any, call: Call, obs: Observation) -> Observation:
    counted: list[_Counted] = []
    traced = call.options.get(TRACE)
    calls: list[dict] | None = [] if traced else None
    args, kwargs = arguments(call, counted, calls)
    inputs = named_tensors(args, kwargs)
    for name in call.grad:
        if name in inputs:
            inputs[name].requires_grad_(True)
    phase = "construct"
    with student_mode(call.exercise, call.seed) as seen:
        try:
            fn = target
            if call.init is not None:
                init_args = _materialise(call.init[0], counted)
                init_kwargs = {k: _materialise(v, counted) for k, v in call.init[1].items()}
                fn = target(*init_args, **init_kwargs)
                if call.inspect or not isinstance(fn, nn.Module):
                    obs.info["module"] = describe_module(fn, call.attrs)
                if not isinstance(fn, nn.Module):
                    return obs
                phase = "load"
                if call.dtype is not None:
                    fn = fn.to(call.dtype)
                if call.state is not None:
                    fn.load_state_dict({k: v.clone() for k, v in call.state.items()})
                if call.prepare and not PREPARE[call.prepare](fn, call, obs):
                    return obs
                fn.train(call.train)
            phase = "call"
            needs_graph = call.upstream is not None
            parts = traced if isinstance(fn, nn.Module) and calls is not None else ()
            with (
                contextlib.nullcontext() if needs_graph else torch.no_grad(),
                trace_parts(fn, parts, calls),
            ):
                value = fn(*args, **kwargs)
            if calls is not None:
                obs.info[TRACE] = calls
            obs.value, obs.info["tensors"] = export_value(value)
            if call.upstream is not None:
                phase = "backward"
                _backward(value, call.upstream)
                obs.grads = {name: _grad(inputs.get(name)) for name in call.grad if name in inputs}
                if "parameters" in call.grad and isinstance(fn, nn.Module):
                    for name, p in fn.named_parameters():
                        obs.grads[f"parameters.{name}"] = _grad(p)
        except Unfit as problem:  # a forbidden built-in seen on the way is the better reason
            obs.failure = Failure("missing", "", str(problem), phase) if not seen else None
        except Exception as error:  # anything the student's code raised is observed, not raised
            obs.failure = failure_of(error, phase, seen)
        if seen and obs.failure is None:
            obs.failure = seen_failure(seen[0], phase)
    obs.after = {name: t.detach().clone() for name, t in inputs.items()}
    if counted:
        obs.info["parts"] = [part.calls for part in counted]
    return obs


scenario("call")(run_call)


# --- which sub-module got what -------------------------------------------------------------------

TRACE = "trace"
"""The ``Call.options`` key (and ``Observation.info`` key) of ``trace_parts``'s record."""

MAX_TRACED = 64
"""At most this many sub-module calls are recorded (a loop over a layer stops being recorded)."""


@contextlib.contextmanager
def trace_parts(
    module: nn.Module, parts: tuple[str, ...] | list[str], calls: list[dict] | None = None
) -> Iterator[list[dict]]:
    """Record each call of ``module``'s sub-modules named in ``parts`` while the block runs, in
    call order, into ``calls`` (a new list by default), which it yields:
    ``{"part": name, "args": {parameter: tensor or None}, "out": (tensors...)}``. A ``Part``
    argument of a traced call (the check's model) records its calls there too, by its kind.

    Arguments are bound to the sub-module's ``forward`` signature with its defaults (so
    ``attn(q, k, v, mask)`` and ``attn(q, k, v, mask=mask)`` record alike, and an omitted mask
    records as None); arguments that are neither tensors nor None are left out. The grader runs
    the reference under the same hooks and compares the two records (``locate``): what the kernel
    records here can only name a mistake, never pass a check."""
    calls = [] if calls is None else calls
    handles = []
    named = dict(module.named_modules()) if parts else {}
    for name in parts:
        sub = named.get(name)
        if sub is None or sub is module:
            continue
        try:
            signature: inspect.Signature | None = inspect.signature(sub.forward)
        except (TypeError, ValueError):
            signature = None

        def hook(_m, args, kwargs, out, name=name, signature=signature):
            try:
                bound = signature.bind(*args, **kwargs)  # type: ignore[union-attr]
                bound.apply_defaults()
                items = list(bound.arguments.items())
            except (AttributeError, TypeError):
                items = [(f"args[{i}]", a) for i, a in enumerate(args)] + list(kwargs.items())
            record_call(calls, name, items, out)

        handles.append(sub.register_forward_hook(hook, with_kwargs=True))
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def record_call(calls: list[dict], name: str, items: list[tuple[str, Any]], out: Any) -> None:
    if len(calls) >= MAX_TRACED:
        return
    outs = out if isinstance(out, tuple) else (out,)
    calls.append(
        {
            "part": name,
            "args": {
                k: v if v is None else v.detach().clone()
                for k, v in items
                if v is None or isinstance(v, torch.Tensor)
            },
            "out": tuple(o.detach().clone() for o in outs if isinstance(o, torch.Tensor)),
        }
    )


def describe_module(module: Any, attrs: tuple[str, ...] = ()) -> dict[str, Any]:
    """Plain facts about a constructed object: its class, whether it is an ``nn.Module``, its
    parameters (shape and initial values) and the requested attributes (plain values only)."""
    facts: dict[str, Any] = {"type": type(module).__qualname__}
    facts["is_module"] = isinstance(module, nn.Module)
    if facts["is_module"]:
        facts["parameters"] = {name: p.detach().clone() for name, p in module.named_parameters()}
        facts["submodules"] = {
            name: f"{type(m).__module__}.{type(m).__qualname__}"
            for name, m in module.named_modules()
            if name
        }
    values = {}
    for name in attrs:
        value = getattr(module, name, _ABSENT)
        if value is _ABSENT:
            continue
        values[name] = value if isinstance(value, int | float | str | bool | None) else repr(value)
    facts["attrs"] = values
    return facts


_ABSENT = object()


def export_value(value: Any) -> tuple[Any, dict[str, dict[str, Any]]]:
    """A copy of ``value`` that holds only plain data, and facts about each tensor in it by path
    (``""`` for a tensor returned alone, ``"[0]"``, ``"[1]"``... inside a tuple)."""
    facts: dict[str, dict[str, Any]] = {}

    def walk(v: Any, path: str) -> Any:
        if isinstance(v, torch.Tensor):
            facts[path] = {"requires_grad": bool(v.requires_grad)}
            if type(v) is not torch.Tensor:
                facts[path]["class"] = f"{type(v).__module__}.{type(v).__qualname__}"
            with torch._C.DisableTorchFunctionSubclass():
                plain = torch.Tensor._make_subclass(torch.Tensor, v.detach().cpu())
                return plain.clone()
        if isinstance(v, tuple | list):
            items = [walk(x, f"{path}[{i}]") for i, x in enumerate(v)]
            return tuple(items) if isinstance(v, tuple) else items
        if v is None or type(v) in (int, float, bool, str):
            return v
        return Opaque(f"{type(v).__module__}.{type(v).__qualname__}")

    return walk(value, ""), facts


def tensors_of(value: Any) -> list[torch.Tensor]:
    """The tensors in a returned value, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in tensors_of(v)]
    return []


def _backward(value: Any, upstream: tuple[torch.Tensor, ...]) -> None:
    outputs = tensors_of(value)
    pairs = [(o, u) for o, u in zip(outputs, upstream, strict=False) if o.requires_grad]
    if pairs:
        loss = sum((o * u.to(o.dtype)).sum() for o, u in pairs)
        loss.backward()  # type: ignore[union-attr]


def _grad(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None or t.grad is None else t.grad.detach().clone()
