"""Answers to notebook 06 (the sentiment capstone) as students write them: ``BUGGY`` ones, each
with the test cells it must fail and the words that name its mistake, and ``CORRECT`` ones
written differently from the solution.

``check_sentiment_classifier`` runs the classifier with the reference ``masked_mean`` in place
of the student's, so a wrong ``masked_mean`` fails ``test_masked_mean`` only.
"""

from __future__ import annotations

from variants import Variant

MEAN, CLASSIFIER = "masked_mean", "sentiment_classifier"
T_MEAN, T_CLASSIFIER = f"test_{MEAN}", f"test_{CLASSIFIER}"


def _mean(body: str) -> str:
    return f"def masked_mean(h, keep):\n{body}"


_CLASSIFIER_INIT = """class SentimentClassifier(nn.Module):
    def __init__(self, encoder, num_classes=2):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.config.d_model, num_classes)
        self.pad_id = encoder.vocab.pad_id

"""


def _classifier(forward: str) -> str:
    return _CLASSIFIER_INIT + forward


def _forward(body: str) -> str:
    return _classifier(f"    def forward(self, token_ids):\n{body}")


# --- (a) masked_mean -----------------------------------------------------------------------------

_MEAN_BUGGY = [
    Variant("plain_mean", MEAN, _mean("    return h.mean(dim=1)\n"), (T_MEAN,), "padding included"),
    Variant(
        "mask_reversed",
        MEAN,
        _mean(
            "    pad = (~keep).to(h.dtype)[:, :, None]\n    return (h * pad).sum(1) / pad.sum(1)\n"
        ),
        (T_MEAN,),
        "polarity is reversed",
    ),
    Variant(
        "sum_not_mean",
        MEAN,
        _mean("    return (h * keep[:, :, None]).sum(dim=1)\n"),
        (T_MEAN,),
        "without dividing",
    ),
    Variant(
        "divided_by_length",
        MEAN,
        _mean("    return (h * keep[:, :, None]).sum(dim=1) / h.shape[1]\n"),
        (T_MEAN,),
        "divides the sum of the real positions by L",
    ),
    Variant(
        "wrong_axis",
        MEAN,
        _mean("    k = keep.to(h.dtype)[:, :, None]\n    return (h * k).mean(dim=-1)\n"),
        (T_MEAN,),
        "averaged over the last axis",
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
    ),
    Variant(
        "no_trailing_axis",
        MEAN,
        _mean(
            "    k = keep.to(h.dtype)\n    return (h * k).sum(dim=1) / k.sum(dim=1, keepdim=True)\n"
        ),
        (T_MEAN,),
        "trailing axis",
    ),
    Variant(
        "float32_result",
        MEAN,
        _mean("    k = keep.float()[:, :, None]\n    return ((h * k).sum(1) / k.sum(1)).float()\n"),
        (T_MEAN,),
        "keep h's dtype",
    ),
    Variant(
        "in_place",
        MEAN,
        _mean("    h[~keep] = 0\n    return h.sum(dim=1) / keep.sum(dim=1, keepdim=True)\n"),
        (T_MEAN,),
        "in place",
    ),
    Variant(
        "prefix_lengths",
        MEAN,
        _mean(
            "    lengths = keep.sum(dim=1).tolist()\n"
            "    return torch.stack([h[b, :n].mean(dim=0) for b, n in enumerate(lengths)])\n"
        ),
        (T_MEAN,),
        "does not match the reference",
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
    ),
]

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

# --- (b) SentimentClassifier.forward -------------------------------------------------------------

_MASK = "        keep = token_ids != self.pad_id\n"

_CLASSIFIER_BUGGY = [
    Variant(
        "plain_mean_pooling",
        CLASSIFIER,
        _forward("        return self.head(self.encoder(token_ids).mean(dim=1))\n"),
        (T_CLASSIFIER,),
        "padding positions too",
    ),
    Variant(
        "mask_reversed",
        CLASSIFIER,
        _forward(
            "        keep = token_ids == self.pad_id\n"
            "        return self.head(masked_mean(self.encoder(token_ids), keep))\n"
        ),
        (T_CLASSIFIER,),
        "polarity is reversed",
    ),
    Variant(
        "no_pooling",
        CLASSIFIER,
        _forward("        return self.head(self.encoder(token_ids))\n"),
        (T_CLASSIFIER,),
        "head ran on every position",
    ),
    Variant(
        "first_position",
        CLASSIFIER,
        _forward("        return self.head(self.encoder(token_ids)[:, 0])\n"),
        (T_CLASSIFIER,),
        "first position",
    ),
    Variant(
        "softmax",
        CLASSIFIER,
        _forward(
            _MASK + "        logits = self.head(masked_mean(self.encoder(token_ids), keep))\n"
            "        return F.softmax(logits, dim=-1)\n"
        ),
        (T_CLASSIFIER,),
        "softmax is applied",
    ),
    Variant(
        "log_softmax",
        CLASSIFIER,
        _forward(
            _MASK + "        logits = self.head(masked_mean(self.encoder(token_ids), keep))\n"
            "        return logits.log_softmax(dim=-1)\n"
        ),
        (T_CLASSIFIER,),
        "log_softmax is applied",
    ),
    Variant(
        "argmax",
        CLASSIFIER,
        _forward(
            _MASK
            + "        return self.head(masked_mean(self.encoder(token_ids), keep)).argmax(-1)\n"
        ),
        (T_CLASSIFIER,),
        "predicted classes",
    ),
    Variant(
        "sum_pooling",
        CLASSIFIER,
        _forward(
            _MASK + "        h = self.encoder(token_ids) * keep[:, :, None]\n"
            "        return self.head(h.sum(dim=1))\n"
        ),
        (T_CLASSIFIER,),
        "sums the real positions",
    ),
    Variant(
        "encoder_frozen",
        CLASSIFIER,
        _forward(
            _MASK + "        with torch.no_grad():\n"
            "            h = self.encoder(token_ids)\n"
            "        return self.head(masked_mean(h, keep))\n"
        ),
        (T_CLASSIFIER,),
        "do not reach the encoder",
    ),
]

_CLASSIFIER_CORRECT = [
    Variant(
        "library_mask",
        CLASSIFIER,
        _forward(
            "        keep = encoder_lib.padding_mask(token_ids, self.pad_id)[:, 0, 0, :]\n"
            "        return self.head(masked_mean(self.encoder(token_ids), keep))\n"
        ),
    ),
    Variant(
        "head_before_pooling",
        CLASSIFIER,
        _forward(
            _MASK + "        per_position = self.head(self.encoder(token_ids))  # (B, L, 2)\n"
            "        return masked_mean(per_position, keep)\n"
        ),
    ),
    Variant(
        "inline_pooling",
        CLASSIFIER,
        _forward(
            "        h = self.encoder(token_ids)\n"
            "        m = (token_ids != self.pad_id).unsqueeze(-1).to(h.dtype)\n"
            "        return self.head((h * m).sum(1) / m.sum(1))\n"
        ),
    ),
]

BUGGY = _MEAN_BUGGY + _CLASSIFIER_BUGGY
CORRECT = _MEAN_CORRECT + _CLASSIFIER_CORRECT
