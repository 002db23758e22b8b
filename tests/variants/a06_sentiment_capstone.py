"""Answers to notebook 06 (the capstone) as students write them: ``BUGGY`` ones, each with the
test cells it must fail and the words that name its mistake, and ``CORRECT`` ones written
differently from the solution.

``check_train_step`` hands ``train_step`` the check's own classifier and
``check_sentiment_classifier`` runs the forward with the reference ``masked_mean`` in place of
the student's, so a wrong answer fails its own test cell only.
"""

from __future__ import annotations

from variants import Variant

MEAN, STEP, CLASSIFIER = "masked_mean", "train_step", "sentiment_classifier"
T_MEAN, T_STEP, T_CLASSIFIER = f"test_{MEAN}", f"test_{STEP}", f"test_{CLASSIFIER}"


def _mean(body: str) -> str:
    return f"def masked_mean(h, keep):\n{body}"


def _step(body: str) -> str:
    return f"def train_step(model, optimizer, token_ids, labels):\n{body}"


_CLASSIFIER_INIT = """class SentimentClassifier(nn.Module):
    def __init__(
        self, vocab_size, pad_id, max_len, d_model=32, num_heads=4, d_ff=64, num_layers=2,
        dropout=0.1,
    ):
        super().__init__()
        self.pad_id = pad_id
        self.embedding = encoder_lib.TokenEmbedding(
            vocab_size, d_model, padding_idx=pad_id, scale=False
        )
        self.positional = encoder_lib.SinusoidalPositionalEncoding(d_model, max_len)
        layer = encoder_lib.EncoderLayer(d_model, num_heads, d_ff, dropout)
        self.encoder = encoder_lib.TransformerEncoder(layer, num_layers)
        self.head = nn.Linear(d_model, 2)

"""


def _forward(body: str) -> str:
    return _CLASSIFIER_INIT + f"    def forward(self, token_ids):\n{body}"


# --- (a) masked_mean -----------------------------------------------------------------------------

_MEAN_BUGGY = [
    Variant(
        "plain_mean",
        MEAN,
        _mean("    return h.mean(dim=1)\n"),
        (T_MEAN,),
        "padding included",
        mistake="mean-includes-padding",
    ),
    Variant(
        "mask_reversed",
        MEAN,
        _mean(
            "    pad = (~keep).to(h.dtype)[:, :, None]\n    return (h * pad).sum(1) / pad.sum(1)\n"
        ),
        (T_MEAN,),
        "polarity is reversed",
        mistake="mask-reversed",
    ),
    Variant(
        "sum_not_mean",
        MEAN,
        _mean("    return (h * keep[:, :, None]).sum(dim=1)\n"),
        (T_MEAN,),
        "without dividing",
        mistake="sum-not-mean",
    ),
    Variant(
        "divided_by_batch_count",
        MEAN,
        _mean("    k = keep[:, :, None].to(h.dtype)\n    return (h * k).sum(dim=1) / k.sum()\n"),
        (T_MEAN,),
        "number of real tokens in the whole batch",
        mistake="divides-by-batch-count",
    ),
    Variant(
        "divided_by_mean_length",
        MEAN,
        _mean(
            "    k = keep[:, :, None].to(h.dtype)\n"
            "    return (h * k).sum(dim=1) / keep.sum(dim=1).to(h.dtype).mean()\n"
        ),
        (T_MEAN,),
        "batch's mean number of real tokens",
        mistake="divides-by-mean-length",
    ),
    Variant(
        "divided_by_length",
        MEAN,
        _mean("    return (h * keep[:, :, None]).sum(dim=1) / h.shape[1]\n"),
        (T_MEAN,),
        "divides the sum of the real positions by L, the padded length",
        mistake="divides-by-padded-length",
    ),
    Variant(
        "wrong_axis",
        MEAN,
        _mean("    k = keep.to(h.dtype)[:, :, None]\n    return (h * k).mean(dim=-1)\n"),
        (T_MEAN,),
        "averaged over the last axis",
        mistake="mean-over-features",
    ),
    Variant(
        "keepdim",
        MEAN,
        _mean(
            "    k = keep.to(h.dtype).unsqueeze(-1)\n"
            "    return (h * k).sum(dim=1, keepdim=True) / k.sum(dim=1, keepdim=True)\n"
        ),
        (T_MEAN,),
        "drop keepdim=True",
        mistake="keepdim-kept",
    ),
    Variant(
        "no_trailing_axis",
        MEAN,
        _mean(
            "    k = keep.to(h.dtype)\n    return (h * k).sum(dim=1) / k.sum(dim=1, keepdim=True)\n"
        ),
        (T_MEAN,),
        "trailing axis",
        mistake="keep-without-trailing-axis",
    ),
    Variant(
        "float32_result",
        MEAN,
        _mean("    k = keep.float()[:, :, None]\n    return ((h * k).sum(1) / k.sum(1)).float()\n"),
        (T_MEAN,),
        "keep h's dtype",
        mistake="dtype",
    ),
    Variant(
        "in_place",
        MEAN,
        _mean("    h[~keep] = 0\n    return h.sum(dim=1) / keep.sum(dim=1, keepdim=True)\n"),
        (T_MEAN,),
        "in place",
        mistake="in-place",
    ),
    Variant(
        "prefix_lengths",
        MEAN,
        _mean(
            "    lengths = keep.sum(dim=1).tolist()\n"
            "    return torch.stack([h[b, :n].mean(dim=0) for b, n in enumerate(lengths)])\n"
        ),
        (T_MEAN,),
        "assumes the real tokens come first",
        mistake="keep-read-as-lengths",
    ),
    Variant(
        "detached",
        MEAN,
        _mean(
            "    k = keep.to(h.dtype)[:, :, None]\n"
            "    return ((h * k).sum(1) / k.sum(1)).detach()\n"
        ),
        (T_MEAN,),
        "not connected to h",
        mistake="no-grad",
    ),
]

_MEAN_BUGGY.append(
    Variant(
        "count_in_float32",
        MEAN,
        _mean("    k = keep[..., None]\n    return (h * k).sum(1) / k.sum(1).float()\n"),
        (T_MEAN,),
        "keep h's dtype",
        mistake="dtype",
    )
)

_MEAN_CORRECT = [
    Variant(
        "nanmean",
        MEAN,
        _mean("    return h.masked_fill(~keep[..., None], float('nan')).nanmean(dim=1)\n"),
    ),
    Variant(
        "einsum",
        MEAN,
        _mean(
            "    w = keep.to(h.dtype)\n"
            "    w = w / w.sum(dim=1, keepdim=True)\n"
            "    return torch.einsum('bl,bld->bd', w, h)\n"
        ),
    ),
    Variant(
        "loop",
        MEAN,
        _mean("    return torch.stack([h[b][keep[b]].mean(dim=0) for b in range(h.shape[0])])\n"),
    ),
]

# --- (b) train_step ------------------------------------------------------------------------------

_RIGHT = (
    "    model.train()\n"
    "    optimizer.zero_grad()\n"
    "    loss = F.cross_entropy(model(token_ids), labels)\n"
    "    loss.backward()\n"
    "    optimizer.step()\n"
    "    return loss.item()\n"
)


def _without(line: str, replacement: str = "") -> str:
    """The right step with one line removed or replaced."""
    assert line in _RIGHT, line
    return _step(_RIGHT.replace(line, replacement))


_STEP_BUGGY = [
    Variant(
        "no_zero_grad",
        STEP,
        _without("    optimizer.zero_grad()\n"),
        (T_STEP,),
        "zero_grad() is never called",
        mistake="no-zero-grad",
    ),
    Variant(
        "zero_grad_after_step",
        STEP,
        _step(
            "    model.train()\n"
            "    loss = F.cross_entropy(model(token_ids), labels)\n"
            "    loss.backward()\n"
            "    optimizer.step()\n"
            "    optimizer.zero_grad()\n"
            "    return loss.item()\n"
        ),
        (T_STEP,),
        "zero_grad() is called after optimizer.step()",
        mistake="zero-grad-after-step",
    ),
    Variant(
        "eval_mode_left_on",
        STEP,
        _without("    model.train()\n"),
        (T_STEP,),
        "model.eval() is left on while training",
        mistake="eval-mode-in-training",
    ),
    Variant(
        "switches_to_eval",
        STEP,
        _without("    model.train()\n", "    model.eval()\n"),
        (T_STEP,),
        "model.eval() is left on while training",
        mistake="eval-mode-in-training",
    ),
    Variant(
        "loss_on_probabilities",
        STEP,
        _without(
            "    loss = F.cross_entropy(model(token_ids), labels)\n",
            "    probabilities = F.softmax(model(token_ids), dim=-1)\n"
            "    loss = F.cross_entropy(probabilities, labels)\n",
        ),
        (T_STEP,),
        "loss is computed on probabilities instead of logits",
        mistake="loss-on-probabilities",
    ),
    Variant(
        "nll_on_logits",
        STEP,
        _without(
            "    loss = F.cross_entropy(model(token_ids), labels)\n",
            "    loss = F.nll_loss(model(token_ids), labels)\n",
        ),
        (T_STEP,),
        "expects log-probabilities",
        mistake="nll-on-logits",
    ),
    Variant(
        "summed_loss",
        STEP,
        _without(
            "    loss = F.cross_entropy(model(token_ids), labels)\n",
            "    loss = F.cross_entropy(model(token_ids), labels, reduction='sum')\n",
        ),
        (T_STEP,),
        "summed over the batch",
        mistake="loss-summed",
    ),
    Variant(
        "no_backward",
        STEP,
        _without("    loss.backward()\n"),
        (T_STEP,),
        "loss.backward() is never called",
        mistake="no-backward",
    ),
    Variant(
        "no_step",
        STEP,
        _without("    optimizer.step()\n"),
        (T_STEP,),
        "optimizer.step() is never called",
        mistake="no-step",
    ),
    Variant(
        "step_before_backward",
        STEP,
        _step(
            "    model.train()\n"
            "    optimizer.zero_grad()\n"
            "    loss = F.cross_entropy(model(token_ids), labels)\n"
            "    optimizer.step()\n"
            "    loss.backward()\n"
            "    return loss.item()\n"
        ),
        (T_STEP,),
        "optimizer.step() is called before loss.backward()",
        mistake="step-before-backward",
    ),
    Variant(
        "zero_grad_between",
        STEP,
        _step(
            "    model.train()\n"
            "    loss = F.cross_entropy(model(token_ids), labels)\n"
            "    loss.backward()\n"
            "    optimizer.zero_grad()\n"
            "    optimizer.step()\n"
            "    return loss.item()\n"
        ),
        (T_STEP,),
        "zeroed between loss.backward() and optimizer.step()",
        mistake="zero-grad-between-backward-and-step",
    ),
    Variant(
        "two_steps",
        STEP,
        _without("    optimizer.step()\n", "    optimizer.step()\n    optimizer.step()\n"),
        (T_STEP,),
        "called 2 times",
        mistake="step-twice",
    ),
    Variant(
        "returns_tensor",
        STEP,
        _without("    return loss.item()\n", "    return loss\n"),
        (T_STEP,),
        "return loss.item()",
        mistake="loss-as-tensor",
    ),
    Variant(
        "returns_nothing",
        STEP,
        _without("    return loss.item()\n"),
        (T_STEP,),
        "return the loss of the batch as a Python float",
        mistake="returns-none",
    ),
    Variant(
        "forward_without_grad",
        STEP,
        _without(
            "    loss = F.cross_entropy(model(token_ids), labels)\n",
            "    with torch.no_grad():\n"
            "        logits = model(token_ids)\n"
            "    loss = F.cross_entropy(logits, labels)\n",
        ),
        (T_STEP,),
        "no graph to backpropagate through",
        mistake="no-graph",
    ),
    Variant(
        "update_by_hand",
        STEP,
        _without(
            "    optimizer.step()\n",
            "    with torch.no_grad():\n"
            "        for p in model.parameters():\n"
            "            p -= optimizer.param_groups[0]['lr'] * p.grad\n",
        ),
        (T_STEP,),
        "updated by hand",
        mistake="update-by-hand",
    ),
]

_STEP_CORRECT = [
    Variant(
        "model_zero_grad_and_float",
        STEP,
        _step(
            "    model.train()\n"
            "    model.zero_grad()\n"
            "    logits = model(token_ids)\n"
            "    loss = F.nll_loss(F.log_softmax(logits, dim=-1), labels)\n"
            "    loss.backward()\n"
            "    optimizer.step()\n"
            "    return float(loss)\n"
        ),
    ),
    Variant(
        "criterion_module",
        STEP,
        _step(
            "    criterion = nn.CrossEntropyLoss()\n"
            "    model.train()\n"
            "    for p in model.parameters():\n"
            "        p.grad = None\n"
            "    loss = criterion(model(token_ids), labels)\n"
            "    loss.backward()\n"
            "    optimizer.step()\n"
            "    return loss.detach().item()\n"
        ),
    ),
    Variant(
        "zero_grad_after_forward",
        STEP,
        _step(
            "    model.train(True)\n"
            "    logits = model(token_ids)\n"
            "    loss = F.cross_entropy(logits.log_softmax(dim=-1), labels)\n"
            "    optimizer.zero_grad(set_to_none=False)\n"
            "    loss.backward()\n"
            "    optimizer.step()\n"
            "    return loss.item()\n"
        ),
    ),
]

# --- (c) SentimentClassifier.forward -------------------------------------------------------------

_KEEP = "        keep = token_ids != self.pad_id\n"
_X = "        x = self.positional(self.embedding(token_ids))\n"
_H = "        h = self.encoder(x, keep[:, None, None, :])\n"

_CLASSIFIER_BUGGY = [
    Variant(
        "plain_mean_pooling",
        CLASSIFIER,
        _forward(_KEEP + _X + _H + "        return self.head(h.mean(dim=1))\n"),
        (T_CLASSIFIER,),
        "padding positions too",
        mistake="mean-includes-padding",
    ),
    Variant(
        "divided_by_length",
        CLASSIFIER,
        _forward(
            _KEEP + _X + _H + "        pooled = (h * keep[:, :, None]).sum(dim=1) / h.shape[1]\n"
            "        return self.head(pooled)\n"
        ),
        (T_CLASSIFIER,),
        "divides the sum of the real positions by L, the padded length",
        mistake="divides-by-padded-length",
    ),
    Variant(
        "pooling_mask_reversed",
        CLASSIFIER,
        _forward(_KEEP + _X + _H + "        return self.head(masked_mean(h, ~keep))\n"),
        (T_CLASSIFIER,),
        "polarity is reversed",
        mistake="pooling-mask-reversed",
    ),
    Variant(
        "sum_pooling",
        CLASSIFIER,
        _forward(_KEEP + _X + _H + "        return self.head((h * keep[:, :, None]).sum(dim=1))\n"),
        (T_CLASSIFIER,),
        "sums the real positions",
        mistake="sum-not-mean",
    ),
    Variant(
        "first_position",
        CLASSIFIER,
        _forward(_KEEP + _X + _H + "        return self.head(h[:, 0])\n"),
        (T_CLASSIFIER,),
        "first position",
        mistake="first-position-only",
    ),
    Variant(
        "no_pooling",
        CLASSIFIER,
        _forward(_KEEP + _X + _H + "        return self.head(h)\n"),
        (T_CLASSIFIER,),
        "head ran on every position",
        mistake="head-on-every-position",
    ),
    Variant(
        "head_on_wrong_axis",
        CLASSIFIER,
        _forward(_KEEP + _X + _H + "        return self.head(h.mean(dim=-1))\n"),
        (T_CLASSIFIER,),
        "head is applied on the wrong axis",
        mistake="pooled-over-features",
    ),
    Variant(
        "no_encoder_mask",
        CLASSIFIER,
        _forward(
            _KEEP + _X + "        h = self.encoder(x)\n"
            "        return self.head(masked_mean(h, keep))\n"
        ),
        (T_CLASSIFIER,),
        "without the padding mask",
        mistake="no-mask-to-encoder",
    ),
    Variant(
        "encoder_mask_reversed",
        CLASSIFIER,
        _forward(
            _KEEP + _X + "        h = self.encoder(x, ~keep[:, None, None, :])\n"
            "        return self.head(masked_mean(h, keep))\n"
        ),
        (T_CLASSIFIER,),
        "wrong polarity",
        mistake="mask-reversed",
    ),
    Variant(
        "no_positions",
        CLASSIFIER,
        _forward(
            _KEEP
            + "        x = self.embedding(token_ids)\n"
            + _H
            + "        return self.head(masked_mean(h, keep))\n"
        ),
        (T_CLASSIFIER,),
        "no positional encoding",
        mistake="no-positional-encoding",
    ),
    Variant(
        "softmax",
        CLASSIFIER,
        _forward(
            _KEEP + _X + _H + "        return F.softmax(self.head(masked_mean(h, keep)), dim=-1)\n"
        ),
        (T_CLASSIFIER,),
        "not probabilities",
        mistake="softmax-applied",
    ),
    Variant(
        "log_softmax",
        CLASSIFIER,
        _forward(
            _KEEP + _X + _H + "        return self.head(masked_mean(h, keep)).log_softmax(-1)\n"
        ),
        (T_CLASSIFIER,),
        "log_softmax is applied",
        mistake="log-softmax-applied",
    ),
    Variant(
        "argmax",
        CLASSIFIER,
        _forward(_KEEP + _X + _H + "        return self.head(masked_mean(h, keep)).argmax(-1)\n"),
        (T_CLASSIFIER,),
        "not predicted classes",
        mistake="returns-classes",
    ),
    Variant(
        "eval_inside_forward",
        CLASSIFIER,
        _forward(
            "        self.eval()\n"
            + _KEEP
            + _X
            + _H
            + "        return self.head(masked_mean(h, keep))\n"
        ),
        (T_CLASSIFIER,),
        "dropout is off in training mode",
        mistake="eval-in-forward",
    ),
    Variant(
        "encoder_frozen",
        CLASSIFIER,
        _forward(
            _KEEP + _X + "        with torch.no_grad():\n"
            "            h = self.encoder(x, keep[:, None, None, :])\n"
            "        return self.head(masked_mean(h, keep))\n"
        ),
        (T_CLASSIFIER,),
        "no gradient reaches self.encoder",
        mistake="gradient-missing",
    ),
    Variant(
        "pad_id_zero",
        CLASSIFIER,
        _forward(
            "        keep = token_ids != 0\n"
            + _X
            + _H
            + "        return self.head(masked_mean(h, keep))\n"
        ),
        (T_CLASSIFIER,),
        "padding",
        mistake="pad-id-hard-coded",
    ),
]

_CLASSIFIER_CORRECT = [
    Variant(
        "library_mask",
        CLASSIFIER,
        _forward(
            "        mask = encoder_lib.padding_mask(token_ids, self.pad_id)  # (B, 1, 1, L)\n"
            "        h = self.encoder(self.positional(self.embedding(token_ids)), mask)\n"
            "        return self.head(masked_mean(h, mask[:, 0, 0, :]))\n"
        ),
    ),
    Variant(
        "head_before_pooling",
        CLASSIFIER,
        _forward(
            _KEEP + _X + _H + "        per_position = self.head(h)  # (B, L, 2)\n"
            "        return masked_mean(per_position, keep)\n"
        ),
    ),
    Variant(
        "layer_by_layer_inline_pooling",
        CLASSIFIER,
        _forward(
            "        real = (token_ids != self.pad_id).unsqueeze(1).unsqueeze(1)\n"
            "        x = self.embedding(token_ids)\n"
            "        x = x + self.positional.pe[: x.shape[1]]\n"
            "        for layer in self.encoder.layers:\n"
            "            x = layer(x, mask=real)\n"
            "        m = real[:, 0, 0, :, None].to(x.dtype)\n"
            "        return self.head((x * m).sum(1) / m.sum(1))\n"
        ),
    ),
]

BUGGY = _MEAN_BUGGY + _STEP_BUGGY + _CLASSIFIER_BUGGY
CORRECT = _MEAN_CORRECT + _STEP_CORRECT + _CLASSIFIER_CORRECT

# --- answers that make the rest of the catalogue (tests/grading/checks/test_catalogue.py) -------

BUGGY += [
    Variant(
        "last_position",
        CLASSIFIER,
        _forward(_KEEP + _X + _H + "        return self.head(h[:, -1])\n"),
        (T_CLASSIFIER,),
        "last position, which is padding",
        mistake="last-position-only",
    ),
]
