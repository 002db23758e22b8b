"""The review language: deterministic, the promised vocabulary, and the design that makes
pretraining matter: every adjective in the corpus beside a cue of its own polarity, labelled
sentences in balanced minimal pairs with no cue word and no unseen adjective, held-out sentences
made of unseen adjectives only."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest
import torch

from encoder_lib.review_language import (
    CUES,
    NEGATIVE,
    NOUNS,
    POSITIVE,
    TEMPLATES,
    VERBS,
    make_review_language,
)
from encoder_lib.text import tokenize

ALL_CUES = {w for group in CUES.values() for w in group}
VERB_KIND = {verb: kind for kind, verbs in VERBS.items() for verb in verbs}
NOUN_KIND = {noun: kind for kind, nouns in NOUNS.items() for noun in nouns}
TEMPLATE_PATTERNS = [  # one regular expression per template, in TEMPLATES' order
    r"the \w+ was \w+ \.",
    r"the \w+ was (really|very|quite) \w+ \.",
    r"we \w+ the \w+ and it was \w+ \.",
    r"we \w+ the \w+ \w+ \.",
]


@pytest.fixture(scope="module")
def language():
    return make_review_language(seed=0)


def polarity(word):
    return "positive" if word in POSITIVE else "negative" if word in NEGATIVE else None


def adjectives_in(sentence):
    return [t for t in tokenize(sentence) if polarity(t)]


def template_of(sentence):
    text = " ".join(tokenize(sentence))
    matches = [k for k, pattern in enumerate(TEMPLATE_PATTERNS) if re.fullmatch(pattern, text)]
    assert len(matches) == 1, (sentence, matches)
    return matches[0]


# --- determinism --------------------------------------------------------------------------------


def test_same_seed_same_language(language):
    again = make_review_language(seed=0)
    assert again.vocab.itos == language.vocab.itos
    assert again.corpus == language.corpus
    assert again.test_corpus == language.test_corpus
    assert again.held_out == language.held_out
    assert again.held_out_seen == language.held_out_seen
    assert again.seen_adjectives == language.seen_adjectives
    assert again.labelled(32, seed=3) == language.labelled(32, seed=3)
    assert torch.equal(again.corpus_ids(), language.corpus_ids())


def test_different_seed_different_language(language):
    other = make_review_language(seed=1)
    assert other.seen_adjectives != language.seen_adjectives
    assert len(set(other.corpus[:1000]) & set(language.corpus[:1000])) < 500
    assert other.held_out != language.held_out
    assert language.labelled(32, seed=1) != language.labelled(32, seed=0)


def test_global_random_states_are_neither_used_nor_changed():
    random.seed(1)
    torch.manual_seed(1)
    python_state, torch_state = random.getstate(), torch.get_rng_state()
    small = make_review_language(seed=3, corpus_size=2000)
    small.labelled(16)
    assert random.getstate() == python_state
    assert torch.equal(torch.get_rng_state(), torch_state)
    random.seed(2)
    assert make_review_language(seed=3, corpus_size=2000).corpus == small.corpus


# --- vocabulary and lengths ---------------------------------------------------------------------


def test_special_ids_and_vocabulary_size(language):
    vocab = language.vocab
    assert vocab.itos[:5] == ["<pad>", "<start>", "<end>", "<unk>", "<mask>"]
    assert (language.mask_id, language.first_word_id) == (4, 5)
    assert (vocab.pad_id, vocab.start_id, vocab.end_id, vocab.unk_id) == (0, 1, 2, 3)
    assert len(vocab) == 117
    words = set(POSITIVE) | set(NEGATIVE) | set(NOUN_KIND) | set(VERB_KIND) | ALL_CUES
    assert words <= set(vocab.itos)


def test_vocabulary_is_ranked_by_frequency_in_the_corpus(language):
    counts = Counter(t for s in language.corpus for t in tokenize(s))
    ranked = [counts[w] for w in language.vocab.itos[language.first_word_id :]]
    assert ranked == sorted(ranked, reverse=True)
    assert language.vocab.itos[language.first_word_id] == "the"


def test_everything_fits_max_sequence_length_and_is_known(language):
    L = language.max_sequence_length
    everything = language.corpus + language.test_corpus
    everything += [s for s, _ in language.held_out + language.held_out_seen]
    everything += [s for s, _ in language.labelled(400, seed=7)]
    assert max(len(tokenize(s)) for s in everything) + 2 == L  # <start> and <end>
    ids = language.encode(everything)  # raises if a sentence does not fit
    assert ids.shape == (len(everything), L)
    assert not (ids == language.vocab.unk_id).any()
    assert not (ids == language.mask_id).any()


def test_encode_in_chunks_equals_one_batch(language):
    sentences = language.corpus[:2500]
    direct = language.vocab.encode_batch(sentences, language.max_sequence_length)
    assert torch.equal(language.encode(sentences), direct)
    assert language.corpus_ids().shape == (len(language.corpus), language.max_sequence_length)
    assert language.encode([]).shape == (0, language.max_sequence_length)


# --- categories and the split of the adjectives -------------------------------------------------


def test_categories(language):
    assert language.categories["positive"] == POSITIVE
    assert language.categories["negative"] == NEGATIVE
    assert {k: language.categories[k] for k in NOUNS} == NOUNS
    everything = [w for words in language.categories.values() for w in words]
    assert len(everything) == len(set(everything)) == 75  # no word in two categories
    assert language.category_of("superb") == "positive"
    assert language.category_of("soup") == "food"
    assert language.category_of("recommend") is None
    assert language.adjectives == POSITIVE + NEGATIVE


def test_seen_and_unseen_adjectives_split_each_polarity_in_halves(language):
    for name, words in (("positive", POSITIVE), ("negative", NEGATIVE)):
        seen, unseen = language.seen_adjectives[name], language.unseen_adjectives[name]
        assert len(seen) == len(unseen) == 10
        assert not set(seen) & set(unseen)
        assert set(seen) | set(unseen) == set(words)


# --- the corpus ---------------------------------------------------------------------------------


def test_every_adjective_appears_in_the_corpus_beside_a_cue_of_its_polarity(language):
    beside_cue = Counter()
    for sentence in language.corpus:
        tokens = set(tokenize(sentence))
        cues = {p for p, group in CUES.items() if tokens & set(group)}
        adjectives = adjectives_in(sentence)
        if adjectives:
            assert len(cues) == 1, sentence  # exactly one verdict, never a mixed one
            assert {polarity(a) for a in adjectives} == cues, sentence
            beside_cue.update(adjectives)
        else:
            assert not cues, sentence  # a cue only with an adjective
    assert set(beside_cue) == set(POSITIVE) | set(NEGATIVE)
    assert min(beside_cue.values()) >= 100  # each of the 40 adjectives, often


def test_verbs_go_with_nouns_of_their_kind(language):
    kinds = Counter()
    for sentence in language.corpus:
        tokens = tokenize(sentence)
        verbs = [t for t in tokens if t in VERB_KIND]
        nouns = [t for t in tokens if t in NOUN_KIND]
        assert nouns, sentence
        for verb in verbs:
            assert {NOUN_KIND[n] for n in nouns} == {VERB_KIND[verb]}, sentence
        kinds.update(NOUN_KIND[n] for n in nouns)
    assert set(kinds) == set(NOUNS)


def test_a_fifth_of_the_corpus_gives_no_verdict(language):
    neutral = sum(not adjectives_in(s) for s in language.corpus) / len(language.corpus)
    assert 0.17 < neutral < 0.23


# --- labelled and held-out sentences -------------------------------------------------------------


@pytest.mark.parametrize("n", [8, 16, 64, 400])
def test_labelled_sets_are_balanced_per_template_and_label(language, n):
    labelled = language.labelled(n, seed=2)
    assert len(labelled) == n
    cells = Counter((template_of(s), y) for s, y in labelled)
    assert set(cells) == {(k, y) for k in range(len(TEMPLATES)) for y in (0, 1)}
    assert set(cells.values()) == {n // 8}


@pytest.mark.parametrize("name", ["labelled", "held_out", "held_out_seen"])
def test_minimal_pairs_differ_in_the_adjective_alone(language, name):
    examples = language.labelled(64, seed=5) if name == "labelled" else getattr(language, name)
    for (a, y_a), (b, y_b) in zip(examples[0::2], examples[1::2], strict=True):
        ta, tb = tokenize(a), tokenize(b)
        differ = [i for i, (x, y) in enumerate(zip(ta, tb, strict=True)) if x != y]
        assert len(differ) == 1, (a, b)
        assert {y_a, y_b} == {0, 1}
        for sentence, label in ((a, y_a), (b, y_b)):
            (adjective,) = adjectives_in(sentence)
            assert label == (polarity(adjective) == "positive")
    firsts = [y for _, y in examples[0::2]]
    assert 0.25 < sum(firsts) / len(firsts) < 0.75  # the positive one is not always first


def test_labelled_sentences_use_seen_adjectives_and_no_cue(language):
    seen = set(language.seen_adjectives["positive"] + language.seen_adjectives["negative"])
    for seed in range(5):
        for sentence, _ in language.labelled(400, seed=seed):
            tokens = set(tokenize(sentence))
            assert not tokens & ALL_CUES, sentence
            assert set(adjectives_in(sentence)) <= seen, sentence


def test_held_out_sentences_use_unseen_adjectives_only(language):
    unseen = set(language.unseen_adjectives["positive"] + language.unseen_adjectives["negative"])
    seen = set(language.seen_adjectives["positive"] + language.seen_adjectives["negative"])
    assert len(language.held_out) == len(language.held_out_seen) == 200
    used = Counter(a for s, _ in language.held_out for a in adjectives_in(s))
    assert set(used) == unseen  # every unseen adjective is tested
    assert {a for s, _ in language.held_out_seen for a in adjectives_in(s)} == seen
    for sentence, _ in language.held_out + language.held_out_seen:
        assert not set(tokenize(sentence)) & ALL_CUES
    labelled = {s for seed in range(5) for s, _ in language.labelled(400, seed=seed)}
    assert not labelled & {s for s, _ in language.held_out_seen}
    assert sum(y for _, y in language.held_out) == 100


def test_labelled_sets_are_nested_and_do_not_repeat_a_sentence(language):
    big = language.labelled(64, seed=1)
    assert language.labelled(16, seed=1) == big[:16]
    assert len({s for s, _ in language.labelled(400, seed=1)}) == 400


@pytest.mark.parametrize("n", [0, 7, 402])
def test_labelled_rejects_bad_sizes(language, n):
    with pytest.raises(ValueError, match="even number"):
        language.labelled(n)


def test_tensors(language):
    ids, labels = language.tensors(language.held_out[:6])
    assert ids.shape == (6, language.max_sequence_length) and ids.dtype == torch.long
    assert labels.tolist() == [y for _, y in language.held_out[:6]]
