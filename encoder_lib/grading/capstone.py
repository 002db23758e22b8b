"""Checks for the sentiment capstone: masked mean pooling (``masked_mean``) and the forward pass of
the sentence classifier (``SentimentClassifier``).

Mistakes the checks name:

``check_masked_mean``
    a plain mean over all L positions (padding included), the mask with reversed polarity (an
    average over the padding), the sum of the real positions not divided by their number, the
    sum divided by L, the mean taken over the wrong axis (D instead of the positions), keepdim
    left on, a mask without its trailing axis (an error, or, when L = D, a mask applied along the
    features), a changed dtype, ``h`` modified in place, NaN, gradients that do not flow.
``check_sentiment_classifier``
    a plain mean over padding, the mask reversed, a sum instead of a mean, the first or the last
    position taken instead of pooling, no pooling at all (the head applied to every position),
    softmax or log-softmax applied to the logits, predicted classes returned instead of logits,
    the encoder not used, gradients that do not reach the encoder (``torch.no_grad()`` or
    ``.detach()`` in ``forward``) or the head.

Design choices:
- (b) does not depend on (a): while ``check_sentiment_classifier`` runs, a global
  ``masked_mean`` of the notebook (the one the solution's ``forward`` calls) is replaced by the
  reference, then restored; a student stuck on (a) can still finish (b).
- Everything runs in float64 on tiny sizes, with dropout off; the global random state is left
  untouched (``_core.seeded``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..model import EncoderConfig as _EncoderConfig
from ..model import SentenceEncoder as _SentenceEncoder
from ..text import Vocabulary as _Vocabulary
from . import _core
from ._core import GradingError

__all__ = ["check_masked_mean", "check_sentiment_classifier"]

_DTYPE = (
    "{what} has dtype {got}, but h was {expected}: keep h's dtype (convert keep with "
    ".to(h.dtype), not .float())."
)


def _reference_masked_mean(h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean of ``h`` (B, L, D) over the positions where ``keep`` (B, L) is True."""
    weights = keep.reshape(h.shape[:2]).to(h.dtype)[:, :, None]  # (B, L, 1)
    return (h * weights).sum(dim=1) / weights.sum(dim=1)


# --- (a) masked_mean -----------------------------------------------------------------------------


def _keep(lengths: list[int], L: int) -> torch.Tensor:
    return _core.keep_first(lengths, L, extra_axes=0)  # (B, L), True = real


def _mean_mistakes(h: torch.Tensor, keep: torch.Tensor) -> dict[str, torch.Tensor]:
    k = keep[:, :, None].to(h.dtype)
    pad = 1 - k
    L = h.shape[1]
    mistakes = {
        "it averages all L positions, padding included (a plain mean over dim 1). Average only "
        "the positions where keep is True: sum h * keep over the positions and divide by the "
        "number of real tokens.": h.mean(dim=1),
        "it averages the padding positions instead of the real tokens: the mask polarity is "
        "reversed. keep is True at real tokens.": (h * pad).sum(dim=1) / pad.sum(dim=1),
        "it returns the sum of the real positions without dividing by their number (keep.sum "
        "over the positions).": (h * k).sum(dim=1),
        "it divides the sum of the real positions by L, the padded length, instead of by the "
        "number of real tokens in each sentence.": (h * k).sum(dim=1) / L,
    }
    if h.shape[0] == 1 and h.shape[1] == h.shape[2]:
        along_d = keep[:, None, :].to(h.dtype)  # what h * keep broadcasts to when L = D
        mistakes[
            "the mask is applied along the features D instead of along the positions: keep has "
            "shape (B, L), and broadcasting lines shapes up from the right, so h * keep "
            "multiplies the last axis. Give it a trailing axis: keep[:, :, None]."
        ] = (h * along_d).sum(dim=1) / keep.sum(dim=1, keepdim=True).to(h.dtype)
    return mistakes


def _call_masked_mean(masked_mean: Any, h: torch.Tensor, keep: torch.Tensor) -> Any:
    what = f"masked_mean(h, keep) with h of shape {tuple(h.shape)}"
    try:
        with _core.student_call("masked_mean"):
            return masked_mean(h, keep)
    except GradingError as e:
        cause = e.__cause__
        if _core._isinstance(cause, RuntimeError) and "must match" in str(cause):
            raise GradingError(
                f"{what} raised a shape error ({cause}). keep has shape (B, L) and h has shape "
                "(B, L, D): broadcasting lines shapes up from the right, so give keep a trailing "
                "axis first: keep[:, :, None] (or keep.unsqueeze(-1)), shape (B, L, 1)."
            ) from e
        raise


def _check_mean_case(masked_mean: Any, B: int, L: int, D: int, keep: torch.Tensor, seed: int):
    h = _core.randn(B, L, D, seed=seed)
    h[~keep] += 5.0  # padding positions far from the real ones, so a leak shows
    expected = _reference_masked_mean(h, keep)
    mistakes = _mean_mistakes(h, keep)
    h_in, keep_in = h.clone(), keep.clone()
    what = f"masked_mean(h, keep) with h of shape (B, L, D) = {(B, L, D)}"
    out = _call_masked_mean(masked_mean, h_in, keep_in)
    if not torch.equal(h_in, h) or not torch.equal(keep_in, keep):
        raise GradingError(
            f"{what} modified its input in place (h[~keep] = 0, h.mul_(...)...). Build a new "
            "tensor instead: h * keep[:, :, None] leaves h unchanged."
        )
    _core.expect_tensor(out, what)
    shape = tuple(out.shape)
    if shape != (B, D):
        if shape == (B, L) and L != D:
            raise GradingError(
                f"{what} has shape {shape} = (B, L): it averaged over the last axis (the D "
                "features) instead of over the positions. Sum and count over dim=1."
            )
        if shape == (B, 1, D):
            raise GradingError(
                f"{what} has shape {shape}: drop keepdim=True from the sum over the positions "
                "(the result is one D-vector per sentence, (B, D)); keep it only for the count "
                "if you need it to broadcast."
            )
    if shape == (B, D):
        _core.expect_dtype(out, h.dtype, what, _DTYPE)
    _core.expect_close(out, expected, what, mistakes)
    return h, keep


@_core.guarded
def check_masked_mean(masked_mean: Any, thorough: bool = False) -> None:
    """``masked_mean(h, keep)``: the mean of ``h`` (B, L, D) over the positions where the boolean
    ``keep`` (B, L) is True, shape (B, D)."""
    cases = [(3, 5, 4, _keep([4, 2, 3], 5))]  # all sizes distinct, every row padded
    if thorough:
        cases += [
            (2, 6, 3, _keep([6, 1], 6)),  # one row without padding, one with a single token
            (1, 1, 5, _keep([1], 1)),  # B = L = 1
            (1, 4, 4, _keep([2], 4)),  # L = D: a missing trailing axis broadcasts silently
            (2, 5, 3, torch.tensor([[True, False, True, False, True], [False, True] * 2 + [True]])),
        ]
    for i, (B, L, D, keep) in enumerate(cases):
        _check_mean_case(masked_mean, B, L, D, keep, seed=10 * i + 1)
    if thorough:
        keep = _keep([3, 1], 4)
        h = _core.randn(2, 4, 3, seed=99).requires_grad_()
        out = _call_masked_mean(masked_mean, h, keep)
        what = "masked_mean's gradient"
        if not _core._isinstance(out, torch.Tensor) or not out.requires_grad:
            raise GradingError(
                f"{what}: the output is not connected to h (no torch.no_grad(), .detach() or "
                ".item() in masked_mean): the encoder under it could not learn."
            )
        (grad,) = torch.autograd.grad(out.sum(), h)
        expected = keep[:, :, None].double() / keep.sum(dim=1)[:, None, None]
        expected = expected.expand_as(h)
        _core.expect_close(
            grad,
            expected,
            what + " with respect to h",
            {
                "padding positions receive gradient: they must not take part.": torch.full_like(
                    h, 0.25
                )
            },
        )


# --- (b) SentimentClassifier.forward -------------------------------------------------------------

_SENTENCES = ("good film .", "a very bad film", "good", "the film was not very good")


def _small_encoder(seed: int, L: int) -> _SentenceEncoder:
    vocab = _Vocabulary.from_sentences(_SENTENCES)
    config = _EncoderConfig(
        d_model=8, num_heads=2, d_ff=16, num_layers=1, dropout=0.0, max_sequence_length=L
    )
    with _core.seeded(seed):
        encoder = _SentenceEncoder(vocab, config)
    return encoder.double().eval()


@contextlib.contextmanager
def _reference_pooling(cls: Any) -> Iterator[None]:
    """Replace the notebook's global ``masked_mean`` by the reference while ``cls.forward`` runs,
    so that a mistake in exercise (a) does not cost the points of exercise (b)."""
    forward = getattr(cls, "forward", None)
    namespace = getattr(forward, "__globals__", None)
    if not _core._isinstance(namespace, dict) or "masked_mean" not in namespace:
        yield
        return
    saved = namespace["masked_mean"]
    namespace["masked_mean"] = _reference_masked_mean
    try:
        yield
    finally:
        namespace["masked_mean"] = saved


def _build_classifier(cls: Any, encoder: nn.Module, seed: int) -> nn.Module:
    with _core.student_call("SentimentClassifier(encoder)"), _core.seeded(seed):
        model = cls(encoder)
    if not _core._isinstance(model, nn.Module):
        raise GradingError(
            "SentimentClassifier(encoder) should build an nn.Module: keep the given class and "
            "its __init__."
        )
    head = getattr(model, "head", None)
    if getattr(model, "encoder", None) is not encoder or _core._type(head) is not nn.Linear:
        raise GradingError(
            "SentimentClassifier(encoder) should keep the given __init__: self.encoder (the "
            "encoder passed in) and self.head (an nn.Linear from D to 2)."
        )
    model = model.double().eval()
    with torch.no_grad():
        head.weight.copy_(_core.randn(*head.weight.shape, seed=seed + 1))
        head.bias.copy_(_core.randn(*head.bias.shape, seed=seed + 2))
    return model


def _classifier_mistakes(
    h: torch.Tensor, keep: torch.Tensor, head: nn.Module, logits: torch.Tensor
) -> dict[str, torch.Tensor]:
    k = keep[:, :, None].to(h.dtype)
    pad = 1 - k
    with torch.no_grad():
        return {
            "the pooling averages the padding positions too (a plain mean over dim 1): pool with "
            "masked_mean(h, keep), keep = token_ids != self.pad_id.": head(h.mean(dim=1)),
            "the pooling averages the padding instead of the real tokens: the mask polarity is "
            "reversed (keep must be True where token_ids != self.pad_id).": head(
                (h * pad).sum(dim=1) / pad.sum(dim=1)
            ),
            "it sums the real positions instead of averaging them (use masked_mean).": head(
                (h * k).sum(dim=1)
            ),
            "it classifies the first position (<start>) only: average all the real positions "
            "with masked_mean.": head(h[:, 0]),
            "it classifies the last position, which is padding: average the real positions with "
            "masked_mean.": head(h[:, -1]),
            "softmax is applied: return the raw logits. F.cross_entropy applies log-softmax "
            "itself, and argmax gives the same prediction on logits.": F.softmax(logits, dim=-1),
            "log_softmax is applied: return the raw logits (the head's output). F.cross_entropy "
            "applies log-softmax itself.": F.log_softmax(logits, dim=-1),
        }


@_core.guarded
def check_sentiment_classifier(SentimentClassifier: Any, thorough: bool = False) -> None:
    """``SentimentClassifier(encoder).forward(token_ids)``: encode, pool the real positions with
    a masked mean, apply the head; logits (B, 2)."""
    cases = [(9, 0)]
    if thorough:
        cases += [(12, 1)]
    for L, seed in cases:
        encoder = _small_encoder(seed=100 + seed, L=L)
        model = _build_classifier(SentimentClassifier, encoder, seed=200 + seed)
        ids = encoder.tokenize(_SENTENCES)  # (B, L), every row padded
        B = ids.shape[0]
        keep = ids != encoder.vocab.pad_id
        with torch.no_grad():
            h = encoder(ids)
            expected = model.head(_reference_masked_mean(h, keep))
        mistakes = _classifier_mistakes(h, keep, model.head, expected)
        what = f"SentimentClassifier.forward(token_ids) with token_ids of shape {(B, L)}"
        pooling = _reference_pooling(SentimentClassifier)
        with torch.no_grad(), pooling, _core.student_call("SentimentClassifier.forward"):
            out = model(ids.clone())
        _core.expect_tensor(out, what)
        shape = tuple(out.shape)
        if shape == (B, L, 2):
            raise GradingError(
                f"{what} has shape {shape} = (B, L, 2): the head ran on every position. Pool "
                "first: masked_mean(h, keep) gives one (B, D) vector per sentence, then the head "
                "gives (B, 2)."
            )
        if shape == (B,) and not out.is_floating_point():
            raise GradingError(
                f"{what} returns predicted classes {tuple(out.tolist())}: return the logits "
                "(B, 2), the head's output; argmax is for reading predictions, and it has no "
                "gradient to train with."
            )
        _core.expect_close(out, expected, what, mistakes)
        if thorough:
            _check_gradients(model, ids, SentimentClassifier)


def _check_gradients(model: nn.Module, ids: torch.Tensor, cls: Any) -> None:
    model.zero_grad(set_to_none=True)
    labels = torch.arange(ids.shape[0]) % 2
    with _reference_pooling(cls), _core.student_call("SentimentClassifier.forward"):
        logits = model(ids)
    if not logits.requires_grad:
        raise GradingError(
            "SentimentClassifier.forward returns logits without gradient: remove "
            "torch.no_grad() / .detach() from forward, or nothing could be trained."
        )
    F.cross_entropy(logits, labels).backward()
    embedding = model.encoder.embedding.embedding.weight.grad
    if embedding is None or not bool(embedding.abs().sum() > 0):
        raise GradingError(
            "gradients do not reach the encoder: its output is detached (or computed under "
            "torch.no_grad()) in forward, so only the head would learn. The encoder must be "
            "trained too."
        )
    if model.head.weight.grad is None:
        raise GradingError("gradients do not reach the head: apply self.head to the pooled vector.")
    model.zero_grad(set_to_none=True)
