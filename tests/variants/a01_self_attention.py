"""Answers to notebook 01 (self-attention), written the way students write them.

Answer cells (grade_id): ``attention_scores``, ``masked_softmax``, ``causal_mask``,
``scaled_dot_product_attention``; their test cells are the same names prefixed with ``test_``.
The reference ``scaled_dot_product_attention`` calls ``attention_scores`` and
``masked_softmax``, so a wrong helper also fails the attention test cell (``fails`` lists both),
unless the mistake only shows on inputs that test does not use (large scores, in-place edits).
"""

from __future__ import annotations

from variants import Variant

SCORES = "test_attention_scores"
SOFTMAX = "test_masked_softmax"
CAUSAL = "test_causal_mask"
ATTENTION = "test_scaled_dot_product_attention"


def _scores(body: str) -> str:
    return f"def attention_scores(query, key):\n{body}"


def _softmax(body: str) -> str:
    return f"def masked_softmax(scores, mask=None):\n{body}"


def _causal(body: str) -> str:
    return f"def causal_mask(L):\n{body}"


def _attention(body: str) -> str:
    return f"def scaled_dot_product_attention(query, key, value, mask=None):\n{body}"


BUGGY = [
    # --- attention_scores ----------------------------------------------------------------------
    Variant(
        "scores_not_scaled",
        "attention_scores",
        _scores("    return query @ key.transpose(-2, -1)\n"),
        (SCORES, ATTENTION),
        "not scaled",
        mistake="not-scaled",
    ),
    Variant(
        "scores_scaled_by_d_k",
        "attention_scores",
        _scores("    d_k = query.shape[-1]\n    return query @ key.transpose(-2, -1) / d_k\n"),
        (SCORES, ATTENTION),
        "instead of sqrt(d_k)",
        # the attention test cell says where the mistake lives
        also_says=((ATTENTION, "this comes from your attention_scores (exercise 1)"),),
        mistake="scaled-by-d-k",
    ),
    Variant(
        "scores_made_double",
        "attention_scores",
        _scores(
            "    d_k = query.shape[-1]\n"
            "    return (query @ key.transpose(-2, -1) / math.sqrt(d_k)).double()\n"
        ),
        (SCORES, ATTENTION),
        "has dtype torch.float64, but the inputs were torch.float32",
        also_says=((ATTENTION, "this comes from your attention_scores (exercise 1)"),),
        mistake="dtype",
    ),
    Variant(
        "key_not_transposed",
        "attention_scores",
        _scores("    return query @ key / math.sqrt(query.shape[-1])\n"),
        (SCORES, ATTENTION),
        "Is key transposed?",
        also_says=((ATTENTION, "this comes from your attention_scores (exercise 1)"),),
        mistake="key-not-transposed",
    ),
    Variant(
        "scores_scale_multiplied",
        "attention_scores",
        _scores(
            "    d_k = query.size(-1)\n"
            "    return torch.matmul(query, key.transpose(-2, -1)) * math.sqrt(d_k)\n"
        ),
        (SCORES, ATTENTION),
        "multiplied by sqrt(d_k)",
        mistake="multiplied-by-sqrt-d-k",
    ),
    Variant(
        "scores_key_T_on_batch",
        "attention_scores",
        _scores("    return query @ key.T / math.sqrt(query.shape[-1])\n"),
        (SCORES, ATTENTION),
        "batch",
        mistake="batch-axes",
    ),
    Variant(
        "scores_transpose_0_1",
        "attention_scores",
        _scores("    return query @ key.transpose(0, 1) / math.sqrt(query.shape[-1])\n"),
        (SCORES, ATTENTION),
        "batch",
        mistake="batch-axes",
    ),
    Variant(
        "scores_d_k_from_axis_1",
        "attention_scores",
        _scores(
            "    d_k = key.size(1)\n    return query @ key.transpose(-2, -1) / math.sqrt(d_k)\n"
        ),
        (SCORES, ATTENTION),
        "sqrt(L_k)",
        mistake="batch-axes",
    ),
    Variant(
        "scores_axes_from_the_front",
        "attention_scores",
        _scores("    return query @ key.transpose(1, 2) / math.sqrt(query.shape[-1])\n"),
        (SCORES, ATTENTION),
        "count axes from the end",
        mistake="single-sequence-axes",
    ),
    Variant(
        "scores_key_query_swapped",
        "attention_scores",
        _scores("    return key @ query.transpose(-2, -1) / math.sqrt(query.shape[-1])\n"),
        (SCORES, ATTENTION),
        "wrong order",
        mistake="shape",
    ),
    Variant(
        "scores_forbidden_sdpa_weights",
        "attention_scores",
        _scores(
            "    _, weights = encoder_lib.scaled_dot_product_attention(query, key, key)\n"
            "    return torch.log(weights)\n"
        ),
        (SCORES, ATTENTION),
        "encoder_lib.attention.scaled_dot_product_attention",
        mistake="forbidden-built-in",
    ),
    # --- masked_softmax ------------------------------------------------------------------------
    Variant(
        "softmax_over_queries",
        "masked_softmax",
        _softmax(
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(~mask, float('-inf'))\n"
            "    weights = torch.softmax(scores, dim=-2)\n"
            "    return torch.nan_to_num(weights, nan=0.0)\n"
        ),
        (SOFTMAX, ATTENTION),
        "query axis",
        mistake="softmax-over-queries",
    ),
    Variant(
        "softmax_over_batch",
        "masked_softmax",
        _softmax(
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(~mask, float('-inf'))\n"
            "    return torch.nan_to_num(F.softmax(scores, dim=0))\n"
        ),
        (SOFTMAX, ATTENTION),
        "dim=0",
        mistake="softmax-over-batch",
    ),
    Variant(
        "mask_polarity_reversed",
        "masked_softmax",
        _softmax(
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(mask, float('-inf'))\n"
            "        weights = torch.softmax(scores, dim=-1)\n"
            "        return weights.masked_fill(mask.all(dim=-1, keepdim=True), 0.0)\n"
            "    return torch.softmax(scores, dim=-1)\n"
        ),
        (SOFTMAX, ATTENTION),
        "polarity is reversed",
        mistake="mask-reversed",
    ),
    Variant(
        "tutorial_fill_reversed",
        "masked_softmax",
        _softmax(
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(mask == 1, -1e9)\n"
            "    return scores.softmax(dim=-1)\n"
        ),
        (SOFTMAX, ATTENTION),
        "polarity is reversed",
        mistake="mask-reversed",
    ),
    Variant(
        "mask_after_softmax",
        "masked_softmax",
        _softmax(
            "    weights = torch.softmax(scores, dim=-1)\n"
            "    if mask is not None:\n"
            "        weights = weights * mask\n"
            "    return weights\n"
        ),
        (SOFTMAX, ATTENTION),
        "after the softmax",
        mistake="mask-after-softmax",
    ),
    Variant(
        "mask_after_softmax_masked_fill",
        "masked_softmax",
        _softmax(
            "    weights = torch.softmax(scores, dim=-1)\n"
            "    if mask is None:\n"
            "        return weights\n"
            "    return weights.masked_fill(~mask, 0.0)\n"
        ),
        (SOFTMAX, ATTENTION),
        "sum to 1",
        mistake="mask-after-softmax",
    ),
    Variant(
        "mask_added_as_0_1",
        "masked_softmax",
        _softmax(
            "    if mask is not None:\n"
            "        scores = scores + mask\n"
            "    return torch.softmax(scores, dim=-1)\n"
        ),
        (SOFTMAX, ATTENTION),
        "added to the scores",
        mistake="mask-added",
    ),
    Variant(
        "mask_multiplied",
        "masked_softmax",
        _softmax(
            "    if mask is not None:\n"
            "        scores = scores * mask\n"
            "    return torch.softmax(scores, dim=-1)\n"
        ),
        (SOFTMAX, ATTENTION),
        "set to 0",
        mistake="mask-multiplied",
    ),
    Variant(
        "mask_ignored",
        "masked_softmax",
        _softmax("    return torch.softmax(scores, dim=-1)\n"),
        (SOFTMAX, ATTENTION),
        "ignored",
        mistake="mask-ignored",
    ),
    Variant(
        "fully_masked_rows_nan",
        "masked_softmax",
        _softmax(
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(~mask, float('-inf'))\n"
            "    return torch.softmax(scores, dim=-1)\n"
        ),
        (SOFTMAX, ATTENTION),
        "NaN",
        mistake="dead-row-nan",
    ),
    Variant(
        "finite_fill_uniform_rows",
        "masked_softmax",
        _softmax(
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(mask == 0, -1e9)\n"
            "    return F.softmax(scores, dim=-1)\n"
        ),
        (SOFTMAX, ATTENTION),
        "1/L_k",
        mistake="dead-row-uniform",
    ),
    Variant(
        "exp_without_max_subtraction",
        "masked_softmax",
        _softmax(
            "    e = torch.exp(scores)\n"
            "    if mask is not None:\n"
            "        e = e * mask\n"
            "    total = e.sum(dim=-1, keepdim=True)\n"
            "    return torch.where(total > 0, e / total.clamp_min(1e-300), torch.zeros_like(e))\n"
        ),
        (SOFTMAX,),
        "overflow",
        mistake="exp-overflow",
    ),
    Variant(
        "normalised_over_everything",
        "masked_softmax",
        _softmax(
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(~mask, float('-inf'))\n"
            "    e = torch.exp(scores - scores.max())\n"
            "    return e / e.sum()\n"
        ),
        (SOFTMAX, ATTENTION),
        "must sum to 1",
        mistake="rows-not-sum-to-1",
    ),
    Variant(
        "masked_fill_in_place",
        "masked_softmax",
        _softmax(
            "    if mask is None:\n"
            "        return torch.softmax(scores, dim=-1)\n"
            "    scores.masked_fill_(~mask, float('-inf'))\n"
            "    weights = torch.softmax(scores, dim=-1)\n"
            "    return torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0)\n"
        ),
        (SOFTMAX,),
        "in place",
        mistake="in-place",
    ),
    # --- causal_mask ---------------------------------------------------------------------------
    Variant(
        "causal_upper_triangle",
        "causal_mask",
        _causal("    return torch.ones(L, L, dtype=torch.bool).triu()\n"),
        (CAUSAL,),
        "upper triangle",
        mistake="causal-upper-triangle",
    ),
    Variant(
        "causal_polarity_reversed",
        "causal_mask",
        _causal("    return torch.ones(L, L, dtype=torch.bool).triu(diagonal=1)\n"),
        (CAUSAL,),
        "polarity is reversed",
        mistake="causal-reversed",
    ),
    Variant(
        "causal_without_diagonal",
        "causal_mask",
        _causal("    return torch.tril(torch.ones(L, L, dtype=torch.bool), diagonal=-1)\n"),
        (CAUSAL,),
        "attend to itself",
        mistake="causal-no-diagonal",
    ),
    Variant(
        "causal_float_ones",
        "causal_mask",
        _causal("    return torch.tril(torch.ones(L, L))\n"),
        (CAUSAL,),
        "boolean",
        mistake="causal-not-bool",
    ),
    Variant(
        "causal_additive_float",
        "causal_mask",
        _causal("    return torch.triu(torch.full((L, L), float('-inf')), diagonal=1)\n"),
        (CAUSAL,),
        "additive",
        mistake="causal-additive",
    ),
    Variant(
        "causal_from_encoder_lib",
        "causal_mask",
        _causal("    return encoder_lib.causal_mask(L)\n"),
        (CAUSAL,),
        "encoder_lib.masks.causal_mask",
        mistake="forbidden-built-in",
    ),
    # --- scaled_dot_product_attention ----------------------------------------------------------
    Variant(
        "attention_forgot_value",
        "scaled_dot_product_attention",
        _attention(
            "    weights = masked_softmax(attention_scores(query, key), mask)\n"
            "    return weights, weights\n"
        ),
        (ATTENTION,),
        "multiply the weights by the values",
        mistake="output-is-weights",
    ),
    Variant(
        "attention_pair_swapped",
        "scaled_dot_product_attention",
        _attention(
            "    weights = masked_softmax(attention_scores(query, key), mask)\n"
            "    return weights, weights @ value\n"
        ),
        (ATTENTION,),
        "(output, weights)",
        mistake="pair-swapped",
    ),
    Variant(
        "attention_output_only",
        "scaled_dot_product_attention",
        _attention(
            "    weights = masked_softmax(attention_scores(query, key), mask)\n"
            "    return weights @ value\n"
        ),
        (ATTENTION,),
        "pair",
        mistake="wrong-structure",
    ),
    Variant(
        "attention_scores_as_weights",
        "scaled_dot_product_attention",
        _attention(
            "    scores = attention_scores(query, key)\n"
            "    return masked_softmax(scores, mask) @ value, scores\n"
        ),
        (ATTENTION,),
        "before the softmax",
        mistake="weights-before-softmax",
    ),
    Variant(
        "attention_inline_not_scaled",
        "scaled_dot_product_attention",
        _attention(
            "    scores = query @ key.transpose(-2, -1)\n"
            "    weights = masked_softmax(scores, mask)\n"
            "    return weights @ value, weights\n"
        ),
        (ATTENTION,),
        "not scaled",
        mistake="not-scaled",
    ),
    Variant(
        "attention_inline_scaled_by_d_k",
        "scaled_dot_product_attention",
        _attention(
            "    scores = query @ key.mT / query.shape[-1]\n"
            "    weights = masked_softmax(scores, mask)\n"
            "    return weights @ value, weights\n"
        ),
        (ATTENTION,),
        "instead of sqrt(d_k)",
        mistake="scaled-by-d-k",
    ),
    Variant(
        "attention_inline_key_T",
        "scaled_dot_product_attention",
        _attention(
            "    d_k = query.shape[-1]\n"
            "    weights = masked_softmax(query @ key.T / math.sqrt(d_k), mask)\n"
            "    return weights @ value, weights\n"
        ),
        (ATTENTION,),
        "batch",
        mistake="batch-axes",
    ),
    Variant(
        "attention_inline_softmax_dim_0",
        "scaled_dot_product_attention",
        _attention(
            "    scores = attention_scores(query, key)\n"
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(~mask, float('-inf'))\n"
            "    weights = torch.softmax(scores, dim=0).nan_to_num()\n"
            "    return weights @ value, weights\n"
        ),
        (ATTENTION,),
        "query axis",
        mistake="softmax-over-queries",
    ),
    Variant(
        "attention_inline_mask_after_softmax",
        "scaled_dot_product_attention",
        _attention(
            "    weights = torch.softmax(attention_scores(query, key), dim=-1)\n"
            "    if mask is not None:\n"
            "        weights = weights.masked_fill(~mask, 0)\n"
            "    return weights @ value, weights\n"
        ),
        (ATTENTION,),
        "after the softmax",
        mistake="mask-after-softmax",
    ),
    Variant(
        "attention_inline_dead_rows_nan",
        "scaled_dot_product_attention",
        _attention(
            "    scores = attention_scores(query, key)\n"
            "    if mask is not None:\n"
            "        scores = torch.where(mask, scores, float('-inf'))\n"
            "    weights = scores.softmax(-1)\n"
            "    return weights @ value, weights\n"
        ),
        (ATTENTION,),
        "NaN",
        mistake="dead-row-nan",
    ),
    Variant(
        "attention_weights_in_float64",
        "scaled_dot_product_attention",
        _attention(
            "    # float64 for a more accurate softmax; the output is cast back, the weights not\n"
            "    weights = masked_softmax(attention_scores(query.double(), key.double()), mask)\n"
            "    return (weights @ value.double()).to(query.dtype), weights\n"
        ),
        (ATTENTION,),
        "the weights tensor has dtype torch.float64",
        mistake="dtype",
    ),
    Variant(
        "attention_uses_F_sdpa",
        "scaled_dot_product_attention",
        _attention(
            "    weights = masked_softmax(attention_scores(query, key), mask)\n"
            "    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)\n"
            "    return output, weights\n"
        ),
        (ATTENTION,),
        "F.scaled_dot_product_attention",
        mistake="forbidden-built-in",
    ),
    Variant(
        "attention_uses_encoder_lib",
        "scaled_dot_product_attention",
        _attention(
            "    return encoder_lib.scaled_dot_product_attention(query, key, value, mask)\n"
        ),
        (ATTENTION,),
        "already does what this exercise asks",
        mistake="forbidden-built-in",
    ),
]

CORRECT = [
    # --- attention_scores ----------------------------------------------------------------------
    Variant(
        "scores_einsum",
        "attention_scores",
        _scores(
            "    d_k = query.shape[-1]\n"
            "    return torch.einsum('...qd,...kd->...qk', query, key) / math.sqrt(d_k)\n"
        ),
    ),
    Variant(
        "scores_mT_and_power",
        "attention_scores",
        _scores("    return query @ key.mT / query.size(-1) ** 0.5\n"),
    ),
    Variant(
        "scores_scale_query_first",
        "attention_scores",
        _scores(
            "    query = query / math.sqrt(query.shape[-1])\n"
            "    return torch.matmul(query, key.swapaxes(-1, -2))\n"
        ),
    ),
    # --- masked_softmax ------------------------------------------------------------------------
    Variant(
        "softmax_torch_where",
        "masked_softmax",
        _softmax(
            "    if mask is not None:\n"
            "        scores = torch.where(mask, scores, float('-inf'))\n"
            "    weights = F.softmax(scores, dim=-1)\n"
            "    return torch.nan_to_num(weights, nan=0.0)\n"
        ),
    ),
    Variant(
        "softmax_by_hand_stable",
        "masked_softmax",
        _softmax(
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(~mask, float('-inf'))\n"
            "    row_max = scores.amax(dim=-1, keepdim=True)\n"
            "    row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)\n"
            "    e = torch.exp(scores - row_max)\n"
            "    total = e.sum(dim=-1, keepdim=True)\n"
            "    return e / total.clamp_min(1e-30)\n"
        ),
    ),
    Variant(
        "softmax_finite_fill_with_empty_rows",
        "masked_softmax",
        _softmax(
            "    if mask is None:\n"
            "        return scores.softmax(dim=-1)\n"
            "    weights = scores.masked_fill(mask == 0, -1e9).softmax(dim=-1)\n"
            "    has_key = mask.any(dim=-1, keepdim=True)\n"
            "    return weights * has_key\n"
        ),
    ),
    Variant(
        "softmax_then_renormalise",
        "masked_softmax",
        _softmax(
            "    weights = torch.softmax(scores, dim=-1)\n"
            "    if mask is None:\n"
            "        return weights\n"
            "    weights = weights * mask\n"
            "    return weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-30)\n"
        ),
    ),
    # --- causal_mask ---------------------------------------------------------------------------
    Variant(
        "causal_arange_comparison",
        "causal_mask",
        _causal("    i = torch.arange(L)\n    return i[:, None] >= i[None, :]\n"),
    ),
    Variant(
        "causal_tril_then_bool",
        "causal_mask",
        _causal("    return torch.tril(torch.ones(L, L)).bool()\n"),
    ),
    Variant(
        "causal_not_strict_upper",
        "causal_mask",
        _causal("    return ~torch.ones(L, L, dtype=torch.bool).triu(1)\n"),
    ),
    # --- scaled_dot_product_attention ----------------------------------------------------------
    Variant(
        "attention_inline_einsum",
        "scaled_dot_product_attention",
        _attention(
            "    d_k = query.shape[-1]\n"
            "    scores = torch.einsum('...id,...jd->...ij', query, key) / math.sqrt(d_k)\n"
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(~mask, float('-inf'))\n"
            "    weights = torch.softmax(scores, dim=-1)\n"
            "    if mask is not None:\n"
            "        weights = torch.where(mask.any(-1, keepdim=True), weights, 0.0)\n"
            "    output = torch.einsum('...ij,...jd->...id', weights, value)\n"
            "    return output, weights\n"
        ),
    ),
    Variant(
        "attention_in_float64_both_cast_back",
        "scaled_dot_product_attention",
        _attention(
            "    weights = masked_softmax(attention_scores(query.double(), key.double()), mask)\n"
            "    output = weights @ value.double()\n"
            "    return output.to(value.dtype), weights.to(query.dtype)\n"
        ),
    ),
    Variant(
        "attention_tuple_via_matmul",
        "scaled_dot_product_attention",
        _attention(
            "    weights = masked_softmax(attention_scores(query, key), mask=mask)\n"
            "    output = torch.matmul(weights, value)\n"
            "    return (output, weights)\n"
        ),
    ),
]

# --- answers that make the rest of the catalogue (tests/grading/checks/test_catalogue.py) -------

BUGGY += [
    Variant(
        "scores_scaled_by_sqrt_key_count",
        "attention_scores",
        _scores("    return query @ key.transpose(-2, -1) / math.sqrt(key.shape[-2])\n"),
        (SCORES, ATTENTION),
        "divided by sqrt(L_k)",
        mistake="scaled-by-sqrt-l-k",
    ),
    Variant(
        "scores_scaled_by_sqrt_query_count",
        "attention_scores",
        _scores("    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-2])\n"),
        (SCORES, ATTENTION),
        "divided by sqrt(L_q)",
        mistake="scaled-by-sqrt-l-q",
    ),
    Variant(
        "causal_all_true",
        "causal_mask",
        _causal("    return torch.ones(L, L, dtype=torch.bool)\n"),
        (CAUSAL,),
        "every entry is True",
        mistake="causal-all-true",
    ),
]
