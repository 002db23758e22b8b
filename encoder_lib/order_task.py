"""A sentiment task in which word order decides the label, generated from a seed.

Every sentence is built from the same small grammar: clauses such as "the soup was good" or
"the soup was not good", joined by "but", "although" or a correction ", not ...". The label,
1 (positive) or 0 (negative), follows one rule:

* a clause is positive when its adjective is positive, and "not" before the adjective flips it;
* "A but B": the clause after "but" counts;
* "although A, B" and "B, although A": the clause *without* "although" counts;
* "the soup was good, not bad": the adjective before ", not" counts.

The data come in **minimal pairs**: two sentences made of exactly the same words, the same
number of times, in a different order, with opposite labels (1 positive, 0 negative)::

    1  The soup was good, not bad.
    0  The soup was bad, not good.

    1  The room was bad but the view was great.
    0  The view was great but the room was bad.

    0  The room was not bad but the view was poor.
    1  The room was bad but the view was not poor.

    1  Although the room was bad, the view was great.
    0  The room was bad, although the view was great.

A model that sees only which words a sentence contains (a bag of words) gives both sentences
of a pair the same answer, so it gets exactly half of them right; to do better it has to know
where each word stands. Splits are made of whole pairs, and no two pairs anywhere use the same
bag of words, so no held-out sentence, nor its partner, nor any other arrangement of its words,
is seen in training.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .text import Vocabulary, tokenize

__all__ = [
    "NOUNS",
    "POSITIVE",
    "NEGATIVE",
    "CONSTRUCTIONS",
    "OrderTask",
    "make_order_task",
    "order_sentiment",
]

NOUNS = (
    "soup", "bread", "coffee", "wine", "service", "staff",
    "room", "view", "music", "film", "plot", "trip",
)  # fmt: skip
POSITIVE = (
    "good", "great", "excellent", "lovely", "superb", "wonderful", "brilliant", "pleasant",
)  # fmt: skip
NEGATIVE = (
    "bad", "awful", "terrible", "poor", "dreadful", "horrible", "mediocre", "disappointing",
)  # fmt: skip
CONSTRUCTIONS = ("correction", "but", "moved not", "although")
"""The four kinds of minimal pair, in the order they take turns in every split."""

Pair = tuple[tuple[str, int], tuple[str, int]]


@dataclass(frozen=True)
class OrderTask:
    """The three splits of the task and a vocabulary built from the training sentences.

    Each split is a list of ``(sentence, label)``; the two sentences of a minimal pair sit
    side by side at indices ``2k`` and ``2k + 1`` (in random order), and ``kinds[split][k]``
    names the construction of pair ``k`` (one of ``CONSTRUCTIONS``).

    Attributes:
        train, validation, test: lists of ``(sentence, label)``, labels 1 = positive.
        kinds: for each split name, the construction of each of its pairs.
        vocab: every word of the training sentences (which is every word of the task).
        max_sequence_length: the longest sentence in tokens, ``<start>`` and ``<end>``
            included: what ``vocab.encode_batch`` needs to fit every sentence.
    """

    train: list[tuple[str, int]]
    validation: list[tuple[str, int]]
    test: list[tuple[str, int]]
    kinds: dict[str, list[str]]
    vocab: Vocabulary
    max_sequence_length: int


def make_order_task(
    seed: int = 0, train_pairs: int = 2000, validation_pairs: int = 250, test_pairs: int = 250
) -> OrderTask:
    """Generate the task: the same seed always gives the same sentences in the same order.

    Args:
        seed: seed of the generator (Python's ``random.Random``; torch's state is untouched).
        train_pairs, validation_pairs, test_pairs: number of minimal pairs in each split; each
            pair gives two sentences, one of each label.

    Returns:
        an ``OrderTask``.
    """
    sizes = {"test": test_pairs, "validation": validation_pairs, "train": train_pairs}
    for name, size in sizes.items():
        if size < 1:
            raise ValueError(f"{name}_pairs must be at least 1, got {size}")
    rng = random.Random(seed)
    used: set[tuple[str, ...]] = set()
    splits: dict[str, list[tuple[str, int]]] = {}
    kinds: dict[str, list[str]] = {}
    for name, size in sizes.items():  # test first, so that its pairs do not depend on the others
        splits[name], kinds[name] = [], []
        for k in range(size):
            kind = CONSTRUCTIONS[k % len(CONSTRUCTIONS)]
            (a, y_a), (b, y_b) = _fresh_pair(kind, rng, used)
            if rng.random() < 0.5:
                (a, y_a), (b, y_b) = (b, y_b), (a, y_a)
            splits[name] += [(a, y_a), (b, y_b)]
            kinds[name].append(kind)
    vocab = Vocabulary.from_sentences(s for s, _ in splits["train"])
    longest = max(len(tokenize(s)) for split in splits.values() for s, _ in split)
    return OrderTask(
        splits["train"], splits["validation"], splits["test"], kinds, vocab, longest + 2
    )


def order_sentiment(sentence: str) -> int:
    """The label the task's rule gives ``sentence``: 1 positive, 0 negative.

    Accepts any sentence of the grammar (also ones the generator never made, e.g. with the
    same polarity in both clauses); raises ``ValueError`` for anything else.
    """
    tokens = [t for t in tokenize(sentence) if t != "."]
    if "although" in tokens:
        i = tokens.index("although")
        if i == 0:  # although A, B: B counts
            if "," not in tokens:
                raise ValueError(f"expected a comma after 'although ...' in {sentence!r}")
            comma = tokens.index(",")
            _clause(tokens[1:comma], sentence)
            return _clause(tokens[comma + 1 :], sentence)
        if i < 2 or tokens[i - 1] != ",":  # A, although B: A counts
            raise ValueError(f"expected ', although' between two clauses in {sentence!r}")
        _clause(tokens[i + 1 :], sentence)
        return _clause(tokens[: i - 1], sentence)
    if "but" in tokens:
        i = tokens.index("but")
        _clause(tokens[:i], sentence)
        return _clause(tokens[i + 1 :], sentence)
    if tokens[-3:-1] == [",", "not"]:  # the N was A, not B: A counts
        first = _clause(tokens[:-3], sentence)
        if _polarity(tokens[-1], sentence) == first:
            raise ValueError(
                f"', not' must correct to an adjective of opposite sentiment: {sentence!r}"
            )
        return first
    return _clause(tokens, sentence)


# ---


def _fresh_pair(kind: str, rng: random.Random, used: set[tuple[str, ...]]) -> Pair:
    """A minimal pair of construction ``kind`` whose words (as a bag: sorted, with repeats) are
    not in ``used``, then added to it. Both sentences of a pair have the same bag, so no
    sentence, and no rearrangement of its words, occurs in two pairs."""
    for _ in range(10_000):
        pair = _PAIR_MAKERS[kind](rng)
        words = tuple(sorted(tokenize(pair[0][0])))
        if words not in used:
            used.add(words)
            return pair
    raise ValueError(
        f"ran out of fresh {kind!r} pairs after {len(used)} pairs in all: ask for fewer pairs"
    )


def _correction_pair(rng: random.Random) -> Pair:
    noun, good, bad = rng.choice(NOUNS), rng.choice(POSITIVE), rng.choice(NEGATIVE)
    positive = _sentence(f"the {noun} was {good}, not {bad}")
    negative = _sentence(f"the {noun} was {bad}, not {good}")
    return (positive, 1), (negative, 0)


def _but_pair(rng: random.Random) -> Pair:
    positive, negative = _opposite_clauses(rng)
    return (_sentence(f"{negative} but {positive}"), 1), (
        _sentence(f"{positive} but {negative}"),
        0,
    )


def _moved_not_pair(rng: random.Random) -> Pair:
    noun_a, noun_b = rng.sample(NOUNS, 2)
    adj_a, adj_b = rng.choice(POSITIVE + NEGATIVE), rng.choice(POSITIVE + NEGATIVE)
    left = _sentence(f"the {noun_a} was not {adj_a} but the {noun_b} was {adj_b}")
    right = _sentence(f"the {noun_a} was {adj_a} but the {noun_b} was not {adj_b}")
    y = int(adj_b in POSITIVE)
    return (left, y), (right, 1 - y)


def _although_pair(rng: random.Random) -> Pair:
    positive, negative = _opposite_clauses(rng)
    a, b = (positive, negative) if rng.random() < 0.5 else (negative, positive)
    y_b = int(b is positive)
    return (_sentence(f"although {a}, {b}"), y_b), (_sentence(f"{a}, although {b}"), 1 - y_b)


def _opposite_clauses(rng: random.Random) -> tuple[str, str]:
    """Two clauses about different nouns, (positive, negative); each says so with a plain
    adjective or with "not" and an adjective of the other sentiment."""
    noun_a, noun_b = rng.sample(NOUNS, 2)
    clauses = []
    for noun, positive in ((noun_a, True), (noun_b, False)):
        negated = rng.random() < 0.5
        adjectives = POSITIVE if positive != negated else NEGATIVE
        clauses.append(f"the {noun} was {'not ' if negated else ''}{rng.choice(adjectives)}")
    return clauses[0], clauses[1]


_PAIR_MAKERS = {
    "correction": _correction_pair,
    "but": _but_pair,
    "moved not": _moved_not_pair,
    "although": _although_pair,
}


def _sentence(words: str) -> str:
    return words[0].upper() + words[1:] + "."


def _clause(tokens: list[str], sentence: str) -> int:
    """Polarity of "the NOUN was [not] ADJECTIVE"."""
    negated = len(tokens) == 5 and tokens[3] == "not"
    if (
        len(tokens) not in (4, 5)
        or tokens[0] != "the"
        or tokens[2] != "was"
        or (len(tokens) == 5 and not negated)
        or tokens[1] not in NOUNS
    ):
        raise ValueError(
            f"expected clauses of the form 'the NOUN was [not] ADJECTIVE' in {sentence!r}, "
            f"got {' '.join(tokens)!r}"
        )
    return _polarity(tokens[-1], sentence) ^ negated


def _polarity(word: str, sentence: str) -> int:
    if word in POSITIVE:
        return 1
    if word in NEGATIVE:
        return 0
    raise ValueError(f"{word!r} in {sentence!r} is not one of the task's adjectives")
