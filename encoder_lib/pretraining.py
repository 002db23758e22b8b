"""Pretraining a ``MaskedLanguageModel``, fine-tuning it on a few labels, and looking at what it
learned: the one recipe that notebook 08 and the course's benchmark both run.

- ``pretrain``: BERT's objective on unlabelled token ids, AdamW (``AdamW``: PyTorch's update
  written out, see there why), linear warm-up then linear decay. The masking and the loss are
  arguments (``mask_fn``, ``loss_fn``), so the notebook pretrains with its students' functions.
- ``masked_token_accuracy``, ``unigram_baseline``, ``evaluate_mlm``: how often the model fills a
  masked token correctly, beside always guessing the corpus's most frequent word.
- ``PooledClassifier``, ``BagOfWords``, ``fine_tune``, ``accuracy``: a pretrained encoder with a
  masked mean over its real tokens and a linear head, the same architecture without pretraining,
  and a logistic regression on word counts, all trained the same way.
- ``transfer_experiment``: those three on labelled sets of a few sizes, scored on sentences
  whose adjectives no labelled sentence contains.
- ``nearest_words``, ``same_category_rate``, ``project_2d``: the learned embeddings.
- ``optimizer_memory``: what building PyTorch's own AdamW would cost (why ``AdamW`` is here).

Every random draw (batches, masking, initialisation of fresh models) comes from a generator
seeded by the caller, so the same seed gives bit-identical numbers in any fresh process.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .mlm import IGNORE_INDEX, MaskedLanguageModel, mask_tokens, mlm_loss
from .review_language import ReviewLanguage

__all__ = [
    "AdamW",
    "pretrain",
    "masked_token_accuracy",
    "unigram_baseline",
    "evaluate_mlm",
    "PooledClassifier",
    "BagOfWords",
    "fine_tune",
    "accuracy",
    "transfer_experiment",
    "format_transfer_row",
    "nearest_words",
    "same_category_rate",
    "project_2d",
    "optimizer_memory",
]


class AdamW:
    """``torch.optim.AdamW``'s update, written out: the same steps, bit for bit, on CPU.

    Why not ``torch.optim.AdamW`` itself: the first ``torch.optim`` optimiser a process builds
    imports ``torch._dynamo`` and sympy, about 70 MB of resident memory (``optimizer_memory``
    measures it), and notebook 08's kernel must stay under the 450 MB a Binder user is
    guaranteed. What is left is the update that ``torch.optim.AdamW`` makes on CPU tensors (its
    single-tensor path), step for step; the course's tests check that both give identical
    weights, and ``optimizer_memory`` compares a few steps too. A parameter whose ``grad`` is
    None is skipped, as there.

    The update of a weight ``p`` with gradient ``g`` at step ``t`` (``m``, ``v`` start at 0):
    ``p *= 1 - lr * weight_decay`` (decoupled decay: not added to the gradient, unlike Adam's
    L2 penalty), ``m = beta1 * m + (1 - beta1) * g`` (the gradient's running mean),
    ``v = beta2 * v + (1 - beta2) * g**2`` (its running mean square), then
    ``p -= lr * (m / (1 - beta1**t)) / (sqrt(v / (1 - beta2**t)) + eps)``: the divisions by
    ``1 - beta**t`` undo the pull towards the zeros the means started from.

    Args:
        params: the parameters to train.
        lr: the learning rate, unless ``step`` is given another.
        weight_decay: decoupled weight decay: each step multiplies a weight by
            ``1 - lr * weight_decay`` before the Adam update.
        betas, eps: Adam's, with PyTorch's defaults.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.weight_decay, self.betas, self.eps = lr, weight_decay, betas, eps
        self.state: dict[int, tuple[int, torch.Tensor, torch.Tensor]] = {}  # step, m, v

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, lr: float | None = None) -> None:
        """One update of every parameter that has a gradient, at ``lr`` (default: ``self.lr``)."""
        lr = self.lr if lr is None else lr
        beta1, beta2 = self.betas
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            step, m, v = self.state.get(i) or (0, torch.zeros_like(p), torch.zeros_like(p))
            step += 1
            self.state[i] = step, m, v
            p.mul_(1 - lr * self.weight_decay)
            m.lerp_(p.grad, 1 - beta1)  # first moment: running mean of the gradient
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)  # second moment
            denominator = (v.sqrt() / (1 - beta2**step) ** 0.5).add_(self.eps)
            p.addcdiv_(m, denominator, value=-lr / (1 - beta1**step))


def pretrain(
    model: nn.Module,
    corpus_ids: torch.Tensor,
    *,
    mask_id: int,
    first_word_id: int,
    steps: int = 2000,
    batch_size: int = 128,
    lr: float = 5e-3,
    warmup: int = 100,
    weight_decay: float = 0.01,
    p: float = 0.15,
    seed: int = 0,
    mask_fn: Callable[..., tuple[torch.Tensor, torch.Tensor]] = mask_tokens,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = mlm_loss,
    log_every: int = 100,
    track: Mapping[str, Callable[[nn.Module], float]] | None = None,
    progress: Callable[..., Any] | None = None,
) -> dict[str, list[float]]:
    """Masked-language-model pretraining of ``model`` in place.

    Each step draws ``batch_size`` sentences of ``corpus_ids`` at random, corrupts them with
    ``mask_fn(batch, mask_id, first_word_id, vocab_size, p=p, generator=g)``, and takes one
    ``AdamW`` step on ``loss_fn(model(corrupted), labels)``. The learning rate rises linearly over
    ``warmup`` steps to ``lr``, then falls linearly to 0 at ``steps``.

    Args:
        model: maps ids ``(B, L)`` to logits ``(B, L, V)`` and has ``embedding`` (for V).
        corpus_ids: the unlabelled sentences as ids ``(N, L)``, padded with ``<pad>``.
        mask_id, first_word_id: passed to ``mask_fn``.
        steps, batch_size, lr, warmup, weight_decay: the optimisation.
        p: the share of ordinary tokens ``mask_fn`` chooses.
        seed: seeds the one generator the batches and the masking draw from.
        mask_fn, loss_fn: BERT's corruption and loss (the library's by default).
        log_every: record the history every this many steps.
        track: extra figures to record at each log, e.g.
            ``{"same polarity": lambda m: same_category_rate(m, language)[0]}``.
        progress: a tqdm-like factory (``tqdm.auto.tqdm``): called as
            ``progress(total=steps, desc=...)``, then ``update``, ``set_postfix``, ``close``.

    Returns:
        the history: ``"step"``; ``"loss"`` and ``"accuracy"`` (masked-token accuracy), both
        means over the training batches since the previous log; then one list per ``track``.
    """
    if corpus_ids.dim() != 2:
        raise ValueError(f"corpus_ids must have shape (N, L), got {tuple(corpus_ids.shape)}")
    if steps < 1 or batch_size < 1 or log_every < 1:
        raise ValueError(
            f"steps, batch_size and log_every must be positive, got {steps}, {batch_size}, "
            f"{log_every}"
        )
    track = dict(track or {})
    vocab_size = model.embedding.num_embeddings
    generator = torch.Generator().manual_seed(seed)
    optimizer = AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = _warmup_then_decay(warmup, steps)
    history: dict[str, list[float]] = {"step": [], "loss": [], "accuracy": []}
    history.update({name: [] for name in track})
    bar = progress(total=steps, desc="pretraining") if progress is not None else None
    total_loss, right, chosen = 0.0, 0, 0
    model.train()
    for step in range(1, steps + 1):
        rows = torch.randint(len(corpus_ids), (batch_size,), generator=generator)
        corrupted, labels = mask_fn(
            corpus_ids[rows], mask_id, first_word_id, vocab_size, p=p, generator=generator
        )
        logits = model(corrupted)  # (B, L, V)
        loss = loss_fn(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step(lr=lr * schedule(step - 1))
        at = labels != IGNORE_INDEX  # (B, L)
        total_loss += loss.item()
        right += int((logits.detach().argmax(dim=-1)[at] == labels[at]).sum())
        chosen += int(at.sum())
        if step % log_every == 0 or step == steps:
            since = step - (history["step"][-1] if history["step"] else 0)
            history["step"].append(step)
            history["loss"].append(total_loss / since)
            history["accuracy"].append(right / max(chosen, 1))
            total_loss, right, chosen = 0.0, 0, 0
            if track:
                model.eval()
                with torch.no_grad():
                    for name, measure in track.items():
                        history[name].append(float(measure(model)))
                model.train()
            if bar is not None:
                bar.set_postfix(
                    loss=f"{history['loss'][-1]:.3f}", acc=f"{history['accuracy'][-1]:.1%}"
                )
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    model.eval()
    return history


def masked_token_accuracy(
    model: nn.Module, corrupted: torch.Tensor, labels: torch.Tensor, batch_size: int = 200
) -> float:
    """The share of chosen positions (``labels != IGNORE_INDEX``) where the model's most likely
    token is the original. ``(corrupted, labels)``, both ``(N, L)``, come from a ``mask_fn``
    such as ``mask_tokens``. The model is put in eval mode and run on ``batch_size`` sentences
    at a time (the same answer, less memory)."""
    model.eval()
    right = 0
    with torch.no_grad():
        for ids, original in zip(
            corrupted.split(batch_size), labels.split(batch_size), strict=True
        ):
            at = original != IGNORE_INDEX  # (B, L)
            right += int((model(ids).argmax(dim=-1)[at] == original[at]).sum())
    return right / max(int((labels != IGNORE_INDEX).sum()), 1)


def unigram_baseline(corpus_ids: torch.Tensor, labels: torch.Tensor, first_word_id: int) -> float:
    """Masked-token accuracy of always guessing the most frequent ordinary word of
    ``corpus_ids`` (``(N, L)``) at the chosen positions of ``labels`` (``(B, L)``, as made by a
    ``mask_fn``): what a model scores without reading any context."""
    words = corpus_ids[corpus_ids >= first_word_id]
    most_frequent = int(torch.bincount(words).argmax())
    at = labels != IGNORE_INDEX
    return float((labels[at] == most_frequent).double().mean())


def evaluate_mlm(
    model: nn.Module,
    language: ReviewLanguage,
    corpus_ids: torch.Tensor,
    *,
    p: float = 0.15,
    seed: int = 0,
    mask_fn: Callable[..., tuple[torch.Tensor, torch.Tensor]] = mask_tokens,
) -> dict[str, float]:
    """Masked-token accuracy on ``language.test_corpus``, sentences pretraining did not read
    (masked by ``mask_fn`` with a generator seeded from ``seed``), beside ``unigram_baseline``
    (the most frequent word of ``corpus_ids``, the pretraining corpus) at the same positions.

    Returns:
        ``{"accuracy": ..., "unigram": ...}``.
    """
    ids = language.encode(language.test_corpus)  # (N, L)
    generator = torch.Generator().manual_seed(seed)
    corrupted, labels = mask_fn(
        ids,
        language.mask_id,
        language.first_word_id,
        len(language.vocab),
        p=p,
        generator=generator,
    )
    return {
        "accuracy": masked_token_accuracy(model, corrupted, labels),
        "unigram": unigram_baseline(corpus_ids, labels, language.first_word_id),
    }


class PooledClassifier(nn.Module):
    """A sentence classifier on top of an encoder: ``encoder.encode(ids)`` ``(B, L, D)``, the
    mean over the real (non-padding) positions ``(B, D)``, then a linear head to 2 classes.

    The head starts at zero (so it needs no random numbers); the encoder is used as given, not
    copied: fine-tuning changes its weights (pass ``copy.deepcopy(model)`` to keep the original).

    Args:
        encoder: has ``encode(ids)`` -> ``(B, L, D)`` and ``pad_id``, like ``MaskedLanguageModel``.
        num_classes: the head's outputs.

    Shape:
        token_ids ``(B, L)`` -> logits ``(B, num_classes)``.
    """

    def __init__(self, encoder: nn.Module, num_classes: int = 2):
        super().__init__()
        self.encoder = encoder
        self.pad_id = encoder.pad_id
        d_model = encoder.embedding.embedding_dim
        self.head = nn.Linear(d_model, num_classes)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        keep = (token_ids != self.pad_id).unsqueeze(-1)  # (B, L, 1), True at real tokens
        h = self.encoder.encode(token_ids)  # (B, L, D)
        pooled = (h * keep).sum(dim=1) / keep.sum(dim=1)  # (B, D)
        return self.head(pooled)  # (B, num_classes)


class BagOfWords(nn.Module):
    """Logistic regression on word counts: ``logits = counts(ids) @ W.T + b``, where
    ``counts`` has one column per vocabulary id and ignores the ids below ``first_word_id``.
    It sees which words a sentence has, not their order, and knows nothing of a word it never
    met in training (its weight stays 0). Starts at zero.

    Shape:
        token_ids ``(B, L)`` -> logits ``(B, num_classes)``.
    """

    def __init__(self, vocab_size: int, first_word_id: int, num_classes: int = 2):
        super().__init__()
        self.first_word_id = first_word_id
        self.linear = nn.Linear(vocab_size, num_classes)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def counts(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``(B, V)``: how many times each ordinary word occurs in each sentence."""
        B, V = token_ids.shape[0], self.linear.in_features
        words = (token_ids >= self.first_word_id).to(self.linear.weight.dtype)  # (B, L)
        counts = torch.zeros(B, V, dtype=words.dtype, device=token_ids.device)
        return counts.scatter_add_(1, token_ids.long(), words)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.linear(self.counts(token_ids))  # (B, num_classes)


def fine_tune(
    classifier: nn.Module,
    ids: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int = 100,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    batch_size: int | None = None,
    seed: int = 0,
) -> list[float]:
    """Train ``classifier`` in place: cross-entropy, ``AdamW`` at a constant learning rate.

    Args:
        classifier: ids ``(N, L)`` -> logits ``(N, C)``.
        ids, labels: the labelled set, ``(N, L)`` and ``(N,)``.
        steps: optimiser steps.
        lr: small for a pretrained encoder: a large one overwrites what pretraining gave the
            words that the labelled set does not contain.
        batch_size: None: the whole set at every step (then ``seed`` is not used).
        seed: seeds the batches' draw.

    Returns:
        the training loss of every step.
    """
    optimizer = AdamW(classifier.parameters(), lr=lr, weight_decay=weight_decay)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    classifier.train()
    for _ in range(steps):
        if batch_size is None or batch_size >= len(ids):
            batch_ids, batch_labels = ids, labels
        else:
            rows = torch.randperm(len(ids), generator=generator)[:batch_size]
            batch_ids, batch_labels = ids[rows], labels[rows]
        loss = F.cross_entropy(classifier(batch_ids), batch_labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    classifier.eval()
    return losses


def accuracy(classifier: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> float:
    """The share of ``ids`` ``(N, L)`` whose most likely class is ``labels`` ``(N,)``, in eval
    mode without gradients."""
    classifier.eval()
    with torch.no_grad():
        predicted = classifier(ids).argmax(dim=-1)  # (N,)
    return float((predicted == labels).double().mean())


def transfer_experiment(
    language: ReviewLanguage,
    pretrained: nn.Module,
    *,
    sizes: Sequence[int] = (16, 32, 64),
    seeds: Sequence[int] = (0, 1, 2),
    untrained: nn.Module | None = None,
    steps: int = 100,
    lr: float = 1e-3,
    bag_of_words_lr: float = 0.1,
    progress: Callable[..., Any] | None = None,
) -> list[dict[str, Any]]:
    """Fine-tune on labelled sets of each size, score on sentences with unseen adjectives.

    For every size and seed: ``language.labelled(size, seed)``, then three classifiers trained
    with ``fine_tune`` on it: ``PooledClassifier`` on a copy of ``pretrained``, the same on a
    model of the same architecture that was never pretrained, and ``BagOfWords``. Scores are
    means over the seeds.

    Args:
        language: gives the labelled sets, ``held_out`` and ``held_out_seen``.
        pretrained: the pretrained model (not changed: each run fine-tunes a copy).
        sizes: labelled-set sizes (even numbers; multiples of 8 balance the templates).
        seeds: one labelled set per seed; each from-scratch model is initialised from its seed.
        untrained: the from-scratch model (copied for each run); None: a
            ``MaskedLanguageModel`` of ``pretrained``'s sizes, initialised from each seed.
        steps, lr: the fine-tuning of both encoders (full batch).
        bag_of_words_lr: the bag of words' learning rate (``steps`` steps too).
        progress: a tqdm-like factory (``tqdm.auto.tqdm``): called as
            ``progress(total=len(sizes) * len(seeds), desc=...)``, then ``update`` after each
            labelled set, then ``close``.

    Returns:
        one dict per size: ``labels`` (the size); ``pretrained``, ``scratch``, ``bag_of_words``
        (mean accuracy on ``held_out``); ``..._runs`` (one accuracy per seed); and
        ``seen`` (a dict of the three mean accuracies on ``held_out_seen``).
    """
    held_out = language.tensors(language.held_out)
    held_out_seen = language.tensors(language.held_out_seen)
    V, first = len(language.vocab), language.first_word_id
    rows = []
    bar = None
    if progress is not None:
        bar = progress(total=len(sizes) * len(seeds), desc="fine-tuning")
    for size in sizes:
        runs: dict[str, list[float]] = {"pretrained": [], "scratch": [], "bag_of_words": []}
        seen: dict[str, list[float]] = {name: [] for name in runs}
        for seed in seeds:
            ids, labels = language.tensors(language.labelled(size, seed))
            if untrained is None:
                scratch = _fresh_like(pretrained, seed)
            else:
                scratch = copy.deepcopy(untrained)
            classifiers = {
                "pretrained": PooledClassifier(copy.deepcopy(pretrained)),
                "scratch": PooledClassifier(scratch),
                "bag_of_words": BagOfWords(V, first),
            }
            for name, classifier in classifiers.items():
                rate = bag_of_words_lr if name == "bag_of_words" else lr
                fine_tune(classifier, ids, labels, steps=steps, lr=rate, seed=seed)
                runs[name].append(accuracy(classifier, *held_out))
                seen[name].append(accuracy(classifier, *held_out_seen))
            if bar is not None:
                bar.update(1)
        row: dict[str, Any] = {"labels": size}
        row.update({name: sum(v) / len(v) for name, v in runs.items()})
        row.update({f"{name}_runs": tuple(v) for name, v in runs.items()})
        row["seen"] = {name: sum(v) / len(v) for name, v in seen.items()}
        rows.append(row)
    if bar is not None:
        bar.close()
    return rows


def format_transfer_row(row: Mapping[str, Any]) -> str:
    """One row of ``transfer_experiment`` as the line the notebook and the benchmark print."""
    return (
        f"held-out accuracy (unseen words, {row['labels']} labels): "
        f"pretrained {row['pretrained']:.1%}, from scratch {row['scratch']:.1%}, "
        f"bag of words {row['bag_of_words']:.1%}"
    )


def nearest_words(
    model_or_weight: nn.Module | torch.Tensor, vocab, word: str, k: int = 5, first_word_id: int = 5
) -> list[tuple[str, float]]:
    """The ``k`` ordinary words whose embeddings are closest to ``word``'s by cosine
    similarity, most similar first, as ``(word, cosine)``; special tokens and ``word`` itself
    are left out.

    Args:
        model_or_weight: a model with ``embedding`` or an embedding matrix ``(V, D)``.
        vocab: the ``Vocabulary`` (``stoi``, ``itos``).
        word: a word of ``vocab``.
    """
    weight = _weight(model_or_weight)
    if word not in vocab.stoi:
        raise ValueError(f"{word!r} is not in the vocabulary")
    i = vocab.stoi[word]
    similarity = F.cosine_similarity(weight[i][None, :], weight, dim=-1)  # (V,)
    similarity[:first_word_id] = -math.inf
    similarity[i] = -math.inf
    top = similarity.topk(k)
    return [(vocab.itos[j], float(s)) for s, j in zip(top.values, top.indices, strict=True)]


def same_category_rate(
    model_or_weight: nn.Module | torch.Tensor,
    language: ReviewLanguage,
    groups: Sequence[str] = ("positive", "negative"),
) -> tuple[float, float]:
    """How often a word's nearest neighbour (by cosine, among the words of ``groups``) is in
    the same group, beside the rate that neighbours drawn at random would give.

    Args:
        model_or_weight: a model with ``embedding`` or an embedding matrix ``(V, D)``.
        language: gives ``vocab`` and ``categories``.
        groups: names of ``language.categories``: the adjectives' polarities by default, or
            e.g. the noun kinds.

    Returns:
        ``(rate, chance)``: chance is the mean over the words of (size of its group - 1) /
        (number of words - 1).
    """
    weight = _weight(model_or_weight)
    words = [(w, g) for g in groups for w in language.categories[g]]
    if len(words) < 2:
        raise ValueError(f"groups {tuple(groups)} hold fewer than two words")
    ids = torch.tensor([language.vocab.stoi[w] for w, _ in words])
    group = torch.tensor([groups.index(g) for _, g in words])
    vectors = F.normalize(weight[ids], dim=-1)  # (N, D)
    similarity = vectors @ vectors.T  # (N, N)
    similarity.fill_diagonal_(-math.inf)
    nearest = similarity.argmax(dim=-1)  # (N,)
    rate = float((group[nearest] == group).double().mean())
    sizes = torch.bincount(group).double()
    chance = float(((sizes[group] - 1) / (len(words) - 1)).mean())
    return rate, chance


def project_2d(weight: torch.Tensor) -> torch.Tensor:
    """The rows of ``weight`` ``(N, D)`` on their first two principal components: ``(N, 2)``.

    PCA through ``torch.linalg.svd`` of the centred rows; each component's sign is fixed so
    that its largest coefficient is positive, so the same weights always give the same figure.
    """
    if weight.dim() != 2 or weight.shape[0] < 2 or weight.shape[1] < 2:
        raise ValueError(f"weight must have shape (N, D) with N, D >= 2, got {tuple(weight.shape)}")
    x = weight.detach().double()
    x = x - x.mean(dim=0)
    _, _, Vh = torch.linalg.svd(x, full_matrices=False)  # rows of Vh: the components (D,)
    components = Vh[:2]  # (2, D)
    biggest = components.abs().argmax(dim=1)  # (2,)
    signs = components[torch.arange(2), biggest].sign()
    return (x @ (components * signs[:, None]).T).to(weight.dtype)  # (N, 2)


_OPTIMIZER_PROBE = """
import json, sys
import torch
from encoder_lib.pretraining import AdamW


def rss():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS"))
    return int(line.split()[1]) / 1024


before = rss()
torch.manual_seed(0)
ours, theirs = torch.randn(2, 50, requires_grad=True), torch.randn(2, 50, requires_grad=True)
with torch.no_grad():
    theirs.copy_(ours)
reference = torch.optim.AdamW([theirs], lr=0.1, weight_decay=0.01)
megabytes = rss() - before
written_out = AdamW([ours], lr=0.1, weight_decay=0.01)
for step in range(5):
    target = torch.randn(2, 50)
    for p, optimizer in ((ours, written_out), (theirs, reference)):
        optimizer.zero_grad()
        ((p - target) ** 2).sum().backward()
        optimizer.step()
print(json.dumps({"megabytes": megabytes, "same_weights": bool(torch.equal(ours, theirs)),
                  "imports": sorted({"torch._dynamo", "sympy"} & set(sys.modules))}))
"""


def optimizer_memory() -> dict[str, Any]:
    """Build ``torch.optim.AdamW`` in a fresh Python process (so that this one stays small), and
    take five steps with it and with ``AdamW`` on the same weights and gradients.

    Linux only (it reads ``/proc/self/status``); takes a few seconds (a second ``import torch``).

    Returns:
        ``{"megabytes": resident memory that building the first optimiser added, "same_weights":
        whether both optimisers ended with identical weights, "imports": which of
        ``torch._dynamo`` and ``sympy`` that build imported}``.
    """
    import json
    import os
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _OPTIMIZER_PROBE],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---


def _warmup_then_decay(warmup: int, steps: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (steps - step) / max(1, steps - warmup))

    return factor


def _weight(model_or_weight: nn.Module | torch.Tensor) -> torch.Tensor:
    if isinstance(model_or_weight, nn.Module):
        return model_or_weight.embedding.weight.detach()
    return model_or_weight.detach()


def _fresh_like(model: nn.Module, seed: int) -> MaskedLanguageModel:
    """A ``MaskedLanguageModel`` with ``model``'s sizes, initialised from ``seed`` (torch's
    global random state is restored afterwards)."""
    layer = model.encoder.layers[0]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MaskedLanguageModel(
            model.embedding.num_embeddings,
            model.positions.weight.shape[0],
            d_model=model.embedding.embedding_dim,
            num_heads=layer.self_attn.num_heads,
            d_ff=layer.linear1.out_features,
            num_layers=len(model.encoder.layers),
            pad_id=model.pad_id,
        )
