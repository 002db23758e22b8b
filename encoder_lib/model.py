"""The full encoder: sentences in, one D-dimensional vector per position out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .embeddings import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TokenEmbedding
from .encoder import EncoderLayer, TransformerEncoder
from .layer_norm import LayerNorm
from .masks import padding_mask
from .text import Vocabulary, load_corpus

__all__ = ["EncoderConfig", "SentenceEncoder"]


@dataclass(frozen=True)
class EncoderConfig:
    """Hyperparameters of ``SentenceEncoder``; the defaults are the course's headline example."""

    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    num_layers: int = 4
    dropout: float = 0.1
    max_sequence_length: int = 256
    activation: str = "relu"
    norm_first: bool = False
    positional: str = "sinusoidal"  # or "learned"

    def __post_init__(self) -> None:
        if self.positional not in ("sinusoidal", "learned"):
            raise ValueError(
                f"positional must be 'sinusoidal' or 'learned', got {self.positional!r}"
            )


class SentenceEncoder(nn.Module):
    r"""Sentences -> token ids (with ``<start>``, ``<end>``, ``<pad>``) -> scaled token embedding
    + positional encoding -> dropout -> N encoder layers with a padding mask.

    Padding keys are masked in every layer, so the outputs at real positions do not depend on how
    much padding follows. Padding positions still get outputs (they attend to the real tokens);
    ignore them downstream, e.g. with the mask from ``padding_mask``.

    Args:
        vocab: the vocabulary; defaults to the one built from the shipped corpus.
        config: the hyperparameters; defaults to the headline example.

    Shape:
        input: a sequence of B strings, or token ids ``(B, max_sequence_length)``;
        output ``(B, max_sequence_length, D)``.

    Like every ``nn.Module`` it starts in training mode, where dropout makes each call return a
    different tensor: call ``.eval()`` for the same output every time, ``.train()`` to train.
    """

    def __init__(self, vocab: Vocabulary | None = None, config: EncoderConfig | None = None):
        """Build the embedding, the positional encoding and the encoder stack from ``config``;
        every layer gets initial weights of its own."""
        super().__init__()
        self.vocab = (
            vocab if vocab is not None else Vocabulary.from_sentences(s for s, _ in load_corpus())
        )
        self.config = config = config if config is not None else EncoderConfig()
        D, L = config.d_model, config.max_sequence_length
        self.embedding = TokenEmbedding(len(self.vocab), D, padding_idx=self.vocab.pad_id)
        if config.positional == "sinusoidal":
            self.positional = SinusoidalPositionalEncoding(D, L)
        else:
            self.positional = LearnedPositionalEmbedding(L, D)
        self.dropout = nn.Dropout(config.dropout)
        layer = EncoderLayer(
            D, config.num_heads, config.d_ff, config.dropout, config.activation, config.norm_first
        )
        self.encoder = TransformerEncoder(
            layer, config.num_layers, LayerNorm(D) if config.norm_first else None
        )
        # Every copy of the layer starts from the same weights; give each its own.
        for layer in self.encoder.layers:
            layer.self_attn.reset_parameters()
            for linear in (layer.linear1, layer.linear2):
                linear.reset_parameters()

    def tokenize(self, sentences: Sequence[str]) -> torch.Tensor:
        """Token ids ``(B, max_sequence_length)`` on the module's device."""
        ids = self.vocab.encode_batch(sentences, self.config.max_sequence_length)
        return ids.to(self.embedding.embedding.weight.device)

    def forward(self, sentences: Sequence[str] | torch.Tensor) -> torch.Tensor:
        """Encode B sentences (strings, or token ids ``(B, max_sequence_length)``); returns one
        vector per position, ``(B, max_sequence_length, D)``, padding keys masked in every
        layer. In training mode (the default) dropout makes each call differ: ``.eval()``."""
        ids = sentences if isinstance(sentences, torch.Tensor) else self.tokenize(sentences)
        L = self.config.max_sequence_length
        if ids.dim() != 2 or ids.shape[1] != L:
            raise ValueError(
                f"token ids must have shape (B, max_sequence_length) = (B, {L}), "
                f"got shape {tuple(ids.shape)}"
            )
        x = self.dropout(self.positional(self.embedding(ids)))  # (B, L, D)
        return self.encoder(x, padding_mask(ids, self.vocab.pad_id))  # (B, L, D)

    def num_parameters(self) -> int:
        """How many numbers the model learns (every parameter's elements, summed)."""
        return sum(p.numel() for p in self.parameters())

    def extra_repr(self) -> str:
        """What ``print(model)`` adds to the first line: the vocabulary size and d_head."""
        return (
            f"vocab_size={len(self.vocab)}, d_head={self.config.d_model // self.config.num_heads}"
        )
