"""Fixtures shared by every test directory. Keep this file small: directory-specific fixtures
belong in that directory's own conftest.py."""

from pathlib import Path

import pytest
import torch

SLOW_SUITES = ("pipeline", "ui", "dask")
"""Folders of tests/ whose tests are marked ``slow`` (real nbgrader, a real browser, Dask)."""

QUICK_LEAVES_OUT = {
    # every variant of every answer judged twice, here and through the wire (test_wire.py,
    # which quick runs, checks the wire itself)
    "test_every_verdict_is_the_same_through_the_wire",
    # all-MiniLM-L6-v2 against Hugging Face's transformers, and re-encoded in other batchings;
    # notebook 08's whole transfer experiment (the other tests of those modules stay)
    "test_last_hidden_states_are_transformers_at_real_tokens",
    "test_sentence_vectors_are_transformers_mean_pooled_and_normalised",
    "test_encode_does_not_depend_on_order_or_batching",
    "test_transfer_experiment_rows",
    "test_transfer_experiment_reports_progress",
    "test_same_seed_same_history_and_weights_and_other_seed_differs",
    "test_optimizer_memory_measures_torch_optim_and_agrees_with_it",
    # the authorship rules on every buggy variant of a notebook (quick keeps the rules' own tests)
    "test_refused_buggy_variants_delegate_and_are_told_so",
    # every exercise's cases built twice; the grading report's command line
    "test_the_cases_of_every_exercise_are_built_the_same_twice",
    "test_an_exercise_whose_cases_fail_to_build_is_reported_and_the_others_compared",
    "test_the_command_says_in_one_line_why_it_cannot_report",
    # jupyter's and repo2docker's own command lines
    "test_jupyter_sees_the_student_config",
    "test_repo2docker_accepts_the_configuration",
}
"""Tests ``--quick`` leaves to ``make test``, besides the slow suites (by function name)."""
QUICK_LEAVES_OUT_FILES = {
    "test_jax_cache.py",
    "test_instructor_jax_cache.py",
    "test_warm_kernels.py",
}
"""Files ``--quick`` leaves to ``make test``: each test starts real kernels."""
QUICK_VARIANTS = 1
"""``--quick``: variants of ``tests/variants`` tried per answer cell, per test function."""


def pytest_addoption(parser):
    parser.addoption(
        "--quick",
        action="store_true",
        help="the inner loop (make quick): no slow suite, no whole-notebook runs, and each "
        f"check tried on its first {QUICK_VARIANTS} variant(s) per answer cell only",
    )


def _variant_key(item) -> tuple | None:
    """(test, assignment, answer cell) for a test parametrized with a ``variants.Variant``."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    variant = next((v for v in params.values() if type(v).__name__ == "Variant"), None)
    if variant is None:
        return None
    return (item.originalname, params.get("assignment"), variant.cell)


def _quick(items: list) -> tuple[list, list]:
    """(kept, left out): a deterministic sample, the same on every run (collection order)."""
    kept, left_out, seen = [], [], {}
    for item in items:
        key = _variant_key(item)
        if key is not None:
            seen[key] = seen.get(key, 0) + 1
        slow = item.get_closest_marker("slow") is not None
        named = item.originalname in QUICK_LEAVES_OUT or item.path.name in QUICK_LEAVES_OUT_FILES
        if slow or named or (key and seen[key] > QUICK_VARIANTS):
            left_out.append(item)
        else:
            kept.append(item)
    return kept, left_out


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).parent
    for item in items:
        parts = Path(item.path).relative_to(tests).parts if tests in Path(item.path).parents else ()
        if parts and parts[0] in SLOW_SUITES:
            item.add_marker(pytest.mark.slow)
    if config.getoption("--quick"):
        items[:], left_out = _quick(items)
        config.hook.pytest_deselected(items=left_out)


@pytest.fixture(autouse=True)
def _deterministic_torch():
    """Every test starts from the same random state, with the default dtype left untouched."""
    torch.manual_seed(0)
    dtype = torch.get_default_dtype()
    yield
    torch.set_default_dtype(dtype)
