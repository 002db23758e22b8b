"""Masked-language-model pretraining, BERT's way: corrupt some tokens, predict the originals.

The pieces notebook 08 has students write, as the reference the checks compare with:

- ``mask_tokens``: BERT's corruption. Each ordinary token is chosen with probability ``p``;
  of the chosen, 80% become ``<mask>``, 10% a random ordinary token and 10% stay as they were.
  BERT's 80/10/10 split, drawn per token as Hugging Face's ``DataCollatorForLanguageModeling``
  does; BERT's own script chose exactly 15% of each sequence (rounded) and drew replacements from
  the whole vocabulary, once before training. Drawing anew at every step, as
  ``pretraining.pretrain`` does, is RoBERTa's dynamic masking.
  The labels hold the original id where a token was chosen and ``IGNORE_INDEX`` (-100)
  elsewhere, the value ``F.cross_entropy`` skips by default.
- ``MaskedLanguageModel``: token embedding, learned positions, a pre-norm encoder, then the MLM
  head: a transform (linear, GELU, LayerNorm) and an output layer whose weight *is* the token
  embedding's (weight tying), giving logits ``(B, L, V)``.
- ``mlm_loss``: cross-entropy over the chosen positions only, averaged over them.
- ``fill_mask``: the ``k`` most likely ordinary words at every ``<mask>``.

Token ids below ``first_word_id`` are special (``<pad>``, ``<start>``, ``<end>``, ``<unk>``,
``<mask>``): never chosen, never drawn as a random replacement, never predicted by
``fill_mask``. Every random draw comes from the ``generator`` passed in, so a seeded generator
gives the same corruption on every machine and the notebook's global random state is untouched.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_rank, check_token_ids
from .embeddings import LearnedPositionalEmbedding
from .encoder import EncoderLayer, TransformerEncoder
from .layer_norm import LayerNorm

__all__ = ["IGNORE_INDEX", "mask_tokens", "MaskedLanguageModel", "mlm_loss", "fill_mask"]

IGNORE_INDEX = -100
"""The label of a position the loss ignores (``F.cross_entropy``'s default ``ignore_index``)."""


def mask_tokens(
    token_ids: torch.Tensor,
    mask_id: int,
    first_word_id: int,
    vocab_size: int,
    p: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption of a batch of token ids; the input is not changed.

    Each position holding an ordinary token (id >= ``first_word_id``) is chosen independently
    with probability ``p``. A chosen token becomes ``mask_id`` with probability 0.8, a random
    ordinary token (uniform over ``first_word_id .. vocab_size - 1``, which may happen to be the
    original) with probability 0.1, and stays as it is with probability 0.1.

    Args:
        token_ids: integer ids ``(B, L)``.
        mask_id: the id of ``<mask>``.
        first_word_id: the smallest id of an ordinary token; smaller ids are special.
        vocab_size: V; random replacements are drawn below it.
        p: the probability that an ordinary token is chosen.
        generator: where every random number comes from (None: torch's global CPU generator); the
            numbers are drawn on its device and moved to ``token_ids``'s, so a seed gives the same
            corruption on every device.

    Returns:
        ``(corrupted, labels)``, both ``(B, L)`` int64: the ids the model reads, and the
        original id at chosen positions, ``IGNORE_INDEX`` (-100) everywhere else.
    """
    check_token_ids("token_ids", token_ids, vocab_size)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p}")
    if not 0 <= mask_id < first_word_id < vocab_size:
        raise ValueError(
            "expected 0 <= mask_id < first_word_id < vocab_size (special ids come first), got "
            f"mask_id={mask_id}, first_word_id={first_word_id}, vocab_size={vocab_size}"
        )
    ids = token_ids.long()
    shape = ids.shape
    # Drawn where the generator lives (the CPU without one), then moved to the batch: the same
    # seed corrupts a batch the same way on every device.
    draw = {"generator": generator, "device": "cpu" if generator is None else generator.device}
    chosen = torch.rand(shape, **draw).to(ids.device) < p
    chosen &= ids >= first_word_id  # (B, L)
    action = torch.rand(shape, **draw).to(ids.device)  # < 0.8 mask, < 0.9 random, else keep
    random_ids = torch.randint(first_word_id, vocab_size, shape, **draw).to(ids.device)
    corrupted = torch.where(chosen & (action < 0.8), mask_id, ids)
    corrupted = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, corrupted)
    labels = torch.where(chosen, ids, IGNORE_INDEX)
    return corrupted, labels


class MaskedLanguageModel(nn.Module):
    """A small BERT: token embedding, learned positions, a pre-norm encoder and the MLM head.

    Pre-norm is ModernBERT's arrangement (BERT itself is post-norm), chosen because it trains
    stably in few steps. Its layers are deep copies of one ``EncoderLayer``, so they start with
    equal weights, as in ``nn.TransformerEncoder``.

    The head transforms each position (``dense``, GELU, ``norm``) and scores it against every
    token's embedding: ``logits = transform(h) @ embedding.weight.T + bias``. Tying the output
    layer to the embedding saves V x D parameters and makes a token's input and output vectors
    one and the same, so what the model learns to predict shapes how it reads.

    Args:
        vocab_size: V.
        max_len: the longest sequence L the learned positions cover.
        d_model, num_heads, d_ff, num_layers, dropout: the encoder's sizes.
        pad_id: the padding id: no position attends to it, and its embedding stays zero.

    Shape:
        token_ids ``(B, L)`` -> ``encode``: ``(B, L, D)``; ``forward``: logits ``(B, L, V)``.
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        d_model: int = 32,
        num_heads: int = 4,
        d_ff: int = 64,
        num_layers: int = 2,
        dropout: float = 0.0,
        pad_id: int = 0,
    ):
        super().__init__()
        self.pad_id = pad_id
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        # nn.Embedding draws N(0, 1): rows of length sqrt(D), and tied to the output layer they
        # give logits of spread sqrt(D) at the start. Scaled to N(0, 1/D), rows of length about
        # 1 that training can move: left at N(0, 1), the adjectives of notebook 08's language
        # end 2,000 steps of pretraining no nearer to their own polarity than chance.
        with torch.no_grad():
            self.embedding.weight.mul_(d_model**-0.5)
        self.positions = LearnedPositionalEmbedding(max_len, d_model)
        layer = EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first=True)
        self.encoder = TransformerEncoder(layer, num_layers, norm=LayerNorm(d_model))
        self.dense = nn.Linear(d_model, d_model)  # the head's transform
        self.norm = LayerNorm(d_model)
        self.bias = nn.Parameter(torch.zeros(vocab_size))  # the output layer's only own weight

    def encode(self, token_ids: torch.Tensor) -> torch.Tensor:
        """The encoder's output ``(B, L, D)``; no position attends to padding."""
        check_token_ids("token_ids", token_ids, self.embedding.num_embeddings)
        keep = token_ids != self.pad_id  # (B, L), True at real tokens
        x = self.positions(self.embedding(token_ids.long()))  # (B, L, D)
        return self.encoder(x, keep[:, None, None, :])  # mask (B, 1, 1, L)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, L, V)``: a score for every token of the vocabulary at every position."""
        x = self.norm(F.gelu(self.dense(self.encode(token_ids))))  # (B, L, D)
        return x @ self.embedding.weight.T + self.bias  # (B, L, D) @ (D, V) -> (B, L, V)


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``logits`` ``(B, L, V)`` against ``labels`` ``(B, L)``, averaged over the
    positions whose label is not ``IGNORE_INDEX``: every chosen token weighs the same, whichever
    sentence it is in. A scalar in the logits' dtype (NaN when no position is chosen)."""
    check_rank("logits", logits, "(B, L, V)")
    if labels.shape != logits.shape[:2]:
        raise ValueError(
            f"labels must have shape (B, L) = {tuple(logits.shape[:2])} to match logits "
            f"(B, L, V) = {tuple(logits.shape)}, got shape {tuple(labels.shape)}"
        )
    chosen = labels != IGNORE_INDEX  # (B, L)
    log_probs = F.log_softmax(logits, dim=-1)  # (B, L, V)
    picked = log_probs.gather(-1, labels.clamp(min=0)[..., None])[..., 0]  # (B, L)
    return -(picked * chosen).sum() / chosen.sum()


def fill_mask(
    logits: torch.Tensor, token_ids: torch.Tensor, mask_id: int, first_word_id: int, k: int = 5
) -> torch.Tensor:
    """The ``k`` most likely ordinary tokens at every ``<mask>`` of ``token_ids``.

    Args:
        logits: ``(B, L, V)``, the model's output for ``token_ids``.
        token_ids: ``(B, L)``.
        mask_id: the id of ``<mask>``.
        first_word_id: ids below it are special and never predicted.
        k: how many candidates per ``<mask>``.

    Returns:
        int64 ids ``(N, k)``, one row per ``<mask>`` in reading order (sentence by sentence,
        left to right), most likely first.
    """
    check_rank("logits", logits, "(B, L, V)")
    if token_ids.shape != logits.shape[:2]:
        raise ValueError(
            f"token_ids must have shape (B, L) = {tuple(logits.shape[:2])} to match logits, "
            f"got shape {tuple(token_ids.shape)}"
        )
    at_masks = logits[token_ids == mask_id]  # (N, V), in reading order
    words = at_masks[:, first_word_id:]  # (N, V - first_word_id)
    return words.topk(k, dim=-1).indices + first_word_id  # (N, k)
