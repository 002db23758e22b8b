"""Answers to notebook 08 (masked-language-model pretraining) as students write them: ``BUGGY``
ones, each with the test cells it must fail and the words that name its mistake, and ``CORRECT``
ones written differently from the solution.

The four exercises do not depend on each other: ``MaskedLanguageModel``'s ``encode`` is given,
and ``mlm_loss`` and ``fill_mask`` take tensors. ``mask_tokens`` is random: its correct variants
draw their random numbers in other orders and other ways than the solution, and must still pass.
"""

from __future__ import annotations

from variants import Variant

MASK, MODEL, LOSS, FILL = "mask_tokens", "masked_language_model", "mlm_loss", "fill_mask"
T_MASK, T_MODEL, T_LOSS, T_FILL = (f"test_{n}" for n in (MASK, MODEL, LOSS, FILL))


def _mask(body: str) -> str:
    return (
        "def mask_tokens(token_ids, mask_id, first_word_id, vocab_size, p=0.15, generator=None):\n"
        + body
    )


_DRAWS = """    shape = token_ids.shape
    ordinary = token_ids >= first_word_id
    chosen = (torch.rand(shape, generator=generator) < p) & ordinary
    action = torch.rand(shape, generator=generator)
    random_ids = torch.randint(first_word_id, vocab_size, shape, generator=generator)
"""
_CORRUPT = """    corrupted = torch.where(chosen & (action < 0.8), mask_id, token_ids)
    corrupted = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, corrupted)
"""
_LABELS = "    labels = torch.where(chosen, token_ids, -100)\n"
_RETURN = "    return corrupted, labels\n"


def _mask_with(draws: str = _DRAWS, corrupt: str = _CORRUPT, labels: str = _LABELS) -> str:
    return _mask(draws + corrupt + labels + _RETURN)


_MASK_BUGGY = [
    Variant(
        "padding_chosen",
        MASK,
        _mask_with(draws=_DRAWS.replace("token_ids >= first_word_id", "token_ids != 0")),
        (T_MASK,),
        "special tokens (<end>, <start>)",
        mistake="special-tokens-chosen",
    ),
    Variant(
        "unknown_chosen",
        MASK,
        _mask_with(draws=_DRAWS.replace("token_ids >= first_word_id", "token_ids > 2")),
        (T_MASK,),
        "special tokens (<unk>)",
        mistake="special-tokens-chosen",
    ),
    Variant(
        "every_chosen_masked",
        MASK,
        _mask_with(corrupt="    corrupted = torch.where(chosen, mask_id, token_ids)\n"),
        (T_MASK,),
        "every chosen token becomes <mask>",
        mistake="every-chosen-masked",
    ),
    Variant(
        "no_random_replacement",
        MASK,
        _mask_with(corrupt=_CORRUPT.splitlines(keepends=True)[0]),
        (T_MASK,),
        "no chosen token is replaced by a random word",
        mistake="no-random-replacement",
    ),
    Variant(
        "nothing_kept",
        MASK,
        _mask_with(corrupt=_CORRUPT.replace("(action < 0.9)", "(action < 1.0)")),
        (T_MASK,),
        "keep their original id",
        mistake="wrong-kept-share",
    ),
    Variant(
        "labels_everywhere",
        MASK,
        _mask_with(labels="    labels = token_ids.clone()\n"),
        (T_MASK,),
        "original id at every position",
        mistake="labels-everywhere",
    ),
    Variant(
        "labels_zero",
        MASK,
        _mask_with(labels="    labels = torch.where(chosen, token_ids, 0)\n"),
        (T_MASK,),
        "0 is the id of <pad>",
        mistake="labels-zero",
    ),
    Variant(
        "labels_corrupted",
        MASK,
        _mask_with(labels="    labels = torch.where(chosen, corrupted, -100)\n"),
        (T_MASK,),
        "labels hold the corrupted ids",
        mistake="labels-corrupted",
    ),
    Variant(
        "random_special",
        MASK,
        _mask_with(draws=_DRAWS.replace("randint(first_word_id,", "randint(0,")),
        (T_MASK,),
        "outside the ordinary words",
        mistake="random-ids-outside-words",
    ),
    Variant(
        "global_generator",
        MASK,
        _mask_with(
            draws=_DRAWS.replace(
                "torch.rand(shape, generator=generator) < p", "torch.rand(shape) < p"
            )
        ),
        (T_MASK,),
        "torch's global generator",
        mistake="global-generator",
    ),
    Variant(
        "fixed_p",
        MASK,
        _mask_with(draws=_DRAWS.replace("< p)", "< 0.15)")),
        (T_MASK,),
        "with probability p = 0.5",
        mistake="wrong-choice-rate",
    ),
    Variant(
        "fixed_mask_id",
        MASK,
        _mask_with(corrupt=_CORRUPT.replace("mask_id, token_ids", "4, token_ids")),
        (T_MASK,),
        "not with mask_id",
        mistake="mask-id-hard-coded",
    ),
    Variant(
        "fixed_count",
        MASK,
        _mask_with(
            draws="""    shape = token_ids.shape
    ordinary = token_ids >= first_word_id
    scores = torch.rand(shape, generator=generator).masked_fill(~ordinary, 2.0)
    count = (ordinary.sum(dim=1) * p).round().long()  # the same share in every sentence
    chosen = scores.argsort(dim=1).argsort(dim=1) < count[:, None]
    action = torch.rand(shape, generator=generator)
    random_ids = torch.randint(first_word_id, vocab_size, shape, generator=generator)
"""
        ),
        (T_MASK,),
        "fixed count",
        mistake="fixed-count",
    ),
    Variant(
        "in_place",
        MASK,
        _mask(
            _DRAWS
            + "    labels = torch.where(chosen, token_ids, -100)\n"
            + "    token_ids[chosen & (action < 0.8)] = mask_id\n"
            + "    token_ids[chosen & (action >= 0.8) & (action < 0.9)] = "
            + "random_ids[chosen & (action >= 0.8) & (action < 0.9)]\n"
            + "    return token_ids, labels\n"
        ),
        (T_MASK,),
        "changed its input in place",
        mistake="in-place",
    ),
    Variant(
        "float_ids",
        MASK,
        _mask_with().replace(_RETURN, "    return corrupted.float(), labels\n"),
        (T_MASK,),
        "int64",
        mistake="dtype",
    ),
    Variant(
        "not_random",
        MASK,
        _mask_with(
            draws="""    shape = token_ids.shape
    ordinary = token_ids >= first_word_id
    position = torch.arange(shape[1]).expand(shape)
    chosen = (position % 7 == 3) & ordinary  # one token in seven: no randomness
    action = torch.rand(shape, generator=generator)
    random_ids = torch.randint(first_word_id, vocab_size, shape, generator=generator)
"""
        ),
        (T_MASK,),
        "every sentence gets the same share",
        mistake="fixed-count",
    ),
]

_MASK_CORRECT = [
    Variant(
        "one_uniform_for_both",
        MASK,
        _mask(
            """    u = torch.rand(token_ids.shape, generator=generator)
    chosen = (u < p) & (token_ids >= first_word_id)
    to_mask = chosen & (u < 0.8 * p)  # the chosen are uniform on [0, p): split that range
    to_random = chosen & (u >= 0.8 * p) & (u < 0.9 * p)
    random_ids = torch.randint(
        first_word_id, vocab_size, token_ids.shape, generator=generator
    )
    corrupted = token_ids.clone()
    corrupted[to_mask] = mask_id
    corrupted[to_random] = random_ids[to_random]
    labels = torch.full_like(token_ids, -100)
    labels[chosen] = token_ids[chosen]
    return corrupted, labels
"""
        ),
    ),
    Variant(
        "bernoulli_and_masked_fill",
        MASK,
        _mask(
            """    special = token_ids < first_word_id
    chosen = torch.bernoulli(torch.full(token_ids.shape, p), generator=generator).bool()
    chosen = chosen & ~special
    replace = torch.bernoulli(torch.full(token_ids.shape, 0.8), generator=generator).bool()
    randomise = torch.bernoulli(torch.full(token_ids.shape, 0.5), generator=generator).bool()
    randomise = chosen & ~replace & randomise
    words = torch.randint(first_word_id, vocab_size, token_ids.shape, generator=generator)
    out = token_ids.masked_fill(chosen & replace, mask_id)
    out = torch.where(randomise, words, out)
    return out, token_ids.masked_fill(~chosen, -100)
"""
        ),
    ),
    Variant(
        "only_draw_for_the_chosen",
        MASK,
        _mask(
            """    ids = token_ids.clone()
    labels = torch.full_like(ids, -100)
    chosen = (torch.rand(ids.shape, generator=generator) < p) & (ids >= first_word_id)
    labels[chosen] = ids[chosen]
    n = int(chosen.sum())
    action = torch.rand(n, generator=generator)
    new = ids[chosen]
    new = torch.where(action < 0.8, torch.full_like(new, mask_id), new)
    pick = (action >= 0.8) & (action < 0.9)
    new[pick] = torch.randint(first_word_id, vocab_size, (int(pick.sum()),), generator=generator)
    ids[chosen] = new
    return ids, labels
"""
        ),
    ),
]


# --- exercise 2: the MLM head --------------------------------------------------------------------

_MODEL_INIT = """class MaskedLanguageModel(nn.Module):
    def __init__(
        self,
        vocab_size,
        max_len,
        d_model=32,
        num_heads=4,
        d_ff=64,
        num_layers=2,
        dropout=0.0,
        pad_id=0,
    ):
        super().__init__()
        self.pad_id = pad_id
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        with torch.no_grad():
            self.embedding.weight.mul_(d_model**-0.5)
        self.positions = encoder_lib.LearnedPositionalEmbedding(max_len, d_model)
        layer = encoder_lib.EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first=True)
        self.encoder = encoder_lib.TransformerEncoder(
            layer, num_layers, norm=encoder_lib.LayerNorm(d_model)
        )
        self.dense = nn.Linear(d_model, d_model)
        self.norm = encoder_lib.LayerNorm(d_model)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def encode(self, token_ids):
        keep = token_ids != self.pad_id
        x = self.positions(self.embedding(token_ids))
        return self.encoder(x, keep[:, None, None, :])

"""


def _forward(body: str) -> str:
    return _MODEL_INIT + f"    def forward(self, token_ids):\n{body}"


_H = "        h = self.encode(token_ids)\n"
_X = "        x = self.norm(F.gelu(self.dense(h)))\n"

_MODEL_BUGGY = [
    Variant(
        "softmax",
        MODEL,
        _forward(
            _H + _X + "        return (x @ self.embedding.weight.T + self.bias).softmax(-1)\n"
        ),
        (T_MODEL,),
        "softmax is applied",
        mistake="softmax-applied",
    ),
    Variant(
        "log_softmax",
        MODEL,
        _forward(
            _H + _X + "        return F.log_softmax(x @ self.embedding.weight.T + self.bias, -1)\n"
        ),
        (T_MODEL,),
        "log_softmax is applied",
        mistake="log-softmax-applied",
    ),
    Variant(
        "no_transform",
        MODEL,
        _forward(_H + "        return h @ self.embedding.weight.T + self.bias\n"),
        (T_MODEL,),
        "transform is skipped",
        mistake="no-transform",
    ),
    Variant(
        "norm_before_gelu",
        MODEL,
        _forward(
            _H + "        x = F.gelu(self.norm(self.dense(h)))\n"
            "        return x @ self.embedding.weight.T + self.bias\n"
        ),
        (T_MODEL,),
        "wrong order",
        mistake="norm-before-gelu",
    ),
    Variant(
        "relu",
        MODEL,
        _forward(
            _H + "        x = self.norm(torch.relu(self.dense(h)))\n"
            "        return x @ self.embedding.weight.T + self.bias\n"
        ),
        (T_MODEL,),
        "uses ReLU",
        mistake="relu-not-gelu",
    ),
    Variant(
        "no_norm",
        MODEL,
        _forward(
            _H + "        x = F.gelu(self.dense(h))\n"
            "        return x @ self.embedding.weight.T + self.bias\n"
        ),
        (T_MODEL,),
        "has no norm",
        mistake="no-norm",
    ),
    Variant(
        "no_gelu",
        MODEL,
        _forward(
            _H + "        x = self.norm(self.dense(h))\n"
            "        return x @ self.embedding.weight.T + self.bias\n"
        ),
        (T_MODEL,),
        "no GELU",
        mistake="no-gelu",
    ),
    Variant(
        "no_bias",
        MODEL,
        _forward(_H + _X + "        return x @ self.embedding.weight.T\n"),
        (T_MODEL,),
        "self.bias is not added",
        mistake="no-output-bias",
    ),
    Variant(
        "detached_tie",
        MODEL,
        _forward(_H + _X + "        return x @ self.embedding.weight.detach().T + self.bias\n"),
        (T_MODEL,),
        "detached copy of the embedding",
        mistake="detached-tie",
    ),
    Variant(
        "not_transposed",
        MODEL,
        _forward(_H + _X + "        return x @ self.embedding.weight + self.bias\n"),
        (T_MODEL,),
        "multiply by its transpose",
        mistake="embedding-not-transposed",
    ),
    Variant(
        "classes_first",
        MODEL,
        _forward(
            _H + _X + "        logits = x @ self.embedding.weight.T + self.bias\n"
            "        return logits.transpose(1, 2)  # (B, V, L), as F.cross_entropy wants\n"
        ),
        (T_MODEL,),
        "(B, V, L)",
        mistake="vocabulary-axis-not-last",
    ),
    Variant(
        "no_padding_mask",
        MODEL,
        _forward(
            "        h = self.encoder(self.positions(self.embedding(token_ids)))\n"
            + _X
            + "        return x @ self.embedding.weight.T + self.bias\n"
        ),
        (T_MODEL,),
        "without the padding mask",
        mistake="no-padding-mask",
    ),
    Variant(
        "eval_in_forward",
        MODEL,
        _forward(
            "        self.eval()\n"
            + _H
            + _X
            + "        return x @ self.embedding.weight.T + self.bias\n"
        ),
        (T_MODEL,),
        "dropout is off in training mode",
        mistake="eval-in-forward",
    ),
]

_MODEL_CORRECT = [
    Variant(
        "f_linear",
        MODEL,
        _forward(_H + _X + "        return F.linear(x, self.embedding.weight, self.bias)\n"),
    ),
    Variant(
        "einsum_in_steps",
        MODEL,
        _forward(
            "        h = self.dense(self.encode(token_ids))\n"
            "        h = F.gelu(h, approximate='none')\n"
            "        h = self.norm(h)\n"
            "        scores = torch.einsum('bld,vd->blv', h, self.embedding.weight)\n"
            "        return scores + self.bias\n"
        ),
    ),
    Variant(
        "matmul_transpose",
        MODEL,
        _forward(
            _H + _X + "        E = self.embedding.weight  # (V, D), shared with the input\n"
            "        return torch.matmul(x, E.transpose(0, 1)) + self.bias\n"
        ),
    ),
]


# --- exercise 3: mlm_loss ------------------------------------------------------------------------


def _loss(body: str) -> str:
    return f"def mlm_loss(logits, labels):\n{body}"


_PICK = """    chosen = labels != -100
    log_probs = F.log_softmax(logits, dim=-1)
    picked = log_probs.gather(-1, labels.clamp(min=0)[..., None])[..., 0]
"""

_LOSS_BUGGY = [
    Variant(
        "mean_over_all_positions",
        LOSS,
        _loss(_PICK + "    return -(picked * chosen).mean()\n"),
        (T_LOSS,),
        "divides by every position",
        mistake="mean-over-all-positions",
    ),
    Variant(
        "mean_of_sentence_means",
        LOSS,
        _loss(_PICK + "    return (-(picked * chosen).sum(1) / chosen.sum(1)).mean()\n"),
        (T_LOSS,),
        "averages each sentence",
        mistake="mean-of-sentence-means",
    ),
    Variant(
        "sum",
        LOSS,
        _loss(_PICK + "    return -(picked * chosen).sum()\n"),
        (T_LOSS,),
        "returns the sum",
        mistake="sum-not-mean",
    ),
    Variant(
        "ignored_positions_counted",
        LOSS,
        _loss(_PICK + "    return -picked.mean()\n"),
        (T_LOSS,),
        "are scored too",
        mistake="ignored-positions-counted",
    ),
    Variant(
        "positive_sign",
        LOSS,
        _loss(_PICK + "    return (picked * chosen).sum() / chosen.sum()\n"),
        (T_LOSS,),
        "sign is wrong",
        mistake="positive-sign",
    ),
    Variant(
        "log_of_logits",
        LOSS,
        _loss(
            "    chosen = labels != -100\n"
            "    p = logits.gather(-1, labels.clamp(min=0)[..., None])[..., 0]\n"
            "    return -(torch.log(p) * chosen).sum() / chosen.sum()\n"
        ),
        (T_LOSS,),
        "NaN",
        mistake="loss-is-nan",
    ),
    Variant(
        "softmax_first",
        LOSS,
        _loss(
            _PICK.replace("F.log_softmax(logits, dim=-1)", "F.log_softmax(logits.softmax(-1), -1)")
            + "    return -(picked * chosen).sum() / chosen.sum()\n"
        ),
        (T_LOSS,),
        "softmax before log_softmax",
        mistake="softmax-before-log-softmax",
    ),
    Variant(
        "wrong_axis",
        LOSS,
        _loss(
            _PICK.replace("dim=-1", "dim=1")
            + "    return -(picked * chosen).sum() / chosen.sum()\n"
        ),
        (T_LOSS,),
        "wrong axis",
        mistake="log-softmax-wrong-axis",
    ),
    Variant(
        "raw_logits_as_log_probabilities",
        LOSS,
        _loss(
            "    chosen = labels != -100\n"
            "    picked = logits.gather(-1, labels.clamp(min=0)[..., None])[..., 0]\n"
            "    return -(picked * chosen).sum() / chosen.sum()\n"
        ),
        (T_LOSS,),
        "raw logits as if they were log-probabilities",
        mistake="no-log-softmax",
    ),
    Variant(
        "probabilities_not_log",
        LOSS,
        _loss(
            _PICK.replace("F.log_softmax(logits, dim=-1)", "logits.softmax(dim=-1)")
            + "    return -(picked * chosen).sum() / chosen.sum()\n"
        ),
        (T_LOSS,),
        "probability (after softmax) where the loss needs its log-probability",
        mistake="probabilities-not-log",
    ),
    Variant(
        "gather_at_minus_100",
        LOSS,
        _loss(
            "    chosen = labels != -100\n"
            "    picked = F.log_softmax(logits, dim=-1).gather(-1, labels[..., None])[..., 0]\n"
            "    return -(picked * chosen).sum() / chosen.sum()\n"
        ),
        (T_LOSS,),
        "-100 is no index",
        mistake="ignore-index-used-as-index",
    ),
    Variant(
        "cross_entropy",
        LOSS,
        _loss(
            "    V = logits.shape[-1]\n"
            "    return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))\n"
        ),
        (T_LOSS,),
        "F.cross_entropy",
        mistake="forbidden-built-in",
    ),
    Variant(
        "item",
        LOSS,
        _loss(_PICK + "    return (-(picked * chosen).sum() / chosen.sum()).item()\n"),
        (T_LOSS,),
        "should be a torch.Tensor",
        mistake="not-a-tensor",
    ),
    Variant(
        "detached",
        LOSS,
        _loss(_PICK + "    return (-(picked * chosen).sum() / chosen.sum()).detach()\n"),
        (T_LOSS,),
        "does not require grad",
        mistake="no-grad",
    ),
]

_LOSS_CORRECT = [
    Variant(
        "boolean_selection",
        LOSS,
        _loss(
            "    keep = labels != -100\n"
            "    rows = F.log_softmax(logits[keep], dim=-1)  # (N, V)\n"
            "    return -rows.gather(1, labels[keep][:, None]).mean()\n"
        ),
    ),
    Variant(
        "logsumexp",
        LOSS,
        _loss(
            "    keep = (labels != -100).to(logits.dtype)\n"
            "    safe = torch.where(labels == -100, torch.zeros_like(labels), labels)\n"
            "    right = logits.gather(-1, safe.unsqueeze(-1)).squeeze(-1)\n"
            "    nll = torch.logsumexp(logits, dim=-1) - right\n"
            "    return (nll * keep).sum() / keep.sum()\n"
        ),
    ),
    Variant(
        "one_hot",
        LOSS,
        _loss(
            "    keep = labels != -100\n"
            "    target = F.one_hot(labels[keep], logits.shape[-1]).to(logits.dtype)\n"
            "    return -(target * torch.log_softmax(logits[keep], -1)).sum(-1).mean()\n"
        ),
    ),
]


# --- exercise 4: fill_mask -----------------------------------------------------------------------


def _fill(body: str) -> str:
    return f"def fill_mask(logits, token_ids, mask_id, first_word_id, k=5):\n{body}"


_AT = "    at_masks = logits[token_ids == mask_id]\n"

_FILL_BUGGY = [
    Variant(
        "special_tokens",
        FILL,
        _fill(_AT + "    return at_masks.topk(k, dim=-1).indices\n"),
        (T_FILL,),
        "special tokens are among the candidates",
        mistake="special-tokens-ranked",
    ),
    Variant(
        "no_offset",
        FILL,
        _fill(_AT + "    return at_masks[:, first_word_id:].topk(k, dim=-1).indices\n"),
        (T_FILL,),
        "counted from first_word_id",
        mistake="ids-from-zero",
    ),
    Variant(
        "least_likely",
        FILL,
        _fill(
            _AT + "    words = at_masks[:, first_word_id:]\n"
            "    return words.topk(k, dim=-1, largest=False).indices + first_word_id\n"
        ),
        (T_FILL,),
        "least likely",
        mistake="least-likely",
    ),
    Variant(
        "least_likely_first",
        FILL,
        _fill(
            _AT + "    words = at_masks[:, first_word_id:]\n"
            "    best = words.sort(dim=-1).indices[:, -k:]  # ascending: the best k are last\n"
            "    return best + first_word_id\n"
        ),
        (T_FILL,),
        "from the least likely to the most likely",
        mistake="least-likely-first",
    ),
    Variant(
        "ids_sorted",
        FILL,
        _fill(
            _AT + "    words = at_masks[:, first_word_id:]\n"
            "    best = words.topk(k, dim=-1).indices.sort(dim=-1).values\n"
            "    return best + first_word_id\n"
        ),
        (T_FILL,),
        "the right k tokens, but not from the most likely",
        mistake="wrong-order",
    ),
    Variant(
        "special_tokens_zeroed",
        FILL,
        _fill(
            "    scores = logits.clone()\n"
            "    scores[..., :first_word_id] = 0.0  # special tokens out\n"
            "    return scores[token_ids == mask_id].topk(k, dim=-1).indices\n"
        ),
        (T_FILL,),
        "a logit of 0 beats every negative one",
        mistake="special-tokens-zeroed",
    ),
    Variant(
        "special_tokens_multiplied_by_zero",
        FILL,
        _fill(
            "    keep = (torch.arange(logits.shape[-1]) >= first_word_id).to(logits.dtype)\n"
            "    scores = logits * keep\n"
            "    return scores[token_ids == mask_id].topk(k, dim=-1).indices\n"
        ),
        (T_FILL,),
        "a logit of 0 beats every negative one",
        mistake="special-tokens-zeroed",
    ),
    Variant(
        "scores",
        FILL,
        _fill(_AT + "    return at_masks[:, first_word_id:].topk(k, dim=-1).values\n"),
        (T_FILL,),
        "not the scores",
        mistake="dtype",
    ),
    Variant(
        "argmax_only",
        FILL,
        _fill(_AT + "    return at_masks[:, first_word_id:].argmax(dim=-1) + first_word_id\n"),
        (T_FILL,),
        "the k best",
        mistake="one-id-per-mask",
    ),
    Variant(
        "fixed_mask_id",
        FILL,
        _fill(
            "    at_masks = logits[token_ids == 4]\n"
            "    return at_masks[:, first_word_id:].topk(k, dim=-1).indices + first_word_id\n"
        ),
        (T_FILL,),
        "look for mask_id",
        mistake="mask-id-hard-coded",
    ),
]

_FILL_CORRECT = [
    Variant(
        "minus_infinity",
        FILL,
        _fill(
            "    scores = logits.clone()\n"
            "    scores[..., :first_word_id] = float('-inf')  # special tokens never win\n"
            "    return scores[token_ids == mask_id].topk(k, dim=-1).indices\n"
        ),
    ),
    Variant(
        "argsort_loop",
        FILL,
        _fill(
            "    rows = []\n"
            "    for b in range(token_ids.shape[0]):\n"
            "        for t in range(token_ids.shape[1]):\n"
            "            if token_ids[b, t] == mask_id:\n"
            "                order = logits[b, t, first_word_id:].argsort(descending=True)\n"
            "                rows.append(order[:k] + first_word_id)\n"
            "    return torch.stack(rows)\n"
        ),
    ),
    Variant(
        "nonzero_positions",
        FILL,
        _fill(
            "    b, t = (token_ids == mask_id).nonzero(as_tuple=True)\n"
            "    words = logits[b, t][:, first_word_id:]\n"
            "    best = torch.sort(words, dim=-1, descending=True).indices[:, :k]\n"
            "    return best + first_word_id\n"
        ),
    ),
]

BUGGY = _MASK_BUGGY + _MODEL_BUGGY + _LOSS_BUGGY + _FILL_BUGGY
CORRECT = _MASK_CORRECT + _MODEL_CORRECT + _LOSS_CORRECT + _FILL_CORRECT
