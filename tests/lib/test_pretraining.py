"""The pretraining recipe, checked on properties and a few steps; the real figures (accuracy on
unseen words, time, memory) belong to bench/bench_pretraining.py."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from encoder_lib.mlm import IGNORE_INDEX, MaskedLanguageModel, mask_tokens, mlm_loss
from encoder_lib.pretraining import (
    AdamW,
    BagOfWords,
    PooledClassifier,
    _warmup_then_decay,
    accuracy,
    evaluate_mlm,
    fine_tune,
    format_transfer_row,
    masked_token_accuracy,
    nearest_words,
    optimizer_memory,
    pretrain,
    project_2d,
    same_category_rate,
    transfer_experiment,
    unigram_baseline,
)
from encoder_lib.review_language import make_review_language
from encoder_lib.text import Vocabulary


@pytest.fixture(scope="module")
def language():
    return make_review_language(seed=0, corpus_size=2000)


@pytest.fixture(scope="module")
def corpus_ids(language):
    return language.corpus_ids()


def small_model(language, seed=0):
    torch.manual_seed(seed)
    return MaskedLanguageModel(len(language.vocab), language.max_sequence_length)


def short_pretraining(model, language, corpus_ids, **kwargs):
    settings = dict(steps=20, batch_size=32, warmup=5, log_every=5, seed=0)
    settings.update(kwargs)
    return pretrain(
        model,
        corpus_ids,
        mask_id=language.mask_id,
        first_word_id=language.first_word_id,
        **settings,
    )


# --- the optimiser ------------------------------------------------------------------------------


def test_adamw_takes_the_same_steps_as_torch():
    torch.manual_seed(0)
    ours_model = nn.Sequential(nn.Linear(6, 5), nn.GELU(), nn.Linear(5, 3))
    theirs_model = copy.deepcopy(ours_model)
    for model in (ours_model, theirs_model):
        model[2].bias.requires_grad_(False)  # never trained
    ours = AdamW(ours_model.parameters(), lr=0.01, weight_decay=0.1)
    theirs = torch.optim.AdamW(theirs_model.parameters(), lr=0.01, weight_decay=0.1)
    factor = _warmup_then_decay(3, 12)
    schedule = torch.optim.lr_scheduler.LambdaLR(theirs, factor)
    x = torch.randn(8, 6)
    for step in range(1, 13):
        for model, optimizer in ((ours_model, ours), (theirs_model, theirs)):
            optimizer.zero_grad()
            if step % 4 == 0:  # a step where the first layer gets no gradient: skipped
                loss = model[2](torch.randn(8, 5, generator=torch.Generator().manual_seed(step)))
            else:
                loss = model(x)
            loss.pow(2).mean().backward()
        ours.step(lr=0.01 * factor(step - 1))
        theirs.step()
        schedule.step()
        for a, b in zip(ours_model.parameters(), theirs_model.parameters(), strict=True):
            assert torch.equal(a, b), f"step {step}"


def test_the_learning_rate_warms_up_then_falls_to_zero():
    factor = _warmup_then_decay(4, 10)
    values = [factor(s) for s in range(10)]
    assert values[:4] == [0.25, 0.5, 0.75, 1.0]
    assert values[4:] == sorted(values[4:], reverse=True) and 0 < values[-1] < 0.2


# --- pretraining --------------------------------------------------------------------------------


def test_embeddings_start_small():
    """Rows of length about 1, not sqrt(D): the recipe's polarity needs it (see mlm.py)."""
    torch.manual_seed(0)
    model = MaskedLanguageModel(100, 16, d_model=32)
    lengths = model.embedding.weight.detach()[1:].norm(dim=-1)
    assert 0.8 < float(lengths.mean()) < 1.2
    assert torch.equal(model.embedding.weight[0], torch.zeros(32))  # <pad> stays zero


def test_a_few_steps_lower_the_loss(language, corpus_ids):
    model = small_model(language)
    history = short_pretraining(model, language, corpus_ids, lr=5e-3)
    assert history["step"] == [5, 10, 15, 20]
    assert history["loss"][-1] < history["loss"][0] - 0.5
    assert history["accuracy"][-1] > history["accuracy"][0]
    assert not model.training


def test_same_seed_same_history_and_weights_and_other_seed_differs(language, corpus_ids):
    runs = []
    for seed in (0, 0, 1):
        model = small_model(language)
        history = short_pretraining(model, language, corpus_ids, steps=6, log_every=2, seed=seed)
        runs.append((history, model.state_dict()))
    (h0, w0), (h1, w1), (h2, _) = runs
    assert h0 == h1
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    assert h2["loss"] != h0["loss"]


def test_global_random_state_is_untouched(language, corpus_ids):
    model = small_model(language)
    state = torch.get_rng_state()
    short_pretraining(model, language, corpus_ids, steps=3)
    assert torch.equal(torch.get_rng_state(), state)


def test_the_given_mask_fn_loss_fn_track_and_progress_are_used(language, corpus_ids):
    calls = {"mask": 0, "loss": 0}

    def my_mask(ids, mask_id, first_word_id, vocab_size, p, generator):
        calls["mask"] += 1
        assert (mask_id, first_word_id, vocab_size, p) == (4, 5, len(language.vocab), 0.3)
        assert isinstance(generator, torch.Generator)
        return mask_tokens(ids, mask_id, first_word_id, vocab_size, p, generator)

    def my_loss(logits, labels):
        calls["loss"] += 1
        return mlm_loss(logits, labels)

    bars = []

    class Bar:  # the part of tqdm's interface that pretrain uses
        def __init__(self, total, desc):
            self.total, self.updates, self.postfixes, self.closed = total, 0, 0, False
            bars.append(self)

        def update(self, n):
            self.updates += n

        def set_postfix(self, **_):
            self.postfixes += 1

        def close(self):
            self.closed = True

    history = short_pretraining(
        small_model(language),
        language,
        corpus_ids,
        steps=4,
        log_every=2,
        p=0.3,
        mask_fn=my_mask,
        loss_fn=my_loss,
        track={"rate": lambda m: same_category_rate(m, language)[0]},
        progress=Bar,
    )
    assert calls == {"mask": 4, "loss": 4}
    assert len(history["rate"]) == 2 and all(0 <= r <= 1 for r in history["rate"])
    (bar,) = bars
    assert (bar.total, bar.updates, bar.postfixes, bar.closed) == (4, 4, 2, True)


def test_pretrain_rejects_bad_arguments(language, corpus_ids):
    model = small_model(language)
    with pytest.raises(ValueError, match=r"\(N, L\)"):
        pretrain(model, corpus_ids[0], mask_id=4, first_word_id=5, steps=1)
    with pytest.raises(ValueError, match="positive"):
        pretrain(model, corpus_ids, mask_id=4, first_word_id=5, steps=0)


# --- masked-token accuracy and the baseline -----------------------------------------------------


def test_masked_token_accuracy_counts_chosen_positions_only():
    labels = torch.tensor([[IGNORE_INDEX, 7, 8], [9, IGNORE_INDEX, IGNORE_INDEX]])
    answer = torch.tensor([[3, 7, 6], [9, 5, 5]])  # right at 2 of the 3 chosen positions
    corrupted = torch.zeros_like(labels)

    class Fixed(nn.Module):
        def forward(self, ids):
            return nn.functional.one_hot(answer[: len(ids)], 10).float()

    assert masked_token_accuracy(Fixed(), corrupted, labels) == pytest.approx(2 / 3)


def test_masked_token_accuracy_is_the_same_in_batches(language, corpus_ids):
    model = small_model(language)
    corrupted, labels = mask_tokens(
        corpus_ids[:300], 4, 5, len(language.vocab), generator=torch.Generator().manual_seed(0)
    )
    whole = masked_token_accuracy(model, corrupted, labels, batch_size=300)
    assert masked_token_accuracy(model, corrupted, labels, batch_size=7) == whole


def test_unigram_baseline_always_guesses_the_most_frequent_word():
    corpus = torch.tensor([[1, 6, 6, 7, 2, 0], [1, 6, 8, 2, 0, 0]])  # 6 is most frequent
    labels = torch.tensor([[IGNORE_INDEX, 6, 7, IGNORE_INDEX], [6, 8, IGNORE_INDEX, 6]])
    assert unigram_baseline(corpus, labels, first_word_id=5) == pytest.approx(3 / 5)


def test_evaluate_mlm(language, corpus_ids):
    model = small_model(language)
    first = evaluate_mlm(model, language, corpus_ids, seed=3)
    assert set(first) == {"accuracy", "unigram"}
    assert evaluate_mlm(model, language, corpus_ids, seed=3) == first
    assert 0.08 < first["unigram"] < 0.2  # "the"


# --- classifiers --------------------------------------------------------------------------------


def test_pooled_classifier_ignores_padding(language):
    torch.manual_seed(0)
    classifier = PooledClassifier(small_model(language))
    nn.init.normal_(classifier.head.weight)  # the head starts at zero: make it say something
    ids, _ = language.tensors(language.held_out[:4])
    logits = classifier(ids)
    assert logits.shape == (4, 2)
    # the same sentences with fewer padding columns, and beside a different batch
    longest = int((ids != 0).sum(dim=1).max())
    torch.testing.assert_close(classifier(ids[:, :longest]), logits)
    torch.testing.assert_close(classifier(ids[1:2]), logits[1:2])


def test_pooled_classifier_starts_at_zero_and_shares_the_encoder(language):
    model = small_model(language)
    classifier = PooledClassifier(model)
    ids, _ = language.tensors(language.held_out[:3])
    assert torch.equal(classifier(ids), torch.zeros(3, 2))
    assert classifier.encoder is model


def test_bag_of_words_counts_words_and_ignores_order():
    torch.manual_seed(0)
    bag = BagOfWords(vocab_size=12, first_word_id=5)
    nn.init.normal_(bag.linear.weight)
    ids = torch.tensor([[1, 6, 7, 7, 9, 2, 0, 0]])
    shuffled = torch.tensor([[1, 7, 9, 6, 7, 2, 0, 0]])
    counts = bag.counts(ids)
    assert counts[0, 7] == 2 and counts[0, 6] == counts[0, 9] == 1
    assert counts[0, :5].sum() == 0  # specials are not counted
    assert torch.equal(bag(ids), bag(shuffled))


def test_fine_tune_fits_the_labelled_set_and_is_deterministic(language):
    ids, labels = language.tensors(language.labelled(16))
    results = []
    for _ in range(2):
        classifier = BagOfWords(len(language.vocab), language.first_word_id)
        losses = fine_tune(classifier, ids, labels, steps=50, lr=0.1)
        results.append((losses, classifier.linear.weight.clone()))
    assert results[0][0] == results[1][0] and torch.equal(results[0][1], results[1][1])
    assert results[0][0][-1] < 0.1 * results[0][0][0]
    assert accuracy(classifier, ids, labels) == 1.0


def test_fine_tune_in_batches_uses_the_seed(language):
    ids, labels = language.tensors(language.labelled(16))
    weights = []
    for seed in (0, 0, 1):
        classifier = BagOfWords(len(language.vocab), language.first_word_id)
        fine_tune(classifier, ids, labels, steps=5, lr=0.1, batch_size=4, seed=seed)
        weights.append(classifier.linear.weight)
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[0], weights[2])


def test_bag_of_words_cannot_tell_unseen_adjectives_apart(language):
    """The two sentences of a held-out pair differ in an adjective the labelled set never shows:
    the bag of words gives them the same score, so it gets exactly one of each pair right."""
    classifier = BagOfWords(len(language.vocab), language.first_word_id)
    fine_tune(classifier, *language.tensors(language.labelled(32)), steps=50, lr=0.1)
    assert accuracy(classifier, *language.tensors(language.held_out)) == 0.5


def test_transfer_experiment_rows(language):
    pretrained = small_model(language)
    before = copy.deepcopy(pretrained.state_dict())
    rows = transfer_experiment(language, pretrained, sizes=(8, 16), seeds=(0, 1), steps=2)
    assert [row["labels"] for row in rows] == [8, 16]
    for row in rows:
        for name in ("pretrained", "scratch", "bag_of_words"):
            assert len(row[f"{name}_runs"]) == 2
            assert row[name] == pytest.approx(sum(row[f"{name}_runs"]) / 2)
        assert set(row["seen"]) == {"pretrained", "scratch", "bag_of_words"}
        assert row["bag_of_words"] == 0.5
    assert all(torch.equal(v, pretrained.state_dict()[k]) for k, v in before.items())
    again = transfer_experiment(language, pretrained, sizes=(8, 16), seeds=(0, 1), steps=2)
    assert again == rows
    # an explicit untrained model that is the pretrained one: both columns agree
    same = transfer_experiment(
        language, pretrained, sizes=(8,), seeds=(0,), steps=2, untrained=pretrained
    )
    assert same[0]["scratch"] == same[0]["pretrained"]


def test_transfer_experiment_reports_progress(language):
    events = []

    class Bar:
        def __init__(self, total, desc):
            events.append(("start", total, desc))

        def update(self, n):
            events.append(("update", n))

        def close(self):
            events.append(("close",))

    pretrained = small_model(language)
    with_bar = transfer_experiment(
        language, pretrained, sizes=(8, 16), seeds=(0,), steps=1, progress=Bar
    )
    assert events == [("start", 2, "fine-tuning"), ("update", 1), ("update", 1), ("close",)]
    assert with_bar == transfer_experiment(language, pretrained, sizes=(8, 16), seeds=(0,), steps=1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_optimizer_memory_measures_torch_optim_and_agrees_with_it():
    report = optimizer_memory()
    assert report["same_weights"] is True
    assert report["megabytes"] > 0
    assert set(report["imports"]) <= {"torch._dynamo", "sympy"}


def test_format_transfer_row():
    row = {"labels": 64, "pretrained": 0.94, "scratch": 0.51, "bag_of_words": 0.5}
    assert format_transfer_row(row) == (
        "held-out accuracy (unseen words, 64 labels): pretrained 94.0%, from scratch 51.0%, "
        "bag of words 50.0%"
    )


# --- embeddings ---------------------------------------------------------------------------------


def toy_language():
    """Four words in two groups: a and b in X, c and d in Y."""
    vocab = Vocabulary(["<mask>", "a", "b", "c", "d"])
    return SimpleNamespace(vocab=vocab, categories={"X": ("a", "b"), "Y": ("c", "d")})


def toy_weight(rows):
    weight = torch.zeros(9, 2)
    weight[5:] = torch.tensor(rows)
    weight[1:5] = torch.tensor([[1.0, 0.0]])  # specials right beside "a": must be left out
    return weight


def test_same_category_rate_on_a_hand_made_weight():
    # a and b point along x, c along y; d leans towards x: d's nearest is b, the wrong group
    weight = toy_weight([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.9, 0.2]])
    rate, chance = same_category_rate(weight, toy_language(), groups=("X", "Y"))
    assert rate == 0.75  # a -> b, b -> a, c -> d right; d -> b wrong
    assert chance == pytest.approx(1 / 3)


def test_same_category_rate_on_the_language(language):
    weight = torch.zeros(len(language.vocab), 3)
    generator = torch.Generator().manual_seed(0)
    for word in language.adjectives:
        direction = [1.0, 0, 0] if language.category_of(word) == "positive" else [0, 1.0, 0]
        noise = 0.1 * torch.randn(3, generator=generator)
        weight[language.vocab.stoi[word]] = torch.tensor(direction) + noise
    rate, chance = same_category_rate(weight, language)
    assert rate == 1.0 and chance == pytest.approx(19 / 39)
    model = small_model(language)
    assert same_category_rate(model, language) == same_category_rate(
        model.embedding.weight, language
    )


def test_nearest_words():
    language = toy_language()
    weight = toy_weight([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.9, 0.2]])
    near = nearest_words(weight, language.vocab, "a", k=3)
    assert [w for w, _ in near] == ["b", "d", "c"]  # no special token, not "a" itself
    assert near[0][1] == pytest.approx(1 / math.sqrt(1.01))
    with pytest.raises(ValueError, match="not in the vocabulary"):
        nearest_words(weight, language.vocab, "zebra")


def test_project_2d():
    weight = torch.randn(30, 8, generator=torch.Generator().manual_seed(0))
    points = project_2d(weight)
    assert points.shape == (30, 2) and points.dtype == weight.dtype
    assert torch.equal(project_2d(weight.clone()), points)  # deterministic
    torch.testing.assert_close(points.mean(dim=0), torch.zeros(2), atol=1e-5, rtol=0)
    assert points[:, 0].var() >= points[:, 1].var()  # the first component varies most
    # the sign is fixed by the weights: flipping every row flips the points
    torch.testing.assert_close(project_2d(-weight), -points)
    # a cloud stretched along one axis: the first component is that axis
    stretched = weight * torch.tensor([10.0, 1, 1, 1, 1, 1, 1, 1])
    first = project_2d(stretched)[:, 0]
    along = stretched[:, 0] - stretched[:, 0].mean()
    assert float(torch.corrcoef(torch.stack([first, along]))[0, 1].abs()) > 0.98
