"""Every answer of tests/variants, graded the way nbgrader grades it: the solution notebook's
answer cells run in a notebook-like namespace (one replaced by the variant or by its released
stub), then the source of each test cell below the replaced answer runs as written, visible
and hidden parts together (a test cell above it gives its verdict before the answer exists).

- the reference solution keeps every test cell's points, printing only its "Correct: ..." lines,
  and leaves the notebook's random state and torch's thread count alone;
- a buggy answer scores 0 on exactly the test cells it lists, and the test cell that grades its
  own answer cell names the mistake (``says``) and its id; a test cell that says the mistake
  lives in the answer (``also_says``) records that answer's test cell as the mistake's root;
  every other test cell keeps its points;
- a correct answer keeps every point, silently;
- an untouched stub makes its test cell say "not written yet";
- an answer that returns a Tensor subclass (which could lie in ``__torch_function__``) instead of
  plain tensors is refused, wherever in its output the subclass sits;
- every verdict is the same when each call and observation goes through ``wire`` (as between
  nbgrader's process and the student's kernel at autograde) as when judged in one process.

Topic-specific behaviour (forbidden built-ins, tampering, loaders...) is tested beside it, in
test_nNN_<notebook>.py.
"""

from __future__ import annotations

import pytest
import torch
from grading.notebook_namespace import (
    NOTEBOOKS,
    cells_below,
    expect_exported,
    grade_test_cells,
    own_test_cell,
    returning_subclass,
    run_test_cells,
    stub,
    verdicts_here_and_wired,
)
from variants import ASSIGNMENTS, Variant

from encoder_lib import grading
from encoder_lib.grading import GradingError, runner


def _params(kind: str) -> list:
    return [
        pytest.param(assignment, variant, id=f"{assignment}-{variant.cell}-{variant.name}")
        for assignment, notebook in NOTEBOOKS.items()
        for variant in (notebook.buggy if kind == "buggy" else notebook.correct)
    ]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_variants_fit_the_notebook(assignment):
    notebook = NOTEBOOKS[assignment]
    assert len(notebook.answers) >= 2 and len(notebook.tests) >= 2
    names = [(v.cell, v.name) for v in notebook.buggy + notebook.correct]
    assert len(set(names)) == len(names), "two variants share a cell and a name"
    for variant in notebook.buggy + notebook.correct:
        assert variant.cell in notebook.answers, variant.name
        assert set(variant.fails) <= set(notebook.tests), variant.name
    for variant in notebook.buggy:
        assert variant.says, variant.name
        assert variant.mistake, f"{variant.name} declares no mistake id"
        assert own_test_cell(notebook, variant.cell) in variant.fails, variant.name


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_reference_solution_keeps_every_point_silently(assignment, capsys, recwarn):
    """... and leaves the notebook's random state and torch's thread count as they were."""
    notebook = NOTEBOOKS[assignment]
    namespace = notebook.namespace()
    torch.manual_seed(123)
    state, threads = torch.get_rng_state(), torch.get_num_threads()
    errors = grade_test_cells(notebook, namespace)
    assert torch.equal(torch.get_rng_state(), state), "a check used the notebook's random state"
    assert torch.get_num_threads() == threads
    assert errors == dict.fromkeys(notebook.tests)
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == len(notebook.tests) and all(line.startswith("Correct") for line in lines)
    assert captured.err == ""
    assert [str(w.message) for w in recwarn] == []


@pytest.mark.parametrize(("assignment", "variant"), _params("buggy"))
def test_buggy_answer_loses_exactly_its_cells_and_is_named(assignment, variant: Variant):
    notebook = NOTEBOOKS[assignment]
    assert set(variant.fails) <= set(cells_below(notebook, variant.cell)), (
        "a test cell above the answer cannot fail on it"
    )
    errors = run_test_cells(notebook, {variant.cell: variant.source})
    failing = {test_cell for test_cell, error in errors.items() if error is not None}
    assert failing == set(variant.fails), {t: str(e) for t, e in errors.items() if e}
    own = own_test_cell(notebook, variant.cell)
    message = str(errors[own])
    assert variant.says.lower() in message.lower(), message
    # the instructor's report counts it by its id (feedback.Mistake), where it lives: the id
    # the variant declares
    assert errors[own].mistake is not None, f"no mistake id for: {message}"
    assert errors[own].mistake == variant.mistake, message
    for test_cell, words in variant.also_says:
        other = str(errors[test_cell])
        assert words.lower() in other.lower(), other
        assert errors[test_cell].root == own, other


# --- the catalogue and the buggy answers, both ways ----------------------------------------------

UNMADE: dict[tuple[str, str], str] = {
    ("test_masked_mean", "mask-along-features"): (
        "only on the hidden case h (1, 4, 4), where L = D and keep (B, L) broadcasts along the "
        "features; on every other case h * keep raises first, named keep-without-trailing-axis "
        "(the buggy answer no_trailing_axis)"
    ),
    ("test_sentence_embedding", "mask-reversed"): (
        "only on the hidden cases where every sentence has padding; on the visible case "
        "(lengths [5, 3]) a reversed mask averages no position of the full sentence, and the "
        "padding probe names it first, padding-leaks (the buggy answer mask_reversed)"
    ),
}
"""``(test cell, mistake id)`` of a catalogue entry no buggy answer makes -> why: shadowed by
an earlier entry (which) on every case where it differs from the reference, or seen only on a
hidden case, or (``"no variant yet"``) reachable but still without its buggy answer."""


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_catalogue_id_is_made_by_a_buggy_answer_or_listed(assignment):
    """Each id of each exercise's catalogue (``runner.catalogue``: ``Case.mistakes`` and
    ``Case.grad_mistakes``) is declared by a buggy answer of that exercise (which
    test_buggy_answer_loses_exactly_its_cells_and_is_named proves it makes), or listed in
    ``UNMADE`` with its reason; a listed id that an answer makes is taken off the list."""
    notebook = NOTEBOOKS[assignment]
    made: dict[str, set[str]] = {}
    for variant in notebook.buggy:  # a dependent test cell names its mistake by the same id
        for test_cell in variant.fails:
            made.setdefault(test_cell, set()).add(variant.mistake)
    for test_cell in notebook.tests:
        exercise = runner.EXERCISES[test_cell]
        ids = {wording.id for _, wording in runner.catalogue(exercise)}
        listed = {mid for cell, mid in UNMADE if cell == test_cell}
        assert sorted(ids - made.get(test_cell, set()) - listed) == [], test_cell
        assert listed & made.get(test_cell, set()) == set(), f"{test_cell}: made, not unmade"
        assert listed <= ids, f"{test_cell}: listed ids no longer in the catalogue"


@pytest.mark.parametrize(("assignment", "variant"), _params("correct"))
def test_correct_answer_keeps_every_point_silently(assignment, variant: Variant, capsys, recwarn):
    notebook = NOTEBOOKS[assignment]
    errors = run_test_cells(notebook, {variant.cell: variant.source})
    assert {t: str(e) for t, e in errors.items() if e} == {}
    assert capsys.readouterr().err == ""
    assert [str(w.message) for w in recwarn] == []


@pytest.mark.parametrize(
    ("assignment", "answer"),
    [(a, answer) for a, notebook in NOTEBOOKS.items() for answer in notebook.answers],
)
def test_untouched_stub_says_not_written_yet(assignment, answer):
    notebook = NOTEBOOKS[assignment]
    own = own_test_cell(notebook, answer)
    errors = run_test_cells(notebook, {answer: stub(notebook.source(answer))}, [own])
    message = str(errors[own])
    assert "not written yet" in message and "NotImplementedError" in message, message


# --- through the wire ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("assignment", "answer"),
    [(a, answer) for a, notebook in NOTEBOOKS.items() for answer in notebook.answers],
)
def test_every_verdict_is_the_same_through_the_wire(assignment, answer):
    """The exercise of ``answer``'s test cell, thoroughly, on the solution and on every variant
    of ``answer``: the verdict judged here and the verdict with every call and observation
    encoded and decoded by ``wire`` are the same text (None: passed)."""
    notebook = NOTEBOOKS[assignment]
    test_cell = own_test_cell(notebook, answer)
    variants = [v for v in [*notebook.buggy, *notebook.correct] if v.cell == answer]
    for variant in [None, *variants]:
        namespace = notebook.namespace({} if variant is None else {answer: variant.source})
        here, wired = verdicts_here_and_wired(namespace, test_cell)
        name = "the solution" if variant is None else variant.name
        assert here == wired, name
        assert (here is None) == (variant is None or test_cell not in variant.fails), name


# --- Tensor subclasses ---------------------------------------------------------------------------

# The answers whose outputs hold no torch tensor (a number, JAX arrays, strings, a module), so
# there is nothing to swap for a subclass; every other answer is tried.
RETURNS_NO_TENSOR = {
    ("04_feed_forward", "answer_count_parameters"),
    ("06_sentiment_capstone", "train_step"),
    ("10_jax_encoder", "jax_dropout"),
    ("10_jax_encoder", "jax_load_linear"),
    ("10_jax_encoder", "jax_layer_norm"),
    ("10_jax_encoder", "jax_feed_forward"),
    ("10_jax_encoder", "jax_attention"),
    ("10_jax_encoder", "jax_encoder_block"),
    ("10_jax_encoder", "jax_train_step"),  # JAX arrays, an nnx.State, an nnx.Optimizer
    ("11_real_encoder", "answer_wordpiece"),  # lists of strings
    ("11_real_encoder", "answer_tokenize"),
    ("11_real_encoder", "answer_load_bert_layer"),  # an EncoderLayer, run by the check
}


def _own_cell_says(notebook, answer, at):
    """What the answer's own test cell says with the subclass at ``at``, and what the returns
    held."""
    namespace = notebook.namespace({answer: returning_subclass(notebook.source(answer))})
    returned: list = []
    namespace |= {"_SNEAKED": returned, "_SNEAK_AT": at}
    try:
        notebook.execute(own_test_cell(notebook, answer), namespace)
    except GradingError as error:
        return str(error), returned
    return "", returned


@pytest.mark.parametrize(
    ("assignment", "answer"),
    [(a, answer) for a, notebook in NOTEBOOKS.items() for answer in notebook.answers],
)
def test_a_tensor_subclass_anywhere_in_the_output_is_refused(assignment, answer):
    notebook = NOTEBOOKS[assignment]
    said, returned = _own_cell_says(notebook, answer, None)
    held_tensors = any(r == "tensor" or (isinstance(r, tuple) and any(r)) for r in returned)
    if (assignment, answer) in RETURNS_NO_TENSOR:
        assert not held_tensors, f"{answer} returned tensors: try it (out of RETURNS_NO_TENSOR)"
        return
    assert held_tensors, f"{answer} returned {set(map(str, returned))}: no tensor to swap"
    assert "Tensor subclass" in said, said
    # A tuple's items one at a time: a subclass in any one of them is refused too.
    shapes = {r for r in returned if isinstance(r, tuple)}
    for i in sorted({i for r in shapes for i, is_tensor in enumerate(r) if is_tensor}):
        said, _ = _own_cell_says(notebook, answer, i)
        assert "Tensor subclass" in said, f"item {i} of the output alone: {said}"


# --- what encoder_lib.grading exports --------------------------------------------------------

# Public names of a checks module that are not the check of one of its exercises.
OTHER_EXPORTS = {"encoder_lib.grading.checks.n02_multi_head_attention": {"load_reference_weights"}}


def test_every_topic_module_exports_the_checks_of_its_exercises():
    """Each notebook's module of ``encoder_lib.grading.checks`` has as ``__all__``
    ``check_<name>`` for each exercise it registers (plus ``OTHER_EXPORTS``), and
    ``encoder_lib.grading`` exports the same objects."""
    checks: dict[str, set[str]] = {}
    for exercise in runner.EXERCISES.values():
        checks.setdefault(exercise.topic, set()).add(f"check_{exercise.name}")
    modules = grading.checks.NOTEBOOKS
    assert {m.__name__ for m in modules} == set(checks)
    for module in modules:
        expect_exported(module, checks[module.__name__] | OTHER_EXPORTS.get(module.__name__, set()))


def test_every_exercise_is_graded_by_one_test_cell_that_calls_its_check():
    """Its test cell is in exactly one notebook, locked and graded, calls
    ``grading.check_<name>(<target>)`` visibly and with ``thorough=True``, and has hidden tests;
    every notebook's setup cell is locked."""
    for test_cell, exercise in runner.EXERCISES.items():
        where = [a for a, notebook in NOTEBOOKS.items() if test_cell in notebook.tests]
        assert len(where) == 1, f"{test_cell} is in {where}"
        notebook = NOTEBOOKS[where[0]]
        meta = notebook.cells[test_cell]["metadata"]["nbgrader"]
        assert meta["grade"] and meta["locked"] and meta["points"] > 0, test_cell
        source = notebook.source(test_cell)
        call = f"grading.check_{exercise.name}({exercise.target}"
        assert f"{call})" in source and f"{call}, thorough=True)" in source, test_cell
        assert "### BEGIN HIDDEN TESTS" in source, test_cell
    for assignment, notebook in NOTEBOOKS.items():
        assert notebook.cells["setup"]["metadata"]["nbgrader"]["locked"], assignment
