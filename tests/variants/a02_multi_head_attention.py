"""Answers to notebook 02 (multi-head attention), written the way students write them.

Answer cells: ``split_heads``, ``merge_heads``, ``multi_head_attention``; their test cells are
``test_split_heads`` (2 points), ``test_merge_heads`` (2) and ``test_multi_head_attention`` (4).
The notebook's ``MultiHeadAttention`` calls ``split_heads`` and ``merge_heads``, so a wrong
``split_heads``/``merge_heads`` also fails ``test_multi_head_attention``; the
``MultiHeadAttention`` answers below that do not call them stand on their own.
"""

from __future__ import annotations

from . import Variant

SPLIT = "test_split_heads"
MERGE = "test_merge_heads"
MHA = "test_multi_head_attention"


def _split(body: str) -> str:
    return (
        "def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:\n"
        '    """Split the last dimension of x (B, L, D) into heads: (B, H, L, d_head)."""\n' + body
    )


def _merge(body: str) -> str:
    return (
        "def merge_heads(x: torch.Tensor) -> torch.Tensor:\n"
        '    """Merge the heads of x (B, H, L, d_head) back: (B, L, D)."""\n' + body
    )


# The given part of the answer cell: class line, docstring and __init__.
_GIVEN_INIT = '''class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate query, key and value projections."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim (D = {embed_dim}) must be divisible by num_heads (H = {num_heads})"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, mask=None):
        """Attend from query to key/value with H heads; returns (output, weights)."""
'''


def _mha(body: str) -> str:
    """The given class with ``body`` (indented 8 spaces) as the student's forward."""
    return _GIVEN_INIT + body


# A forward written out in full (no split_heads/merge_heads), with one line that can be changed.
_INLINE = """        B, L_q, D = query.shape
        L_k = key.shape[1]
        H, d_head = self.num_heads, self.head_dim
        q = self.q_proj(query).view(B, L_q, H, d_head).transpose(1, 2)
        k = self.k_proj(key).view(B, L_k, H, d_head).transpose(1, 2)
        v = self.v_proj(value).view(B, L_k, H, d_head).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        weights = F.dropout(weights, self.dropout, self.training)
        out = (weights @ v).transpose(1, 2).reshape(B, L_q, D)
        return self.out_proj(out), weights
"""


def _inline(old: str, new: str) -> str:
    assert old in _INLINE, old
    return _mha(_INLINE.replace(old, new))


BUGGY: list[Variant] = [
    # --- split_heads ----------------------------------------------------------------------------
    Variant(
        "split_view_without_transpose",
        "split_heads",
        _split("    B, L, D = x.shape\n    return x.view(B, num_heads, L, D // num_heads)\n"),
        fails=(SPLIT, MHA),
        says="transpose",
        mistake="split-without-transpose",
    ),
    Variant(
        "split_forgot_transpose",
        "split_heads",
        _split("    B, L, D = x.shape\n    return x.view(B, L, num_heads, D // num_heads)\n"),
        fails=(SPLIT, MHA),
        says="transpose(1, 2)",
        also_says=(("test_multi_head_attention", "this comes from your split_heads (exercise 1)"),),
        mistake="heads-not-in-front",
    ),
    Variant(
        "split_interleaved",
        "split_heads",
        _split(
            "    B, L, D = x.shape\n"
            "    return x.view(B, L, D // num_heads, num_heads).permute(0, 3, 1, 2)\n"
        ),
        fails=(SPLIT, MHA),
        says="interleaved",
        mistake="split-interleaved",
    ),
    Variant(
        "split_in_place",
        "split_heads",
        _split(
            "    B, L, D = x.shape\n"
            "    x /= math.sqrt(D // num_heads)  # scale once here, so attention need not\n"
            "    return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)\n"
        ),
        fails=(SPLIT, MHA),
        says="in place",
        mistake="in-place",
    ),
    Variant(
        "split_detached",
        "split_heads",
        _split(
            "    B, L, D = x.shape\n"
            "    return x.detach().view(B, L, num_heads, D // num_heads).transpose(1, 2)\n"
        ),
        fails=(SPLIT, MHA),
        says="no gradient",
        mistake="no-grad",
    ),
    # --- merge_heads ----------------------------------------------------------------------------
    Variant(
        "merge_reshape_without_transpose",
        "merge_heads",
        _merge("    B, H, L, d_head = x.shape\n    return x.reshape(B, L, H * d_head)\n"),
        fails=(MERGE, MHA),
        says="without transposing back",
        mistake="merge-without-transpose",
    ),
    Variant(
        "merge_view_after_transpose",
        "merge_heads",
        _merge(
            "    B, H, L, d_head = x.shape\n    return x.transpose(1, 2).view(B, L, H * d_head)\n"
        ),
        fails=(MERGE, MHA),
        says="contiguous",
        mistake="view-not-contiguous",
    ),
    Variant(
        "merge_not_flattened",
        "merge_heads",
        _merge("    return x.transpose(1, 2)\n"),
        fails=(MERGE, MHA),
        says="wrong shape",
        mistake="heads-not-joined",
    ),
    Variant(
        "merge_interleaved",
        "merge_heads",
        _merge(
            "    B, H, L, d_head = x.shape\n"
            "    return x.permute(0, 2, 3, 1).reshape(B, L, H * d_head)\n"
        ),
        fails=(MERGE, MHA),
        says="interleaved",
        mistake="merge-interleaved",
    ),
    # --- MultiHeadAttention ---------------------------------------------------------------------
    Variant(
        "output_heads_not_merged",
        "multi_head_attention",
        _inline(
            "        out = (weights @ v).transpose(1, 2).reshape(B, L_q, D)\n"
            "        return self.out_proj(out), weights\n",
            "        return weights @ v, weights\n",
        ),
        fails=(MHA,),
        says="wrong shape",
        mistake="heads-not-merged",
    ),
    Variant(
        "weights_averaged_over_heads",
        "multi_head_attention",
        _inline(
            "        return self.out_proj(out), weights\n",
            "        return self.out_proj(out), weights.mean(dim=1)\n",
        ),
        fails=(MHA,),
        says="averaged over the heads",
        mistake="weights-averaged-over-heads",
    ),
    Variant(
        "scale_by_d_model",
        "multi_head_attention",
        _inline("math.sqrt(d_head)", "math.sqrt(self.embed_dim)"),
        fails=(MHA,),
        says="sqrt(d_head)",
        mistake="scaled-by-sqrt-d-model",
    ),
    Variant(
        "no_scale",
        "multi_head_attention",
        _inline(" / math.sqrt(d_head)", ""),
        fails=(MHA,),
        says="not scaled",
        mistake="not-scaled",
    ),
    Variant(
        "split_with_view_no_transpose_inline",
        "multi_head_attention",
        _inline(
            "        q = self.q_proj(query).view(B, L_q, H, d_head).transpose(1, 2)\n"
            "        k = self.k_proj(key).view(B, L_k, H, d_head).transpose(1, 2)\n"
            "        v = self.v_proj(value).view(B, L_k, H, d_head).transpose(1, 2)\n",
            "        q = self.q_proj(query).view(B, H, L_q, d_head)\n"
            "        k = self.k_proj(key).view(B, H, L_k, d_head)\n"
            "        v = self.v_proj(value).view(B, H, L_k, d_head)\n",
        ),
        fails=(MHA,),
        says="split wrongly",
        mistake="split-without-transpose",
    ),
    Variant(
        "merge_with_view_no_transpose_inline",
        "multi_head_attention",
        _inline(
            "(weights @ v).transpose(1, 2).reshape(B, L_q, D)",
            "(weights @ v).reshape(B, L_q, D)",
        ),
        fails=(MHA,),
        says="merged wrongly",
        mistake="merge-without-transpose",
    ),
    Variant(
        "split_and_merge_with_view",
        "multi_head_attention",
        _mha(
            "        B, L_q, D = query.shape\n"
            "        H, d_head = self.num_heads, self.head_dim\n"
            "        q = self.q_proj(query).view(B, H, -1, d_head)\n"
            "        k = self.k_proj(key).view(B, H, -1, d_head)\n"
            "        v = self.v_proj(value).view(B, H, -1, d_head)\n"
            "        out, weights = encoder_lib.scaled_dot_product_attention(q, k, v, mask)\n"
            "        return self.out_proj(out.reshape(B, L_q, D)), weights\n"
        ),
        fails=(MHA,),
        says="no transpose",
        mistake="heads-without-transpose",
    ),
    Variant(
        "missing_output_projection",
        "multi_head_attention",
        _inline("        return self.out_proj(out), weights\n", "        return out, weights\n"),
        fails=(MHA,),
        says="output projection is missing",
        mistake="no-output-projection",
    ),
    Variant(
        "q_proj_used_three_times",
        "multi_head_attention",
        _inline(
            "        k = self.k_proj(key)",
            "        k = self.q_proj(key)",
        ).replace("        v = self.v_proj(value)", "        v = self.q_proj(value)"),
        fails=(MHA,),
        says="q_proj is used for the queries, the keys and the values",
        mistake="q-proj-for-all",
    ),
    Variant(
        "keys_projected_with_v_proj",
        "multi_head_attention",
        _inline("        k = self.k_proj(key)", "        k = self.v_proj(key)"),
        fails=(MHA,),
        says="keys are projected with v_proj",
        mistake="projections-mixed-up",
    ),
    Variant(
        "keys_values_from_query",
        "multi_head_attention",
        _inline(
            "        L_k = key.shape[1]\n",
            "        L_k = L_q\n        key = value = query  # self-attention only\n",
        ),
        fails=(MHA,),
        says="from `key`",
        mistake="keys-from-query",
    ),
    Variant(
        "mask_ignored",
        "multi_head_attention",
        _inline(
            "        if mask is not None:\n"
            '            scores = scores.masked_fill(~mask, float("-inf"))\n',
            "",
        ),
        fails=(MHA,),
        says="mask is ignored",
        mistake="mask-ignored",
    ),
    Variant(
        "mask_polarity_reversed",
        "multi_head_attention",
        _inline("masked_fill(~mask,", "masked_fill(mask,"),
        fails=(MHA,),
        says="polarity is reversed",
        mistake="mask-reversed",
    ),
    Variant(
        "mask_only_for_first_query",
        "multi_head_attention",
        _inline(
            '            scores = scores.masked_fill(~mask, float("-inf"))\n',
            "            first = scores[..., :1, :]\n"
            "            scores[..., :1, :] = first.masked_fill(~mask[..., :1, :], -math.inf)\n",
        ),
        fails=(MHA,),
        says="padding leaks",
        mistake="padding-leaks",
    ),
    Variant(
        "softmax_over_queries",
        "multi_head_attention",
        _inline("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)"),
        fails=(MHA,),
        says="dim=-1",
        mistake="softmax-over-queries",
    ),
    Variant(
        "weights_are_scores",
        "multi_head_attention",
        _inline(
            "        return self.out_proj(out), weights\n",
            "        return self.out_proj(out), scores\n",
        ),
        fails=(MHA,),
        says="before the softmax",
        mistake="weights-before-softmax",
    ),
    Variant(
        "dropout_in_eval_mode",
        "multi_head_attention",
        _inline(
            "F.dropout(weights, self.dropout, self.training)", "F.dropout(weights, self.dropout)"
        ),
        fails=(MHA,),
        says="eval mode",
        mistake="dropout-in-eval",
    ),
    Variant(
        "returns_output_only",
        "multi_head_attention",
        _inline(
            "        return self.out_proj(out), weights\n", "        return self.out_proj(out)\n"
        ),
        fails=(MHA,),
        says="pair (output, weights)",
        mistake="wrong-structure",
    ),
    Variant(
        "output_detached",
        "multi_head_attention",
        _inline(
            "        return self.out_proj(out), weights\n",
            "        return self.out_proj(out).detach(), weights.detach()\n",
        ),
        fails=(MHA,),
        says="no gradient",
        mistake="no-grad",
    ),
    Variant(
        "out_proj_removed_from_init",
        "multi_head_attention",
        _mha(
            "        B, L_q, D = query.shape\n"
            "        q = split_heads(self.q_proj(query), self.num_heads)\n"
            "        k = split_heads(self.k_proj(key), self.num_heads)\n"
            "        v = split_heads(self.v_proj(value), self.num_heads)\n"
            "        out, weights = encoder_lib.scaled_dot_product_attention(q, k, v, mask)\n"
            "        return merge_heads(out), weights\n"
        ).replace("        self.out_proj = nn.Linear(embed_dim, embed_dim)\n", ""),
        fails=(MHA,),
        says="out_proj",
        mistake="missing-part",
    ),
    Variant(
        "k_proj_is_q_proj",
        "multi_head_attention",
        _mha(
            "        q = split_heads(self.q_proj(query), self.num_heads)\n"
            "        k = split_heads(self.k_proj(key), self.num_heads)\n"
            "        v = split_heads(self.v_proj(value), self.num_heads)\n"
            "        out, weights = encoder_lib.scaled_dot_product_attention(q, k, v, mask)\n"
            "        return self.out_proj(merge_heads(out)), weights\n"
        ).replace(
            "        self.k_proj = nn.Linear(embed_dim, embed_dim)\n",
            "        self.k_proj = self.q_proj  # shared to save parameters\n",
        ),
        fails=(MHA,),
        says="same layer",
        mistake="missing-part",
    ),
    # --- dropout: where it sits in training (the checks make dropout repeatable) ---------------
    Variant(
        "einsum_heads_without_dropout",
        "multi_head_attention",
        _mha(
            "        H, d = self.num_heads, self.head_dim\n"
            "        q = self.q_proj(query).unflatten(-1, (H, d))  # (B, L_q, H, d)\n"
            "        k = self.k_proj(key).unflatten(-1, (H, d))\n"
            "        v = self.v_proj(value).unflatten(-1, (H, d))\n"
            '        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / d**0.5\n'
            "        if mask is not None:\n"
            '            scores = scores.masked_fill(mask.logical_not(), float("-inf"))\n'
            "        weights = scores.softmax(-1)\n"
            '        out = torch.einsum("bhqk,bkhd->bqhd", weights, v).flatten(2)\n'
            "        return self.out_proj(out), weights\n"
        ),
        fails=(MHA,),
        says="dropout is missing in training",
        mistake="dropout-missing",
    ),
    Variant(
        "loop_over_heads_without_dropout",
        "multi_head_attention",
        _mha(
            "        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)\n"
            "        d = self.head_dim\n"
            "        outs, maps = [], []\n"
            "        for h in range(self.num_heads):\n"
            "            cols = slice(h * d, (h + 1) * d)\n"
            "            m = None if mask is None else mask.expand(\n"
            "                query.shape[0], self.num_heads, query.shape[1], key.shape[1]\n"
            "            )[:, h]\n"
            "            o, w = encoder_lib.scaled_dot_product_attention(\n"
            "                q[..., cols], k[..., cols], v[..., cols], m\n"
            "            )\n"
            "            outs.append(o)\n"
            "            maps.append(w)\n"
            "        return self.out_proj(torch.cat(outs, dim=-1)), torch.stack(maps, dim=1)\n"
        ),
        fails=(MHA,),
        says="dropout is missing in training",
        mistake="dropout-missing",
    ),
    Variant(
        "f_sdpa_output_without_dropout",
        "multi_head_attention",
        _mha(
            "        q = split_heads(self.q_proj(query), self.num_heads)\n"
            "        k = split_heads(self.k_proj(key), self.num_heads)\n"
            "        v = split_heads(self.v_proj(value), self.num_heads)\n"
            "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
            "        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)\n"
            "        if mask is not None:\n"
            '            scores = scores.masked_fill(~mask, float("-inf"))\n'
            "        return self.out_proj(merge_heads(out)), scores.softmax(dim=-1)\n"
        ),
        fails=(MHA,),
        says="dropout is missing in training",
        mistake="dropout-missing",
    ),
    Variant(
        "dropout_on_scores",
        "multi_head_attention",
        _inline("        weights = F.dropout(weights, self.dropout, self.training)\n", "").replace(
            "        if mask is not None:\n",
            "        scores = F.dropout(scores, self.dropout, self.training)\n"
            "        if mask is not None:\n",
        ),
        fails=(MHA,),
        says="applied to the scores, before the softmax",
        mistake="dropout-misplaced",
    ),
    Variant(
        "dropout_before_out_proj",
        "multi_head_attention",
        _inline(
            "        weights = F.dropout(weights, self.dropout, self.training)\n",
            "",
        ).replace(
            "        return self.out_proj(out), weights\n",
            "        out = F.dropout(out, self.dropout, self.training)\n"
            "        return self.out_proj(out), weights\n",
        ),
        fails=(MHA,),
        says="the merged heads, before out_proj",
        mistake="dropout-misplaced",
    ),
    Variant(
        "dropout_on_output",
        "multi_head_attention",
        _inline(
            "        weights = F.dropout(weights, self.dropout, self.training)\n",
            "",
        ).replace(
            "        return self.out_proj(out), weights\n",
            "        return F.dropout(self.out_proj(out), self.dropout, self.training), weights\n",
        ),
        fails=(MHA,),
        says="the output, after out_proj",
        mistake="dropout-misplaced",
    ),
    Variant(
        "dropout_rate_fixed_at_0_1",
        "multi_head_attention",
        _inline(
            "F.dropout(weights, self.dropout, self.training)",
            "F.dropout(weights, 0.1, self.training)",
        ),
        fails=(MHA,),
        says="wrong rate",
        mistake="dropout-mismatch-in-training",
    ),
    # --- dtype of every output ------------------------------------------------------------------
    Variant(
        "weights_in_float64_for_float32_inputs",
        "multi_head_attention",
        _inline(
            "        weights = torch.softmax(scores, dim=-1)\n",
            "        weights = torch.softmax(scores.double(), dim=-1)  # more accurate\n",
        ).replace("(weights @ v)", "(weights.to(v.dtype) @ v)"),
        fails=(MHA,),
        says="the weights tensor has dtype torch.float64",
        mistake="dtype",
    ),
]


CORRECT: list[Variant] = [
    # --- split_heads ----------------------------------------------------------------------------
    Variant(
        "split_reshape_permute",
        "split_heads",
        _split(
            "    B, L, D = x.shape\n    return x.reshape(B, L, num_heads, -1).permute(0, 2, 1, 3)\n"
        ),
    ),
    Variant(
        "split_einsum",
        "split_heads",
        _split(
            "    B, L, D = x.shape\n"
            "    x = x.reshape(B, L, num_heads, D // num_heads)\n"
            '    return torch.einsum("blhd->bhld", x)\n'
        ),
    ),
    Variant(
        "split_unflatten_movedim",
        "split_heads",
        _split("    return x.unflatten(-1, (num_heads, -1)).movedim(2, 1)\n"),
    ),
    Variant(
        "split_stack_chunks",
        "split_heads",
        _split("    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)\n"),
    ),
    # --- merge_heads ----------------------------------------------------------------------------
    Variant(
        "merge_permute_flatten",
        "merge_heads",
        _merge("    return x.permute(0, 2, 1, 3).flatten(2)\n"),
    ),
    Variant(
        "merge_contiguous_view",
        "merge_heads",
        _merge(
            "    B, H, L, d_head = x.shape\n"
            "    return x.transpose(1, 2).contiguous().view(B, L, H * d_head)\n"
        ),
    ),
    Variant(
        "merge_cat_heads",
        "merge_heads",
        _merge("    return torch.cat(x.unbind(dim=1), dim=-1)\n"),
    ),
    Variant(
        "merge_einsum",
        "merge_heads",
        _merge(
            "    B, H, L, d_head = x.shape\n"
            '    return torch.einsum("bhld->blhd", x).reshape(B, L, H * d_head)\n'
        ),
    ),
    # --- MultiHeadAttention ---------------------------------------------------------------------
    Variant("mha_inline_own_attention", "multi_head_attention", _mha(_INLINE)),
    Variant(
        "mha_masked_fill_minus_1e9",
        "multi_head_attention",
        _inline('masked_fill(~mask, float("-inf"))', "masked_fill(mask == 0, -1e9)"),
    ),
    Variant(
        "mha_torch_where_and_nn_dropout",
        "multi_head_attention",
        _mha(
            "        B, L_q, D = query.shape\n"
            "        q = split_heads(self.q_proj(query), self.num_heads)\n"
            "        k = split_heads(self.k_proj(key), self.num_heads)\n"
            "        v = split_heads(self.v_proj(value), self.num_heads)\n"
            "        scores = torch.matmul(q, k.transpose(2, 3)) * self.head_dim**-0.5\n"
            "        if mask is not None:\n"
            '            scores = torch.where(mask, scores, torch.tensor(float("-inf")))\n'
            "        weights = nn.functional.softmax(scores, dim=3)\n"
            "        weights = nn.Dropout(self.dropout)(weights) if self.training else weights\n"
            "        return self.out_proj(merge_heads(torch.matmul(weights, v))), weights\n"
        ),
    ),
    Variant(
        "mha_einsum_heads",
        "multi_head_attention",
        _mha(
            "        H, d = self.num_heads, self.head_dim\n"
            "        q = self.q_proj(query).unflatten(-1, (H, d))  # (B, L_q, H, d)\n"
            "        k = self.k_proj(key).unflatten(-1, (H, d))\n"
            "        v = self.v_proj(value).unflatten(-1, (H, d))\n"
            '        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / d**0.5\n'
            "        if mask is not None:\n"
            '            scores = scores.masked_fill(mask.logical_not(), float("-inf"))\n'
            "        weights = F.dropout(scores.softmax(-1), self.dropout, self.training)\n"
            '        out = torch.einsum("bhqk,bkhd->bqhd", weights, v).flatten(2)\n'
            "        return self.out_proj(out), weights\n"
        ),
    ),
    Variant(
        "mha_loop_over_heads",
        "multi_head_attention",
        _mha(
            "        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)\n"
            "        d = self.head_dim\n"
            "        p = self.dropout if self.training else 0.0  # the same rate in every head\n"
            "        outs, maps = [], []\n"
            "        for h in range(self.num_heads):\n"
            "            cols = slice(h * d, (h + 1) * d)\n"
            "            m = None if mask is None else mask.expand(\n"
            "                query.shape[0], self.num_heads, query.shape[1], key.shape[1]\n"
            "            )[:, h]\n"
            "            o, w = encoder_lib.scaled_dot_product_attention(\n"
            "                q[..., cols], k[..., cols], v[..., cols], m, dropout_p=p\n"
            "            )\n"
            "            outs.append(o)\n"
            "            maps.append(w)\n"
            "        return self.out_proj(torch.cat(outs, dim=-1)), torch.stack(maps, dim=1)\n"
        ),
    ),
    Variant(
        "mha_fused_in_proj_weight",
        "multi_head_attention",
        '''class MultiHeadAttention(nn.Module):
    """Multi-head attention storing Q, K, V like PyTorch: one (3D, D) matrix."""

    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.num_heads = num_heads
        self.dropout = dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * embed_dim))
        nn.init.xavier_uniform_(self.in_proj_weight)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, mask=None):
        w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        b_q, b_k, b_v = self.in_proj_bias.chunk(3)
        q = split_heads(F.linear(query, w_q, b_q), self.num_heads)
        k = split_heads(F.linear(key, w_k, b_k), self.num_heads)
        v = split_heads(F.linear(value, w_v, b_v), self.num_heads)
        p = self.dropout if self.training else 0.0
        out, weights = encoder_lib.scaled_dot_product_attention(q, k, v, mask, dropout_p=p)
        return self.out_proj(merge_heads(out)), weights
''',
    ),
    Variant(
        "mha_fused_in_proj_linear",
        "multi_head_attention",
        """class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        self.h = num_heads
        self.in_proj = nn.Linear(embed_dim, 3 * embed_dim)  # Q, K, V in one layer
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        if query is key and key is value:  # self-attention: one matmul
            q, k, v = self.in_proj(query).chunk(3, dim=-1)
        else:
            w_q, w_k, w_v = self.in_proj.weight.chunk(3)
            b_q, b_k, b_v = self.in_proj.bias.chunk(3)
            q, k, v = F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        q, k, v = (split_heads(t, self.h) for t in (q, k, v))
        scores = q @ k.mT / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        weights = self.drop(scores.softmax(dim=-1))
        return self.out_proj(merge_heads(weights @ v)), weights
""",
    ),
    Variant(
        "mha_f_scaled_dot_product_attention_for_output",
        "multi_head_attention",
        _mha(
            "        q = split_heads(self.q_proj(query), self.num_heads)\n"
            "        k = split_heads(self.k_proj(key), self.num_heads)\n"
            "        v = split_heads(self.v_proj(value), self.num_heads)\n"
            "        p = self.dropout if self.training else 0.0\n"
            "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)\n"
            "        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)\n"
            "        if mask is not None:\n"
            '            scores = scores.masked_fill(~mask, float("-inf"))\n'
            "        return self.out_proj(merge_heads(out)), scores.softmax(dim=-1)\n"
        ),
    ),
    Variant(
        "mha_nn_dropout_layer_in_init",
        "multi_head_attention",
        _mha(
            "        q = split_heads(self.q_proj(query), self.num_heads)\n"
            "        k = split_heads(self.k_proj(key), self.num_heads)\n"
            "        v = split_heads(self.v_proj(value), self.num_heads)\n"
            "        scores = q @ k.mT / math.sqrt(self.head_dim)\n"
            "        if mask is not None:\n"
            '            scores = scores.masked_fill(~mask, float("-inf"))\n'
            "        weights = self.attn_drop(scores.softmax(dim=-1))\n"
            "        return self.out_proj(merge_heads(weights @ v)), weights\n"
        ).replace(
            "        self.out_proj = nn.Linear(embed_dim, embed_dim)\n",
            "        self.out_proj = nn.Linear(embed_dim, embed_dim)\n"
            "        self.attn_drop = nn.Dropout(dropout)  # acts only in training mode\n",
        ),
    ),
    Variant(
        "mha_torch_dropout",
        "multi_head_attention",
        _inline(
            "F.dropout(weights, self.dropout, self.training)",
            "torch.dropout(weights, self.dropout, train=self.training)",
        ),
    ),
    Variant(
        "mha_softmax_in_float64_cast_back",
        "multi_head_attention",
        _inline(
            "        weights = torch.softmax(scores, dim=-1)\n",
            "        weights = torch.softmax(scores.double(), dim=-1).to(scores.dtype)\n",
        ),
    ),
]

# --- answers that make the rest of the catalogue (tests/grading/checks/test_catalogue.py) -------

_INTERLEAVED = (
    _INLINE.replace(
        ".view(B, L_q, H, d_head).transpose(1, 2)", ".view(B, L_q, d_head, H).permute(0, 3, 1, 2)"
    )
    .replace(
        ".view(B, L_k, H, d_head).transpose(1, 2)", ".view(B, L_k, d_head, H).permute(0, 3, 1, 2)"
    )
    .replace(
        "(weights @ v).transpose(1, 2).reshape(B, L_q, D)",
        "(weights @ v).permute(0, 2, 3, 1).reshape(B, L_q, D)",
    )
)

BUGGY += [
    Variant(
        "inline_keys_from_value",
        "multi_head_attention",
        _inline("k = self.k_proj(key)", "k = self.k_proj(value)"),
        fails=(MHA,),
        says="the inputs are mixed up",
        mistake="inputs-mixed-up",
    ),
    Variant(
        "inline_heads_interleaved",
        "multi_head_attention",
        _mha(_INTERLEAVED),
        fails=(MHA,),
        says="interleaved features",
        mistake="heads-interleaved",
    ),
]
