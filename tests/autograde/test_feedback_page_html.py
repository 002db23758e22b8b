"""encoder_lib.autograde.feedback_page: maths as MathML, no network scripts, wrapping outputs.

The page in a real browser (network blocked) is checked in tests/ui/test_feedback_page.py.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter

from encoder_lib.autograde import feedback_page, records
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


# --- one parse of the page, the same bytes --------------------------------------------------------

SOLUTIONS = sorted((Path(__file__).resolve().parents[2] / "solutions").glob("[0-9]*/*.ipynb"))


def _feedback_exporter() -> OfflineFeedbackExporter:
    """The exporter as nbgrader's generate_feedback builds and configures it (its template,
    its header preprocessor), as nbgrader_config.py names it."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory

    app = GenerateFeedback(coursedir=CourseDirectory())
    exporter = OfflineFeedbackExporter(parent=app, config=app.config)
    exporter.register_preprocessor(CSSHTMLHeaderPreprocessor)
    return exporter


def _as_graded(nb: nbformat.NotebookNode) -> tuple[nbformat.NotebookNode, dict]:
    """The notebook and resources as nbgrader's GetGrades hands them to the template: every
    graded cell scored, every answer commented (in markdown, with maths), a title recorded."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            meta["score"] = meta.get("points", 0) / 2
            title = f"Exercise · {meta['grade_id']}"
            records.store(cell, records.Verdict(meta["grade_id"], title, passed=True))
        if meta.get("solution"):
            meta["comment"] = 'Divide by $\\sqrt{d_k}$, not by `D` & <b>not</b> "D - 1".'
    scores = {"score": 3.5, "max_score": 7.0, "late_penalty": 0.5, "notebook": "nb"}
    return nb, {"nbgrader": scores}


def _tricky_notebook() -> nbformat.NotebookNode:
    """What the solution notebooks may not hold: quotes, ampersands and angle brackets in code,
    an image with no alternative text, an error with ANSI colours, TeX and HTML outputs."""
    code = nbformat.v4.new_code_cell(
        "s = \"it's <b>&amp;</b>\"  # 'quotes' & <tags>\nprint(f'{s!r}')",
        outputs=[
            nbformat.v4.new_output("stream", name="stdout", text='it\'s <b>&amp;</b> & "x"\n'),
            nbformat.v4.new_output(
                "display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}
            ),
            nbformat.v4.new_output(
                "display_data", data={"text/latex": "$\\frac{a}{b}$", "text/html": "<i>&lt;</i>"}
            ),
            nbformat.v4.new_output(
                "error", ename="ValueError", evalue="bad", traceback=["\x1b[31mValueError\x1b[0m"]
            ),
        ],
    )
    code.metadata["nbgrader"] = {"grade": True, "grade_id": "test_x", "points": 2}
    markdown = nbformat.v4.new_markdown_cell(
        "Maths $x_{i}$, code `a < b`, a fence:\n\n```python\nx = '&' if a < b else \"\"\n```\n\n"
        "<img src='data:image/png;base64,iVBORw0KGgo='>"
    )
    return nbformat.v4.new_notebook(
        cells=[markdown, code], metadata={"language_info": {"name": "python"}}
    )


def _page_as_before(exporter, nb, resources) -> str:
    """The page as this module made it before it parsed the page once: nbconvert's
    HTMLExporter (which parses the page and writes it back), then the offline edits in a
    second parse, with the highlighted code blocks set aside verbatim."""
    html, _ = HTMLExporter.from_notebook_node(exporter, nb, resources)
    kept: list[str] = []

    def set_aside(match: re.Match) -> str:
        kept.append(match.group(0))
        return f"<!--encoder-lab-code-{len(kept) - 1}-->"

    soup = BeautifulSoup(feedback_page._CODE_BLOCK.sub(set_aside, html), "html.parser")
    feedback_page._make_offline(soup)
    name_test_cells(soup, exercise_titles(nb))
    return feedback_page._SET_ASIDE.sub(lambda m: kept[int(m.group(1))], str(soup))


@pytest.mark.parametrize(
    "nb", [*SOLUTIONS, "tricky"], ids=lambda p: p if isinstance(p, str) else p.parent.name
)
def test_the_page_is_the_same_bytes_as_with_two_parses(nb):
    """The solution notebooks (every output kept, markdown with maths, ``<details>`` around
    lists) and a notebook of awkward characters and outputs."""
    tricky = nb == "tricky"
    nb, resources = _as_graded(_tricky_notebook() if tricky else nbformat.read(nb, as_version=4))
    exporter = _feedback_exporter()
    before = _page_as_before(exporter, copy.deepcopy(nb), copy.deepcopy(resources))
    after, _ = exporter.from_notebook_node(copy.deepcopy(nb), copy.deepcopy(resources))
    assert after == before
    assert "<math" in after and "Exercise · test_" in after
    if tricky:
        assert after.count("No description has been provided for this image") == 2


def test_a_code_block_is_written_back_as_a_parse_would():
    """The by-hand rewrite of a Pygments block equals BeautifulSoup's, and a block that is not
    plain Pygments goes through BeautifulSoup."""
    blocks = [
        '<div class=" highlight hl-ipython3"><pre><span></span><span class="n">s</span> '
        '<span class="o">=</span> <span class="s2">&quot;it&#39;s &lt;b&gt; &amp;&quot;</span>'
        "\n</pre></div>",
        '<div class="highlight"><pre><a href="x">&copy; &#x27;</a></pre></div>',
    ]
    for block in blocks:
        assert feedback_page._as_reparsed(block) == str(BeautifulSoup(block, "html.parser"))
