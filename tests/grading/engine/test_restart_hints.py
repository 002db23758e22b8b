"""After a kernel restart, in a real kernel: what a student sees when a cell needs cells that
have not run yet (``encoder_lib.grading.restart_hints``).

The most common beginner stumble: the kernel restarts (or the notebook is reopened) and the
student runs the cell in front of them. A test cell then names an answer that is not defined, and
an answer cell's function needs ``math`` from the setup cell. Each should say what to run, the
setup cell first, in a short block rather than Python's traceback.
"""

from __future__ import annotations

import ast
import re

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from nbclient import NotebookClient
from pipeline import course as C

from encoder_lib.grading.restart_hints import SETUP_NAMES
from tools.build_course import SOLUTIONS, assignments

ASSIGNMENT = "01_self_attention"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SETUP_HINT = "Run the setup cell (the first code cell) first"

# The hints hold before the setup cell has run because every test cell's first line imports
# encoder_lib.grading, which installs them.


def _cell(nb, grade_id: str):
    return next(c for c in nb.cells if C.grade_id(c) == grade_id)


@pytest.fixture(scope="module")
def restarted() -> dict[str, str]:
    """One fresh kernel, the cells of notebook 01 run in a beginner's order after a restart:
    its first test cell, then its answer cell (which uses ``math``), the test cell again, a cell
    using ``torch``, then the setup cell, then the test cell once more. Returns each step's
    error block (ANSI colours removed), "" for none."""
    source = C.read(C.source_notebook(ASSIGNMENT))
    layout = C.layout(C.source_notebook(ASSIGNMENT))
    answer = layout.answers[0]
    test = _cell(source, layout.own_tests[answer][0]).source
    steps = {
        "test first": test,
        "answer": layout.reference[answer],
        "test after answer": test,
        "torch": "x = torch.zeros(3)",
        "setup": _cell(source, "setup").source,
        "test after setup": test,
        "ordinary": "never_defined + 1",
    }
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in steps.values()])
    NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=120).execute()
    found = {}
    for name, cell in zip(steps, nb.cells, strict=True):
        errors = [o for o in cell.outputs if o.output_type == "error"]
        found[name] = ANSI.sub("", "\n".join(errors[0].traceback)) if errors else ""
    return found


def _one_paragraph(block: str) -> str:
    return re.sub(r"\s+", " ", block)


def test_a_test_cell_run_first_says_to_run_the_setup_cell(restarted):
    block = restarted["test first"]
    assert block.startswith("Cannot be checked yet"), block
    assert "Traceback" not in block and "---->" not in block  # no Python traceback
    text = _one_paragraph(block)
    assert "attention_scores is not defined" in text and SETUP_HINT in text
    assert "then the cell that defines attention_scores" in text


def test_an_answer_missing_a_setup_import_says_to_run_the_setup_cell(restarted):
    assert restarted["answer"] == ""  # defining the function needs nothing yet
    block = restarted["test after answer"]
    assert block.startswith("Exercise 1 · attention_scores: cannot be checked yet"), block
    text = _one_paragraph(block)
    assert "attention_scores raised NameError: name 'math' is not defined" in text
    assert "math is imported by the setup cell (the first code cell)" in text
    assert "your code: Cell In[" in text  # the student's line is still shown


def test_any_cell_using_a_setup_name_says_to_run_the_setup_cell(restarted):
    block = restarted["torch"]
    assert block.startswith("Needs the setup cell"), block
    assert "torch is not defined" in _one_paragraph(block)


def test_after_the_setup_cell_all_is_as_usual(restarted):
    assert restarted["setup"] == ""
    assert restarted["test after setup"] == ""  # the answer was defined before the setup ran
    ordinary = restarted["ordinary"]
    assert "Traceback" in ordinary and "NameError: name 'never_defined' is not defined" in ordinary


@pytest.mark.parametrize("name", assignments())
def test_setup_names_cover_what_every_setup_cell_imports(name):
    nb = C.read(SOLUTIONS / name / f"{name}.ipynb")
    code = TransformerManager().transform_cell(_cell(nb, "setup").source)  # %pip -> Python
    imported = {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported - {"setup_notebook"} <= SETUP_NAMES
