"""A small text front end: tokenizer, vocabulary with special tokens, padded batches, and the
corpus shipped with the package (no downloads)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from importlib import resources

import torch

__all__ = ["tokenize", "Vocabulary", "load_corpus"]

_TOKEN = re.compile(r"[a-z0-9']+|[^\sa-z0-9']")


def tokenize(sentence: str) -> list[str]:
    """Lower-case words (apostrophes kept) and punctuation marks: ``"Hi!"`` -> ``["hi", "!"]``."""
    return _TOKEN.findall(sentence.lower())


class Vocabulary:
    """Maps tokens to ids. Ids 0-3 are the special tokens ``<pad>``, ``<start>``, ``<end>`` and
    ``<unk>``; the rest follow in order of decreasing frequency (ties alphabetical), so the same
    corpus always gives the same ids."""

    PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
    SPECIALS = (PAD, START, END, UNK)

    def __init__(self, tokens: Iterable[str]):
        self.itos: list[str] = list(self.SPECIALS)
        self.itos += [t for t in dict.fromkeys(tokens) if t not in self.SPECIALS]
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}
        self.pad_id, self.start_id, self.end_id, self.unk_id = range(4)

    @classmethod
    def from_sentences(cls, sentences: Iterable[str], min_freq: int = 1) -> Vocabulary:
        counts = Counter(t for s in sentences for t in tokenize(s))
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return cls(t for t, c in ranked if c >= min_freq)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, sentence: str) -> list[int]:
        """``[<start>, tokens..., <end>]`` as ids; unknown words become ``<unk>``."""
        ids = [self.stoi.get(t, self.unk_id) for t in tokenize(sentence)]
        return [self.start_id, *ids, self.end_id]

    def encode_batch(self, sentences: Sequence[str], max_sequence_length: int) -> torch.Tensor:
        """Token ids ``(B, max_sequence_length)``: each sentence encoded, then padded with
        ``<pad>``. A sentence that does not fit raises ``ValueError`` (nothing is cut silently)."""
        if isinstance(sentences, str):
            raise ValueError(
                "sentences must be a sequence of strings such as ('Hi',), got a single string"
            )
        rows = []
        for i, sentence in enumerate(sentences):
            ids = self.encode(sentence)
            if len(ids) > max_sequence_length:
                raise ValueError(
                    f"sentence {i} needs {len(ids)} tokens with <start> and <end>, more than "
                    f"max_sequence_length = {max_sequence_length}"
                )
            rows.append(ids + [self.pad_id] * (max_sequence_length - len(ids)))
        return torch.tensor(rows, dtype=torch.long).reshape(len(rows), max_sequence_length)

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[int(i)] for i in ids]


def load_corpus() -> list[tuple[str, int]]:
    """The course corpus: short English sentences written for this project, each labelled
    1 (positive) or 0 (negative). Used to build the vocabulary and by the sentiment capstone."""
    text = resources.files("encoder_lib").joinpath("data/corpus.tsv").read_text(encoding="utf-8")
    pairs = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            label, sentence = line.split("\t")
            pairs.append((sentence, int(label)))
    return pairs
