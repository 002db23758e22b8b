"""What a student sees when a check fails, in a real kernel: a short block that names the
exercise, the call, the mistake and, for an exception, the student's own line; no frame of the
grader, no chained "direct cause". The full traceback is one switch away."""

from __future__ import annotations

import re

import nbformat
import pytest
from nbclient import NotebookClient

from encoder_lib.grading import GradingError
from encoder_lib.grading.feedback import WIDTH

SETUP = (
    "import torch\nfrom encoder_lib import grading\nfrom encoder_lib.course import setup_notebook\n"
    "setup_notebook()\n"
)
UNBIASED = (
    "def layer_norm(x, weight, bias, eps=1e-5):\n"
    "    mean = x.mean(dim=-1, keepdim=True)\n"
    "    var = x.var(dim=-1, keepdim=True)\n"
    "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"
)
RAISES = (
    "def layer_norm(x, weight, bias, eps=1e-5):\n"
    "    mean = x.mean(dim=-1, keepdim=True)\n"
    "    var = x.var(dim=5, keepdim=True)\n"
    "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"
)
STUB = "def layer_norm(x, weight, bias, eps=1e-5):\n    raise NotImplementedError()\n"
CHECK = "grading.check_layer_norm(layer_norm)\nprint('Correct')\n"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def outputs() -> dict[str, list]:
    """Run each answer and its test cell in one real kernel; the test cells' outputs by name."""
    answers = {"stub": STUB, "unbiased": UNBIASED, "raises": RAISES}
    cells = [nbformat.v4.new_code_cell(SETUP)]
    for source in answers.values():
        cells += [nbformat.v4.new_code_cell(source), nbformat.v4.new_code_cell(CHECK)]
    cells += [
        nbformat.v4.new_code_cell("grading.check_layer_norm(never_defined)\n"),
        nbformat.v4.new_code_cell("print(1)\nnever_defined + 1\n"),
        nbformat.v4.new_code_cell("grading.show_full_tracebacks(True)"),
        nbformat.v4.new_code_cell(STUB),
        nbformat.v4.new_code_cell(CHECK),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=120).execute()
    by_name = {name: nb.cells[2 + 2 * i].outputs for i, name in enumerate(answers)}
    by_name["undefined"] = nb.cells[-5].outputs
    by_name["ordinary"] = nb.cells[-4].outputs
    by_name["full"] = nb.cells[-1].outputs
    return by_name


def _block(outputs: list) -> list[str]:
    (error,) = [o for o in outputs if o.output_type == "error"]
    assert not [o for o in outputs if o.output_type == "stream"], "nothing else is printed"
    return [ANSI.sub("", line) for text in error.traceback for line in text.splitlines()]


@pytest.mark.parametrize("name", ["stub", "unbiased", "raises"])
def test_a_failure_is_a_short_block_without_the_graders_frames(outputs, name):
    lines = _block(outputs[name])
    assert 2 <= len(lines) <= 10, "\n".join(lines)
    text = "\n".join(lines)
    assert "encoder_lib" not in text and "Traceback" not in text
    assert "direct cause" not in text and "During handling" not in text
    assert all(len(line) <= WIDTH for line in lines), text
    assert lines[0].startswith("Exercise 1 · layer_norm")
    if name != "stub":  # an unfinished exercise was not tried on anything
        assert "tried:" in text and "layer_norm(x, weight, bias) with x of shape" in text


def test_an_unfinished_exercise_says_so(outputs):
    text = " ".join(_block(outputs["stub"]))
    assert "not written yet" in text and "raise NotImplementedError()" in text


def test_a_wrong_answer_is_named(outputs):
    text = " ".join(" ".join(_block(outputs["unbiased"])).split())
    assert "unbiased variance, dividing by D - 1" in text


def test_an_exception_points_at_the_students_line(outputs):
    lines = _block(outputs["raises"])
    (where,) = [line for line in lines if "your code:" in line]
    assert re.search(r"Cell In\[\d+\], line 3, in layer_norm: var = x.var\(dim=5", where), where
    assert "IndexError" in " ".join(lines)


def test_a_test_cell_run_before_its_answer_says_what_to_run(outputs):
    lines = _block(outputs["undefined"])
    assert len(lines) == 3, lines
    assert "never_defined is not defined: run the cell that defines it" in " ".join(lines)


def test_other_name_errors_keep_their_usual_traceback(outputs):
    (error,) = [o for o in outputs["ordinary"] if o.output_type == "error"]
    text = ANSI.sub("", "\n".join(error.traceback))
    assert "Traceback" in text and "never_defined + 1" in text


def test_the_full_traceback_is_one_switch_away(outputs):
    (error,) = [o for o in outputs["full"] if o.output_type == "error"]
    text = ANSI.sub("", "\n".join(error.traceback))
    assert "Traceback" in text and "runner.py" in text and "not written yet" in text


def test_the_message_of_a_failure_holds_everything_in_one_line():
    error = GradingError("it is wrong.", tried="f(x)", exercise="Exercise 1 · f", where="Cell 1")
    assert str(error) == "f(x): it is wrong. (your code: Cell 1)"
    assert error.lines() == [
        "Exercise 1 · f: not right yet",
        "  tried:     f(x)",
        "  problem:   it is wrong.",
        "  your code: Cell 1",
    ]
