"""BERT's uncased WordPiece tokenizer, written out: the tokenizer of notebook 11's real encoder.

Text becomes tokens in two stages:

1. **Words** (``normalize``, then ``split_words``: BERT's "basic tokenizer"). ``normalize``
   lowercases the text and strips its accents (Unicode NFD, combining marks dropped): ``"Café"``
   -> ``"cafe"``. ``split_words`` drops control characters and turns every kind of whitespace into
   a space; puts spaces around CJK ideographs, so each is a word of its own; splits on whitespace;
   then splits off every punctuation character as a word of its own. Normalising first, as
   Hugging Face's tokenizer does, matters for a few characters whose decomposition is
   punctuation: ``"a≠b"`` becomes ``"a=b"`` (``=`` plus a combining stroke), three words.
2. **Pieces** (``wordpiece``): each word is cut greedily, longest match first, into pieces of the
   vocabulary; every piece after the first carries the prefix ``##`` ("continues a word"):
   ``"unaffable"`` -> ``["una", "##ffa", "##ble"]``. A word that no sequence of pieces covers
   becomes ``[UNK]`` as a whole (never a partial word), and so does a word of more than 100
   characters.

``WordPieceTokenizer`` puts the two together and turns a batch of texts into the tensors the
model takes: ``[CLS] tokens [SEP]``, padded with ``[PAD]`` (id 0) to the longest text, with an
attention mask (True = a real token) and token types (all 0 for one text per row).

The course's tests check every stage against Hugging Face's ``tokenizers`` reading the model's
own ``tokenizer.json``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["WordPieceTokenizer", "Encoding", "split_words", "normalize", "wordpiece"]

MAX_WORD_CHARS = 100
"""Words longer than this many characters become ``[UNK]`` without being looked at (BERT's
``max_input_chars_per_word``)."""


def _is_control(char: str) -> bool:
    """Control (Cc), format (Cf, e.g. zero-width spaces), private use (Co) and surrogate (Cs)
    characters, as Hugging Face's tokenizer (unassigned code points, Cn, are kept)."""
    if char in "\t\n\r":
        return False  # whitespace, kept as such
    return unicodedata.category(char) in ("Cc", "Cf", "Co", "Cs")


def _is_whitespace(char: str) -> bool:
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_punctuation(char: str) -> bool:
    """ASCII's non-alphanumeric printable characters (``$``, ``+``, ``^`` ... count, although
    Unicode calls some of them symbols) and every Unicode punctuation category."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(cp: int) -> bool:
    """CJK Unified Ideographs and their extensions (not Japanese kana or Korean hangul, which
    are written with spaces and split like any other letters)."""
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _clean(text: str) -> str:
    """Control characters, NUL and the replacement character removed; whitespace made spaces;
    spaces put around CJK ideographs."""
    out = []
    for char in text:
        cp = ord(char)
        if cp == 0 or cp == 0xFFFD or _is_control(char):
            continue
        if _is_whitespace(char):
            out.append(" ")
        elif _is_cjk(cp):
            out.extend((" ", char, " "))
        else:
            out.append(char)
    return "".join(out)


def split_words(text: str) -> list[str]:
    """The words of ``text``, as BERT splits them before WordPiece, case and accents kept:
    whitespace separates words and every punctuation character is a word of its own.

    >>> split_words("Hello, world! 東京")
    ['Hello', ',', 'world', '!', '東', '京']
    """
    words: list[str] = []
    for chunk in _clean(text).split():
        current = ""
        for char in chunk:
            if _is_punctuation(char):
                if current:
                    words.append(current)
                words.append(char)
                current = ""
            else:
                current += char
        if current:
            words.append(current)
    return words


def normalize(text: str) -> str:
    """Strip accents and lowercase: ``"Élan"`` -> ``"elan"``. Accents are the combining marks
    (category Mn) that Unicode's NFD decomposition separates from their letters. Each character
    is lowercased on its own, as Hugging Face's tokenizer does: a final capital sigma becomes
    ``σ``, not Python's context-aware ``ς``."""
    decomposed = unicodedata.normalize("NFD", text)
    stripped = (char for char in decomposed if unicodedata.category(char) != "Mn")
    return "".join(char.lower() for char in stripped)


def wordpiece(
    word: str, vocab: Iterable[str] | set[str], unk: str = "[UNK]", max_chars: int = MAX_WORD_CHARS
) -> list[str]:
    """Cut one normalised word into vocabulary pieces, greedily, longest match first.

    At each position take the longest substring that is in ``vocab`` (written ``"##" + piece``
    after the first piece of the word) and move past it. If at some position no piece matches,
    the whole word is ``[unk]``: BERT never keeps the pieces found before the failure. A word of
    more than ``max_chars`` characters is ``[unk]`` too.

    >>> wordpiece("unaffable", {"un", "una", "##ffa", "##ble", "##aff"})
    ['una', '##ffa', '##ble']
    """
    if len(word) > max_chars:
        return [unk]
    pieces: list[str] = []
    start = 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
            end -= 1
        if end == start:  # nothing in the vocabulary starts here
            return [unk]
        pieces.append(piece)
        start = end
    return pieces


@dataclass
class Encoding:
    """A batch of texts as the model takes it, all ``(B, L)`` int64 except the mask (bool).

    ``attention_mask`` is True at real tokens ([CLS] and [SEP] included) and False at padding:
    the course's mask convention (True = may attend).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor

    def __iter__(self):  # so that ``ids, mask, types = tokenizer(texts)`` works
        return iter((self.input_ids, self.attention_mask, self.token_type_ids))


class WordPieceTokenizer:
    """BERT's uncased tokenizer over a WordPiece vocabulary (one token per line, the line number
    is the id).

    Args:
        vocab: the tokens in id order.
        max_length: the longest sequence ``encode`` makes, [CLS] and [SEP] included (the model's
            number of positions); longer texts are cut, keeping the final [SEP].
    """

    def __init__(self, vocab: Sequence[str], max_length: int = 512):
        self.vocab = {token: i for i, token in enumerate(vocab)}
        self.tokens = list(vocab)
        for special in ("[PAD]", "[UNK]", "[CLS]", "[SEP]"):
            if special not in self.vocab:
                raise ValueError(f"the vocabulary has no {special} token")
        self.pad_id, self.unk_id = self.vocab["[PAD]"], self.vocab["[UNK]"]
        self.cls_id, self.sep_id = self.vocab["[CLS]"], self.vocab["[SEP]"]
        self.max_length = max_length

    @classmethod
    def from_vocab_file(cls, path: str | Path, max_length: int = 512) -> WordPieceTokenizer:
        """Read a ``vocab.txt`` (one token per line)."""
        lines = Path(path).read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return cls(lines, max_length)

    def __len__(self) -> int:
        return len(self.tokens)

    def tokenize(self, text: str) -> list[str]:
        """The WordPiece tokens of ``text``, without [CLS] and [SEP]."""
        return [p for word in split_words(normalize(text)) for p in wordpiece(word, self.vocab)]

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        return [self.vocab.get(token, self.unk_id) for token in tokens]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[int(i)] for i in ids]

    def encode(self, texts: str | Sequence[str]) -> Encoding:
        """``[CLS] tokens [SEP]`` for each text, padded to the longest (at most ``max_length``).

        Returns:
            an ``Encoding`` of ``(B, L)`` tensors: ``input_ids``, ``attention_mask`` (True at real
            tokens) and ``token_type_ids`` (zeros).
        """
        if isinstance(texts, str):
            texts = [texts]
        if not texts:
            raise ValueError("encode needs at least one text, got an empty list")
        rows = []
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"texts must be strings, got {type(text).__name__}")
            ids = self.convert_tokens_to_ids(self.tokenize(text))[: self.max_length - 2]
            rows.append([self.cls_id, *ids, self.sep_id])
        length = max(len(row) for row in rows)
        input_ids = torch.full((len(rows), length), self.pad_id, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
        lengths = torch.tensor([len(row) for row in rows])
        attention_mask = torch.arange(length)[None, :] < lengths[:, None]  # (B, L)
        return Encoding(input_ids, attention_mask, torch.zeros_like(input_ids))

    __call__ = encode
