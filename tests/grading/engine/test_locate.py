"""A mistake no catalogue entry names is localised (encoder_lib.grading.locate): the module
answers of notebooks 05-07 (the encoder layer, the classifier, the decoder layer) and greedy
decoding, judged with their catalogue and probes switched off.

- every buggy answer of tests/variants whose verdict comes from the catalogue (its id changes
  when the catalogue is off) is still named without it, by where it goes wrong;
- a few of those statements are checked word for word against what the answer does;
- what the kernel records can name a mistake, never pass a check: a forged or malformed record
  leaves a wrong answer wrong.
"""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch
from grading.notebook_namespace import NOTEBOOKS, own_test_cell
from variants import Variant

from encoder_lib.grading import runner, vocabulary
from encoder_lib.grading.kernel import observe

LOCALISED = {
    "05_encoder": ("encoder_layer",),
    "06_sentiment_capstone": ("sentiment_classifier",),
    "07_decoder": ("decoder_layer", "greedy_decode"),
}
"""The exercises whose cases carry a ``Locate``: the answer cells of module answers (and the
decoding loop) where a structural mistake can hide."""


@contextlib.contextmanager
def catalogue_off(test_cell: str):
    """The exercise graded by ``test_cell`` with no catalogue entry and no probe."""
    exercise = runner.EXERCISES[test_cell]
    original = exercise.cases

    def cases(thorough: bool):
        for case in original(thorough):
            yield dataclasses.replace(case, mistakes=None, probes=())

    cases.__module__ = original.__module__  # Exercise.topic reads it
    exercise.cases = cases
    try:
        yield
    finally:
        exercise.cases = original


def _bare(assignment: str, cell: str, source: str) -> runner.GradingError:
    """The failure of the answer's own check (every case) with the catalogue off."""
    notebook = NOTEBOOKS[assignment]
    own = own_test_cell(notebook, cell)
    namespace = notebook.namespace({cell: source})
    exercise = runner.EXERCISES[own]
    with catalogue_off(own), pytest.raises(runner.GradingError) as failed:
        runner.make_check(exercise)(namespace[exercise.target], thorough=True)
    return failed.value


def _buggy() -> list:
    return [
        pytest.param(assignment, variant, id=f"{assignment}-{variant.name}")
        for assignment, cells in LOCALISED.items()
        for variant in NOTEBOOKS[assignment].buggy
        if variant.cell in cells
    ]


def test_every_localised_exercise_has_its_locate():
    for assignment, cells in LOCALISED.items():
        notebook = NOTEBOOKS[assignment]
        for cell in cells:
            exercise = runner.EXERCISES[own_test_cell(notebook, cell)]
            assert all(case.locate is not None for case in exercise.cases(True)), cell


@pytest.mark.parametrize(("assignment", "variant"), _buggy())
def test_a_mistake_the_catalogue_names_is_localised_without_it(assignment, variant: Variant):
    """Without the catalogue, no buggy answer falls through to the generic "does not match the
    reference": it is localised, or decided before the values are compared (a forbidden call,
    an exception, a shape, no gradient)."""
    bare = _bare(assignment, variant.cell, variant.source)
    assert bare.mistake != "mismatch", str(bare)
    assert "does not match the reference" not in str(bare)


_LAYER = NOTEBOOKS["05_encoder"]
_NORM1_TWICE = _LAYER.source("encoder_layer").replace("self.norm2(", "self.norm1(")


@pytest.mark.parametrize(
    ("assignment", "name", "mistake", "words"),
    [
        (
            "05_encoder",
            "layer_no_residual",
            "part-input",
            "self.norm1 gets as its input what self.self_attn returns; it should get x (the "
            "layer's input) + what self.self_attn returns.",
        ),
        (
            "05_encoder",
            "layer_no_activation",
            "part-input",
            "self.linear2 gets as its input what self.linear1 returns; it should get "
            "relu(what self.linear1 returns).",
        ),
        (
            "07_decoder",
            "layer_keys_and_values_from_decoder",
            "part-input",
            "self.multihead_attn gets as key what self.norm1 returns; it should get memory (the "
            "encoder's output).",
        ),
        (
            "07_decoder",
            "layer_swaps_the_masks",
            "part-input",
            "self.self_attn gets as mask memory_mask; it should get tgt_mask.",
        ),
        (
            "06_sentiment_capstone",
            "encoder_mask_reversed",
            "part-input",
            "self.encoder gets as mask the padding mask (token_ids != self.pad_id, as (B, 1, 1, "
            "L)), inverted",
        ),
        (
            "06_sentiment_capstone",
            "eval_inside_forward",
            "part-output",
            "self.encoder gets the same arguments as in the reference but returns something else",
        ),
        (
            "07_decoder",
            "greedy_feeds_only_the_last_token",
            "part-input",
            "the model (its 2nd call) gets as tgt_in ids whose first row is [5]; it should get "
            "ids whose first row is [1, 5].",
        ),
        (
            "07_decoder",
            "greedy_hard_coded_pad",
            "part-input",
            "the model (its 4th call) gets as tgt_in ids whose row 1 is [4, 13, 7, 0]; in the "
            "reference that row is [4, 13, 7, 1].",
        ),
        (
            "07_decoder",
            "greedy_stops_at_the_first_end",
            "part-call-count",
            "the model is called 6 times; the reference calls it 9 times.",
        ),
        (
            "07_decoder",
            "greedy_no_padding_after_end",
            "combination",
            "row 0 of the output is [5, 6, 3, 4, 12, 2, 4, 3, 7], where it should be [5, 6, 3, "
            "4, 12, 2, 0, 0, 0].",
        ),
    ],
)
def test_what_the_localisation_says(assignment, name, mistake, words):
    variant = next(v for v in NOTEBOOKS[assignment].buggy if v.name == name)
    bare = _bare(assignment, variant.cell, variant.source)
    assert bare.mistake == mistake
    assert words in str(bare), str(bare)


def test_a_sub_module_used_for_another_s_place_is_named():
    """norm1 for both sub-layers (and no residual): norm2 never runs, norm1 runs twice."""
    bare = _bare("05_encoder", "encoder_layer", _NORM1_TWICE)
    assert bare.mistake == "part-never-called"
    assert "self.norm2 is never called, while self.norm1 is called twice" in str(bare)


def _layer_case() -> vocabulary.Case:
    exercise = runner.EXERCISES[own_test_cell(_LAYER, "encoder_layer")]
    return next(iter(exercise.cases(False)))


def _wrong_layer() -> vocabulary.Ask:
    """An Ask on notebook 05 whose EncoderLayer has no residual connections."""
    wrong = next(v for v in _LAYER.buggy if v.name == "layer_no_residual").source
    return runner.local(_LAYER.namespace({"encoder_layer": wrong}))


def _forging(ask: vocabulary.Ask, record) -> vocabulary.Ask:
    """``ask``, except that a traced call's record of the sub-modules is replaced by ``record``
    (what a tampered kernel could send back)."""

    def forged(call: observe.Call) -> observe.Observation:
        obs = ask(call)
        if observe.TRACE in call.options:
            obs.info[observe.TRACE] = record
        return obs

    return forged


@pytest.mark.parametrize("record", [None, "nonsense", [{"part": "norm9"}], [{"part": "norm1"}]])
def test_a_malformed_record_only_leaves_the_generic_message(record):
    ask = _wrong_layer()
    case = dataclasses.replace(_layer_case(), mistakes=None, probes=())
    with pytest.raises(runner.GradingError) as failed:
        runner.judge(case, ask(case.call), _forging(ask, record))
    assert failed.value.mistake == "mismatch"


def test_a_record_copied_from_the_reference_cannot_pass():
    """The kernel claims that every sub-module got what the reference gives it: the answer is
    still wrong (its values are), and the message says the combination is."""
    case = dataclasses.replace(_layer_case(), mistakes=None, probes=())
    ref, call = case.locate.reference, case.call
    parts = tuple(p for p in case.locate.parts if not p.startswith("dropout"))
    with observe.student_mode(""), torch.no_grad(), observe.trace_parts(ref, parts) as theirs:
        ref(*call.args, **call.kwargs)
    ask = _wrong_layer()
    with pytest.raises(runner.GradingError) as failed:
        runner.judge(case, ask(call), _forging(ask, theirs))
    assert failed.value.mistake == "combination"
