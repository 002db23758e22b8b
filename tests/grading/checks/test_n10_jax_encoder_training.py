"""What is particular to notebook 10's training-step check (n10_jax_encoder.py): the
grader's PyTorch replay is torch.optim.AdamW's, every named mistake moves the weights beyond the
tolerance within the three steps, and the key bias left out of the comparison is the one whose
gradient is zero in exact arithmetic. The answers themselves are graded in test_catalogue.py."""

from __future__ import annotations

import pytest
import torch

from encoder_lib.grading.checks import n10_jax_encoder as J


@pytest.fixture(scope="module")
def case():
    case = J._case(10_710, 1e-2, (0.9, 0.98), 0.05)
    options = case.call.options
    return case.call.state, options["batches"], options["hyper"]


def test_every_named_mistake_leaves_the_right_weights_within_three_steps(case):
    state, batches, hyper = case
    right = J._replay(state, batches, *hyper)
    for way, mistake in J._MISTAKES.items():
        wrong = J._replay(state, batches, *hyper, way=way)
        assert not all(
            J._same_weights(w["parameters"], r["parameters"])
            for w, r in zip(wrong, right, strict=True)
        ), mistake.id
        assert all(torch.equal(wrong[0]["grads"][n], g) for n, g in right[0]["grads"].items()), (
            f"{mistake.id}: the first step's gradients come before any update"
        )


def test_the_first_adam_step_cannot_tell_the_betas_or_a_fresh_state(case):
    """Why the check takes three steps: Adam's first step is lr * sign(g) whatever the betas."""
    state, batches, hyper = case
    right = J._replay(state, batches, *hyper)
    for way in ("betas swapped", "fresh state"):
        wrong = J._replay(state, batches, *hyper, way=way)
        assert J._same_weights(wrong[0]["parameters"], right[0]["parameters"]), way
        assert not J._same_weights(wrong[1]["parameters"], right[1]["parameters"]), way


def test_the_key_bias_gets_no_gradient_and_is_left_out(case):
    state, batches, hyper = case
    D = J._SIZES[0]
    grads = J._replay(state, batches, *hyper)[0]["grads"]["self_attn.in_proj_bias"]
    assert grads[D : 2 * D].abs().max() < 1e-6 < grads[:D].abs().max()
    kept = J._keep_key_bias("self_attn.in_proj_bias", torch.arange(3 * D))
    assert kept.tolist() == [*range(D), *range(2 * D, 3 * D)]


def test_the_grader_side_never_imports_jax():
    import subprocess
    import sys

    code = (
        "import sys; from encoder_lib.grading.checks import n10_jax_encoder as J; "
        "list(J._cases(True)); assert 'jax' not in sys.modules, 'jax imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
