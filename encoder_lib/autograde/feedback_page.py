"""Feedback pages that work offline and wrap long lines.

``nbgrader generate_feedback`` writes one HTML page per graded notebook. nbgrader's own page
loads MathJax from a CDN to typeset the maths (so a student reading it offline, or behind a
firewall, sees raw ``$\\sqrt{d_k}$``) and shows outputs in ``<pre>`` blocks that do not wrap (so
the end of a long error message is cut off at the edge of its box).

``OfflineFeedbackExporter`` is nbconvert's ``HTMLExporter`` with one step added after it:
``offline_html`` converts the TeX in markdown cells (and ``text/latex`` outputs) to MathML,
which every current browser draws by itself, removes the scripts that would be fetched from the
network, and adds a style sheet that wraps output lines inside the page and spaces the columns
of markdown tables; ``name_test_cells``
then lists each test cell in the page's contents by its exercise ("Exercise 2 · LayerNorm")
rather than nbgrader's "Test cell" for all of them, the title read from the verdict autograde
kept in the cell's metadata (``records``). Wire it with
``c.GenerateFeedback.exporter_class`` (see nbgrader_config.py). Nothing here reads files of the
repository: any machine with encoder_lib, nbconvert and latex2mathml installed can use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from bs4 import BeautifulSoup, NavigableString
from jinja2 import BytecodeCache
from latex2mathml.converter import convert
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

from encoder_lib.autograde import records

__all__ = [
    "TABLE_CSS",
    "WRAP_CSS",
    "OfflineFeedbackExporter",
    "as_nbconvert_does",
    "name_test_cells",
    "offline_html",
    "exercise_titles",
    "tex_to_mathml",
]

# $$display$$, \[display\], \(inline\), $inline$. An inline $ opens before a non-space and closes
# after one, not before a digit ("costs $5 or $6" is not maths); \$ is a dollar sign.
_MATH = re.compile(
    r"(?<!\\)\$\$(?P<d1>.+?)(?<!\\)\$\$"
    r"|\\\[(?P<d2>.+?)\\\]"
    r"|\\\((?P<i1>.+?)\\\)"
    r"|(?<![\\$])\$(?![\s$])(?P<i2>.+?)(?<![\\\s])\$(?!\d)",
    re.DOTALL,
)
# Where maths is typeset: rendered markdown and text/latex outputs. Never inside these tags.
_MATH_AREAS = ".text_cell_render, .output_latex, .output_markdown"
_SKIP = {"pre", "code", "script", "style", "math", "textarea"}

WRAP_CSS = """
/* encoder_lib.autograde.feedback_page: long output lines wrap inside the page */
div.output_area, div.output_subarea, div.output_text { min-width: 0; max-width: 100%; }
div.output_subarea { overflow-x: visible; }
div.output_area pre, div.output_subarea pre, div.output_text pre {
  white-space: pre-wrap;
  overflow-wrap: anywhere;
  word-break: normal;
}
div.input_area { overflow-x: auto; }
math[display="block"] { display: block; margin: 0.6em 0; overflow-x: auto; }
"""

TABLE_CSS = """
/* encoder_lib.autograde.feedback_page: markdown tables with space between their columns */
.text_cell_render table { border-collapse: collapse; margin: 0.6em 0; }
.text_cell_render th, .text_cell_render td {
  padding: 0.25em 1em 0.25em 0;
  text-align: left;
  vertical-align: top;
  border-bottom: 1px solid #ddd;
}
"""


def tex_to_mathml(tex: str, display: bool) -> str | None:
    """MathML for ``tex``, or None when it cannot be converted (the TeX is then shown as is)."""
    try:
        mathml = convert(tex.strip(), display="block" if display else "inline")
    except Exception:  # latex2mathml raises many kinds of errors on TeX it does not know
        return None
    return None if "<merror" in mathml else mathml


def _typeset(text: NavigableString) -> None:
    """Replace the maths in one text node by MathML elements."""
    pieces, last = [], 0
    for match in _MATH.finditer(text):
        display = match.group("d1") is not None or match.group("d2") is not None
        tex = next(g for g in match.groupdict().values() if g is not None)
        mathml = tex_to_mathml(tex, display)
        if mathml is None:
            continue
        pieces += [NavigableString(text[last : match.start()])]
        pieces += list(BeautifulSoup(mathml, "html.parser").contents)
        last = match.end()
    if not pieces:
        return
    pieces.append(NavigableString(text[last:]))
    for piece in pieces:
        text.insert_before(piece)
    text.extract()


def offline_html(html: str) -> str:
    """The same page with its maths as MathML, no script fetched from the network, and output
    lines that wrap."""
    return _edited(html, _make_offline)


# nbconvert's highlighted code blocks hold most of a page's tags (a span per token: 5,430 of the
# 6,958 tags of notebook 01's page) and nothing this module changes (maths is never typeset in
# <pre>). They are set aside as comments while the rest of the page is parsed and edited, then put
# back as they were: parsing the whole page took about as long as rendering it.
_CODE_BLOCK = re.compile(r'<div class="[^"]*\bhighlight\b[^"]*">\s*<pre>.*?</pre>\s*</div>', re.S)
_SET_ASIDE = re.compile(r"<!--encoder-lab-code-(\d+)-->")


def _edited(html: str, *edits, first=None) -> str:
    """``html`` after each of ``edits`` has changed its parsed page (code blocks untouched, but
    written as a parse would write them back: ``_as_reparsed``). ``first``: an edit made in a
    parse of its own before the others, the page written back in between, as nbconvert's
    HTMLExporter does before them (a parse of HTML that is not well formed, a markdown cell's
    ``<details>`` around a list, is not written back the same way twice)."""
    kept: list[str] = []

    def set_aside(match: re.Match) -> str:
        kept.append(_as_reparsed(match.group(0)))
        return f"<!--encoder-lab-code-{len(kept) - 1}-->"

    page = _CODE_BLOCK.sub(set_aside, html)
    if first is not None:
        soup = BeautifulSoup(page, "html.parser")
        first(soup)
        page = str(soup)
    soup = BeautifulSoup(page, "html.parser")
    for edit in edits:
        edit(soup)
    return _SET_ASIDE.sub(lambda m: kept[int(m.group(1))], str(soup))


# A highlighted block as Pygments writes it: spans, divs and a <pre> with a class at most, text
# escaped by Pygments' escape_html (&amp; &lt; &gt; &quot; &#39;).
_PLAIN_TAG = re.compile(r'</?(?:span|div|pre)(?: class="[^"&<>]*")?>')
_ODD = re.compile(r"&(?!amp;|lt;|gt;|quot;|#39;)|\r")
_CLASS = re.compile(r' class="([^"]*)"')  # quotes in the text are &quot;: this is a tag's


def _as_reparsed(block: str) -> str:
    """The code block as BeautifulSoup writes back what it parsed (which is what nbconvert's
    HTMLExporter returns): character references decoded, then ``&``, ``<`` and ``>`` escaped
    again, so ``&quot;`` and ``&#39;`` become plain quotes; a class attribute is a list of
    names, written back one space apart (``class=" highlight"`` becomes ``class="highlight"``).
    Done by hand for a block as Pygments writes it, by BeautifulSoup for anything else."""
    if _ODD.search(block) or len(_PLAIN_TAG.findall(block)) != block.count("<"):
        return str(BeautifulSoup(block, "html.parser"))
    block = _CLASS.sub(lambda m: f' class="{" ".join(m.group(1).split())}"', block)
    return block.replace("&quot;", '"').replace("&#39;", "'")


def as_nbconvert_does(soup: BeautifulSoup, log=None) -> None:
    """What nbconvert's ``HTMLExporter.from_notebook_node`` (7.x) does to the page its template
    wrote: alternative text for images without any (and a warning in ``log``), and focusable
    JupyterLab cells (the feedback template is the classic one, which has none). nbconvert
    parses the whole page for it; done here on the page with its highlighted code blocks set
    aside (most of its tags), as the offline edits are."""
    missing = soup.select("img:not([alt])")
    for img in missing:
        img.attrs["alt"] = "No description has been provided for this image"
    if missing and log is not None:
        log.warning("Alternative text is missing on %s image(s).", len(missing))
    for elem in soup.select(".jp-Notebook div.jp-Cell-inputWrapper"):
        elem.attrs["tabindex"] = "0"
    for elem in soup.select(".jp-Notebook div.jp-OutputArea-output"):
        elem.attrs["tabindex"] = "0"


def _make_offline(soup: BeautifulSoup) -> None:
    for script in soup.find_all("script"):
        remote = re.match(r"(https?:)?//", script.get("src", ""))
        if remote or script.get("type") == "text/x-mathjax-config":
            script.decompose()
    for area in soup.select(_MATH_AREAS):
        texts = [
            t
            for t in area.find_all(string=True)
            if "$" in t or "\\" in t
            if not any(parent.name in _SKIP for parent in t.parents)
        ]
        for text in texts:
            _typeset(text)
    style = soup.new_tag("style")
    style.string = WRAP_CSS + TABLE_CSS
    (soup.head or soup).append(style)


def exercise_titles(nb) -> dict[str, str]:
    """grade_id -> its exercise's title, for every test cell of the autograded notebook ``nb``
    whose verdict (``records``, in the cell's metadata) has one. A test cell that no exercise
    judges is titled by its own grade_id in its record: that says nothing more than the link,
    and is left out."""
    titles: dict[str, str] = {}
    for cell in nb.get("cells", []):
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        verdict = cell.get("metadata", {}).get(records.KEY, {}).get("verdict", {})
        title = verdict.get("title") if isinstance(verdict, dict) else None
        if grade_id and isinstance(title, str) and title not in ("", grade_id):
            titles[grade_id] = title
    return titles


def name_test_cells(soup: BeautifulSoup, titles: Mapping[str, str]) -> None:
    """Give each "Test cell" entry of the contents list (nbgrader's ``#toc``, one link per graded
    cell, to ``#<grade_id>``) the title of its exercise; ``titles`` maps grade_ids to titles
    (``exercise_titles``). An entry with no title keeps nbgrader's "Test cell"."""
    links = [a for a in soup.select("#toc a[href^='#']") if a.get_text(strip=True) == "Test cell"]
    for link in links:
        title = titles.get(link["href"][1:])
        if title:
            link.string = title


class _CompiledTemplates(BytecodeCache):
    """Jinja's compiled templates, kept in this process's memory for every exporter after the
    first. nbgrader makes a new exporter for each submission, and each compiled the same
    templates again (about 0.2 s a notebook). Jinja checks each template's source against its
    checksum before it uses the compiled code, so an edited template is compiled again."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


_COMPILED = _CompiledTemplates()


class OfflineFeedbackExporter(HTMLExporter):
    """nbconvert's HTMLExporter (with nbgrader's feedback template, as nbgrader configures it)
    followed by ``offline_html`` and ``name_test_cells`` (with the notebook's own titles); its
    templates are compiled once per process, and nbconvert's own edit of the page
    (``as_nbconvert_does``) parses the page without its highlighted code blocks, as ours does,
    not the whole page. The page is the same, byte for byte
    (tests/autograde/test_feedback_page_html.py)."""

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = _COMPILED
        return environment

    def from_notebook_node(self, nb, resources=None, **kw):
        # HTMLExporter.from_notebook_node up to its template (the filters it registers for this
        # notebook, its resources), then the template, without its BeautifulSoup pass.
        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        highlight_code = self.filters.get(
            "highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)
        )
        resources = self._init_resources(resources)
        filter_data_type = WidgetsDataTypeFilter(
            notebook_metadata=self._nb_metadata, parent=self, resources=resources
        )
        self.register_filter("highlight_code", highlight_code)
        self.register_filter("filter_data_type", filter_data_type)
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        titles = exercise_titles(nb)
        page = _edited(
            html,
            _make_offline,
            lambda soup: name_test_cells(soup, titles),
            first=lambda soup: as_nbconvert_does(soup, self.log),
        )
        return page, resources
