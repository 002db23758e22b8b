"""A small generated language of reviews in which unlabelled text reveals what labels cannot.

Notebook 08 pretrains an encoder on this language with a masked-language-model objective and
then fine-tunes it on a handful of labelled sentences. The language is built so that the
pretraining has something to teach and the labels cannot teach it by themselves.

**The words.** 40 adjectives, 20 positive ("superb", "pleasant", ...) and 20 negative
("dismal", "nasty", ...); 35 nouns of five kinds (food, drink, place, people, show), each kind
with its own three verbs ("we ate the soup", "we watched the film"); ten *cue words* that give
a review's verdict without any adjective: "recommend", "loved", "enjoyed", "happily", "luckily"
and "avoid", "hated", "regretted", "sadly", "unfortunately". With the five special tokens
(``<mask>`` is id 4, ordinary words start at id 5) the vocabulary has 117 tokens.

**The unlabelled corpus** (what pretraining reads) uses every adjective, always in a sentence
whose cue agrees with it, so the company a word keeps says which way it leans; one sentence in
five gives no verdict and names two things of one kind::

    The soup was superb, i would recommend it.
    Sadly, we met the shabby guide.
    The wine was really dismal, we hated it.
    Luckily, the room was lovely and charming.
    We watched the opera and the ballet.

To fill a masked "recommend" the model has to read the adjective; to fill a masked adjective it
has to read the cue. Both are easiest if positive adjectives share one direction of the
embedding and negative ones another: that is what pretraining learns, for *every* adjective.
(The verbs do the same for the nouns: each kind's nouns end up beside one another.)

**The labelled sentences** (what fine-tuning reads) are the same clauses without any cue word,
made only with the *seen* half of each polarity's adjectives (drawn from the seed), and they
come in pairs that differ in the adjective alone, so the adjective is the only thing that tells
the labels apart (1 positive, 0 negative)::

    1  We ordered the pleasant pasta.
    0  We ordered the nasty pasta.
    1  The hotel was really wonderful.
    0  The hotel was really shabby.

Pairs take turns through the four templates, so every template carries both labels equally
often: a model cannot score by learning which template goes with which label.

**The held-out sentences** are made the same way from the other half, the *unseen* adjectives,
which no labelled sentence ever contains ("The wine was superb." / "The wine was dismal." with
seed 0). A classifier trained from scratch, or a bag of words, has never met "superb" or
"dismal" with a label and can only guess (about 50%). A pretrained encoder has met them in the
corpus, beside cue words, and has put them next to the seen adjectives of the same polarity:
fine-tuning on "pleasant" and "nasty" carries over to them.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .text import Vocabulary, tokenize

__all__ = [
    "POSITIVE",
    "NEGATIVE",
    "NOUNS",
    "VERBS",
    "CUES",
    "TEMPLATES",
    "MASK",
    "ReviewLanguage",
    "make_review_language",
]

POSITIVE = (
    "good", "great", "excellent", "lovely", "superb", "wonderful", "brilliant", "pleasant",
    "fantastic", "delightful", "splendid", "marvellous", "perfect", "charming", "terrific",
    "outstanding", "amazing", "nice", "glorious", "fabulous",
)  # fmt: skip
NEGATIVE = (
    "bad", "awful", "terrible", "poor", "dreadful", "horrible", "mediocre", "disappointing",
    "nasty", "dire", "appalling", "dismal", "lousy", "rotten", "shabby", "bland", "grim",
    "atrocious", "woeful", "unpleasant",
)  # fmt: skip
NOUNS = {
    "food": ("soup", "bread", "pasta", "cake", "salad", "pizza", "curry"),
    "drink": ("coffee", "wine", "tea", "beer", "juice", "cocktail", "lemonade"),
    "place": ("hotel", "room", "beach", "garden", "pool", "museum", "park"),
    "people": ("staff", "waiter", "guide", "driver", "host", "chef", "teacher"),
    "show": ("film", "play", "concert", "opera", "ballet", "musical", "circus"),
}
"""The nouns by kind; a kind's nouns share its verbs."""
VERBS = {
    "food": ("ate", "ordered", "cooked"),
    "drink": ("drank", "sipped", "poured"),
    "place": ("visited", "explored", "toured"),
    "people": ("met", "hired", "called"),
    "show": ("watched", "saw", "attended"),
}
CUES = {
    "positive": ("recommend", "loved", "enjoyed", "happily", "luckily"),
    "negative": ("avoid", "hated", "regretted", "sadly", "unfortunately"),
}
"""Words that give a review's verdict without an adjective: only in the unlabelled corpus."""
_AFTER = {  # a cue clause after the review: the two lists are parallel
    "positive": ("i would recommend it", "we loved it", "i enjoyed it"),
    "negative": ("i would avoid it", "we hated it", "i regretted it"),
}
_BEFORE = {"positive": ("happily", "luckily"), "negative": ("sadly", "unfortunately")}
_INTENSIFIERS = ("really", "very", "quite")
TEMPLATES = (
    "the {noun} was {adj}",
    "the {noun} was {very} {adj}",
    "we {verb} the {noun} and it was {adj}",
    "we {verb} the {adj} {noun}",
)
"""The clauses of every labelled and held-out sentence (the corpus uses them too, with a cue)."""
MASK = "<mask>"


@dataclass(frozen=True)
class ReviewLanguage:
    """The generated language: vocabulary, unlabelled corpus, word categories and the labelled
    and held-out sentences. Build it with ``make_review_language``.

    Attributes:
        seed: the seed it was made from (``labelled`` draws from it too).
        vocab: every word of the language; id 4 is ``<mask>``, ordinary words start at id 5
            (most frequent in the corpus first).
        max_sequence_length: L, the longest sentence of the corpus in tokens, ``<start>`` and
            ``<end>`` included; every sentence of the language fits.
        corpus: the unlabelled sentences, every adjective beside a cue of its polarity.
        test_corpus: 1,000 more unlabelled sentences drawn the same way (with a different
            generator), to measure masked-token accuracy on text pretraining did not read
            (the grammar is small: some sentences also occur in ``corpus``).
        categories: ``"positive"`` and ``"negative"`` (the adjectives), then one entry per
            noun kind (``"food"``, ``"drink"``, ``"place"``, ``"people"``, ``"show"``).
        seen_adjectives, unseen_adjectives: by polarity; labelled sentences use only the seen
            ones, ``held_out`` only the unseen ones.
        held_out: ``(sentence, label)`` pairs (positive and negative side by side) whose
            adjectives are all unseen: what pretraining is for.
        held_out_seen: the same with seen adjectives, never among the sentences ``labelled``
            returns: the words were seen with a label, the sentences were not.
    """

    seed: int
    vocab: Vocabulary = field(repr=False)
    max_sequence_length: int
    corpus: list[str] = field(repr=False)  # the repr stays one line in a notebook
    test_corpus: list[str] = field(repr=False)
    categories: dict[str, tuple[str, ...]] = field(repr=False)
    seen_adjectives: dict[str, tuple[str, ...]]
    unseen_adjectives: dict[str, tuple[str, ...]]
    held_out: list[tuple[str, int]] = field(repr=False)
    held_out_seen: list[tuple[str, int]] = field(repr=False)

    @property
    def mask_id(self) -> int:
        """The id of ``<mask>`` (4)."""
        return self.vocab.stoi[MASK]

    @property
    def first_word_id(self) -> int:
        """The smallest id of an ordinary word (5); smaller ids are special tokens."""
        return len(Vocabulary.SPECIALS) + 1

    @property
    def adjectives(self) -> tuple[str, ...]:
        return self.categories["positive"] + self.categories["negative"]

    def category_of(self, word: str) -> str | None:
        """The category of ``word`` (``"positive"``, ``"food"``, ...), None for other words."""
        for name, words in self.categories.items():
            if word in words:
                return name
        return None

    def encode(self, sentences: Sequence[str]) -> torch.Tensor:
        """Token ids ``(N, L)`` with L = ``max_sequence_length``, padded with ``<pad>``.

        Encodes 1,000 sentences at a time: the same ids as one ``vocab.encode_batch`` call,
        without holding every sentence's tokens as Python strings at once (about 12 MB for
        the corpus, which a notebook kernel would keep as resident memory)."""
        L = self.max_sequence_length
        if isinstance(sentences, str) or len(sentences) <= 1000:
            return self.vocab.encode_batch(sentences, L)
        chunks = [sentences[i : i + 1000] for i in range(0, len(sentences), 1000)]
        return torch.cat([self.vocab.encode_batch(chunk, L) for chunk in chunks])

    def corpus_ids(self) -> torch.Tensor:
        """The unlabelled corpus as token ids ``(N, L)``."""
        return self.encode(self.corpus)

    def tensors(self, examples: Sequence[tuple[str, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, labels)``: ids ``(N, L)`` and int64 labels ``(N,)`` of ``(sentence, label)``
        pairs such as ``held_out`` or ``labelled(16)``."""
        return self.encode([s for s, _ in examples]), torch.tensor([y for _, y in examples])

    def labelled(self, n: int, seed: int = 0) -> list[tuple[str, int]]:
        """``n`` labelled sentences (1 positive, 0 negative) made with the seen adjectives only.

        They come in ``n / 2`` pairs, the two sentences of a pair identical but for the
        adjective (one positive, one negative, in random order); pair ``k`` uses template
        ``k % 4``, so each template carries both labels equally often (exactly so when ``n`` is
        a multiple of 8). No cue word, no unseen adjective, no sentence of ``held_out_seen``.
        The sets are nested: ``labelled(16, s)`` is the start of ``labelled(32, s)``.

        Args:
            n: an even number of sentences, 2 to 400.
            seed: which draw (sets with different seeds differ).
        """
        if n % 2 or not 2 <= n <= 400:
            raise ValueError(f"n must be an even number of sentences from 2 to 400, got {n}")
        rng = random.Random(f"labelled {self.seed} {seed}")
        exclude = {s for s, _ in self.held_out_seen}
        return _pairs(n // 2, self.seen_adjectives, rng, exclude)


def make_review_language(seed: int = 0, corpus_size: int = 20_000) -> ReviewLanguage:
    """Generate the language: the same seed always gives the same vocabulary, corpus, split of
    the adjectives and held-out sentences (Python's ``random.Random``; torch is untouched).

    Args:
        seed: decides which adjectives are seen with a label and every sentence.
        corpus_size: number of unlabelled sentences.

    Returns:
        a ``ReviewLanguage``.
    """
    if corpus_size < 100:
        raise ValueError(f"corpus_size must be at least 100, got {corpus_size}")
    rng = random.Random(f"review language {seed}")
    seen, unseen = {}, {}
    for polarity, words in (("positive", POSITIVE), ("negative", NEGATIVE)):
        shuffled = rng.sample(words, len(words))
        half = len(words) // 2
        seen[polarity], unseen[polarity] = tuple(shuffled[:half]), tuple(shuffled[half:])
    held_out = _pairs(100, unseen, random.Random(f"held out {seed}"))
    held_out_seen = _pairs(100, seen, random.Random(f"held out seen {seed}"))
    corpus = [_corpus_sentence(rng) for _ in range(corpus_size)]
    test_rng = random.Random(f"test corpus {seed}")
    test_corpus = [_corpus_sentence(test_rng) for _ in range(1000)]

    counts = Counter(t for s in corpus for t in tokenize(s))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    vocab = Vocabulary([MASK, *(t for t, _ in ranked)])
    categories = {"positive": POSITIVE, "negative": NEGATIVE, **NOUNS}
    words = [w for group in categories.values() for w in group]
    missing = [w for w in words + [c for cs in CUES.values() for c in cs] if w not in counts]
    if missing:
        raise ValueError(f"corpus_size = {corpus_size} is too small: it lacks {missing[:5]}")
    longest = max(len(tokenize(s)) for s in corpus + test_corpus)
    return ReviewLanguage(
        seed,
        vocab,
        longest + 2,
        corpus,
        test_corpus,
        categories,
        seen,
        unseen,
        held_out,
        held_out_seen,
    )


# ---


def _clause(template: str, adjective: str, rng: random.Random) -> str:
    """``template`` with a random noun, its kind's verb and an intensifier, and ``adjective``."""
    kind = rng.choice(tuple(NOUNS))
    return template.format(
        noun=rng.choice(NOUNS[kind]),
        verb=rng.choice(VERBS[kind]),
        very=rng.choice(_INTENSIFIERS),
        adj=adjective,
    )


def _pairs(
    count: int,
    adjectives: dict[str, tuple[str, ...]],
    rng: random.Random,
    exclude: frozenset[str] | set[str] = frozenset(),
) -> list[tuple[str, int]]:
    """``count`` minimal pairs: one clause with a positive and a negative adjective; pair k uses
    template k % 4; each polarity's adjectives are used in turn (a fresh shuffle per round)."""
    queues: dict[str, list[str]] = {"positive": [], "negative": []}
    examples: list[tuple[str, int]] = []
    used: set[str] = set(exclude)
    k = 0
    while len(examples) < 2 * count:
        chosen = {}
        for polarity, queue in queues.items():
            if not queue:
                queue.extend(rng.sample(adjectives[polarity], len(adjectives[polarity])))
            chosen[polarity] = queue.pop()
        clause = _clause(TEMPLATES[k % len(TEMPLATES)], "{adj}", rng)
        positive = _sentence(clause.format(adj=chosen["positive"]))
        negative = _sentence(clause.format(adj=chosen["negative"]))
        if positive in used or negative in used:
            continue  # draw again, same template
        used |= {positive, negative}
        pair = [(positive, 1), (negative, 0)]
        examples += pair if rng.random() < 0.5 else pair[::-1]
        k += 1
    return examples


def _corpus_sentence(rng: random.Random) -> str:
    """One unlabelled sentence: 4 in 5 are a review whose cue agrees with its adjective(s), 1 in 5
    names two things of one kind and gives no verdict."""
    if rng.random() < 0.2:
        kind = rng.choice(tuple(NOUNS))
        first, second = rng.sample(NOUNS[kind], 2)
        return _sentence(f"we {rng.choice(VERBS[kind])} the {first} and the {second}")
    polarity = rng.choice(("positive", "negative"))
    words = POSITIVE if polarity == "positive" else NEGATIVE
    if rng.random() < 0.15:  # two adjectives of one polarity
        first, second = rng.sample(words, 2)
        clause = _clause("the {noun} was {adj}", f"{first} and {second}", rng)
    else:
        clause = _clause(rng.choice(TEMPLATES), rng.choice(words), rng)
    if rng.random() < 0.6:
        return _sentence(f"{clause}, {rng.choice(_AFTER[polarity])}")
    return _sentence(f"{rng.choice(_BEFORE[polarity])}, {clause}")


def _sentence(words: str) -> str:
    return words[0].upper() + words[1:] + "."
