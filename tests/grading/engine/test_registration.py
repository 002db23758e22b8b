"""The kernel's registries are filled through public functions (``observe``'s and
``forbidden.forbid``), each name once, and no module but their own writes to the tables."""

from __future__ import annotations

import ast
import pathlib

import pytest

from encoder_lib.grading.kernel import forbidden, observe

GRADING = pathlib.Path(__file__).parents[3] / "encoder_lib" / "grading"
TABLES = {"SCENARIOS", "PARTS", "PREPARE", "FORBIDDEN", "AFTER_CHECK"}
MUTATORS = {"append", "extend", "insert", "update", "setdefault", "pop", "clear", "__setitem__"}


@pytest.mark.parametrize(
    ("register", "table"),
    [
        (observe.scenario, observe.SCENARIOS),
        (observe.part, observe.PARTS),
        (observe.preparation, observe.PREPARE),
    ],
)
def test_a_name_registered_twice_is_refused_with_a_sentence(monkeypatch, register, table):
    monkeypatch.setitem(table, "x.once", lambda *args: None)

    def again(*args):
        return None

    with pytest.raises(ValueError, match=r"'x\.once' is registered twice"):
        register("x.once")(again)
    assert table["x.once"] is not again


def test_a_registration_returns_what_it_registers_so_it_decorates(monkeypatch):
    monkeypatch.setattr(observe, "SCENARIOS", dict(observe.SCENARIOS))

    @observe.scenario("x.decorated")
    def run(lookup, call):
        return observe.Observation()

    assert observe.SCENARIOS["x.decorated"] is run


def test_a_forbidden_list_or_a_hook_registered_twice_is_refused(monkeypatch):
    monkeypatch.setattr(forbidden, "FORBIDDEN", {})
    monkeypatch.setattr(observe, "AFTER_CHECK", [])
    forbidden.forbid("x", forbidden.Forbidden())
    with pytest.raises(ValueError, match="registered twice"):
        forbidden.forbid("x", forbidden.Forbidden())

    def hook():
        return None

    assert observe.after_each_check(hook) is hook
    with pytest.raises(ValueError, match="registered twice"):
        observe.after_each_check(hook)


def _writes_to_a_table(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign | ast.AugAssign):  # TABLE[name] = ..., observe.TABLE = ...
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            targets = [t for t in targets if isinstance(t, ast.Subscript | ast.Attribute)]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") in MUTATORS:
            targets = [node.func.value]  # TABLE.append(...), TABLE.update(...)
        for target in targets:
            inner = target.value if isinstance(target, ast.Subscript) else target
            name = inner.attr if isinstance(inner, ast.Attribute) else getattr(inner, "id", "")
            if name in TABLES:
                found.append(f"line {node.lineno}: {name}")
    return found


def test_no_module_but_their_own_writes_to_the_registries():
    writes = {
        str(path.relative_to(GRADING)): _writes_to_a_table(ast.parse(path.read_text()))
        for path in GRADING.rglob("*.py")
        if path.name not in ("observe.py", "forbidden.py")
    }
    assert {path: found for path, found in writes.items() if found} == {}
