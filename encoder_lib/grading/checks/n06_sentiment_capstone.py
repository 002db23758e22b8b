"""Notebook 06, the capstone: a sentence classifier trained on a task where word order decides,
as data for the runner.

- ``check_masked_mean(masked_mean)``, exercise (a): the mean of ``h`` (B, L, D) over the
  positions where the boolean ``keep`` (B, L) is True. Named: a plain mean over all L positions
  (padding included), the sum divided by the padded length L, the sum not divided at all, the
  mask's polarity reversed, the mean over the features instead of the positions, ``keepdim``
  left on, a mask without its trailing axis (an error, or silently along the features when
  L = D), a changed dtype, ``h`` changed in place, no gradient.
- ``check_train_step(train_step)``, exercise (b): one optimisation step on one mini-batch,
  returning the loss as a float. Named: ``model.eval()`` left on while training (dropout off),
  the loss computed on probabilities (softmax, then cross-entropy) or with ``F.nll_loss`` on the
  logits, the loss summed instead of averaged, ``zero_grad`` forgotten (gradients accumulate),
  the gradients zeroed between ``backward`` and ``step``, ``loss.backward()`` or
  ``optimizer.step()`` never called (or the step taken before ``backward``), two steps, the
  parameters updated by hand instead of by the optimiser given, the loss returned as a tensor.
- ``check_sentiment_classifier(SentimentClassifier)``, exercise (c): the forward pass of the
  classifier whose ``__init__`` is given (embedding, positions, encoder, head). Named: pooling
  over the padding (a plain mean), the sum divided by the padded length L, a sum, the pooling
  mask reversed, the first or last position instead of a mean, the encoder run without the
  padding mask or with it reversed, no positional encoding, the head applied to every position
  or on the wrong axis (to a mean over the features), softmax or log-softmax on the logits
  (probabilities instead of logits), predicted classes instead of logits, a forward that switches
  dropout off in training, gradients that do not reach the encoder.

Design choices:
- (b) does not depend on (a) or (c): its scenario (``@observe.scenario("capstone.train_step")``,
  run in the student's kernel) builds the check's own small classifier, float64, with the
  weights the check sends, stale gradients already in ``.grad`` (as a previous step leaves them,
  so a forgotten ``zero_grad`` shows at once) and a gradient-descent optimiser with weight
  decay (``_SGD``, so that an update written by hand differs from ``optimizer.step()``; not
  ``torch.optim``, whose first use imports ``torch._dynamo`` for seconds); it calls the
  student's ``train_step`` twice and records, after each call, the value returned, the
  parameters, and what happened in between: the model's mode during each forward, the backward
  passes, the optimiser steps and ``zero_grad`` calls, in order. Every comparison happens here,
  where the same two steps are replayed with ``encoder_lib``. Dropout is deterministic while the
  student's code runs (``observe.deterministic_dropout``), so a forward in eval mode shows in
  the values.
- (c) does not depend on (a): its scenario replaces the notebook's global ``masked_mean`` (the
  one the solution's ``forward`` calls) by the reference while the forward runs, then puts the
  student's back.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import encoder_lib

from .. import runner, vocabulary
from ..feedback import GradingError, Mistake
from ..kernel import observe
from ..kernel.observe import Call, Failure, Observation
from ..locate import Locate
from ..vocabulary import Case, ModuleSpec, backpropagating, close, keep_first, randn, reference_mode

__all__ = ["check_masked_mean", "check_train_step", "check_sentiment_classifier"]


# --- the reference -------------------------------------------------------------------------------


def _masked_mean(h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean of ``h`` (B, L, D) over the positions where ``keep`` (B, L) is True: (B, D)."""
    weights = keep.to(h.dtype)[:, :, None]  # (B, L, 1)
    return (h * weights).sum(dim=1) / weights.sum(dim=1)


class _Classifier(nn.Module):
    """The notebook's ``SentimentClassifier``: its given ``__init__`` (the same parameters in the
    same order) and the solution's ``forward``."""

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        max_len: int,
        d_model: int = 32,
        num_heads: int = 4,
        d_ff: int = 64,
        num_layers: int = 2,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.pad_id = pad_id
        self.embedding = encoder_lib.TokenEmbedding(
            vocab_size, d_model, padding_idx=pad_id, scale=False
        )
        self.positional = encoder_lib.SinusoidalPositionalEncoding(d_model, max_len)
        layer = encoder_lib.EncoderLayer(d_model, num_heads, d_ff, dropout)
        self.encoder = encoder_lib.TransformerEncoder(layer, num_layers)
        self.head = nn.Linear(d_model, 2)

    def hidden(self, token_ids: torch.Tensor, keep: torch.Tensor | None, positions: bool = True):
        """The encoder's output (B, L, D), attending where ``keep`` (B, L) is True (None: no
        mask)."""
        x = self.embedding(token_ids)
        x = self.positional(x) if positions else x
        return self.encoder(x, None if keep is None else keep[:, None, None, :])

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        keep = token_ids != self.pad_id  # (B, L)
        return self.head(_masked_mean(self.hidden(token_ids, keep), keep))  # (B, 2)


def _reference_classifier(seed: int, dtype: torch.dtype, *args: Any, **sizes: Any) -> _Classifier:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _Classifier(*args, **sizes).to(dtype)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # a visible head (nn.Linear starts small), norms that are not 1 and 0
        model.head.weight.mul_(4.0)
        model.head.bias.copy_(torch.tensor([0.3, -0.2], dtype=dtype))
        for name, p in model.named_parameters():
            if ".norm" in name:
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype))
    return model


def _wrong_poolings(h: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What the usual mistakes in pooling ``h`` (B, L, D) over the real positions give: a plain
    mean (the padding included), the mean of the padding (the mask reversed), the sum, and the
    sum divided by the padded length L."""
    k = keep[:, :, None].to(h.dtype)
    pad, total = 1 - k, (h * k).sum(dim=1)
    return h.mean(dim=1), (h * pad).sum(dim=1) / pad.sum(dim=1), total, total / h.shape[1]


def _token_ids(lengths: list[int], length: int, vocab: int, pad: int, seed: int) -> torch.Tensor:
    """(B, L) ids: ``lengths[b]`` real tokens (any id but pad) followed by padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab - 1, (len(lengths), length), generator=g)
    ids = ids + (ids >= pad).long()  # skip the pad id
    keep = keep_first(lengths, length, extra_axes=0)
    return ids.masked_fill(~keep, pad)


# --- (a) masked_mean -----------------------------------------------------------------------------


def _mean_mistakes(h: torch.Tensor, keep: torch.Tensor) -> dict[str, torch.Tensor]:
    plain, padding, total, by_length = _wrong_poolings(h, keep)
    mistakes = {
        Mistake(
            "mean-includes-padding",
            "it averages all L positions, padding included (a plain mean over dim 1). Average only "
            "the positions where keep is True: sum h * keep over the positions and divide by the "
            "number of real tokens.",
        ): plain,
        Mistake(
            "mask-reversed",
            "it averages the padding positions instead of the real tokens: the mask polarity is "
            "reversed. keep is True at real tokens.",
        ): padding,
        Mistake(
            "sum-not-mean",
            "it returns the sum of the real positions without dividing by their number (keep.sum "
            "over the positions).",
        ): total,
        Mistake(
            "divides-by-padded-length",
            "it divides the sum of the real positions by L, the padded length, instead of by the "
            "number of real tokens in each sentence: short sentences get small vectors.",
        ): by_length,
    }
    if h.shape[0] > 1:  # one sentence: its count is the batch's
        count = keep.to(h.dtype)
        mistakes[
            Mistake(
                "divides-by-batch-count",
                "it divides every sentence's sum by the number of real tokens in the whole batch "
                "(keep.sum() with no axis), not by that sentence's own count: each row must be "
                "the mean of its own real positions, so count per sentence, over the positions "
                "(dim=1), one count for each row.",
            )
        ] = total / count.sum()
        mistakes[
            Mistake(
                "divides-by-mean-length",
                "it divides every sentence's sum by the batch's mean number of real tokens, not "
                "by that sentence's own count: a short sentence gets a small vector and a long "
                "one a large one. Count the real tokens of each sentence (over dim=1).",
            )
        ] = total / count.sum(dim=1).mean()
    count = keep.sum(dim=1)
    prefix = keep_first(count.tolist(), h.shape[1], extra_axes=0)
    if not torch.equal(prefix, keep):  # real tokens not all first: a prefix is another mean
        k = prefix[:, :, None].to(h.dtype)
        mistakes[
            Mistake(
                "keep-read-as-lengths",
                "it averages the first n positions of each sentence, n being its number of real "
                "tokens: that assumes the real tokens come first. keep may mark any positions "
                "(padding on the left, or anywhere): weight each position by keep itself instead "
                "of turning it into a length.",
            )
        ] = (h * k).sum(dim=1) / count[:, None].to(h.dtype)
    if h.shape[0] == 1 and h.shape[1] == h.shape[2]:
        along_d = keep[:, None, :].to(h.dtype)  # what h * keep broadcasts to when L = D
        mistakes[
            Mistake(
                "mask-along-features",
                "the mask is applied along the features D instead of along the positions: keep has "
                "shape (B, L), and broadcasting lines shapes up from the right, so h * keep "
                "multiplies the last axis. Give it a trailing axis: keep[:, :, None].",
            )
        ] = (h * along_d).sum(dim=1) / keep.sum(dim=1, keepdim=True).to(h.dtype)
    return mistakes


def _trailing_axis_hint(failure: Failure) -> str | None:
    if "must match" not in failure.message:
        return None
    return Mistake(
        "keep-without-trailing-axis",
        "keep has shape (B, L) and h has shape (B, L, D): broadcasting lines shapes up from the "
        "right, so give keep a trailing axis first: keep[:, :, None] (or keep.unsqueeze(-1)), "
        "shape (B, L, 1).",
    )


def _mean_case(h: torch.Tensor, keep: torch.Tensor | list[int], gradient: bool = False) -> Case:
    """``keep``: the mask, or the lengths of the sentences (then real tokens come first)."""
    B, L, D = h.shape
    if not isinstance(keep, torch.Tensor):
        keep = keep_first(keep, L, extra_axes=0)
    h = h.clone()
    h[~keep] += 5.0  # padding far from the real positions, so that a leak shows
    dtype = "" if h.dtype == torch.float64 else f" ({h.dtype})"
    what = f"masked_mean(h, keep) with h of shape (B, L, D) = {(B, L, D)}{dtype}"
    case = Case(
        Call("masked_mean", "masked_mean", (h, keep)),
        what,
        reference=_masked_mean,
        mistakes=lambda: _mean_mistakes(h, keep),
        shape_hints=(
            {
                (B, L): Mistake(
                    "mean-over-features",
                    "That is (B, L): it averaged over the last axis (the D features) instead "
                    "of over the positions. Sum and count over dim=1.",
                ),
                (B, 1, D): Mistake(
                    "keepdim-kept",
                    "Drop keepdim=True from the sum over the positions (the result is one "
                    "D-vector per sentence, (B, D)); keep it only for the count if you need it to "
                    "broadcast.",
                ),
            },
        ),
    )
    return backpropagating(case, randn(B, D, seed=97).to(h.dtype)) if gradient else case


def _mean_cases(thorough: bool) -> Iterator[Case]:
    yield _mean_case(randn(3, 5, 4, seed=1), [4, 2, 3])
    if not thorough:
        return
    yield _mean_case(randn(2, 6, 3, seed=11), [6, 1])
    yield _mean_case(randn(1, 1, 5, seed=21), [1])
    yield _mean_case(randn(1, 4, 4, seed=31), [2])  # L = D
    scattered = torch.tensor([[True, False, True, False, True], [False, True, False, True, True]])
    yield _mean_case(randn(2, 5, 3, seed=41), scattered)
    yield _mean_case(randn(2, 5, 6, seed=51, dtype=torch.float32), [5, 3])
    for dtype in vocabulary.HALF_PRECISION:  # the docstring promises the dtype of h
        yield _mean_case(randn(2, 5, 6, seed=71).to(dtype), [5, 2])
    yield _mean_case(randn(2, 4, 3, seed=61), [3, 1], gradient=True)


check_masked_mean = runner.register_given(
    "(a)",
    "def masked_mean(h, keep):",
    _mean_cases,
    letters=("(B, D)",),
    inputs={"args[0]": "h", "args[1]": "keep"},
    failure_hint=_trailing_axis_hint,
    messages={
        "dtype": "{slot} has dtype {got}, but h was {expected}: keep h's dtype (convert keep with "
        ".to(h.dtype), not .float()).",
        "no_grad": "{slot} is not connected to h (no torch.no_grad(), .detach() or .item() in "
        "masked_mean): no gradient would reach the encoder under it, so it could not learn.",
    },
)


# --- (b) train_step: the scenario, in the student's kernel ---------------------------------------

_STEP = "capstone.train_step"


class _SGD:
    """Gradient descent with decoupled weight decay (AdamW's kind: ``p *= 1 - lr * wd`` then
    ``p -= lr * p.grad``), with what a training step calls of an optimiser:
    ``zero_grad(set_to_none=True)`` and ``step()``. The decay is there so that no hand-written
    update (``p -= lr * p.grad``, a ``torch.optim.SGD`` of the student's own) moves the
    parameters the way ``optimizer.step()`` does: a train_step that ignores the optimiser it is
    given is seen. Not ``torch.optim`` on purpose (see the module's docstring): every graded
    notebook would pay for it twice, in the kernel and in the grader."""

    def __init__(self, parameters: Any, lr: float, weight_decay: float):
        self.params = list(parameters)
        self.lr = lr
        self.weight_decay = weight_decay
        self.param_groups = [{"params": self.params, "lr": lr, "weight_decay": weight_decay}]
        self.events: list[str] = []

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.events.append("zero_grad")
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad = torch.zeros_like(p)

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        self.events.append("step")
        for p in self.params:
            if p.grad is not None:
                p.mul_(1 - self.lr * self.weight_decay)
                p.add_(p.grad, alpha=-self.lr)


def _parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


class _Log:
    """What happens to the model and the optimiser while ``train_step`` runs."""

    def __init__(self, model: nn.Module, optimizer: _SGD):
        self.events = optimizer.events
        self.modes: list[bool] = []
        model.register_forward_pre_hook(self._forward)
        model.head.bias.register_post_accumulate_grad_hook(lambda _: self.events.append("backward"))
        original = model.zero_grad

        def zero_grad(*args: Any, **kwargs: Any) -> Any:
            self.events.append("zero_grad")
            return original(*args, **kwargs)

        object.__setattr__(model, "zero_grad", zero_grad)

    def _forward(self, module: nn.Module, args: Any) -> None:
        self.events.append("forward")
        self.modes.append(module.training)

    def take(self) -> dict[str, Any]:
        facts = {"events": list(self.events), "modes": list(self.modes)}
        self.events.clear()
        self.modes.clear()
        return facts


@observe.scenario(_STEP)
def _run_train_step(lookup: Callable[[str], Any], call: Call) -> Observation:
    """Build the check's model and optimiser, call the student's ``train_step`` on each batch;
    record, after each call, the value returned, the parameters and what happened."""
    target = observe.lookup_target(lookup, call.target)
    obs = Observation(info={"target": observe.kind_of(target)})
    if not callable(target) or isinstance(target, type):
        return obs
    options = call.options
    with torch.random.fork_rng(devices=[]):
        model = _Classifier(**options["sizes"]).to(torch.float64)
    model.load_state_dict(options["state"])
    for name, p in model.named_parameters():
        p.grad = options["stale"][name].clone()
    model.train(call.train)
    optimizer = _SGD(model.parameters(), options["lr"], options["weight_decay"])
    log = _Log(model, optimizer)
    steps: list[dict[str, Any]] = []
    with observe.student_mode(call.exercise, call.seed) as seen:
        try:
            for ids, labels in options["batches"]:
                value = target(model, optimizer, ids.clone(), labels.clone())
                value, facts = observe.export_value(value)
                step = {"value": value, "tensors": facts, "parameters": _parameters(model)}
                steps.append(step | log.take())
        except Exception as error:  # anything the student's code raised is observed, not raised
            obs.failure = observe.failure_of(error, "call", seen)
        if seen and obs.failure is None:
            obs.failure = Failure("forbidden", seen[0], "", "call")
    obs.info["steps"] = steps
    return obs


# --- (b) train_step: judging what the scenario saw -----------------------------------------------

_SIZES = dict(
    vocab_size=10, pad_id=0, max_len=8, d_model=8, num_heads=2, d_ff=16, num_layers=1, dropout=0.25
)
_LR = 0.1
_WEIGHT_DECAY = 0.5


@dataclasses.dataclass
class _StepSetup:
    """One train_step case: the model's weights and stale gradients, the batches, the mode the
    model is handed in; and the reference's replay of the two steps."""

    seed: int
    train: bool

    def __post_init__(self) -> None:
        vocab, pad, seed = _SIZES["vocab_size"], _SIZES["pad_id"], self.seed
        self.batches = [
            (_token_ids([6, 3, 5, 2], 6, vocab, pad, seed + 1), torch.tensor([1, 0, 0, 1])),
            (_token_ids([4, 6, 1, 5], 6, vocab, pad, seed + 2), torch.tensor([0, 1, 1, 0])),
        ]
        model = _reference_classifier(seed, torch.float64, **_SIZES)
        self.state = {k: v.clone() for k, v in model.state_dict().items()}
        self.stale = {
            name: randn(*p.shape, seed=seed + 7 + i) * 0.5
            for i, (name, p) in enumerate(model.named_parameters())
        }

    def case(self) -> Case:
        """The case: the scenario's call, its value judged by ``_judge_train_step``."""
        call = Call(
            "train_step",
            "train_step",
            train=self.train,
            scenario=_STEP,
            options=dict(
                sizes=_SIZES,
                state=self.state,
                stale=self.stale,
                lr=_LR,
                weight_decay=_WEIGHT_DECAY,
                batches=self.batches,
            ),
            seed=self.seed,
        )
        return Case(
            call,
            f"train_step(model, optimizer, token_ids, labels) twice, on batches of shape (4, 6), "
            f"the model handed over in {'train' if self.train else 'eval'} mode with gradients "
            "left in .grad",
            judge=lambda obs, ask: _judge_train_step(self, obs),
        )

    def model(self, state: Mapping[str, torch.Tensor], train: bool = True) -> _Classifier:
        model = _reference_classifier(self.seed, torch.float64, **_SIZES)
        model.load_state_dict(state)
        return model.train(train)

    def update(
        self,
        state: Mapping[str, torch.Tensor],
        ids: torch.Tensor,
        labels: torch.Tensor,
        grads: Mapping[str, torch.Tensor] | None = None,
        weight_decay: float = _WEIGHT_DECAY,
    ) -> tuple[float, dict[str, torch.Tensor]]:
        """One right step from ``state``: (loss, parameters after). With ``grads`` (what .grad
        held before), the step that forgets to clear them; with ``weight_decay=0``, plain
        ``p -= lr * p.grad``, the update a student writes by hand."""
        model = self.model(state)
        optimizer = _SGD(model.parameters(), _LR, weight_decay)
        with reference_mode():
            loss = F.cross_entropy(model(ids), labels)
        loss.backward()
        if grads is not None:  # no zero_grad: the old gradients are still there
            for n, p in model.named_parameters():
                p.grad = p.grad + grads[n]
        optimizer.step()
        return loss.item(), _parameters(model)


def _same_parameters(got: Mapping[str, Any], want: Mapping[str, torch.Tensor]) -> bool:
    return set(got) == set(want) and all(close(got[n], want[n], 1e-9, 1e-7) for n in want)


_EVAL_MODE = Mistake(
    "eval-mode-in-training",
    "model.eval() is left on while training: the forward ran in evaluation mode, so dropout was "
    "off. Call model.train() at the start of train_step (the evaluation after each epoch leaves "
    "the model in eval mode, and dropout must be on for every training step).",
)
_PROBABILITIES = Mistake(
    "loss-on-probabilities",
    "the loss is computed on probabilities instead of logits: F.cross_entropy applies "
    "log_softmax itself, so softmax followed by F.cross_entropy squashes the gradients and "
    "stalls learning. Pass the raw logits: F.cross_entropy(model(token_ids), labels).",
)


def _loss_mistakes(s: _StepSetup, state, ids, labels, value: float) -> str | None:
    """The named mistake whose loss equals ``value``, or None."""
    with reference_mode(), torch.no_grad():
        train_logits, eval_logits = s.model(state)(ids), s.model(state, train=False)(ids)
    candidates = [
        (_EVAL_MODE, F.cross_entropy(eval_logits, labels)),
        (_PROBABILITIES, F.cross_entropy(F.softmax(train_logits, dim=-1), labels)),
        (
            Mistake(
                "eval-mode-and-probabilities",
                _EVAL_MODE + " The loss is also computed on probabilities instead of logits: pass "
                "the raw logits to F.cross_entropy, which applies log_softmax itself.",
            ),
            F.cross_entropy(F.softmax(eval_logits, dim=-1), labels),
        ),
        (
            Mistake(
                "nll-on-logits",
                "F.nll_loss is applied to the logits: it expects log-probabilities. Use "
                "F.cross_entropy(logits, labels), which is log_softmax followed by nll_loss.",
            ),
            F.nll_loss(train_logits, labels),
        ),
        (
            Mistake(
                "loss-summed",
                "the loss is summed over the batch instead of averaged (reduction='sum'): its "
                "size, and the size of every step, would grow with the batch. Use the default "
                "mean.",
            ),
            F.cross_entropy(train_logits, labels, reduction="sum"),
        ),
    ]
    for description, loss in candidates:
        if math.isclose(value, float(loss), rel_tol=1e-7, abs_tol=1e-9):
            return description
    return None


def _judge_train_step(s: _StepSetup, obs: Observation) -> None:
    steps: list[dict[str, Any]] = obs.info.get("steps", [])
    if len(steps) != len(s.batches):
        raise GradingError(
            "the grader got no record of the steps: run train_step's cell again.",
            mistake="no-answer",
        )
    state = s.state
    grads: dict[str, torch.Tensor] | None = s.stale
    for i, (step, (ids, labels)) in enumerate(zip(steps, s.batches, strict=True)):
        which = "" if i == 0 else " (on the second call)"
        value = step["value"]
        if isinstance(value, torch.Tensor):
            raise GradingError(
                Mistake(
                    "loss-as-tensor",
                    f"it returns the loss as a tensor{which}: return loss.item(), a Python "
                    "float. A tensor that still requires grad keeps the whole graph of its batch "
                    "alive, and the training loop stores one per step for the curves.",
                )
            )
        if value is None:
            raise GradingError(
                Mistake(
                    "returns-none",
                    f"it returns nothing (None){which}: return the loss of the batch as a Python "
                    "float, loss.item(); the training loop shows it and keeps it for the curves.",
                )
            )
        if type(value) is not float:
            raise GradingError(
                Mistake(
                    "loss-not-a-float",
                    f"it returns {vocabulary.describe(value)}{which}: return the loss of the batch "
                    "as a Python float, loss.item().",
                )
            )
        loss, after = s.update(state, ids, labels)
        events, modes = step.get("events", []), step.get("modes", [])
        if not math.isclose(value, loss, rel_tol=1e-7, abs_tol=1e-9):
            named = _loss_mistakes(s, state, ids, labels, value)
            if named:
                raise GradingError(named + which, mistake=named.id)
            if modes and not any(modes):
                raise GradingError(_EVAL_MODE + which, mistake=_EVAL_MODE.id)
            if not modes:  # the model was never called
                raise GradingError(
                    Mistake(
                        "model-not-called",
                        f"the loss it returns{which} is {value:.6g}, not the cross-entropy of "
                        "model(token_ids) against labels: call the model on the batch, take the "
                        "cross-entropy of its logits against labels and return it as a Python "
                        "float.",
                    )
                )
            raise GradingError(
                Mistake(
                    "mismatch",
                    f"the loss it returns{which} is {value:.6g}, but F.cross_entropy(logits, "
                    f"labels) with logits = model(token_ids) in training mode is {loss:.6g}.",
                )
            )
        got = step.get("parameters", {})
        if not _same_parameters(got, after):
            problem = _parameter_problem(s, state, ids, labels, grads, got, events)
            raise GradingError(problem + which, mistake=problem.id)
        state, grads = after, None


def _parameter_problem(s, state, ids, labels, grads, got, events) -> str:
    """What went wrong with the update when the loss was right."""
    unchanged = _same_parameters(got, state)
    backward = [i for i, e in enumerate(events) if e == "backward"]
    step = [i for i, e in enumerate(events) if e == "step"]
    zero = [i for i, e in enumerate(events) if e == "zero_grad"]
    if grads is not None and _same_parameters(got, s.update(state, ids, labels, grads)[1]):
        if zero and step and zero[0] > step[-1]:
            return Mistake(
                "zero-grad-after-step",
                "optimizer.zero_grad() is called after optimizer.step(): this step still used "
                "the gradients left in .grad by whatever ran before it (an earlier step, a "
                "check, an experiment), added to its own. Call optimizer.zero_grad() first, "
                "before loss.backward().",
            )
        return Mistake(
            "no-zero-grad",
            "optimizer.zero_grad() is never called: the gradients of the previous step are "
            "still in .grad, and loss.backward() adds to them, so every step uses a sum of old "
            "and new gradients. Call optimizer.zero_grad() before loss.backward().",
        )
    if unchanged and not backward:
        return Mistake(
            "no-backward",
            "loss.backward() is never called: no gradient is computed, so optimizer.step() has "
            "nothing to apply and the parameters do not move. Call loss.backward() between "
            "optimizer.zero_grad() and optimizer.step().",
        )
    if unchanged and not step:
        return Mistake(
            "no-step",
            "optimizer.step() is never called: the gradients are computed but the parameters "
            "never move. Call optimizer.step() after loss.backward().",
        )
    if backward and step and step[0] < backward[0]:
        return Mistake(
            "step-before-backward",
            "optimizer.step() is called before loss.backward(): the step uses gradients that "
            "are not there yet (or stale ones). The order is zero_grad, forward, loss, "
            "backward, step.",
        )
    if unchanged:
        return Mistake(
            "zero-grad-between-backward-and-step",
            "the gradients are zeroed between loss.backward() and optimizer.step(), so the step "
            "has nothing to apply and the parameters do not move. Call optimizer.zero_grad() "
            "first, before the forward pass or before loss.backward().",
        )
    if not step and _same_parameters(got, s.update(state, ids, labels, weight_decay=0.0)[1]):
        return Mistake(
            "update-by-hand",
            "the parameters are updated by hand (p -= lr * p.grad, or an optimiser made inside "
            "train_step) instead of by the optimizer it is given: optimizer.step() is never "
            "called. The optimiser decides the update (the notebook's AdamW keeps moments and "
            "decays the weights); call optimizer.step() after loss.backward().",
        )
    if len(step) > 1:
        return Mistake(
            "step-twice",
            f"optimizer.step() is called {len(step)} times: one training step updates the "
            "parameters once.",
        )
    after = s.update(state, ids, labels)[1]
    name = next(n for n in after if not close(got.get(n), after[n], 1e-9, 1e-7))
    return Mistake(
        "mismatch",
        vocabulary.mismatch(
            f"after the step, the parameter {name}", got.get(name), after[name], 1e-9, 1e-7
        ),
    )


def _step_hint(failure: Failure) -> str | None:
    if "does not require grad" in failure.message:
        return Mistake(
            "no-graph",
            "The loss has no graph to backpropagate through: do not run the forward pass under "
            "torch.no_grad() or detach the logits in train_step.",
        )
    if "Long" in failure.message:
        return Mistake(
            "cross-entropy-arguments-swapped",
            "F.cross_entropy takes the logits first and the integer labels second.",
        )
    return None


def _step_cases(thorough: bool) -> Iterator[Case]:
    yield _StepSetup(300, train=False).case()
    if thorough:
        yield _StepSetup(310, train=True).case()
        yield _StepSetup(320, train=False).case()


check_train_step = runner.register_given(
    "(b)",
    "def train_step(model, optimizer, token_ids, labels):",
    _step_cases,
    failure_hint=_step_hint,
)


# --- (c) SentimentClassifier.forward: the scenario, in the student's kernel ----------------------

_POOLING = "capstone.reference_pooling"


@observe.scenario(_POOLING)
def _run_with_reference_pooling(lookup: Callable[[str], Any], call: Call) -> Observation:
    """The generic call, with the notebook's ``masked_mean`` replaced by the reference while it
    runs, so that a mistake in exercise (a) does not cost the points of exercise (c)."""
    target = observe.lookup_target(lookup, call.target)
    namespace = getattr(getattr(target, "forward", None), "__globals__", None)
    if not isinstance(namespace, dict) or "masked_mean" not in namespace:
        return observe.run_call(lookup, call)
    saved = namespace["masked_mean"]
    namespace["masked_mean"] = _masked_mean
    try:
        return observe.run_call(lookup, call)
    finally:
        namespace["masked_mean"] = saved


# --- (c) SentimentClassifier.forward: the cases --------------------------------------------------


def _classifier_mistakes(model: _Classifier, ids: torch.Tensor, train: bool):
    keep, head = ids != model.pad_id, model.head
    with reference_mode(), torch.no_grad():
        h = model.hidden(ids, keep)
        logits = head(_masked_mean(h, keep))
        plain, padding, total, by_length = _wrong_poolings(h, keep)
        unmasked = _masked_mean(model.hidden(ids, None), keep)
        mask_reversed = _masked_mean(model.hidden(ids, ~keep), keep)
        no_positions = _masked_mean(model.hidden(ids, keep, positions=False), keep)
        m = {
            Mistake(
                "mean-includes-padding",
                "the pooling averages the padding positions too (a plain mean over dim 1): pool "
                "with masked_mean(h, keep), keep = token_ids != self.pad_id.",
            ): head(plain),
            Mistake(
                "divides-by-padded-length",
                "the pooling divides the sum of the real positions by L, the padded length, "
                "instead of by the number of real tokens: use masked_mean(h, keep).",
            ): head(by_length),
            Mistake(
                "pooling-mask-reversed",
                "the pooling averages the padding instead of the real tokens: the mask polarity "
                "is reversed (keep must be True where token_ids != self.pad_id).",
            ): head(padding),
            Mistake(
                "sum-not-mean",
                "it sums the real positions instead of averaging them (use masked_mean).",
            ): head(total),
            Mistake(
                "first-position-only",
                "it classifies the first position (<start>) only: average all the real positions "
                "with masked_mean.",
            ): head(h[:, 0]),
            Mistake(
                "last-position-only",
                "it classifies the last position, which is padding: average the real positions "
                "with masked_mean.",
            ): head(h[:, -1]),
            Mistake(
                "softmax-applied",
                "softmax is applied: return the raw logits, not probabilities. F.cross_entropy "
                "applies log-softmax itself, and argmax gives the same prediction on "
                "logits.",
            ): F.softmax(logits, dim=-1),
            Mistake(
                "log-softmax-applied",
                "log_softmax is applied: return the raw logits (the head's output), not "
                "log-probabilities. F.cross_entropy applies log-softmax "
                "itself.",
            ): F.log_softmax(logits, dim=-1),
        }
        if h.shape[1] == h.shape[2]:
            m[
                Mistake(
                    "pooled-over-features",
                    "the head is applied on the wrong axis: the pooling averages the D features "
                    "of each position (dim -1), so the head reads one number per position "
                    "instead of the sentence's D-vector. Pool over the positions (dim 1) with "
                    "masked_mean(h, keep), then apply the head.",
                )
            ] = head(h.mean(dim=-1))
        m |= {
            Mistake(
                "no-mask-to-encoder",
                "the encoder runs without the padding mask: the real tokens attend to the "
                "padding. Give the encoder a padding mask of shape (B, 1, 1, L), True at the "
                "real tokens (one value per key, the same for every head and query).",
                "keep (True at real tokens) is (B, L): indexing with None inserts a size-1 "
                "axis, one for the heads and one for the queries; the encoder takes the mask "
                "as its second argument.",
            ): head(unmasked),
            Mistake(
                "mask-reversed",
                "the mask passed to the encoder has the wrong polarity: True at padding. True "
                "means 'may attend', so it must be True at the real tokens.",
            ): head(mask_reversed),
            Mistake(
                "no-positional-encoding",
                "no positional encoding is added: without self.positional the encoder cannot "
                "tell the order of the words, and order is all this task is about. Apply "
                "self.positional to the embeddings.",
            ): head(no_positions),
        }
        if model.pad_id != 0:
            zero = ids != 0
            m[
                Mistake(
                    "pad-id-hard-coded",
                    f"it treats token id 0 as padding, but this model's padding id is "
                    f"{model.pad_id}: build keep from self.pad_id, not from a fixed number.",
                )
            ] = head(_masked_mean(model.hidden(ids, zero), zero))
    if train:
        model.eval()
        with torch.no_grad():
            m[
                Mistake(
                    "eval-in-forward",
                    "dropout is off in training mode: forward must not switch the model (or the "
                    "encoder) to eval mode; model.train() and model.eval() are the caller's job.",
                )
            ] = model(ids)
        model.train()
    return m


_CLASSIFIER_OPTIONS = dict(d_model=8, num_heads=2, d_ff=16, num_layers=2, dropout=0.1)
"""The keyword arguments of every classifier the check builds (after vocab_size, pad_id and
max_len)."""


def _classifier_case(
    lengths: list[int],
    L: int,
    seed: int,
    pad: int = 0,
    train: bool = False,
    dtype: torch.dtype = torch.float64,
    gradient: bool = False,
) -> Case:
    B, vocab = len(lengths), 11
    init = ((vocab, pad, 12), _CLASSIFIER_OPTIONS)
    model = _reference_classifier(seed, dtype, *init[0], **init[1]).train(train)
    ids = _token_ids(lengths, L, vocab, pad, seed + 1)
    keep = ids != pad  # (B, L)
    what = f"SentimentClassifier{init[0]}(token_ids) with token_ids of shape {(B, L)}"
    what += f" ({dtype})" if dtype != torch.float64 else ""
    what += " in training mode" if train else ""
    call = Call(
        "SentimentClassifier",
        "sentiment_classifier",
        (ids,),
        init=init,
        dtype=dtype,
        state={k: v.clone() for k, v in model.state_dict().items()},
        train=train,
        inspect=True,
        scenario=_POOLING,
        seed=seed,
    )
    case = Case(
        call,
        what,
        reference=model,
        mistakes=lambda: _classifier_mistakes(model, ids, train),
        shape_hints=(
            {
                (B, L, 2): Mistake(
                    "head-on-every-position",
                    "That is (B, L, 2): the head ran on every position. Pool first: masked_mean(h, "
                    "keep) gives one (B, D) vector per sentence, then the head gives (B, 2).",
                ),
                (B, 1, 2): Mistake(
                    "keepdim-kept",
                    "That is (B, 1, 2): the pooled vector kept its position axis "
                    "(keepdim=True?); the head needs (B, D).",
                ),
                (B,): Mistake(
                    "returns-classes",
                    "That is one number per sentence: return the logits (B, 2), the head's output, "
                    "not predicted classes (argmax is for reading predictions, and it has no "
                    "gradient to train with).",
                ),
            },
        ),
        module=ModuleSpec(
            parameters=[n for n, _ in model.named_parameters()],
            names_message=(
                "SentimentClassifier should have the parameters of the given __init__ (an "
                "embedding, an encoder and a head), got {got}: keep the given __init__."
            ),
        ),
        locate=Locate(
            model,
            ("embedding", "positional", "encoder", "head"),
            named={
                "the padding mask (token_ids != self.pad_id, as (B, 1, 1, L))": keep[:, None, None]
            },
            functions={"masked_mean({}, keep)": lambda h: _masked_mean(h, keep)},
        ),
    )
    if not gradient:
        return case
    case = backpropagating(case, randn(B, 2, seed=seed + 3).to(dtype), grad=("parameters",))
    order = sorted(case.grads, key=lambda n: not n.startswith("parameters.encoder."))
    case.grads = {name: case.grads[name] for name in order}  # the encoder's first
    case.grad_names = {name: f"self.{name.removeprefix('parameters.')}" for name in order}
    return case


def _classifier_hint(failure: Failure) -> str | None:
    if "mat1 and mat2" in failure.message:
        return Mistake(
            "pooled-over-features",
            "The head is applied on the wrong axis: it is an nn.Linear(D, 2), so it must get "
            "the pooled (B, D) vector. Pool the encoder's output over the positions (dim 1) with "
            "masked_mean(h, keep) first.",
        )
    if "mask" in failure.message:
        return Mistake(
            "mask-wrong-shape",
            "The encoder takes the mask as (B, 1, 1, L), True at real tokens: where token_ids "
            "differs from self.pad_id, with size-1 axes for the heads and the queries.",
        )
    return None


def _classifier_cases(thorough: bool) -> Iterator[Case]:
    yield _classifier_case([6, 4, 2], 7, seed=400)  # every row padded
    yield _classifier_case([6, 4, 2], 7, seed=410, train=True)
    if not thorough:
        return
    yield _classifier_case([5, 8], 8, seed=420, pad=1)  # L = D, and pad id 1
    yield _classifier_case([1], 1, seed=430)
    yield _classifier_case([6, 2, 3, 5], 6, seed=440, train=True, gradient=True)
    yield _classifier_case([5, 3], 5, seed=450, dtype=torch.float32)


check_sentiment_classifier = runner.register_given(
    "(c)",
    "class SentimentClassifier(nn.Module):",
    _classifier_cases,
    slots=("the output",),
    letters=("(B, 2)",),
    inputs={"args[0]": "token_ids"},
    failure_hint=_classifier_hint,
    messages={
        "dtype": "{slot} has dtype {got}, but the model is {expected}: keep the model's dtype (no "
        ".float() or .double(), no new tensors made with a fixed dtype)."
    },
)
