"""The runner's generic checks are each needed: switching any one of them off (``runner.STEPS``)
makes some answer of tests/variants misjudged (a buggy answer accepted, or its mistake no longer
named). A step without a witness here fails the suite, so a new generic check comes with one."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from grading.notebook_namespace import (
    NOTEBOOKS,
    SolutionNotebook,
    own_test_cell,
    returning_subclass,
    run_test_cells,
)
from variants import Variant

from encoder_lib import grading
from encoder_lib.grading import GradingError, runner, vocabulary
from encoder_lib.grading.kernel import observe

# step -> answers it alone gets right: (assignment, variant name). "subclass:<cell>" is the
# reference answer of that cell rewritten to return a Tensor subclass.
WITNESSES: dict[str, list[tuple[str, str]]] = {
    "module": [("03_layer_norm", "module_renamed_parameters")],
    "failure": [("03_layer_norm", "calls_F_layer_norm"), ("03_layer_norm", "uses_encoder_lib")],
    "structure": [("03_layer_norm", "returns_tuple")],
    "plain tensor": [("03_layer_norm", "subclass:answer_layer_norm")],
    "shape": [("04_feed_forward", "pooled_over_positions")],
    "in place": [("03_layer_norm", "modifies_x_in_place")],
    "dtype": [("03_layer_norm", "returns_float32")],
    "values": [("03_layer_norm", "unbiased_variance")],
    "requires": [("03_layer_norm", "sublayer_called_twice")],
    "gradients": [("03_layer_norm", "detached"), ("03_layer_norm", "residual_detached")],
}


def _variant(notebook: SolutionNotebook, name: str) -> Variant:
    if name.startswith("subclass:"):
        cell = name.split(":", 1)[1]
        test_cell = own_test_cell(notebook, cell)
        source = returning_subclass(notebook.source(cell))
        return Variant(name, cell, source, (test_cell,), "Tensor subclass")
    return next(v for v in notebook.buggy if v.name == name)


def _judged_right(notebook: SolutionNotebook, variant: Variant) -> bool:
    errors = run_test_cells(notebook, {variant.cell: variant.source})
    failing = {cell for cell, error in errors.items() if error is not None}
    message = str(errors.get(own_test_cell(notebook, variant.cell)) or "")
    return failing == set(variant.fails) and variant.says.lower() in message.lower()


def test_every_step_has_a_witness():
    assert set(WITNESSES) == set(runner.STEPS)


@pytest.mark.parametrize(
    ("step", "assignment", "name"),
    [(step, a, name) for step, answers in WITNESSES.items() for a, name in answers],
)
def test_switching_a_step_off_misjudges_its_witness(monkeypatch, step, assignment, name):
    notebook = NOTEBOOKS[assignment]
    variant = _variant(notebook, name)
    assert _judged_right(notebook, variant), "the witness must be judged right to begin with"
    monkeypatch.setitem(runner.STEPS, step, lambda trial: None)
    assert not _judged_right(notebook, variant), f"with '{step}' off, {name} is still caught"


# --- the visible check tries the hidden cases' properties, not their values ---------------------


@pytest.mark.parametrize("test_cell", sorted(runner.EXERCISES))
def test_the_thorough_cases_hold_the_visible_ones(test_cell):
    """``trials_of`` tells the hidden cases from the visible ones by ``what``."""
    exercise = runner.EXERCISES[test_cell]
    visible = Counter(case.what for case in exercise.cases(False))
    thorough = Counter(case.what for case in exercise.cases(True))
    assert visible <= thorough
    hidden = [case for case, full in runner.trials_of(exercise, False) if not full]
    assert len(hidden) <= thorough.total() - visible.total()


def test_hidden_values_are_compared_only_by_the_thorough_check():
    # right on the visible inputs (2-D and 3-D), wrong values on the hidden 4-D ones
    def scores(query, key):
        right = query @ key.transpose(-2, -1) / query.shape[-1] ** 0.5
        return right * 2 if query.dim() == 4 else right

    grading.check_attention_scores(scores)
    with pytest.raises(GradingError, match="does not match the reference"):
        grading.check_attention_scores(scores, thorough=True)


def test_hidden_properties_are_tried_by_the_visible_check():
    def detached(query, key):
        return (query @ key.transpose(-2, -1) / query.shape[-1] ** 0.5).detach()

    with pytest.raises(GradingError, match="does not require grad"):
        grading.check_attention_scores(detached)


# --- one mistake, one place -------------------------------------------------------------------


def _notebook_01(scores_body: str, attention_body: str) -> dict:
    namespace = {"torch": torch, "math": math, "__name__": "__main__"}
    exec(
        "def attention_scores(query, key):\n" + scores_body + "\n"
        "def masked_softmax(scores, mask=None):\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    return torch.softmax(scores, dim=-1).nan_to_num(0.0)\n\n"
        "def scaled_dot_product_attention(query, key, value, mask=None):\n" + attention_body,
        namespace,
    )
    return namespace


_BY_D_K = "    return query @ key.transpose(-2, -1) / query.shape[-1]\n"
_CALLS = "    weights = masked_softmax(attention_scores(query, key), mask)\n"


def test_a_dependent_exercise_names_where_the_mistake_lives():
    ns = _notebook_01(_BY_D_K, _CALLS + "    return weights @ value, weights\n")
    with pytest.raises(GradingError) as caught:
        grading.check_scaled_dot_product_attention(ns["scaled_dot_product_attention"])
    problem = caught.value.problem
    assert problem.startswith("this comes from your attention_scores (exercise 1)"), problem
    assert "divided by d_k instead of sqrt(d_k)" in problem


def test_an_answer_that_does_not_call_the_wrong_one_is_judged_on_its_own():
    inline = (
        "    s = query @ key.transpose(-2, -1) / query.shape[-1]\n"
        "    weights = masked_softmax(s, mask)\n    return weights @ value, weights\n"
    )
    ns = _notebook_01(_BY_D_K, inline)
    with pytest.raises(GradingError) as caught:
        grading.check_scaled_dot_product_attention(ns["scaled_dot_product_attention"])
    assert "comes from" not in caught.value.problem
    assert "divided by d_k" in caught.value.problem


def test_spare_dependents_judges_again_with_the_reference(monkeypatch):
    monkeypatch.setattr(runner, "SPARE_DEPENDENTS", True)
    right = _notebook_01(_BY_D_K, _CALLS + "    return weights @ value, weights\n")
    grading.check_scaled_dot_product_attention(right["scaled_dot_product_attention"], True)
    assert right["attention_scores"].__name__ == "attention_scores"  # the student's, put back
    forgot_v = _notebook_01(_BY_D_K, _CALLS + "    return weights, weights\n")
    with pytest.raises(GradingError, match="multiply the weights by the values"):
        grading.check_scaled_dot_product_attention(forgot_v["scaled_dot_product_attention"], True)


# --- hints on request, stubs ----------------------------------------------------------------------


def test_hint_gives_a_more_concrete_hint_for_the_last_failure(capsys):
    ns = _notebook_01("    return query @ key / query.shape[-1] ** 0.5\n", _CALLS)
    with pytest.raises(GradingError, match="Is key transposed") as caught:
        grading.check_attention_scores(ns["attention_scores"])
    assert "grading.hint() prints a more concrete hint" in "\n".join(caught.value.lines())
    grading.hint()
    out = capsys.readouterr().out
    assert out.startswith("Hint for Exercise 1 · attention_scores: ") and "axes" in out
    assert "transpose(-2, -1)" not in out and ".mT" not in out


def test_hint_says_so_when_the_message_is_all_there_is(capsys):
    ns = _notebook_01(_BY_D_K, _CALLS)
    with pytest.raises(GradingError):
        grading.check_attention_scores(ns["attention_scores"])
    grading.hint()
    assert capsys.readouterr().out.startswith("No more concrete hint for Exercise 1")


def test_only_the_given_stub_is_not_written_yet():
    def stub(query, key):
        raise NotImplementedError()

    def own(query, key):
        raise NotImplementedError("batched inputs are not supported yet")

    with pytest.raises(GradingError, match="not written yet"):
        grading.check_attention_scores(stub)
    with pytest.raises(GradingError) as caught:
        grading.check_attention_scores(own)
    assert "not written yet" not in str(caught.value)
    assert "raised NotImplementedError: batched inputs are not supported yet" in str(caught.value)


def test_a_returned_report_offers_no_hint():
    from encoder_lib.autograde.judge_execute import for_report

    error = GradingError(grading.feedback.Hinted("the problem.", "a hint"), "f(x)", "Exercise 1")
    assert error.hint == "a hint"
    assert "stuck?" not in "\n".join(for_report(error).lines())


@pytest.mark.parametrize(
    ("assignment", "name"),
    [
        ("01_self_attention", "scores_scaled_by_d_k"),
        ("01_self_attention", "mask_polarity_reversed"),
        ("02_multi_head_attention", "split_forgot_transpose"),
        ("02_multi_head_attention", "merge_reshape_without_transpose"),
        ("05_encoder", "mask_reversed_polarity"),
        ("09_modern_encoder", "off_by_one"),
    ],
)
def test_spared_dependents_lose_only_the_cell_of_the_mistake(monkeypatch, assignment, name):
    """``ENCODER_LAB_SPARE_DEPENDENTS=1``: a mistake in an earlier answer costs only its own test
    cell; the exercises that call it are judged with the reference in its place."""
    notebook = NOTEBOOKS[assignment]
    variant = _variant(notebook, name)
    assert len(variant.fails) == 2  # charged twice by default
    monkeypatch.setenv("ENCODER_LAB_SPARE_DEPENDENTS", "1")
    errors = run_test_cells(notebook, {variant.cell: variant.source})
    failing = {cell for cell, error in errors.items() if error is not None}
    assert failing == {own_test_cell(notebook, variant.cell)}


# --- the reference side: a case derives its expected value and gradients from the reference -----


def _by_hand(fn, args, upstream):
    """Gradients of sum(fn(*args) * upstream) with respect to every float argument, by autograd."""
    leaves = [a.clone().requires_grad_() for a in args]
    (fn(*leaves) * upstream).sum().backward()
    return [leaf.grad for leaf in leaves]


def test_a_case_derives_its_expected_value_and_gradients_from_the_reference():
    x, w = vocabulary.randn(2, 3, seed=1), vocabulary.randn(3, seed=2)
    upstream = vocabulary.randn(2, 3, seed=3)
    fn = lambda x, w: torch.tanh(x) * w  # noqa: E731
    call = observe.Call("f", "f", (x, w), grad=("args[1]", "args[0]"), upstream=(upstream,))
    case = vocabulary.Case(call, "f(x, w)", reference=fn)
    assert torch.equal(case.expected, fn(x, w))
    grad_x, grad_w = _by_hand(fn, (x, w), upstream)
    assert list(case.grads) == ["args[1]", "args[0]"]  # the order the call asks them in
    assert torch.equal(case.grads["args[0]"], grad_x)
    assert torch.equal(case.grads["args[1]"], grad_w)
    assert x.grad is None and not x.requires_grad  # the call's own tensors are left alone


def test_a_given_expected_value_is_kept_and_no_gradient_is_asked_without_upstream():
    x = vocabulary.randn(4, seed=4)
    case = vocabulary.Case(
        observe.Call("f", "f", (x,)), "f(x)", expected=x * 2, reference=torch.sin
    )
    assert torch.equal(case.expected, x * 2) and case.grads is None


def test_what_an_exercise_says_once_reaches_every_case_that_does_not_say_otherwise():
    x = vocabulary.randn(3, seed=9)

    def cases(thorough: bool):
        yield vocabulary.Case(observe.Call("f", "f", (x,)), "f(x)")
        yield vocabulary.Case(observe.Call("f", "f", (x,)), "f(x) again", slots=("its own slot",))

    shared = vocabulary.with_case_fields(
        cases, slots=("the output",), letters=("(L,)",), reference=torch.sin
    )
    plain, own = shared(True)
    assert plain.slots == ("the output",) and own.slots == ("its own slot",)
    assert own.letters == ("(L,)",)
    assert torch.equal(plain.expected, torch.sin(x))  # derived once the reference is known
    assert shared.__module__ == cases.__module__  # the exercise's topic is still its module
    with pytest.raises(TypeError, match="slot"):
        vocabulary.with_case_fields(cases, slot=("misspelt",))


def test_a_tensor_passed_twice_gets_the_gradient_of_both_uses_as_the_student_code_does():
    x, upstream = vocabulary.randn(3, 2, seed=5), vocabulary.randn(3, 3, seed=6)
    call = observe.Call("f", "f", (x, x), grad=("args[0]",), upstream=(upstream,))
    case = vocabulary.Case(call, "f(x, x)", reference=lambda q, k: q @ k.T)
    (want,) = _by_hand(lambda a: a @ a.T, (x,), upstream)
    assert torch.allclose(case.grads["args[0]"], want, atol=1e-12, rtol=0)


def test_a_module_reference_gives_its_parameters_gradients_by_the_observed_names():
    layer = torch.nn.Linear(3, 2).double()
    x, upstream = vocabulary.randn(4, 3, seed=7), vocabulary.randn(4, 2, seed=8)
    call = observe.Call("L", "L", (x,), grad=("args[0]", "parameters"), upstream=(upstream,))
    grads = vocabulary.reference_grads(layer, call)
    assert list(grads) == ["args[0]", "parameters.weight", "parameters.bias"]
    assert torch.allclose(grads["parameters.weight"], upstream.T @ x, atol=1e-12, rtol=0)
    assert torch.allclose(grads["parameters.bias"], upstream.sum(0), atol=1e-12, rtol=0)
    assert torch.allclose(grads["args[0]"], upstream @ layer.weight.detach(), atol=1e-12, rtol=0)
    assert layer.weight.grad is None  # nothing accumulates in the reference module


def test_the_reference_runs_with_the_call_seed_and_deterministic_dropout_as_student_code_does():
    x = torch.ones(1000, dtype=torch.float64)
    noisy = lambda t: t + torch.rand_like(t)  # noqa: E731
    first = vocabulary.reference_value(noisy, observe.Call("f", "f", (x,), seed=1))
    again = vocabulary.reference_value(noisy, observe.Call("f", "f", (x,), seed=1))
    other = vocabulary.reference_value(noisy, observe.Call("f", "f", (x,), seed=2))
    assert torch.equal(first, again) and not torch.equal(first, other)
    dropped = vocabulary.reference_value(
        lambda t: torch.nn.functional.dropout(t, 0.5), observe.Call("f", "f", (x,), seed=1)
    )
    assert torch.equal(dropped, observe.deterministic_dropout(x, 0.5, True))


# --- the invariance probe ------------------------------------------------------------------------


def _asked(answer):
    """An ``Ask`` running ``answer`` (no trap, no wire) that counts its calls."""
    calls = []

    def ask(call):
        calls.append(call)
        return observe.Observation(value=answer(*call.args))

    return ask, calls


def test_unchanged_names_its_mistake_only_where_the_output_changes():
    x = vocabulary.randn(2, 4, 3, seed=9)
    call = observe.Call("f", "f", (x,))
    last = vocabulary.redrawn(x, (slice(None), -1), seed=10)
    assert torch.equal(last[:, :-1], x[:, :-1]) and not torch.equal(last[:, -1], x[:, -1])
    causal = lambda t: t.cumsum(dim=1)  # noqa: E731  (position i sees positions <= i)
    mixing = lambda t: t + t.mean(dim=1, keepdim=True)  # noqa: E731  (every position sees all)
    before_last = (slice(None), slice(None, -1))
    probe = vocabulary.Unchanged(call, (last,), "sees the future", before_last)
    for answer, said in ((causal, None), (mixing, "sees the future")):
        ask, calls = _asked(answer)
        assert probe(observe.Observation(value=answer(x)), ask) == said
        assert [c.args[0] is last for c in calls] == [True]
    everywhere = vocabulary.Unchanged(call, (last,), "changed")  # the last position changes too
    ask, _ = _asked(causal)
    assert everywhere(observe.Observation(value=causal(x)), ask) == "changed"


def test_unchanged_compares_the_first_of_a_pair_and_asks_nothing_when_off():
    x = vocabulary.randn(3, 2, seed=11)
    call = observe.Call("f", "f", (x,))
    pair = lambda t: (t.cumsum(dim=0), t)  # noqa: E731
    other = vocabulary.redrawn(x, -1, seed=12)
    ask, calls = _asked(pair)
    assert (
        vocabulary.Unchanged(call, (other,), "leak", slice(0, -1))(
            observe.Observation(value=pair(x)), ask
        )
        is None
    )
    off = vocabulary.Unchanged(call, (other,), "leak", when=False)
    ask, calls = _asked(pair)
    assert off(observe.Observation(value=pair(x)), ask) is None and calls == []


def _judged(case: vocabulary.Case, value, info=None) -> str | None:
    """What ``runner.judge`` says of ``value`` as the observation of ``case`` (None: right)."""
    try:
        runner.judge(case, observe.Observation(value=value, info=info or {}), _asked(None)[0])
    except GradingError as error:
        return str(error)
    return None


def test_any_float_compares_in_the_answers_own_dtype_and_still_names_a_wrong_one():
    x = vocabulary.randn(5, seed=11)
    case = vocabulary.Case(observe.Call("f", "f", (x,)), "f(x)", reference=torch.sin, atol=1e-4)
    assert "dtype" in _judged(case, torch.sin(x).float())  # the exercise fixes the dtype
    case.any_float = True
    assert _judged(case, torch.sin(x).float()) is None
    assert _judged(case, torch.sin(x).half()) is None
    assert _judged(case, torch.cos(x).float()) is not None  # a wrong value is still wrong
    assert "dtype" in _judged(case, torch.sin(x).to(torch.int64))  # a float dtype, not any


def test_before_runs_its_probes_and_judges_its_parts_ahead_of_the_output_in_order():
    x = vocabulary.randn(4, seed=12)
    seen: list[str] = []

    def probe(obs, ask):
        seen.append("probe")
        return "the recorded run is wrong" if obs.info.get("bad_run") else None

    part = vocabulary.Intermediate(
        lambda obs: observe.Observation(value=obs.info["inner"]),
        lambda obs: (
            seen.append("part")
            or vocabulary.Case(
                observe.Call("g", "g", (x,)), "g(x)", expected=x * 2, slots=("inner",)
            )
        ),
    )
    call = observe.Call("f", "f", (x,))
    case = vocabulary.Case(call, "f(x)", expected=x * 3, slots=("outer",), before=(probe, part))
    assert _judged(case, x * 3, {"inner": x * 2}) is None and seen == ["probe", "part"]
    said = _judged(case, x * 3, {"inner": x * 2, "bad_run": True})
    assert said == "the recorded run is wrong" and seen[-1] == "probe"  # the part not reached
    assert _judged(case, x * 3, {"inner": x * 5}).startswith("inner")  # the part's own wording
    assert _judged(case, x * 4, {"inner": x * 2}).startswith("outer")  # then the output
