"""encoder_lib.autograde.feedback_page: maths as MathML, no network scripts, wrapping outputs.

The page in a real browser (network blocked) is checked in tests/ui/test_feedback_page.py.
"""

from __future__ import annotations

import re
import subprocess
import sys

import nbformat
from bs4 import BeautifulSoup

from encoder_lib.autograde import records
from encoder_lib.autograde.feedback_page import (
    WRAP_CSS,
    OfflineFeedbackExporter,
    exercise_titles,
    name_test_cells,
    offline_html,
    tex_to_mathml,
)

PAGE = """<html><head>
<script src="https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX"></script>
<script type="text/x-mathjax-config">MathJax.Hub.Config({});</script>
<script>var local = 1;</script>
</head><body>
<div class="text_cell_render">
<p>Scale by $\\sqrt{d_k}$, not by \\(\\sqrt{D}\\). It costs \\$5, or $6 for two.</p>
<p>$$
\\operatorname{softmax}(x)_i = \\frac{e^{x_i}}{\\sum_j e^{x_j}}
$$</p>
<p><code>$not maths$</code> and \\[a &amp; b\\]</p>
</div>
<div class="output_subarea output_text"><pre>$output is not markdown$</pre></div>
</body></html>"""


def _soup(html: str) -> BeautifulSoup:
    return BeautifulSoup(html, "html.parser")


def test_maths_becomes_mathml_and_the_rest_stays_text():
    soup = _soup(offline_html(PAGE))
    maths = soup.find_all("math")
    assert [m.get("display") for m in maths] == ["inline", "inline", "block", "block"]
    assert maths[0].find("msqrt") is not None  # \sqrt{d_k}
    assert maths[2].find("mfrac") is not None  # the softmax's fraction
    text = soup.select_one(".text_cell_render").get_text()
    assert "It costs \\$5, or $6 for two." in text  # a dollar sign and a price are not maths
    assert "\\sqrt" not in text.replace("\\$", "")
    assert soup.select_one("code").get_text() == "$not maths$"  # code spans untouched
    assert soup.select_one("pre").get_text() == "$output is not markdown$"


def test_no_script_comes_from_the_network_and_local_ones_stay():
    soup = _soup(offline_html(PAGE))
    scripts = soup.find_all("script")
    assert [s.get_text() for s in scripts] == ["var local = 1;"]


def test_outputs_wrap():
    soup = _soup(offline_html(PAGE))
    assert WRAP_CSS in soup.head.find_all("style")[-1].get_text()
    assert "white-space: pre-wrap" in WRAP_CSS and "overflow-wrap: anywhere" in WRAP_CSS


def test_unknown_tex_is_left_as_written():
    assert tex_to_mathml("\\frac{1}{2}", display=False).startswith("<math")
    assert tex_to_mathml("\\frac{1}{", display=False) is None
    soup = _soup(offline_html('<div class="text_cell_render"><p>see $\\frac{1}{$ here</p></div>'))
    assert soup.find("math") is None and "$\\frac{1}{$" in soup.get_text()


def test_exporter_typesets_a_notebook():
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("The output is $(B, L, D)$ and $$\\hat{x} = x - \\mu$$"),
            nbformat.v4.new_code_cell("1 + 1"),
        ]
    )
    html, _ = OfflineFeedbackExporter(template_name="classic").from_notebook_node(nb)
    soup = _soup(html)
    assert len(soup.select(".text_cell_render math")) == 2
    assert not [s for s in soup.find_all("script") if "mathjax" in s.get("src", "").lower()]


def test_highlighted_code_is_passed_through_byte_for_byte():
    """nbconvert's highlighted code blocks are set aside while the page is parsed: what comes
    back is what nbconvert wrote, and a dollar sign in code is never typeset, while the maths
    around the block is."""
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("Before: $x^2$"),
            nbformat.v4.new_code_cell('price = "$5 and $6"  # $\\alpha$ is not maths here'),
            nbformat.v4.new_markdown_cell("After: $\\sqrt{d}$"),
        ]
    )
    exporter = OfflineFeedbackExporter(template_name="classic")
    plain, _ = super(OfflineFeedbackExporter, exporter).from_notebook_node(nb)
    html, _ = exporter.from_notebook_node(nb)
    code = re.findall(r'<div class="\s*highlight hl-ipython3">.*?</pre>', plain, re.S)
    assert len(code) == 1 and "$5 and $6" in code[0]
    assert code[0] in html
    assert "encoder-lab-code" not in html
    soup = _soup(html)
    assert len(soup.select(".text_cell_render math")) == 2
    assert soup.select_one(".highlight").find("math") is None


# nbgrader's feedback template lists every graded cell in #toc, each test cell as "Test cell".
TOC = """<div id="toc"><ol>
<li><a href="#test_layer_norm">Test cell</a> (Score: 0.0 / 2.0)</li>
<li><a href="#test_not_registered">Test cell</a> (Score: 1.0 / 1.0)</li>
<li><a href="#free_answer">Written response</a> (Score: 1.0 / 1.0)</li>
</ol></div>"""


def _test_cell(grade_id: str, title: str | None) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("check()")
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "points": 1}
    if title is not None:
        verdict = records.Verdict(grade_id.removeprefix("test_"), title, passed=True)
        records.store(cell, verdict)
    return cell


def test_contents_list_names_each_test_after_its_exercise():
    """The titles come from the verdicts autograde kept in the notebook (``records``)."""
    nb = nbformat.v4.new_notebook(
        cells=[
            _test_cell("test_layer_norm", "Exercise 1 · layer_norm"),
            _test_cell("test_not_registered", "test_not_registered"),  # run by the kernel
            _test_cell("test_no_record", None),  # graded before records existed
        ]
    )
    titles = exercise_titles(nb)
    assert titles == {"test_layer_norm": "Exercise 1 · layer_norm"}
    soup = _soup(TOC)
    name_test_cells(soup, titles)
    entries = [li.get_text(" ", strip=True) for li in soup.select("#toc li")]
    assert entries == [
        "Exercise 1 · layer_norm (Score: 0.0 / 2.0)",
        "Test cell (Score: 1.0 / 1.0)",  # a cell no exercise judges keeps nbgrader's word
        "Written response (Score: 1.0 / 1.0)",
    ]
    soup = _soup(TOC)
    name_test_cells(soup, {"test_not_registered": "Exercise 9 · mine"})
    assert "Exercise 9 · mine" in soup.select("#toc li")[1].get_text()


def test_the_page_does_not_import_the_grader():
    """The feedback page reads the notebook, not the exercises: no torch-heavy grader import."""
    code = (
        "import sys, nbformat\n"
        "from encoder_lib.autograde.feedback_page import OfflineFeedbackExporter\n"
        "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1')])\n"
        "OfflineFeedbackExporter(template_name='classic').from_notebook_node(nb)\n"
        "print(sorted(m for m in sys.modules if m.startswith('encoder_lib.grading')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
