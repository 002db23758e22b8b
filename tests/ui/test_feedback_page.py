"""The feedback page a student receives, opened in a real browser with the network blocked: its
maths is typeset and a long error line wraps inside the page.

The page is made by real nbgrader (generate_assignment, autograde, generate_feedback) with the
repository's nbgrader_config.py, from a submission whose first answer raises an error with a
long message. The same page made by nbgrader's own exporter is the control: raw TeX, and the long
line runs past the edge.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tools.build_course import ROOT, SOLUTIONS

NAME = "01_self_attention"
LONG = "the message goes on " * 15 + "and_one_token_without_any_space_" * 6


def _nbgrader(course: Path, *args: str) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.setdefault("PYTHONWARNINGS", "ignore")
    subprocess.run(
        ["nbgrader", *args, "--log-level=WARN"], cwd=course, env=env, check=True, timeout=600
    )


@pytest.fixture(scope="module")
def feedback(tmp_path_factory) -> dict[str, Path]:
    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(SOLUTIONS / NAME, course / "solutions" / NAME)
    _nbgrader(course, "generate_assignment", NAME, "--force")
    nb = nbformat.read(course / "notebooks" / NAME / f"{NAME}.ipynb", as_version=4)
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source = f"raise RuntimeError({LONG!r})"
    submitted = course / "submitted" / "s001" / NAME
    submitted.mkdir(parents=True)
    nbformat.write(nb, submitted / f"{NAME}.ipynb")
    _nbgrader(course, "autograde", NAME)
    _nbgrader(course, "generate_feedback", NAME)
    _nbgrader(
        course,
        "generate_feedback",
        NAME,
        "--GenerateFeedback.exporter_class=nbconvert.exporters.HTMLExporter",
        "--CourseDirectory.feedback_directory=feedback_plain",
    )
    return {
        kind: course / folder / "s001" / NAME / f"{NAME}.html"
        for kind, folder in (("ours", "feedback"), ("plain", "feedback_plain"))
    }


def _open_offline(browser, page_file: Path):
    """Open ``page_file`` with every request other than file:// refused; return the page and
    the refused URLs."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    refused: list[str] = []

    def route(request_route):
        if request_route.request.url.startswith("file://"):
            request_route.continue_()
        else:
            refused.append(request_route.request.url)
            request_route.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.goto(page_file.as_uri())
    page.wait_for_load_state("load")
    return page, refused


# A fraction is typeset when its numerator is drawn above its denominator.
_FRACTIONS_STACKED = """() => [...document.querySelectorAll('mfrac')].map(f => {
  const [num, den] = f.children;
  return num.getBoundingClientRect().bottom <= den.getBoundingClientRect().top + 1;
})"""
_LONG_LINE = """(marker) => {
  const outputs = document.querySelectorAll('.output_subarea pre');
  const pre = [...outputs].find(p => p.textContent.includes(marker));
  if (!pre) return null;
  const box = pre.getBoundingClientRect();
  const line = parseFloat(getComputedStyle(pre).lineHeight) || 16;
  return {right: box.right, page: document.documentElement.clientWidth,
          overflow: pre.scrollWidth - pre.clientWidth, lines: box.height / line};
}"""

# Per table row, the space between each cell's text and the next cell's.
_COLUMN_GAPS = """() => [...document.querySelectorAll('.text_cell_render table tr')].map(row => {
  const texts = [...row.children].map(c => {
    const r = document.createRange(); r.selectNodeContents(c); return r.getBoundingClientRect();
  });
  return texts.slice(0, -1).map((t, i) => texts[i + 1].left - t.right);
}).flat()"""


def test_feedback_typesets_maths_offline_and_wraps_long_lines(feedback, browser, artifacts):
    page, refused = _open_offline(browser, feedback["ours"])
    page.screenshot(path=str(artifacts / "feedback-ours.png"), full_page=True)
    assert refused == []  # the page asks the network for nothing
    assert page.locator(".text_cell_render math").count() > 10
    stacked = page.evaluate(_FRACTIONS_STACKED)
    assert stacked and all(stacked)
    markdown = " ".join(page.locator(".text_cell_render").all_text_contents())
    assert "\\sqrt" not in markdown and "\\frac" not in markdown
    line = page.evaluate(_LONG_LINE, "the message goes on")
    assert line is not None, "the long error line is not in the feedback"
    assert line["right"] <= line["page"] and line["overflow"] <= 0
    assert line["lines"] >= 2  # wrapped, not cut
    page.context.close()


def test_nbgrader_own_feedback_page_fails_both(feedback, browser, artifacts):
    """The control: without encoder_lib.autograde.feedback_page the checks above fail."""
    page, refused = _open_offline(browser, feedback["plain"])
    page.screenshot(path=str(artifacts / "feedback-nbgrader.png"), full_page=True)
    assert any("mathjax" in url.lower() for url in refused)
    assert page.locator("math").count() == 0
    assert "\\sqrt" in " ".join(page.locator(".text_cell_render").all_text_contents())
    line = page.evaluate(_LONG_LINE, "the message goes on")
    assert line["overflow"] > 0 or line["right"] > line["page"]
    assert min(page.evaluate(_COLUMN_GAPS)) < 8  # table columns touch
    page.context.close()


def test_feedback_lists_each_test_by_its_exercise_and_speaks_to_a_report(feedback, browser):
    """The contents list names exercises, not "Test cell" each time; an unfinished exercise is
    reported as such, without the notebook's "run its cell, then this one"."""
    page, _ = _open_offline(browser, feedback["ours"])
    contents = page.locator("#toc li").all_inner_texts()
    assert contents and contents[0].startswith("Exercise 1 · ")
    assert not [entry for entry in contents if entry.startswith("Test cell")]
    outputs = " ".join(page.locator(".output_subarea").all_text_contents())
    assert "was not written" in outputs and "run its cell" not in outputs
    page.context.close()


def test_feedback_tables_have_space_between_columns(feedback, browser):
    """The notebook's intro table: no column's text touches the next one's."""
    page, _ = _open_offline(browser, feedback["ours"])
    gaps = page.evaluate(_COLUMN_GAPS)
    assert gaps and min(gaps) >= 8, gaps
    page.context.close()
