"""The checks of notebook 09 (the encoder as it is built today): what is particular to them (the
library's and PyTorch's own answers refused, both rotary pairings asked for, the layer's given
``__init__`` loading the reference's weights, the catalogue's layer written out equal to the
reference, the wire). Every answer of tests/variants, buggy, correct or stub, is graded in
test_catalogue.py.
"""

from __future__ import annotations

import pytest
import torch
from grading.notebook_namespace import (
    Check,
    SolutionNotebook,
)

import encoder_lib
from encoder_lib.grading import vocabulary
from encoder_lib.grading.checks import layer_cases, n09_modern_encoder

CHECKS = {
    "test_rms_norm": Check("rms_norm", "rms_norm", n09_modern_encoder.check_rms_norm),
    "test_gated_feed_forward": Check(
        "gated_feed_forward", "GatedFeedForward", n09_modern_encoder.check_gated_feed_forward
    ),
    "test_apply_rotary": Check(
        "apply_rotary", "apply_rotary", n09_modern_encoder.check_apply_rotary
    ),
    "test_sliding_window_mask": Check(
        "sliding_window_mask", "sliding_window_mask", n09_modern_encoder.check_sliding_window_mask
    ),
    "test_modern_encoder_layer": Check(
        "modern_encoder_layer", "ModernEncoderLayer", n09_modern_encoder.check_modern_encoder_layer
    ),
}
POINTS = {
    "test_rms_norm": 2,
    "test_gated_feed_forward": 2,
    "test_apply_rotary": 3,
    "test_sliding_window_mask": 1,
    "test_modern_encoder_layer": 3,
}
NOTEBOOK = SolutionNotebook("09_modern_encoder", CHECKS)


def test_notebook_has_the_cells_and_points_the_checks_expect():
    NOTEBOOK.assert_cells_and_points(POINTS)
    assert sum(POINTS.values()) == 11


def test_the_given_inits_load_the_library_s_weights():
    """The checks load the reference's state dict into the student's modules: the given
    ``__init__``s must build the same parameters, and the solutions must then equal it."""
    namespace = NOTEBOOK.namespace()
    torch.manual_seed(0)
    library = encoder_lib.GatedFeedForward(12, activation="silu").eval()
    ours = namespace["GatedFeedForward"](12, activation="silu").eval()
    ours.load_state_dict(library.state_dict())
    x = torch.randn(2, 3, 12)
    torch.testing.assert_close(ours(x), library(x))

    library = encoder_lib.ModernEncoderLayer(
        16, 4, 20, window=4, eps=1e-6, norm="rms", pairing="adjacent"
    ).eval()
    ours = namespace["ModernEncoderLayer"](16, 4, 20, window=4, pairing="adjacent").eval()
    state = library.state_dict()
    ours.load_state_dict(
        {name: state[theirs] for name, theirs in n09_modern_encoder._STATE.items()}
    )
    x, mask = torch.randn(2, 9, 16), vocabulary.keep_first([9, 7], 9)
    torch.testing.assert_close(ours(x, mask), library(x, mask))


@pytest.mark.parametrize("train", [False, True])
def test_the_layer_written_out_by_the_catalogue_is_the_reference(train):
    """Every named mistake of exercise 5 is this formula with one thing changed: unchanged, it
    must give the reference's output, in eval and in training mode (deterministic dropout)."""
    for case in n09_modern_encoder._layer_cases(thorough=True):
        call = case.call
        (D, H), options = call.init
        if call.train != train:
            continue
        ref = n09_modern_encoder._reference_layer(
            D, H, options["d_ff"], options["window"], options["dropout"], options["pairing"],
            call.seed, call.dtype,
        )  # fmt: skip
        x, mask = call.args[0], call.kwargs["mask"]

        def written_out(ref=ref, x=x, mask=mask, window=options["window"]):
            return n09_modern_encoder._layer_formula(
                ref, x, mask, window, train, n09_modern_encoder._Way()
            )

        right = layer_cases.mistake_values(ref, train, {"": written_out})[""]
        assert vocabulary.close(right, case.expected, *vocabulary.tolerance(case, case.expected)), (
            case.what
        )


def test_both_pairings_are_asked_for_in_the_visible_tests():
    asked = {
        case.call.kwargs.get("pairing") for case in n09_modern_encoder._rotary_cases(thorough=False)
    }
    assert asked == {"halves", "adjacent"}
    halves_only = (
        'def apply_rotary(x, cos, sin, pairing="halves"):\n'
        "    x1, x2 = x.chunk(2, dim=-1)\n"
        "    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)\n"
    )
    namespace = NOTEBOOK.namespace({"apply_rotary": halves_only})
    error = NOTEBOOK.failure("test_apply_rotary", namespace)
    assert "pairing='adjacent'" in str(error)


@pytest.mark.parametrize(
    "cell, source, says",
    [
        (
            "rms_norm",
            "def rms_norm(x, weight, eps=1e-6):\n"
            "    return F.rms_norm(x, (x.shape[-1],), weight, eps)\n",
            "F.rms_norm",
        ),
        (
            "rms_norm",
            "def rms_norm(x, weight, eps=1e-6):\n"
            "    norm = nn.RMSNorm(x.shape[-1], eps=eps).to(x.dtype)\n"
            "    return norm(x) * weight\n",
            "nn.RMSNorm",
        ),
        (
            "rms_norm",
            "def rms_norm(x, weight, eps=1e-6):\n    return encoder_lib.rms_norm(x, weight, eps)\n",
            "encoder_lib.rms_norm",
        ),
        (
            "apply_rotary",
            'def apply_rotary(x, cos, sin, pairing="halves"):\n'
            "    return encoder_lib.apply_rotary(x, cos, sin, pairing)\n",
            "encoder_lib.apply_rotary",
        ),
        (
            "sliding_window_mask",
            "def sliding_window_mask(length, window):\n"
            "    return encoder_lib.sliding_window_mask(length, window)\n",
            "encoder_lib.sliding_window_mask",
        ),
    ],
)
def test_the_built_in_answer_earns_nothing(cell, source, says):
    namespace = NOTEBOOK.namespace({cell: source})
    error = NOTEBOOK.failure(f"test_{cell}", namespace)
    assert says in str(error) and "earns no points" in str(error)


@pytest.mark.parametrize(
    "cell, source, says",
    [
        (
            "gated_feed_forward",
            "class GatedFeedForward(encoder_lib.GatedFeedForward):\n"
            "    def forward(self, x):\n"
            "        return super().forward(x)\n",
            "encoder_lib.GatedFeedForward",
        ),
        (
            "modern_encoder_layer",
            "class ModernEncoderLayer(nn.Module):\n"
            "    def __init__(self, d_model, num_heads, d_ff=None, window=None, dropout=0.0,\n"
            "                 pairing='halves'):\n"
            "        super().__init__()\n"
            "        self.layer = encoder_lib.ModernEncoderLayer(\n"
            "            d_model, num_heads, d_ff, None, window, 'gelu', dropout, 1e-6, 'rms',\n"
            "            pairing=pairing)\n"
            "\n"
            "    def forward(self, x, mask=None):\n"
            "        return self.layer(x, mask)\n",
            "encoder_lib.ModernEncoderLayer",
        ),
    ],
)
def test_the_library_module_as_the_answer_earns_nothing(cell, source, says):
    namespace = NOTEBOOK.namespace({cell: source})
    error = NOTEBOOK.failure(f"test_{cell}", namespace)
    assert says in str(error)
