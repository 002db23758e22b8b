"""Answers to notebook 07 (the decoder) as students write them: ``BUGGY`` ones, each with the
test cells it must fail and the words that name its mistake, and ``CORRECT`` ones written
differently from the solution.

The four exercises are graded independently: (a) and (b) get a ready-made attention module,
(c) gets finished masks, and (d) runs on a stand-in model, so a wrong answer fails its own test
cell only.
"""

from __future__ import annotations

import functools

from variants import Variant

CAUSAL, CROSS, LAYER, GREEDY = (
    "causal_self_attention",
    "cross_attention",
    "decoder_layer",
    "greedy_decode",
)
T_CAUSAL, T_CROSS, T_LAYER, T_GREEDY = (f"test_{name}" for name in (CAUSAL, CROSS, LAYER, GREEDY))


def _causal(body: str) -> str:
    return f"def causal_self_attention(x, attention, keep=None):\n{body}"


def _cross(body: str) -> str:
    return f"def cross_attention(x, memory, attention, memory_keep=None):\n{body}"


def _greedy(body: str) -> str:
    return f"def greedy_decode(model, src, max_len, start_id=1, end_id=2, pad_id=0):\n{body}"


_LAYER_INIT = """class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = encoder_lib.MultiHeadAttention(d_model, num_heads, dropout)
        self.multihead_attn = encoder_lib.MultiHeadAttention(d_model, num_heads, dropout)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = encoder_lib.LayerNorm(d_model)
        self.norm2 = encoder_lib.LayerNorm(d_model)
        self.norm3 = encoder_lib.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.activation = F.relu
        self.norm_first = norm_first

"""


def _layer(methods: str) -> str:
    return _LAYER_INIT + methods


_BLOCKS = """    def sa(self, h, tgt_mask):
        return self.dropout1(self.self_attn(h, h, h, tgt_mask, need_weights=False)[0])

    def ca(self, h, memory, memory_mask):
        return self.dropout2(
            self.multihead_attn(h, memory, memory, memory_mask, need_weights=False)[0]
        )

    def ff(self, h):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(h)))))

"""
"""Helper methods shared by most layer variants (right, unless a variant overrides one)."""


def _layer_forward(
    post: str, pre: str, signature: str = "x, memory, tgt_mask=None, memory_mask=None"
) -> str:
    """A DecoderLayer whose forward runs ``pre`` when norm_first and ``post`` otherwise (each a
    block of lines at 12 spaces)."""
    return _layer(
        _BLOCKS
        + f"    def forward(self, {signature}):\n"
        + "        if self.norm_first:\n"
        + pre
        + "        else:\n"
        + post
        + "        return x\n"
    )


def _layer_dropouts(places=("out", "out", "out"), hidden="module") -> str:
    """A DecoderLayer whose sub-layer i has its dropout at ``places[i]``: "out" (right), "in"
    (on the sub-layer's input), "sum" (on the residual sum), "after" (after the norm, post-norm
    only), "none", "eval" (``F.dropout(y, p)``, active in eval mode too) or "eval_default"
    (``F.dropout(y)``, p = 0.5); ``hidden`` is the FFN's hidden dropout: "module" (right),
    "none", "eval" or "eval_default"."""

    def wrap(place: str, drop: str, expr: str) -> str:
        return {
            "none": expr,
            "eval": f"F.dropout({expr}, {drop}.p)",
            "eval_default": f"F.dropout({expr})",
        }.get(place, f"{drop}({expr})")

    hidden_expr = wrap(
        hidden if hidden != "module" else "out", "self.dropout", "self.activation(self.linear1(h))"
    )
    lines = [
        "    def forward(self, x, memory, tgt_mask=None, memory_mask=None):",
        "        def sa(h):",
        "            return self.self_attn(h, h, h, tgt_mask, need_weights=False)[0]",
        "",
        "        def ca(h):",
        "            return self.multihead_attn(h, memory, memory, memory_mask)[0]",
        "",
        "        def ff(h):",
        f"            return self.linear2({hidden_expr})",
        "",
    ]
    pre, post = [], []
    names = (
        ("sa", "self.norm1", "self.dropout1"),
        ("ca", "self.norm2", "self.dropout2"),
        ("ff", "self.norm3", "self.dropout3"),
    )
    for place, (sub, norm, drop) in zip(places, names, strict=True):
        d = functools.partial(wrap, place, drop)
        post.append(
            {
                "in": f"x = {norm}(x + {sub}({d('x')}))",
                "sum": f"x = {norm}({d(f'x + {sub}(x)')})",
                "after": f"x = {d(f'{norm}(x + {sub}(x))')}",
            }.get(place, f"x = {norm}(x + {d(f'{sub}(x)')})")
        )
        pre.append(
            {
                "in": f"x = x + {sub}({d(f'{norm}(x)')})",
                "sum": f"x = {d(f'x + {sub}({norm}(x))')}",
            }.get(place, f"x = x + {d(f'{sub}({norm}(x))')}")
        )
    lines += ["        if self.norm_first:", *("            " + line for line in pre)]
    lines += ["        else:", *("            " + line for line in post), "        return x", ""]
    return _layer("\n".join(lines))


_POST = """            x = self.norm1(x + self.sa(x, tgt_mask))
            x = self.norm2(x + self.ca(x, memory, memory_mask))
            x = self.norm3(x + self.ff(x))
"""
_PRE = """            x = x + self.sa(self.norm1(x), tgt_mask)
            x = x + self.ca(self.norm2(x), memory, memory_mask)
            x = x + self.ff(self.norm3(x))
"""


# --- (a) causal self-attention -------------------------------------------------------------------

_CAUSAL_BUGGY = [
    Variant(
        "causal_padding_on_query_rows",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    if keep is not None:
        mask = mask & keep[:, None, :, None]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "applied to the queries",
        mistake="padding-masks-queries",
    ),
    Variant(
        "causal_padding_on_query_rows_no_head_axis",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    if keep is not None:
        mask = mask & keep[:, :, None]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "no axis for the heads",
        mistake="mask-without-head-axis",
    ),
    Variant(
        "causal_padding_without_head_axis",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    if keep is not None:
        mask = mask & keep[:, None, :]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "no axis for the heads",
        mistake="mask-without-head-axis",
    ),
    Variant(
        "causal_triu",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).triu()
    if keep is not None:
        mask = mask & keep[:, None, None, :]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "wrong side of the diagonal",
        mistake="causal-upper-triangle",
    ),
    Variant(
        "causal_without_diagonal",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).tril(diagonal=-1)  # strictly the past
    if keep is not None:
        mask = mask & keep[:, None, None, :]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "leaves out the diagonal",
        mistake="causal-no-diagonal",
    ),
    Variant(
        "causal_one_step_ahead",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.tril(torch.ones(L, L), diagonal=1).bool()  # off by one: sees the next token
    if keep is not None:
        mask = mask & keep[:, None, None, :]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "looks at the future",
        mistake="sees-the-future",
    ),
    Variant(
        "causal_inverted",
        CAUSAL,
        _causal("""    L = x.shape[1]
    future = torch.ones(L, L, dtype=torch.bool).tril()
    mask = ~future
    if keep is not None:
        mask = mask & keep[:, None, None, :]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "wrong polarity",
        mistake="causal-reversed",
    ),
    Variant(
        "causal_no_mask",
        CAUSAL,
        _causal("""    mask = None if keep is None else keep[:, None, None, :]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "no causal mask",
        mistake="no-causal-mask",
    ),
    Variant(
        "causal_ignores_keep",
        CAUSAL,
        _causal("""    L = x.size(1)
    return attention(x, x, x, torch.tril(torch.ones(L, L, dtype=torch.bool)))
"""),
        (T_CAUSAL,),
        "ignores keep",
        mistake="keep-ignored",
    ),
    Variant(
        "causal_only_padding_when_padded",
        CAUSAL,
        _causal("""    L = x.shape[1]
    if keep is not None:
        return attention(x, x, x, keep[:, None, None, :])
    return attention(x, x, x, torch.ones(L, L, dtype=torch.bool).tril())
"""),
        (T_CAUSAL,),
        "ignores the causal part",
        mistake="causal-part-ignored",
    ),
    Variant(
        "causal_or_padding",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    if keep is not None:
        mask = mask | keep[:, None, None, :]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "with | (or)",
        mistake="masks-combined-with-or",
    ),
    Variant(
        "causal_padding_on_queries",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    if keep is not None:
        mask = mask & keep[:, None, :, None]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "applied to the queries",
        mistake="padding-masks-queries",
    ),
    Variant(
        "causal_padding_inverted",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    if keep is not None:
        mask = mask & ~keep[:, None, None, :]  # True at padding
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "padding mask has the wrong polarity",
        mistake="keep-reversed",
    ),
    Variant(
        "causal_padding_not_reshaped",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    if keep is not None:
        mask = mask & keep
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "needs singleton axes for the heads and the queries, (B, 1, 1, L)",
        mistake="mask-does-not-broadcast",
    ),
    Variant(
        "causal_float_mask",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.tril(torch.ones(L, L))
    if keep is not None:
        mask = mask * keep[:, None, None, :]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "dtype=torch.bool",
        mistake="mask-not-bool",
    ),
    Variant(
        "causal_length_from_batch_axis",
        CAUSAL,
        _causal("""    L = len(x)
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    if keep is not None:
        mask = mask & keep[:, None, None, :]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "must broadcast against the scores",
        mistake="mask-does-not-broadcast",
    ),
    Variant(
        "causal_calls_attention_twice",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    if keep is not None:
        mask = mask & keep[:, None, None, :]
    out, _ = attention(x, x, x, mask, need_weights=False)
    _, weights = attention(x, x, x, mask)
    return out, weights
"""),
        (T_CAUSAL,),
        "calls attention 2 times",
        mistake="attention-called-more-than-once",
    ),
    Variant(
        "causal_returns_output_only",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    if keep is not None:
        mask = mask & keep[:, None, None, :]
    out, weights = attention(x, x, x, mask)
    return out
"""),
        (T_CAUSAL,),
        "must return the pair",
        mistake="wrong-structure",
    ),
    Variant(
        "causal_without_weights",
        CAUSAL,
        _causal("""    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    if keep is not None:
        mask = mask & keep[:, None, None, :]
    return attention(x, x, x, mask, need_weights=False)
"""),
        (T_CAUSAL,),
        "weights should be a torch.Tensor",
        mistake="not-a-tensor",
    ),
    Variant(
        "calls_library_causal_mask",
        CAUSAL,
        _causal("""    mask = encoder_lib.causal_mask(x.shape[1])
    if keep is not None:
        mask = mask & keep[:, None, None, :]
    return attention(x, x, x, mask)
"""),
        (T_CAUSAL,),
        "encoder_lib.masks.causal_mask",
        mistake="forbidden-built-in",
    ),
]

_CAUSAL_CORRECT = [
    Variant(
        "causal_not_strict_upper",
        CAUSAL,
        _causal("""    L = x.shape[1]
    future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(diagonal=1)
    mask = ~future
    if keep is not None:
        mask = mask & keep.unsqueeze(1).unsqueeze(2)
    output, weights = attention(x, x, x, mask)
    return output, weights
"""),
    ),
    Variant(
        "causal_arange_comparison",
        CAUSAL,
        _causal("""    position = torch.arange(x.shape[1])
    mask = position[None, :] <= position[:, None]  # key j <= query i
    if keep is not None:
        mask = torch.logical_and(mask, keep.view(keep.shape[0], 1, 1, -1))
    return attention(x, x, x, mask=mask)
"""),
    ),
    Variant(
        "causal_python_loops",
        CAUSAL,
        _causal("""    L = x.shape[1]
    rows = [[j <= i for j in range(L)] for i in range(L)]
    mask = torch.tensor(rows)
    if keep is not None:
        mask = mask.expand(keep.shape[0], 1, L, L) & keep[:, None, None, :].expand(-1, 1, L, L)
    return attention(x, x, x, mask)
"""),
    ),
]


# --- (b) cross-attention -------------------------------------------------------------------------

_CROSS_BUGGY = [
    Variant(
        "cross_source_mask_without_head_axis",
        CROSS,
        _cross("""    mask = None if memory_keep is None else memory_keep[:, None, :]
    return attention(x, memory, memory, mask)
"""),
        (T_CROSS,),
        "no axis for the heads",
        mistake="mask-without-head-axis",
    ),
    Variant(
        "cross_source_mask_on_query_rows_no_head_axis",
        CROSS,
        _cross("""    mask = None if memory_keep is None else memory_keep[:, :, None]
    return attention(x, memory, memory, mask)
"""),
        (T_CROSS,),
        "no axis for the heads",
        mistake="mask-without-head-axis",
    ),
    Variant(
        "cross_keys_and_values_from_decoder",
        CROSS,
        _cross("""    mask = None if memory_keep is None else memory_keep[:, None, None, :]
    return attention(x, x, x, mask)
"""),
        (T_CROSS,),
        "keys and values are taken from the decoder",
        mistake="keys-values-from-decoder",
    ),
    Variant(
        "cross_values_from_decoder",
        CROSS,
        _cross("""    mask = None if memory_keep is None else memory_keep[:, None, None, :]
    return attention(x, memory, x, mask)
"""),
        (T_CROSS,),
        "values are taken from the decoder",
        mistake="values-from-decoder",
    ),
    Variant(
        "cross_queries_from_memory",
        CROSS,
        _cross("""    mask = None if memory_keep is None else memory_keep[:, None, None, :]
    return attention(memory, memory, memory, mask)
"""),
        (T_CROSS,),
        "taken from memory",
        mistake="queries-from-memory",
    ),
    Variant(
        "cross_keys_from_decoder",
        CROSS,
        _cross("""    mask = None if memory_keep is None else memory_keep[:, None, None, :]
    return attention(x, x, memory, mask)
"""),
        (T_CROSS,),
        "the keys are taken from the decoder",
        mistake="keys-from-decoder",
    ),
    Variant(
        "cross_roles_swapped",
        CROSS,
        _cross("""    mask = None if memory_keep is None else memory_keep[:, None, None, :]
    return attention(memory, x, x, mask)  # the source asks, the target answers
"""),
        (T_CROSS,),
        "other way round",
        mistake="queries-and-keys-swapped",
    ),
    Variant(
        "cross_ignores_source_mask",
        CROSS,
        _cross("""    return attention(x, memory, memory)
"""),
        (T_CROSS,),
        "ignores memory_keep",
        mistake="memory-keep-ignored",
    ),
    Variant(
        "cross_source_mask_inverted",
        CROSS,
        _cross("""    mask = None if memory_keep is None else ~memory_keep[:, None, None, :]
    return attention(x, memory, memory, mask)
"""),
        (T_CROSS,),
        "wrong polarity",
        mistake="memory-keep-reversed",
    ),
    Variant(
        "cross_source_mask_on_queries",
        CROSS,
        _cross("""    mask = None if memory_keep is None else memory_keep[:, None, :, None]
    return attention(x, memory, memory, mask)
"""),
        (T_CROSS,),
        "applied to the queries",
        mistake="source-mask-on-queries",
    ),
    Variant(
        "cross_source_mask_not_reshaped",
        CROSS,
        _cross("""    return attention(x, memory, memory, memory_keep)
"""),
        (T_CROSS,),
        "two singleton axes for the heads and the target positions, (B, 1, 1, L_src)",
        mistake="memory-keep-shape-b-l",
    ),
    Variant(
        "cross_causal_mask_added",
        CROSS,
        _cross("""    L_tgt, L_src = x.shape[1], memory.shape[1]
    mask = torch.ones(L_tgt, L_src, dtype=torch.bool).tril()  # as in the self-attention
    if memory_keep is not None:
        mask = mask & memory_keep[:, None, None, :]
    return attention(x, memory, memory, mask)
"""),
        (T_CROSS,),
        "a causal mask is added",
        mistake="causal-mask-in-cross-attention",
    ),
    Variant(
        "cross_calls_attention_twice",
        CROSS,
        _cross("""    mask = None if memory_keep is None else memory_keep[:, None, None, :]
    output = attention(x, memory, memory, mask)[0]
    weights = attention(x, memory, memory, mask)[1]
    return output, weights
"""),
        (T_CROSS,),
        "calls attention 2 times",
        mistake="attention-called-more-than-once",
    ),
    Variant(
        "cross_assumes_a_mask",
        CROSS,
        _cross("""    return attention(x, memory, memory, memory_keep[:, None, None, :])
"""),
        (T_CROSS,),
        "NoneType",
        mistake="memory-keep-none-not-handled",
    ),
]

_CROSS_CORRECT = [
    Variant(
        "cross_unsqueeze",
        CROSS,
        _cross("""    if memory_keep is None:
        return attention(x, memory, memory)
    return attention(x, memory, memory, memory_keep.unsqueeze(1).unsqueeze(1))
"""),
    ),
    Variant(
        "cross_keywords_and_view",
        CROSS,
        _cross("""    B, L_src, _ = memory.shape
    mask = memory_keep.view(B, 1, 1, L_src) if memory_keep is not None else None
    output, weights = attention(query=x, key=memory, value=memory, mask=mask)
    return output, weights
"""),
    ),
    Variant(
        "cross_full_mask",
        CROSS,
        _cross("""    mask = None
    if memory_keep is not None:
        L_tgt = x.shape[1]
        mask = memory_keep[:, None, None, :].expand(-1, 1, L_tgt, -1)  # (B, 1, L_tgt, L_src)
    return attention(x, memory, memory, mask)
"""),
    ),
]


# --- (c) the decoder layer -----------------------------------------------------------------------

_LAYER_BUGGY = [
    Variant(
        "layer_always_post_norm",
        LAYER,
        _layer_forward(_POST, _POST),
        (T_LAYER,),
        "Is norm_first ignored?",
        mistake="post-norm-instead-of-pre-norm",
    ),
    Variant(
        "layer_always_pre_norm",
        LAYER,
        _layer_forward(_PRE, _PRE),
        (T_LAYER,),
        "normalises the input of each sub-layer (pre-norm)",
        mistake="pre-norm-instead-of-post-norm",
    ),
    Variant(  # no catalogue entry: named by where it goes wrong (grading/locate.py)
        "layer_norm2_for_the_ffn_too",
        LAYER,
        _layer_forward(_POST.replace("self.norm3(", "self.norm2("), _PRE),
        (T_LAYER,),
        "self.norm3 is never called, while self.norm2 is called twice",
        mistake="part-never-called",
    ),
    Variant(
        "layer_norm_in_residual_branch",
        LAYER,
        _layer_forward(
            """            x = x + self.norm1(self.sa(x, tgt_mask))
            x = x + self.norm2(self.ca(x, memory, memory_mask))
            x = x + self.norm3(self.ff(x))
""",
            _PRE,
        ),
        (T_LAYER,),
        "inside the residual branch",
        mistake="norm-in-residual-branch",
    ),
    Variant(
        "layer_prenorm_normalised_skip",
        LAYER,
        _layer_forward(
            _POST,
            """            x = self.norm1(x)
            x = x + self.sa(x, tgt_mask)
            x = self.norm2(x)
            x = x + self.ca(x, memory, memory_mask)
            x = self.norm3(x)
            x = x + self.ff(x)
""",
        ),
        (T_LAYER,),
        "the residual adds the normalised x",
        mistake="normalised-skip",
    ),
    Variant(
        "layer_prenorm_normalises_memory",
        LAYER,
        _layer_forward(
            _POST,
            """            x = x + self.sa(self.norm1(x), tgt_mask)
            x = x + self.ca(self.norm2(x), self.norm2(memory), memory_mask)
            x = x + self.ff(self.norm3(x))
""",
        ),
        (T_LAYER,),
        "normalises memory too",
        mistake="memory-normalised",
    ),
    Variant(
        "layer_no_residual",
        LAYER,
        _layer_forward(
            """            x = self.norm1(self.sa(x, tgt_mask))
            x = self.norm2(self.ca(x, memory, memory_mask))
            x = self.norm3(self.ff(x))
""",
            """            x = self.sa(self.norm1(x), tgt_mask)
            x = self.ca(self.norm2(x), memory, memory_mask)
            x = self.ff(self.norm3(x))
""",
        ),
        (T_LAYER,),
        "there is no residual",
        mistake="no-residual",
    ),
    Variant(
        "layer_no_residual_around_cross_attention",
        LAYER,
        _layer_forward(
            """            x = self.norm1(x + self.sa(x, tgt_mask))
            x = self.norm2(self.ca(x, memory, memory_mask))
            x = self.norm3(x + self.ff(x))
""",
            """            x = x + self.sa(self.norm1(x), tgt_mask)
            x = self.ca(self.norm2(x), memory, memory_mask)
            x = x + self.ff(self.norm3(x))
""",
        ),
        (T_LAYER,),
        "around the cross-attention is missing",
        mistake="no-residual-around-a-sublayer",
    ),
    Variant(
        "layer_no_residual_around_self_attention",
        LAYER,
        _layer_forward(
            _POST.replace(
                "x = self.norm1(x + self.sa(x, tgt_mask))", "x = self.norm1(self.sa(x, tgt_mask))"
            ),
            _PRE.replace(
                "x = x + self.sa(self.norm1(x), tgt_mask)", "x = self.sa(self.norm1(x), tgt_mask)"
            ),
        ),
        (T_LAYER,),
        "around the self-attention is missing",
        mistake="no-residual-around-a-sublayer",
    ),
    Variant(
        "layer_no_residual_around_ffn",
        LAYER,
        _layer_forward(
            _POST.replace("x = self.norm3(x + self.ff(x))", "x = self.norm3(self.ff(x))"),
            _PRE.replace("x = x + self.ff(self.norm3(x))", "x = self.ff(self.norm3(x))"),
        ),
        (T_LAYER,),
        "around the feed-forward network is missing",
        mistake="no-residual-around-a-sublayer",
    ),
    Variant(
        "layer_no_activation",
        LAYER,
        _layer(
            _BLOCKS.replace("self.activation(self.linear1(h))", "self.linear1(h)")
            + """    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
"""
            + _PRE
            + "        else:\n"
            + _POST
            + "        return x\n"
        ),
        (T_LAYER,),
        "no activation",
        mistake="no-activation",
    ),
    Variant(
        "layer_cross_attention_first",
        LAYER,
        _layer_forward(
            """            x = self.norm2(x + self.ca(x, memory, memory_mask))
            x = self.norm1(x + self.sa(x, tgt_mask))
            x = self.norm3(x + self.ff(x))
""",
            """            x = x + self.ca(self.norm2(x), memory, memory_mask)
            x = x + self.sa(self.norm1(x), tgt_mask)
            x = x + self.ff(self.norm3(x))
""",
        ),
        (T_LAYER,),
        "wrong order",
        mistake="sublayers-out-of-order",
    ),
    Variant(
        "layer_cross_queries_from_the_input",
        LAYER,
        _layer_forward(
            """            h = self.norm1(x + self.sa(x, tgt_mask))
            h = self.norm2(h + self.ca(x, memory, memory_mask))
            x = self.norm3(h + self.ff(h))
""",
            """            h = x + self.sa(self.norm1(x), tgt_mask)
            h = h + self.ca(self.norm2(x), memory, memory_mask)
            x = h + self.ff(self.norm3(h))
""",
        ),
        (T_LAYER,),
        "queries come from the layer's input",
        mistake="stale-query",
    ),
    Variant(
        "layer_keys_and_values_from_decoder",
        LAYER,
        _layer_forward(
            """            x = self.norm1(x + self.sa(x, tgt_mask))
            x = self.norm2(x + self.ca(x, x, memory_mask))
            x = self.norm3(x + self.ff(x))
""",
            """            x = x + self.sa(self.norm1(x), tgt_mask)
            h = self.norm2(x)
            x = x + self.ca(h, h, memory_mask)
            x = x + self.ff(self.norm3(x))
""",
        ),
        (T_LAYER,),
        "keys and values from the decoder",
        mistake="cross-keys-from-decoder",
    ),
    Variant(
        "layer_ignores_tgt_mask",
        LAYER,
        _layer_forward(
            _POST.replace("self.sa(x, tgt_mask)", "self.sa(x, None)"),
            _PRE.replace("tgt_mask)", "None)"),
        ),
        (T_LAYER,),
        "ignores tgt_mask",
        mistake="tgt-mask-ignored",
    ),
    Variant(
        "layer_ignores_memory_mask",
        LAYER,
        _layer_forward(
            _POST.replace("memory, memory_mask)", "memory, None)"),
            _PRE.replace("memory, memory_mask)", "memory, None)"),
        ),
        (T_LAYER,),
        "ignores memory_mask",
        mistake="memory-mask-ignored",
    ),
    Variant(
        "layer_swaps_the_masks",
        LAYER,
        _layer_forward(
            """            x = self.norm1(x + self.sa(x, memory_mask))
            x = self.norm2(x + self.ca(x, memory, tgt_mask))
            x = self.norm3(x + self.ff(x))
""",
            """            x = x + self.sa(self.norm1(x), memory_mask)
            x = x + self.ca(self.norm2(x), memory, tgt_mask)
            x = x + self.ff(self.norm3(x))
""",
        ),
        (T_LAYER,),
        "the masks are swapped",
        mistake="masks-swapped",
    ),
    Variant(
        "layer_inverts_tgt_mask",
        LAYER,
        _layer_forward(
            _POST.replace("self.sa(x, tgt_mask)", "self.sa(x, ~tgt_mask)"),
            _PRE.replace("self.norm1(x), tgt_mask)", "self.norm1(x), ~tgt_mask)"),
        ),
        (T_LAYER,),
        "inverts tgt_mask",
        mistake="tgt-mask-inverted",
    ),
    Variant(
        "layer_inverts_memory_mask",
        LAYER,
        _layer_forward(
            _POST.replace("memory, memory_mask)", "memory, ~memory_mask)"),
            _PRE.replace("memory, memory_mask)", "memory, ~memory_mask)"),
        ),
        (T_LAYER,),
        "inverts memory_mask",
        mistake="memory-mask-inverted",
    ),
    Variant(
        "layer_masks_swallowed_by_kwargs",
        LAYER,
        _layer_forward(
            _POST.replace("tgt_mask", "mask").replace("memory_mask", "src_mask"),
            _PRE.replace("tgt_mask", "mask").replace("memory_mask", "src_mask"),
            signature="x, memory, mask=None, src_mask=None, **kwargs",
        ),
        (T_LAYER,),
        "looks at the future",
        mistake="sees-the-future",
    ),
    Variant(
        "layer_tuple_not_unpacked",
        LAYER,
        _layer(
            """    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, tgt_mask))
            h = self.norm2(x)
            x = x + self.dropout2(self.multihead_attn(h, memory, memory, memory_mask))
            h = self.norm3(x)
            return x + self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(h)))))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.dropout2(self.multihead_attn(x, memory, memory, memory_mask)))
        h = self.dropout(self.activation(self.linear1(x)))
        return self.norm3(x + self.dropout3(self.linear2(h)))
"""
        ),
        (T_LAYER,),
        "unpack it",
        mistake="attention-pair-not-unpacked",
    ),
    # Training mode: right in eval mode, dropout missing or misplaced.
    Variant(
        "layer_no_dropout",
        LAYER,
        _layer_forward(_POST, _PRE)
        .replace("self.dropout1(", "(")
        .replace("self.dropout2(", "(")
        .replace("self.dropout3(", "(")
        .replace("self.dropout(self.activation", "(self.activation"),
        (T_LAYER,),
        "dropout is missing in training",
        mistake="dropout-missing",
    ),
    Variant(
        "layer_no_dropout2",
        LAYER,
        _layer_forward(_POST, _PRE).replace("self.dropout2(", "("),
        (T_LAYER,),
        "no dropout on the cross-attention's output",
        mistake="dropout-missing-at-one-site",
    ),
    Variant(
        "layer_no_hidden_dropout",
        LAYER,
        _layer_forward(_POST, _PRE).replace("self.dropout(self.activation", "(self.activation"),
        (T_LAYER,),
        "no dropout on the FFN's hidden units",
        mistake="dropout-missing-at-one-site",
    ),
    Variant(
        "layer_dropout_on_sublayer_inputs",
        LAYER,
        _layer(
            """    def sa(self, h, tgt_mask):
        h = self.dropout1(h)
        return self.self_attn(h, h, h, tgt_mask, need_weights=False)[0]

    def ca(self, h, memory, memory_mask):
        h = self.dropout2(h)
        return self.multihead_attn(h, memory, memory, memory_mask, need_weights=False)[0]

    def ff(self, h):
        return self.linear2(self.dropout(self.activation(self.linear1(self.dropout3(h)))))

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
"""
            + _PRE
            + "        else:\n"
            + _POST
            + "        return x\n"
        ),
        (T_LAYER,),
        "dropout is in the wrong place in every sub-layer",
        mistake="dropout-on-sublayer-input",
    ),
    Variant(
        "layer_dropout_after_norm",
        LAYER,
        _layer(
            _BLOCKS.replace("return self.dropout1(", "return (")
            .replace("return self.dropout2(", "return (")
            .replace("return self.dropout3(", "return (")
            + """    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.dropout1(self.sa(self.norm1(x), tgt_mask))
            x = x + self.dropout2(self.ca(self.norm2(x), memory, memory_mask))
            return x + self.dropout3(self.ff(self.norm3(x)))
        x = self.dropout1(self.norm1(x + self.sa(x, tgt_mask)))
        x = self.dropout2(self.norm2(x + self.ca(x, memory, memory_mask)))
        return self.dropout3(self.norm3(x + self.ff(x)))
"""
        ),
        (T_LAYER,),
        "after the norm",
        mistake="dropout-after-norm",
    ),
    Variant(
        "layer_functional_dropout_in_eval",
        LAYER,
        _layer_forward(_POST, _PRE).replace(
            "return self.dropout2(\n", "return F.dropout(p=self.dropout2.p, input=\n"
        ),
        (T_LAYER,),
        "still active in eval mode",
        mistake="dropout-in-eval",
    ),
    *(
        Variant(f"layer_dropout_{name}", LAYER, _layer_dropouts(places, hidden), (T_LAYER,), says)
        for name, places, hidden, says in (
            ("on_residual_sums", ("sum",) * 3, "module", "applied to the residual sum instead"),
            (
                "on_self_attention_input",
                ("in", "out", "out"),
                "module",
                "wrong place in the self-attention: it is applied to the sub-layer's input",
            ),
            (
                "after_cross_attention_norm",
                ("out", "after", "out"),
                "module",
                "wrong place in the cross-attention: it is applied after the norm",
            ),
            (
                "on_ffn_residual_sum",
                ("out", "out", "sum"),
                "module",
                "wrong place in the feed-forward network: it is applied to the residual sum",
            ),
            (
                "on_ffn_input",
                ("out", "out", "in"),
                "module",
                "wrong place in the feed-forward network: it is applied to the sub-layer's input",
            ),
            (
                "missing_on_self_attention",
                ("none", "out", "out"),
                "module",
                "no dropout on the self-attention's output",
            ),
            (
                "missing_on_ffn_output",
                ("out", "out", "none"),
                "module",
                "no dropout on the FFN's output (self.dropout3)",
            ),
            (
                "functional_on_self_attention",
                ("eval", "out", "out"),
                "module",
                "still active in eval mode (on the self-attention's output (self.dropout1), p=0.1)",
            ),
            (
                "functional_on_ffn_output",
                ("out", "out", "eval"),
                "module",
                "still active in eval mode (on the FFN's output (self.dropout3), p=0.1)",
            ),
            (
                "functional_default_on_hidden",
                ("out", "out", "out"),
                "eval_default",
                "still active in eval mode (on the FFN's hidden units (self.dropout), p=0.5)",
            ),
            (
                "on_self_attention_residual_sum",
                ("sum", "out", "out"),
                "module",
                "wrong place in the self-attention: it is applied to the residual sum",
            ),
            (
                "after_self_attention_norm",
                ("after", "out", "out"),
                "module",
                "wrong place in the self-attention: it is applied after the norm",
            ),
            (
                "on_cross_attention_input",
                ("out", "in", "out"),
                "module",
                "wrong place in the cross-attention: it is applied to the sub-layer's input",
            ),
            (
                "on_cross_attention_residual_sum",
                ("out", "sum", "out"),
                "module",
                "wrong place in the cross-attention: it is applied to the residual sum",
            ),
            (
                "after_ffn_norm",
                ("out", "out", "after"),
                "module",
                "wrong place in the feed-forward network: it is applied after the norm",
            ),
            (
                "functional_on_hidden",
                ("out", "out", "out"),
                "eval",
                "still active in eval mode (on the FFN's hidden units (self.dropout), p=0.1)",
            ),
            (
                "functional_default_on_self_attention",
                ("eval_default", "out", "out"),
                "module",
                "still active in eval mode (on the self-attention's output (self.dropout1), p=0.5)",
            ),
            (
                "functional_default_on_cross_attention",
                ("out", "eval_default", "out"),
                "module",
                "(on the cross-attention's output (self.dropout2), p=0.5)",
            ),
            (
                "functional_default_on_ffn_output",
                ("out", "out", "eval_default"),
                "module",
                "still active in eval mode (on the FFN's output (self.dropout3), p=0.5)",
            ),
        )
    ),
    Variant(
        "uses_torch_decoder_layer",
        LAYER,
        _layer(
            """    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        d_model = self.linear1.in_features
        layer = nn.TransformerDecoderLayer(
            d_model, self.self_attn.num_heads, self.linear1.out_features, self.dropout.p,
            batch_first=True, norm_first=self.norm_first,
        ).to(x.dtype)
        layer.load_state_dict(self.state_dict())
        layer.train(self.training)
        key_padding = None if memory_mask is None else ~memory_mask[:, 0, 0, :]
        return layer(x, memory, tgt_mask=None if tgt_mask is None else ~tgt_mask,
                     memory_key_padding_mask=key_padding)
"""
        ),
        (T_LAYER,),
        "nn.TransformerDecoderLayer",
        mistake="forbidden-built-in",
    ),
    Variant(
        "uses_library_decoder_layer",
        LAYER,
        _layer(
            """    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        reference = encoder_lib.DecoderLayer(
            self.linear1.in_features, self.self_attn.num_heads, self.linear1.out_features,
            self.dropout.p, norm_first=self.norm_first,
        ).to(x.dtype)
        reference.load_state_dict(self.state_dict())
        return reference.train(self.training)(x, memory, tgt_mask, memory_mask)
"""
        ),
        (T_LAYER,),
        "encoder_lib.decoder.DecoderLayer",
        mistake="forbidden-built-in",
    ),
]

_LAYER_CORRECT = [
    Variant("layer_written_by_the_generator", LAYER, _layer_dropouts()),
    Variant(
        "layer_functional_dropout",
        LAYER,
        _layer(
            """    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        p, train = self.dropout.p, self.training
        norm = self.norm_first
        h = self.norm1(x) if norm else x
        a = F.dropout(self.self_attn(h, h, h, tgt_mask)[0], p, train)
        x = x + a if norm else self.norm1(x + a)
        h = self.norm2(x) if norm else x
        c = F.dropout(self.multihead_attn(h, memory, memory, memory_mask)[0], p, train)
        x = x + c if norm else self.norm2(x + c)
        h = self.norm3(x) if norm else x
        hidden = F.dropout(F.relu(self.linear1(h)), p, train)
        f = F.dropout(self.linear2(hidden), p, train)
        return x + f if norm else self.norm3(x + f)
"""
        ),
    ),
    Variant(
        "layer_sublayers_in_a_loop",
        LAYER,
        _layer(
            """    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        def self_attention(h):
            out, _ = self.self_attn(h, h, h, mask=tgt_mask, need_weights=False)
            return out

        def cross(h):
            out, _ = self.multihead_attn(h, memory, memory, mask=memory_mask)
            return out

        def ffn(h):
            return self.linear2(self.dropout(self.activation(self.linear1(h))))

        steps = [
            (self_attention, self.norm1, self.dropout1),
            (cross, self.norm2, self.dropout2),
            (ffn, self.norm3, self.dropout3),
        ]
        for sublayer, norm, drop in steps:
            if self.norm_first:
                x = x + drop(sublayer(norm(x)))
            else:
                x = norm(x + drop(sublayer(x)))
        return x
"""
        ),
    ),
    Variant(
        "layer_inline_post_and_pre",
        LAYER,
        _layer(
            """    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if not self.norm_first:
            attn, _ = self.self_attn(x, x, x, tgt_mask)
            x = self.norm1(x + self.dropout1(attn))
            attn, _ = self.multihead_attn(x, memory, memory, memory_mask)
            x = self.norm2(x + self.dropout2(attn))
            ff = self.linear2(self.dropout(F.relu(self.linear1(x))))
            return self.norm3(x + self.dropout3(ff))
        h = self.norm1(x)
        attn, _ = self.self_attn(h, h, h, tgt_mask)
        x = x + self.dropout1(attn)
        attn, _ = self.multihead_attn(self.norm2(x), memory, memory, memory_mask)
        x = x + self.dropout2(attn)
        ff = self.linear2(self.dropout(F.relu(self.linear1(self.norm3(x)))))
        return x + self.dropout3(ff)
"""
        ),
    ),
]


# --- (d) greedy decoding -------------------------------------------------------------------------

_GREEDY_BUGGY = [
    Variant(
        "greedy_samples",
        GREEDY,
        _greedy("""    B = src.shape[0]
    out = torch.full((B, 1), start_id)
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        probs = model(src, out)[:, -1].softmax(dim=-1)
        token = torch.multinomial(probs, 1)[:, 0]  # draw the next token
        token = token.masked_fill(finished, pad_id)
        out = torch.cat([out, token[:, None]], dim=1)
        finished |= token == end_id
    return out[:, 1:]
"""),
        (T_GREEDY,),
        "Drawing from the probabilities (sampling)",
        mistake="not-argmax",
    ),
    Variant(
        "greedy_finished_forgotten",
        GREEDY,
        _greedy("""    B = src.shape[0]
    out = torch.full((B, 1), start_id)
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        token = model(src, out)[:, -1].argmax(dim=-1)
        token = token.masked_fill(finished, pad_id)
        out = torch.cat([out, token[:, None]], dim=1)
        finished = token == end_id  # only the last token
    return out[:, 1:]
"""),
        (T_GREEDY,),
        "starts again",
        mistake="finished-sequence-restarts",
    ),
    Variant(
        "greedy_whole_target_at_once",
        GREEDY,
        _greedy("""    B = src.shape[0]
    tgt_in = torch.full((B, max_len), pad_id)
    tgt_in[:, 0] = start_id
    tokens = model(src, tgt_in).argmax(dim=-1)  # (B, max_len): every position in one go
    finished = torch.zeros(B, dtype=torch.bool)
    for t in range(max_len):
        tokens[:, t] = tokens[:, t].masked_fill(finished, pad_id)
        finished = finished | (tokens[:, t] == end_id)
    return tokens
"""),
        (T_GREEDY,),
        "feeds the whole target at once",
        mistake="whole-target-at-once",
    ),
    Variant(
        "greedy_whole_target_unpadded",
        GREEDY,
        _greedy("""    prefix = torch.full((src.shape[0], max_len), pad_id)
    prefix[:, 0] = start_id
    return model(src, prefix).argmax(-1)
"""),
        (T_GREEDY,),
        "Pad the places after <end> too",
        mistake="whole-target-at-once",
    ),
    Variant(
        "greedy_reads_the_first_position",
        GREEDY,
        _greedy("""    B = src.shape[0]
    out = torch.full((B, 1), start_id)
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        token = model(src, out)[:, 0].argmax(dim=-1)
        token = token.masked_fill(finished, pad_id)
        out = torch.cat([out, token[:, None]], dim=1)
        finished |= token == end_id
    return out[:, 1:]
"""),
        (T_GREEDY,),
        "predicts the token after <start> again",
        mistake="reads-the-first-position",
    ),
    Variant(
        "greedy_never_feeds_back",
        GREEDY,
        _greedy("""    B = src.shape[0]
    start = torch.full((B, 1), start_id)
    tokens = []
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        token = model(src, start)[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
        tokens.append(token)
        finished |= token == end_id
    return torch.stack(tokens, dim=1)
"""),
        (T_GREEDY,),
        "never feeds its predictions back",
        mistake="reads-the-first-position",
    ),
    Variant(
        "greedy_feeds_only_the_last_token",
        GREEDY,
        _greedy("""    B = src.shape[0]
    out = torch.full((B, 1), start_id)
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        token = model(src, out[:, -1:])[:, -1].argmax(dim=-1)
        token = token.masked_fill(finished, pad_id)
        out = torch.cat([out, token[:, None]], dim=1)
        finished |= token == end_id
    return out[:, 1:]
"""),
        (T_GREEDY,),
        "only the last token",
        mistake="feeds-only-the-last-token",
    ),
    Variant(
        "greedy_no_padding_after_end",
        GREEDY,
        _greedy("""    out = torch.full((src.shape[0], 1), start_id)
    for _ in range(max_len):
        token = model(src, out)[:, -1].argmax(dim=-1, keepdim=True)
        out = torch.cat([out, token], dim=1)
    return out[:, 1:]
"""),
        (T_GREEDY,),
        "not padding",
        mistake="no-padding-after-end",
    ),
    Variant(
        "greedy_pads_the_end_token_too",
        GREEDY,
        _greedy("""    B = src.shape[0]
    out = torch.full((B, 1), start_id)
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        token = model(src, out)[:, -1].argmax(dim=-1)
        finished |= token == end_id
        token = token.masked_fill(finished, pad_id)
        out = torch.cat([out, token[:, None]], dim=1)
    return out[:, 1:]
"""),
        (T_GREEDY,),
        "replaces <end> itself",
        mistake="end-replaced-by-padding",
    ),
    Variant(
        "greedy_stops_at_the_first_end",
        GREEDY,
        _greedy("""    B = src.shape[0]
    out = torch.full((B, 1), start_id)
    for _ in range(max_len):
        token = model(src, out)[:, -1].argmax(dim=-1)
        out = torch.cat([out, token[:, None]], dim=1)
        if (token == end_id).any():
            break
    tokens = out[:, 1:]
    after = (tokens == end_id).long().cumsum(dim=1) - (tokens == end_id).long() > 0
    tokens = tokens.masked_fill(after, pad_id)
    return F.pad(tokens, (0, max_len - tokens.shape[1]), value=pad_id)
"""),
        (T_GREEDY,),
        "stops when the first sequence has finished",
        mistake="stops-at-the-first-end",
    ),
    Variant(
        "greedy_hard_coded_ids",
        GREEDY,
        _greedy("""    B = src.shape[0]
    out = torch.ones(B, 1, dtype=torch.long)  # <start> is 1
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        token = model(src, out)[:, -1].argmax(dim=-1).masked_fill(finished, 0)
        out = torch.cat([out, token[:, None]], dim=1)
        finished |= token == 2
    return out[:, 1:]
"""),
        (T_GREEDY,),
        "ignores start_id, end_id and pad_id",
        mistake="ignores-special-ids",
    ),
    *(
        Variant(
            f"greedy_hard_coded_{which}",
            GREEDY,
            _greedy(f"""    B = src.shape[0]
    out = torch.full((B, 1), {start})
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        token = model(src, out)[:, -1].argmax(dim=-1).masked_fill(finished, {pad})
        out = torch.cat([out, token[:, None]], dim=1)
        finished |= token == {end}
    return out[:, 1:]
"""),
            (T_GREEDY,),
            f"it ignores {which}_id:",
        )
        for which, start, end, pad in (
            ("start", "1", "end_id", "pad_id"),
            ("end", "start_id", "2", "pad_id"),
            ("pad", "start_id", "end_id", "0"),
        )
    ),
    Variant(
        "greedy_returns_start_too",
        GREEDY,
        _greedy("""    B = src.shape[0]
    out = torch.full((B, 1), start_id)
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        token = model(src, out)[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
        out = torch.cat([out, token[:, None]], dim=1)
        finished |= token == end_id
    return out
"""),
        (T_GREEDY,),
        "returns <start> as well",
        mistake="returns-start-token",
    ),
    Variant(
        "greedy_one_token_short",
        GREEDY,
        _greedy("""    B = src.shape[0]
    out = torch.full((B, 1), start_id)
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(1, max_len):
        token = model(src, out)[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
        out = torch.cat([out, token[:, None]], dim=1)
        finished |= token == end_id
    return out[:, 1:]
"""),
        (T_GREEDY,),
        "One token short",
        mistake="one-token-short",
    ),
    Variant(
        "greedy_float_ids",
        GREEDY,
        _greedy("""    B = src.shape[0]
    out = torch.ones(B, 1) * start_id
    for _ in range(max_len):
        token = model(src, out)[:, -1].argmax(dim=-1)
        out = torch.cat([out, token[:, None].float()], dim=1)
    return out[:, 1:].long()
"""),
        (T_GREEDY,),
        "integer",
        mistake="ids-not-integers",
    ),
]

_GREEDY_CORRECT = [
    Variant(
        "greedy_stops_when_all_finished",
        GREEDY,
        _greedy("""    B = src.shape[0]
    out = torch.full((B, 1), start_id, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        probabilities = torch.softmax(model(src, out)[:, -1, :], dim=-1)
        token = torch.where(done, torch.full_like(done, pad_id, dtype=torch.long),
                            probabilities.argmax(dim=-1))
        out = torch.cat([out, token.unsqueeze(1)], dim=1)
        done = done | (token == end_id)
        if done.all():
            break
    return F.pad(out[:, 1:], (0, max_len + 1 - out.shape[1]), value=pad_id)
"""),
    ),
    Variant(
        "greedy_fills_a_buffer",
        GREEDY,
        _greedy("""    B = src.shape[0]
    buffer = torch.full((B, max_len + 1), pad_id)
    buffer[:, 0] = start_id
    for t in range(max_len):
        logits = model(src, buffer[:, : t + 1])
        buffer[:, t + 1] = logits[:, t].argmax(dim=-1)
    tokens = buffer[:, 1:]
    for b in range(B):
        ends = (tokens[b] == end_id).nonzero()
        if len(ends):
            tokens[b, int(ends[0]) + 1 :] = pad_id
    return tokens
"""),
    ),
    Variant(
        "greedy_full_buffer_every_call",
        GREEDY,
        _greedy("""    # The model is causal: the places after t do not matter.
    B = src.shape[0]
    buffer = torch.full((B, max_len), pad_id)
    buffer[:, 0] = start_id
    chosen = []
    for t in range(max_len):
        token = model(src, buffer)[:, t].argmax(dim=-1)
        chosen.append(token)
        if t + 1 < max_len:
            buffer[:, t + 1] = token
    tokens = torch.stack(chosen, dim=1)
    ended = torch.cumsum(tokens == end_id, dim=1)
    return tokens.masked_fill((ended - (tokens == end_id).long()) > 0, pad_id)
"""),
    ),
]

BUGGY = _CAUSAL_BUGGY + _CROSS_BUGGY + _LAYER_BUGGY + _GREEDY_BUGGY
CORRECT = _CAUSAL_CORRECT + _CROSS_CORRECT + _LAYER_CORRECT + _GREEDY_CORRECT


MISTAKES = {
    ("decoder_layer", "layer_dropout_on_residual_sums"): "dropout-on-residual-sum",
    ("decoder_layer", "layer_dropout_on_self_attention_input"): "dropout-on-sublayer-input",
    ("decoder_layer", "layer_dropout_after_cross_attention_norm"): "dropout-after-norm",
    ("decoder_layer", "layer_dropout_on_ffn_residual_sum"): "dropout-on-residual-sum",
    ("decoder_layer", "layer_dropout_on_ffn_input"): "dropout-on-sublayer-input",
    ("decoder_layer", "layer_dropout_missing_on_self_attention"): "dropout-missing-at-one-site",
    ("decoder_layer", "layer_dropout_missing_on_ffn_output"): "dropout-missing-at-one-site",
    ("decoder_layer", "layer_dropout_functional_on_self_attention"): "dropout-in-eval",
    ("decoder_layer", "layer_dropout_functional_on_ffn_output"): "dropout-in-eval",
    ("decoder_layer", "layer_dropout_functional_default_on_hidden"): "dropout-in-eval",
    ("decoder_layer", "layer_dropout_on_self_attention_residual_sum"): "dropout-on-residual-sum",
    ("decoder_layer", "layer_dropout_after_self_attention_norm"): "dropout-after-norm",
    ("decoder_layer", "layer_dropout_on_cross_attention_input"): "dropout-on-sublayer-input",
    ("decoder_layer", "layer_dropout_on_cross_attention_residual_sum"): "dropout-on-residual-sum",
    ("decoder_layer", "layer_dropout_after_ffn_norm"): "dropout-after-norm",
    ("decoder_layer", "layer_dropout_functional_on_hidden"): "dropout-in-eval",
    ("decoder_layer", "layer_dropout_functional_default_on_self_attention"): "dropout-in-eval",
    ("decoder_layer", "layer_dropout_functional_default_on_cross_attention"): "dropout-in-eval",
    ("decoder_layer", "layer_dropout_functional_default_on_ffn_output"): "dropout-in-eval",
    ("greedy_decode", "greedy_hard_coded_start"): "ignores-start-id",
    ("greedy_decode", "greedy_hard_coded_end"): "ignores-end-id",
    ("greedy_decode", "greedy_hard_coded_pad"): "ignores-pad-id",
}
"""The mistake id of each buggy answer built from a table above: ``(cell, name)`` -> id
(``variants.load`` gives it to the variant)."""
