"""What an exercise may not call: the built-ins that already do its work, in every form.

``Forbidden`` lists them (torch functions, Python functions or classes, names of a package that
may not be imported); ``forbid`` registers an exercise's list in ``FORBIDDEN`` (checks modules
do, through ``runner.register_given(forbidden=...)``); ``rules`` gives an exercise's list, its
own or the course-wide one (``COURSE_WIDE``); ``expanded`` finds every form of each forbidden
function (``Expanded``: its other bindings, the ``aten`` operators, the Tensor method, the
``torch.nn`` modules that call it). Two users, both in the student's kernel and in nbgrader's
process: the trap of ``observe.student_mode`` and the source rules (``source_rules``). It
imports nothing else of the grader.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch
from torch import nn

__all__ = [
    "Forbidden",
    "FORBIDDEN",
    "COURSE_WIDE",
    "EXERCISE_TARGETS",
    "forbid",
    "note_exercise",
    "rules",
    "Expanded",
    "expanded",
]


@dataclass(frozen=True)
class Forbidden:
    """The built-ins that already do an exercise's work: torch functions (trapped with a
    ``TorchFunctionMode``, which also sees calls made inside ``nn`` modules) and Python functions
    or classes (watched with a profiler hook), each with the name a message uses."""

    torch: Mapping[Any, str] = field(default_factory=dict)
    python: Mapping[Any, str] = field(default_factory=dict)
    by_name: Mapping[str, str] = field(default_factory=dict)
    """``"module:qualname"`` -> its name in messages: Python functions or classes of a package
    the course does not import everywhere (``"flax.nnx:LayerNorm"``), watched like ``python``
    when that package is already imported in the student's kernel (it must be, to be called)."""

    def resolved(self) -> dict[Any, str]:
        """``python`` and the objects of ``by_name`` whose package is imported."""
        found = dict(self.python)
        for where, name in self.by_name.items():
            if where.partition(":")[0].partition(".")[0] not in sys.modules:
                continue
            obj = _resolve(where)
            if obj is not _MISSING:
                found[obj] = name
        return found


_MISSING = object()


def _resolve(where: str) -> Any:
    """The object ``"module:qualname"`` names, or ``_MISSING`` if it cannot be imported."""
    module, _, qualname = where.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return _MISSING
    return obj


FORBIDDEN: dict[str, Forbidden] = {}
"""Exercise name -> its forbidden built-ins; each checks module registers its own (``forbid``,
or ``runner.register_given(forbidden=...)``)."""


def forbid(exercise: str, forbidden: Forbidden) -> Forbidden:
    """Register ``forbidden`` as the built-ins ``exercise`` may not call (``FORBIDDEN``); an
    exercise given two lists raises ``ValueError``."""
    if exercise in FORBIDDEN:
        raise ValueError(
            f"the forbidden list of {exercise!r} is registered twice: each exercise has one list"
        )
    FORBIDDEN[exercise] = forbidden
    return forbidden


COURSE_WIDE: dict[str, tuple[str, ...]] = {
    "masked_mean": ("encoder_lib.minilm:mean_pool",),
    "sentiment_classifier": ("encoder_lib.pretraining:PooledClassifier",),
    "train_step": ("encoder_lib.pretraining:fine_tune", "encoder_lib.pretraining:pretrain"),
}
"""For an exercise without a ``FORBIDDEN`` list: ``encoder_lib``'s code that already does the
thing being written under another name (``"module:qualname"``). ``rules`` adds every
``encoder_lib`` function or class named like the exercise (``masked_mean``, ``split_heads``...)
and the exercise's ``reference`` when it is ``encoder_lib``'s."""


EXERCISE_TARGETS: dict[str, list[tuple[str, Any]]] = {}
"""Exercise name -> ``(target, reference)`` of each exercise so named: what the course-wide list
forbids besides ``COURSE_WIDE`` (``encoder_lib``'s code named like the target, and the reference
when it is ``encoder_lib``'s). ``runner.register`` notes each exercise here (``note_exercise``)."""


def note_exercise(name: str, target: str, reference: Any = None) -> None:
    """Note the exercise ``name``, whose answer the notebook defines as ``target`` and whose
    reference is ``reference``, for its course-wide list (``rules``)."""
    EXERCISE_TARGETS.setdefault(name, []).append((target, reference))


def rules(exercise: str) -> Forbidden:
    """The built-ins ``exercise`` forbids: its own list, or the course-wide one (``COURSE_WIDE``
    and ``encoder_lib``'s functions and classes named like it). The grader's own code and
    ``encoder_lib``'s private names are refused everywhere by the source rules
    (``source_rules``)."""
    own = FORBIDDEN.get(exercise)
    return own if own is not None else _course_wide(exercise)


@cache
def _course_wide(exercise: str) -> Forbidden:
    known = EXERCISE_TARGETS.get(exercise, [])
    wanted = {_plain(exercise), *(_plain(target) for target, _ in known)}
    found: dict[Any, str] = {}
    for where in COURSE_WIDE.get(exercise, ()):
        obj = _resolve(where)
        if obj is not _MISSING:
            found[obj] = where.replace(":", ".")
    for name, module in list(sys.modules.items()):
        if not _library_module(name) or module is None:
            continue
        for obj in list(vars(module).values()):
            if (
                (inspect.isfunction(obj) or inspect.isclass(obj))
                and _library_module(getattr(obj, "__module__", "") or "")
                and _plain(getattr(obj, "__name__", "")) in wanted
            ):
                found[obj] = f"{obj.__module__}.{obj.__qualname__}"
    for _, ref in known:
        if ref is not None and _library_module(getattr(ref, "__module__", "") or ""):
            found[ref] = f"{ref.__module__}.{ref.__qualname__}"
    return Forbidden(python=found)


def _plain(name: str) -> str:
    return name.replace("_", "").lower()


def _library_module(name: str) -> bool:
    """``encoder_lib``'s own modules, not the grader's."""
    return (name == "encoder_lib" or name.startswith("encoder_lib.")) and not name.startswith(
        ("encoder_lib.grading", "encoder_lib.autograde")
    )


@dataclass(frozen=True)
class Expanded:
    """A ``Forbidden`` list with every form of each forbidden torch function: the function, its
    other Python bindings (``torch.<op>``, ``torch._C._nn.<op>``, the Tensor method), the
    ``torch.ops.aten`` operators that compute it (packets and overloads, by name), and, for the
    source rules, the ``torch.nn`` modules whose ``forward`` calls it."""

    ids: Mapping[int, str]
    """id of a forbidden object (any form) -> its name in messages."""
    aten: Mapping[str, str]
    """``aten::<op>`` (no overload) -> the name in messages."""
    methods: Mapping[str, str]
    """Tensor method name -> the name in messages."""
    by_name: Mapping[str, str]
    keep: tuple[Any, ...] = ()
    """The objects of ``ids``, kept alive so that their ids stay theirs."""

    def name_of(self, obj: Any) -> str | None:
        name = self.ids.get(id(obj))
        if name is None:
            op = _op_name(obj)
            name = self.aten.get(op) if op else None
        if name is None and getattr(obj, "__objclass__", None) is torch._C.TensorBase:
            name = self.methods.get(getattr(obj, "__name__", ""))
        return name


_EXPANDED: dict[tuple[int, bool], tuple[Forbidden, Expanded]] = {}


def expanded(forbidden: Forbidden, modules: bool = True) -> Expanded:
    """Every form of ``forbidden``'s built-ins (``Expanded``); ``modules``: also the ``torch.nn``
    module classes that call a forbidden function (the source rules need them; the kernel's
    trap sees the call inside the module)."""
    key = (id(forbidden), modules)
    hit = _EXPANDED.get(key)
    if hit is not None and hit[0] is forbidden:
        return hit[1]
    objects: dict[Any, str] = {**forbidden.python, **forbidden.torch}
    aten: dict[str, str] = {}
    methods: dict[str, str] = {}
    for fn, name in forbidden.torch.items():
        base = _base(_op_name(fn) or getattr(fn, "__name__", "") or "")
        if len(base) < 4:
            continue
        ops = {n for n in _aten_ops() if base in _normalised(n)} | {base}
        for op in ops:
            aten.setdefault(f"aten::{op}", name)
            for plain in (op, op + "_"):
                for owner in _BINDINGS:
                    obj = getattr(owner, plain, None)
                    if obj is not None and callable(obj):
                        objects.setdefault(obj, name)
                if callable(getattr(torch.Tensor, plain, None)):
                    methods.setdefault(plain, name)
        for plain in (getattr(fn, "__name__", ""),):
            if plain and callable(getattr(torch.Tensor, plain, None)):
                methods.setdefault(plain, name)
    if modules:
        called: dict[str, str] = {}
        for fn, name in forbidden.torch.items():
            called.setdefault(getattr(fn, "__name__", ""), name)
        for cls in _nn_modules():
            names = list(dict.fromkeys(called[n] for n in sorted(_calls(cls)) if n in called))
            if names and cls not in objects:
                alone = len(names) == 1 and f"nn.{cls.__name__}" in names[0]
                said = f"nn.{cls.__name__} (it calls {' and '.join(names)})"
                objects[cls] = names[0] if alone else said
    result = Expanded(
        ids={id(o): n for o, n in objects.items()},
        aten=aten,
        methods=methods,
        by_name=dict(forbidden.by_name),
        keep=tuple(objects),
    )
    _EXPANDED[key] = (forbidden, result)
    return result


_BINDINGS = (torch, torch.nn.functional, torch._C._nn, torch._C._VariableFunctions, torch.special)


def _op_name(obj: Any) -> str | None:
    """``"aten::gelu"`` for ``torch.ops.aten.gelu`` and ``torch.ops.aten.gelu.default``."""
    if isinstance(obj, torch._ops.OpOverloadPacket):
        return obj._qualified_op_name
    if isinstance(obj, torch._ops.OpOverload):
        return obj._schema.name
    return None


def _base(name: str) -> str:
    """What a function computes, from its name: ``"aten::native_layer_norm"`` and
    ``"layer_norm"`` -> ``"layer_norm"``, ``"multi_head_attention_forward"`` ->
    ``"multi_head_attention"``."""
    name = _normalised(name.rpartition("::")[2].partition(".")[0])
    for suffix in ("_forward", "_fwd"):
        name = name.removesuffix(suffix)
    return name


def _normalised(op: str) -> str:
    op = op.lstrip("_")
    return op.removeprefix("native_").lstrip("_")


@cache
def _aten_ops() -> frozenset[str]:
    """Every ``aten`` operator's name, without its overload."""
    return frozenset(
        n[len("aten::") :].partition(".")[0]
        for n in torch._C._dispatch_get_all_op_names()
        if n.startswith("aten::")
    )


def _nn_modules() -> list[type]:
    return [o for o in vars(nn).values() if inspect.isclass(o) and issubclass(o, nn.Module)]


@cache
def _calls(cls: type) -> frozenset[str]:
    """The torch functions a ``torch.nn`` module's ``forward`` calls (``F.<name>(`` or
    ``torch.<name>(`` in its source), and those of the ``torch.nn`` modules its ``__init__``
    builds (``MultiheadAttention(`` inside ``TransformerEncoderLayer``)."""
    found: set[str] = set()
    for method, pattern in (("forward", r"(?:F|torch)\.(\w+)\("), ("__init__", r"(\w+)\(")):
        fn = vars(cls).get(method)
        try:
            source = inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            continue
        for name in re.findall(pattern, source):
            if method == "forward":
                found.add(name)
                continue
            sub = getattr(nn, name, None)
            if inspect.isclass(sub) and issubclass(sub, nn.Module) and sub is not cls:
                found |= _calls(sub)
    return frozenset(found)
