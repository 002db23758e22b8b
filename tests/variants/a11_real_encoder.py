"""Answers to notebook 11 (a real encoder: all-MiniLM-L6-v2 in the course's modules) as students
write them: ``BUGGY`` ones, each with the test cells it must fail and the words that name its
mistake, and ``CORRECT`` ones written differently from the solution. See ``variants/__init__.py``
for what the fields mean.

``tokenize`` calls the student's ``wordpiece``: a wordpiece mistake that the text of tokenize's
cases reaches costs both cells, and tokenize's message says that it lives in wordpiece.
"""

from __future__ import annotations

from variants import Variant

WP, TOK, EMB = "answer_wordpiece", "answer_tokenize", "answer_bert_embeddings"
LAYER, POOL, LOSS = "answer_load_bert_layer", "answer_sentence_embedding", "answer_contrastive_loss"
T_WP, T_TOK, T_EMB = "test_wordpiece", "test_tokenize", "test_bert_embeddings"
T_LAYER, T_POOL, T_LOSS = "test_load_bert_layer", "test_sentence_embedding", "test_contrastive_loss"
IN_WORDPIECE = ((T_TOK, "comes from your wordpiece"),)


# --- exercise 1: wordpiece -----------------------------------------------------------------------


def _wp(
    body: str | None = None,
    *,
    limit: str = "    if len(word) > max_chars:\n        return [unk]\n",
    ends: str = "range(len(word), start, -1)",
    piece: str = 'word[start:end] if start == 0 else "##" + word[start:end]',
    keep: str = "piece",
    fail: str = "            return [unk]\n",
) -> str:
    """An exercise-1 cell: the solution's loop with one part replaced (or ``body`` whole)."""
    body = body or (
        f"{limit}"
        "    pieces, start = [], 0\n"
        "    while start < len(word):\n"
        f"        for end in {ends}:\n"
        f"            piece = {piece}\n"
        "            if piece in vocab:\n"
        f"                pieces.append({keep})\n"
        "                start = end\n"
        "                break\n"
        "        else:\n"
        f"{fail}"
        "    return pieces\n"
    )
    return 'def wordpiece(word, vocab, unk="[UNK]", max_chars=100):\n' + body


def _wp_bug(name: str, says: str, fails=(T_WP,), also=(), **parts: str) -> Variant:
    return Variant(name, WP, _wp(**parts), tuple(fails), says, tuple(also))


_BOTH = (T_WP, T_TOK)

BUGGY_WORDPIECE = [
    _wp_bug(
        "shortest_match_first",
        "shortest piece",
        _BOTH,
        IN_WORDPIECE,
        ends="range(start + 1, len(word) + 1)",
    ),
    _wp_bug(
        "no_hash_prefix",
        "never puts ## before a piece",
        _BOTH,
        IN_WORDPIECE,
        piece="word[start:end]",
    ),
    _wp_bug(
        "hash_on_first_piece",
        "## before the first piece too",
        _BOTH,
        IN_WORDPIECE,
        piece='"##" + word[start:end]',
    ),
    _wp_bug(
        "hash_looked_up_not_returned",
        "returns them without it",
        _BOTH,
        IN_WORDPIECE,
        keep="word[start:end]",
    ),
    _wp_bug(
        "partial_word_then_unk",
        "BERT gives up on the whole word",
        _BOTH,
        IN_WORDPIECE,
        fail="            pieces.append(unk)\n            return pieces\n",
    ),
    _wp_bug(
        "partial_word_kept",
        "BERT gives up on the whole word",
        _BOTH,
        IN_WORDPIECE,
        fail="            return pieces\n",
    ),
    Variant(
        "unk_per_character",
        WP,
        _wp(
            "    if len(word) > max_chars:\n        return [unk]\n"
            "    pieces, start = [], 0\n"
            "    while start < len(word):\n"
            "        end = len(word)\n"
            "        while end > start:\n"
            '            piece = word[start:end] if start == 0 else "##" + word[start:end]\n'
            "            if piece in vocab:\n"
            "                break\n"
            "            end -= 1\n"
            "        if end == start:  # nothing here: skip the character\n"
            "            pieces.append(unk)\n"
            "            start += 1\n"
            "        else:\n"
            "            pieces.append(piece)\n"
            "            start = end\n"
            "    return pieces\n"
        ),
        _BOTH,
        "adds [unk] for that character",
        IN_WORDPIECE,
        mistake="partial-word-kept",
    ),
    _wp_bug("max_chars_ignored", "longer than max_chars", limit=""),
    _wp_bug(
        "max_chars_off_by_one",
        "off by one",
        limit="    if len(word) >= max_chars:\n        return [unk]\n",
    ),
    _wp_bug(
        "max_chars_plus_one",
        "off by one",
        limit="    if len(word) > max_chars + 1:\n        return [unk]\n",
    ),
    _wp_bug(
        "max_chars_fixed_100",
        "ignores the max_chars argument",
        limit="    if len(word) > 100:\n        return [unk]\n",
    ),
    _wp_bug(
        "unk_hard_coded",
        "where the unk argument says another token",
        limit='    if len(word) > max_chars:\n        return ["[UNK]"]\n',
        fail='            return ["[UNK]"]\n',
    ),
    _wp_bug(
        "unk_not_in_a_list",
        "a list of one token",
        _BOTH,
        (),
        limit="    if len(word) > max_chars:\n        return unk\n",
        fail="            return unk\n",
    ),
    Variant(
        "returns_a_tuple",
        WP,
        _wp().replace("    return pieces\n", "    return tuple(pieces)\n"),
        (T_WP,),
        "returns a list of strings",
        mistake="not-a-list",
    ),
    Variant(
        "calls_encoder_lib_wordpiece",
        WP,
        'def wordpiece(word, vocab, unk="[UNK]", max_chars=100):\n'
        "    return encoder_lib.wordpiece(word, vocab, unk, max_chars)\n",
        (T_WP,),
        "encoder_lib.wordpiece",
        mistake="forbidden-built-in",
    ),
    Variant(
        "uses_wordpiece_tokenizer",
        WP,
        "from encoder_lib import WordPieceTokenizer\n\n\n"
        'def wordpiece(word, vocab, unk="[UNK]", max_chars=100):\n'
        '    tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *vocab])\n'
        "    return tokenizer.tokenize(word)\n",
        _BOTH,  # tokenize calls it, and the class is forbidden there too
        "encoder_lib.WordPieceTokenizer",
        mistake="forbidden-built-in",
    ),
]

CORRECT_WORDPIECE = [
    Variant(
        "recursive",
        WP,
        'def wordpiece(word, vocab, unk="[UNK]", max_chars=100):\n'
        "    if len(word) > max_chars:\n"
        "        return [unk]\n\n"
        "    def rest(start):\n"
        "        if start == len(word):\n"
        "            return []\n"
        "        for end in range(len(word), start, -1):\n"
        '            piece = ("##" if start else "") + word[start:end]\n'
        "            if piece in vocab:\n"
        "                later = rest(end)\n"
        "                return None if later is None else [piece] + later\n"
        "        return None\n\n"
        "    pieces = rest(0)\n"
        "    return [unk] if pieces is None else pieces\n",
    ),
    Variant(
        "while_loops",
        WP,
        'def wordpiece(word, vocab, unk="[UNK]", max_chars=100):\n'
        "    if len(word) > max_chars:\n"
        "        return [unk]\n"
        "    tokens = []\n"
        "    start = 0\n"
        "    while start < len(word):\n"
        "        end = len(word)\n"
        "        found = None\n"
        "        while start < end:\n"
        "            candidate = word[start:end]\n"
        "            if start > 0:\n"
        '                candidate = "##" + candidate\n'
        "            if candidate in vocab:\n"
        "                found = candidate\n"
        "                break\n"
        "            end -= 1\n"
        "        if found is None:\n"
        "            return [unk]\n"
        "        tokens.append(found)\n"
        "        start = end\n"
        "    return tokens\n",
    ),
    Variant(
        "vocab_as_a_set_and_prefixes_first",
        WP,
        'def wordpiece(word, vocab, unk="[UNK]", max_chars=100):\n'
        "    known = set(vocab)\n"
        "    if len(word) > max_chars:\n"
        "        return [unk]\n"
        "    out, i = [], 0\n"
        "    while i < len(word):\n"
        '        prefix = "##" if out else ""\n'
        "        matches = [\n"
        "            j for j in range(i + 1, len(word) + 1) if prefix + word[i:j] in known\n"
        "        ]\n"
        "        if not matches:\n"
        "            return [unk]\n"
        "        j = max(matches)\n"
        "        out.append(prefix + word[i:j])\n"
        "        i = j\n"
        "    return out\n",
    ),
]


# --- exercise 2: tokenize ------------------------------------------------------------------------


_EXTEND = "        tokens.extend(wordpiece(word, vocab))\n"


def _tok(
    word_line: str, loop: str = "    for word in split_words(text):\n", add: str = _EXTEND
) -> str:
    """An exercise-2 cell: each word of ``loop`` turned into ``word`` by ``word_line``."""
    return (
        "def tokenize(text, vocab):\n    tokens = []\n"
        + loop
        + word_line
        + add
        + "    return tokens\n"
    )


_STRIP = (
    '        word = unicodedata.normalize("NFD", word)\n'
    '        word = "".join(c for c in word if unicodedata.category(c) != "Mn")\n'
)


def _tok_bug(name: str, says: str, word_line: str, **parts: str) -> Variant:
    return Variant(name, TOK, _tok(word_line, **parts), (T_TOK,), says)


BUGGY_TOKENIZE = [
    _tok_bug("no_lowercasing", "does not lowercase", _STRIP),
    _tok_bug("no_accent_stripping", "does not strip the accents", "        word = word.lower()\n"),
    _tok_bug(
        "nfd_keeps_the_marks",
        "keeps the combining marks",
        '        word = unicodedata.normalize("NFD", word.lower())\n',
    ),
    _tok_bug(
        "marks_dropped_without_nfd",
        "without decomposing first",
        '        word = "".join(c for c in word.lower() if unicodedata.category(c) != "Mn")\n',
    ),
    _tok_bug("no_normalisation", "neither lowercases", ""),
    _tok_bug("casefold", "casefold()", "        word = word.casefold()\n" + _STRIP),
    _tok_bug(
        "ascii_ignore",
        "not ASCII",
        '        word = unicodedata.normalize("NFD", word.lower())\n'
        '        word = word.encode("ascii", "ignore").decode()\n',
    ),
    _tok_bug(
        "splits_on_whitespace",
        "splits the text on whitespace only",
        "        word = word.lower()\n" + _STRIP,
        loop="    for word in text.split():\n",
    ),
    _tok_bug(
        "appends_a_list_per_word",
        "one list of pieces per word",
        "        word = word.lower()\n" + _STRIP,
        add="        tokens.append(wordpiece(word, vocab))\n",
    ),
    Variant(
        "uses_encoder_lib_normalize",
        TOK,
        "from encoder_lib.wordpiece import normalize\n\n\n"
        "def tokenize(text, vocab):\n"
        "    return [p for w in split_words(text) for p in wordpiece(normalize(w), vocab)]\n",
        (T_TOK,),
        "encoder_lib.wordpiece.normalize",
        mistake="forbidden-built-in",
    ),
    Variant(
        "uses_the_library_tokenizer",
        TOK,
        "def tokenize(text, vocab):\n"
        '    tokenizer = encoder_lib.WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", '
        "*vocab])\n"
        "    return tokenizer.tokenize(text)\n",
        (T_TOK,),
        "encoder_lib.WordPieceTokenizer",
        mistake="forbidden-built-in",
    ),
]

CORRECT_TOKENIZE = [
    Variant(
        "normalise_the_text_then_split",
        TOK,
        "def tokenize(text, vocab):\n"
        '    text = unicodedata.normalize("NFD", text.lower())\n'
        '    text = "".join(c for c in text if unicodedata.category(c) != "Mn")\n'
        "    return [piece for word in split_words(text) for piece in wordpiece(word, vocab)]\n",
    ),
    Variant(
        "strip_then_lowercase",
        TOK,
        "import unicodedata as ud\n\n\n"
        "def strip_accents(word):\n"
        '    return "".join(c for c in ud.normalize("NFD", word) if ud.category(c) != "Mn")\n\n\n'
        "def tokenize(text, vocab):\n"
        "    tokens = []\n"
        "    for word in split_words(text):\n"
        "        tokens += wordpiece(strip_accents(word).lower(), vocab)\n"
        "    return tokens\n",
    ),
]


# --- exercise 3: BertEmbeddings ------------------------------------------------------------------

_EMB_INIT = (
    "class BertEmbeddings(nn.Module):\n"
    "    def __init__(self, vocab_size, d_model, max_len=512, type_vocab_size=2, eps=1e-12):\n"
    "        super().__init__()\n"
    "        self.word_embeddings = nn.Embedding(vocab_size, d_model)\n"
    "        self.position_embeddings = nn.Embedding(max_len, d_model)\n"
    "        self.token_type_embeddings = nn.Embedding(type_vocab_size, d_model)\n"
)
_NORM = "        self.norm = nn.LayerNorm(d_model, eps=eps)\n"
_POSITIONS = "        positions = torch.arange(input_ids.shape[1])\n"
_TYPES = (
    "        if token_type_ids is None:\n            token_type_ids = torch.zeros_like(input_ids)\n"
)
_SUM = (
    "        x = (\n"
    "            self.word_embeddings(input_ids)\n"
    "            + self.position_embeddings(positions)\n"
    "            + self.token_type_embeddings(token_type_ids)\n"
    "        )\n"
)
_RETURN = "        return self.norm(x)\n"


def _emb(
    norm: str = _NORM,
    positions: str = _POSITIONS,
    types: str = _TYPES,
    total: str = _SUM,
    ret: str = _RETURN,
) -> str:
    return (
        _EMB_INIT
        + norm
        + "\n    def forward(self, input_ids, token_type_ids=None):\n"
        + positions
        + types
        + total
        + ret
    )


def _emb_bug(name: str, says: str, **parts: str) -> Variant:
    return Variant(name, EMB, _emb(**parts), (T_EMB,), says)


BUGGY_EMBEDDINGS = [
    _emb_bug(
        "no_positions",
        "leaves the position embeddings out",
        total=_SUM.replace("            + self.position_embeddings(positions)\n", ""),
    ),
    _emb_bug(
        "no_token_types",
        "leaves the token-type embeddings out",
        types="",
        total=_SUM.replace("            + self.token_type_embeddings(token_type_ids)\n", ""),
    ),
    _emb_bug(
        "types_only_when_given",
        "type 0's vector is added all the same",
        types="",
        total=(
            "        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)\n"
            "        if token_type_ids is not None:\n"
            "            x = x + self.token_type_embeddings(token_type_ids)\n"
        ),
    ),
    _emb_bug("no_layer_norm", "without the LayerNorm", ret="        return x\n"),
    _emb_bug(
        "layer_norm_default_eps",
        "default eps 1e-5",
        norm="        self.norm = nn.LayerNorm(d_model)\n",
    ),
    _emb_bug(
        "layer_norm_eps_hard_coded",
        "whatever the eps argument says",
        norm="        self.norm = nn.LayerNorm(d_model, eps=1e-12)\n",
    ),
    _emb_bug(
        "positions_from_one",
        "positions start at 1",
        positions="        positions = torch.arange(1, input_ids.shape[1] + 1)\n",
    ),
    _emb_bug(
        "input_ids_as_positions", "with the input ids", positions="        positions = input_ids\n"
    ),
    _emb_bug(
        "norm_named_like_bert",
        "create the LayerNorm as self.norm",
        norm="        self.LayerNorm = nn.LayerNorm(d_model, eps=eps)\n",
        ret="        return self.LayerNorm(x)\n",
    ),
    _emb_bug(
        "norm_without_gain_and_offset",
        "create the LayerNorm as self.norm",
        norm="        self.norm = nn.LayerNorm(d_model, eps=eps, elementwise_affine=False)\n",
    ),
    _emb_bug(
        "norm_on_the_word_embeddings",
        "normalises the word embeddings alone",
        total=(
            "        x = (\n"
            "            self.norm(self.word_embeddings(input_ids))\n"
            "            + self.position_embeddings(positions)\n"
            "            + self.token_type_embeddings(token_type_ids)\n"
            "        )\n"
        ),
        ret="        return x\n",
    ),
    Variant(
        "subclasses_encoder_lib",
        EMB,
        "class BertEmbeddings(encoder_lib.BertEmbeddings):\n    pass\n",
        (T_EMB,),
        "encoder_lib.BertEmbeddings",
        mistake="forbidden-built-in",
    ),
]

CORRECT_EMBEDDINGS = [
    Variant(
        "encoder_lib_layer_norm",
        EMB,
        _emb(norm="        self.norm = encoder_lib.LayerNorm(d_model, eps)\n"),
    ),
    Variant(
        "sliced_position_table_and_f_layer_norm",
        EMB,
        _emb(
            positions="",
            total=(
                "        L = input_ids.shape[-1]\n"
                "        x = self.word_embeddings(input_ids)\n"
                "        x = x + self.position_embeddings.weight[:L]\n"
                "        x = x + self.token_type_embeddings(token_type_ids)\n"
            ),
            ret=(
                "        n = self.norm\n"
                "        return F.layer_norm(x, x.shape[-1:], n.weight, n.bias, n.eps)\n"
            ),
        ),
    ),
    Variant(
        "positions_expanded_per_sentence",
        EMB,
        _emb(
            positions=(
                "        B, L = input_ids.shape\n"
                "        positions = torch.arange(L).unsqueeze(0).expand(B, L)\n"
            ),
            types=(
                "        types = torch.zeros(B, L, dtype=torch.long) if token_type_ids is None "
                "else token_type_ids\n"
            ),
            total=(
                "        x = self.word_embeddings(input_ids)\n"
                "        x = x + self.position_embeddings(positions)\n"
                "        x = x + self.token_type_embeddings(types)\n"
            ),
        ),
    ),
]


# --- exercise 4: load_bert_layer -----------------------------------------------------------------

_LAYER_HEAD = "def load_bert_layer(weights, prefix, num_heads):\n"
_READ = (
    "    w = {name[len(prefix) :]: t for name, t in weights.items() if name.startswith(prefix)}\n"
)
_SIZES = '    d_ff, d_model = w["intermediate.dense.weight"].shape\n'
_BUILD = (
    "    layer = encoder_lib.EncoderLayer(\n"
    '        d_model, num_heads, d_ff, dropout=0.1, activation="gelu", norm_first=False,\n'
    "        layer_norm_eps=1e-12,\n"
    "    )\n"
)
_QKV = '    qkv = ("query", "key", "value")\n'
_STATE = (
    "    state = {\n"
    '        "self_attn.in_proj_weight": '
    'torch.cat([w[f"attention.self.{p}.weight"] for p in qkv]),\n'
    '        "self_attn.in_proj_bias": torch.cat([w[f"attention.self.{p}.bias"] for p in qkv]),\n'
    '        "self_attn.out_proj.weight": w["attention.output.dense.weight"],\n'
    '        "self_attn.out_proj.bias": w["attention.output.dense.bias"],\n'
    '        "norm1.weight": w["attention.output.LayerNorm.weight"],\n'
    '        "norm1.bias": w["attention.output.LayerNorm.bias"],\n'
    '        "linear1.weight": w["intermediate.dense.weight"],\n'
    '        "linear1.bias": w["intermediate.dense.bias"],\n'
    '        "linear2.weight": w["output.dense.weight"],\n'
    '        "linear2.bias": w["output.dense.bias"],\n'
    '        "norm2.weight": w["output.LayerNorm.weight"],\n'
    '        "norm2.bias": w["output.LayerNorm.bias"],\n'
    "    }\n"
)
_LOAD = "    layer.load_state_dict(state)\n    return layer\n"


def _layer(
    read: str = _READ,
    sizes: str = _SIZES,
    build: str = _BUILD,
    qkv: str = _QKV,
    state: str = _STATE,
    load: str = _LOAD,
) -> str:
    return _LAYER_HEAD + read + sizes + build + qkv + state + load


def _layer_bug(name: str, says: str, **parts: str) -> Variant:
    return Variant(name, LAYER, _layer(**parts), (T_LAYER,), says)


BUGGY_LAYER = [
    _layer_bug(
        "key_query_value",
        "in the order key, query, value",
        qkv='    qkv = ("key", "query", "value")\n',
    ),
    _layer_bug(
        "biases_in_another_order",
        "in_proj_bias stacks the biases in the order",
        state=_STATE.replace(
            '[w[f"attention.self.{p}.bias"] for p in qkv]',
            '[w[f"attention.self.{p}.bias"] for p in ("value", "key", "query")]',
        ),
    ),
    _layer_bug(
        "attention_weights_transposed",
        "loaded transposed",
        state=_STATE.replace('.weight"] for p in qkv]', '.weight"].T for p in qkv]').replace(
            'w["attention.output.dense.weight"]', 'w["attention.output.dense.weight"].T'
        ),
    ),
    _layer_bug(
        "value_weight_transposed",
        "attention.self.value.weight is loaded transposed",
        state=_STATE.replace(
            '[w[f"attention.self.{p}.weight"] for p in qkv]',
            '[w[f"attention.self.{p}.weight"].T if p == "value" else '
            'w[f"attention.self.{p}.weight"] for p in qkv]',
        ),
    ),
    _layer_bug(
        "every_weight_transposed",
        "out features, in features",
        state=_STATE.replace('.weight"] for p in qkv]', '.weight"].T for p in qkv]').replace(
            'dense.weight"]', 'dense.weight"].T'
        ),
    ),
    _layer_bug("pre_norm", "pre-norm", build=_BUILD.replace("norm_first=False", "norm_first=True")),
    _layer_bug(
        "relu_default",
        "uses ReLU",
        build=_BUILD.replace('activation="gelu", ', ""),
    ),
    _layer_bug(
        "tanh_gelu",
        "tanh approximation",
        load=(
            "    layer.load_state_dict(state)\n"
            '    layer.activation = lambda x: F.gelu(x, approximate="tanh")\n'
            "    return layer\n"
        ),
    ),
    _layer_bug(
        "norms_swapped",
        "two LayerNorms are swapped",
        state=_STATE.replace("attention.output.LayerNorm", "TMP")
        .replace("output.LayerNorm", "attention.output.LayerNorm")
        .replace("TMP", "output.LayerNorm"),
    ),
    _layer_bug(
        "eps_default",
        "default eps 1e-5",
        build=_BUILD.replace("        layer_norm_eps=1e-12,\n", ""),
    ),
    _layer_bug(
        "d_and_d_ff_swapped",
        "(d_ff, D)",
        sizes='    d_model, d_ff = w["intermediate.dense.weight"].shape\n',
    ),
    _layer_bug(
        "prefix_ignored",
        "loads layer 0's tensors",
        read=_READ.replace("prefix", '"encoder.layer.0."'),
    ),
    _layer_bug(
        "prefix_without_its_dot",
        "is not in weights",
        read=(
            "    w = {name[len(prefix) + 1 :]: t for name, t in weights.items() "
            "if name.startswith(prefix)}\n"
        ),
    ),
    _layer_bug(
        "no_dropout", "dropout is not 0.1", build=_BUILD.replace("dropout=0.1", "dropout=0.0")
    ),
    _layer_bug("heads_hard_coded", "pass num_heads", build=_BUILD.replace("num_heads,", "12,")),
    _layer_bug(
        "returns_the_state_dict",
        "load_bert_layer returns the encoder_lib.EncoderLayer",
        load="    layer.load_state_dict(state)\n    return state\n",
    ),
    _layer_bug(
        "forgets_to_return",
        "no `return`",
        load="    layer.load_state_dict(state)\n",
    ),
    _layer_bug(
        "pytorch_layer",
        "nn.modules.transformer.TransformerEncoderLayer",
        build=(
            "    layer = nn.TransformerEncoderLayer(\n"
            '        d_model, num_heads, d_ff, dropout=0.1, activation="gelu", norm_first=False,\n'
            "        layer_norm_eps=1e-12, batch_first=True,\n"
            "    )\n"
        ),
    ),
    Variant(
        "uses_bert_layer_state",
        LAYER,
        _LAYER_HEAD
        + _READ
        + _SIZES
        + _BUILD
        + "    layer.load_state_dict(encoder_lib.minilm.bert_layer_state(weights, prefix))\n"
        "    return layer\n",
        (T_LAYER,),
        "bert_layer_state",
        mistake="forbidden-built-in",
    ),
]

CORRECT_LAYER = [
    Variant(
        "stacked_and_copied_by_hand",
        LAYER,
        _LAYER_HEAD + "    def get(name):\n"
        "        return weights[prefix + name]\n\n"
        '    D = get("attention.self.query.weight").shape[0]\n'
        '    d_ff = get("intermediate.dense.weight").shape[0]\n'
        '    layer = encoder_lib.EncoderLayer(D, num_heads, d_ff, 0.1, "gelu", False, 1e-12)\n'
        '    parts = ["query", "key", "value"]\n'
        "    with torch.no_grad():\n"
        "        layer.self_attn.in_proj_weight.copy_(\n"
        '            torch.stack([get(f"attention.self.{p}.weight") for p in parts])'
        ".reshape(3 * D, D)\n"
        "        )\n"
        "        layer.self_attn.in_proj_bias.copy_(\n"
        '            torch.stack([get(f"attention.self.{p}.bias") for p in parts]).flatten()\n'
        "        )\n"
        "        pairs = {\n"
        '            layer.self_attn.out_proj: "attention.output.dense",\n'
        '            layer.norm1: "attention.output.LayerNorm",\n'
        '            layer.linear1: "intermediate.dense",\n'
        '            layer.linear2: "output.dense",\n'
        '            layer.norm2: "output.LayerNorm",\n'
        "        }\n"
        "        for module, name in pairs.items():\n"
        '            module.weight.copy_(get(name + ".weight"))\n'
        '            module.bias.copy_(get(name + ".bias"))\n'
        "    return layer.eval()\n",
    ),
    Variant(
        "renaming_table",
        LAYER,
        _LAYER_HEAD + "    names = {\n"
        '        "attention.output.dense": "self_attn.out_proj",\n'
        '        "attention.output.LayerNorm": "norm1",\n'
        '        "intermediate.dense": "linear1",\n'
        '        "output.dense": "linear2",\n'
        '        "output.LayerNorm": "norm2",\n'
        "    }\n"
        "    state = {}\n"
        "    for theirs, ours in names.items():\n"
        '        for kind in ("weight", "bias"):\n'
        '            state[f"{ours}.{kind}"] = weights[f"{prefix}{theirs}.{kind}"]\n'
        '    for kind in ("weight", "bias"):\n'
        '        state[f"self_attn.in_proj_{kind}"] = torch.cat(\n'
        '            [weights[f"{prefix}attention.self.{p}.{kind}"]'
        ' for p in ("query", "key", "value")]\n'
        "        )\n"
        '    d_ff, d_model = state["linear1.weight"].shape\n'
        "    layer = encoder_lib.EncoderLayer(\n"
        '        d_model=d_model, num_heads=num_heads, d_ff=d_ff, dropout=0.1, activation="gelu",\n'
        "        layer_norm_eps=1e-12,\n"
        "    )\n"
        "    layer.load_state_dict(state)\n"
        "    return layer\n",
    ),
]


# --- exercise 5: sentence_embedding --------------------------------------------------------------

_POOL_HEAD = "def sentence_embedding(hidden, attention_mask):\n"


def _pool_bug(name: str, says: str, body: str) -> Variant:
    return Variant(name, POOL, _POOL_HEAD + body, (T_POOL,), says)


_KEEP = "    keep = attention_mask.to(hidden.dtype).unsqueeze(-1)\n"
_MEAN = "    mean = (hidden * keep).sum(dim=1) / keep.sum(dim=1)\n"

BUGGY_POOLING = [
    _pool_bug(
        "plain_mean",
        "padding included",
        "    mean = hidden.mean(dim=1)\n    return mean / mean.norm(dim=-1, keepdim=True)\n",
    ),
    _pool_bug(
        "normalised_before_pooling",
        "before averaging",
        "    hidden = F.normalize(hidden, dim=-1)\n" + _KEEP + _MEAN + "    return mean\n",
    ),
    _pool_bug(
        "never_normalised", "without scaling it to length 1", _KEEP + _MEAN + "    return mean\n"
    ),
    _pool_bug("cls_token", "[CLS]", "    return F.normalize(hidden[:, 0], dim=-1)\n"),
    _pool_bug(
        "max_pooling",
        "max pooling",
        "    masked = hidden.masked_fill(~attention_mask.unsqueeze(-1), float('-inf'))\n"
        "    return F.normalize(masked.max(dim=1).values, dim=-1)\n",
    ),
    _pool_bug(
        "normalised_over_the_batch",
        "over the batch axis",
        _KEEP + _MEAN + "    return F.normalize(mean, dim=0)\n",
    ),
    _pool_bug(
        "mask_reversed",
        "padding",
        "    keep = (~attention_mask).to(hidden.dtype).unsqueeze(-1)\n"
        + _MEAN
        + "    return F.normalize(mean, dim=-1)\n",
    ),
    _pool_bug(
        "mean_over_features",
        "averages over the D features",
        "    mean = (hidden * attention_mask.unsqueeze(-1)).mean(dim=-1)\n"
        "    return F.normalize(mean, dim=-1)\n",
    ),
    _pool_bug(
        "keepdim_left_on",
        "keepdim=True",
        _KEEP
        + "    mean = (hidden * keep).sum(dim=1, keepdim=True) / keep.sum(dim=1, keepdim=True)\n"
        "    return F.normalize(mean, dim=-1)\n",
    ),
    _pool_bug(
        "zeroes_the_padding_in_place",
        "changed its input in place",
        "    hidden *= attention_mask.unsqueeze(-1)\n"
        "    mean = hidden.sum(dim=1) / attention_mask.sum(dim=1, keepdim=True)\n"
        "    return F.normalize(mean, dim=-1)\n",
    ),
    _pool_bug(
        "float32",
        "dtype",
        _KEEP + _MEAN + "    return F.normalize(mean, dim=-1).float()\n",
    ),
    _pool_bug(
        "uses_encoder_lib",
        "encoder_lib.sentence_embedding",
        "    return encoder_lib.sentence_embedding(hidden, attention_mask)\n",
    ),
    _pool_bug(
        "uses_mean_pool",
        "encoder_lib.mean_pool",
        "    return F.normalize(encoder_lib.mean_pool(hidden, attention_mask), dim=-1)\n",
    ),
]

CORRECT_POOLING = [
    Variant(
        "sum_then_normalise",
        POOL,
        _POOL_HEAD + "    total = (hidden * attention_mask.unsqueeze(-1)).sum(dim=1)\n"
        "    return F.normalize(total, dim=-1)\n",
    ),
    Variant(
        "one_sentence_at_a_time",
        POOL,
        _POOL_HEAD + "    rows = [h[m].mean(dim=0) for h, m in zip(hidden, attention_mask)]\n"
        "    mean = torch.stack(rows)\n"
        "    return mean / torch.linalg.vector_norm(mean, dim=-1, keepdim=True)\n",
    ),
    Variant(
        "einsum_divided_by_padded_length",
        POOL,
        _POOL_HEAD
        + "    total = torch.einsum('bld,bl->bd', hidden, attention_mask.to(hidden.dtype))\n"
        "    mean = total / hidden.shape[1]  # any factor of a row: normalising removes it\n"
        "    return mean / mean.norm(dim=1, keepdim=True)\n",
    ),
]


# --- exercise 6: contrastive_loss ----------------------------------------------------------------

_LOSS_HEAD = "def contrastive_loss(queries, documents, scale=20.0):\n"
_TARGETS = "    targets = torch.arange(queries.shape[0])\n"


def _loss_bug(name: str, says: str, body: str) -> Variant:
    return Variant(name, LOSS, _LOSS_HEAD + body, (T_LOSS,), says)


BUGGY_LOSS = [
    _loss_bug(
        "no_scale",
        "leaves the scale out",
        "    scores = queries @ documents.T\n"
        + _TARGETS
        + "    return F.cross_entropy(scores, targets)\n",
    ),
    _loss_bug(
        "scale_hard_coded",
        "whatever the scale argument says",
        "    scores = 20.0 * queries @ documents.T\n"
        + _TARGETS
        + "    return F.cross_entropy(scores, targets)\n",
    ),
    _loss_bug(
        "divided_by_scale",
        "divides the similarities by scale",
        "    scores = queries @ documents.T / scale\n"
        + _TARGETS
        + "    return F.cross_entropy(scores, targets)\n",
    ),
    _loss_bug(
        "documents_times_queries",
        "documents @ queries.T",
        "    scores = scale * documents @ queries.T\n"
        "    targets = torch.arange(scores.shape[0])\n"
        "    return F.cross_entropy(scores, targets)\n",
    ),
    _loss_bug(
        "positive_left_out_of_the_denominator",
        "leaves the positive out",
        "    scores = scale * queries @ documents.T\n"
        "    N = queries.shape[0]\n"
        "    positive = scores.diagonal()\n"
        "    eye = torch.eye(N, scores.shape[1], dtype=torch.bool)\n"
        "    others = scores.masked_fill(eye, float('-inf'))\n"
        "    return (torch.logsumexp(others, dim=1) - positive).mean()\n",
    ),
    _loss_bug(
        "summed",
        "sums the N queries' losses",
        "    scores = scale * queries @ documents.T\n"
        + _TARGETS
        + "    return F.cross_entropy(scores, targets, reduction='sum')\n",
    ),
    _loss_bug(
        "targets_all_zero",
        "targets are all 0",
        "    scores = scale * queries @ documents.T\n"
        "    targets = torch.zeros(queries.shape[0], dtype=torch.long)\n"
        "    return F.cross_entropy(scores, targets)\n",
    ),
    _loss_bug(
        "one_target_per_document",
        "one per query",
        "    scores = scale * queries @ documents.T\n"
        "    targets = torch.arange(documents.shape[0])\n"
        "    return F.cross_entropy(scores, targets)\n",
    ),
    _loss_bug(
        "softmax_then_cross_entropy",
        "applies softmax before",
        "    probs = torch.softmax(scale * queries @ documents.T, dim=-1)\n"
        + _TARGETS
        + "    return F.cross_entropy(probs, targets)\n",
    ),
    _loss_bug(
        "symmetric",
        "symmetric",
        "    scores = scale * queries @ documents.T\n"
        + _TARGETS
        + "    there = F.cross_entropy(scores, targets)\n"
        + "    return (there + F.cross_entropy(scores.T, targets)) / 2\n",
    ),
    _loss_bug(
        "extra_documents_dropped",
        "only the first N",
        "    N = queries.shape[0]\n"
        "    scores = scale * queries @ documents[:N].T\n"
        + _TARGETS
        + "    return F.cross_entropy(scores, targets)\n",
    ),
    _loss_bug(
        "sign_flipped",
        "sign is flipped",
        "    log_p = torch.log_softmax(scale * queries @ documents.T, dim=-1)\n"
        "    return log_p.diagonal().mean()\n",
    ),
    _loss_bug(
        "returns_a_float",
        "should be a torch.Tensor",
        "    scores = scale * queries @ documents.T\n"
        + _TARGETS
        + "    return F.cross_entropy(scores, targets).item()\n",
    ),
    _loss_bug(
        "documents_detached",
        "no gradient reaches documents",
        "    scores = scale * queries @ documents.detach().T\n"
        + _TARGETS
        + "    return F.cross_entropy(scores, targets)\n",
    ),
    _loss_bug(
        "uses_encoder_lib",
        "encoder_lib.contrastive_loss",
        "    return encoder_lib.contrastive_loss(queries, documents, scale)\n",
    ),
]

CORRECT_LOSS = [
    Variant(
        "log_softmax_by_hand",
        LOSS,
        _LOSS_HEAD + "    scores = scale * (queries @ documents.T)\n"
        "    log_p = scores - scores.logsumexp(dim=1, keepdim=True)\n"
        "    return -log_p.diagonal().mean()\n",
    ),
    Variant(
        "cosine_similarity_again",
        LOSS,
        _LOSS_HEAD
        + "    sims = F.cosine_similarity(queries[:, None, :], documents[None, :, :], dim=-1)\n"
        "    labels = torch.arange(len(queries))\n"
        "    return F.cross_entropy(sims * scale, labels)\n",
    ),
    Variant(
        "normalised_again_and_nll",
        LOSS,
        _LOSS_HEAD + "    q, d = F.normalize(queries, dim=-1), F.normalize(documents, dim=-1)\n"
        "    log_p = F.log_softmax(scale * q @ d.T, dim=-1)\n"
        "    return F.nll_loss(log_p, torch.arange(q.shape[0]))\n",
    ),
]


BUGGY = (
    BUGGY_WORDPIECE + BUGGY_TOKENIZE + BUGGY_EMBEDDINGS + BUGGY_LAYER + BUGGY_POOLING + BUGGY_LOSS
)
CORRECT = (
    CORRECT_WORDPIECE
    + CORRECT_TOKENIZE
    + CORRECT_EMBEDDINGS
    + CORRECT_LAYER
    + CORRECT_POOLING
    + CORRECT_LOSS
)


MISTAKES = {
    ("answer_wordpiece", "shortest_match_first"): "shortest-match-first",
    ("answer_wordpiece", "no_hash_prefix"): "continuation-prefix-forgotten",
    ("answer_wordpiece", "hash_on_first_piece"): "prefix-on-first-piece",
    ("answer_wordpiece", "hash_looked_up_not_returned"): "prefix-not-returned",
    ("answer_wordpiece", "partial_word_then_unk"): "partial-word-kept",
    ("answer_wordpiece", "partial_word_kept"): "partial-word-kept",
    ("answer_wordpiece", "max_chars_ignored"): "max-chars-ignored",
    ("answer_wordpiece", "max_chars_off_by_one"): "max-chars-off-by-one",
    ("answer_wordpiece", "max_chars_plus_one"): "max-chars-off-by-one",
    ("answer_wordpiece", "max_chars_fixed_100"): "max-chars-argument-ignored",
    ("answer_wordpiece", "unk_hard_coded"): "unk-argument-ignored",
    ("answer_wordpiece", "unk_not_in_a_list"): "unk-not-in-a-list",
    ("answer_tokenize", "no_lowercasing"): "not-lowercased",
    ("answer_tokenize", "no_accent_stripping"): "accents-kept",
    ("answer_tokenize", "nfd_keeps_the_marks"): "marks-not-dropped",
    ("answer_tokenize", "marks_dropped_without_nfd"): "marks-dropped-without-nfd",
    ("answer_tokenize", "no_normalisation"): "not-normalised",
    ("answer_tokenize", "casefold"): "casefold-not-lower",
    ("answer_tokenize", "ascii_ignore"): "ascii-only",
    ("answer_tokenize", "splits_on_whitespace"): "split-on-whitespace",
    ("answer_tokenize", "appends_a_list_per_word"): "list-per-word",
    ("answer_bert_embeddings", "no_positions"): "no-positions",
    ("answer_bert_embeddings", "no_token_types"): "no-token-types",
    ("answer_bert_embeddings", "types_only_when_given"): "type-zero-not-added",
    ("answer_bert_embeddings", "no_layer_norm"): "no-layer-norm",
    ("answer_bert_embeddings", "layer_norm_default_eps"): "eps-default",
    ("answer_bert_embeddings", "layer_norm_eps_hard_coded"): "eps-argument-ignored",
    ("answer_bert_embeddings", "positions_from_one"): "positions-from-one",
    ("answer_bert_embeddings", "input_ids_as_positions"): "ids-as-positions",
    ("answer_bert_embeddings", "norm_named_like_bert"): "parameter-names",
    ("answer_bert_embeddings", "norm_without_gain_and_offset"): "parameter-names",
    ("answer_bert_embeddings", "norm_on_the_word_embeddings"): "norm-on-word-embeddings",
    ("answer_load_bert_layer", "key_query_value"): "qkv-wrong-order",
    ("answer_load_bert_layer", "biases_in_another_order"): "qkv-bias-wrong-order",
    ("answer_load_bert_layer", "attention_weights_transposed"): "weight-transposed",
    ("answer_load_bert_layer", "value_weight_transposed"): "weight-transposed",
    ("answer_load_bert_layer", "every_weight_transposed"): "shape-mismatch-on-load",
    ("answer_load_bert_layer", "pre_norm"): "pre-norm",
    ("answer_load_bert_layer", "relu_default"): "relu-not-gelu",
    ("answer_load_bert_layer", "tanh_gelu"): "tanh-gelu",
    ("answer_load_bert_layer", "norms_swapped"): "norms-swapped",
    ("answer_load_bert_layer", "eps_default"): "eps-default",
    ("answer_load_bert_layer", "d_and_d_ff_swapped"): "shape-mismatch-on-load",
    ("answer_load_bert_layer", "prefix_ignored"): "prefix-ignored",
    ("answer_load_bert_layer", "prefix_without_its_dot"): "name-not-in-weights",
    ("answer_load_bert_layer", "no_dropout"): "dropout-not-0-1",
    ("answer_load_bert_layer", "heads_hard_coded"): "num-heads-ignored",
    ("answer_load_bert_layer", "returns_the_state_dict"): "not-an-encoder-layer",
    ("answer_load_bert_layer", "forgets_to_return"): "not-an-encoder-layer",
    ("answer_load_bert_layer", "pytorch_layer"): "not-an-encoder-layer",
    ("answer_sentence_embedding", "plain_mean"): "padding-averaged",
    ("answer_sentence_embedding", "normalised_before_pooling"): "normalised-before-pooling",
    ("answer_sentence_embedding", "never_normalised"): "not-normalised",
    ("answer_sentence_embedding", "cls_token"): "cls-pooling",
    ("answer_sentence_embedding", "max_pooling"): "max-pooling",
    ("answer_sentence_embedding", "normalised_over_the_batch"): "normalised-over-batch",
    ("answer_sentence_embedding", "mask_reversed"): "padding-leaks",
    ("answer_sentence_embedding", "mean_over_features"): "pooled-over-features",
    ("answer_sentence_embedding", "keepdim_left_on"): "keepdim-left-on",
    ("answer_sentence_embedding", "zeroes_the_padding_in_place"): "in-place",
    ("answer_sentence_embedding", "float32"): "dtype",
    ("answer_sentence_embedding", "uses_encoder_lib"): "forbidden-built-in",
    ("answer_sentence_embedding", "uses_mean_pool"): "forbidden-built-in",
    ("answer_contrastive_loss", "no_scale"): "no-scale",
    ("answer_contrastive_loss", "scale_hard_coded"): "scale-argument-ignored",
    ("answer_contrastive_loss", "divided_by_scale"): "divided-by-scale",
    ("answer_contrastive_loss", "documents_times_queries"): "scores-transposed",
    (
        "answer_contrastive_loss",
        "positive_left_out_of_the_denominator",
    ): "positive-not-in-denominator",
    ("answer_contrastive_loss", "summed"): "summed-over-queries",
    ("answer_contrastive_loss", "targets_all_zero"): "targets-not-diagonal",
    ("answer_contrastive_loss", "one_target_per_document"): "targets-not-diagonal",
    ("answer_contrastive_loss", "softmax_then_cross_entropy"): "softmax-before-cross-entropy",
    ("answer_contrastive_loss", "symmetric"): "symmetric-loss",
    ("answer_contrastive_loss", "extra_documents_dropped"): "extra-documents-dropped",
    ("answer_contrastive_loss", "sign_flipped"): "sign-flipped",
    ("answer_contrastive_loss", "returns_a_float"): "not-a-tensor",
    ("answer_contrastive_loss", "documents_detached"): "gradient-missing",
    ("answer_contrastive_loss", "uses_encoder_lib"): "forbidden-built-in",
}
"""The mistake id of each buggy answer built from a table above: ``(cell, name)`` -> id
(``variants.load`` gives it to the variant)."""
