"""The word-order task: deterministic, balanced, no leaks, made of minimal pairs that a bag of
words cannot tell apart, labelled by the stated rule."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
import torch

from encoder_lib import make_order_task, order_sentiment, tokenize
from encoder_lib.order_task import CONSTRUCTIONS, NEGATIVE, NOUNS, POSITIVE

SPLITS = ("train", "validation", "test")


@pytest.fixture(scope="module")
def task():
    return make_order_task(seed=0)


def pairs(split):
    """((sentence, label), (sentence, label)) for each minimal pair of a split."""
    return list(zip(split[0::2], split[1::2], strict=True))


def bag(sentence):
    return frozenset(Counter(tokenize(sentence)).items())


def bigrams(sentence):
    tokens = ["<start>", *tokenize(sentence), "<end>"]
    return Counter(itertools.pairwise(tokens))


# --- determinism --------------------------------------------------------------------------------


def test_same_seed_same_data(task):
    again = make_order_task(seed=0)
    for name in SPLITS:
        assert getattr(again, name) == getattr(task, name)
    assert again.kinds == task.kinds
    assert again.vocab.itos == task.vocab.itos
    assert again.max_sequence_length == task.max_sequence_length


def test_different_seed_different_data(task):
    other = make_order_task(seed=1)
    for name in SPLITS:
        sentences = {s for s, _ in getattr(task, name)}
        assert len(sentences & {s for s, _ in getattr(other, name)}) < len(sentences) // 2


def test_global_random_states_are_neither_used_nor_changed():
    random.seed(1)
    torch.manual_seed(1)
    python_state, torch_state = random.getstate(), torch.get_rng_state()
    first = make_order_task(seed=3, train_pairs=20)
    assert random.getstate() == python_state
    assert torch.equal(torch.get_rng_state(), torch_state)
    random.seed(2)
    assert make_order_task(seed=3, train_pairs=20).train == first.train


def test_test_set_does_not_depend_on_the_other_sizes(task):
    small = make_order_task(seed=0, train_pairs=10, validation_pairs=5)
    assert small.test == task.test


# --- sizes and balance --------------------------------------------------------------------------


def test_sizes():
    small = make_order_task(seed=0, train_pairs=7, validation_pairs=3, test_pairs=5)
    assert (len(small.train), len(small.validation), len(small.test)) == (14, 6, 10)
    assert {k: len(v) for k, v in small.kinds.items()} == {"train": 7, "validation": 3, "test": 5}


@pytest.mark.parametrize("name", SPLITS)
def test_labels_are_balanced_in_every_split_and_construction(task, name):
    split = getattr(task, name)
    assert sum(y for _, y in split) * 2 == len(split)
    kinds = Counter(task.kinds[name])
    assert set(kinds) == set(CONSTRUCTIONS)
    assert max(kinds.values()) - min(kinds.values()) <= 1
    # the positive sentence is not always the first of its pair
    firsts = [y for (_, y), _ in pairs(split)]
    assert 0.3 < sum(firsts) / len(firsts) < 0.7


# --- no leaks -----------------------------------------------------------------------------------


def test_no_sentence_appears_twice(task):
    everything = [s for name in SPLITS for s, _ in getattr(task, name)]
    assert len(everything) == len(set(everything))


def test_no_held_out_sentence_or_partner_in_training(task):
    training = {s for s, _ in task.train}
    for name in ("validation", "test"):
        for (a, _), (b, _) in pairs(getattr(task, name)):
            assert a not in training and b not in training
    # nor the same words in another order: a bag of words of a held-out sentence never occurs
    # in training, so nothing in training is a minimal-pair partner of a held-out sentence
    training_bags = {bag(s) for s in training}
    for name in ("validation", "test"):
        assert not {bag(s) for s, _ in getattr(task, name)} & training_bags


# --- minimal pairs and what a bag of words can do -----------------------------------------------


@pytest.mark.parametrize("name", SPLITS)
def test_every_sentence_has_a_partner_with_the_same_words_and_the_opposite_label(task, name):
    for (a, y_a), (b, y_b) in pairs(getattr(task, name)):
        assert tokenize(a) != tokenize(b)
        assert Counter(tokenize(a)) == Counter(tokenize(b)), (a, b)
        assert {y_a, y_b} == {0, 1}, (a, b)


def test_bags_of_words_are_identical_across_labels(task):
    positive = Counter(bag(s) for s, y in task.test if y == 1)
    negative = Counter(bag(s) for s, y in task.test if y == 0)
    assert positive == negative


def test_a_linear_model_on_word_counts_cannot_beat_chance_even_fit_on_the_test_set(task):
    """The best linear fit on word counts, computed on the test set itself, scores 50%: the two
    sentences of a pair have the same counts, hence the same score. Counts of bigrams (pairs of
    neighbouring words, a little order) already do clearly better: order is what decides."""
    words = sorted({t for s, _ in task.test for t in tokenize(s)})
    grams = sorted({g for s, _ in task.test for g in bigrams(s)})
    y = torch.tensor([2.0 * label - 1 for _, label in task.test], dtype=torch.float64)

    def best_linear_accuracy(features):
        X = torch.tensor(features, dtype=torch.float64)
        X = torch.cat([X, torch.ones(len(X), 1, dtype=torch.float64)], dim=1)
        w = torch.linalg.lstsq(X, y[:, None], driver="gelsd").solution
        return float(((X @ w).squeeze(1).sign() == y).double().mean())

    counts = [[Counter(tokenize(s))[t] for t in words] for s, _ in task.test]
    assert best_linear_accuracy(counts) <= 0.5
    counts2 = [[bigrams(s)[g] for g in grams] for s, _ in task.test]
    assert best_linear_accuracy(counts2) > 0.65  # 0.764 for seed 0


# --- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sentence,label",
    [
        ("The soup was good.", 1),
        ("The soup was not good.", 0),
        ("The soup was not awful.", 1),
        ("The soup was good, not bad.", 1),
        ("The soup was bad, not good.", 0),
        ("The room was bad but the view was great.", 1),
        ("The view was great but the room was bad.", 0),
        ("The room was not bad but the view was poor.", 0),
        ("The room was bad but the view was not poor.", 1),
        ("Although the room was bad, the view was great.", 1),
        ("The room was bad, although the view was great.", 0),
        ("Although the room was not bad, the view was not great.", 0),
        ("The room was not bad, although the view was not great.", 1),
        ("The room was good but the view was great.", 1),  # same sentiment on both sides
        ("the ROOM was bad but the view was great", 1),  # case and final full stop ignored
    ],
)
def test_the_rule_on_hand_written_sentences(sentence, label):
    assert order_sentiment(sentence) == label


@pytest.mark.parametrize(
    "sentence",
    [
        "The soup was tasty.",  # not one of the adjectives
        "The cat was good.",  # not one of the nouns
        "The soup was good, not great.",  # a correction must change the sentiment
        "The soup is good.",
        "Although the soup was good the bread was bad.",  # no comma
        "The soup was good although the bread was bad.",
        "Good soup.",
    ],
)
def test_the_rule_rejects_sentences_outside_the_grammar(sentence):
    with pytest.raises(ValueError):
        order_sentiment(sentence)


@pytest.mark.parametrize("name", SPLITS)
def test_labels_follow_the_rule(task, name):
    assert [order_sentiment(s) for s, _ in getattr(task, name)] == [
        y for _, y in getattr(task, name)
    ]


def test_constructions_look_as_named(task):
    marks = {"correction": ", not", "but": " but ", "moved not": " but ", "although": "lthough"}
    for name in SPLITS:
        for kind, ((a, _), (b, _)) in zip(
            task.kinds[name], pairs(getattr(task, name)), strict=True
        ):
            assert marks[kind] in a and marks[kind] in b
    for (a, _), (b, _) in pairs(task.test):
        if ", not" not in a:
            assert a.count("not") == b.count("not")


# --- the vocabulary -----------------------------------------------------------------------------


def test_the_vocabulary_covers_every_split_and_the_length_fits(task):
    words = set(task.vocab.itos[4:])
    assert words == set(NOUNS + POSITIVE + NEGATIVE) | {"the", "was", "not", "but", "although"} | {
        ",",
        ".",
    }
    for name in SPLITS:
        sentences = [s for s, _ in getattr(task, name)]
        ids = task.vocab.encode_batch(sentences, task.max_sequence_length)
        assert not (ids == task.vocab.unk_id).any()
    longest = max(len(tokenize(s)) for name in SPLITS for s, _ in getattr(task, name))
    assert task.max_sequence_length == longest + 2  # <start> and <end>


# --- bad arguments ------------------------------------------------------------------------------


@pytest.mark.parametrize("argument", ["train_pairs", "validation_pairs", "test_pairs"])
def test_empty_split_is_refused(argument):
    with pytest.raises(ValueError, match=argument):
        make_order_task(seed=0, **{argument: 0})


def test_asking_for_more_pairs_than_the_grammar_has_is_refused():
    with pytest.raises(ValueError, match="correction"):
        make_order_task(seed=0, train_pairs=4000)
