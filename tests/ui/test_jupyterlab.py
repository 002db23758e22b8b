"""A real browser drives a real JupyterLab: every notebook, solution and student version.

Each notebook is opened and run once (Run All); then every check in ``SOLUTION_CHECKS`` or
``STUDENT_CHECKS`` looks at the result, and all their complaints are reported together. To check
something more in every notebook, write a function ``check_x(ran) -> list[str]`` (the problems
found, empty when all is well) and add it to the list.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from tools.build_course import SOLUTIONS, assignments
from tools.student_edition import released

# --- driving JupyterLab --------------------------------------------------------------------------
_NOTEBOOK = "window.jupyterapp.shell.currentWidget"
# The kernel is idle and no cell prompt shows "[*]" (queued or running).
_KERNEL_IDLE = f"""() => {{
  const w = window.jupyterapp && {_NOTEBOOK};
  return !!(w && w.sessionContext && w.sessionContext.session
            && w.sessionContext.session.kernel
            && w.sessionContext.session.kernel.status === 'idle');
}}"""
# Once the notebook's kernel has restarted (its session context says so by `kernelChanged`), ask the
# new kernel for its kernel_info and keep the reply's status (or the error) in a global.
_AFTER_RESTART_ASK_KERNEL_INFO = f"""() => {{
  const context = {_NOTEBOOK}.sessionContext;
  window._kernelInfoAfterRestart = null;
  const restarted = () => {{
    context.kernelChanged.disconnect(restarted);
    context.session.kernel.requestKernelInfo().then(
      reply => {{ window._kernelInfoAfterRestart = reply ? reply.content.status : "no reply"; }},
      error => {{ window._kernelInfoAfterRestart = String(error); }});
  }};
  context.kernelChanged.connect(restarted);
}}"""
_ALL_DONE = (
    "() => (" + _KERNEL_IDLE + ")() && "
    "![...document.querySelectorAll('.jp-InputPrompt')].some(p => p.textContent.includes('*'))"
)
# The outputs of every cell as the notebook model holds them (what the kernel sent).
_MODEL_OUTPUTS = f"""() => {{
  const cells = {_NOTEBOOK}.content.model.cells;
  const result = [];
  for (let i = 0; i < cells.length; i++) {{
    const cell = cells.get(i);
    result.push(cell.type === 'code' ? cell.outputs.toJSON() : []);
  }}
  return result;
}}"""


@dataclass
class Ran:
    """A notebook after Run All in the browser."""

    page: object  # playwright Page
    path: Path  # the notebook file the browser opened (a scratch copy)
    notebook: nbformat.NotebookNode  # the same file as read from disk before the run
    outputs: list[list[dict]]  # per cell, the outputs in the browser's notebook model
    artifacts: Path  # where screenshots go
    label: str  # e.g. "solution-01_self_attention"
    notes: list[str] = field(default_factory=list)

    def shot(self, what: str, locator=None) -> None:
        target = self.artifacts / f"{self.label}-{what}.png"
        (locator or self.page).screenshot(path=str(target))


def open_and_run_all(browser, lab, relpath: str, artifacts: Path, label: str) -> Ran:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # ?reset: start from an empty workspace, not the layout an earlier test left behind.
    page.goto(lab.address(f"lab/tree/{relpath}?reset"))
    page.wait_for_function("window.jupyterapp !== undefined", timeout=90_000)
    name = relpath.rsplit("/", 1)[-1]
    page.wait_for_function(
        f"() => {{ const w = {_NOTEBOOK};"
        f" return !!(w && w.context && w.context.path.endsWith({name!r})); }}",
        timeout=90_000,
    )
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_function(_KERNEL_IDLE, timeout=90_000)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    # Wait until the first code cell has run (its prompt shows a number), then until all are done.
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-InputPrompt')]"
        ".some(p => /\\d/.test(p.textContent))",
        timeout=90_000,
        polling=250,
    )
    page.wait_for_function(_ALL_DONE, timeout=300_000, polling=500)
    path = lab.root / relpath
    ran = Ran(
        page=page,
        path=path,
        notebook=nbformat.read(path, as_version=4),
        outputs=page.evaluate(_MODEL_OUTPUTS),
        artifacts=artifacts,
        label=label,
    )
    ran.shot("after-run-all")
    return ran


def run_checks(ran: Ran, checks: list[Callable[[Ran], list[str]]]) -> None:
    problems = []
    for check in checks:
        problems += [f"{check.__name__}: {p}" for p in check(ran)]
    ran.page.close()
    assert problems == [], "\n".join(problems)


# --- checks on a solution notebook ---------------------------------------------------------------
_IMAGE = "image/png"
_WIDGET = "application/vnd.jupyter.widget-view+json"


def _outputs(ran: Ran):
    for index, outputs in enumerate(ran.outputs):
        for output in outputs:
            yield index, output


def check_no_error_output(ran: Ran) -> list[str]:
    problems = []
    for index, output in _outputs(ran):
        if output["output_type"] == "error":
            problems.append(f"cell {index}: {output['ename']}: {output['evalue'][:200]}")
        elif output["output_type"] == "stream" and output["name"] == "stderr":
            problems.append(f"cell {index} wrote to stderr: {str(output['text'])[:200]}")
    rendered = ran.page.locator(".jp-OutputArea-output[data-mime-type*='error']")
    if rendered.count():
        problems.append(f"{rendered.count()} error outputs shown")
    return problems


def _cell_js(ran: Ran, index: int, body: str):
    """Evaluate ``body`` (a JS expression of ``node``, cell ``index``'s DOM node)."""
    ran.page.evaluate(f"i => {_NOTEBOOK}.content.scrollToItem(i)", index)
    return ran.page.evaluate(
        f"i => {{ const node = {_NOTEBOOK}.content.widgets[i].node; return {body}; }}", index
    )


def check_figures_render_as_images(ran: Ran) -> list[str]:
    """Every figure the kernel sent (an image/png output outside a widget) is an <img> that
    loaded, and there are as many as in the committed notebook."""
    problems = []
    committed = [
        sum(1 for o in cell.get("outputs", []) if _IMAGE in o.get("data", {}))
        for cell in ran.notebook.cells
    ]
    for index, outputs in enumerate(ran.outputs):
        sent = sum(1 for o in outputs if _IMAGE in o.get("data", {}))
        if sent < committed[index]:
            problems.append(f"cell {index}: {sent} figures, the committed notebook has more")
        if not sent:
            continue
        loaded = _cell_js(
            ran,
            index,
            "[...node.querySelectorAll('.jp-OutputArea-output img')]"
            ".filter(img => !img.closest('.widget-output'))"
            ".map(img => img.complete && img.naturalWidth > 0)",
        )
        if len(loaded) != sent or not all(loaded):
            problems.append(
                f"cell {index}: {sent} figures, {sum(loaded)}/{len(loaded)} <img> loaded"
            )
    return problems


def check_widgets_render(ran: Ran) -> list[str]:
    """Every cell that sent a widget view draws it (not "Loading widget...", not an error)."""
    problems = []
    cells = [
        i
        for i, outputs in enumerate(ran.outputs)
        if any(_WIDGET in o.get("data", {}) for o in outputs)
    ]
    if not cells:
        problems.append("no widget was sent (every notebook has an interactive figure)")
    for index in cells:
        drawn, text = _cell_js(
            ran,
            index,
            "[node.querySelectorAll('.jp-OutputArea .jupyter-widgets').length,"
            " node.querySelector('.jp-Cell-outputWrapper').textContent]",
        )
        if not drawn:
            problems.append(f"cell {index}: widget view sent but nothing drawn")
        for failure in ("Loading widget", "Error displaying widget", "Error rendering"):
            if failure in text:
                problems.append(f"cell {index}: the widget shows {failure!r}")
    return problems


# Ways to change an interactive figure's first control, tried in order.
def _move_slider(control, page) -> bool:
    handle = control.locator(".noUi-handle")
    if not handle.count():
        return False
    handle.first.focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    return True


def _next_toggle(control, page) -> bool:
    buttons = control.locator("button.widget-toggle-button:not(.mod-active)")
    if not buttons.count():
        return False
    buttons.first.click()
    return True


def _next_option(control, page) -> bool:
    select = control.locator("select")
    if not select.count():
        return False
    options = select.first.locator("option").all_text_contents()
    current = select.first.evaluate("s => s.selectedIndex")
    select.first.select_option(index=(current + 1) % len(options))
    return True


def _tick(control, page) -> bool:
    box = control.locator("input[type=checkbox]")
    if not box.count():
        return False
    box.first.click()
    return True


def _retype(control, page) -> bool:
    box = control.locator("input[type=text], textarea")
    if not box.count():
        return False
    box.first.fill("The lab was fun and clear")
    box.first.press("Enter")
    return True


_CHANGES = (_move_slider, _next_toggle, _next_option, _tick, _retype)
_PICTURE = """out => {
  const img = out.querySelector('img');
  return img ? img.src : out.textContent;
}"""


def check_controls_redraw(ran: Ran) -> list[str]:
    """For each interactive figure, changing its first control changes what it shows."""
    problems = []
    interacts = ran.page.locator(".widget-interact")
    for i in range(interacts.count()):
        interact = interacts.nth(i)
        interact.scroll_into_view_if_needed()
        controls = interact.locator(":scope > .jupyter-widgets:not(.widget-output)")
        output = interact.locator(".widget-output").first
        before = output.evaluate(_PICTURE)
        ran.shot(f"interactive-{i}-before", interact)
        changed = None
        for position in range(controls.count()):
            changed = next(
                (c.__name__ for c in _CHANGES if c(controls.nth(position), ran.page)), None
            )
            if changed:
                break
        if changed is None:
            problems.append(f"interactive figure {i}: no control this test knows how to change")
            continue
        try:
            ran.page.wait_for_function(
                f"([out, before]) => ({_PICTURE})(out) !== before",
                arg=[output.element_handle(), before],
                timeout=60_000,
                polling=250,
            )
        except Exception:
            problems.append(f"interactive figure {i}: {changed} did not change the picture")
        ran.page.wait_for_function(_ALL_DONE, timeout=60_000)
        ran.shot(f"interactive-{i}-after", interact)
    if interacts.count() == 0:
        problems.append("no interactive figure found")
    return problems


SOLUTION_CHECKS = [
    check_no_error_output,
    check_figures_render_as_images,
    check_widgets_render,
    check_controls_redraw,
]


# --- checks on a student notebook ----------------------------------------------------------------
def _locked_code_cells(ran: Ran) -> list[int]:
    return [
        i
        for i, cell in enumerate(ran.notebook.cells)
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("locked")
    ]


def _answer_cells(ran: Ran) -> list[int]:
    return [
        i
        for i, cell in enumerate(ran.notebook.cells)
        if cell.metadata.get("nbgrader", {}).get("solution") and cell.cell_type == "code"
    ]


def _type_into(ran: Ran, index: int, text: str) -> str:
    """Click into cell ``index``'s editor, type ``text``; return the cell's source afterwards."""
    page = ran.page
    page.evaluate(f"i => {_NOTEBOOK}.content.scrollToItem(i)", index)
    editor = page.evaluate_handle(
        f"i => {_NOTEBOOK}.content.widgets[i].node.querySelector('.cm-content')", index
    )
    editor.as_element().click()
    page.keyboard.insert_text(text)  # text input only: no key is a command-mode shortcut
    return page.evaluate(
        f"i => {_NOTEBOOK}.content.model.cells.get(i).sharedModel.getSource()", index
    )


def check_locked_cells_cannot_be_edited(ran: Ran) -> list[str]:
    problems = []
    locked = _locked_code_cells(ran)
    if not locked:
        problems.append("no locked code cell found")
    for index in locked:
        source = ran.notebook.cells[index].source
        if _type_into(ran, index, "@@edited@@") != source:
            problems.append(f"locked cell {index} accepted typing")
    # The same typing does reach an answer cell (so the check above can fail).
    answer = _answer_cells(ran)[0]
    if "@@edited@@" not in _type_into(ran, answer, "@@edited@@"):
        problems.append(f"typing into answer cell {answer} changed nothing: the check is broken")
    return problems


def check_unfinished_exercise_says_so(ran: Ran) -> list[str]:
    # textContent, not innerText: off-screen cells (content-visibility: auto) have no innerText.
    shown = " ".join(ran.page.locator(".jp-OutputArea-output").all_text_contents())
    if "not written yet" not in shown:
        return ["no output says 'not written yet' after Run All on the untouched notebook"]
    return []


STUDENT_CHECKS = [check_unfinished_exercise_says_so, check_locked_cells_cannot_be_edited]


# --- the tests -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", assignments())
def test_solution_notebook_in_the_browser(name, solution_lab, browser, artifacts):
    ran = open_and_run_all(
        browser, solution_lab, f"solutions/{name}/{name}.ipynb", artifacts, f"solution-{name}"
    )
    run_checks(ran, SOLUTION_CHECKS)


@pytest.mark.parametrize("name", released())
def test_student_notebook_in_the_browser(name, student_lab, browser, artifacts):
    ran = open_and_run_all(
        browser, student_lab, f"{name}/{name}.ipynb", artifacts, f"student-{name}"
    )
    run_checks(ran, STUDENT_CHECKS)


# The hints hold before the setup cell has run because every test cell's first line imports
# encoder_lib.grading, which installs them (tests/grading/engine/test_restart_hints.py, in a
# kernel of its own).
def test_a_test_cell_run_first_after_a_restart_says_to_run_the_setup_cell(
    student_lab, browser, artifacts
):
    """The kernel restarts and the student runs the first test cell: a short block that says to
    run the setup cell first, not Python's traceback."""
    first = released()[0]
    relpath = f"{first}/{first}.ipynb"
    nb = nbformat.read(student_lab.root / relpath, as_version=4)
    index = next(
        i
        for i, c in enumerate(nb.cells)
        if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"
    )
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(student_lab.address(f"lab/tree/{relpath}?reset"))
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_function(_KERNEL_IDLE, timeout=90_000)
    # Restart as a student does: the notebook's Restart Kernel command, then its dialog's button.
    # The kernel is ready when the new kernel has answered a kernel_info request. Its status is no
    # sign of that: JupyterLab ignores the busy/idle messages that answer kernel_info (the
    # server's `untracked_message_types`), so after a restart the status turns "idle" only when
    # some other message reaches the kernel (here an extension's comm_open, 40-60 ms after the
    # kernel_info replies). Twice in CI, under load, "idle" did not come within 90 s and 240 s.
    page.evaluate(_AFTER_RESTART_ASK_KERNEL_INFO)
    # (Not awaited: the command's promise settles only once the dialog has been answered.)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:restart-kernel'); }")
    page.click(".jp-Dialog .jp-mod-accept", timeout=60_000)
    page.wait_for_function("() => window._kernelInfoAfterRestart !== null", timeout=240_000)
    assert page.evaluate("window._kernelInfoAfterRestart") == "ok"
    page.evaluate(f"i => {{ {_NOTEBOOK}.content.activeCellIndex = i; }}", index)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-cell')")
    page.wait_for_function(
        f"i => {_NOTEBOOK}.content.model.cells.get(i).outputs.length > 0", arg=index, timeout=90_000
    )
    page.wait_for_function(_ALL_DONE, timeout=90_000)
    (error,) = page.evaluate(f"i => {_NOTEBOOK}.content.model.cells.get(i).outputs.toJSON()", index)
    # The first cell the new kernel ran (a kernel that had not restarted would count on).
    assert page.evaluate(f"i => {_NOTEBOOK}.content.model.cells.get(i).executionCount", index) == 1
    page.evaluate(f"i => {_NOTEBOOK}.content.scrollToItem(i)", index)
    page.screenshot(path=str(artifacts / "restart-test-cell-first.png"))
    page.close()
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
    assert text.startswith("Cannot be checked yet"), text
    assert "Traceback" not in text
    assert "Run the setup cell (the first code cell) first" in re.sub(r"\s+", " ", text)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


_LISTED = "() => [...document.querySelectorAll('.jp-DirListing-itemText')].map(e => e.textContent)"


def test_make_lab_opens_the_first_notebook_and_reaches_every_one(student_lab, browser, artifacts):
    """`make lab` (run by the fixture): the server's root is work/, its home page is the
    first notebook with the file browser at the root (every notebook's folder in view), every
    notebook is reachable, and none of nbgrader's instructor tools is there."""
    first = released()[0]
    home = f"/lab/tree/{first}/{first}.ipynb?file-browser-path=/"
    # The first address `make lab` prints is the server's root with the token (which the server
    # writes "..." when it was given one, as here)...
    printed = re.findall(r"\] +(http://\S+)", student_lab.log.read_text())
    assert printed and printed[0] == f"{student_lab.url}/?token=..."
    opener = urllib.request.build_opener(_NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as redirect:
        opener.open(student_lab.address(""))
    # ...which leads to the home page, the token still readable after it.
    assert redirect.value.headers["Location"] == f"{home}&token={student_lab.token}"
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(student_lab.address("?reset"))  # ?reset: ignore layouts earlier tests saved
    page.wait_for_function(
        f"() => {{ const w = window.jupyterapp && {_NOTEBOOK};"
        " return !!(w && w.context && w.context.path); }",
        timeout=90_000,
    )
    assert page.evaluate(f"() => {_NOTEBOOK}.context.path") == f"{first}/{first}.ipynb"
    page.wait_for_function(
        f"names => names.every(n => ({_LISTED})().includes(n))", arg=released(), timeout=30_000
    )
    page.screenshot(path=str(artifacts / "make-lab-home.png"))
    for name in released():
        with urllib.request.urlopen(student_lab.address(f"api/contents/{name}/{name}.ipynb")) as r:
            assert json.load(r)["type"] == "notebook"
    menus = " ".join(page.locator(".lm-MenuBar-itemLabel").all_inner_texts())
    assert "Nbgrader" not in menus and "File" in menus
    disabled = page.evaluate(
        "() => JSON.parse(document.getElementById('jupyter-config-data').textContent)"
        ".disabledExtensions"
    )
    assert "@jupyter/nbgrader" in disabled
    assert "@jupyterlab/apputils-extension:announcements" in disabled  # no news toast
    assert "Jupyter news" not in " ".join(page.locator(".Toastify__toast").all_inner_texts())
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(student_lab.address("formgrader"))
    log = student_lab.log.read_text()
    assert not re.search(r"course directory root is not a subdirectory", log)
    page.close()


def test_make_instructor_has_nbgrader_tools(instructor_lab, browser):
    """`make instructor`: the course directory with the formgrader and the Nbgrader menu."""
    with urllib.request.urlopen(instructor_lab.address("formgrader")) as response:
        assert response.status == 200
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(instructor_lab.address("lab?reset"))
    page.wait_for_function("window.jupyterapp !== undefined", timeout=90_000)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.lm-MenuBar-itemLabel')]"
        ".some(m => m.textContent === 'Nbgrader')",
        timeout=60_000,
    )
    disabled = page.evaluate(
        "() => JSON.parse(document.getElementById('jupyter-config-data').textContent)"
        ".disabledExtensions"
    )
    assert "@jupyterlab/apputils-extension:announcements" in disabled  # no news toast
    assert "@jupyter/nbgrader" not in disabled
    page.close()
    assert "course directory root is not a subdirectory" not in instructor_lab.log.read_text()


def _answers(solution: Path) -> dict[str, str]:
    """The solution's answer cells by grade id, the nbgrader markers left out."""
    answers = {}
    for cell in nbformat.read(solution, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            lines = [line for line in cell.source.splitlines() if "### " not in line]
            answers[meta["grade_id"]] = "\n".join(lines)
    return answers


def _run_all_with_one_mistake(
    lab, browser, artifacts: Path, name: str, answer: str, right: str, wrong: str, label: str
) -> Ran:
    """Run All, in the browser, of the student version of ``name`` answered with the solution's
    code except ``answer``, where ``right`` is replaced by ``wrong``."""
    answers = _answers(SOLUTIONS / name / f"{name}.ipynb")
    changed = answers[answer].replace(right, wrong)
    assert changed != answers[answer], f"{right!r} is not in the solution's {answer}"
    answers[answer] = changed
    nb = nbformat.read(lab.root / name / f"{name}.ipynb", as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    relpath = f"{name}/{name}_{label}.ipynb"
    nbformat.write(nb, lab.root / relpath)
    return open_and_run_all(browser, lab, relpath, artifacts, f"student-{label}")


def _cell_index(ran: Ran, grade_id: str) -> int:
    return next(
        i
        for i, c in enumerate(ran.notebook.cells)
        if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )


def _shot_and_text(ran: Ran, index: int, output: dict, shot: str) -> str:
    """Screenshot cell ``index`` (scrolled to the middle), close the page, and return the error
    block's text as the student reads it (colours stripped, whitespace folded)."""
    _cell_js(ran, index, "node.scrollIntoView({block: 'center'})")
    ran.shot(shot, ran.page.locator(".jp-Cell").nth(index))
    ran.page.close()
    return re.sub(r"\s+", " ", re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(output["traceback"])))


def test_a_mistake_in_an_earlier_exercise_is_named_where_it_lives(student_lab, browser, artifacts):
    """Notebook 01 answered right except attention_scores, which divides by d_k: exercise 4's
    test cell (its attention calls attention_scores) says that the mistake lives in exercise 1,
    in a short block without a traceback."""
    ran = _run_all_with_one_mistake(
        student_lab,
        browser,
        artifacts,
        "01_self_attention",
        "attention_scores",
        "/ math.sqrt(d_k)",
        "/ d_k",
        "one-mistake",
    )
    index = _cell_index(ran, "test_scaled_dot_product_attention")
    # Run All stops at the first failing test cell (exercise 1's): run the rest up to exercise
    # 4's test cell one at a time, as a student does.
    first_failure = next(
        i
        for i, outputs in enumerate(ran.outputs)
        if outputs and any(o["output_type"] == "error" for o in outputs)
    )
    assert first_failure < index
    for i in range(first_failure + 1, index + 1):
        if ran.notebook.cells[i].cell_type != "code":
            continue
        ran.page.evaluate(f"i => {{ {_NOTEBOOK}.content.activeCellIndex = i; }}", i)
        ran.page.evaluate("window.jupyterapp.commands.execute('notebook:run-cell')")
        ran.page.wait_for_function(
            f"i => {_NOTEBOOK}.content.model.cells.get(i).executionCount !== null",
            arg=i,
            timeout=90_000,
        )
        ran.page.wait_for_function(_ALL_DONE, timeout=90_000)
    (output,) = ran.page.evaluate(
        f"i => {_NOTEBOOK}.content.model.cells.get(i).outputs.toJSON()", index
    )
    text = _shot_and_text(ran, index, output, "exercise-4")
    assert text.startswith("Exercise 4 · scaled_dot_product_attention: not right yet"), text
    assert "this comes from your attention_scores (exercise 1)" in text
    assert "sqrt(d_k)" in text and "Traceback" not in text


def test_a_jax_answer_s_mistake_is_named_in_the_browser(student_lab, browser, artifacts):
    """Notebook 10 answered right except LayerNorm, which keeps Flax's epsilon: Run All stops at
    exercise 3's test cell, which names the epsilon in a short block without a traceback (the
    check ran the JAX module on PyTorch's weights and compared with nn.LayerNorm)."""
    ran = _run_all_with_one_mistake(
        student_lab,
        browser,
        artifacts,
        "10_jax_encoder",
        "jax_layer_norm",
        "1e-5 if epsilon is None",
        "1e-6 if epsilon is None",
        "jax-mistake",
    )
    index = _cell_index(ran, "test_jax_layer_norm")
    (output,) = ran.outputs[index]
    text = _shot_and_text(ran, index, output, "exercise-3")
    assert text.startswith("Exercise 3 · LayerNorm: not right yet"), text
    assert "Flax's default" in text and "Traceback" not in text


def test_a_mistake_no_catalogue_names_is_localised_in_the_browser(student_lab, browser, artifacts):
    """Notebook 05 answered right except EncoderLayer, which uses norm1 for both sub-layers (no
    catalogue entry names it): Run All stops at exercise (c)'s test cell, which says which given
    sub-module is never called and which one runs twice, in a short block without a traceback."""
    ran = _run_all_with_one_mistake(
        student_lab,
        browser,
        artifacts,
        "05_encoder",
        "encoder_layer",
        "self.norm2(",
        "self.norm1(",
        "localised-mistake",
    )
    index = _cell_index(ran, "test_encoder_layer")
    (output,) = ran.outputs[index]
    text = _shot_and_text(ran, index, output, "exercise-c")
    assert "not right yet" in text and "Traceback" not in text, text
    assert "self.norm2 is never called, while self.norm1 is called twice" in text, text
