"""Answers to notebook 05 (the encoder) as students write them: ``BUGGY`` ones, each with the
test cells it must fail and the words that name its mistake, and ``CORRECT`` ones written
differently from the solution.

The solution's ``Encoder.forward`` calls the student's ``make_padding_mask``, so a wrong mask
also fails ``test_encoder``; ``test_encoder`` swaps the student's layers for reference ones, so
a wrong ``EncoderLayer`` fails ``test_encoder_layer`` only.
"""

from __future__ import annotations

from variants import Variant

PE, MASK, LAYER, ENCODER = (
    "sinusoidal_positional_encoding",
    "make_padding_mask",
    "encoder_layer",
    "encoder",
)
T_PE, T_MASK, T_LAYER, T_ENCODER = (f"test_{name}" for name in (PE, MASK, LAYER, ENCODER))


def _pe(body: str) -> str:
    return f"def sinusoidal_positional_encoding(max_len, d_model):\n{body}"


def _mask(body: str) -> str:
    return f"def make_padding_mask(token_ids, pad_id):\n{body}"


_LAYER_INIT = """class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = encoder_lib.MultiHeadAttention(d_model, num_heads, dropout)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = encoder_lib.LayerNorm(d_model)
        self.norm2 = encoder_lib.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = F.relu
        self.norm_first = norm_first

"""


def _layer(methods: str) -> str:
    return _LAYER_INIT + methods


_ENCODER_INIT = """class Encoder(nn.Module):
    def __init__(
        self, vocab_size, d_model, num_heads, d_ff, num_layers, dropout, max_sequence_length, pad_id
    ):
        super().__init__()
        self.pad_id = pad_id
        self.embedding = encoder_lib.TokenEmbedding(vocab_size, d_model, padding_idx=pad_id)
        table = encoder_lib.sinusoidal_table(max_sequence_length, d_model)  # (max_len, D)
        self.register_buffer("pe", table, persistent=False)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)
        )

"""


def _encoder(forward: str) -> str:
    return _ENCODER_INIT + forward


# --- (a) sinusoidal positional encoding ----------------------------------------------------------

_PE_BUGGY = [
    Variant(
        "pe_concatenated",
        PE,
        _pe("""    pos = torch.arange(max_len).unsqueeze(1).float()
    freq = 10000 ** (torch.arange(0, d_model, 2).float() / d_model)
    return torch.cat([torch.sin(pos / freq), torch.cos(pos / freq)], dim=1)
"""),
        (T_PE,),
        "interleaved",
        mistake="pe-concatenated",
    ),
    Variant(
        "pe_column_index_exponent",
        PE,
        _pe("""    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / 10000 ** (j / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe
"""),
        (T_PE,),
        "pair index",
        mistake="pe-column-index",
    ),
    Variant(
        "pe_missing_factor_two",
        PE,
        _pe("""    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    i = torch.arange(d_model // 2, dtype=torch.float32)
    angle = pos / 10000 ** (i / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe
"""),
        (T_PE,),
        "factor 2",
        mistake="pe-no-factor-2",
    ),
    Variant(
        "pe_sin_cos_swapped",
        PE,
        _pe("""    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    angle = pos / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.cos(angle)
    pe[:, 1::2] = torch.sin(angle)
    return pe
"""),
        (T_PE,),
        "swapped",
        mistake="pe-sin-cos-swapped",
    ),
    Variant(
        "pe_multiplies_position",
        PE,
        _pe("""    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    angle = pos * 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe
"""),
        (T_PE,),
        "divided",
        mistake="pe-multiplied",
    ),
    Variant(
        "pe_sequence_first",
        PE,
        _pe("""    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    angle = pos / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.unsqueeze(0).transpose(0, 1)  # (max_len, 1, D), as in sequence-first code
"""),
        (T_PE,),
        "sequence-first",
        mistake="pe-sequence-first",
    ),
    Variant(
        "pe_transposed",
        PE,
        _pe("""    pos = torch.arange(max_len, dtype=torch.float32)[None, :]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)[:, None]
    angle = pos / 10000 ** (two_i / d_model)  # (D/2, max_len)
    pe = torch.zeros(d_model, max_len)
    pe[0::2] = torch.sin(angle)
    pe[1::2] = torch.cos(angle)
    return pe
"""),
        (T_PE,),
        "wrong order",
        mistake="shape",
    ),
]

_PE_CORRECT = [
    Variant(
        "pe_stack_flatten",
        PE,
        _pe("""    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    freq = 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angle = pos / freq  # (max_len, D/2)
    # stack to (max_len, D/2, 2) then flatten the last two: sin, cos, sin, cos, ...
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).float()
"""),
    ),
    Variant(
        "pe_exp_log",
        PE,
        _pe("""    position = torch.arange(0, max_len).float().unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
"""),
    ),
    Variant(
        "pe_python_loops",
        PE,
        _pe("""    rows = []
    for pos in range(max_len):
        row = []
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows)
"""),
    ),
]

# --- (b) padding mask ----------------------------------------------------------------------------

_MASK_BUGGY = [
    Variant(
        "mask_reversed_polarity",
        MASK,
        _mask("    return (token_ids == pad_id)[:, None, None, :]\n"),
        (T_MASK, T_ENCODER),
        "wrong polarity",
        also_says=(("test_encoder", "this comes from your make_padding_mask (exercise b)"),),
        mistake="mask-reversed",
    ),
    Variant(
        "mask_shape_b_l",
        MASK,
        _mask("    return token_ids != pad_id\n"),
        (T_MASK, T_ENCODER),
        "shape (B, L)",
        mistake="mask-shape-b-l",
    ),
    Variant(
        "mask_masks_queries",
        MASK,
        _mask("    return (token_ids != pad_id)[:, None, :, None]\n"),
        (T_MASK, T_ENCODER),
        "queries",
        mistake="mask-masks-queries",
    ),
    Variant(
        "mask_float",
        MASK,
        _mask("    return (token_ids != pad_id).float()[:, None, None, :]\n"),
        (T_MASK, T_ENCODER),
        "boolean",
        mistake="mask-not-bool",
    ),
    Variant(
        "mask_pad_id_hard_coded",
        MASK,
        _mask("    return (token_ids != 0).unsqueeze(1).unsqueeze(2)\n"),
        (T_MASK, T_ENCODER),
        "instead of pad_id",
        mistake="pad-id-hard-coded",
    ),
]

_MASK_CORRECT = [
    Variant(
        "mask_ne_unsqueeze",
        MASK,
        _mask("    return token_ids.ne(pad_id).unsqueeze(1).unsqueeze(2)\n"),
    ),
    Variant(
        "mask_view",
        MASK,
        _mask("""    B, L = token_ids.shape
    keep = ~(token_ids == pad_id)
    return keep.view(B, 1, 1, L)
"""),
    ),
]

# --- (c) encoder layer ---------------------------------------------------------------------------

_POST_AND_PRE = """    def forward(self, x, mask=None):
        if self.norm_first:
{pre}
        else:
{post}
        return x

    def sa(self, x, mask):
        out, _ = self.self_attn(x, x, x, mask)
        return self.dropout1(out)

    def ff(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))
"""

_PRE = """            x = x + self.sa(self.norm1(x), mask)
            x = x + self.ff(self.norm2(x))"""
_POST = """            x = self.norm1(x + self.sa(x, mask))
            x = self.norm2(x + self.ff(x))"""


def _layer_with(pre: str = _PRE, post: str = _POST, extra: str = "") -> str:
    return _layer(_POST_AND_PRE.format(pre=pre, post=post) + extra)


_LAYER_BUGGY = [
    Variant(
        "layer_no_residual",
        LAYER,
        _layer_with(
            pre="""            x = self.sa(self.norm1(x), mask)
            x = self.ff(self.norm2(x))""",
            post="""            x = self.norm1(self.sa(x, mask))
            x = self.norm2(self.ff(x))""",
        ),
        (T_LAYER,),
        "no residual",
        mistake="no-residual",
    ),
    Variant(
        "layer_no_ffn_residual",
        LAYER,
        _layer_with(
            post="""            x = self.norm1(x + self.sa(x, mask))
            x = self.norm2(self.ff(x))"""
        ),
        (T_LAYER,),
        "residual",
        mistake="no-residual-around-ffn",
    ),
    Variant(
        "layer_always_pre_norm",
        LAYER,
        _layer_with(post=_PRE),
        (T_LAYER,),
        "wrong place",
        mistake="pre-norm-instead-of-post-norm",
    ),
    Variant(
        "layer_ignores_norm_first",
        LAYER,
        _layer_with(pre=_POST),
        (T_LAYER,),
        "norm_first ignored",
        mistake="post-norm-instead-of-pre-norm",
    ),
    Variant(
        "layer_norm_inside_residual",
        LAYER,
        _layer_with(
            post="""            x = x + self.norm1(self.sa(x, mask))
            x = x + self.norm2(self.ff(x))"""
        ),
        (T_LAYER,),
        "inside the residual",
        mistake="norm-in-residual-branch",
    ),
    Variant(
        "layer_no_activation",
        LAYER,
        _layer("""    def forward(self, x, mask=None):
        ffn = lambda h: self.dropout2(self.linear2(self.dropout(self.linear1(h))))
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask)[0])
            return x + ffn(self.norm2(x))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask)[0]))
        return self.norm2(x + ffn(x))
"""),
        (T_LAYER,),
        "activation",
        mistake="no-activation",
    ),
    Variant(
        "layer_ignores_mask",
        LAYER,
        _layer_with().replace("self.self_attn(x, x, x, mask)", "self.self_attn(x, x, x)"),
        (T_LAYER,),
        "ignores the padding mask",
        mistake="mask-ignored",
    ),
    Variant(
        "layer_mask_swallowed_by_kwargs",
        LAYER,
        _layer("""    def forward(self, x, src_mask=None, **kwargs):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, src_mask)[0])
            h = self.norm2(x)
            return x + self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(h)))))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, src_mask)[0]))
        h = self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))
        return self.norm2(x + h)
"""),
        (T_LAYER,),
        "**kwargs",
        mistake="mask-ignored",
    ),
    Variant(
        "layer_inverts_mask",
        LAYER,
        _layer_with().replace(
            "self.self_attn(x, x, x, mask)",
            "self.self_attn(x, x, x, None if mask is None else ~mask)",
        ),
        (T_LAYER,),
        "inverts the mask",
        mistake="mask-inverted",
    ),
    Variant(
        "layer_dropout_in_eval",
        LAYER,
        _layer_with().replace("self.dropout1(out)", "F.dropout(out, 0.5)"),
        (T_LAYER,),
        "eval mode",
        mistake="dropout-in-eval",
    ),
    # F.dropout(x, p) without training=self.training: the layer's own p, still dropping in eval.
    Variant(
        "layer_functional_dropout_on_attention",
        LAYER,
        _layer_with().replace("self.dropout1(out)", "F.dropout(out, self.dropout1.p)"),
        (T_LAYER,),
        "still active in eval mode (on the attention output (self.dropout1), p=0.1)",
        mistake="dropout-in-eval",
    ),
    Variant(
        "layer_functional_dropout_on_hidden",
        LAYER,
        _layer_with().replace(
            "self.dropout(self.activation(self.linear1(x)))",
            "F.dropout(self.activation(self.linear1(x)), self.dropout.p)",
        ),
        (T_LAYER,),
        "still active in eval mode (on the FFN's hidden units (self.dropout), p=0.1)",
        mistake="dropout-in-eval",
    ),
    Variant(
        "layer_functional_dropout_on_ffn_output",
        LAYER,
        _layer_with().replace(
            "self.dropout2(self.linear2(", "F.dropout(p=self.dropout2.p, input=self.linear2("
        ),
        (T_LAYER,),
        "still active in eval mode (on the FFN output (self.dropout2), p=0.1)",
        mistake="dropout-in-eval",
    ),
    Variant(
        "layer_tuple_not_unpacked",
        LAYER,
        _layer_with().replace("out, _ = self.self_attn", "out = self.self_attn"),
        (T_LAYER,),
        "unpack",
        mistake="attention-pair-not-unpacked",
    ),
    Variant(
        "layer_prenorm_residual_of_normalised_x",
        LAYER,
        _layer_with(
            pre="""            x = self.norm1(x)
            x = x + self.sa(x, mask)
            x = self.norm2(x)
            x = x + self.ff(x)"""
        ),
        (T_LAYER,),
        "un-normalised",
        mistake="normalised-skip",
    ),
    Variant(
        "layer_detaches",
        LAYER,
        _layer_with(extra="").replace("return x\n", "return x.detach()\n", 1),
        (T_LAYER,),
        "gradient",
        mistake="no-grad",
    ),
    Variant(
        "layer_no_dropout",
        LAYER,
        _layer_with()
        .replace("return self.dropout1(out)", "return out")
        .replace("self.dropout2(self.linear2(self.dropout(", "(self.linear2((")
        .replace("self.dropout2(self.linear2(", "(self.linear2("),
        (T_LAYER,),
        "no dropout",
        mistake="dropout-missing",
    ),
    Variant(
        "layer_dropout_after_norm",
        LAYER,
        _layer_with(
            post="""            x = self.dropout1(self.norm1(x + self.self_attn(x, x, x, mask)[0]))
            h = self.dropout(self.activation(self.linear1(x)))
            x = self.dropout2(self.norm2(x + self.linear2(h)))"""
        ),
        (T_LAYER,),
        "after the norm",
        mistake="dropout-after-norm",
    ),
    Variant(
        "layer_no_dropout2",
        LAYER,
        _layer_with().replace("return self.dropout2(self.linear2(", "return (self.linear2("),
        (T_LAYER,),
        "no dropout on the FFN output (self.dropout2)",
        mistake="dropout-missing-at-one-site",
    ),
    Variant(
        "layer_no_hidden_dropout",
        LAYER,
        _layer_with().replace(
            "self.linear2(self.dropout(self.activation(", "self.linear2((self.activation("
        ),
        (T_LAYER,),
        "no dropout on the FFN's hidden units",
        mistake="dropout-missing-at-one-site",
    ),
    Variant(
        "layer_dropout_on_attention_input",
        LAYER,
        _layer_with().replace(
            "        out, _ = self.self_attn(x, x, x, mask)\n        return self.dropout1(out)",
            "        x = self.dropout1(x)\n        out, _ = self.self_attn(x, x, x, mask)\n"
            "        return out",
        ),
        (T_LAYER,),
        "attention sub-layer (self.dropout1): it is applied to the sub-layer's input",
        mistake="dropout-on-sublayer-input",
    ),
    Variant(
        "layer_dropout_on_residual_sum",
        LAYER,
        _layer_with(
            post="""            x = self.norm1(self.dropout1(x + self.self_attn(x, x, x, mask)[0]))
            h = self.dropout(self.activation(self.linear1(x)))
            x = self.norm2(self.dropout2(x + self.linear2(h)))"""
        ),
        (T_LAYER,),
        "residual sum",
        mistake="dropout-on-residual-sum",
    ),
    Variant(
        "layer_prenorm_without_dropout",
        LAYER,
        _layer_with(
            pre="""            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, mask)[0]
            h = self.norm2(x)
            x = x + self.linear2(self.activation(self.linear1(h)))"""
        ),
        (T_LAYER,),
        "dropout is missing in training",
        mistake="dropout-missing",
    ),
    Variant(  # no catalogue entry: named by where it goes wrong (grading/locate.py)
        "layer_norm1_for_both_sublayers",
        LAYER,
        _layer_with().replace("self.norm2(", "self.norm1("),
        (T_LAYER,),
        "self.norm2 is never called, while self.norm1 is called twice",
        mistake="part-never-called",
    ),
]

_LAYER_CORRECT = [
    Variant(
        "layer_two_branches",
        LAYER,
        _layer_with(),
    ),
    Variant(
        "layer_inline_keyword_mask",
        LAYER,
        _layer("""    def forward(self, x, mask=None):
        def ffn(h):
            h = self.dropout(self.activation(self.linear1(h)))  # (B, L, d_ff)
            return self.dropout2(self.linear2(h))

        if not self.norm_first:
            attn, _weights = self.self_attn(x, x, x, mask=mask)
            x = self.norm1(x + self.dropout1(attn))
            return self.norm2(x + ffn(x))
        h = self.norm1(x)
        attn, _weights = self.self_attn(query=h, key=h, value=h, mask=mask, need_weights=True)
        x = x + self.dropout1(attn)
        return x + ffn(self.norm2(x))
"""),
    ),
    Variant(
        "layer_relu_module_and_torch_relu",
        LAYER,
        _layer("""    def forward(self, x, mask=None):
        residual = x
        if self.norm_first:
            x = self.norm1(x)
        x = residual + self.dropout1(self.self_attn(x, x, x, mask)[0])
        if not self.norm_first:
            x = self.norm1(x)
        residual = x
        if self.norm_first:
            x = self.norm2(x)
        x = residual + self.dropout2(self.linear2(self.dropout(torch.relu(self.linear1(x)))))
        if not self.norm_first:
            x = self.norm2(x)
        return x
"""),
    ),
    Variant(
        "layer_functional_dropout",
        LAYER,
        _layer("""    def forward(self, x, mask=None):
        def drop(t):
            return F.dropout(t, self.dropout.p, training=self.training)

        def sa(h):
            return drop(self.self_attn(h, h, h, mask, need_weights=False)[0])

        def ff(h):
            return drop(self.linear2(drop(self.activation(self.linear1(h)))))

        if self.norm_first:
            x = x + sa(self.norm1(x))
            return x + ff(self.norm2(x))
        x = self.norm1(x + sa(x))
        return self.norm2(x + ff(x))
"""),
    ),
    Variant(
        "layer_one_dropout_module_for_all",
        LAYER,
        _layer_with()
        .replace("self.dropout1(out)", "self.dropout(out)")
        .replace("self.dropout2(", "self.dropout("),
    ),
]

# --- (d) the full encoder ------------------------------------------------------------------------

_FORWARD = """    def forward(self, token_ids):
        B, L = token_ids.shape
        x = self.embedding(token_ids)
        x = self.dropout(x + self.pe[:L])
        mask = make_padding_mask(token_ids, self.pad_id)
        for layer in self.layers:
            x = layer(x, mask=mask)
        return x
"""

_ENCODER_BUGGY = [
    Variant(
        "encoder_no_positional_encoding",
        ENCODER,
        _encoder(_FORWARD.replace("x + self.pe[:L]", "x")),
        (T_ENCODER,),
        "no positional encoding",
        mistake="no-positional-encoding",
    ),
    Variant(
        "encoder_pe_indexed_by_batch",
        ENCODER,
        _encoder(
            _FORWARD.replace(
                "x = self.dropout(x + self.pe[:L])",
                "pe = self.pe.unsqueeze(0).transpose(0, 1)  # (max_len, 1, D)\n"
                "        x = self.dropout(x + pe[: x.size(0)])",
            )
        ),
        (T_ENCODER,),
        "batch size",
        mistake="pe-indexed-by-batch",
    ),
    Variant(
        "encoder_sequence_first_pe",
        ENCODER,
        _encoder(
            _FORWARD.replace(
                "x = self.dropout(x + self.pe[:L])",
                "x = self.dropout(x + self.pe[:L].unsqueeze(1))  # (L, 1, D)",
            )
        ),
        (T_ENCODER,),
        "sequence-first",
        mistake="pe-sequence-first",
    ),
    Variant(
        "encoder_scales_twice",
        ENCODER,
        _encoder(
            _FORWARD.replace(
                "x = self.embedding(token_ids)",
                "x = self.embedding(token_ids) * math.sqrt(self.pe.shape[1])",
            )
        ),
        (T_ENCODER,),
        "second time",
        mistake="embeddings-scaled-twice",
    ),
    Variant(
        "encoder_not_scaled",
        ENCODER,
        _encoder(
            _FORWARD.replace(
                "x = self.embedding(token_ids)", "x = self.embedding.embedding(token_ids)"
            )
        ),
        (T_ENCODER,),
        "not scaled",
        mistake="embeddings-not-scaled",
    ),
    Variant(
        "encoder_ignores_mask",
        ENCODER,
        _encoder(_FORWARD.replace("x = layer(x, mask=mask)", "x = layer(x)")),
        (T_ENCODER,),
        "without a padding mask",
        mistake="no-mask-to-layers",
    ),
    Variant(
        "encoder_misspelt_mask_keyword",
        ENCODER,
        _encoder(_FORWARD.replace("x = layer(x, mask=mask)", "x = layer(x, src_mask=mask)")),
        (T_ENCODER,),
        "misspelt keyword",
        mistake="misspelt-mask-keyword",
    ),
    Variant(
        "encoder_reversed_mask",
        ENCODER,
        _encoder(_FORWARD.replace("x = layer(x, mask=mask)", "x = layer(x, mask=~mask)")),
        (T_ENCODER,),
        "wrong polarity",
        mistake="mask-reversed",
    ),
    Variant(
        "encoder_mask_b_l",
        ENCODER,
        _encoder(
            _FORWARD.replace(
                "mask = make_padding_mask(token_ids, self.pad_id)",
                "mask = token_ids != self.pad_id",
            )
        ),
        (T_ENCODER,),
        "(B, L)",
        mistake="mask-shape-b-l",
    ),
    Variant(
        "encoder_no_dropout",
        ENCODER,
        _encoder(_FORWARD.replace("x = self.dropout(x + self.pe[:L])", "x = x + self.pe[:L]")),
        (T_ENCODER,),
        "never applied",
        mistake="dropout-missing",
    ),
    Variant(
        "encoder_dropout_before_pe",
        ENCODER,
        _encoder(
            _FORWARD.replace(
                "x = self.dropout(x + self.pe[:L])", "x = self.dropout(x) + self.pe[:L]"
            )
        ),
        (T_ENCODER,),
        "wrong place",
        mistake="dropout-on-embeddings-only",
    ),
    Variant(
        "encoder_discards_layer_outputs",
        ENCODER,
        _encoder(_FORWARD.replace("x = layer(x, mask=mask)", "out = layer(x, mask=mask)")),
        (T_ENCODER,),
        "discards",
        mistake="layer-outputs-discarded",
    ),
    Variant(
        "encoder_only_first_layer",
        ENCODER,
        _encoder(
            _FORWARD.replace(
                "for layer in self.layers:\n            x = layer(x, mask=mask)",
                "for _ in self.layers:\n            x = self.layers[0](x, mask=mask)",
            )
        ),
        (T_ENCODER,),
        "order",
        mistake="layers-out-of-order",
    ),
    Variant(
        "encoder_dropout_on_pe_only",
        ENCODER,
        _encoder(
            _FORWARD.replace(
                "x = self.dropout(x + self.pe[:L])", "x = x + self.dropout(self.pe[:L])"
            )
        ),
        (T_ENCODER,),
        "positional encoding only",
        mistake="dropout-on-pe-only",
    ),
    Variant(
        "encoder_dropout_twice",
        ENCODER,
        _encoder(
            _FORWARD.replace(
                "x = self.dropout(x + self.pe[:L])",
                "x = self.dropout(self.dropout(x + self.pe[:L]))",
            )
        ),
        (T_ENCODER,),
        "twice",
        mistake="dropout-twice",
    ),
    Variant(
        "encoder_dropout_between_layers",
        ENCODER,
        _encoder(
            _FORWARD.replace("x = layer(x, mask=mask)", "x = self.dropout(layer(x, mask=mask))")
        ),
        (T_ENCODER,),
        "between the layers",
        mistake="dropout-between-layers",
    ),
    Variant(
        "encoder_dropout_on_output",
        ENCODER,
        _encoder(
            _FORWARD.replace("x = self.dropout(x + self.pe[:L])", "x = x + self.pe[:L]").replace(
                "        return x\n", "        return self.dropout(x)\n"
            )
        ),
        (T_ENCODER,),
        "output of the last layer",
        mistake="dropout-on-output",
    ),
    Variant(
        "encoder_functional_dropout_in_eval",
        ENCODER,
        _encoder(
            _FORWARD.replace(
                "x = self.dropout(x + self.pe[:L])",
                "x = F.dropout(x + self.pe[:L], self.dropout.p)",
            )
        ),
        (T_ENCODER,),
        "still active in eval mode",
        mistake="dropout-in-eval",
    ),
    Variant(
        "encoder_pe_float64",
        ENCODER,
        _encoder(
            _FORWARD.replace(
                "x = self.dropout(x + self.pe[:L])",
                "x = self.dropout(x + self.pe[:L].double())  # more precise",
            )
        ),
        (T_ENCODER,),
        "dtype torch.float64",
        mistake="dtype",
    ),
]

_ENCODER_CORRECT = [
    Variant(
        "encoder_library_mask_and_unsqueeze",
        ENCODER,
        _encoder("""    def forward(self, token_ids):
        L = token_ids.size(1)
        positions = self.pe[:L].unsqueeze(0)  # (1, L, D)
        x = self.dropout(self.embedding(token_ids) + positions)
        mask = encoder_lib.padding_mask(token_ids, self.pad_id)
        for layer in self.layers:
            x = layer(x, mask)
        return x
"""),
    ),
    Variant(
        "encoder_own_table_and_index_mask",
        ENCODER,
        _encoder("""    def forward(self, token_ids):
        B, L = token_ids.shape
        D = self.pe.shape[1]
        pe = sinusoidal_positional_encoding(L, D).to(self.pe)  # the student's own table
        x = self.embedding(token_ids) + pe[None, :, :]
        x = self.dropout(x)
        keep = (token_ids != self.pad_id)[:, None, None, :]
        for i in range(len(self.layers)):
            x = self.layers[i](x, mask=keep)
        return x
"""),
    ),
    Variant(
        "encoder_functional_dropout",
        ENCODER,
        _encoder(
            _FORWARD.replace(
                "x = self.dropout(x + self.pe[:L])",
                "x = F.dropout(x + self.pe[:L], self.dropout.p, training=self.training)",
            )
        ),
    ),
]

# --- answers that delegate to the built-ins each exercise forbids ---------------------------------

_FORBIDDEN = [
    Variant(
        "calls_sinusoidal_table",
        PE,
        _pe("    return encoder_lib.sinusoidal_table(max_len, d_model)\n"),
        (T_PE,),
        "encoder_lib.embeddings.sinusoidal_table",
        mistake="forbidden-built-in",
    ),
    Variant(
        "uses_sinusoidal_module",
        PE,
        _pe(
            "    module = encoder_lib.SinusoidalPositionalEncoding(d_model, max_len)\n"
            "    return module(torch.zeros(1, max_len, d_model))[0]\n"
        ),
        (T_PE,),
        "encoder_lib.embeddings.SinusoidalPositionalEncoding",
        mistake="forbidden-built-in",
    ),
    Variant(
        "calls_padding_mask",
        MASK,
        _mask("    return encoder_lib.padding_mask(token_ids, pad_id)\n"),
        (T_MASK,),
        "encoder_lib.masks.padding_mask",
        mistake="forbidden-built-in",
    ),
    Variant(
        "module_wraps_library_layer",
        LAYER,
        _layer("""    def forward(self, x, mask=None):
        D, d_ff = self.linear1.in_features, self.linear1.out_features
        ref = encoder_lib.EncoderLayer(
            D, self.self_attn.num_heads, d_ff, self.dropout.p, norm_first=self.norm_first
        ).to(x)
        ref.load_state_dict(self.state_dict())
        return ref.train(self.training)(x, mask)
"""),
        (T_LAYER,),
        "encoder_lib.encoder.EncoderLayer",
        mistake="forbidden-built-in",
    ),
    Variant(
        "module_wraps_torch_layer",
        LAYER,
        _layer("""    def forward(self, x, mask=None):
        D, d_ff = self.linear1.in_features, self.linear1.out_features
        theirs = nn.TransformerEncoderLayer(
            D, self.self_attn.num_heads, d_ff, self.dropout.p,
            batch_first=True, norm_first=self.norm_first,
        ).to(x)
        theirs.load_state_dict(self.state_dict())
        theirs.train(self.training)
        ignore = None if mask is None else ~mask[:, 0, 0, :]
        return theirs(x, src_key_padding_mask=ignore)
"""),
        (T_LAYER,),
        "F.multi_head_attention_forward",
        mistake="forbidden-built-in",
    ),
    Variant(
        "calls_multi_head_attention_forward",
        LAYER,
        _layer("""    def forward(self, x, mask=None):
        attn = self.self_attn
        seq_first = x.transpose(0, 1)  # (L, B, D)
        ignore = None if mask is None else ~mask[:, 0, 0, :]
        out, _ = F.multi_head_attention_forward(
            seq_first, seq_first, seq_first, attn.embed_dim, attn.num_heads,
            attn.in_proj_weight, attn.in_proj_bias, None, None, False, 0.0,
            attn.out_proj.weight, attn.out_proj.bias, training=self.training,
            key_padding_mask=ignore, need_weights=False,
        )
        x = self.norm1(x + self.dropout1(out.transpose(0, 1)))
        h = self.dropout(self.activation(self.linear1(x)))
        return self.norm2(x + self.dropout2(self.linear2(h)))
"""),
        (T_LAYER,),
        "F.multi_head_attention_forward",
        mistake="forbidden-built-in",
    ),
    Variant(
        "calls_fused_layer_kernel",
        LAYER,
        _layer("""    def forward(self, x, mask=None):
        a = self.self_attn
        return torch._transformer_encoder_layer_fwd(
            x, a.embed_dim, a.num_heads, a.in_proj_weight, a.in_proj_bias,
            a.out_proj.weight, a.out_proj.bias, False, self.norm_first, self.norm1.eps,
            self.norm1.weight, self.norm1.bias, self.norm2.weight, self.norm2.bias,
            self.linear1.weight, self.linear1.bias, self.linear2.weight, self.linear2.bias,
            None if mask is None else ~mask[:, 0, 0, :],
        )
"""),
        (T_LAYER,),
        "torch._transformer_encoder_layer_fwd",
        mistake="forbidden-built-in",
    ),
    Variant(
        "uses_library_transformer_encoder",
        ENCODER,
        _encoder("""    def forward(self, token_ids):
        L = token_ids.shape[1]
        x = self.dropout(self.embedding(token_ids) + self.pe[:L])
        stack = encoder_lib.TransformerEncoder(self.layers[0], len(self.layers))
        stack.layers = self.layers
        return stack(x, make_padding_mask(token_ids, self.pad_id))
"""),
        (T_ENCODER,),
        "encoder_lib.encoder.TransformerEncoder",
        mistake="forbidden-built-in",
    ),
    Variant(
        "uses_sentence_encoder",
        ENCODER,
        _encoder("""    def forward(self, token_ids):
        L = token_ids.shape[1]
        reference = encoder_lib.SentenceEncoder(config=encoder_lib.EncoderConfig(
            d_model=self.pe.shape[1], num_heads=2, d_ff=16, num_layers=len(self.layers),
            max_sequence_length=L,
        ))
        return reference(token_ids)
"""),
        (T_ENCODER,),
        "encoder_lib.model.SentenceEncoder",
        mistake="forbidden-built-in",
    ),
]

BUGGY = _PE_BUGGY + _MASK_BUGGY + _LAYER_BUGGY + _ENCODER_BUGGY + _FORBIDDEN
CORRECT = _PE_CORRECT + _MASK_CORRECT + _LAYER_CORRECT + _ENCODER_CORRECT

# --- answers that make the rest of the catalogue (tests/grading/checks/test_catalogue.py) -------

BUGGY += [
    Variant(
        "layer_no_attention_residual",
        LAYER,
        _layer_with(
            post="""            x = self.norm1(self.sa(x, mask))
            x = self.norm2(x + self.ff(x))"""
        ),
        (T_LAYER,),
        "residual (skip) connection around the self-attention",
        mistake="no-residual-around-attention",
    ),
]
