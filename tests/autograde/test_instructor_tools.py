"""The instructor's tools: nbgrader_config.py loads without torch, an unfinished exercise in a
returned report, the grading command's summary and its help."""

from __future__ import annotations

import subprocess
import sys

import pytest
from traitlets.utils.importstring import import_item

from encoder_lib.autograde import distributed, records
from encoder_lib.autograde.judge_execute import for_report
from encoder_lib.grading import runner
from encoder_lib.grading.feedback import GradingError, Hinted, NotWrittenYet
from tools.build_course import ROOT

LOAD_CONFIG = (
    "import sys\n"
    "from traitlets.config.loader import PyFileConfigLoader\n"
    "c = PyFileConfigLoader('nbgrader_config.py', path=sys.argv[1]).load_config()\n"
    "print('torch' in sys.modules, *c.Autograde.sanitize_preprocessors, "
    "*c.Autograde.autograde_preprocessors)\n"
)


def test_nbgrader_config_loads_without_importing_torch():
    """Every nbgrader command loads nbgrader_config.py; the grader's preprocessors are named as
    strings, imported (with torch) only when nbgrader grades."""
    out = subprocess.run(
        [sys.executable, "-c", LOAD_CONFIG, str(ROOT)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] == "False"
    for name in out[1:]:
        assert isinstance(import_item(name), type), name
    assert "encoder_lib.autograde.overwrite.HiddenTestsOverwriteCells" in out
    assert "nbgrader.preprocessors.OverwriteCells" not in out


def _unfinished(wording: str, name: str, mistake: str, root: str | None = None) -> NotWrittenYet:
    """A not-written error as the runner raises it: its wording filled with ``name``."""
    problem = wording.format(name=name)
    return NotWrittenYet(problem, mistake=mistake, root=root, parts={"name": name})


@pytest.mark.parametrize(
    ("error", "in_the_report"),
    [
        (
            _unfinished(runner.NOT_WRITTEN, "layer_norm", "not-written"),
            "layer_norm was not written: the submitted notebook still has the `raise "
            "NotImplementedError()` it was given, so this test earns no points.",
        ),
        (
            _unfinished(runner.CALLS_STUB, "LayerNorm.forward", "calls-unwritten"),
            "it calls LayerNorm.forward, which was not written (the submitted notebook still "
            "raises NotImplementedError() there), so this test earns no points.",
        ),
        (  # the runner's trace names the earlier exercise that is not written as the root
            _unfinished(runner.CALLS_STUB, "layer_norm", "not-written", root="test_layer_norm"),
            "it calls layer_norm, which was not written (the submitted notebook still raises "
            "NotImplementedError() there), so this test earns no points.",
        ),
    ],
)
def test_an_unfinished_exercise_is_reported_without_run_this_cell(error, in_the_report):
    in_the_notebook = error.problem
    assert "run its cell" in in_the_notebook  # what the notebook's own check says
    reported = for_report(error)
    assert reported.problem == in_the_report
    assert type(reported) is NotWrittenYet
    assert (reported.mistake, reported.root, reported.parts) == (
        error.mistake,
        error.root,
        error.parts,
    )
    assert error.problem == in_the_notebook  # a new error: the notebook's one is unchanged


def test_other_messages_are_reported_as_the_notebook_shows_them():
    problem = "it uses the unbiased variance, dividing by D - 1."
    error = GradingError(Hinted(problem, "a hint"), "f(x)", "Exercise 1", mistake="unbiased")
    error.observation = "what the kernel answered"
    reported = for_report(error)
    assert (reported.problem, reported.hint, error.hint) == (problem, None, "a hint")
    assert (reported.tried, reported.exercise, reported.mistake) == (
        "f(x)",
        "Exercise 1",
        "unbiased",
    )
    assert reported.observation == "what the kernel answered"


def test_a_verdict_keeps_the_parts_of_its_wording():
    error = _unfinished(runner.NOT_WRITTEN, "layer_norm", "not-written")
    verdict = records.Verdict("layer_norm", "Exercise 1 · layer_norm", False, parts=error.parts)
    assert verdict.to_json()["parts"] == {"name": "layer_norm"}
    assert records.Verdict.from_json(verdict.to_json()) == verdict
    passed = records.Verdict("layer_norm", "Exercise 1 · layer_norm", True)
    assert "parts" not in passed.to_json()  # records without parts read as before
    assert records.Verdict.from_json(passed.to_json()) == passed


def test_summary_gives_one_total_and_says_what_the_grading_part_is():
    summary = distributed.Summary(graded=[("s1", "a"), ("s2", "a")], seconds=15.7)
    summary.grading_seconds, summary.workers = 6.2, {"w1"}
    assert summary.lines() == [
        "graded 2, flagged 0, failed 0, skipped 0 (already graded) in 15.7 s, of which 6.2 s "
        "grading (3.10 s per submission with 1 worker; the rest starts and stops the cluster "
        "and reads the gradebook)"
    ]


def test_every_option_of_the_grading_command_has_help():
    actions = distributed.argument_parser()._actions
    assert "--course-dir" in {flag for action in actions for flag in action.option_strings}
    assert [a.dest for a in actions if not a.help] == []


def test_overwrite_cells_settings_apply_to_the_courses_subclass():
    from traitlets.config.loader import PyFileConfigLoader

    from encoder_lib.autograde.overwrite import HiddenTestsOverwriteCells

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    assert config.OverwriteCells.add_missing_cells is True  # as docs/INSTRUCTORS.md says
    assert HiddenTestsOverwriteCells(config=config).add_missing_cells is True
