"""Checks of notebook 10's training step (exercise 7): ``make_optimizer`` and ``train_step``,
judged against PyTorch's ``torch.optim.AdamW`` on the same weights and batches.

The grader never imports JAX. The kernel's side (the ``"jax.train_step"`` scenario) builds the
course's reference ``EncoderBlock`` (``encoder_lib.jax_encoder``, so that a mistake in exercise 6
costs nothing here), writes PyTorch's weights into it, asks the student's ``make_optimizer`` for
an optimiser, compiles the student's ``train_step`` with ``nnx.jit`` (as the notebook's demo
does) and calls it on three batches in a row. After each call it sends back, as PyTorch state
dicts, the loss, the gradients ``train_step`` returned and the block's weights.

The grader replays the same three steps with ``nn.TransformerEncoderLayer`` (evaluation mode: no
dropout, as ``deterministic=True``), ``F.mse_loss`` and ``torch.optim.AdamW``, and compares step
by step: loss, gradients, weights. Each named mistake is the same replay with one thing changed:
L2 regularisation instead of decoupled weight decay (``torch.optim.Adam(weight_decay=...)``,
what ``optax.chain(optax.add_decayed_weights(wd), optax.adam(lr))`` computes), the betas
swapped, the learning rate and the weight decay swapped, no weight decay (or optax's default,
1e-4, which three steps cannot tell from none), and a fresh optimiser state at every step. A
gradient taken with respect to the input instead of the model never reaches the weights'
structure: its exception is named.

The key projection's bias is left out of the weights' comparison: softmax ignores a constant
added to a row of scores, so its gradient is zero in exact arithmetic and rounding alone decides
the sign of its Adam step (it is still compared as a gradient, where both sides give ~1e-9).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import observe, runner
from .feedback import GradingError, Mistake
from .observe import Call, Failure, Observation
from .runner import Case, close, randn

__all__ = ["check_jax_train_step"]

_SCENARIO = "jax.train_step"
_SIZES = (16, 4, 32)  # D, H, d_ff: the sizes the block's checks use (their programs are cached)
_B, _L = 2, 5
_STEPS = 3
LOSS_RTOL = 1e-5
GRAD_ATOL, GRAD_RTOL = 1e-6, 1e-4
PARAM_ATOL, PARAM_RTOL = 1e-5, 1e-4
"""float32 on both sides: the gradients agree to about 3e-8 and the weights after three steps
to about 2e-7 (measured); the smallest named mistake moves a weight by about 5e-4."""


# --- the kernel's side: the student's step, compiled, three times --------------------------------


def _run_train_step(lookup: Callable[[str], Any], call: Call) -> Observation:
    """Build the reference block with ``call.state``, the student's optimiser
    (``make_optimizer(block, lr, betas, weight_decay)``), and call ``nnx.jit(train_step)`` on
    each batch; record after each call the loss, the gradients and the weights (PyTorch's
    names)."""
    from flax import nnx

    from encoder_lib import jax_bridge
    from encoder_lib.jax_encoder import EncoderBlock

    target = observe._lookup_target(lookup, call.target)
    obs = Observation(info={"target": observe.kind_of(target)})
    if not callable(target) or isinstance(target, type):
        return obs
    make_optimizer = observe._lookup_target(lookup, "make_optimizer")
    options = call.options
    steps: list[dict[str, Any]] = []
    phase = "construct"
    with observe.student_mode(call.exercise, call.seed) as seen:
        try:
            D, H, d_ff = options["sizes"]
            block = EncoderBlock(D, H, d_ff, 0.1, rngs=nnx.Rngs(params=0, dropout=1))
            jax_bridge.block_from_torch(block, call.state)
            optimizer = make_optimizer(block, *options["hyper"])
            step = _jitted(target)
            phase = "call"
            for x, y in options["batches"]:
                loss, grads = _pair(
                    step(block, optimizer, jax_bridge.to_jax(x), jax_bridge.to_jax(y))
                )
                steps.append(
                    {
                        "loss": _loss(loss),
                        "grads": _as_torch_state(block, grads),
                        "parameters": jax_bridge.block_to_torch(block),
                    }
                )
        except Exception as error:  # anything the student's code raised is observed
            obs.failure = observe._failure(error, phase, seen)
            if obs.failure.kind == "stub" and obs.failure.function == "make_optimizer":
                obs.failure.function = None  # the same answer cell: this exercise's own stub
        if seen and obs.failure is None:
            obs.failure = observe.seen_failure(seen[0], phase)
    obs.info["steps"] = steps
    return obs


_JITTED: list[tuple[Any, Any]] = []
"""The last answer compiled, and its ``nnx.jit`` wrapper: the thorough check runs the visible
case again, and a wrapper kept finds the program it compiled for it (same shapes, same
optimiser) instead of tracing and compiling it anew (about 2 s)."""


def _jitted(target: Any) -> Any:
    from flax import nnx

    if not _JITTED or _JITTED[0][0] is not target:
        _JITTED[:] = [(target, nnx.jit(target))]
    return _JITTED[0][1]


def _pair(value: Any) -> tuple[Any, Any]:
    if isinstance(value, tuple | list) and len(value) == 2:
        return value[0], value[1]
    return value, None


def _loss(loss: Any) -> Any:
    """The loss as a Python float when it is one number; else what it is, in words."""
    import numpy as np

    try:
        array = np.asarray(loss)
    except Exception:
        return f"a {type(loss).__name__}"
    if array.size != 1 or not np.issubdtype(array.dtype, np.floating):
        return f"an array of shape {tuple(array.shape)} and dtype {array.dtype}"
    return float(array.reshape(()))


def _as_torch_state(block: Any, grads: Any) -> dict[str, torch.Tensor] | str:
    """The gradients as a PyTorch state dict (what ``block_to_torch`` would give for a block
    holding them), or a sentence saying what they are instead."""
    from flax import nnx

    from encoder_lib import jax_bridge

    if grads is None:
        return "nothing (train_step did not return a pair (loss, grads))"
    holder = nnx.clone(block)
    try:
        nnx.update(holder, grads)
        return jax_bridge.block_to_torch(holder)
    except Exception:
        shape = getattr(grads, "shape", None)
        if shape is not None:
            return f"an array of shape {tuple(shape)}"
        return f"a {type(grads).__name__} that is not the model's parameters"


observe.SCENARIOS[_SCENARIO] = _run_train_step


# --- the grader's side: PyTorch's AdamW, with one switch per mistake -----------------------------


def _replay(
    state: Mapping[str, torch.Tensor],
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    way: str = "",
) -> list[dict[str, Any]]:
    """The steps as PyTorch takes them: per step the loss, the gradients and the weights after.
    ``way`` names a mistake."""
    D, H, d_ff = _SIZES
    with torch.random.fork_rng(devices=[]):
        layer = nn.TransformerEncoderLayer(D, H, d_ff, 0.1, batch_first=True)
    layer.load_state_dict(state)
    layer.eval()  # deterministic=True: no dropout

    def optimiser() -> torch.optim.Optimizer:
        if way == "l2":
            return torch.optim.Adam(layer.parameters(), lr, betas, weight_decay=weight_decay)
        b, wd, rate = betas, weight_decay, lr
        if way == "betas swapped":
            b = (betas[1], betas[0])
        elif way == "lr and wd swapped":
            rate, wd = weight_decay, lr
        elif way == "no decay":
            wd = 0.0
        return torch.optim.AdamW(layer.parameters(), rate, b, weight_decay=wd)

    opt = optimiser()
    steps = []
    for x, y in batches:
        if way == "fresh state":
            opt = optimiser()
        opt.zero_grad()
        loss = F.mse_loss(layer(x), y)
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in layer.named_parameters()}
        opt.step()
        after = {n: p.detach().clone() for n, p in layer.named_parameters()}
        steps.append({"loss": loss.item(), "grads": grads, "parameters": after})
    return steps


_MISTAKES = {
    "l2": Mistake(
        "l2-not-decoupled",
        "the weight decay is added to the gradient before Adam (L2 regularisation, what "
        "torch.optim.Adam(weight_decay=...) and optax.chain(optax.add_decayed_weights(wd), "
        "optax.adam(lr)) do), so Adam's scaling shrinks it with the gradient. AdamW decouples "
        "it: the weights are decayed beside Adam's step, by lr * weight_decay * w. optax.adamw "
        "does exactly this.",
    ),
    "betas swapped": Mistake(
        "betas-swapped",
        "the two betas are swapped: b1 (betas[0], about 0.9) is the decay of the gradient's "
        "running mean, b2 (betas[1], close to 1) that of the squared gradient's. The first step "
        "is the same either way; the second shows it.",
    ),
    "lr and wd swapped": Mistake(
        "lr-weight-decay-swapped",
        "the learning rate and the weight decay are swapped: optax.adamw's first argument is "
        "the learning rate, and weight_decay= is the decay.",
    ),
    "no decay": Mistake(
        "weight-decay-not-passed",
        "the weights are not decayed by the weight_decay make_optimizer is given: this is Adam "
        "(optax.adam), or optax.adamw without weight_decay=, whose default, 1e-4, is next to "
        "nothing (torch.optim.AdamW's is 1e-2; neither is this one). Pass "
        "weight_decay=weight_decay on to optax.adamw.",
    ),
    "fresh state": Mistake(
        "state-not-carried",
        "every step starts from a fresh optimiser state: Adam's running means restart at zero "
        "and its step count at 1, so each step is a first step again. The state lives in the "
        "optimiser (nnx.Optimizer keeps it, and optimizer.update(model, grads) advances it); "
        "build it once, in make_optimizer, and update that one at every step.",
    ),
}

_WRONG_ARGUMENT = Mistake(
    "grad-wrong-argument",
    "the gradients are not the model's: value_and_grad differentiates with respect to one "
    "argument (argnums=0, the first, by default), and here it is the input or the target, not "
    "the model. Put the model first in the loss function, loss_fn(model), and differentiate "
    "with respect to it: the gradients then have the model's parameters' structure, which "
    "optimizer.update needs.",
)


def _keep_key_bias(name: str, t: torch.Tensor) -> torch.Tensor:
    """``t`` without the key projection's bias (rows D:2D of ``in_proj_bias``), whose step
    rounding decides (see the module's docstring)."""
    if name != "self_attn.in_proj_bias":
        return t
    D = t.shape[0] // 3
    return torch.cat([t[:D], t[2 * D :]])


def _same_weights(got: Any, want: Mapping[str, torch.Tensor]) -> bool:
    return (
        isinstance(got, Mapping)
        and set(got) == set(want)
        and all(
            close(_keep_key_bias(n, got[n]), _keep_key_bias(n, want[n]), PARAM_ATOL, PARAM_RTOL)
            for n in want
        )
    )


def _judge(state, batches, hyper) -> Callable[[Observation, Any], None]:
    def judge(obs: Observation, ask: Any) -> None:
        steps = obs.info.get("steps") or []
        if len(steps) != len(batches):
            raise GradingError(
                "the grader got no record of the steps: run train_step's cell again.",
                mistake="no-answer",
            )
        right = _replay(state, batches, *hyper)
        for i, (got, want) in enumerate(zip(steps, right, strict=True)):
            which = ("first", "second", "third")[i]
            loss = got["loss"]
            if not isinstance(loss, float):
                raise GradingError(
                    Mistake(
                        "loss-not-a-scalar",
                        f"the loss train_step returns is {loss}: return (loss, grads), the "
                        "loss a single number (the mean over every element), as "
                        "nnx.value_and_grad gives it.",
                    )
                )
            if not math.isclose(loss, want["loss"], rel_tol=LOSS_RTOL, abs_tol=1e-7):
                raise GradingError(
                    Mistake(
                        "mismatch",
                        f"at the {which} step the loss is {loss:.6g}, but the mean squared "
                        "error of model(x, deterministic=True) against y, before the step, is "
                        f"{want['loss']:.6g}.",
                    )
                )
            grads = got["grads"]
            if isinstance(grads, str):
                raise GradingError(
                    Mistake(
                        "grads-not-returned",
                        f"the second value train_step returns is {grads}: return the "
                        "gradients nnx.value_and_grad gave, an nnx.State of the model's "
                        "parameters.",
                    )
                )
            for name, g in want["grads"].items():
                if not close(grads.get(name), g, GRAD_ATOL, GRAD_RTOL):
                    raise GradingError(
                        Mistake(
                            "mismatch",
                            f"at the {which} step, "
                            + runner.mismatch(
                                f"the gradient of the weights PyTorch calls {name}",
                                grads.get(name),
                                g,
                                GRAD_ATOL,
                                GRAD_RTOL,
                            ),
                        )
                    )
            if _same_weights(got["parameters"], want["parameters"]):
                continue
            for way, text in _MISTAKES.items():
                wrong = _replay(state, batches, *hyper, way=way)
                if all(
                    _same_weights(steps[j]["parameters"], wrong[j]["parameters"])
                    for j in range(i + 1)
                ):
                    raise GradingError(text)
            name = next(
                n
                for n, w in want["parameters"].items()
                if not close(
                    _keep_key_bias(n, got["parameters"][n]),
                    _keep_key_bias(n, w),
                    PARAM_ATOL,
                    PARAM_RTOL,
                )
            )
            raise GradingError(
                Mistake(
                    "mismatch",
                    f"the loss and gradients are right, but after the {which} step "
                    + runner.mismatch(
                        f"the weights PyTorch calls {name}",
                        _keep_key_bias(name, got["parameters"][name]),
                        _keep_key_bias(name, want["parameters"][name]),
                        PARAM_ATOL,
                        PARAM_RTOL,
                    )
                    + " torch.optim.AdamW took another step from the same gradients.",
                )
            )

    return judge


def _step_hint(failure: Failure) -> str | None:
    message = failure.message
    if (
        "tuple index out of range" in message
        or "pytree structure" in message.lower()
        or "Custom node type mismatch" in message
        or "Dict key mismatch" in message
    ):
        return _WRONG_ARGUMENT
    if "Concretization" in failure.error or "Concretization" in message:
        return Mistake(
            "not-jittable",
            "train_step runs under nnx.jit, where the loss is an abstract array while it is "
            "traced: no float(...), .item() or Python if on its value inside train_step. "
            "Return the loss as a JAX array.",
        )
    return None


def _case(seed: int, lr: float, betas: tuple[float, float], weight_decay: float) -> Case:
    D, H, d_ff = _SIZES
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = nn.TransformerEncoderLayer(D, H, d_ff, 0.1, batch_first=True)
    state = {n: t.detach().clone() for n, t in layer.state_dict().items()}
    batches = [
        (
            randn(_B, _L, D, seed=seed + 2 * i + 1).to(torch.float32),
            randn(_B, _L, D, seed=seed + 2 * i + 2).to(torch.float32),
        )
        for i in range(_STEPS)
    ]
    hyper = (lr, betas, weight_decay)
    call = Call(
        "train_step",
        "jax_train_step",
        state=state,
        scenario=_SCENARIO,
        options={"sizes": _SIZES, "hyper": hyper, "batches": batches},
        seed=seed,
    )
    what = (
        f"make_optimizer(block, {lr:g}, {betas}, {weight_decay:g}), then nnx.jit(train_step) "
        f"on three batches of shape {(_B, _L, D)}, the block nn.TransformerEncoderLayer({D}, "
        f"{H}, {d_ff})'s weights, compared with torch.optim.AdamW"
    )
    return Case(call, what, judge=_judge(state, batches, hyper))


def _cases(thorough: bool) -> Iterator[Case]:
    yield _case(10_710, 1e-2, (0.9, 0.98), 0.05)
    if thorough:
        yield _case(10_720, 3e-3, (0.8, 0.95), 0.2)


check_jax_train_step = runner.register_given(
    7,
    "def train_step(model, optimizer, x, y):",
    _cases,
    name="jax_train_step",
    failure_hint=_step_hint,
)
