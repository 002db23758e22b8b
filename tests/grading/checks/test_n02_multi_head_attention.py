"""The checks of notebook 02 (multi-head attention): what is particular to them (how the
notebook and its checks fit together, forbidden built-ins, tensor subclasses, loading the
reference's weights into any layout, dropout in training mode). Every answer of tests/variants,
buggy, correct or stub, is graded in test_catalogue.py.
"""

from __future__ import annotations

import pytest
import torch
from grading.notebook_namespace import (
    Check,
    SolutionNotebook,
    stub,
)
from torch import nn

import encoder_lib
from encoder_lib import grading
from encoder_lib.grading import ForbiddenCallError, GradingError, runner, vocabulary
from encoder_lib.grading.checks import n02_multi_head_attention as checks

# test cell grade_id -> (answer cell grade_id, the name the answer defines, its check)
CHECKS = {
    "test_split_heads": Check("split_heads", "split_heads", grading.check_split_heads),
    "test_merge_heads": Check("merge_heads", "merge_heads", grading.check_merge_heads),
    "test_multi_head_attention": Check(
        "multi_head_attention", "MultiHeadAttention", grading.check_multi_head_attention
    ),
}
TEST_OF_CELL = {answer: test_cell for test_cell, (answer, _, _) in CHECKS.items()}
NOTEBOOK = SolutionNotebook("02_multi_head_attention", CHECKS)
BUGGY, CORRECT = NOTEBOOK.buggy, NOTEBOOK.correct
ANSWERS = NOTEBOOK.answers
assert set(ANSWERS) == set(TEST_OF_CELL)


def _mha(forward_body: str, init_extra: str = "") -> str:
    """A MultiHeadAttention answer with the given __init__ (plus ``init_extra``) and a forward."""
    return (
        "class MultiHeadAttention(nn.Module):\n"
        "    def __init__(self, embed_dim, num_heads, dropout=0.0):\n"
        "        super().__init__()\n"
        "        self.embed_dim, self.num_heads = embed_dim, num_heads\n"
        "        self.head_dim = embed_dim // num_heads\n"
        "        self.dropout = dropout\n"
        "        self.q_proj = nn.Linear(embed_dim, embed_dim)\n"
        "        self.k_proj = nn.Linear(embed_dim, embed_dim)\n"
        "        self.v_proj = nn.Linear(embed_dim, embed_dim)\n"
        "        self.out_proj = nn.Linear(embed_dim, embed_dim)\n"
        + init_extra
        + "\n    def forward(self, query, key, value, mask=None):\n"
        + forward_body
    )


def test_notebook_has_the_cells_the_variants_replace():
    assert list(ANSWERS) == [answer for answer, _, _ in CHECKS.values()]
    for test_cell in CHECKS:
        assert "grading.check_" in NOTEBOOK.source(test_cell)
        assert runner.EXERCISES[test_cell].target == CHECKS[test_cell].name
    for variant in BUGGY + CORRECT:
        assert variant.cell in ANSWERS, variant.name
        assert set(variant.fails) <= set(CHECKS), variant.name


# --- the reference solution ----------------------------------------------------------------------


def test_checks_leave_random_state_and_threads_alone():
    ns = NOTEBOOK.namespace()
    threads = torch.get_num_threads()
    state = torch.get_rng_state()
    for test_id in CHECKS:
        NOTEBOOK.run(test_id, ns, thorough=True)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.get_num_threads() == threads


# --- the untouched stubs -------------------------------------------------------------------------


def test_whole_stub_notebook_fails_every_test_cell():
    ns = NOTEBOOK.namespace({cell: stub(source) for cell, source in ANSWERS.items()})
    for test_id in CHECKS:
        error = NOTEBOOK.grade(test_id, ns)
        assert error is not None and "not written yet" in str(error)


def test_unfinished_helper_is_named():
    ns = NOTEBOOK.namespace({"split_heads": stub(ANSWERS["split_heads"])})
    with pytest.raises(GradingError, match="calls split_heads, which is not written yet"):
        grading.check_multi_head_attention(ns["MultiHeadAttention"])


def test_misspelt_forward_is_named():
    source = ANSWERS["multi_head_attention"].replace("def forward(", "def foward(")
    ns = NOTEBOOK.namespace({"multi_head_attention": source})
    with pytest.raises(GradingError, match="no method `forward`"):
        grading.check_multi_head_attention(ns["MultiHeadAttention"])


# --- forbidden built-ins -------------------------------------------------------------------------

_DELEGATES = {
    "F.multi_head_attention_forward": _mha(
        "        B, L_q, D = query.shape\n"
        "        w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])\n"
        "        b = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])\n"
        "        out, weights = F.multi_head_attention_forward(\n"
        "            query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), D,\n"
        "            self.num_heads, w, b, None, None, False, 0.0, self.out_proj.weight,\n"
        "            self.out_proj.bias, training=False,\n"
        "            key_padding_mask=None if mask is None else ~mask[:, 0, 0, :],\n"
        "            average_attn_weights=False,\n"
        "        )\n"
        "        return out.transpose(0, 1), weights\n"
    ),
    "nn.MultiheadAttention in forward": _mha(
        "        mha = nn.MultiheadAttention(self.embed_dim, self.num_heads, batch_first=True)\n"
        "        mha = mha.to(query.dtype)\n"
        "        with torch.no_grad():\n"
        "            mha.in_proj_weight.copy_(torch.cat(\n"
        "                [self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]))\n"
        "            mha.in_proj_bias.copy_(torch.cat(\n"
        "                [self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]))\n"
        "            mha.out_proj.load_state_dict(self.out_proj.state_dict())\n"
        "        pad = None if mask is None else ~mask[:, 0, 0, :]\n"
        "        return mha(query, key, value, key_padding_mask=pad,\n"
        "                   average_attn_weights=False)\n"
    ),
    "encoder_lib.MultiHeadAttention in forward": _mha(
        "        ref = encoder_lib.MultiHeadAttention(self.embed_dim, self.num_heads)\n"
        "        ref = ref.to(query.dtype)\n"
        "        with torch.no_grad():\n"
        "            ref.in_proj_weight.copy_(torch.cat(\n"
        "                [self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]))\n"
        "            ref.in_proj_bias.copy_(torch.cat(\n"
        "                [self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]))\n"
        "            ref.out_proj.load_state_dict(self.out_proj.state_dict())\n"
        "        return ref(query, key, value, mask)\n"
    ),
    "torch._native_multi_head_attention": _mha(
        "        w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])\n"
        "        b = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])\n"
        "        return torch._native_multi_head_attention(\n"
        "            query, key, value, self.embed_dim, self.num_heads, w, b,\n"
        "            self.out_proj.weight, self.out_proj.bias, None, True, False,\n"
        "        )\n"
    ),
    "nn.MultiheadAttention submodule": _mha(
        "        return self.inner(query, key, value, average_attn_weights=False)\n",
        init_extra=(
            "        self.inner = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)\n"
        ),
    ),
    "subclass of encoder_lib.MultiHeadAttention": (
        "class MultiHeadAttention(encoder_lib.MultiHeadAttention):\n    pass\n"
    ),
}


@pytest.mark.parametrize("source", list(_DELEGATES.values()), ids=list(_DELEGATES))
def test_delegating_to_builtin_attention_is_forbidden(source: str):
    ns = NOTEBOOK.namespace({"multi_head_attention": source})
    with pytest.raises(ForbiddenCallError, match="already does what this exercise asks"):
        grading.check_multi_head_attention(ns["MultiHeadAttention"])


def test_scaled_dot_product_attention_is_allowed_and_its_dropout_compared():
    # the solution uses encoder_lib.scaled_dot_product_attention; F's is used here for the output,
    # with its own dropout_p in training mode (the check makes that dropout repeatable)
    source = _mha(
        "        B, L_q, D = query.shape\n"
        "        q = split_heads(self.q_proj(query), self.num_heads)\n"
        "        k = split_heads(self.k_proj(key), self.num_heads)\n"
        "        v = split_heads(self.v_proj(value), self.num_heads)\n"
        "        p = self.dropout if self.training else 0.0\n"
        "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)\n"
        "        _, weights = encoder_lib.scaled_dot_product_attention(q, k, v, mask)\n"
        "        return self.out_proj(merge_heads(out)), weights\n"
    )
    ns = NOTEBOOK.namespace({"multi_head_attention": source})
    grading.check_multi_head_attention(ns["MultiHeadAttention"], thorough=True)


# --- load_reference_weights ----------------------------------------------------------------------


def _reference(D: int = 8, H: int = 2, bias: bool = True) -> encoder_lib.MultiHeadAttention:
    ref = encoder_lib.MultiHeadAttention(D, H, bias=bias).double()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return ref


class _Bare(nn.Module):
    def __init__(self, **layers):
        super().__init__()
        for name, layer in layers.items():
            setattr(self, name, layer)


@pytest.mark.parametrize("target", ["encoder_lib", "torch"])
def test_loader_fills_pytorch_fused_layout(target: str):
    ref = _reference()
    module = (
        encoder_lib.MultiHeadAttention(8, 2)
        if target == "encoder_lib"
        else nn.MultiheadAttention(8, 2, batch_first=True)
    ).double()
    assert grading.load_reference_weights(module, ref) is module
    for name, p in ref.state_dict().items():
        assert torch.equal(module.state_dict()[name], p), name


def test_loader_fills_separate_and_fused_linear_layouts():
    ref = _reference()
    w, b = ref.in_proj_weight.detach(), ref.in_proj_bias.detach()
    separate = _Bare(**{n: nn.Linear(8, 8) for n in ("q_proj", "k_proj", "v_proj", "out_proj")})
    grading.load_reference_weights(separate.double(), ref)
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        assert torch.equal(getattr(separate, name).weight, w[8 * i : 8 * (i + 1)])
        assert torch.equal(getattr(separate, name).bias, b[8 * i : 8 * (i + 1)])
    assert torch.equal(separate.out_proj.weight, ref.out_proj.weight)
    for fused_name in ("in_proj", "qkv_proj"):
        fused = _Bare(**{fused_name: nn.Linear(8, 24), "out_proj": nn.Linear(8, 8)}).double()
        grading.load_reference_weights(fused, ref)
        assert torch.equal(getattr(fused, fused_name).weight, w)
        assert torch.equal(getattr(fused, fused_name).bias, b)


def test_loader_keeps_the_modules_dtype():
    module = _Bare(**{n: nn.Linear(8, 8) for n in ("q_proj", "k_proj", "v_proj", "out_proj")})
    grading.load_reference_weights(module, _reference())
    assert all(p.dtype == torch.float32 for p in module.parameters())


def test_loader_handles_a_reference_without_biases():
    module = _Bare(**{n: nn.Linear(8, 8) for n in ("q_proj", "k_proj", "v_proj", "out_proj")})
    grading.load_reference_weights(module.double(), _reference(bias=False))
    assert all(not bool(layer.bias.any()) for layer in module.children())
    no_bias = _Bare(
        **{n: nn.Linear(8, 8, bias=False) for n in ("q_proj", "k_proj", "v_proj", "out_proj")}
    )
    grading.load_reference_weights(no_bias.double(), _reference(bias=False))


@pytest.mark.parametrize(
    ("layers", "says"),
    [
        ({}, "no attribute `q_proj`"),
        ({"q_proj": nn.Linear(8, 8), "k_proj": nn.Linear(8, 8)}, "but no `v_proj`"),
        (
            {n: nn.Linear(8, 8) for n in ("q_proj", "k_proj", "v_proj")},
            "no attribute `out_proj`",
        ),
        (
            {
                "q_proj": nn.Linear(8, 4),
                "k_proj": nn.Linear(8, 8),
                "v_proj": nn.Linear(8, 8),
                "out_proj": nn.Linear(8, 8),
            },
            "q_proj.weight should have shape (8, 8), got (4, 8)",
        ),
        (
            {n: nn.Linear(8, 8, bias=False) for n in ("q_proj", "k_proj", "v_proj", "out_proj")},
            "bias=True",
        ),
        ({"in_proj": nn.Linear(8, 8), "out_proj": nn.Linear(8, 8)}, "in_proj.weight"),
    ],
    ids=["nothing", "no_v_proj", "no_out_proj", "narrow_q_proj", "no_bias", "narrow_in_proj"],
)
def test_loader_names_what_is_missing_or_wrong(layers: dict, says: str):
    with pytest.raises(GradingError) as info:
        grading.load_reference_weights(_Bare(**layers).double(), _reference())
    assert says in str(info.value)


# --- the reference, dropout and the trip to the student's kernel ---------------------------------


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_the_catalogues_right_answer_is_the_reference(train):
    """``_attend`` with no mistake switched on (dropout on the weights) is encoder_lib's module,
    in eval mode and in training mode (repeatable dropout)."""
    _, D, H, tensors, mask = checks._inputs("cross_masked", 7)
    weights = checks._weights(D, 8)
    expected = checks._reference(weights, H, 0.5, torch.float64, train, *tensors, mask)
    with vocabulary.reference_mode():
        out, attention, _ = checks._attend(weights, H, *tensors, mask, p=0.5 if train else 0.0)
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(attention, expected[1])


def test_weights_returned_before_dropout_are_accepted_in_training():
    """In training mode only the output is compared: returning the weights before dropout (as
    some tutorials do) is not a mistake this course grades."""
    source = ANSWERS["multi_head_attention"]
    body = source[source.index("        ### BEGIN SOLUTION") :]
    call = "encoder_lib.scaled_dot_product_attention(q, k, v, mask"
    before = body.replace(
        f"out, weights = {call}, dropout_p)\n",
        f"out, _ = {call}, dropout_p)\n        _, weights = {call})\n",
    )
    assert before != body
    ns = NOTEBOOK.namespace({"multi_head_attention": source.replace(body, before)})
    grading.check_multi_head_attention(ns["MultiHeadAttention"], thorough=True)
