"""Notebook 11: a real encoder (all-MiniLM-L6-v2) in the course's modules, as data for the runner.

- ``check_wordpiece(wordpiece)``, exercise 1: one normalised word cut greedily into vocabulary
  pieces, longest match first, ``##`` before every piece after the first, ``[unk]`` for a word
  no pieces cover or longer than ``max_chars``. Named: the shortest match taken first, the
  ``##`` prefix forgotten, put on the first piece too, or looked up but left out of the pieces
  returned, the pieces found before a failure kept (with or without ``[unk]``, or an ``[unk]``
  per character skipped), the length limit ignored, off by one or fixed at 100, the ``unk``
  argument ignored, a string instead of a list.
- ``check_tokenize(tokenize)``, exercise 2: every word of ``split_words(text)`` lowercased, its
  accents stripped (NFD, combining marks dropped), cut by the student's ``wordpiece``. Named: no
  lowercasing, no accent stripping, NFD without dropping the marks, the marks dropped without
  NFD (precomposed letters keep their accents), both steps left out, ``casefold`` (``ß`` becomes
  ``ss``), every non-ASCII character dropped, words split on whitespace only, one list per word
  instead of one list of tokens. A mistake of the student's ``wordpiece`` is named there
  (``runner.DEPENDS``).
- ``check_bert_embeddings(BertEmbeddings)``, exercise 3: the module whose embeddings are given;
  the student creates ``self.norm`` and writes ``forward``. The check loads BERT-named tensors
  (``norm`` for BERT's ``LayerNorm``). Named: positions or token types left out (type 0's vector
  not added when ``token_type_ids`` is None), the LayerNorm skipped, applied to the word
  embeddings only, or with PyTorch's default eps 1e-5 (or a fixed 1e-12) instead of the ``eps``
  argument, positions from 1, the input ids used as positions, other parameter names.
- ``check_load_bert_layer(load_bert_layer)``, exercise 4: BERT's tensors of one layer in an
  ``encoder_lib.EncoderLayer``. The layer returned is run in the student's kernel
  (``@observe.scenario("real_encoder.bert_layer")``) on a small input with a padding mask and
  compared with the reference layer (``minilm.bert_layer_state``); its state dict and settings
  come back too, to say which tensor or setting differs. Named: query, key and value stacked in
  the wrong order (or only their biases), a square weight transposed, pre-norm, ReLU (the
  layer's default) or the tanh GELU, the two LayerNorms swapped, eps left at 1e-5, the prefix
  ignored (layer 0 loaded), a dropout other than 0.1, D and d_ff read the wrong way round or a
  rectangular weight transposed (load_state_dict refuses it), a name missing from the weights,
  an object other than an ``EncoderLayer``.
- ``check_sentence_embedding(sentence_embedding)``, exercise 5: the mean over the real tokens,
  then L2 normalisation. Named: the padding averaged in, the vectors normalised before pooling
  (or never), the first token ([CLS]) instead of the mean, max pooling, the normalisation over
  the batch axis, the mask reversed. A sum instead of a mean is right: normalising removes any
  factor of a row.
- ``check_contrastive_loss(contrastive_loss)``, exercise 6: the cross-entropy of
  ``scale * queries @ documents.T`` (N, M) against the diagonal. Named: no scale, a fixed 20, the
  scale dividing, the scores transposed (documents @ queries.T: an error when M > N), the
  positive left out of the denominator, the sum over queries, targets other than the diagonal,
  softmax before the cross-entropy, the softmax over the queries, CLIP's symmetric loss, the
  extra documents dropped, the sign.

The graders never load the real 90 MB weights: the layers and embeddings are tiny random models
in BERT's format (``minilm.random_bert_weights``: D 8 to 16, H 1 to 4, a vocabulary of 12 to
40), and WordPiece runs on small hand-made vocabularies. The library's own answers
(``encoder_lib.wordpiece``, ``encoder_lib.minilm``) and Hugging Face's are forbidden in the
exercises that write them; ``F.cross_entropy`` and ``F.normalize`` are allowed.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from encoder_lib import minilm
from encoder_lib.encoder import EncoderLayer
from encoder_lib.wordpiece import WordPieceTokenizer, normalize, split_words
from encoder_lib.wordpiece import wordpiece as _wordpiece

from .. import runner, vocabulary
from ..feedback import Mistake
from ..kernel import observe
from ..kernel.forbidden import Forbidden
from ..kernel.observe import Call, Failure, Observation
from ..vocabulary import Case, ModuleSpec, backpropagating, keep_first, randn, reference_mode

__all__ = [
    "check_wordpiece",
    "check_tokenize",
    "check_bert_embeddings",
    "check_load_bert_layer",
    "check_sentence_embedding",
    "check_contrastive_loss",
]

_UNK = "[UNK]"


def _vocab(*tokens: str) -> dict[str, int]:
    """A vocabulary as the notebook's: token -> id, [UNK] first."""
    return {token: i for i, token in enumerate(dict.fromkeys((_UNK, *tokens)))}


# --- exercise 1: wordpiece -----------------------------------------------------------------------


def _wordpiece_variant(
    word: str,
    vocab: Mapping[str, int],
    unk: str = _UNK,
    max_chars: int = 100,
    *,
    order: str = "longest",
    prefix: str = "continuation",
    on_fail: str = "unk",
    limit: str = ">",
    fixed_unk: bool = False,
    fixed_max: bool = False,
) -> list[str]:
    """WordPiece written with one deliberate mistake (or none, with the defaults).

    ``order``: ``"longest"`` or ``"shortest"`` match first; ``prefix``: ``"continuation"`` (``##``
    after the first piece), ``"none"`` (never), ``"all"`` (on the first piece too) or
    ``"lookup-only"`` (looked up with ``##``, returned without); ``on_fail``: ``"unk"`` (the whole
    word), ``"keep"`` (the pieces so far), ``"keep+unk"`` (and ``[unk]``) or ``"skip"`` (an
    ``[unk]`` for the character, then go on); ``limit``: ``">"``, ``">="``, ``"> +1"`` or
    ``"none"``; ``fixed_unk``, ``fixed_max``: the arguments ignored ([UNK], 100)."""
    unk = _UNK if fixed_unk else unk
    max_chars = 100 if fixed_max else max_chars
    too_long = {
        ">": len(word) > max_chars,
        ">=": len(word) >= max_chars,
        "> +1": len(word) > max_chars + 1,
        "none": False,
    }[limit]
    if too_long:
        return [unk]
    pieces: list[str] = []
    start = 0
    while start < len(word):
        ends = (
            range(len(word), start, -1) if order == "longest" else range(start + 1, len(word) + 1)
        )
        found = None
        for end in ends:
            sub = word[start:end]
            looked_up = {
                "continuation": sub if start == 0 else "##" + sub,
                "lookup-only": sub if start == 0 else "##" + sub,
                "none": sub,
                "all": "##" + sub,
            }[prefix]
            if looked_up in vocab:
                found = (end, sub if prefix == "lookup-only" else looked_up)
                break
        if found is None:
            if on_fail == "unk":
                return [unk]
            if on_fail == "keep":
                return pieces
            if on_fail == "keep+unk":
                return [*pieces, unk]
            pieces.append(unk)  # "skip": an [unk] for this character, then the next one
            start += 1
            continue
        pieces.append(found[1])
        start = found[0]
    return pieces


_GREEDY = (
    "WordPiece is greedy, longest match first: at each position it tries the longest substring "
    "that is left, then shorter and shorter ones, and takes the first that is in vocab."
)
_WORDPIECE_MISTAKES: list[tuple[Mistake, dict[str, Any]]] = [
    (
        Mistake(
            "shortest-match-first",
            "it takes the shortest piece at each position (a substring of one character first, "
            f"then longer ones). {_GREEDY} The longest piece keeps a word in as few tokens as "
            "possible.",
        ),
        {"order": "shortest"},
    ),
    (
        Mistake(
            "continuation-prefix-forgotten",
            "it never puts ## before a piece: every piece after the first continues a word, and "
            "the vocabulary writes it with the prefix ## (the same letters at the start of a word "
            "are another token). Look up, and return, '##' + the substring for every piece but "
            "the first.",
        ),
        {"prefix": "none"},
    ),
    (
        Mistake(
            "prefix-on-first-piece",
            "it puts ## before the first piece too: ## means 'continues the word', so the piece "
            "at position 0 is looked up and returned without it.",
        ),
        {"prefix": "all"},
    ),
    (
        Mistake(
            "prefix-not-returned",
            "it looks up the continuation pieces with ## but returns them without it: the token "
            "is the vocabulary entry itself, '##' included (the model tells a word's start from "
            "its continuation by it).",
        ),
        {"prefix": "lookup-only"},
    ),
    (
        Mistake(
            "partial-word-kept",
            "when no piece matches at some position it returns the pieces found before, followed "
            "by [unk]. BERT gives up on the whole word: the result is [unk] alone, never part of "
            "the word.",
        ),
        {"on_fail": "keep+unk"},
    ),
    (
        Mistake(
            "partial-word-kept",
            "when no piece matches at some position it returns the pieces found so far. BERT gives "
            "up on the whole word: the result is [unk] alone (a list of one token).",
        ),
        {"on_fail": "keep"},
    ),
    (
        Mistake(
            "partial-word-kept",
            "when no piece matches at some position it adds [unk] for that character and goes on "
            "with the next. BERT gives up on the whole word: the result is [unk] alone.",
        ),
        {"on_fail": "skip"},
    ),
    (
        Mistake(
            "max-chars-argument-ignored",
            "it ignores the max_chars argument (a fixed 100): a word longer than max_chars "
            "characters, whatever max_chars is, gives [unk].",
        ),
        {"fixed_max": True},
    ),
    (
        Mistake(
            "max-chars-off-by-one",
            "the length limit is off by one: it gives [unk] for a word of exactly max_chars "
            "characters. Only a word *longer* than max_chars is [unk].",
        ),
        {"limit": ">="},
    ),
    (
        Mistake(
            "max-chars-off-by-one",
            "the length limit is off by one: a word of max_chars + 1 characters is still split. "
            "Any word longer than max_chars is [unk].",
        ),
        {"limit": "> +1"},
    ),
    (
        Mistake(
            "max-chars-ignored",
            "it splits a word longer than max_chars characters: such a word is [unk] without "
            "being looked at (BERT's limit, which keeps a pathological 'word' from costing a "
            "quadratic search).",
        ),
        {"limit": "none"},
    ),
    (
        Mistake(
            "unk-argument-ignored",
            "it returns '[UNK]' where the unk argument says another token: use the argument (a "
            "vocabulary's unknown token has no fixed spelling, <unk> in some).",
        ),
        {"fixed_unk": True},
    ),
]


def _wordpiece_mistakes(word, vocab, unk, max_chars, first: Sequence[str] = ()) -> dict:
    """{Mistake: the pieces it gives}: ids in ``first`` before the others (where two mistakes
    give the same pieces, the one this case is there to catch)."""
    entries = sorted(_WORDPIECE_MISTAKES, key=lambda e: e[0].id not in first)
    return {m: _wordpiece_variant(word, vocab, unk, max_chars, **kw) for m, kw in entries}


def _pieces_probe(word: str, vocab: Mapping[str, int], unk: str, obs: Observation, ask) -> Any:
    """No catalogue entry matched: what is wrong with the pieces themselves."""
    got = obs.value
    if not isinstance(got, list) or not all(isinstance(p, str) for p in got):
        return None
    if unk in got and len(got) > 1:
        return _WORDPIECE_MISTAKES[4][0]
    for i, piece in enumerate(got):
        if piece != unk and piece not in vocab:
            return Mistake(
                "piece-not-in-vocab",
                f"it returned {piece!r}, which is not in vocab: every piece must be a vocabulary "
                "entry, written as the vocabulary writes it ('##' + the substring after the "
                "first piece).",
            )
        if (i == 0) == piece.startswith("##") and piece != unk:
            return Mistake(
                "continuation-prefix-misplaced",
                f"piece {i} is {piece!r}: the first piece of a word has no ##, and every later "
                "piece has it.",
            )
    if got != [unk] and "".join(p.removeprefix("##") for p in got) != word:
        return Mistake(
            "pieces-do-not-spell-word",
            f"the pieces, without their ##, do not spell {word!r}: each piece starts where the "
            "previous one ended, and together they cover the whole word.",
        )
    return None


def _first_difference(
    expected: Callable[[], list], what: str, obs: Observation, ask: vocabulary.Ask
) -> Mistake | None:
    """The last probe of a list answer: where the tokens first differ from the reference's
    (the runner's generic comparison is for tensors)."""
    got, want = obs.value, expected()
    if not isinstance(got, list) or got == want:
        return None
    for i, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return Mistake(
                "mismatch",
                f"{what} {i} is {a!r} where BERT's gives {b!r} (the {i} before it agree).",
            )
    longer, n = ("more", len(got) - len(want)) if len(got) > len(want) else ("fewer", 0)
    extra = f": {got[len(want) :]!r} after the last right one" if n else ""
    return Mistake(
        "mismatch",
        f"it returns {len(got)} {what}s, {longer} than BERT's {len(want)}{extra}.",
    )


def _list_precheck(name: str, unk: str | None, obs: Observation) -> str | None:
    got, noun = obs.value, "the pieces" if name == "wordpiece" else "the tokens"
    if obs.failure is not None or isinstance(got, list):
        return None
    if isinstance(got, str):
        if got == unk:
            return Mistake(
                "unk-not-in-a-list",
                f"it returned the string {got!r}: an unknown word is [unk], a list of one token, "
                "so that the caller can always add the result to its list of tokens.",
            )
        return Mistake(
            "not-a-list",
            f"it returned the string {got!r}: {name} returns a list of strings, {noun}.",
        )
    return Mistake(
        "not-a-list",
        f"it returned {vocabulary.describe(got)}: {name} returns a list of strings, {noun}.",
    )


def _wordpiece_case(
    word: str,
    vocab: dict[str, int],
    seen: str,
    unk: str | None = None,
    max_chars: int | None = None,
    first: Sequence[str] = (),
) -> Case:
    """``wordpiece(word, vocab)`` (``unk``, ``max_chars`` passed when given); ``seen`` says
    what the case is about in the wording."""
    kwargs: dict[str, Any] = {}
    if unk is not None:
        kwargs["unk"] = unk
    if max_chars is not None:
        kwargs["max_chars"] = max_chars
    actual_unk, actual_max = unk or _UNK, max_chars or 100
    extra = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    shown = word if len(word) <= 24 else f"{word[:10]}...{word[-4:]}"
    return Case(
        Call("wordpiece", "wordpiece", (word, vocab), kwargs),
        f"wordpiece({shown!r}, vocab{extra}) ({seen}, vocab of {len(vocab)} tokens)",
        mistakes=lambda: _wordpiece_mistakes(word, vocab, actual_unk, actual_max, first),
        probes=(
            partial(_pieces_probe, word, vocab, actual_unk),
            partial(
                _first_difference, lambda: _wordpiece(word, vocab, actual_unk, actual_max), "piece"
            ),
        ),
        precheck=partial(_list_precheck, "wordpiece", actual_unk),
    )


# Pieces of "unaffable" (the docstring's example) chosen so that each way of handling ## gives
# its own pieces: plain "ff" and "able" exist, "ffa" only as a continuation.
_UNAFFABLE = _vocab("un", "una", "##una", "##a", "##ff", "##ffa", "##ble", "ff", "able", "b")
_TEN = "abcdefghij"
_LONG = _vocab(_TEN, "##" + _TEN, "abcdefgh", "##a", "##ab", "x", "##x")


def _wordpiece_cases(thorough: bool) -> Iterator[Case]:
    yield _wordpiece_case("unaffable", _UNAFFABLE, "three pieces")
    yield _wordpiece_case(
        "unafz", _UNAFFABLE, "no piece matches at 'fz'", unk="<unk>", first=("partial-word-kept",)
    )
    yield _wordpiece_case(
        _TEN[:8], _LONG, "exactly max_chars characters", max_chars=8,
        first=("max-chars-off-by-one",),
    )  # fmt: skip
    yield _wordpiece_case(_TEN * 10 + "ab", _LONG, "102 characters")
    yield _wordpiece_case(_TEN * 10 + "a", _LONG, "101 characters", first=("max-chars-off-by-one",))
    yield _wordpiece_case(
        _TEN[:8] + "a", _LONG, "max_chars + 1 characters", max_chars=8,
        first=("max-chars-argument-ignored",),
    )  # fmt: skip
    if not thorough:
        return
    letters = _vocab(
        *"abcdefghijklmnopqrstuvwxyz", *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz")
    )
    playing = letters | _vocab("play", "##ing", "##in", "pla", "##yin", "##g", "##s")
    yield _wordpiece_case("playing", playing, "longest pieces 'play' and '##ing'")
    yield _wordpiece_case("plays", playing, "a one-letter continuation")
    yield _wordpiece_case("blorptastic", letters, "only single letters")
    yield _wordpiece_case("play", playing, "one piece, the whole word")
    yield _wordpiece_case("x", _LONG, "a one-character word")
    yield _wordpiece_case("cafe", _UNAFFABLE, "no piece at the first position", unk="[unk]")
    yield _wordpiece_case("ablex", _UNAFFABLE, "no piece at the last position")
    yield _wordpiece_case(_TEN * 10, _LONG, "exactly 100 characters")
    yield _wordpiece_case("abcx", _LONG, "at most max_chars", max_chars=4)
    yield _wordpiece_case("abcxx", _LONG, "one character over max_chars", max_chars=4, unk="?")


check_wordpiece = runner.register_given(
    1,
    'def wordpiece(word, vocab, unk="[UNK]", max_chars=100):',
    _wordpiece_cases,
    reference=_wordpiece,
    forbidden=Forbidden(
        python={
            _wordpiece: "encoder_lib.wordpiece.wordpiece",
            WordPieceTokenizer: "encoder_lib.WordPieceTokenizer",
        },
        by_name={
            "encoder_lib:wordpiece": "encoder_lib.wordpiece",
            "transformers.models.bert.tokenization_bert:WordpieceTokenizer": (
                "transformers' WordpieceTokenizer"
            ),
            "transformers:BertTokenizer": "transformers.BertTokenizer",
        },
    ),
    slots=("the list of pieces",),
)


# --- exercise 2: tokenize ------------------------------------------------------------------------


def _strip(word: str, how: str) -> str:
    if how == "nfd-drop":
        decomposed = unicodedata.normalize("NFD", word)
        return "".join(c for c in decomposed if unicodedata.category(c) != "Mn")
    if how == "nfd-keep":
        return unicodedata.normalize("NFD", word)
    if how == "drop-only":
        return "".join(c for c in word if unicodedata.category(c) != "Mn")
    if how == "ascii":
        decomposed = unicodedata.normalize("NFD", word)
        return decomposed.encode("ascii", "ignore").decode("ascii")
    return word  # "none"


def _tokenize_variant(
    text: str,
    vocab: Mapping[str, int],
    *,
    lower: str = "lower",
    strip: str = "nfd-drop",
    split: str = "words",
    flat: bool = True,
) -> list:
    """tokenize written with one deliberate mistake (or none, with the defaults): ``lower`` is
    ``"lower"``, ``"casefold"`` or ``"none"``; ``strip`` as ``_strip``; ``split`` ``"words"``
    (``split_words``) or ``"whitespace"``; ``flat`` False: one list per word."""
    words = split_words(text) if split == "words" else text.split()
    out: list = []
    for word in words:
        if lower == "lower":
            word = "".join(c.lower() for c in word)
        elif lower == "casefold":
            word = word.casefold()
        pieces = _wordpiece(_strip(word, strip), vocab)
        out += pieces if flat else [pieces]
    return out


def _tokenize_reference(text: str, vocab: Mapping[str, int]) -> list[str]:
    """The notebook's definition: for each word of split_words(text), wordpiece(normalize(word))."""
    return [piece for word in split_words(text) for piece in _wordpiece(normalize(word), vocab)]


_TOKENIZE_MISTAKES: list[tuple[Mistake, dict[str, Any]]] = [
    (
        Mistake(
            "not-normalised",
            "it neither lowercases the words nor strips their accents: the uncased vocabulary has "
            "only lowercase, unaccented tokens, so 'Café' must become 'cafe' before WordPiece.",
        ),
        {"lower": "none", "strip": "none"},
    ),
    (
        Mistake(
            "not-lowercased",
            "it does not lowercase the words: the uncased vocabulary has only lowercase tokens, "
            "so a capital letter makes a word [UNK] or cuts it into other pieces.",
        ),
        {"lower": "none"},
    ),
    (
        Mistake(
            "accents-kept",
            "it does not strip the accents: the uncased vocabulary has 'cafe', not 'café'. NFD "
            "writes an accented letter as the letter followed by a combining mark; drop those "
            "marks (category Mn).",
        ),
        {"strip": "none"},
    ),
    (
        Mistake(
            "marks-not-dropped",
            "it decomposes the words with NFD but keeps the combining marks: 'é' becomes 'e' "
            "followed by a combining acute accent, which is still there for WordPiece. Drop the "
            "characters whose category is 'Mn' after decomposing.",
        ),
        {"strip": "nfd-keep"},
    ),
    (
        Mistake(
            "marks-dropped-without-nfd",
            "it drops the combining marks without decomposing first: a precomposed letter such as "
            "'é' (one character, category Ll) is not a mark, so its accent stays. Decompose with "
            "NFD first, then drop the marks.",
        ),
        {"strip": "drop-only"},
    ),
    (
        Mistake(
            "casefold-not-lower",
            "it lowercases with casefold(), which does more than lowercasing: 'ß' becomes 'ss' "
            "(and 'ﬁ' becomes 'fi'). BERT only lowercases, with lower(), and its vocabulary has "
            "'ß'.",
        ),
        {"lower": "casefold"},
    ),
    (
        Mistake(
            "ascii-only",
            "it drops every character that is not ASCII (encode('ascii', 'ignore')): besides the "
            "accents, that deletes 'ß', CJK characters and every other script. Drop only the "
            "combining marks NFD separates.",
        ),
        {"strip": "ascii"},
    ),
    (
        Mistake(
            "split-on-whitespace",
            "it splits the text on whitespace only, so punctuation stays glued to its word "
            "('cafe,' is looked up whole, and a CJK character is not a word of its own): use "
            "split_words(text), which the setup cell imports.",
        ),
        {"split": "whitespace"},
    ),
    (
        Mistake(
            "list-per-word",
            "it returns one list of pieces per word: tokenize returns one flat list of tokens, "
            "the pieces of every word one after the other (extend the list with a word's "
            "pieces, rather than append them as one item).",
        ),
        {"flat": False},
    ),
]


def _tokenize_case(text: str, vocab: dict[str, int], seen: str) -> Case:
    def mistakes() -> dict:
        return {m: _tokenize_variant(text, vocab, **kw) for m, kw in _TOKENIZE_MISTAKES}

    return Case(
        Call("tokenize", "tokenize", (text, vocab)),
        f"tokenize({text!r}, vocab) ({seen}, vocab of {len(vocab)} tokens)",
        mistakes=mistakes,
        probes=(partial(_first_difference, lambda: _tokenize_reference(text, vocab), "token"),),
        precheck=partial(_list_precheck, "tokenize", None),
    )


# "Café" is precomposed and "e\u0301te" written with a combining accent, so that each way of
# stripping accents gives its own tokens; "caf" + "##é" and "stra" + "##sse" exist for the
# mistakes to reach; "unaffable" needs three pieces, so that a mistake of wordpiece shows too.
_TEXT_VOCAB = _UNAFFABLE | _vocab(
    "cafe", "caf", "##é", ",", "creme", "ete", "straße", "stra", "##sse", "##e", "東", "!"
)
_LOWER = _vocab(
    *"abcdefghijklmnopqrstuvwxyz", *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"),
    "the", "naive", "resume", "##s", "isn", "'", "t", "it", ".", "2", "##nd", "東", "京", "is",
    "tokyo", "über", "alles", "ü",
)  # fmt: skip


def _tokenize_cases(thorough: bool) -> Iterator[Case]:
    yield _tokenize_case(
        "Café, CRÈME e\u0301te Straße 東! Unaffable unafz", _TEXT_VOCAB, "accents, ß, an [UNK]"
    )
    yield _tokenize_case("The NAÏVE résumés isn't it.", _LOWER, "every letter in vocab")
    if thorough:
        yield _tokenize_case("東京 is Tokyo.", _LOWER, "CJK characters")
        yield _tokenize_case("  Über   alles\t2nd! ", _LOWER, "spaces, tabs, a number")
        yield _tokenize_case("unafz caf\u00e9 Ete", _TEXT_VOCAB, "an [UNK] in the middle")
        yield _tokenize_case("", _TEXT_VOCAB, "the empty text")
        yield _tokenize_case("ÉTÉ, éte!", _TEXT_VOCAB, "capital accented letters")


check_tokenize = runner.register_given(
    2,
    "def tokenize(text, vocab):",
    _tokenize_cases,
    reference=_tokenize_reference,
    forbidden=Forbidden(
        python={
            normalize: "encoder_lib.wordpiece.normalize",
            WordPieceTokenizer: "encoder_lib.WordPieceTokenizer",
        },
        by_name={
            "transformers:BertTokenizer": "transformers.BertTokenizer",
            "transformers.models.bert.tokenization_bert:BasicTokenizer": (
                "transformers' BasicTokenizer"
            ),
        },
    ),
    slots=("the list of tokens",),
)


# --- exercise 3: BertEmbeddings ------------------------------------------------------------------

_EMBEDDING_NAMES = (
    "word_embeddings.weight",
    "position_embeddings.weight",
    "token_type_embeddings.weight",
    "norm.weight",
    "norm.bias",
)


def _embedding_state(config: minilm.BertConfig, seed: int, dtype: torch.dtype) -> dict:
    """BERT's embedding tensors of a random model, under the notebook's names (``norm``)."""
    weights = minilm.random_bert_weights(config, seed, dtype)
    return {
        name.removeprefix("embeddings.").replace("LayerNorm", "norm"): t
        for name, t in weights.items()
        if name.startswith("embeddings.")
    }


def _embeddings_variant(
    state: Mapping[str, torch.Tensor],
    ids: torch.Tensor,
    types: torch.Tensor | None,
    *,
    eps: float,
    positions: str = "arange",
    token_types: str = "given",
    norm: str = "sum",
) -> torch.Tensor:
    """BertEmbeddings' forward written with one deliberate mistake (or none): ``positions``
    ``"arange"``, ``"from-one"``, ``"ids"`` or ``"none"``; ``token_types`` ``"given"``, ``"none"``
    or ``"only-given"`` (nothing added when None); ``norm`` ``"sum"`` (the LayerNorm of the sum),
    ``"none"`` or ``"word"`` (of the word embeddings only); ``eps`` the LayerNorm's."""
    L = ids.shape[1]
    word = state["word_embeddings.weight"][ids]
    x = word if norm != "word" else F.layer_norm(word, word.shape[-1:], eps=eps)
    x = x * state["norm.weight"] + state["norm.bias"] if norm == "word" else x
    pos = {
        "arange": torch.arange(L),
        "from-one": torch.arange(1, L + 1),
        "ids": ids,
        "none": None,
    }[positions]
    if pos is not None:
        x = x + state["position_embeddings.weight"][pos]
    if token_types == "given" or (token_types == "only-given" and types is not None):
        x = (
            x
            + state["token_type_embeddings.weight"][
                torch.zeros_like(ids) if types is None else types
            ]
        )
    if norm != "sum":
        return x
    return F.layer_norm(x, x.shape[-1:], state["norm.weight"], state["norm.bias"], eps)


def _embeddings_mistakes(state, ids, types, eps: float, max_len: int) -> dict:
    variant = partial(_embeddings_variant, state, ids, types, eps=eps)
    length = ids.shape[1]
    m: dict[Mistake, torch.Tensor] = {}
    if types is None:
        m[
            Mistake(
                "type-zero-not-added",
                "with token_type_ids=None it adds no token-type vector: None means every token is "
                "of type 0, and type 0's vector is added all the same (the model was trained "
                "with it).",
            )
        ] = variant(token_types="only-given")
    else:
        m[
            Mistake(
                "no-token-types",
                "it leaves the token-type embeddings out: e_t is the sum of three vectors, the "
                "word's, the position's and the token type's (type 0 for every token when "
                "token_type_ids is None).",
            )
        ] = variant(token_types="none")
    m[
        Mistake(
            "no-positions",
            "it leaves the position embeddings out: without them the layers cannot tell the "
            "order of the tokens. Add position t's vector to token t, for t = 0, ..., L - 1.",
        )
    ] = variant(positions="none")
    if length < max_len:  # position L exists
        m[
            Mistake(
                "positions-from-one",
                "its positions start at 1: the first token (position 0, [CLS]) gets the second "
                "position vector. The positions are 0, 1, ..., L - 1.",
            )
        ] = variant(positions="from-one")
    if int(ids.max()) < max_len:
        m[
            Mistake(
                "ids-as-positions",
                "it looks the position embeddings up with the input ids: a token's position is "
                "where it stands in the sentence (0, 1, ..., L - 1), whatever the token is.",
            )
        ] = variant(positions="ids")
    m[
        Mistake(
            "no-layer-norm",
            "it returns the sum without the LayerNorm: BERT normalises the sum of the three "
            "embeddings (self.norm, with the eps given).",
        )
    ] = variant(norm="none")
    m[
        Mistake(
            "norm-on-word-embeddings",
            "it normalises the word embeddings alone, then adds the others: the LayerNorm "
            "applies to the sum of the three.",
        )
    ] = variant(norm="word")
    if eps != 1e-5:
        m[
            Mistake(
                "eps-default",
                f"its LayerNorm uses PyTorch's default eps 1e-5 instead of the eps argument "
                f"({eps:g}): the embeddings are small (variance about 1e-3), so 1e-5 changes "
                "every output. Give the LayerNorm the eps that __init__ receives.",
            )
        ] = variant(eps=1e-5)
    if eps != 1e-12:
        m[
            Mistake(
                "eps-argument-ignored",
                f"its LayerNorm uses eps 1e-12 whatever the eps argument says ({eps:g} here): give "
                "it the eps that __init__ receives.",
            )
        ] = variant(eps=1e-12)
    return m


def _embeddings_hint(failure: Failure) -> Mistake | None:
    if "index out of range" in failure.message:
        return Mistake(
            "index-out-of-range",
            "An embedding was looked up with an index past the end of its table: the position "
            "table is looked up with the positions 0, ..., L - 1 (not with the input ids, which "
            "run up to the vocabulary's size), and the token-type table with token_type_ids: "
            "check which ids go into which table.",
        )
    return None


def _embeddings_case(
    V: int,
    D: int,
    shape: tuple[int, int],
    seed: int,
    *,
    with_types: bool = True,
    max_len: int | None = None,
    type_vocab_size: int | None = None,
    eps: float | None = None,
    dtype: torch.dtype = torch.float64,
    backward: bool = False,
) -> Case:
    kwargs = {
        k: v
        for k, v in (("max_len", max_len), ("type_vocab_size", type_vocab_size), ("eps", eps))
        if v is not None
    }
    config = minilm.BertConfig(V, D, max_len=max_len or 512, type_vocab_size=type_vocab_size or 2)
    state = _embedding_state(config, seed, dtype)
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, V, shape, generator=g)
    types = torch.randint(0, config.type_vocab_size, shape, generator=g) if with_types else None
    actual_eps = 1e-12 if eps is None else eps
    with torch.random.fork_rng(devices=[]):  # its random initialisation, replaced at once
        module = minilm.BertEmbeddings(V, D, config.max_len, config.type_vocab_size, actual_eps)
    module = module.to(dtype)
    module.load_state_dict(state)
    module.eval()
    args = (ids, types) if with_types else (ids,)
    shown = "".join(f", {k}={v:g}" if k == "eps" else f", {k}={v}" for k, v in kwargs.items())
    what = (
        f"BertEmbeddings({V}, {D}{shown})(input_ids{', token_type_ids' if with_types else ''}) "
        f"with input_ids of shape {shape}{'' if dtype == torch.float64 else f' ({dtype})'}"
    )
    case = Case(
        Call(
            "BertEmbeddings",
            "bert_embeddings",
            args,
            init=((V, D), kwargs),
            dtype=dtype,
            state=state,
            inspect=True,
        ),
        what,
        reference=module,
        mistakes=lambda: _embeddings_mistakes(state, ids, types, actual_eps, config.max_len),
    )
    if backward:
        case = backpropagating(
            case, randn(*shape, D, seed=seed + 2).to(dtype), grad=("parameters",)
        )
    return case


def _embeddings_cases(thorough: bool) -> Iterator[Case]:
    # ids below max_len in the first and third: the ids looked up as positions give values
    yield _embeddings_case(40, 8, (2, 5), seed=1100, max_len=48)
    yield _embeddings_case(40, 8, (3, 4), seed=1110, with_types=False, max_len=16)
    yield _embeddings_case(12, 6, (2, 7), seed=1120, max_len=20, type_vocab_size=3, eps=1e-6)
    if thorough:
        yield _embeddings_case(30, 16, (2, 6), seed=1130, dtype=torch.float32)
        yield _embeddings_case(25, 8, (1, 10), seed=1140, max_len=10, with_types=False)
        yield _embeddings_case(20, 4, (4, 1), seed=1150, max_len=8, eps=1e-3)
        yield _embeddings_case(40, 8, (2, 5), seed=1160, max_len=16, backward=True)


check_bert_embeddings = runner.register_given(
    3,
    "class BertEmbeddings(nn.Module):",
    _embeddings_cases,
    forbidden=Forbidden(
        python={minilm.BertEmbeddings: "encoder_lib.BertEmbeddings"},
        by_name={
            "transformers.models.bert.modeling_bert:BertEmbeddings": "transformers' BertEmbeddings"
        },
    ),
    slots=("the output",),
    letters=("(B, L, D)",),
    inputs={"args[0]": "input_ids", "args[1]": "token_type_ids"},
    failure_hint=_embeddings_hint,
    module=ModuleSpec(
        parameters=_EMBEDDING_NAMES,
        names_message=(
            "BertEmbeddings has the parameters {got}, but {expected} were expected: the check "
            "loads BERT's tensors by these names, the LayerNorm's into norm.weight and norm.bias. "
            "Keep the given embeddings and create the LayerNorm as self.norm (nn.LayerNorm or "
            "encoder_lib.LayerNorm, with its weight and bias)."
        ),
        not_module_message=(
            "{call} should build an nn.Module: keep the given `class BertEmbeddings(nn.Module)` "
            "and its __init__."
        ),
    ),
)


# --- exercise 4: load_bert_layer -----------------------------------------------------------------

_LAYER_SCENARIO = "real_encoder.bert_layer"
_QKV = ("query", "key", "value")


@observe.scenario(_LAYER_SCENARIO)
def _run_bert_layer(lookup: Callable[[str], Any], call: Call) -> Observation:
    """In the student's kernel: ``load_bert_layer(weights, prefix, num_heads)`` on a copy of the
    weights; the layer returned is put in train or eval mode and run on ``options["x"]`` with
    ``options["mask"]``. The value is its output; ``info["layer"]`` says what was returned and,
    for an ``EncoderLayer``, its state dict and settings."""
    target = observe.lookup_target(lookup, call.target)
    obs = Observation(
        info={"target": observe.kind_of(target), "globals": observe.global_names(target)}
    )
    if not callable(target) or isinstance(target, type):
        return obs
    weights, prefix, heads = call.args
    weights = {name: t.detach().clone() for name, t in weights.items()}
    x, mask = call.options["x"].clone(), call.options["mask"].clone()
    with observe.student_mode(call.exercise, call.seed) as seen:
        try:
            layer = target(weights, prefix, heads)
            facts: dict[str, Any] = {
                "type": f"{type(layer).__module__}.{type(layer).__qualname__}",
                "is_encoder_layer": isinstance(layer, EncoderLayer),
            }
            obs.info["layer"] = facts
            if isinstance(layer, EncoderLayer):
                facts["state"] = {k: v.detach().clone() for k, v in layer.state_dict().items()}
                facts["settings"] = _settings(layer)
                layer.train(call.train)
                with torch.no_grad():
                    value = layer(x, mask)
                obs.value, obs.info["tensors"] = observe.export_value(value)
        except Exception as error:  # anything the student's code raised is observed, not raised
            obs.failure = observe.failure_of(error, "call", seen)
        if seen and obs.failure is None:
            obs.failure = Failure("forbidden", seen[0], "", "call")
    return obs


def _settings(layer: EncoderLayer) -> dict[str, Any]:
    """Plain facts about the layer's configuration (read defensively: a student's subclass may
    lack any of them)."""
    activation = getattr(layer, "activation", None)

    def number(value: Any) -> Any:
        return value if isinstance(value, int | float | bool) else None

    return {
        "norm_first": number(getattr(layer, "norm_first", None)),
        "activation": activation if isinstance(activation, str) else _callable_name(activation),
        "eps1": number(getattr(getattr(layer, "norm1", None), "eps", None)),
        "eps2": number(getattr(getattr(layer, "norm2", None), "eps", None)),
        "dropout": number(getattr(getattr(layer, "dropout", None), "p", None)),
        "num_heads": number(getattr(getattr(layer, "self_attn", None), "num_heads", None)),
    }


def _callable_name(fn: Any) -> str:
    if fn is F.gelu:
        return "gelu"
    if fn is F.relu:
        return "relu"
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def _bert_layer(
    weights: Mapping[str, torch.Tensor],
    prefix: str,
    heads: int,
    *,
    order: Sequence[str] = _QKV,
    bias_order: Sequence[str] | None = None,
    transposed: Sequence[str] = (),
    norm_first: bool = False,
    activation: str = "gelu",
    norms_swapped: bool = False,
    eps: float = 1e-12,
    dropout: float = 0.1,
) -> EncoderLayer:
    """BERT's layer under ``prefix`` as an ``EncoderLayer``, with one deliberate mistake (or none,
    with the defaults): q, k, v stacked in ``order`` (their biases in ``bias_order``), the BERT
    weights named in ``transposed`` transposed, the settings given, the norms swapped."""
    w = {name[len(prefix) :]: t for name, t in weights.items() if name.startswith(prefix)}
    for name in transposed:
        w[name] = w[name].T
    d_ff, d_model = w["intermediate.dense.weight"].shape
    with torch.random.fork_rng(devices=[]):  # its random initialisation, replaced at once
        layer = EncoderLayer(
            d_model,
            heads,
            d_ff,
            dropout,
            "relu" if activation == "relu" else "gelu",
            norm_first,
            eps,
        )
    if activation == "tanh":
        layer.activation = partial(F.gelu, approximate="tanh")
    attn = "attention.self."
    state = {
        "self_attn.in_proj_weight": torch.cat([w[f"{attn}{p}.weight"] for p in order]),
        "self_attn.in_proj_bias": torch.cat([w[f"{attn}{p}.bias"] for p in bias_order or order]),
    }
    for theirs, ours in minilm.BERT_LAYER_NAMES.items():
        state[ours] = w[theirs]
    if norms_swapped:
        for p in ("weight", "bias"):
            state[f"norm1.{p}"], state[f"norm2.{p}"] = state[f"norm2.{p}"], state[f"norm1.{p}"]
    layer = layer.to(weights[prefix + "intermediate.dense.weight"].dtype)
    layer.load_state_dict(state)
    return layer


def _layer_output(layer: EncoderLayer, x: torch.Tensor, mask: torch.Tensor, train: bool, seed: int):
    layer.train(train)
    with reference_mode(seed), torch.no_grad():
        return layer(x.clone(), mask.clone())


def _layer_mistakes(weights, prefix, heads, x, mask, train, seed, d_ff, d_model) -> dict:
    def out(at: str = prefix, **mistake: Any) -> torch.Tensor:
        return _layer_output(_bert_layer(weights, at, heads, **mistake), x, mask, train, seed)

    m: dict[Mistake, torch.Tensor] = {}
    for order in [(a, b, c) for a in _QKV for b in _QKV for c in _QKV if len({a, b, c}) == 3]:
        if order == _QKV:
            continue
        stacked = ", ".join(order)
        m[
            Mistake(
                "qkv-wrong-order",
                f"in_proj_weight stacks the projections in the order {stacked}: EncoderLayer's "
                "attention reads its first D rows as W_Q, the next D as W_K and the last D as "
                "W_V, and in_proj_bias the same way.",
            )
        ] = out(order=order)
        m[
            Mistake(
                "qkv-bias-wrong-order",
                f"the weights are stacked right, but in_proj_bias stacks the biases in the order "
                f"{stacked}: the biases follow the weights, query's first, then key's, then "
                "value's.",
            )
        ] = out(bias_order=order)
    square = [f"attention.self.{p}.weight" for p in _QKV] + ["attention.output.dense.weight"]
    if d_ff == d_model:
        square += ["intermediate.dense.weight", "output.dense.weight"]
    transposed = Mistake(
        "weight-transposed",
        "{name} is loaded transposed: nn.Linear stores its weight as (out features, in features) "
        "in BERT and in the course alike, so every tensor is copied as it is. A transposed "
        "square weight loads without complaint and computes something else.",
    )
    for name in square:
        m[transposed.format(name=name)] = out(transposed=(name,))
    m[transposed.format(name="every square weight")] = out(transposed=square)
    m[
        Mistake(
            "pre-norm",
            "the layer is pre-norm (norm_first=True): BERT's layer is post-norm, the LayerNorm "
            "after each residual sum, h = LN_1(x + MHA(x)), as in the original Transformer.",
        )
    ] = out(norm_first=True)
    m[
        Mistake(
            "relu-not-gelu",
            "the feed-forward network uses ReLU, EncoderLayer's default activation: BERT's uses "
            "the exact GELU, x·Φ(x) (activation='gelu').",
        )
    ] = out(activation="relu")
    m[
        Mistake(
            "tanh-gelu",
            "the feed-forward network uses the tanh approximation of GELU: this model uses the "
            "exact GELU, x·Φ(x) (F.gelu without approximate, activation='gelu').",
        )
    ] = out(activation="tanh")
    m[
        Mistake(
            "norms-swapped",
            "the two LayerNorms are swapped: attention.output.LayerNorm follows the attention "
            "(norm1) and output.LayerNorm the feed-forward network (norm2).",
        )
    ] = out(norms_swapped=True)
    m[
        Mistake(
            "eps-default",
            "the LayerNorms use the default eps 1e-5: BERT's are 1e-12 (layer_norm_eps). The "
            "sums they normalise can be small, and 1e-5 then changes them.",
        )
    ] = out(eps=1e-5)
    if prefix != "encoder.layer.0.":
        m[
            Mistake(
                "prefix-ignored",
                f"it loads layer 0's tensors, but prefix is {prefix!r}: read the tensors whose "
                "names start with the prefix given.",
            )
        ] = out("encoder.layer.0.")
    if train:
        m[
            Mistake(
                "dropout-not-0-1",
                "its dropout is not 0.1: in training mode the values differ from BERT's layer "
                "with dropout 0.1, the probability it was trained with (build the layer with "
                "dropout=0.1).",
            )
        ] = out(dropout=0.0)
    return m


def _layer_precheck(obs: Observation) -> str | None:
    if obs.failure is not None:
        return None
    facts = obs.info.get("layer")
    if facts is None:
        return None
    if not facts.get("is_encoder_layer"):
        kind = str(facts.get("type", "?")).removeprefix("builtins.")
        got = "None (no `return`?)" if kind == "NoneType" else f"a {kind}"
        return Mistake(
            "not-an-encoder-layer",
            f"it returned {got}: load_bert_layer returns the encoder_lib.EncoderLayer it built, "
            "holding the layer's weights.",
        )
    return None


def _layer_probe(weights, prefix, heads, train, obs: Observation, ask) -> str | None:
    """No catalogue entry matched: which setting or which tensor differs from BERT's layer."""
    facts = obs.info.get("layer") or {}
    settings, state = facts.get("settings") or {}, facts.get("state") or {}
    right = {
        "norm_first": (False, "the layer is pre-norm: BERT's is post-norm (norm_first=False)."),
        "activation": ("gelu", "its activation is {got}: BERT's is the exact GELU ('gelu')."),
        "eps1": (1e-12, "norm1's eps is {got}: BERT's LayerNorms use 1e-12."),
        "eps2": (1e-12, "norm2's eps is {got}: BERT's LayerNorms use 1e-12."),
        "num_heads": (heads, "its attention has {got} heads: use num_heads."),
    }
    if train:
        right["dropout"] = (0.1, "its dropout is {got}: BERT's is 0.1.")
    for key, (want, message) in right.items():
        got = settings.get(key)
        if got is not None and got != want:
            return Mistake("wrong-setting", message.format(got=got))
    expected = minilm.bert_layer_state(dict(weights), prefix)
    for name, want in expected.items():
        got = state.get(name)
        if isinstance(got, torch.Tensor) and not vocabulary.close(got, want, 0.0, 0.0):
            return Mistake(
                "wrong-tensor",
                f"its {name} does not hold BERT's tensor for it (see the table above the "
                "exercise for which of BERT's names goes where; q, k and v are stacked in that "
                "order).",
            )
    return None


def _layer_hint(failure: Failure) -> Mistake | None:
    message = failure.message
    if "size mismatch" in message:
        return Mistake(
            "shape-mismatch-on-load",
            "load_state_dict found a tensor whose shape is not the layer's: nn.Linear stores its "
            "weight as (out features, in features) in both libraries, so "
            "intermediate.dense.weight is (d_ff, D). Read D and d_ff from it in that order, and "
            "copy every weight as it is, without transposing.",
        )
    if "Missing key" in message or "Unexpected key" in message:
        return Mistake(
            "state-dict-names",
            "load_state_dict got other names than the EncoderLayer's parameters: build the "
            "dictionary with exactly the names of the layer's state dict (self_attn.in_proj_"
            "weight, ..., norm2.bias), as in the table above the exercise.",
        )
    if failure.error == "KeyError":
        return Mistake(
            "name-not-in-weights",
            "A name it looked up is not in weights: every tensor of the layer is "
            "weights[prefix + BERT's name], with the prefix given (which ends with a dot).",
        )
    if "divisible" in message:
        return Mistake(
            "num-heads-ignored",
            "D is not divisible by the number of heads the layer was built with: pass num_heads, "
            "the argument.",
        )
    return None


def _layer_case(
    D: int,
    H: int,
    d_ff: int,
    layers: int,
    index: int,
    lengths: Sequence[int],
    seed: int,
    train: bool = False,
) -> Case:
    config = minilm.BertConfig(20, D, H, d_ff, num_layers=layers, max_len=16)
    weights = minilm.random_bert_weights(config, seed)
    for name in weights:  # a small attention output, so that the first LayerNorm's eps shows
        if name.endswith(("attention.self.value.bias", "attention.output.dense.weight")):
            weights[name] = weights[name] * 0.1
        elif name.endswith("attention.output.dense.bias"):
            weights[name] = weights[name] * 0.02
    prefix = f"encoder.layer.{index}."
    B, L = len(lengths), max(lengths)
    x = randn(B, L, D, seed=seed + 1).to(torch.float32) * 0.02
    mask = keep_first(lengths, L)
    reference = _bert_layer(weights, prefix, H)
    mode = "train" if train else "eval"
    return Case(
        Call(
            "load_bert_layer",
            "load_bert_layer",
            (weights, prefix, H),
            train=train,
            scenario=_LAYER_SCENARIO,
            options={"x": x, "mask": mask},
            seed=seed,
        ),
        f"load_bert_layer(weights, {prefix!r}, num_heads={H}) for D={D}, d_ff={d_ff}, the "
        f"layer then run in {mode} mode on x of shape {(B, L, D)} with a padding mask",
        expected=_layer_output(reference, x, mask, train, seed),
        mistakes=lambda: _layer_mistakes(weights, prefix, H, x, mask, train, seed, d_ff, D),
        probes=(partial(_layer_probe, weights, prefix, H, train),),
        precheck=_layer_precheck,
    )


def _layer_cases(thorough: bool) -> Iterator[Case]:
    yield _layer_case(8, 2, 16, 2, 1, [5, 3], seed=1200)
    yield _layer_case(8, 4, 8, 1, 0, [4, 2], seed=1210, train=True)  # d_ff = D: all square
    if thorough:
        yield _layer_case(16, 4, 24, 3, 2, [6, 6, 2], seed=1220)
        yield _layer_case(12, 3, 20, 2, 0, [3, 1], seed=1230, train=True)
        yield _layer_case(8, 1, 12, 1, 0, [1], seed=1240)


check_load_bert_layer = runner.register_given(
    4,
    "def load_bert_layer(weights, prefix, num_heads):",
    _layer_cases,
    forbidden=Forbidden(
        python={
            minilm.bert_layer_state: "encoder_lib.minilm.bert_layer_state",
            minilm.BertEncoder: "encoder_lib.BertEncoder",
            minilm.load_minilm: "encoder_lib.load_minilm",
        },
        by_name={
            "transformers.models.bert.modeling_bert:BertLayer": "transformers' BertLayer",
        },
    ),
    slots=("the output of the layer returned",),
    letters=("(B, L, D)",),
    failure_hint=_layer_hint,
)


# --- exercise 5: sentence_embedding --------------------------------------------------------------


def _masked_mean(h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    k = keep.to(h.dtype).unsqueeze(-1)
    return (h * k).sum(1) / k.sum(1)


def _pooling_mistakes(h: torch.Tensor, keep: torch.Tensor) -> dict:
    unit = partial(F.normalize, dim=-1)
    with torch.no_grad():
        masked = _masked_mean(h, keep)
        m = {
            Mistake(
                "padding-averaged",
                "it averages over every position, padding included: the padding's vectors are "
                "not zero, so they pull the mean. Average over the real tokens only (where "
                "attention_mask is True), dividing by their number.",
            ): unit(h.mean(1)),
            Mistake(
                "normalised-before-pooling",
                "it scales each token's vector to length 1 before averaging: the model's "
                "sentence vector is the mean of the raw vectors, normalised once at the end.",
            ): _masked_mean(unit(h), keep),
            Mistake(
                "normalised-before-pooling",
                "it scales each token's vector to length 1 before averaging: the model's "
                "sentence vector is the mean of the raw vectors, normalised once, after pooling.",
            ): unit(_masked_mean(unit(h), keep)),
            Mistake(
                "not-normalised",
                "it returns the mean without scaling it to length 1: the sentence vector is the "
                "mean divided by its L2 norm, so that dot products are cosine similarities.",
            ): masked,
            Mistake(
                "not-normalised",
                "it returns the sum of the real tokens' vectors, not scaled to length 1: divide "
                "by the L2 norm (which makes a sum and a mean the same vector).",
            ): (h * keep.unsqueeze(-1)).sum(1),
            Mistake(
                "cls-pooling",
                "it takes the first token's vector ([CLS]): this model was trained with the mean "
                "over the real tokens, and its [CLS] vector is a poor sentence vector.",
            ): unit(h[:, 0]),
            Mistake(
                "cls-pooling",
                "it takes the first token's vector ([CLS]), not normalised: the model's sentence "
                "vector is the mean over the real tokens, scaled to length 1.",
            ): h[:, 0],
            Mistake(
                "max-pooling",
                "it takes the largest value of each feature over the tokens (max pooling): this "
                "model was trained with the mean over the real tokens.",
            ): unit(h.masked_fill(~keep.unsqueeze(-1), float("-inf")).amax(1)),
            Mistake(
                "max-pooling",
                "it takes the largest value of each feature over every position (max pooling, "
                "padding included): the model uses the mean over the real tokens.",
            ): unit(h.amax(1)),
            Mistake(
                "normalised-over-batch",
                "it normalises over the batch axis: each sentence's vector is divided by its own "
                "L2 norm, over its D features (dim=-1).",
            ): F.normalize(masked, dim=0),
        }
        if bool((~keep).any(1).all()):
            m[
                Mistake(
                    "mask-reversed",
                    "it averages the padding and leaves the real tokens out: attention_mask is "
                    "True at the real tokens.",
                )
            ] = unit(_masked_mean(h, ~keep))
    return m


def _pooling_case(
    lengths: Sequence[int], L: int, D: int, seed: int, dtype=torch.float64, backward=False
) -> Case:
    B = len(lengths)
    keep = keep_first(lengths, L, extra_axes=0)  # (B, L)
    h = randn(B, L, D, seed=seed) + 0.5
    h = torch.where(keep.unsqueeze(-1), h, randn(B, L, D, seed=seed + 1) * 3.0 - 2.0).to(dtype)
    padding = ~keep.unsqueeze(-1).expand(B, L, D)
    leak = vocabulary.Unchanged(
        Call("sentence_embedding", "sentence_embedding", (h, keep)),
        (vocabulary.redrawn(h, padding, seed + 2, 4.0), keep),
        Mistake(
            "padding-leaks",
            "changing the padding's vectors changes the result: only the real tokens (where "
            "attention_mask is True) may count in the mean.",
        ),
        when=bool(padding.any()),
    )

    def unit_probe(obs: Observation, ask) -> str | None:
        got = obs.value
        if isinstance(got, torch.Tensor) and got.shape == (B, D) and got.is_floating_point():
            norms = got.double().norm(dim=-1)
            if not vocabulary.close(norms, torch.ones_like(norms), 1e-5, 1e-4):
                return Mistake(
                    "not-unit-length",
                    "the vectors it returns do not have length 1: divide each sentence's vector "
                    "by its L2 norm over the D features, after pooling.",
                )
        return None

    case = Case(
        Call("sentence_embedding", "sentence_embedding", (h, keep)),
        f"sentence_embedding(hidden, attention_mask) with hidden of shape {(B, L, D)}"
        f"{'' if dtype == torch.float64 else f' ({dtype})'} and lengths {list(lengths)}",
        mistakes=lambda: _pooling_mistakes(h, keep),
        probes=(leak, unit_probe),
        shape_hints=(
            {
                (B, L): Mistake(
                    "pooled-over-features",
                    "That is one number per token: it averages over the D features (dim=-1). The "
                    "mean runs over the tokens, dim 1.",
                ),
                (B, 1, D): Mistake(
                    "keepdim-left-on",
                    "Drop the length-1 axis (keepdim=True on the sum over the tokens): one vector "
                    "per sentence.",
                ),
            },
        ),
    )
    if backward:
        case = backpropagating(case, randn(B, D, seed=seed + 3).to(dtype), grad=("args[0]",))
    return case


def _pooling_cases(thorough: bool) -> Iterator[Case]:
    yield _pooling_case([5, 3], 5, 6, seed=1300)
    yield _pooling_case([2, 4, 1], 4, 8, seed=1310)
    if thorough:
        yield _pooling_case([7, 2, 5, 3], 7, 16, seed=1320, dtype=torch.float32)
        yield _pooling_case([4], 4, 3, seed=1330)
        yield _pooling_case([1, 3, 2], 6, 5, seed=1340)
        yield _pooling_case([5, 3], 5, 6, seed=1350, backward=True)


check_sentence_embedding = runner.register_given(
    5,
    "def sentence_embedding(hidden, attention_mask):",
    _pooling_cases,
    reference=minilm.sentence_embedding,
    forbidden=Forbidden(
        python={
            minilm.sentence_embedding: "encoder_lib.sentence_embedding",
            minilm.mean_pool: "encoder_lib.mean_pool",
        }
    ),
    letters=("(B, D)",),
    inputs={"args[0]": "hidden", "args[1]": "attention_mask"},
    slots=("the tensor of sentence vectors",),
)


# --- exercise 6: contrastive_loss ----------------------------------------------------------------


def _loss_mistakes(q: torch.Tensor, d: torch.Tensor, scale: float) -> dict:
    N, M = q.shape[0], d.shape[0]
    targets = torch.arange(N)
    with torch.no_grad():
        scores = scale * q @ d.T  # (N, M)
        m = {
            Mistake(
                "no-scale",
                "it leaves the scale out: cosine similarities lie in [-1, 1], so without the "
                "scale the softmax can never be confident. Multiply the similarities by scale.",
            ): F.cross_entropy(q @ d.T, targets),
            Mistake(
                "divided-by-scale",
                "it divides the similarities by scale: the scale multiplies them (it is an inverse "
                "temperature, 20 here).",
            ): F.cross_entropy(q @ d.T / scale, targets),
            Mistake(
                "positive-not-in-denominator",
                "it leaves the positive out of the softmax's denominator: the loss is the "
                "cross-entropy over all M documents, query i's own document included.",
            ): (
                -scores.diagonal()
                + scores.masked_fill(torch.eye(N, M, dtype=torch.bool), float("-inf")).logsumexp(1)
            ).mean(),
            Mistake(
                "summed-over-queries",
                "it sums the N queries' losses: the loss is their mean (so that its size does not "
                "grow with the batch).",
            ): F.cross_entropy(scores, targets, reduction="sum"),
            Mistake(
                "targets-not-diagonal",
                "its targets are all 0: query i's positive is document i, so the targets are "
                "0, 1, ..., N - 1 (the diagonal of the score matrix).",
            ): F.cross_entropy(scores, torch.zeros_like(targets)),
            Mistake(
                "softmax-before-cross-entropy",
                "it applies softmax before F.cross_entropy, which applies log-softmax itself: "
                "pass it the scaled scores.",
            ): F.cross_entropy(scores.softmax(-1), targets),
            Mistake(
                "scores-transposed",
                "its softmax runs over the queries instead of the documents (a softmax over dim "
                "0, or the score matrix transposed, documents @ queries.T): the rows are the N "
                "queries and the columns the M documents, (N, M), and each query's own document "
                "must win the softmax over its row.",
            ): -scores.log_softmax(0).diagonal().mean(),
            Mistake(
                "sign-flipped",
                "its sign is flipped: the loss is -log of the positive's probability, which "
                "is positive and decreases as the positive wins.",
            ): -F.cross_entropy(scores, targets),
        }
        if M == N:  # (documents @ queries.T is the softmax over dim 0 named above)
            transposed = F.cross_entropy(scale * d @ q.T, targets)
            m[
                Mistake(
                    "symmetric-loss",
                    "it averages the loss over queries and over documents (CLIP's symmetric loss): "
                    "this model's loss goes from each query to the documents only.",
                )
            ] = (F.cross_entropy(scores, targets) + transposed) / 2
        else:
            m[
                Mistake(
                    "extra-documents-dropped",
                    f"it uses only the first N = {N} documents: the M - N extra documents are "
                    "negatives for every query, extra columns of the score matrix.",
                )
            ] = F.cross_entropy(scores[:, :N], targets)
        if scale != 20.0:
            m[
                Mistake(
                    "scale-argument-ignored",
                    f"it multiplies by 20 whatever the scale argument says ({scale:g} here): use "
                    "the argument.",
                )
            ] = F.cross_entropy(20.0 * q @ d.T, targets)
    return m


def _loss_hint(N: int, M: int, failure: Failure) -> Mistake | None:
    message = failure.message
    if f"input batch_size ({M})" in message and f"target batch_size ({N})" in message:
        return Mistake(
            "scores-transposed",
            f"Its score matrix has {M} rows: it is documents @ queries.T. The rows are the N "
            "queries and the columns the M documents, (N, M).",
        )
    if f"input batch_size ({N})" in message and f"target batch_size ({M})" in message:
        return Mistake(
            "targets-not-diagonal",
            f"It has {M} targets, one per document: there is one per query, 0, ..., N - 1.",
        )
    return None


def _loss_case(
    N: int,
    M: int,
    D: int,
    seed: int,
    scale: float | None = None,
    dtype=torch.float64,
    backward: bool = False,
) -> Case:
    d = F.normalize(randn(M, D, seed=seed), dim=-1)
    q = F.normalize(d[:N] + 0.8 * randn(N, D, seed=seed + 1), dim=-1)  # near their positives
    q, d = q.to(dtype), d.to(dtype)
    kwargs = {} if scale is None else {"scale": scale}
    actual = 20.0 if scale is None else scale
    case = Case(
        Call("contrastive_loss", "contrastive_loss", (q, d), kwargs),
        f"contrastive_loss(queries, documents{'' if scale is None else f', scale={scale:g}'}) "
        f"with N={N} queries and M={M} documents of D={D}"
        f"{'' if dtype == torch.float64 else f' ({dtype})'}",
        mistakes=lambda: _loss_mistakes(q, d, actual),
        failure_hint=partial(_loss_hint, N, M),
    )
    if backward:
        case = backpropagating(case, torch.tensor(1.5, dtype=dtype), grad=("args[0]", "args[1]"))
        case.grads = {}  # the output must require grad; the gradients are judged by requires=
        case.requires = (partial(_tangent_grads, case.call),)
    return case


def _tangent_grads(call: Call, obs: Observation, ask: vocabulary.Ask) -> Mistake | None:
    """The gradients of queries and documents, compared along the unit sphere only: an answer
    that normalises its unit inputs again (a cosine similarity) has the same values and other
    gradients in the direction of each vector, which the sentence vectors' own normalisation
    removes in training."""
    want = vocabulary.reference_grads(minilm.contrastive_loss, call)
    for i, label in enumerate(("queries", "documents")):
        got, x = obs.grads.get(f"args[{i}]"), call.args[i]
        if got is None:
            return Mistake(
                "gradient-missing",
                f"after backward, {label}.grad is None: no gradient reaches {label}, so the "
                "encoder could not learn from this loss. Keep the computation differentiable.",
            )

        def along(g: torch.Tensor, x: torch.Tensor = x) -> torch.Tensor:
            return g - (g * x).sum(-1, keepdim=True) * x

        if not vocabulary.close(along(got), along(want[f"args[{i}]"]), 1e-6, 1e-5):
            return Mistake(
                "gradient-mismatch",
                f"the gradient of {label} does not match the reference's (compared along the "
                "unit sphere, the directions in which a unit vector can move).",
            )
    return None


def _loss_cases(thorough: bool) -> Iterator[Case]:
    yield _loss_case(4, 4, 8, seed=1400)
    yield _loss_case(3, 6, 8, seed=1410)  # extra documents: M > N
    yield _loss_case(3, 3, 6, seed=1420, scale=5.0)
    yield _loss_case(3, 7, 8, seed=1460, backward=True)  # visible: a gradient that does not arrive
    if thorough:
        yield _loss_case(8, 12, 16, seed=1430, dtype=torch.float32)
        yield _loss_case(2, 5, 4, seed=1440, scale=30.0)
        yield _loss_case(5, 5, 8, seed=1450, backward=True)


check_contrastive_loss = runner.register_given(
    6,
    "def contrastive_loss(queries, documents, scale=20.0):",
    _loss_cases,
    reference=minilm.contrastive_loss,
    forbidden=Forbidden(
        python={minilm.contrastive_loss: "encoder_lib.contrastive_loss"},
        by_name={
            "sentence_transformers.losses:MultipleNegativesRankingLoss": (
                "sentence-transformers' MultipleNegativesRankingLoss"
            )
        },
    ),
    letters=("() (a scalar)",),
    inputs={"args[0]": "queries", "args[1]": "documents"},
    slots=("the loss",),
    shape_hints=({(1,): Mistake("loss-not-scalar", "Return a scalar tensor, of shape ().")},),
)
