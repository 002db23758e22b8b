"""Where the authorship rules' line runs (issue 37): unusual correct answers that come close to
the rules are accepted, both by the judge's reading of the submitted notebook
(``encoder_lib.autograde.authorship``) and by the checks themselves, with the kernel's side of
the rules on (``observe.source_refusal`` reads the answer's cell, as in a notebook); their
near misses are refused, with the rule's id. The kernel's watch follows the threads an answer
starts, refuses threads the notebook started before, and knows a forbidden built-in under its
operator-registry names.
"""

from __future__ import annotations

import linecache
import queue
import re
import threading
import uuid
from functools import cache

import pytest
from grading.notebook_namespace import SolutionNotebook
from pipeline import course as C
from variants import ASSIGNMENTS

from encoder_lib.autograde import authorship as A
from encoder_lib.grading import GradingError, runner
from encoder_lib.grading.kernel import forbidden, observe


@cache
def notebook(assignment: str):
    return C.read(C.source_notebook(assignment))


@cache
def solution(assignment: str) -> SolutionNotebook:
    return SolutionNotebook(assignment)


def with_body(assignment: str, gid: str, body: str) -> str:
    """The solution's answer cell ``gid`` with ``body`` between its solution markers."""
    source = solution(assignment).source(gid)
    pattern = re.compile(r"(?ms)^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION\n?")
    indent = pattern.search(source).group(1)
    lines = "".join(indent + line if line.strip() else line for line in body.splitlines(True))
    return pattern.sub(lambda _: lines, source, count=1)


def refusals(assignment: str, gid: str, source: str) -> dict:
    nb = C.with_cells(notebook(assignment), {gid: source})
    found = {}
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        exercise = runner.EXERCISES.get(meta.get("grade_id"))
        if meta.get("grade") and not meta.get("solution") and exercise is not None:
            own, earlier = A.breaches(nb.cells, i, exercise.name)
            if own or earlier:
                found[exercise.test_cell] = own + earlier
    return found


def graded_in_a_notebook(assignment: str, gid: str, source: str, test_cell: str):
    """The verdict of ``test_cell`` with ``source`` in answer cell ``gid``, the cells run as a
    notebook runs them: each cell's source is known to ``linecache`` under its file name (as
    IPython registers it), so the kernel's side of the rules reads it."""
    book = solution(assignment)
    namespace = registered_namespace(assignment, {gid: source})
    test = (
        book.source(test_cell)
        .replace("### BEGIN HIDDEN TESTS", "")
        .replace("### END HIDDEN TESTS", "")
    )
    try:
        exec(compile(test, f"<test {test_cell}>", "exec"), namespace)
    except GradingError as error:
        return error
    return None


# --- correct answers near the line: accepted ------------------------------------------------------

NEAR_THE_LINE = {
    "einsum_scores": (
        "01_self_attention",
        "attention_scores",
        "test_attention_scores",
        'return torch.einsum("...qd,...kd->...qk", query, key) / math.sqrt(query.shape[-1])\n',
    ),
    "split_heads_chunk": (
        "02_multi_head_attention",
        "split_heads",
        "test_split_heads",
        "return torch.stack(x.chunk(num_heads, dim=-1), dim=1)  # (B, H, L, d_head)\n",
    ),
    "split_heads_list_comprehension": (
        "02_multi_head_attention",
        "split_heads",
        "test_split_heads",
        "d_head = x.shape[-1] // num_heads\n"
        "heads = [x[..., h * d_head : (h + 1) * d_head] for h in range(num_heads)]\n"
        "return torch.stack(heads, dim=1)\n",
    ),
    "merge_heads_unbind": (
        "02_multi_head_attention",
        "merge_heads",
        "test_merge_heads",
        "return torch.cat(x.unbind(dim=1), dim=-1)  # (B, L, H * d_head)\n",
    ),
    "residual_block_getattr_literal": (
        "03_layer_norm",
        "answer_residual_block",
        "test_residual_block",
        "first = getattr(norm, 'forward', norm) if hasattr(norm, 'forward') else norm\n"
        "if norm_first:\n"
        "    return x + sublayer(first(x))\n"
        "return first(x + sublayer(x))\n",
    ),
    "encoder_layer_getattr_self_norm_i": (
        "05_encoder",
        "encoder_layer",
        "test_encoder_layer",
        "blocks = (\n"
        "    lambda h: self.dropout1(self.self_attn(h, h, h, mask, need_weights=False)[0]),\n"
        "    lambda h: self.dropout2(\n"
        "        self.linear2(self.dropout(self.activation(self.linear1(h))))\n"
        "    ),\n"
        ")\n"
        "for i, block in enumerate(blocks, start=1):\n"
        '    norm = getattr(self, f"norm{i}")  # the module\'s own sub-module, by a computed name\n'
        "    x = x + block(norm(x)) if self.norm_first else norm(x + block(x))\n"
        "return x\n",
    ),
    "masked_mean_einsum": (
        "06_sentiment_capstone",
        "masked_mean",
        "test_masked_mean",
        "w = keep.to(h.dtype)  # (B, L)\n"
        'return torch.einsum("bld,bl->bd", h, w) / w.sum(dim=1, keepdim=True)\n',
    ),
    "apply_rotary_complex": (
        "09_modern_encoder",
        "apply_rotary",
        "test_apply_rotary",
        'if pairing == "halves":\n'
        "    x1, x2 = x.chunk(2, dim=-1)\n"
        'elif pairing == "adjacent":\n'
        "    x1, x2 = x[..., 0::2], x[..., 1::2]\n"
        "else:\n"
        "    raise ValueError(f\"pairing must be 'halves' or 'adjacent', got {pairing!r}\")\n"
        "z = torch.complex(x1, x2) * torch.polar(torch.ones_like(cos), torch.atan2(sin, cos))\n"
        'if pairing == "halves":\n'
        "    return torch.cat((z.real, z.imag), dim=-1)\n"
        "return torch.view_as_real(z).flatten(-2)  # (..., L, d_head/2, 2) -> (..., L, d_head)\n",
    ),
}


@pytest.mark.parametrize("name", NEAR_THE_LINE)
def test_unusual_correct_answers_break_no_rule_and_keep_their_points(name):
    assignment, gid, test_cell, body = NEAR_THE_LINE[name]
    source = with_body(assignment, gid, body)
    assert refusals(assignment, gid, source) == {}
    error = graded_in_a_notebook(assignment, gid, source, test_cell)
    assert error is None, f"{name}: {error}"


# --- their near misses: refused, named, counted under the rule's id -------------------------------

NEAR_MISSES = {
    "getattr_literal_on_a_library_is_the_attribute": (
        "04_feed_forward",
        "answer_gelu",
        "test_gelu",
        'return getattr(F, "gelu")(x)\n',
        "forbidden-built-in",
        "F.gelu",
    ),
    "getattr_computed_on_another_object": (
        "05_encoder",
        "encoder_layer",
        "test_encoder_layer",
        "layers = [self.norm1, self.norm2]\n"
        'name = "for" + "ward"\n'
        "return getattr(layers[0], name)(x)\n",
        "authorship-reflection",
        "getattr() with a computed name",
    ),
    "getattr_dunder_literal": (
        "03_layer_norm",
        "answer_residual_block",
        "test_residual_block",
        'call = getattr(sublayer, "__call__")\nreturn norm(x + call(x))\n',
        "authorship-internals",
        "'__call__'",
    ),
    "aten_packet": (
        "04_feed_forward",
        "answer_gelu",
        "test_gelu",
        "return torch.ops.aten.gelu(x)\n",
        "forbidden-built-in",
        "already does what this exercise asks",
    ),
    "aten_in_place_overload": (
        "03_layer_norm",
        "answer_layer_norm",
        "test_layer_norm",
        "out, _, _ = torch.ops.aten.native_layer_norm.default(x, x.shape[-1:], weight, bias, eps)\n"
        "return out\n",
        "forbidden-built-in",
        "already does what this exercise asks",
    ),
    "module_form": (
        "08_pretraining",
        "mlm_loss",
        "test_mlm_loss",
        "return nn.CrossEntropyLoss(ignore_index=-100)(logits.flatten(0, 1), labels.flatten())\n",
        "forbidden-built-in",
        "F.cross_entropy",
    ),
    "masked_mean_course_wide": (
        "06_sentiment_capstone",
        "masked_mean",
        "test_masked_mean",
        "return encoder_lib.mean_pool(h, keep)\n",
        "forbidden-built-in",
        "mean_pool",
    ),
    "three_argument_type": (
        "02_multi_head_attention",
        "merge_heads",
        "test_merge_heads",
        "Merge = type('Merge', (), {'go': staticmethod(lambda t: t)})\n"
        "return Merge.go(x.transpose(1, 2).flatten(2))\n",
        "authorship-internals",
        "type(name, bases, dict)",
    ),
}


@pytest.mark.parametrize("name", NEAR_MISSES)
def test_near_misses_are_refused_by_the_judge_and_the_visible_check(name):
    assignment, gid, test_cell, body, mistake, says = NEAR_MISSES[name]
    if gid not in solution(assignment).answers:
        pytest.skip(f"{assignment} has no answer cell {gid}")
    source = with_body(assignment, gid, body)
    found = refusals(assignment, gid, source)
    assert test_cell in found, found
    error = A.refusal(runner.EXERCISES[test_cell], found[test_cell], [])
    assert error.mistake == mistake and says in error.problem, (error.mistake, error.problem)
    visible = graded_in_a_notebook(assignment, gid, source, test_cell)
    assert isinstance(visible, GradingError), f"{name}: the visible check accepted it"
    assert visible.mistake == mistake, (visible.mistake, visible.problem)


# --- the kernel's watch -------------------------------------------------------------------------

RIGHT_GELU = "0.5 * x * (1 + torch.erf(x / math.sqrt(2)))"


def gelu_namespace(source: str) -> dict:
    """Notebook 04's namespace with ``gelu`` defined by ``source``, compiled under a file name
    no cache knows (the kernel's source rules then have nothing to read: only the watch)."""
    namespace = solution("04_feed_forward").namespace()
    exec(compile(source, f"<unread {uuid.uuid4().hex}>", "exec"), namespace)
    return namespace


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_watch_follows_a_thread_the_answer_starts():
    namespace = gelu_namespace(
        "import threading\n\n"
        "def gelu(x):\n"
        "    out = []\n"
        "    t = threading.Thread(target=lambda: out.append(F.gelu(x)))\n"
        "    t.start()\n"
        "    t.join()\n"
        "    return out[0] if out else x * 0\n"
    )
    with pytest.raises(GradingError) as caught:
        _check_gelu(namespace)
    assert caught.value.mistake == "forbidden-built-in" and "F.gelu" in caught.value.problem


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_watch_follows_a_thread_started_without_threading():
    """``_thread.start_new_thread`` (which ``threading``'s hook never reaches); the source rules
    refuse ``_thread`` too, but this cell's source is unread: only the watch sees it."""
    namespace = gelu_namespace(
        "import _thread, time\n\n"
        "def gelu(x):\n"
        "    out = []\n"
        "    _thread.start_new_thread(lambda: out.append(F.gelu(x)), ())\n"
        "    for _ in range(500):\n"
        "        if out:\n"
        "            break\n"
        "        time.sleep(0.01)\n"
        "    return out[0] if out else x * 0\n"
    )
    with pytest.raises(GradingError) as caught:
        _check_gelu(namespace)
    assert caught.value.mistake == "forbidden-built-in" and "F.gelu" in caught.value.problem
    import _thread

    assert _thread.start_new_thread.__module__ == "_thread"  # put back after the check


def _check_gelu(namespace):
    from encoder_lib import grading

    grading.check_gelu(namespace["gelu"], thorough=True)


def test_a_thread_started_before_the_call_is_refused():
    requests: queue.Queue = queue.Queue()
    answers: queue.Queue = queue.Queue()

    def worker():
        import torch.nn.functional as F

        while (x := requests.get()) is not None:
            answers.put(F.gelu(x))

    thread = threading.Thread(target=worker, name="helper", daemon=True)
    thread.start()
    try:
        namespace = gelu_namespace("def gelu(x):\n    requests.put(x)\n    return answers.get()\n")
        namespace.update(requests=requests, answers=answers)
        with pytest.raises(GradingError) as caught:
            _check_gelu(namespace)
        assert caught.value.mistake == "authorship-thread", caught.value.problem
        assert "helper" in caught.value.problem
    finally:
        requests.put(None)
        thread.join(timeout=10)
    namespace = gelu_namespace(f"def gelu(x):\n    return {RIGHT_GELU}\n")
    _check_gelu(namespace)  # the thread gone, a right answer passes again


@pytest.mark.parametrize(
    "call",
    ["torch.ops.aten.gelu(x)", "torch.ops.aten.gelu.default(x)", "torch._C._nn.gelu(x)"],
)
def test_the_watch_knows_a_built_in_under_its_registry_names(call):
    namespace = gelu_namespace(f"def gelu(x):\n    return {call}\n")
    with pytest.raises(GradingError) as caught:
        _check_gelu(namespace)
    assert caught.value.mistake == "forbidden-built-in", caught.value.problem


def test_every_form_of_a_forbidden_function_is_one_name():
    import torch
    import torch.nn.functional as F
    from torch import nn

    forms = forbidden.expanded(forbidden.rules("layer_norm"))
    for obj in (
        F.layer_norm,
        torch.layer_norm,
        torch.native_layer_norm,
        torch.ops.aten.layer_norm,
        torch.ops.aten.native_layer_norm.default,
        nn.LayerNorm,
    ):
        assert forms.name_of(obj), obj
    for allowed in (torch.mean, torch.var_mean, torch.rsqrt, torch.ops.aten.mean.dim, nn.Linear):
        assert forms.name_of(allowed) is None, allowed


def test_an_exercise_without_a_list_gets_the_course_wide_rules():
    import encoder_lib

    names = set(forbidden.rules("masked_mean").python.values())
    assert "encoder_lib.minilm.mean_pool" in names
    assert forbidden.rules("masked_mean").python.get(encoder_lib.mean_pool)


# --- the kernel's side of the rules on every correct variant -------------------------------------


def registered_namespace(assignment: str, replace: dict[str, str]) -> dict:
    """The notebook's namespace with every cell's source known to ``linecache`` (as IPython
    registers each execution), so that ``observe.source_refusal`` reads it."""
    book = solution(assignment)
    tag = uuid.uuid4().hex[:8]
    original = book.execute

    def execute(grade_id, ns, src=None):
        code = book.source(grade_id) if src is None else src
        filename = f"<cell {grade_id} {tag}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        exec(compile(code, filename, "exec"), ns)

    book.execute = execute  # type: ignore[method-assign]
    try:
        return book.namespace(replace)
    finally:
        book.execute = original  # type: ignore[method-assign]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_kernel_rules_accept_the_reference_and_every_correct_variant(assignment):
    book = solution(assignment)
    exercises = [runner.EXERCISES[t] for t in book.tests if t in runner.EXERCISES]
    for variant in [None, *book.correct]:
        replace = {} if variant is None else {variant.cell: variant.source}
        namespace = registered_namespace(assignment, replace)
        for exercise in exercises:
            target = namespace.get(exercise.target)
            refused = observe.source_refusal(target, exercise.name) if target else None
            assert refused is None, (getattr(variant, "name", "reference"), exercise.name, refused)
