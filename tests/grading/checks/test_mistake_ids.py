"""Every verdict names its mistake with an id that does not change when the wording does.

- every catalogue entry of every registered exercise is a ``Mistake`` with a well-formed id
  (a checks module added later is checked too: it declares its ids the same way), and each id
  gives a value other than the reference's on some case of its exercise (else it could never
  be named);
- each generic step gives its own id (``runner.STEP_MISTAKES``), which no catalogue entry
  takes (but ``mismatch``, for a probe that only describes a difference);
- a failure that comes from an earlier exercise carries that exercise's mistake and test cell.

That every planted answer of tests/variants is named by an id is checked where they are all
graded, in test_catalogue.py.
"""

from __future__ import annotations

import pickle

import pytest
from grading.engine.test_runner import WITNESSES, _notebook_01, _variant
from grading.notebook_namespace import NOTEBOOKS, own_test_cell, run_test_cells

from encoder_lib import grading
from encoder_lib.grading import GradingError, runner, vocabulary
from encoder_lib.grading.feedback import MISTAKE_ID, Hinted, Mistake

STEP_IDS = {
    "module_renamed_parameters": "parameter-names",
    "calls_F_layer_norm": "forbidden-built-in",
    "uses_encoder_lib": "forbidden-built-in",
    "returns_tuple": "not-a-tensor",
    "subclass:answer_layer_norm": "tensor-subclass",
    "pooled_over_positions": "shape",
    "modifies_x_in_place": "in-place",
    "returns_float32": "dtype",
    "detached": "no-grad",
}
"""The witness of each generic step (test_runner.WITNESSES) -> the id its failure carries; the
other witnesses are named by their exercise's catalogue."""


SEEN_ONLY_WITH_AN_ANSWER = {("test_jax_encoder_block", "dropout-on-the-sum")}
"""Mistakes that show only in training mode, where the case's values are computed from the
dropout masks the answer records: test_n10_jax_encoder.py tries them with recorded masks."""


@pytest.mark.parametrize("test_cell", sorted(runner.EXERCISES))
def test_every_named_mistake_can_be_told_from_the_reference(test_cell):
    """Each mistake id of the exercise's catalogue (and of its gradient mistakes) gives, on at
    least one case, a value the reference's is not close to: an entry equal to the reference
    everywhere could never be named. (An entry may equal it on one case: a scale of sqrt(d_head)
    left out is no mistake when d_head = 1.)"""
    differs: dict[str, bool] = {}
    for case in runner.EXERCISES[test_cell].cases(True):
        if case.judge is not None:  # judged by properties: no catalogue of values
            continue
        atol, rtol = case.atol or 1e-6, case.rtol or 1e-5
        want = runner._computed(case.expected)
        entries = [(m, v, want) for m, v in (runner._computed(case.mistakes) or {}).items()]
        grads = runner._computed(case.grads) or {}
        entries += [(m, v, grads[n]) for n, w in case.grad_mistakes.items() for m, v in w.items()]
        for mistake, value, right in entries:
            mid = mistake.id
            differs[mid] = differs.get(mid, False) or not vocabulary.close(value, right, atol, rtol)
    never = {mid for mid, d in differs.items() if not d} - {
        mid for cell, mid in SEEN_ONLY_WITH_AN_ANSWER if cell == test_cell
    }
    assert never == set()


@pytest.mark.parametrize("test_cell", sorted(runner.EXERCISES))
def test_every_catalogue_entry_has_a_stable_id(test_cell):
    exercise = runner.EXERCISES[test_cell]
    try:
        entries = runner.catalogue(exercise)
    except Exception as error:
        pytest.fail(
            f"{exercise.title} ({exercise.topic}): its catalogue cannot be listed outside a "
            f"check ({type(error).__name__}: {error}); runner.catalogue must be able to read "
            "every Case.mistakes to check their ids"
        )
    unnamed = sorted({str(w)[:90] for _, w in entries if not isinstance(w, Mistake)})
    assert not unnamed, (
        f"{exercise.title} ({exercise.topic}): {len(unnamed)} catalogue entries have no id. Write "
        'each entry as Mistake("an-id", "its wording"): value (encoder_lib.grading.feedback). '
        f"Without an id: {unnamed[:5]}"
    )
    for _, wording in entries:
        assert MISTAKE_ID.fullmatch(wording.id), wording.id
        generic = wording.id in runner.STEP_MISTAKES and wording.id != "mismatch"
        assert not generic, f"{exercise.title}: {wording.id!r} is a generic step's id"


@pytest.mark.parametrize(
    ("assignment", "name"),
    [(a, name) for answers in WITNESSES.values() for a, name in answers if name in STEP_IDS],
)
def test_each_generic_step_names_its_failure(assignment, name):
    notebook = NOTEBOOKS[assignment]
    variant = _variant(notebook, name)
    error = run_test_cells(notebook, {variant.cell: variant.source})[
        own_test_cell(notebook, variant.cell)
    ]
    assert error.mistake == STEP_IDS[name]
    assert error.mistake in runner.STEP_MISTAKES


def test_the_generic_steps_are_all_known():
    assert set(STEP_IDS.values()) <= set(runner.STEP_MISTAKES)
    assert runner.UNEXPLAINED.issubset(runner.STEP_MISTAKES)
    assert all(MISTAKE_ID.fullmatch(step) for step in runner.STEP_MISTAKES)


def test_a_mistake_reads_as_its_wording_and_keeps_its_id():
    m = Mistake("scaled-by-d-k", "divided by {what}.", hint="look at the square root")
    assert m == "divided by {what}." and {m: 1}["divided by {what}."] == 1
    filled = m.format(what="d_k")
    assert (filled, filled.id, filled.hint) == ("divided by d_k.", "scaled-by-d-k", m.hint)
    again = pickle.loads(pickle.dumps(filled))
    assert (again, again.id, again.hint) == (filled, filled.id, filled.hint)
    assert Mistake("key-not-transposed", Hinted("Is key transposed?", "swap axes")).hint == (
        "swap axes"
    )
    error = GradingError(filled)
    assert (error.mistake, error.hint) == ("scaled-by-d-k", "look at the square root")
    with pytest.raises(ValueError, match="lowercase words joined by hyphens"):
        Mistake("Scaled by d_k", "...")


_BY_D_K = "    return query @ key.transpose(-2, -1) / query.shape[-1]\n"
_CALLS = "    weights = masked_softmax(attention_scores(query, key), mask)\n"


def test_a_mistake_that_lives_in_an_earlier_exercise_is_recorded_there():
    ns = _notebook_01(_BY_D_K, _CALLS + "    return weights @ value, weights\n")
    with pytest.raises(GradingError) as own:
        grading.check_attention_scores(ns["attention_scores"], thorough=True)
    with pytest.raises(GradingError) as dependent:
        grading.check_scaled_dot_product_attention(ns["scaled_dot_product_attention"], True)
    assert (own.value.mistake, own.value.root) == ("scaled-by-d-k", None)
    assert dependent.value.mistake == "scaled-by-d-k"
    assert dependent.value.root == "test_attention_scores"
    assert dependent.value.root_title == "Exercise 1 · attention_scores"


def test_an_unwritten_exercise_called_later_is_counted_where_it_is_not_written():
    ns = _notebook_01(
        "    raise NotImplementedError()\n", _CALLS + "    return weights @ value, weights\n"
    )
    with pytest.raises(GradingError) as dependent:
        grading.check_scaled_dot_product_attention(ns["scaled_dot_product_attention"], True)
    assert "it calls attention_scores, which is not written yet" in dependent.value.problem
    assert (dependent.value.mistake, dependent.value.root) == (
        "not-written",
        "test_attention_scores",
    )


def test_a_forbidden_call_in_an_earlier_exercise_is_counted_there():
    notebook = NOTEBOOKS["01_self_attention"]
    variant = _variant(notebook, "scores_forbidden_sdpa_weights")
    errors = run_test_cells(notebook, {variant.cell: variant.source})
    failing = {cell: error for cell, error in errors.items() if error is not None}
    assert set(failing) == set(variant.fails)
    for cell, error in failing.items():
        assert error.mistake == "forbidden-built-in"
        assert (error.root or cell) == "test_attention_scores"
