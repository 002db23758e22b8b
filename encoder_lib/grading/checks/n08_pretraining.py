"""Notebook 08: masked-language-model pretraining, as data for the runner.

- ``check_mask_tokens(mask_tokens)``, exercise 1: BERT's corruption. Random, so it is judged by
  what must hold whatever order the answer draws its random numbers in: labels are the original
  id where a token was chosen and -100 elsewhere; nothing changes where nothing was chosen; no
  special token (id below ``first_word_id``: padding, ``<start>``, ``<end>``, ``<unk>``,
  ``<mask>``) is chosen or drawn; the chosen share is ``p`` per token, not a fixed count per
  sentence; of the chosen, about 80% become ``mask_id``, 10% a random ordinary token, 10% stay;
  every draw comes from the ``generator`` passed in (the same generator seed gives the same
  result whatever torch's global state, another seed another result); the input is unchanged.
  The shares are tested on thousands of tokens, each with a margin of 4.5 standard deviations
  (a correct answer falls outside one by chance about 7 times in a million); the reference, run
  with 3,000 other generator seeds on every case (9,000 judgements), was never rejected.
- ``check_masked_language_model(MaskedLanguageModel)``, exercise 2: the MLM head in ``forward``
  (the ``__init__`` and ``encode`` are given): transform (dense, GELU, norm), then scores
  against the token embedding itself (weight tying) plus the output bias. Named: softmax or
  log-softmax applied, the transform skipped or in the wrong order, ReLU for GELU, no norm, the
  bias forgotten, the encoder run without the padding mask, a detached (untied) embedding, the
  logits laid out (B, V, L).
- ``check_mlm_loss(mlm_loss)``, exercise 3: the cross-entropy of the chosen positions, averaged
  over them. Named: every position divides (the mean over B x L), a mean of per-sentence means,
  a sum, ignored positions counted (as class 0), softmax before log-softmax, log-softmax over the
  wrong axis, no log-softmax at all (the raw logits read as log-probabilities), probabilities
  where log-probabilities belong, the sign. ``F.cross_entropy`` and ``F.nll_loss`` are
  forbidden: the exercise is what they do.
- ``check_fill_mask(fill_mask)``, exercise 4: the ``k`` most likely ordinary tokens at each
  ``<mask>``. Named: special tokens among the candidates, ids counted from ``first_word_id``
  instead of 0, the least likely instead of the most likely, the right tokens least likely
  first or in any other order, special tokens' scores set to 0 (not excluded: they win where
  every ordinary score is negative), scores instead of ids, a fixed ``mask_id``.

Each exercise is checked on its own: exercise 2's given ``encode`` does not use exercise 1 or 3,
and exercises 3 and 4 take tensors.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

import encoder_lib
from encoder_lib import mlm

from .. import runner, vocabulary
from ..feedback import GradingError, Mistake
from ..kernel import observe
from ..kernel.forbidden import Forbidden
from ..kernel.observe import Call, Failure, Observation
from ..vocabulary import Case, ModuleSpec, backpropagating, keep_first, randn, reference_mode

__all__ = ["check_mask_tokens", "check_masked_language_model", "check_mlm_loss", "check_fill_mask"]

IGNORE = mlm.IGNORE_INDEX


# --- exercise 1: mask_tokens ---------------------------------------------------------------------

_RUNS = "masked_lm.mask_tokens"


@observe.scenario(_RUNS)
def _run_mask_tokens(lookup: Callable[[str], Any], call: Call) -> Observation:
    """In the student's kernel: call ``mask_tokens`` once per ``(generator seed, global seed)``
    of ``call.options["runs"]``, each time with a fresh ``torch.Generator`` and torch's global
    generator seeded differently; the first run is the observation, the others' values go into
    ``info["runs"]``."""
    observations = []
    for seed, global_seed in call.options["runs"]:
        generator = torch.Generator().manual_seed(seed)
        one = dataclasses.replace(
            call, kwargs={**call.kwargs, "generator": generator}, seed=global_seed
        )
        obs = observe.run_call(lookup, one)
        if obs.failure is not None or "tensors" not in obs.info:
            return obs
        observations.append(obs)
    first = observations[0]
    first.info["runs"] = [obs.value for obs in observations[1:]]
    return first


@dataclasses.dataclass(frozen=True)
class _Sentences:
    """A batch of token ids as the pretraining loop makes them: ``<start>``, words, ``<end>``,
    padding (and a few ``<unk>`` when asked)."""

    ids: torch.Tensor
    mask_id: int
    first_word_id: int
    vocab_size: int

    @classmethod
    def make(
        cls,
        B: int,
        L: int,
        seed: int,
        first_word_id: int = 5,
        vocab_size: int = 40,
        unknown: bool = False,
    ) -> _Sentences:
        g = torch.Generator().manual_seed(seed)
        lengths = torch.randint(max(3, L // 3), L + 1, (B,), generator=g)  # with <start>, <end>
        ids = torch.randint(first_word_id, vocab_size, (B, L), generator=g)
        if unknown:
            ids = ids.masked_fill(torch.rand(B, L, generator=g) < 0.05, 3)  # <unk>
        position = torch.arange(L)[None, :]
        ids[:, 0] = 1  # <start>
        ids = torch.where(position == lengths[:, None] - 1, 2, ids)  # <end>
        ids = torch.where(position >= lengths[:, None], 0, ids)  # <pad>
        return cls(ids, first_word_id - 1, first_word_id, vocab_size)


def _mask_case(s: _Sentences, p: float, seed: int) -> Case:
    B, L = s.ids.shape
    args = (s.ids, s.mask_id, s.first_word_id, s.vocab_size)
    kwargs = {} if p == 0.15 else {"p": p}
    with torch.random.fork_rng(devices=[]):
        template = mlm.mask_tokens(*args, p=p, generator=torch.Generator().manual_seed(seed))
    p_text = "" if p == 0.15 else f", p={p}"
    runs = ((seed, 1), (seed, 2), (seed + 1, 1))
    case = Case(
        Call("mask_tokens", "mask_tokens", args, kwargs, scenario=_RUNS, options={"runs": runs}),
        f"mask_tokens(token_ids, mask_id={s.mask_id}, first_word_id={s.first_word_id}, "
        f"vocab_size={s.vocab_size}{p_text}, generator) with token_ids of shape {(B, L)}",
        expected=template,  # for the structure, shapes and dtypes only: the draws may differ
    )
    case.judge = lambda obs, ask: _judge_mask(case, s, p, obs, ask)
    return case


def _judge_mask(case: Case, s: _Sentences, p: float, obs: Observation, ask: vocabulary.Ask) -> None:
    runner.run_steps(case, obs, ask, ("plain tensor", "shape", "in place", "dtype"))
    corrupted, labels = obs.value
    problem = _mask_problem(s, p, corrupted, labels) or _randomness_problem(obs)
    if problem:
        raise GradingError(problem)


def _share(part: torch.Tensor, whole: torch.Tensor) -> float:
    return float(part.sum()) / max(1.0, float(whole.sum()))


def _mask_problem(s: _Sentences, p: float, corrupted: torch.Tensor, labels: torch.Tensor):
    """The first rule of BERT's corruption that this result breaks, as a message; else None."""
    ids = s.ids
    ordinary = ids >= s.first_word_id
    chosen = labels != IGNORE
    if not bool((labels == IGNORE).any()):
        if bool((labels == ids).all()):
            return Mistake(
                "labels-everywhere",
                "the labels hold the original id at every position. The loss must only score "
                f"the chosen tokens: put {IGNORE} (the index F.cross_entropy ignores) wherever "
                "a token was not chosen.",
            )
        if bool(((labels == 0) | (labels == ids)).all()):
            return Mistake(
                "labels-zero",
                "the labels are 0 where no token was chosen, but 0 is the id of <pad>, a real "
                f"class the loss would train the model to predict. Use {IGNORE}, the label "
                "F.cross_entropy ignores.",
            )
    if bool((labels[chosen] != ids[chosen]).any()):
        if bool((labels[chosen] == corrupted[chosen]).all()):
            return Mistake(
                "labels-corrupted",
                "the labels hold the corrupted ids (mostly <mask>) at the chosen positions: the "
                "model must learn to predict the original token, so the label is the id that was "
                "there before corruption.",
            )
        return Mistake(
            "labels-wrong",
            "some labels are neither -100 nor the original id at their position: a label is "
            "the id the model should recover, the token_ids value before corruption.",
        )
    special = chosen & ~ordinary
    if bool(special.any()):
        kinds = sorted({_special_name(int(i)) for i in ids[special]})
        return Mistake(
            "special-tokens-chosen",
            f"it chooses special tokens ({', '.join(kinds)}) for corruption. Only ordinary "
            f"tokens, ids >= first_word_id = {s.first_word_id}, may be chosen: there is nothing "
            "to learn from predicting padding or <start>, and the loss would reward it.",
        )
    if bool((corrupted[~chosen] != ids[~chosen]).any()):
        return Mistake(
            "unchosen-changed",
            "it changes tokens at positions it did not choose (their label is -100). Every "
            "position whose label is -100 must keep its original id; only chosen positions are "
            "corrupted, and each chosen position gets its original id as label.",
        )
    drawn = chosen & (corrupted != s.mask_id) & (corrupted != ids)
    values = corrupted[drawn]
    if bool(((values < s.first_word_id) | (values >= s.vocab_size)).any()):
        low, high = int(values.min()), int(values.max())
        if 0 <= low < s.first_word_id and _share(corrupted[chosen] == low, chosen) > 0.5:
            return Mistake(
                "mask-id-hard-coded",
                f"it replaces chosen tokens with id {low}, not with mask_id = {s.mask_id}: use "
                "the argument, whose value depends on the vocabulary.",
            )
        return Mistake(
            "random-ids-outside-words",
            f"its random replacements include ids outside the ordinary words (seen: {low} to "
            f"{high}): draw them uniformly from first_word_id = {s.first_word_id} up to "
            f"vocab_size - 1 = {s.vocab_size - 1}, never a special token.",
        )
    expected = p * ordinary.sum(dim=1).double()
    if bool(((chosen.sum(dim=1) - expected).abs() < 1.0).all()):
        return Mistake(
            "fixed-count",
            "every sentence gets the same share of chosen tokens (a fixed count, round(p x "
            "length) or similar). BERT chooses each token independently with probability p, so "
            "the count varies from sentence to sentence; a fixed count also tells the model how "
            "many masks to expect.",
        )
    rate, n = _share(chosen, ordinary), float(ordinary.sum())
    margin = 4.5 * math.sqrt(p * (1 - p) / n) + 0.002
    if abs(rate - p) > margin:
        return Mistake(
            "wrong-choice-rate",
            f"it chose {rate:.1%} of the ordinary tokens, but each should be chosen with "
            f"probability p = {p}, so about {p:.0%} of them. Draw one uniform number per "
            "position and compare it with p (and use the argument p, not a fixed number).",
        )
    n_chosen = float(chosen.sum())
    masked = _share(corrupted[chosen] == s.mask_id, chosen)
    kept = _share(corrupted[chosen] == ids[chosen], chosen)
    words = s.vocab_size - s.first_word_id
    random_share = 1.0 - masked - kept
    margin = 4.5 * math.sqrt(0.16 / n_chosen) + 0.01
    if masked > 1.0 - margin:
        return Mistake(
            "every-chosen-masked",
            "every chosen token becomes <mask>. BERT replaces only 80% of them with <mask>; "
            "10% get a random ordinary token and 10% stay as they were. The model never sees "
            "<mask> after pretraining, so it must also learn to check tokens that look normal.",
        )
    if abs(masked - 0.8) > margin:
        return Mistake(
            "wrong-mask-share",
            f"{masked:.1%} of the chosen tokens became <mask>; it should be about 80% (and 10% "
            "random, 10% unchanged). Draw one more uniform number per chosen position to decide "
            "which of the three happens.",
        )
    if random_share < 0.02:
        return Mistake(
            "no-random-replacement",
            "no chosen token is replaced by a random word: 80% should become <mask>, 10% a "
            "random ordinary token and 10% stay unchanged.",
        )
    expected_kept = 0.1 + 0.1 / words  # a random draw may give the original back
    if abs(kept - expected_kept) > 4.5 * math.sqrt(0.09 / n_chosen) + 0.01:
        return Mistake(
            "wrong-kept-share",
            f"{kept:.1%} of the chosen tokens keep their original id and {random_share:.1%} get "
            "a random one; each should be about 10%.",
        )
    return None


def _special_name(i: int) -> str:
    return {0: "<pad>", 1: "<start>", 2: "<end>", 3: "<unk>"}.get(i, f"id {i}")


def _randomness_problem(obs: Observation) -> str | None:
    first = obs.value
    again, other = obs.info.get("runs", (None, None))
    if again is not None and not vocabulary.close(again, first):
        return Mistake(
            "global-generator",
            "called twice with generators seeded alike, it gave different results: some of its "
            "random numbers come from torch's global generator. Pass generator=generator to "
            "every random function (torch.rand, torch.randint, torch.bernoulli...), so that a "
            "seeded generator makes the corruption reproducible.",
        )
    if other is not None and vocabulary.close(other, first):
        return Mistake(
            "not-random",
            "with a differently seeded generator it chose exactly the same tokens: the choice "
            "must be random, drawn from the generator passed in.",
        )
    return None


def _mask_cases(thorough: bool) -> Iterator[Case]:
    yield _mask_case(_Sentences.make(256, 32, seed=801), 0.15, seed=11)
    if thorough:
        yield _mask_case(_Sentences.make(96, 24, seed=802, unknown=True), 0.5, seed=12)
        yield _mask_case(
            _Sentences.make(160, 20, seed=803, first_word_id=7, vocab_size=30), 0.3, seed=13
        )


check_mask_tokens = runner.register_given(
    1,
    "def mask_tokens(token_ids, mask_id, first_word_id, vocab_size, p=0.15, generator=None):",
    _mask_cases,
    forbidden=Forbidden(python={mlm.mask_tokens: "encoder_lib.mask_tokens"}),
    slots=("the tensor of corrupted ids", "the tensor of labels"),
    letters=("(B, L)", "(B, L)"),
    inputs={"args[0]": "token_ids"},
    messages={
        "dtype": "{slot} has dtype {got}: token ids and labels are integers, int64 like token_ids "
        "(a float id cannot index an embedding, and F.cross_entropy wants int64 labels)."
    },
)


# --- exercise 2: MaskedLanguageModel.forward ------------------------------------------------------

_SIZES = dict(d_model=8, num_heads=2, d_ff=16, num_layers=1, dropout=0.1)
"""The keyword arguments of every model the check builds (after vocab_size and max_len)."""


def _reference_model(vocab: int, max_len: int, pad: int, seed: int, dtype: torch.dtype):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = encoder_lib.MaskedLanguageModel(vocab, max_len, pad_id=pad, **_SIZES).to(dtype)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # no parameter left at a value that would hide a missing step
        for name, p in model.named_parameters():
            if name in ("bias", "norm.weight", "norm.bias", "dense.bias"):
                p.add_(0.5 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype))
    return model


def _head_variants(model, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The logits of the usual mistakes in the head."""
    E, b = model.embedding.weight, model.bias
    m: dict[str, torch.Tensor] = {}
    if model.training:
        model.eval()
        with reference_mode(), torch.no_grad():
            m[
                Mistake(
                    "eval-in-forward",
                    "dropout is off in training mode: forward must not switch the model to eval "
                    "mode; model.train() and model.eval() are the caller's job.",
                )
            ] = model(ids)
        model.train()
    with reference_mode(), torch.no_grad():
        h = model.encode(ids)
        right = model.norm(F.gelu(model.dense(h)))
        logits = right @ E.T + b
        x = model.positions(model.embedding(ids))
        unmasked = model.encoder(x, None)
        return m | {
            Mistake(
                "softmax-applied",
                "softmax is applied: forward returns logits, raw scores, and the loss applies "
                "log-softmax itself (softmax twice flattens every prediction).",
            ): logits.softmax(-1),
            Mistake(
                "log-softmax-applied",
                "log_softmax is applied: forward returns logits, raw scores; the loss takes the "
                "log-softmax itself.",
            ): F.log_softmax(logits, dim=-1),
            Mistake(
                "no-transform",
                "the head's transform is skipped: the encoder's output goes straight to the output "
                "layer. The head first transforms each position (self.dense, GELU, self.norm), "
                "then scores it against the embeddings.",
            ): h @ E.T + b,
            Mistake(
                "norm-before-gelu",
                "the transform's steps are in the wrong order: it normalises before the GELU. The "
                "head is self.dense, then GELU, then self.norm, so that the output layer reads "
                "normalised vectors.",
            ): (F.gelu(model.norm(model.dense(h))) @ E.T + b),
            Mistake(
                "relu-not-gelu",
                "the transform uses ReLU; this head (BERT's) uses GELU between self.dense and "
                "self.norm.",
            ): model.norm(F.relu(model.dense(h))) @ E.T + b,
            Mistake("no-norm", "the transform has no norm: self.norm comes after the GELU."): (
                F.gelu(model.dense(h)) @ E.T + b
            ),
            Mistake("no-gelu", "the transform has no GELU between self.dense and self.norm."): (
                model.norm(model.dense(h)) @ E.T + b
            ),
            Mistake(
                "no-output-bias",
                "the output bias self.bias is not added: the output layer is the tied embedding "
                "weight and its own bias, one number per token of the vocabulary.",
            ): right @ E.T,
            Mistake(
                "no-padding-mask",
                "the encoder runs without the padding mask: real tokens attend to padding. "
                "self.encode builds the mask for you; if you call the encoder yourself, give it "
                "the padding mask (True at real tokens).",
            ): (model.norm(F.gelu(model.dense(unmasked))) @ E.T + b),
        }


def _model_case(
    lengths: list[int],
    L: int,
    seed: int,
    vocab: int = 13,
    pad: int = 0,
    train: bool = False,
    dtype: torch.dtype = torch.float64,
    gradient: bool = False,
) -> Case:
    B, max_len = len(lengths), L + 2
    model = _reference_model(vocab, max_len, pad, seed, dtype).train(train)
    g = torch.Generator().manual_seed(seed + 2)
    ids = torch.randint(0, vocab - 1, (B, L), generator=g)
    ids = ids + (ids >= pad).long()  # any id but pad
    ids = ids.masked_fill(~keep_first(lengths, L, extra_axes=0), pad)
    what = f"MaskedLanguageModel({vocab}, {max_len}, pad_id={pad})(token_ids) with token_ids of "
    what += f"shape {(B, L)}" + (f" ({dtype})" if dtype != torch.float64 else "")
    what += " in training mode" if train else ""
    call = Call(
        "MaskedLanguageModel",
        "masked_language_model",
        (ids,),
        init=((vocab, max_len), {**_SIZES, "pad_id": pad}),
        dtype=dtype,
        state={k: v.clone() for k, v in model.state_dict().items()},
        train=train,
        inspect=True,
        seed=seed,
    )
    case = Case(
        call,
        what,
        reference=model,
        mistakes=lambda: _head_variants(model, ids),
        shape_hints=(
            {
                (B, vocab, L): Mistake(
                    "vocabulary-axis-not-last",
                    "That is (B, V, L): the vocabulary axis must come last, one row "
                    "of V scores per position (mlm_loss and fill_mask read them that way).",
                ),
                (B, L, 8): Mistake(
                    "no-output-layer",
                    "That is (B, L, D): the head stops before the output layer, which "
                    "scores each transformed position against the V token embeddings.",
                ),
            },
        ),
        module=ModuleSpec(
            parameters=[n for n, _ in model.named_parameters()],
            names_message=(
                "MaskedLanguageModel should have the parameters of the given __init__ and no "
                "other, got {got}. The output layer has no weight of its own: it is "
                "self.embedding.weight (weight tying), so keep the given __init__."
            ),
        ),
    )
    if not gradient:
        return case
    upstream = randn(B, L, vocab, seed=seed + 3).to(dtype)
    case = backpropagating(case, upstream, grad=("parameters",))
    case.grad_names = {name: f"self.{name.removeprefix('parameters.')}" for name in case.grads}
    with reference_mode():  # the tie cut: the output layer sees a detached copy
        x = model.norm(F.gelu(model.dense(model.encode(ids))))
        cut = (x @ model.embedding.weight.detach().T + model.bias) * upstream
        (tie_cut,) = torch.autograd.grad(cut.sum(), model.embedding.weight)
    detached_tie = Mistake(
        "detached-tie",
        "the output layer uses a detached copy of the embedding (.detach(), .data or a "
        "tensor made from it), so only the input side trains it. With weight tying the "
        "output layer's gradient must reach self.embedding.weight too: use the "
        "parameter itself.",
    )
    case.grad_mistakes = {"parameters.embedding.weight": {detached_tie: tie_cut}}
    return case


def _model_hint(failure: Failure) -> str | None:
    if "mat1 and mat2" in failure.message or "cannot be multiplied" in failure.message:
        return Mistake(
            "embedding-not-transposed",
            "self.embedding.weight has shape (V, D), one row per token. To score a (B, L, D) "
            "tensor against every token, multiply by its transpose, (D, V).",
        )
    return None


def _model_cases(thorough: bool) -> Iterator[Case]:
    yield _model_case([6, 4, 2], 6, seed=810)
    yield _model_case([5, 3], 5, seed=811, gradient=True)
    if not thorough:
        return
    yield _model_case([6, 4, 2], 6, seed=812, train=True)
    yield _model_case([4, 7], 7, seed=813, pad=1, vocab=11)
    yield _model_case([1], 1, seed=814)
    yield _model_case([5, 2], 5, seed=815, dtype=torch.float32)


check_masked_language_model = runner.register_given(
    2,
    "class MaskedLanguageModel(nn.Module):",
    _model_cases,
    forbidden=Forbidden(
        python={mlm.MaskedLanguageModel.forward: "encoder_lib.MaskedLanguageModel"}
    ),
    slots=("the tensor of logits",),
    letters=("(B, L, V)",),
    inputs={"args[0]": "token_ids"},
    failure_hint=_model_hint,
    messages={
        "dtype": "{slot} has dtype {got}, but the model is {expected}: keep the model's "
        "dtype (no .float() or .double())."
    },
)


# --- exercise 3: mlm_loss -------------------------------------------------------------------------


def _loss_variants(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    chosen = labels != IGNORE
    w = chosen.to(logits.dtype)
    clamped = labels.clamp(min=0)[..., None]

    def nll(log_probs: torch.Tensor) -> torch.Tensor:  # (B, L)
        return -log_probs.gather(-1, clamped)[..., 0]

    per = nll(F.log_softmax(logits, dim=-1))
    mean = (per * w).sum() / w.sum()
    return {
        Mistake(
            "mean-over-all-positions",
            "it divides by every position, B x L, instead of by the number of chosen tokens: the "
            "loss shrinks as fewer tokens are chosen. Average over the chosen positions only.",
        ): ((per * w).sum() / per.numel()),
        Mistake(
            "mean-of-sentence-means",
            "it averages each sentence's chosen tokens, then averages the sentences: a token in a "
            "sentence with few chosen tokens weighs more than one in a sentence with many. Average "
            "over all chosen positions of the batch at once.",
        ): (((per * w).sum(1) / w.sum(1)).mean()),
        Mistake(
            "sum-not-mean",
            "it returns the sum over the chosen tokens: average it (divide by their number), so "
            "that the loss does not grow with the batch.",
        ): (per * w).sum(),
        Mistake(
            "ignored-positions-counted",
            f"positions whose label is {IGNORE} are scored too (as if their label were 0, or "
            "another id): only positions with a real label count.",
        ): per.mean(),
        Mistake(
            "softmax-before-log-softmax",
            "it applies softmax before log_softmax: logits are raw scores, and log_softmax turns "
            "them into log-probabilities in one step. Softmax first squashes them into [0, 1] and "
            "the loss can hardly move.",
        ): ((nll(F.log_softmax(logits.softmax(-1), dim=-1)) * w).sum() / w.sum()),
        Mistake(
            "log-softmax-wrong-axis",
            "log_softmax runs over the wrong axis: the probabilities of a position are over the "
            "vocabulary, the last axis (V), not over the positions.",
        ): ((nll(F.log_softmax(logits, dim=1)) * w).sum() / w.sum()),
        Mistake(
            "no-log-softmax",
            "it reads the raw logits as if they were log-probabilities: a logit is a score, not "
            "log p. Turn each position's scores into log-probabilities over the vocabulary "
            "(log_softmax over the last axis) before picking the right token's.",
        ): ((nll(logits) * w).sum() / w.sum()),
        Mistake(
            "probabilities-not-log",
            "it picks the right token's probability (after softmax) where the loss needs its "
            "log-probability: the cross-entropy is the mean of -log p, which grows without "
            "bound as p goes to 0; -p hardly moves. Use log_softmax.",
        ): ((nll(logits.softmax(-1)) * w).sum() / w.sum()),
        Mistake(
            "positive-sign",
            "the sign is wrong: it returns the mean log-probability of the right tokens, which "
            "training would push down. The loss is its negative, -log p.",
        ): -mean,
    }


def _loss_hint(failure: Failure) -> str | None:
    if "out of bounds" not in failure.message and "index" not in failure.message:
        return None
    return Mistake(
        "ignore-index-used-as-index",
        "labels is -100 wherever no token was chosen, and -100 is no index into the "
        "vocabulary: give those positions any valid id before you pick the log-probabilities "
        "(they are left out of the average anyway).",
    )


def _nan_probe(obs: Observation, ask: vocabulary.Ask) -> str | None:
    value = obs.value
    if not isinstance(value, torch.Tensor) or not bool(value.isnan().any()):
        return None
    return Mistake(
        "loss-is-nan",
        "the loss is NaN. Either it takes the log of something that is not a probability (the "
        "raw logits: use log_softmax over the vocabulary), or it divides 0 by 0 for a sentence "
        "with no chosen token (average over all chosen tokens of the batch at once).",
    )


def _loss_case(
    B: int,
    L: int,
    V: int,
    chosen_rows: list[list[int]],
    seed: int,
    dtype: torch.dtype = torch.float64,
    gradient: bool = False,
) -> Case:
    logits = (randn(B, L, V, seed=seed) * 2.0).to(dtype)
    original = torch.randint(0, V, (B, L), generator=torch.Generator().manual_seed(seed + 1))
    labels = torch.full((B, L), IGNORE, dtype=torch.long)
    for b, positions in enumerate(chosen_rows):
        labels[b, positions] = original[b, positions]
    what = f"mlm_loss(logits, labels) with logits of shape {(B, L, V)}"
    what += f" ({dtype})" if dtype != torch.float64 else ""
    what += f", {int((labels != IGNORE).sum())} chosen positions"
    case = Case(
        Call("mlm_loss", "mlm_loss", (logits, labels)),
        what,
        reference=mlm.mlm_loss,
        mistakes=lambda: _loss_variants(logits, labels),
        shape_hints=(
            {
                (B,): Mistake(
                    "loss-per-sentence",
                    "That is one loss per sentence: average over all chosen tokens of the "
                    "batch, to a single number.",
                ),
                (B, L): Mistake(
                    "loss-per-position",
                    "That is one loss per position: keep only the chosen ones and average "
                    "them to a single number.",
                ),
            },
        ),
    )
    if not gradient:
        return case
    return backpropagating(case, randn(1, seed=seed + 2).reshape(()).to(dtype), grad=("args[0]",))


def _loss_cases(thorough: bool) -> Iterator[Case]:
    yield _loss_case(2, 5, 7, [[0, 2, 3], [4]], seed=820, gradient=True)
    if thorough:
        yield _loss_case(3, 4, 6, [[1], [], [0, 1, 2, 3]], seed=821)  # a sentence with none
        yield _loss_case(4, 6, 9, [[5], [0, 3], [1, 2, 4], [2]], seed=822, dtype=torch.float32)
        yield _loss_case(1, 3, 5, [[0, 1, 2]], seed=823, gradient=True)


check_mlm_loss = runner.register_given(
    3,
    "def mlm_loss(logits, labels):",
    _loss_cases,
    forbidden=Forbidden(
        torch={
            F.cross_entropy: "F.cross_entropy (nn.CrossEntropyLoss calls it)",
            F.nll_loss: "F.nll_loss (nn.NLLLoss calls it)",
        },
        python={mlm.mlm_loss: "encoder_lib.mlm_loss"},
    ),
    probes=(_nan_probe,),
    failure_hint=_loss_hint,
    slots=("the loss",),
    letters=("() (a scalar)",),
    inputs={"args[0]": "logits", "args[1]": "labels"},
    grad_names={"args[0]": "logits"},
)


# --- exercise 4: fill_mask ------------------------------------------------------------------------


def _fill_variants(logits, ids, mask_id: int, first: int, k: int) -> dict[str, torch.Tensor]:
    at = logits[ids == mask_id]  # (N, V)
    m = {
        Mistake(
            "special-tokens-ranked",
            "special tokens are among the candidates: ids below first_word_id (<pad>, <start>, "
            "<mask>...) are never the answer. Rank only the ordinary tokens.",
        ): (at.topk(k, dim=-1).indices),
        Mistake(
            "ids-from-zero",
            "the ids are counted from first_word_id, not from 0: after leaving the special tokens "
            "out, position j among the ordinary tokens is token id first_word_id + j.",
        ): (at[:, first:].topk(k, dim=-1).indices),
        Mistake(
            "least-likely",
            "it returns the least likely tokens: topk takes the largest values by default (or "
            "sort in descending order).",
        ): (at[:, first:].topk(k, dim=-1, largest=False).indices + first),
        Mistake(
            "least-likely-first",
            "it returns the right k tokens, but from the least likely to the most likely: each "
            "row must start with the best candidate (a descending order of the scores).",
        ): (at[:, first:].topk(k, dim=-1).indices.flip(-1) + first),
        Mistake(
            "special-tokens-zeroed",
            _ZEROED,
        ): (at.masked_fill(_special(at, first), 0.0).topk(k, dim=-1).indices),
    }
    if mask_id != 4:
        at4 = logits[ids == 4]
        if at4.shape[0] == at.shape[0] and at4.shape[0] > 0:
            m[
                Mistake(
                    "mask-id-hard-coded",
                    f"it looks for the id 4 instead of mask_id = {mask_id}: use the argument, "
                    "whose value depends on the vocabulary.",
                )
            ] = at4[:, first:].topk(k, dim=-1).indices + first
    return m


_ZEROED = (
    "the special tokens' scores are set to 0, which does not exclude them: a logit of 0 beats "
    "every negative one, so special tokens enter the k best wherever fewer than k ordinary "
    "tokens score above 0. Leave them out of the ranking altogether (rank only the ordinary "
    "tokens, or give the special ones a score no ordinary token can lose to, -inf)."
)


def _special(at: torch.Tensor, first: int) -> torch.Tensor:
    return torch.arange(at.shape[-1]) < first


def _fill_probe(logits, ids, mask_id: int, first: int, k: int) -> vocabulary.Probe:
    """What the catalogue may miss: the right k tokens in another order; special tokens that
    win only where the ordinary tokens score below 0 (their scores set to 0 some other way)."""

    def probe(obs: Observation, ask: vocabulary.Ask) -> str | None:
        got = obs.value
        if not isinstance(got, torch.Tensor) or got.dtype != torch.long or got.dim() != 2:
            return None
        want = mlm.fill_mask(logits, ids, mask_id, first, k=k)
        if got.shape != want.shape:
            return None
        if torch.equal(got.sort(-1).values, want.sort(-1).values):
            return Mistake(
                "wrong-order",
                "each row holds the right k tokens, but not from the most likely to the least "
                "likely: rank them by their scores, best first (topk does, and so does a sort "
                "in descending order; sorting the ids themselves does not).",
            )
        special = got < first
        if not bool(special.any()):
            return None
        at = logits[ids == mask_id][:, first:]  # (N, ordinary words)
        rows = special.any(-1)
        # a special token won only where fewer than k ordinary tokens score above 0
        if bool(((at > 0).sum(-1)[rows] < k).all()):
            return Mistake("special-tokens-zeroed", _ZEROED)
        return None

    return probe


def _fill_case(
    B: int,
    L: int,
    V: int,
    masks: list[tuple[int, int]],
    seed: int,
    k: int = 3,
    mask_id: int = 4,
    first: int = 5,
    dtype: torch.dtype = torch.float64,
) -> Case:
    logits = (randn(B, L, V, seed=seed) * 2.0).to(dtype)
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(first, V, (B, L), generator=g)
    for b, i in masks:
        ids[b, i] = mask_id
        logits[b, i, :first] += 4.0  # special tokens score high where a mask is
    ids[:, 0] = 1
    kwargs = {} if k == 5 else {"k": k}
    k_text = "" if k == 5 else f", k={k}"
    return Case(
        Call("fill_mask", "fill_mask", (logits, ids, mask_id, first), kwargs),
        f"fill_mask(logits, token_ids, mask_id={mask_id}, first_word_id={first}{k_text}) with "
        f"logits of shape {(B, L, V)}"
        + (f" ({dtype})" if dtype != torch.float64 else "")
        + f" and {len(masks)} <mask> tokens",
        reference=mlm.fill_mask,
        mistakes=lambda: _fill_variants(logits, ids, mask_id, first, k),
        probes=(_fill_probe(logits, ids, mask_id, first, k),),
        shape_hints=(
            {
                (len(masks),): Mistake(
                    "one-id-per-mask", "That is one id per <mask>: return the k best, (N, k)."
                ),
                (len(masks), k, 1): Mistake(
                    "trailing-axis", "Drop the trailing axis: one row of k ids per <mask>."
                ),
                (0, k): Mistake(
                    "mask-id-hard-coded",
                    "No <mask> was found: look for mask_id, the argument, whose value "
                    "depends on the vocabulary.",
                ),
            },
        ),
    )


def _fill_cases(thorough: bool) -> Iterator[Case]:
    yield _fill_case(2, 6, 12, [(0, 2), (0, 4), (1, 3)], seed=830)
    if thorough:
        yield _fill_case(3, 5, 10, [(2, 1), (0, 3)], seed=831, k=5)
        yield _fill_case(1, 4, 9, [(0, 2)], seed=832, k=1, mask_id=3, first=4)
        yield _fill_case(
            2, 7, 15, [(1, 6), (0, 1), (1, 2)], seed=833, mask_id=5, first=6, dtype=torch.float32
        )


check_fill_mask = runner.register_given(
    4,
    "def fill_mask(logits, token_ids, mask_id, first_word_id, k=5):",
    _fill_cases,
    forbidden=Forbidden(python={mlm.fill_mask: "encoder_lib.fill_mask"}),
    slots=("the tensor of ids returned by fill_mask",),
    letters=("(N, k)",),
    inputs={"args[0]": "logits", "args[1]": "token_ids"},
    messages={
        "dtype": "{slot} has dtype {got}: return token ids (int64), the positions of the "
        "best scores, not the scores themselves."
    },
)
