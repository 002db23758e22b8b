"""The rules an answer cell's source must keep, read from its syntax tree (no code runs).

Used twice with the same rules: in nbgrader's process at autograde
(``encoder_lib.autograde.authorship`` reads the submitted notebook's answer cells), and in the
student's kernel by the visible checks (``observe`` reads the cell that defines the answer), so
that a student sees a refusal before submitting.

Two kinds of rule:

- **The exercise's own** (``forbidden.rules``): the answer must not name what does the exercise's
  work, in any of its forms: the function, its operator-registry forms (``torch.ops.aten.<op>``
  packets and overloads), its Tensor-method form, the ``torch.nn`` modules whose ``forward``
  calls it (``forbidden.expanded``), found by resolving each dotted name through the imports
  (``F.layer_norm`` -> ``torch.nn.functional.layer_norm``) and comparing objects. An exercise
  without a list of its own gets the course-wide one: ``encoder_lib``'s reference for the thing
  being written.
- **Everyone's** (``EVASIONS``, ``BUILTINS``, ``DUNDERS``...): no answer reaches code by
  reflection, threads, serialisation or registries. Each rule has a mistake id
  (``MISTAKES``), which the instructor's report counts by: reflection (``getattr`` with a name
  that is not a plain literal, except on the answer's own ``self``; ``operator.attrgetter``,
  ``exec``, ``globals()``...), serialisation (``pickle``, ``marshal``, ``copyreg``, ``shelve``,
  ``dill``, ``torch.load``), threads and processes, the interpreter's internals (``sys``,
  ``gc``, ``ctypes``, ``types``, three-argument ``type(...)``, code and frame attributes,
  ``torch._C``, private names of torch, JAX, Flax and optax), torch's operator registry
  (``torch.ops``, ``torch._ops``, ``torch.library``), the grader's own code and any private
  name (``_x``) of ``encoder_lib``; and no assignment into a library (``F.softmax = ...``).

``getattr(obj, "name")`` with a literal name is read as ``obj.name`` (and so meets every rule
that ``obj.name`` would). This is a rule check, not a sandbox: see docs/GRADING.md, "What is
guaranteed, and what is not".
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.machinery import PathFinder
from types import ModuleType
from typing import Any

from .forbidden import Expanded, Forbidden, expanded

__all__ = [
    "Breach",
    "Rule",
    "EVASIONS",
    "BUILTINS",
    "DUNDERS",
    "MISTAKES",
    "MISTAKE",
    "cell_breaches",
    "aliases",
    "parse",
]

MISTAKE = "authorship-rule"
"""The generic id (an assignment into a library); each family of rules has its own below."""

MISTAKES: dict[str, str] = {
    MISTAKE: "an answer cell assigns into a library or uses a construct that gets around the "
    "rules, read from its source",
    "authorship-reflection": "an answer cell reaches code through a name built at run time "
    "(getattr with a computed name, operator.attrgetter, exec, eval, globals, importlib...)",
    "authorship-serialisation": "an answer cell uses serialisation that resolves names "
    "(pickle, marshal, copyreg, shelve, dill, torch.load)",
    "authorship-thread": "an answer cell uses threads or processes (threading, concurrent, "
    "multiprocessing, asyncio, subprocess, os.fork/spawn/system)",
    "authorship-internals": "an answer cell reaches the interpreter's internals (sys, gc, "
    "ctypes, types, type(name, bases, dict), __code__, frames, profilers, torch._C and torch's "
    "other private names, JAX's and Flax's private names, IPython's hooks)",
    "authorship-registry": "an answer cell uses torch's operator registry (torch.ops, "
    "torch._ops, torch.library)",
    "authorship-grader": "an answer cell uses the grader's own code (encoder_lib.grading, "
    "encoder_lib.autograde)",
    "authorship-private": "an answer cell uses a private name (_x) of encoder_lib",
}
"""Mistake id of each family of rules -> what it means (the instructor's report)."""


@dataclass(frozen=True)
class Rule:
    what: str
    """Why it is not allowed, in the student's terms."""
    mistake: str
    """Its id in ``MISTAKES``."""
    spreads: bool = True
    """Whether it costs every exercise graded after the cell too (a construct that can change
    what later checks see); False: only the exercise whose answer uses it (a name that only
    reaches a built-in)."""


_R, _S, _T, _I, _O, _G = (
    "authorship-reflection",
    "authorship-serialisation",
    "authorship-thread",
    "authorship-internals",
    "authorship-registry",
    "authorship-grader",
)

EVASIONS: dict[str, Rule] = {
    "sys": Rule("the interpreter's machinery (tracing hooks, sys.modules, frames)", _I),
    "gc": Rule("the garbage collector (it hands out every live object, the grader's too)", _I),
    "ctypes": Rule("raw memory access", _I),
    "types": Rule("building functions, code objects and classes by hand", _I),
    "inspect": Rule("frames and source of other code", _I),
    "IPython": Rule("IPython's hooks", _I),
    "ipykernel": Rule("the kernel's machinery", _I),
    "torch._C": Rule("torch's internals (switching torch function modes off)", _I),
    "torch.overrides": Rule("torch function modes", _I),
    "torch.utils._python_dispatch": Rule("torch dispatch modes", _I),
    "cProfile": Rule("a profiler, which replaces the grader's hook", _I),
    "profile": Rule("a profiler, which replaces the grader's hook", _I),
    "trace": Rule("a tracer, which replaces the grader's hook", _I),
    "pdb": Rule("the debugger", _I),
    "bdb": Rule("the debugger", _I),
    "importlib": Rule("the import machinery", _R),
    "runpy": Rule("running code found by name", _R),
    "code": Rule("running code from a string", _R),
    "codeop": Rule("building code from a string", _R),
    "timeit": Rule("running code from a string", _R),
    "string.Formatter": Rule("attributes named by a string", _R),
    "builtins": Rule("Python's built-ins module", _R),
    "operator.attrgetter": Rule("an attribute named by a string", _R),
    "operator.methodcaller": Rule("a method named by a string", _R),
    "pickle": Rule("serialisation, which finds functions by their names", _S),
    "_pickle": Rule("serialisation, which finds functions by their names", _S),
    "cPickle": Rule("serialisation, which finds functions by their names", _S),
    "marshal": Rule("serialisation of code objects", _S),
    "copyreg": Rule("serialisation's registry", _S),
    "shelve": Rule("serialisation, which finds functions by their names", _S),
    "dill": Rule("serialisation, which finds functions by their names", _S),
    "cloudpickle": Rule("serialisation, which finds functions by their names", _S),
    "torch.load": Rule("loading pickled objects, which finds functions by their names", _S),
    "threading": Rule("threads (the grader watches the thread that calls your answer)", _T),
    "_thread": Rule("threads (the grader watches the thread that calls your answer)", _T),
    "concurrent": Rule("thread and process pools", _T),
    "multiprocessing": Rule("other processes", _T),
    "asyncio": Rule("event loops and their worker threads", _T),
    "subprocess": Rule("other processes", _T),
    "torch.multiprocessing": Rule("other processes", _T),
    "torch.futures": Rule("asynchronous work", _T),
    "torch.jit.fork": Rule("asynchronous work in another thread", _T),
    "torch.jit._fork": Rule("asynchronous work in another thread", _T),
    "torch.ops": Rule("torch's operator registry (the built-ins under other names)", _O),
    "torch._ops": Rule("torch's operator registry (the built-ins under other names)", _O),
    "torch.library": Rule("torch's operator registry (the built-ins under other names)", _O),
    "encoder_lib.grading": Rule("the grader's own code", _G),
    "encoder_lib.autograde": Rule("the grader's own code", _G),
}
"""Dotted names (a module, or a module's attribute) an answer may not name or import."""

OS_PROCESSES = ("fork", "forkpty", "system", "popen", "spawn", "exec", "posix_spawn", "kill")
"""``os.<name>`` (or a name that starts with it: ``os.spawnv``, ``os.execve``) starts, replaces
or signals a process: refused as a thread is."""

BUILTINS: dict[str, Rule] = {
    "exec": Rule("running code from a string", _R),
    "eval": Rule("running code from a string", _R),
    "compile": Rule("building code from a string", _R),
    "__import__": Rule("the import machinery", _R),
    "globals": Rule("the notebook's global names", _R),
    "vars": Rule("an object's namespace", _R),
    "get_ipython": Rule("IPython's hooks", _I),
    "__builtins__": Rule("Python's built-ins module", _R),
    "__build_class__": Rule("building classes by hand", _I),
    "breakpoint": Rule("the debugger", _I),
}
"""Built-in names an answer may not use."""

DUNDERS = frozenset(
    "__code__ __globals__ __closure__ __builtins__ __dict__ __func__ __self__ __wrapped__ "
    "__defaults__ __kwdefaults__ __subclasses__ __bases__ __base__ __mro__ __getattribute__ "
    "__setattr__ __delattr__ __import__ __loader__ __spec__ __torch_function__ "
    "__torch_dispatch__ __reduce__ __reduce_ex__ __class_getitem__ __init_subclass__ "
    "__objclass__ __self_class__ __getattr__ cell_contents f_globals f_locals f_builtins f_back "
    "f_code "
    "f_trace f_lasti gi_frame gi_code gi_yieldfrom cr_frame cr_code cr_await ag_frame ag_code "
    "tb_frame tb_next co_code co_consts co_names".split()
)
"""Attributes that reach into functions, frames, classes' insides or modules' namespaces."""

INSIDES = Rule(
    "the insides of an object (a function's code or globals, a frame, a class's internals)", _I
)
PRIVATE = Rule(
    "a private name of encoder_lib (the course's code behind the names it gives you)",
    "authorship-private",
)
TORCH_PRIVATE = Rule(
    "torch's private internals (its operator bindings, reference implementations and "
    "decompositions: the built-ins under other names)",
    _I,
    spreads=False,
)
LIBRARY_PRIVATE = Rule(
    "a private name of JAX, Flax or optax (the helpers behind their public functions and "
    "modules, jax._src...: the built-ins under other names, which the grader does not watch)",
    _I,
    spreads=False,
)
LIBRARY_PRIVATE_ROOTS = ("jax", "jaxlib", "flax", "optax")
"""Packages whose private names (``_x`` after the package's name) are refused as torch's are
(``TORCH_PRIVATE``): ``flax.nnx.nn.normalization._normalize`` computes ``nnx.LayerNorm``
without being it, and ``jax._src`` holds every public JAX function under another name. The
source rules cannot resolve them (nbgrader's process never imports JAX), so they go by name."""
AS_A_VALUE = Rule(
    "getattr handed on as a value (to reduce, map...), which reaches attributes named at run time",
    _R,
)
COMPUTED = Rule(
    "an attribute named at run time (write the attribute's name, obj.name; getattr on self "
    "with a computed name is allowed, for your module's own sub-modules)",
    _R,
)
MODULE_VALUE = Rule(
    "a module handed on as a value (assigned to a name, passed, put in a list or a default): "
    "what is taken from it afterwards escapes the rules. Write the module's name each time you "
    "use it: torch.<name>, not t = torch and then t.<name>",
    _R,
)
TYPE3 = Rule("building a class by hand", _I)
INTO_LIBRARY = Rule(
    "an assignment into a library, which changes it for every check after it", MISTAKE
)
MAGIC = Rule(
    "an IPython magic or shell command, which runs code the grader cannot read (time or "
    "install things in a cell of your own)",
    _I,
)

ATTRIBUTE_BUILTINS = ("getattr", "setattr", "delattr", "hasattr")


@dataclass(frozen=True)
class Breach:
    """One rule an answer cell breaks."""

    cell: str
    """The answer cell's grade_id (or, in the kernel, IPython's name for it)."""
    line: int
    """The line in that cell (1-based)."""
    construct: str
    """What the source says, e.g. ``"sys.setprofile"``, ``"F.layer_norm"``."""
    rule: str
    """Why it is not allowed, in the student's terms; for the exercise's own rule, the name
    of the forbidden built-in (as ``forbidden.Forbidden`` gives it)."""
    own: bool
    """True: the exercise's own rule (a forbidden built-in); False: everyone's."""
    mistake: str = MISTAKE
    """The id the report counts it by: ``forbidden-built-in`` for the exercise's own rule, one
    of ``MISTAKES`` for everyone's."""
    spreads: bool = True
    """Whether it also costs the exercises graded after it (``Rule.spreads``)."""

    def says(self) -> str:
        return f"{self.construct} (answer cell {self.cell!r}, line {self.line}): {self.rule}"


def parse(source: str) -> ast.Module | None:
    """The cell's syntax tree; IPython's syntax (``%magic``, ``!command``) is first turned into
    the calls IPython makes of it (``get_ipython().run_line_magic(...)``). None: not Python."""
    try:
        return ast.parse(source)
    except SyntaxError:
        pass
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover (IPython is always there where notebooks run)
        return None
    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError):
        return None


MAGIC_CALLS = {"run_line_magic": "%", "run_cell_magic": "%%", "system": "!", "getoutput": "!"}


def _magic(node: ast.AST) -> str | None:
    """``get_ipython().run_line_magic('time', ...)`` -> ``"%time"``; None for anything else."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    owner = node.func.value
    if not (
        isinstance(owner, ast.Call)
        and isinstance(owner.func, ast.Name)
        and owner.func.id == "get_ipython"
        and node.func.attr in MAGIC_CALLS
    ):
        return None
    first = node.args[0] if node.args else None
    name = first.value if isinstance(first, ast.Constant) else "..."
    return f"{MAGIC_CALLS[node.func.attr]}{str(name).split()[0] if name else ''}"


def aliases(trees: Iterable[ast.AST | None]) -> dict[str, str]:
    """Local name -> the dotted name it was imported as, from every import in ``trees``."""
    names: dict[str, str] = {}
    for tree in trees:
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        names[alias.asname] = alias.name
                    else:
                        root = alias.name.partition(".")[0]
                        names[root] = root
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name != "*":
                        names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _chain(node: ast.AST) -> tuple[str, list[str]] | None:
    """``a.b.c`` -> ("a", ["b", "c"]); ``getattr(a.b, "c")`` reads as ``a.b.c``; None for
    anything else."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and _literal(node.args[1]) is not None
        ):
            parts.append(_literal(node.args[1]))  # type: ignore[arg-type]
            node = node.args[0]
        else:
            break
    if isinstance(node, ast.Name):
        return node.id, parts[::-1]
    return None


def _resolve(dotted: str) -> Any:
    """The object ``dotted`` names in this process, without importing anything; None if not."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:i]))
        if module is None:
            continue
        obj: Any = module
        try:
            for part in parts[i:]:
                obj = getattr(obj, part)
        except Exception:  # any failure: not a name this process knows
            return None
        return obj
    return None


def _under(dotted: str, prefix: str) -> bool:
    return dotted == prefix or dotted.startswith(prefix + ".")


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


REEXPORTED = frozenset(
    "sys gc ctypes types inspect IPython ipykernel importlib runpy codeop timeit builtins pickle "
    "_pickle cPickle marshal copyreg shelve dill cloudpickle threading _thread concurrent "
    "multiprocessing asyncio subprocess cProfile pdb bdb os".split()
)
"""Modules of ``EVASIONS`` (and ``os``) that libraries import and so hold as attributes:
``torch.sys``, ``torch.threading``, ``nnx.reprlib.sys``, ``flax.nnx.variablelib.threading``.
A dotted name through one of them meets that module's rules (read by name: the judge cannot
import JAX to see what ``nnx.reprlib.sys`` is)."""


def evasion(dotted: str) -> Rule | None:
    """Everyone's rule that the dotted name ``dotted`` breaks, or None: by the name as written,
    as torch or encoder_lib know it (``torch.cpp`` is ``torch._C.cpp``), or through a module a
    library imported (``torch.sys.setprofile`` is ``sys.setprofile``)."""
    for name in dict.fromkeys((dotted, _canonical(dotted))):
        rule = _evasion(name)
        if rule is not None:
            return rule
    parts = dotted.split(".")
    for i in range(1, len(parts)):
        if parts[i] in REEXPORTED:
            rule = _evasion(".".join(parts[i:]))
            if rule is not None:
                return rule
    return None


def _canonical(dotted: str) -> str:
    """``dotted`` with each module it passes through named as the module names itself, for the
    packages both nbgrader's process and the kernel import (torch, encoder_lib):
    ``torch.nn.functional.torch.overrides`` -> ``torch.overrides``."""
    parts = dotted.split(".")
    if parts[0] not in ("torch", "encoder_lib") or parts[0] not in sys.modules:
        return dotted
    obj: Any = sys.modules[parts[0]]
    name = parts[0]
    for i, part in enumerate(parts[1:], 1):
        try:
            obj = getattr(obj, part)
        except Exception:  # not a name this process knows: the rest as written
            return ".".join([name, *parts[i:]])
        name = obj.__name__ if isinstance(obj, ModuleType) else f"{name}.{part}"
    return name


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module: looked up in this process, or, for a package it has
    not imported (JAX in nbgrader's process), found on disk without importing anything."""
    if dotted not in _MODULES:
        obj = _resolve(dotted)
        found = isinstance(obj, ModuleType) if obj is not None else _module_on_disk(dotted)
        _MODULES[dotted] = found
    return _MODULES[dotted]


_MODULES: dict[str, bool] = {}


def _module_on_disk(dotted: str) -> bool:
    parts = dotted.split(".")
    try:
        spec = PathFinder.find_spec(parts[0])
        for i in range(1, len(parts)):
            if spec is None or not spec.submodule_search_locations:
                return False
            where = list(spec.submodule_search_locations)
            spec = PathFinder.find_spec(".".join(parts[: i + 1]), where)
    except (ImportError, ValueError):
        return False
    return spec is not None


def _evasion(dotted: str) -> Rule | None:
    for prefix, rule in EVASIONS.items():
        if _under(dotted, prefix):
            return rule
    head, _, rest = dotted.partition(".")
    if head == "os" and rest.startswith(OS_PROCESSES):
        return Rule("starting or replacing a process", _T)
    if head == "encoder_lib" and any(_private(p) for p in dotted.split(".")[1:]):
        return PRIVATE
    if head == "torch" and any(_private(p) for p in dotted.split(".")[1:]):
        return TORCH_PRIVATE
    if head in LIBRARY_PRIVATE_ROOTS and any(_private(p) for p in dotted.split(".")[1:]):
        return LIBRARY_PRIVATE
    return None


def forbidden_here(dotted: str, rules: Expanded) -> str | None:
    """The message name of the forbidden built-in ``dotted`` names (in any of its forms), or
    None."""
    for where, name in rules.by_name.items():
        if dotted == where.replace(":", ".") or _under(dotted, where.replace(":", ".")):
            return name
    obj = _resolve(dotted)
    return None if obj is None else rules.name_of(obj)


def cell_breaches(
    cell: str,
    source: str,
    names: dict[str, str],
    forbidden: Forbidden | None,
    modules: bool = True,
) -> list[Breach]:
    """The rules ``source`` (one answer cell) breaks: everyone's, and ``forbidden``'s (in every
    form, ``forbidden.expanded``) if given. ``names``: what each imported name is (``aliases``).
    ``modules=False``: a ``torch.nn`` module that calls a forbidden function is left to the
    kernel's trap, which sees the call (the kernel's reading skips their 0.4 s survey)."""
    tree = parse(source)
    if tree is None:
        return []  # the kernel says so, with the line, when the cell runs
    rules = expanded(forbidden, modules) if forbidden is not None else None
    found: list[Breach] = []
    seen: set[tuple[int, str]] = set()

    def add(node: ast.AST, construct: str, rule: Rule | str, own: bool = False) -> None:
        line = getattr(node, "lineno", 1)
        if (line, construct) in seen:
            return
        seen.add((line, construct))
        if isinstance(rule, Rule):
            found.append(Breach(cell, line, construct, rule.what, own, rule.mistake, rule.spreads))
        else:
            found.append(Breach(cell, line, construct, rule, own, "forbidden-built-in"))

    own_names = _bound_names(tree)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    magic_owners: set[int] = set()
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and node.id in ATTRIBUTE_BUILTINS
            and id(node) not in called
            and node.id not in names
            and node.id not in own_names
        ):
            add(node, f"{node.id} as a value", AS_A_VALUE)
        magic = _magic(node)
        if magic:
            magic_owners.add(id(node.func.value.func))  # type: ignore[attr-defined]
            add(node, magic, MAGIC)
        if isinstance(node, ast.Import | ast.ImportFrom):
            _import(node, add, rules)
        elif isinstance(node, ast.Name) and node.id in BUILTINS and id(node) not in magic_owners:
            dunder = node.id.startswith("__")
            # `vars = x.var(-1)` is the student's own name, not the built-in (a dunder is not)
            if dunder or (node.id not in names and node.id not in own_names):
                add(node, f"{node.id}", BUILTINS[node.id])
        elif (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.name in BUILTINS
            and node.name.startswith("__")
        ):
            add(node, f"def {node.name}", BUILTINS[node.name])
        elif isinstance(node, ast.Attribute) and node.attr in DUNDERS:
            add(node, f".{node.attr}", INSIDES)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fn = node.func.id
            if fn in ATTRIBUTE_BUILTINS and fn not in names and fn not in own_names:
                _attribute_call(node, add, names)
            elif fn == "type" and len(node.args) == 3 and "type" not in own_names:
                add(node, "type(name, bases, dict)", TYPE3)
        if (
            rules is not None
            and rules.methods
            and isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in rules.methods
        ):
            root = _chain(node.func.value)
            if root is None or (root[0] not in names and root[0] != "self"):
                add(node, f".{node.func.attr}(...)", rules.methods[node.func.attr], own=True)
        chain = _chain(node) if isinstance(node, ast.Attribute | ast.Name | ast.Call) else None
        if chain is None or chain[0] not in names:
            continue
        if isinstance(node, ast.Call) and not chain[1]:
            continue
        dotted = ".".join([names[chain[0]], *chain[1]])
        written = ".".join([chain[0], *chain[1]])
        name = forbidden_here(dotted, rules) if rules is not None else None
        if name:
            add(node, written, name, own=True)
            continue
        rule = evasion(dotted)
        if rule:
            add(node, written, rule)
        elif (
            not (isinstance(node, ast.Name) and node.id in own_names)
            and _as_value(node, parents)
            and _is_module(dotted)
        ):
            add(node, f"{written} as a value", MODULE_VALUE)
        elif isinstance(getattr(node, "ctx", None), ast.Store | ast.Del) and chain[1]:
            add(node, f"{written} = ...", INTO_LIBRARY)
    # on one line, what the module handed on was used for names the breach better
    return sorted(_outermost(found), key=lambda b: (b.line, b.rule == MODULE_VALUE.what))


def _as_value(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether a name (or ``a.b``) is used as a value: anything but the object of an attribute
    (``torch.nn``'s ``torch``), a call, ``getattr(x, "literal")``'s ``x``, or a name assigned to."""
    if isinstance(getattr(node, "ctx", None), ast.Store | ast.Del):
        return False
    parent = parents.get(id(node))
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return False
    if isinstance(parent, ast.Call):
        if parent.func is node:
            return False
        func = parent.func
        if (
            isinstance(func, ast.Name)
            and func.id in ATTRIBUTE_BUILTINS
            and parent.args
            and parent.args[0] is node
        ):
            return False
    return True


def _import(node: ast.Import | ast.ImportFrom, add, rules: Expanded | None) -> None:
    if isinstance(node, ast.Import):
        modules = [a.name for a in node.names]
    else:
        modules = [f"{node.module}.{a.name}" for a in node.names if node.module] + (
            [node.module] if node.module else []
        )
    for module in modules:
        name = forbidden_here(module, rules) if rules is not None else None
        if name:
            add(node, ast.unparse(node), name, own=True)
            return
    for module in modules:
        rule = evasion(module)
        if rule:
            add(node, ast.unparse(node), rule)
            return


def _bound_names(tree: ast.AST) -> set[str]:
    """Names the cell binds itself: assigned, parameters, functions and classes it defines."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
    return names


def _attribute_call(node: ast.Call, add, names: dict[str, str]) -> None:
    """``getattr(obj, name)``: a literal name that is not a dunder (read as ``obj.name``, whose
    rules the caller applies), or any name on ``self`` (a module walking its own sub-modules);
    ``setattr``/``delattr`` never on a library."""
    fn = node.func.id  # type: ignore[attr-defined]
    if len(node.args) < 2:
        return
    target, name = node.args[0], node.args[1]
    chain = _chain(target)
    if fn in ("setattr", "delattr") and chain is not None and chain[0] in names:
        written = ".".join([chain[0], *chain[1]])
        add(node, f"{fn}({written}, ...)", INTO_LIBRARY)
        return
    literal = _literal(name)
    if literal is not None:
        if literal in DUNDERS or literal.startswith("__"):
            add(node, f"{fn}(..., {literal!r})", INSIDES)
        return
    if chain is not None and chain[0] == "self":
        return
    add(node, f"{fn}() with a computed name", COMPUTED)


def _outermost(found: list[Breach]) -> list[Breach]:
    """``sys.setprofile`` and ``sys`` on one line are one breach: keep the longest name; and the
    exercise's own rule before everyone's on the same name (``torch.ops.aten.gelu``)."""
    kept: list[Breach] = []
    for b in found:
        if any(
            o is not b
            and o.line == b.line
            and o.construct != b.construct
            and o.construct.startswith(b.construct + ".")
            for o in found
        ):
            continue
        kept.append(b)
    return kept


SAID = (
    "the answer cell {cell!r} uses `{construct}` (line {line}): {rule}. No answer needs it, and "
    "it reaches code the grader's checks cannot follow, so this exercise earns no points. Take "
    "it out: answers use the operations and the names the exercise gives."
)


def said(breach: Breach) -> str:
    """How the visible check words a breach of everyone's rules (the judge words it the same
    way, adding that it read the submitted notebook)."""
    return SAID.format(
        cell=breach.cell, construct=breach.construct, line=breach.line, rule=breach.rule
    )
