"""Token embeddings and the two kinds of positional information: sinusoidal and learned."""

from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import check_last_dim, check_rank, check_token_ids

__all__ = [
    "TokenEmbedding",
    "sinusoidal_table",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
]


class TokenEmbedding(nn.Module):
    r"""Token ids ``(B, L)`` to vectors ``(B, L, D)``, multiplied by sqrt(D) as in the paper.

    The sizes are chosen against the sinusoidal positional encoding, whose rows have length
    sqrt(D/2) (D/2 pairs with sin^2 + cos^2 = 1). With ``scale`` on, the table starts with
    entries of standard deviation 1/sqrt(D) (the small start the paper's factor assumes: there
    the table is shared with the output layer), so after the factor a token vector has entries
    of size about 1 and length about sqrt(D), sqrt(2) times the encoding's. With ``scale`` off,
    the table keeps ``nn.Embedding``'s start, entries N(0, 1), and the vectors have the same
    size. What must not be combined is the N(0, 1) start *and* the factor (much tutorial code
    does): entries of size sqrt(D), vectors of length D, sqrt(2D) times the encoding's (32 at
    D = 512), and the positions are drowned by the tokens.

    Args:
        vocab_size: number of token ids.
        d_model: D.
        padding_idx: id whose vector is zero and receives no gradient.
        scale: start small and multiply by sqrt(D) (default True); False: ``nn.Embedding``'s
            N(0, 1) start and no factor.
    """

    def __init__(
        self, vocab_size: int, d_model: int, padding_idx: int | None = None, scale: bool = True
    ):
        """Keep the table in ``self.embedding``, an ``nn.Embedding(vocab_size, d_model,
        padding_idx=padding_idx)``; the arguments are described in the class docstring."""
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.scale = math.sqrt(d_model) if scale else 1.0
        if scale:  # N(0, 1) entries / sqrt(D): the padding row stays zero, no random draws
            with torch.no_grad():
                self.embedding.weight.div_(self.scale)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Look up token ids ``(B, L)`` (integers below ``vocab_size``); returns ``(B, L, D)``,
        times sqrt(D) when ``scale`` is on."""
        check_token_ids("token_ids", token_ids, self.embedding.num_embeddings)
        return self.embedding(token_ids.long()) * self.scale  # (B, L, D)


def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    r"""The ``(max_len, D)`` table PE[pos, 2i] = sin(pos / 10000^(2i/D)),
    PE[pos, 2i+1] = cos(pos / 10000^(2i/D)): sine and cosine *interleaved* along D."""
    if d_model % 2 != 0:
        raise ValueError(
            f"d_model (D = {d_model}) must be even for sinusoidal encoding: each frequency fills "
            "a (sin, cos) pair of columns"
        )
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    angle = position / 10000.0 ** (two_i / d_model)  # (max_len, D/2)
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.to(torch.get_default_dtype())


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to batch-first embeddings ``(B, L, D)``.

    The table is a non-persistent buffer: it follows ``.to()`` (device and dtype) and is not
    saved in the ``state_dict``, because it is a function of the shape alone.
    """

    def __init__(self, d_model: int, max_len: int = 5000):
        """Compute the ``(max_len, D)`` table once (``sinusoidal_table``)."""
        super().__init__()
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, L, D)`` plus the table's first L rows (the same for every sentence);
        a ``ValueError`` if L is longer than ``max_len``."""
        limit = "the positional encoding covers at most max_len = {} positions"
        return _add_positions(x, self.pe, limit)


class LearnedPositionalEmbedding(nn.Module):
    """Adds one learned vector per position, as BERT and GPT do; it cannot extrapolate past
    ``max_len``."""

    def __init__(self, max_len: int, d_model: int):
        """One vector of D features per position in the parameter ``weight`` ``(max_len, D)``,
        drawn with standard deviation 0.02 (BERT's initialiser range)."""
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, L, D)`` plus the first L learned vectors; a ``ValueError`` if L is longer
        than ``max_len``."""
        limit = "only max_len = {} positions have a learned embedding"
        return _add_positions(x, self.weight, limit)


def _add_positions(x: torch.Tensor, table: torch.Tensor, limit: str) -> torch.Tensor:
    """``x + table[:L]`` for ``x`` of shape (B, L, D) and a (max_len, D) table; ``limit`` says
    (with ``{}`` for max_len) why a longer sequence cannot be encoded."""
    check_rank("x", x, "(B, L, D)")
    max_len, D = table.shape
    check_last_dim("x", x, D)
    if x.shape[1] > max_len:
        raise ValueError(
            f"x has sequence length L = {x.shape[1]} but {limit.format(max_len)} "
            f"(x shape {tuple(x.shape)})"
        )
    return x + table[: x.shape[1]]  # (L, D) broadcasts over B
