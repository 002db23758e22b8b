"""The checks of notebook 07 (from the encoder to the decoder): what is particular to them (how
the notebook and its checks fit together, forbidden built-ins, the parts handed to student code
crossing the wire, the stand-in model of greedy decoding, training-mode cases, the exercises'
independence). Every answer of tests/variants, buggy, correct or stub, is graded in
test_catalogue.py.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from grading.notebook_namespace import (
    Check,
    SolutionNotebook,
    stub,
)
from variants import Variant

import encoder_lib
from encoder_lib import grading
from encoder_lib.grading import ForbiddenCallError, GradingError, runner, wire
from encoder_lib.grading.checks import n07_decoder
from encoder_lib.grading.kernel import forbidden, observe

# test cell grade_id -> (answer cell grade_id, the name the answer defines, its check)
CHECKS = {
    "test_causal_self_attention": Check(
        "causal_self_attention", "causal_self_attention", grading.check_causal_self_attention
    ),
    "test_cross_attention": Check(
        "cross_attention", "cross_attention", grading.check_cross_attention
    ),
    "test_decoder_layer": Check("decoder_layer", "DecoderLayer", grading.check_decoder_layer),
    "test_greedy_decode": Check("greedy_decode", "greedy_decode", grading.check_greedy_decode),
}
NOTEBOOK = SolutionNotebook("07_decoder", CHECKS)
BUGGY, CORRECT = NOTEBOOK.buggy, NOTEBOOK.correct
ANSWERS = NOTEBOOK.answers
CASES = {
    "test_causal_self_attention": n07_decoder._causal_cases,
    "test_cross_attention": n07_decoder._cross_cases,
    "test_decoder_layer": n07_decoder._layer_cases,
    "test_greedy_decode": n07_decoder._decode_cases,
}
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- the notebook and the module ----------------------------------------------------------------


def test_notebook_has_the_cells_the_checks_and_variants_use():
    assert list(ANSWERS) == [answer for answer, _, _ in CHECKS.values()]
    for test_cell, (answer, name, check) in CHECKS.items():
        assert "### BEGIN SOLUTION" in NOTEBOOK.source(answer)
        assert re.search(rf"^(def|class) {name}\b", NOTEBOOK.source(answer), re.M)
        assert f"grading.{check.__name__}(" in NOTEBOOK.source(test_cell)
        assert "### BEGIN HIDDEN TESTS" in NOTEBOOK.source(test_cell)
        exercise = runner.EXERCISES[test_cell]
        assert (exercise.target, f"check_{exercise.name}") == (name, check.__name__)


def test_about_ten_points_over_the_four_exercises():
    points = {t: NOTEBOOK.cells[t]["metadata"]["nbgrader"]["points"] for t in CHECKS}
    assert points == {
        "test_causal_self_attention": 2,
        "test_cross_attention": 2,
        "test_decoder_layer": 4,
        "test_greedy_decode": 2,
    }


def test_the_issues_mistakes_are_all_named():
    """Issue 12: the mask on the wrong side of the diagonal, keys and values taken from the
    decoder, the source mask applied to the queries, residual or norm order wrong, decoding that
    feeds the whole target at once."""
    names = {v.name for v in BUGGY}
    assert {
        "causal_triu",
        "causal_one_step_ahead",
        "cross_keys_and_values_from_decoder",
        "cross_source_mask_on_queries",
        "layer_keys_and_values_from_decoder",
        "layer_always_pre_norm",
        "layer_always_post_norm",
        "layer_norm_in_residual_branch",
        "layer_no_residual",
        "layer_cross_attention_first",
        "greedy_whole_target_at_once",
        "greedy_never_feeds_back",
    } <= names
    assert {v.cell for v in CORRECT} == set(ANSWERS)


def test_where_dropout_sits_is_checked_in_training_mode():
    names = {v.name for v in BUGGY}
    assert {
        "layer_no_dropout",
        "layer_no_dropout2",
        "layer_no_hidden_dropout",
        "layer_dropout_on_sublayer_inputs",
        "layer_dropout_after_norm",
        "layer_functional_dropout_in_eval",
    } <= names
    assert "layer_functional_dropout" in {v.name for v in CORRECT}
    trained = [case for case in n07_decoder._layer_cases(False) if case.call.train]
    assert {case.call.init[1]["norm_first"] for case in trained} == {False, True}


# --- defences -----------------------------------------------------------------------------------

FORBIDDEN = [v for v in BUGGY if v.name.startswith(("calls_", "uses_"))]


@pytest.mark.parametrize("variant", FORBIDDEN, ids=[v.name for v in FORBIDDEN])
def test_delegating_to_a_forbidden_builtin_is_refused_with_a_reason(variant: Variant):
    namespace = NOTEBOOK.namespace({variant.cell: variant.source})
    with pytest.raises(ForbiddenCallError) as info:
        NOTEBOOK.run(f"test_{variant.cell}", namespace, thorough=False)
    message = str(info.value)
    assert variant.says in message
    assert "already does what this exercise asks you to write" in message


def test_the_given_attention_may_use_the_fused_kernel():
    """(a), (b) and (c) hand over or give an encoder_lib.MultiHeadAttention, which calls
    F.scaled_dot_product_attention when need_weights=False (the solution's DecoderLayer does):
    it does none of the exercises' work, so it is not trapped."""
    for name in ("causal_self_attention", "cross_attention", "decoder_layer"):
        assert F.scaled_dot_product_attention not in forbidden.FORBIDDEN[name].torch
    assert F.multi_head_attention_forward in forbidden.FORBIDDEN["decoder_layer"].torch
    assert encoder_lib.causal_mask in forbidden.FORBIDDEN["causal_self_attention"].python
    assert encoder_lib.causal_mask not in forbidden.FORBIDDEN["decoder_layer"].python


# --- the parts handed to student code cross the wire ---------------------------------------------


WIRED = [v for v in BUGGY + CORRECT if v.cell in ("cross_attention", "greedy_decode")]
WIRED += [v for v in BUGGY if v.name in ("causal_triu", "causal_calls_attention_twice")]


@pytest.mark.parametrize("test_cell", list(CASES))
def test_the_calls_carry_no_expected_value(test_cell):
    """What enters the kernel is inputs and parts (weights, the stand-in model's options), never
    a value the answer is compared with."""
    for case in CASES[test_cell](True):
        message = wire.encode_call(case.call)
        sent = wire.decode_call(message)
        tensors = [t for t in _tensors(sent) if t.is_floating_point() or t.dtype == torch.int64]
        expected = case.expected if isinstance(case.expected, tuple) else (case.expected,)
        for want in expected:
            for t in tensors:
                same = t.shape == want.shape and torch.equal(t.to(want.dtype), want)
                assert not same, case.what


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, observe.Part):
        return _tensors(dict(value.tensors)) + _tensors(dict(value.options))
    if isinstance(value, observe.Call):
        return _tensors([value.args, dict(value.kwargs), value.state, value.init])
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _tensors(v)]
    return []


def test_the_attention_part_counts_its_calls():
    namespace = NOTEBOOK.namespace()
    case = next(iter(n07_decoder._causal_cases(False)))
    obs = runner.local(namespace)(case.call)
    assert obs.failure is None and obs.info["parts"] == [1]


# --- the stand-in model of greedy decoding -------------------------------------------------------


def _toy(V=13, ids=(1, 2, 0)):
    start, end, pad = ids
    part = observe.Part(
        "decoder.toy_model", options={"vocab": V, "start": start, "end": end, "pad": pad}
    )
    return n07_decoder._toy_model(part)


def test_the_stand_in_model_is_causal_and_reads_the_whole_history():
    model = _toy()
    src = torch.tensor([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 12]])
    tgt = torch.tensor([[1, 5, 9, 4, 7], [1, 3, 3, 8, 6]])
    logits = model(src, tgt)
    assert logits.shape == (2, 5, 13) and logits.dtype == torch.float64
    later = tgt.clone()
    later[:, 3:] = torch.tensor([[11, 12], [4, 5]])
    assert torch.equal(model(src, later)[:, :3], logits[:, :3]), "not causal"
    earlier = tgt.clone()
    earlier[:, 1] = torch.tensor([6, 4])
    changed = model(src, earlier).argmax(-1)
    assert (changed[:, 2:] != logits.argmax(-1)[:, 2:]).any(), "ignores the history"
    margins = logits.topk(2, dim=-1).values
    assert float((margins[..., 0] - margins[..., 1]).min()) > 2.0, "a near tie"


def test_the_stand_in_model_ends_after_the_source_and_refuses_float_ids():
    model = _toy()
    src = torch.tensor([[3, 4, 0, 0], [5, 6, 7, 8]])
    decoded = n07_decoder._decode(model, src, 6, 1, 2, 0)
    assert decoded[0, 2] == 2 and (decoded[0, 3:] == 0).all()
    assert decoded[1, 4] == 2 and (decoded[1, 5:] == 0).all()
    assert ((decoded[:, :2] > 2) & (decoded[:, :2] < 13)).all()
    with pytest.raises(TypeError, match="integer token ids"):
        model(src, torch.ones(2, 1))


def test_every_decoding_case_needs_the_loop():
    """In every case the right answer differs from a single call's, from feeding <start> only
    and from unpadded output, so those mistakes cannot pass by luck."""
    for case in n07_decoder._decode_cases(True):
        if case.call.args[2] < 2:
            continue
        wrong = case.mistakes()
        for text, value in wrong.items():
            if "the places after <end>" in text and not (case.expected == 2).any():
                continue  # a sequence that never ends has nothing to pad
            assert not torch.equal(value, case.expected), (case.what, text)


# --- the exercises are independent ---------------------------------------------------------------


def test_each_exercise_is_graded_on_its_own():
    """A student stuck on one exercise can earn the others: (a) and (b) get a ready-made
    attention, (c) finished masks, (d) a stand-in model."""
    for test_cell, (answer, _, _) in CHECKS.items():
        others = {a: stub(NOTEBOOK.source(a)) for a in ANSWERS if a != answer}
        namespace = NOTEBOOK.namespace(others)
        NOTEBOOK.run(test_cell, namespace, thorough=True)
        for other in others:
            with pytest.raises(GradingError, match="not written yet"):
                NOTEBOOK.run(f"test_{other}", namespace, thorough=False)
