"""The checks of notebook 08 (masked-language-model pretraining): what is particular to them (a
random exercise judged by properties, the library's own functions refused as answers, the MLM
head's reference being the notebook's, the wire). Every answer of tests/variants, buggy, correct
or stub, is graded in test_catalogue.py.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from grading.notebook_namespace import (
    Check,
    SolutionNotebook,
)

import encoder_lib
from encoder_lib.grading import GradingError, runner
from encoder_lib.grading.checks import n08_pretraining

CHECKS = {
    "test_mask_tokens": Check("mask_tokens", "mask_tokens", n08_pretraining.check_mask_tokens),
    "test_masked_language_model": Check(
        "masked_language_model", "MaskedLanguageModel", n08_pretraining.check_masked_language_model
    ),
    "test_mlm_loss": Check("mlm_loss", "mlm_loss", n08_pretraining.check_mlm_loss),
    "test_fill_mask": Check("fill_mask", "fill_mask", n08_pretraining.check_fill_mask),
}
POINTS = {"test_mask_tokens": 3, "test_masked_language_model": 3, "test_mlm_loss": 2}
POINTS["test_fill_mask"] = 2
NOTEBOOK = SolutionNotebook("08_pretraining", CHECKS)


def test_notebook_has_the_cells_and_points_the_checks_expect():
    NOTEBOOK.assert_cells_and_points(POINTS)
    assert sum(POINTS.values()) == 10


def test_the_given_init_is_the_library_s():
    """The check loads the library model's state dict into the student's class: both must
    build the same parameters from the same seed, and the solution's forward must equal the
    library's."""
    namespace = NOTEBOOK.namespace()
    torch.manual_seed(0)
    ours = namespace["MaskedLanguageModel"](11, 7, d_model=8, num_heads=2, d_ff=16, num_layers=1)
    torch.manual_seed(0)
    library = encoder_lib.MaskedLanguageModel(11, 7, d_model=8, num_heads=2, d_ff=16, num_layers=1)
    assert list(ours.state_dict()) == list(library.state_dict())
    for name, tensor in library.state_dict().items():  # the same initial weights, scaling included
        torch.testing.assert_close(ours.state_dict()[name], tensor, msg=name)
    ours.load_state_dict(library.state_dict())
    ids = torch.tensor([[1, 5, 6, 7, 2, 0, 0], [1, 9, 4, 2, 0, 0, 0]])
    torch.testing.assert_close(ours.eval()(ids), library.eval()(ids))
    assert "embedding.weight" in dict(library.named_parameters())
    assert len(list(library.parameters())) == len(dict(library.named_parameters()))


def _correct_mask_tokens():
    return NOTEBOOK.namespace()["mask_tokens"]


@pytest.mark.parametrize("first_seed", [2000, 3000])
def test_a_correct_corruption_is_never_rejected_by_chance(first_seed):
    """The shares are judged with margins of 4.5 standard deviations: the solution, run with 40
    other generator seeds on every hidden case, always passes (the module's docstring gives the
    larger offline run)."""
    ask = runner.local({"mask_tokens": _correct_mask_tokens()})
    for seed in range(first_seed, first_seed + 40):
        for case in n08_pretraining._mask_cases(thorough=True):
            runs = ((seed, 1), (seed, 2), (seed + 1, 1))
            call = dataclasses.replace(case.call, options={"runs": runs})
            case.judge(ask(call), ask)  # raises GradingError if it rejects


@pytest.mark.parametrize(
    "cell, source, says",
    [
        (
            "mask_tokens",
            "def mask_tokens(token_ids, mask_id, first_word_id, vocab_size, p=0.15, "
            "generator=None):\n    return encoder_lib.mask_tokens(token_ids, mask_id, "
            "first_word_id, vocab_size, p, generator)\n",
            "encoder_lib.mask_tokens",
        ),
        (
            "mlm_loss",
            "def mlm_loss(logits, labels):\n    return encoder_lib.mlm_loss(logits, labels)\n",
            "encoder_lib.mlm_loss",
        ),
        (
            "mlm_loss",
            "def mlm_loss(logits, labels):\n    return F.nll_loss(F.log_softmax(logits, -1)"
            ".transpose(1, 2), labels)\n",
            "F.nll_loss",
        ),
        (
            "fill_mask",
            "def fill_mask(logits, token_ids, mask_id, first_word_id, k=5):\n    return "
            "encoder_lib.fill_mask(logits, token_ids, mask_id, first_word_id, k)\n",
            "encoder_lib.fill_mask",
        ),
    ],
)
def test_the_library_s_own_answer_earns_nothing(cell, source, says):
    namespace = NOTEBOOK.namespace({cell: source})
    error = NOTEBOOK.failure(f"test_{cell}", namespace)
    assert says in str(error) and "earns no points" in str(error)


def test_the_library_model_as_the_answer_earns_nothing():
    source = (
        "class MaskedLanguageModel(encoder_lib.MaskedLanguageModel):\n"
        "    def forward(self, token_ids):\n"
        "        return super().forward(token_ids)\n"
    )
    namespace = NOTEBOOK.namespace({"masked_language_model": source})
    error = NOTEBOOK.failure("test_masked_language_model", namespace)
    assert "encoder_lib.MaskedLanguageModel" in str(error)


def test_variants_cover_every_named_mistake_of_the_loss():
    """Each description of the loss's catalogue is the message of some buggy variant."""
    logits, labels = torch.randn(2, 3, 5, dtype=torch.float64), torch.tensor([[1, -100, 2]] * 2)
    catalogue = n08_pretraining._loss_variants(logits, labels)
    said = [v.says for v in NOTEBOOK.buggy if v.cell == "mlm_loss"]
    missing = [d for d in catalogue if not any(s.lower() in d.lower() for s in said)]
    assert missing == [], missing


def test_a_variant_with_no_mask_anywhere_is_named():
    source = (
        "def mask_tokens(token_ids, mask_id, first_word_id, vocab_size, p=0.15, "
        "generator=None):\n    return token_ids.clone(), torch.full_like(token_ids, -100)\n"
    )
    error = NOTEBOOK.failure("test_mask_tokens", NOTEBOOK.namespace({"mask_tokens": source}))
    assert isinstance(error, GradingError) and "probability p" in str(error)
