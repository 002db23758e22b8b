"""The authoring guide's rules (docs/AUTHORING.md) hold in every solution notebook: the setup
cell comes first and imports before it calls setup_notebook(); cells tagged ``demo`` (skipped
at autograde) define nothing that an answer, a test or a cell that still runs needs; every test
cell that a registered exercise grades exists and ends with a statement; nbval's rules live in
cell tags, not in the sources students read; the setup cell says in one line that it worked."""

from __future__ import annotations

import ast
import re
import symtable

import nbformat
import pytest

from encoder_lib.autograde.judge_execute import DEMO_TAG
from encoder_lib.grading import EXERCISES
from tools.build_course import RELEASE, SOLUTIONS, assignments

MAGIC = re.compile(r"^\s*[%!].*$", re.MULTILINE)


def _cells(name: str):
    return nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4).cells


def _tree(cell) -> ast.Module:
    return ast.parse(MAGIC.sub("pass", cell.source))


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def _bound(tree: ast.Module) -> set[str]:
    """Names a cell binds at top level."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        else:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.add(sub.id)
    return names


def _globals_read(source: str) -> set[str]:
    """Names a cell reads from the notebook's globals (at top level or inside its functions)."""

    def walk(table: symtable.SymbolTable) -> set[str]:
        top = table.get_type() == "module"
        names = {
            s.get_name()
            for s in table.get_symbols()
            if s.is_referenced() and (top or s.is_global())
        }
        for child in table.get_children():
            names |= walk(child)
        return names

    return walk(symtable.symtable(MAGIC.sub("pass", source), "cell", "exec"))


@pytest.mark.parametrize("name", assignments())
def test_setup_cell_comes_first_and_imports_before_setting_up(name):
    code = [c for c in _cells(name) if c.cell_type == "code"]
    assert _grade_id(code[0]) == "setup"
    body = _tree(code[0]).body
    calls = [i for i, node in enumerate(body) if "setup_notebook()" in ast.unparse(node)]
    imports = [i for i, node in enumerate(body) if isinstance(node, ast.Import | ast.ImportFrom)]
    assert calls == [len(body) - 1], "setup_notebook() is called once, last"
    assert max(imports) < calls[0]


@pytest.mark.parametrize("name", assignments())
def test_demo_cells_define_nothing_that_runs_at_grading_needs(name):
    demo_names: set[str] = set()
    running: list = []
    for cell in _cells(name):
        if cell.cell_type != "code":
            continue
        if DEMO_TAG in cell.metadata.get("tags", []):
            assert not cell.metadata.get("nbgrader"), "an nbgrader cell cannot be a demo"
            demo_names |= _bound(_tree(cell))
        else:
            running.append(cell)
    for cell in running:
        needed = (_globals_read(cell.source) - _bound(_tree(cell))) & demo_names
        assert not needed, f"{_grade_id(cell) or cell.get('id')} uses {needed} from a demo cell"


@pytest.mark.parametrize("name", assignments())
def test_every_code_cell_is_graded_set_up_or_a_demo(name):
    """Autograde runs only the setup, answer and test cells (and the student's own cells)."""
    for cell in _cells(name):
        if cell.cell_type == "code" and not cell.metadata.get("nbgrader"):
            assert DEMO_TAG in cell.metadata.get("tags", []), cell.get("id")


def test_every_registered_exercise_has_its_test_cell():
    test_cells = {
        _grade_id(c): c
        for name in assignments()
        for c in _cells(name)
        if c.metadata.get("nbgrader", {}).get("grade")
    }
    for test_cell, exercise in EXERCISES.items():
        assert test_cell in test_cells, f"{exercise.name}: no test cell {test_cell}"
        last = _tree(test_cells[test_cell]).body[-1]
        assert not isinstance(last, ast.Expr) or isinstance(last.value, ast.Call), (
            "a trailing expression would become the cell's score"
        )


IGNORE_TAG = "nbval-ignore-output"


@pytest.mark.parametrize("name", assignments())
def test_nbval_rules_are_tags_not_comments_students_read(name):
    """Explorers are tagged ``nbval-ignore-output`` (a widget's output cannot be compared), no
    source carries nbval's ``# NBVAL_...`` comments, and the release keeps the tags."""
    tagged = []
    for cell in _cells(name):
        assert "NBVAL_" not in cell.source, f"{cell.get('id')}: use the {IGNORE_TAG} tag"
        tags = cell.metadata.get("tags", [])
        if cell.cell_type == "code" and "widgets.interact" in cell.source:
            assert IGNORE_TAG in tags, f"{cell.get('id')}: an explorer nbval would compare"
        if IGNORE_TAG in tags:
            tagged.append(cell.get("id"))
    assert tagged
    released = nbformat.read(RELEASE / name / f"{name}.ipynb", as_version=4).cells
    assert [c.get("id") for c in released if IGNORE_TAG in c.metadata.get("tags", [])] == tagged


@pytest.mark.parametrize("name", assignments())
def test_the_setup_cell_says_in_one_line_that_it_worked(name):
    """What setup_notebook prints, committed (nbval compares it): the same on every machine."""
    (setup,) = [c for c in _cells(name) if _grade_id(c) == "setup"]
    text = "".join(o.get("text", "") for o in setup.outputs if o.output_type == "stream")
    (line,) = text.splitlines()
    assert line.startswith("Setup done: torch 2.") and "+" not in line, line
    assert "random seed 0" in line and "1 torch thread." in line


THINK_FIRST = "**Think first.**"
HIDDEN_ANSWER = "<details><summary><b>Answer</b>"  # then "(open after running the cell)"
STUDENT_LEAVES_OUT = re.compile(r"(?<![\w/.])(bench|tests|docs|solutions|tools)/")


@pytest.mark.parametrize("name", assignments())
def test_every_think_first_answer_is_hidden_until_predicted(name):
    """Predict, then run: each "Think first" question is answered, after at least one code cell
    that checks it, in a collapsed ``<details>`` block, and no answer sits in plain view."""
    cells = _cells(name)
    questions = [i for i, c in enumerate(cells) if THINK_FIRST in c.source]
    for cell in cells:
        if cell.cell_type == "markdown":
            assert "**Answer.**" not in cell.source, f"{cell.get('id')}: an answer in plain view"
            if HIDDEN_ANSWER in cell.source:
                assert cell.source.startswith(HIDDEN_ANSWER), f"{cell.get('id')}: not at its top"
                assert cell.source.rstrip().count("</details>") == 1, cell.get("id")
    answers = [k for k, c in enumerate(cells) if c.source.startswith(HIDDEN_ANSWER)]
    assert len(answers) >= len(questions), f"{name}: more Think first questions than answers"
    for i in questions:  # an answer may come sections later ("section 7 measures it")
        later = [k for k in answers if k > i]
        assert later, f"{cells[i].get('id')}: a Think first without a hidden answer after it"
        between = cells[i + 1 : later[0]]
        assert any(c.cell_type == "code" for c in between), (
            f"{cells[i].get('id')}: no cell between the question and its answer"
        )
    if name[:2] in {"01", "02", "03", "04", "06", "07"}:
        assert len(questions) >= 2, f"{name}: fewer than two Think first questions"


@pytest.mark.parametrize("name", assignments())
def test_students_are_not_sent_to_files_their_edition_leaves_out(name):
    """The student edition has no bench/, tests/, docs/, solutions/ or tools/ (see
    tools/student_edition.py): no markdown cell of a notebook names a path inside them."""
    for cell in _cells(name):
        if cell.cell_type == "markdown":
            found = STUDENT_LEAVES_OUT.findall(cell.source)
            assert not found, f"{cell.get('id')}: names {found}, absent from the student edition"


STUDENT_READ_MODULES = (
    "encoder",
    "jax_encoder",
    "minilm",
    "mlm",
    "model",
    "modern_encoder",
    "pretraining",
    "retrieval",
    "wordpiece",
)
"""encoder_lib modules whose code the notebooks send students to read."""


@pytest.mark.parametrize("module", STUDENT_READ_MODULES)
def test_library_docstrings_students_read_name_no_instructor_file(module):
    """Docstrings and comments of those modules name no path of bench/, tests/, docs/,
    solutions/ or tools/: the student edition has none of them."""
    source = (SOLUTIONS.parent / "encoder_lib" / f"{module}.py").read_text()
    found = STUDENT_LEAVES_OUT.findall(source)
    assert not found, f"encoder_lib/{module}.py names {found}, absent from the student edition"


RULES_LINK = "../01_self_attention/01_self_attention.ipynb#Rules-for-answers"


def _rules_section() -> str:
    (cell,) = [c for c in _cells("01_self_attention") if c.get("id") == "rules-for-answers"]
    return cell.source


def test_notebook_01_states_the_rules_for_answers_before_the_setup_cell():
    cells = _cells("01_self_attention")
    rules = next(i for i, c in enumerate(cells) if c.get("id") == "rules-for-answers")
    setup = next(i for i, c in enumerate(cells) if _grade_id(c) == "setup")
    assert rules < setup
    # JupyterLab's anchor for a heading: its text with spaces as hyphens
    assert _rules_section().startswith("### Rules for answers\n")


@pytest.mark.parametrize("name", [n for n in assignments() if n != "01_self_attention"])
def test_every_other_notebook_links_to_the_rules_from_its_introduction(name):
    assert RULES_LINK in _cells(name)[0].source


def test_what_the_rules_say_is_never_allowed_is_refused_by_the_source_rules():
    """Each name the students' "Never in an answer cell" list gives is refused by
    ``encoder_lib.grading.kernel.source_rules`` when an answer uses it (the text and the engine agree)."""
    from encoder_lib.grading.kernel.source_rules import aliases, cell_breaches, parse

    never = next(line for line in _rules_section().split("\n- ") if line.startswith("Never"))
    named = re.findall(r"`([A-Za-z_][\w.]*)(?:\(\))?`", never)
    assert len(named) >= 15, named
    for name in named:
        root = name.split(".")[0]
        source = f"import {root}\n\ndef answer(x):\n    return {name}\n"
        if root in ("exec", "eval", "globals", "type"):
            source = f"def answer(x):\n    return {name}\n"
        elif name.startswith("__"):  # a function's insides
            source = f"def answer(x):\n    return answer.{name}\n"
        breaches = cell_breaches("answer", source, aliases([parse(source)]), None)
        assert breaches, f"the rules text forbids `{name}`, but source_rules accepts {source!r}"
