"""Authorship rules, checked in nbgrader's process from the answer cells' source.

The forbidden-call trap of ``encoder_lib.grading.observe`` lives in the student's kernel, where
it tells a student at once that a built-in does the exercise's work. Code in the same kernel can
switch it off or go around it (``sys.setprofile(None)``, ``torch._C.DisableTorchFunction()``,
emptying ``observe.FORBIDDEN``, a proxy module in ``sys.modules``, a refused function's code
under a new code object...). So at autograde the judge also reads the answer cells' source from
the submitted notebook, before any call reaches the kernel, and an exercise whose answer breaks
a rule scores 0 with a message that names the construct and where it is (mistake id
``authorship-rule``, which the instructor's report counts like any other mistake).

Two kinds of rule:

- **The exercise's own**: its answer cells (those between the previous judged test cell and its
  own) must not name what does the exercise's work: ``observe.FORBIDDEN[exercise]`` (torch
  functions, classes, ``encoder_lib``'s reference), found by resolving each dotted name through
  the imports of the setup cell and of the answer cells (``F.layer_norm`` ->
  ``torch.nn.functional.layer_norm``) and comparing the object it names here, or its dotted name
  for a package this process does not import (``flax.nnx.LayerNorm``). Only the exercise's own
  cells: a later exercise may forbid what an earlier one needs (``count_parameters`` forbids the
  ``nn.Linear`` that ``FeedForward`` is built from).
- **Everyone's**: no answer cell may use a construct whose only use in these exercises is to get
  around the rules (``EVASIONS``: the tracing and import machinery, ``gc``, ``ctypes``,
  ``exec``/``eval``/``compile``, a computed attribute name, ``globals()``/``vars()``, function
  internals such as ``__code__`` and frames, ``torch._C``, IPython's hooks, ``encoder_lib.grading``
  and ``encoder_lib.autograde``), nor assign into a library (``F.softmax = ...``). Such a
  construct in any answer cell changes what every later check sees, so every exercise graded
  after it scores 0; the first says what and where, the later ones point back to it.

``getattr``/``setattr``/``hasattr`` stay allowed with a literal name, and on ``self`` (a module
walking its own given sub-modules by name); ``__init__``/``super()`` and every other dunder not in
``DUNDERS`` are allowed. A method called on a tensor (``x.softmax(-1)``) is not resolved here:
the kernel's trap names it while the student works.

This is a rule check, not a sandbox: see the README, "How grading works".
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nbgrader.utils import is_grade, is_solution

from encoder_lib.grading import runner
from encoder_lib.grading.feedback import ForbiddenCallError, GradingError
from encoder_lib.grading.observe import FORBIDDEN, Forbidden

__all__ = ["Breach", "EVASIONS", "DUNDERS", "breaches", "cell_breaches", "refusal", "MISTAKE"]

MISTAKE = "authorship-rule"


EVASIONS: dict[str, str] = {
    "sys": "the interpreter's machinery (tracing hooks, sys.modules, frames)",
    "gc": "the garbage collector (it hands out every live object, the grader's included)",
    "ctypes": "raw memory access",
    "importlib": "the import machinery",
    "builtins": "Python's built-ins module",
    "inspect": "frames and source of other code",
    "types": "building functions and code objects by hand",
    "threading.setprofile": "a tracing hook",
    "threading.settrace": "a tracing hook",
    "IPython": "IPython's hooks",
    "ipykernel": "the kernel's machinery",
    "torch._C": "torch's internals (switching torch function modes off)",
    "torch.overrides": "torch function modes",
    "torch.utils._python_dispatch": "torch dispatch modes",
    "encoder_lib.grading": "the grader's own code",
    "encoder_lib.autograde": "the grader's own code",
}
"""Dotted names (a module, or a module's attribute) an answer may not name or import."""

BUILTINS: dict[str, str] = {
    "exec": "running code from a string",
    "eval": "running code from a string",
    "compile": "building code from a string",
    "__import__": "the import machinery",
    "globals": "the notebook's global names",
    "vars": "an object's namespace",
    "get_ipython": "IPython's hooks",
    "__builtins__": "Python's built-ins module",
    "breakpoint": "the debugger",
}
"""Built-in names an answer may not use."""

DUNDERS = frozenset(
    "__code__ __globals__ __closure__ __builtins__ __dict__ __func__ __self__ __wrapped__ "
    "__defaults__ __kwdefaults__ __subclasses__ __bases__ __base__ __mro__ __getattribute__ "
    "__setattr__ __delattr__ __import__ __loader__ __spec__ __torch_function__ "
    "__torch_dispatch__ __reduce__ __reduce_ex__ __class_getitem__ __init_subclass__ "
    "f_globals f_locals f_builtins f_back f_code gi_frame gi_code cr_frame tb_frame co_code".split()
)
"""Attributes that reach into functions, frames, classes' insides or modules' namespaces."""

ATTRIBUTE_BUILTINS = ("getattr", "setattr", "delattr", "hasattr")


@dataclass(frozen=True)
class Breach:
    """One rule an answer cell breaks."""

    cell: str
    """The answer cell's grade_id."""
    line: int
    """The line in that cell (1-based)."""
    construct: str
    """What the source says, e.g. ``"sys.setprofile"``, ``"F.layer_norm"``."""
    rule: str
    """Why it is not allowed, in the student's terms; for the exercise's own rule, the name
    of the forbidden built-in (as ``observe.Forbidden`` gives it)."""
    own: bool
    """True: the exercise's own rule (a forbidden built-in); False: everyone's (an evasion)."""

    def says(self) -> str:
        return f"{self.construct} (answer cell {self.cell!r}, line {self.line}): {self.rule}"


def _parse(source: str) -> ast.Module | None:
    """The cell's syntax tree; IPython's syntax (``%magic``, ``!command``) is first turned into
    the calls IPython makes of it (``get_ipython().run_line_magic(...)``). None: not Python."""
    try:
        return ast.parse(source)
    except SyntaxError:
        pass
    from IPython.core.inputtransformer2 import TransformerManager

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


def _aliases(trees: Iterable[ast.AST]) -> dict[str, str]:
    """Local name -> the dotted name it was imported as, from every import in ``trees``."""
    names: dict[str, str] = {}
    for tree in trees:
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


def _dotted(node: ast.AST) -> tuple[str, list[str]] | None:
    """``a.b.c`` -> ("a", ["b", "c"]); None for anything not a chain of names."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
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


def _forbidden_here(dotted: str, forbidden: Forbidden) -> str | None:
    """The message name of the forbidden built-in ``dotted`` names, or None."""
    for where, name in forbidden.by_name.items():
        if dotted == where.replace(":", "."):
            return name
    obj = _resolve(dotted)
    if obj is None:
        return None
    for table in (forbidden.torch, forbidden.python):
        for item, name in table.items():
            if obj is item:
                return name
    return None


def _evasion(dotted: str) -> str | None:
    for prefix, what in EVASIONS.items():
        if _under(dotted, prefix):
            return what
    return None


def cell_breaches(
    cell: str, source: str, aliases: dict[str, str], forbidden: Forbidden | None
) -> list[Breach]:
    """The rules ``source`` (one answer cell) breaks: everyone's, and ``forbidden``'s if given."""
    tree = _parse(source)
    if tree is None:
        return []  # the kernel says so, with the line, when the cell runs
    found: list[Breach] = []
    seen: set[tuple[int, str]] = set()

    def add(node: ast.AST, construct: str, rule: str, own: bool = False) -> None:
        line = getattr(node, "lineno", 1)
        if (line, construct) not in seen:
            seen.add((line, construct))
            found.append(Breach(cell, line, construct, rule, own))

    own_names = _bound_names(tree)
    magic_owners: set[int] = set()
    for node in ast.walk(tree):
        magic = _magic(node)
        if magic:
            magic_owners.add(id(node.func.value.func))  # type: ignore[attr-defined]
            add(
                node,
                magic,
                "an IPython magic or shell command, which runs code the grader cannot read "
                "(time or install things in a cell of your own)",
            )
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{node.module}.{a.name}" for a in node.names if node.module]
                + ([node.module] if node.module else [])
            )
            for module in modules:
                what = _evasion(module)
                if what:
                    add(node, ast.unparse(node), what)
                    break
        elif isinstance(node, ast.Name) and node.id in BUILTINS and id(node) not in magic_owners:
            dunder = node.id.startswith("__")
            # `vars = x.var(-1)` is the student's own name, not the built-in (a dunder is not)
            if dunder or (node.id not in aliases and node.id not in own_names):
                add(node, f"{node.id}", BUILTINS[node.id])
        elif (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.name in BUILTINS
            and node.name.startswith("__")
        ):
            add(node, f"def {node.name}", BUILTINS[node.name])
        elif isinstance(node, ast.Attribute) and node.attr in DUNDERS:
            add(
                node,
                f".{node.attr}",
                "the insides of an object (a function's code or globals, a frame, a class's "
                "internals)",
            )
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ATTRIBUTE_BUILTINS
            and node.func.id not in aliases
        ):
            _attribute_call(node, add, aliases)
        chain = _dotted(node) if isinstance(node, ast.Attribute | ast.Name) else None
        if chain is None or chain[0] not in aliases:
            continue
        dotted = ".".join([aliases[chain[0]], *chain[1]])
        written = ".".join([chain[0], *chain[1]])
        what = _evasion(dotted)
        if what:
            add(node, written, what)
        elif isinstance(node.ctx, ast.Store | ast.Del) and chain[1]:
            add(
                node,
                f"{written} = ...",
                "an assignment into a library, which changes it for every check after it",
            )
        elif forbidden is not None:
            name = _forbidden_here(dotted, forbidden)
            if name:
                add(node, written, name, own=True)
    return sorted(_outermost(found), key=lambda b: b.line)


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


def _attribute_call(node: ast.Call, add, aliases: dict[str, str]) -> None:
    """``getattr(obj, name)``: a literal name that is not a dunder, or any name on ``self``;
    ``setattr``/``delattr`` never on a library."""
    fn = node.func.id  # type: ignore[attr-defined]
    if len(node.args) < 2:
        return
    target, name = node.args[0], node.args[1]
    chain = _dotted(target)
    if fn in ("setattr", "delattr") and chain is not None and chain[0] in aliases:
        written = ".".join([chain[0], *chain[1]])
        add(
            node,
            f"{fn}({written}, ...)",
            "an assignment into a library, which changes it for every check after it",
        )
        return
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        if name.value in DUNDERS or name.value.startswith("__"):
            add(node, f"{fn}(..., {name.value!r})", "the insides of an object")
        return
    if isinstance(target, ast.Name) and target.id == "self":
        return
    add(
        node,
        f"{fn}() with a computed name",
        "an attribute named at run time (write the attribute's name, self.name; getattr on self "
        "is allowed for the given sub-modules)",
    )


def _outermost(found: list[Breach]) -> list[Breach]:
    """``sys.setprofile`` and ``sys`` on one line are one breach: keep the longest name."""
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


def breaches(cells: Sequence[Any], index: int, exercise: str) -> tuple[list[Breach], list[Breach]]:
    """``(own, earlier)``: the rules broken by the answer cells before ``cells[index]`` (the
    test cell of ``exercise``, a key of ``observe.FORBIDDEN``). ``own``: by the exercise's own
    answer cells (those after the previous judged test cell): everyone's rules and the
    exercise's forbidden built-ins; ``earlier``: everyone's rules, broken by the answer cells of
    exercises graded before it. Imports anywhere before the test cell (the setup cell's
    included) say what each name is."""
    trees = [_parse(cell.source) for cell in cells[:index] if cell.cell_type == "code"]
    aliases = _aliases(tree for tree in trees if tree is not None)
    previous_test = max((i for i in range(index) if _is_judged_test(cells[i])), default=-1)
    forbidden = FORBIDDEN.get(exercise, Forbidden())
    own: list[Breach] = []
    earlier: list[Breach] = []
    for i, cell in enumerate(cells[:index]):
        if cell.cell_type != "code" or not is_solution(cell):
            continue
        gid = cell.metadata.get("nbgrader", {}).get("grade_id", f"cell {i + 1}")
        if i > previous_test:
            own += cell_breaches(gid, cell.source, aliases, forbidden)
        else:
            earlier += [b for b in cell_breaches(gid, cell.source, aliases, None) if not b.own]
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
    with id ``authorship-rule``."""
    first = (list(own) or list(earlier))[0]
    fields = {"cell": first.cell, "construct": first.construct, "line": first.line}
    if first.own:
        error: GradingError = ForbiddenCallError(
            OWN_FORBIDDEN.format(name=first.rule, **fields), mistake="forbidden-built-in"
        )
        if exercise.rewrite is not None:
            error = exercise.rewrite(error, None, [])
    else:
        template = OWN_EVASION if own else EARLIER_EVASION
        error = GradingError(template.format(rule=first.rule, **fields), mistake=MISTAKE)
    error.exercise = exercise.title
    return error
