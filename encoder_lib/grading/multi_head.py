"""Checks for notebook 02, multi-head attention: ``split_heads``, ``merge_heads`` and the
``MultiHeadAttention`` module, plus ``load_reference_weights``, which gives a student's module the
reference's weights whatever layout its projections use (the encoder notebook reuses it).

Mistakes the checks name (each recognised from the output it produces):

* ``split_heads``: ``view``/``reshape`` straight to ``(B, H, L, d_head)`` with no transpose;
  heads built from interleaved features (``h, h + H, ...``); the transpose forgotten (shape
  ``(B, L, H, d_head)``); the input modified in place; the output cut off from autograd.
* ``merge_heads``: ``reshape`` straight back to ``(B, L, D)`` with no transpose; interleaved
  features; ``transpose(...).view(...)`` on non-contiguous memory; heads left unflattened.
* ``MultiHeadAttention``: output or weights of the wrong shape (weights averaged over the heads
  give ``(B, L_q, L_k)``); scores scaled by ``sqrt(D)`` or not at all instead of
  ``sqrt(d_head)``; heads split or merged with ``view`` but no transpose, or interleaved; the
  output projection missing; ``q_proj`` used for keys and values (or any other mix-up of the
  three projections, or of the ``query``/``key``/``value`` inputs); the mask ignored or its
  polarity reversed; the softmax over the wrong axis; scores returned instead of weights; dropout
  active in eval mode; outputs cut off from autograd; ``nn.MultiheadAttention``,
  ``F.multi_head_attention_forward``, ``torch._native_multi_head_attention`` or
  ``encoder_lib.MultiHeadAttention`` doing the work (``ForbiddenCallError``).

Projection layouts ``load_reference_weights`` accepts (every one found is loaded):

* separate layers ``q_proj``, ``k_proj``, ``v_proj``, each with ``weight (D, D)`` and ``bias (D,)``
  (the notebook's given ``__init__``);
* PyTorch's fused parameters ``in_proj_weight (3D, D)`` and ``in_proj_bias (3D,)`` (or None), as
  ``nn.MultiheadAttention`` and ``encoder_lib.MultiHeadAttention`` store them;
* one fused layer ``in_proj`` or ``qkv_proj`` (e.g. ``nn.Linear(D, 3 * D)``) whose output splits
  with ``chunk(3, dim=-1)`` into Q, K, V in that order (rows ``[0, D)`` are Q, ``[D, 2D)`` K,
  ``[2D, 3D)`` V: the same order as ``in_proj_weight``);

and in every case ``out_proj`` with ``weight (D, D)`` and ``bias (D,)``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import encoder_lib

from . import _core
from ._core import ForbiddenCallError, GradingError

__all__ = [
    "check_split_heads",
    "check_merge_heads",
    "check_multi_head_attention",
    "load_reference_weights",
]

_FORBIDDEN_TORCH = {
    F.multi_head_attention_forward: "F.multi_head_attention_forward (nn.MultiheadAttention)",
    torch._native_multi_head_attention: "torch._native_multi_head_attention",
}
_FORBIDDEN_PYTHON = (encoder_lib.MultiHeadAttention,)
_BUILTIN_MODULES = (nn.MultiheadAttention, encoder_lib.MultiHeadAttention)
_FUSED_LINEAR_NAMES = ("in_proj", "qkv_proj")

_VIEW_HINT = (
    " `view` only works on memory laid out contiguously, and a transposed tensor is not: use "
    "`reshape`, or `.contiguous().view(...)`."
)
_SHAPE_HINT = (
    " Print the shape after every step: (B, L, D) -> view (B, L, H, d_head) -> transpose "
    "(B, H, L, d_head) -> attention -> transpose back (B, L, H, d_head) -> reshape (B, L, D)."
)


# --- calling student code ------------------------------------------------------------------------


@contextlib.contextmanager
def _student(
    exercise: str,
    forbidden: bool = False,
    shape_hint: bool = False,
) -> Iterator[None]:
    """``_core.student_call`` with this notebook's traps, plus hints for two common failures:
    ``view`` on a transposed tensor, and an earlier exercise that is still a stub."""
    try:
        with _core.student_call(
            exercise,
            _FORBIDDEN_TORCH if forbidden else None,
            _FORBIDDEN_PYTHON if forbidden else (),
        ):
            yield
    except GradingError as e:
        if _core._type(e) is not GradingError:
            raise
        cause = e.__cause__
        if isinstance(cause, NotImplementedError):
            where = _core.innermost_function(cause)
            if where == "_forward_unimplemented":
                raise GradingError(
                    f"{exercise}: your class has no method `forward` (check its spelling and "
                    "that it is indented inside the class)."
                ) from cause
            if where and where not in exercise and where != "forward":
                raise GradingError(
                    f"{exercise} calls {where}, which is not written yet: finish {where} first "
                    "(or write this step without it)."
                ) from cause
            raise
        if isinstance(cause, RuntimeError) and "view size is not compatible" in str(cause):
            raise GradingError(f"{e}{_VIEW_HINT}") from cause
        if shape_hint and isinstance(cause, RuntimeError | ValueError | IndexError):
            raise GradingError(f"{e}{_SHAPE_HINT}") from cause
        raise


def _expect_shape(
    x: Any,
    shape: tuple[int, ...],
    what: str,
    letters: str,
    hints: dict[tuple[int, ...], str] | None = None,
) -> None:
    _core.expect_tensor(x, what)
    got = tuple(x.shape)
    if got != tuple(shape) and hints and got in hints:
        raise GradingError(
            f"{what} has the wrong shape: expected {letters} = {tuple(shape)}, got {got}: "
            f"{hints[got]}"
        )
    _core.expect_shape(x, shape, what, letters)


def _expect_unchanged(given: torch.Tensor, original: torch.Tensor, exercise: str, name: str):
    if given.shape != original.shape or not bool(torch.equal(given.detach(), original)):
        raise GradingError(
            f"{exercise} changed its input `{name}` in place; compute a new tensor instead "
            "(avoid in-place methods ending in `_` on the inputs)."
        )


def _expect_grad(
    leaf: torch.Tensor, expected: torch.Tensor, exercise: str, name: str, what: str
) -> None:
    if leaf.grad is None:
        raise GradingError(
            f"{exercise}: no gradient reaches `{name}`, so nothing before it could be trained. "
            "Do not use .detach(), .numpy(), torch.tensor(...) or .data on the way."
        )
    _core.expect_close(leaf.grad, expected, f"the gradient of {what} with respect to `{name}`")


# --- split_heads / merge_heads -------------------------------------------------------------------

_SPLIT_NO_TRANSPOSE = (
    "the features were reshaped straight to (B, H, L, d_head) with view/reshape and no transpose, "
    "so each head mixes the features of several tokens. Split the last dimension first, "
    "view(B, L, H, d_head), then swap the head and sequence dimensions with transpose(1, 2)."
)
_SPLIT_INTERLEAVED = (
    "head h got the interleaved features h, h + H, h + 2H, ... of the embedding. Head h must get "
    "the consecutive block h * d_head ... (h + 1) * d_head - 1: view(B, L, H, d_head), then "
    "transpose(1, 2)."
)
_MERGE_NO_TRANSPOSE = (
    "the heads were merged with view/reshape straight from (B, H, L, d_head) to (B, L, D), "
    "without transposing back first, so tokens receive each other's features. Transpose to "
    "(B, L, H, d_head) with transpose(1, 2), then reshape to (B, L, D)."
)
_MERGE_INTERLEAVED = (
    "the heads were merged into interleaved features (head h at positions h, h + H, ...). Head "
    "h's d_head features must become the consecutive block h * d_head ... (h + 1) * d_head - 1: "
    "transpose(1, 2), then reshape to (B, L, D)."
)


@_core.guarded
def check_split_heads(split_heads: Callable[..., Any], thorough: bool = False) -> None:
    """``split_heads(x, num_heads)`` turns ``(B, L, D)`` into ``(B, H, L, d_head)``, head h
    holding features ``[h * d_head, (h + 1) * d_head)`` of every token."""
    cases = [(2, 3, 20, 4)]  # (B, L, D, H): all sizes distinct, so a swapped axis shows
    if thorough:
        cases += [(1, 1, 6, 1), (3, 4, 6, 6), (2, 5, 24, 3), (1, 7, 16, 8)]
    for i, (B, L, D, H) in enumerate(cases):
        d = D // H
        x = _core.randn(B, L, D, seed=200 + i)
        expected = x.view(B, L, H, d).transpose(1, 2)
        mistakes = {
            _SPLIT_NO_TRANSPOSE: x.reshape(B, H, L, d),
            _SPLIT_INTERLEAVED: x.view(B, L, d, H).permute(0, 3, 1, 2),
        }
        given = x.clone()
        with _student("split_heads"):
            got = split_heads(given, H)
        what = f"split_heads(x, num_heads={H}) for x of shape (B, L, D) = {(B, L, D)}"
        _expect_unchanged(given, x, "split_heads", "x")
        hints = {
            (B, L, H, d): "the head dimension must come before the sequence dimension: after "
            "view(B, L, H, d_head), swap them with transpose(1, 2).",
            (B, H * L, d): "keep the heads and the positions as two separate dimensions.",
        }
        _expect_shape(got, (B, H, L, d), what, "(B, H, L, d_head)", hints)
        _core.expect_close(got, expected, what, mistakes)
    if thorough:
        B, L, D, H = 2, 3, 12, 3
        x = _core.randn(B, L, D, seed=210).requires_grad_()
        g = _core.randn(B, H, L, D // H, seed=211)
        with _student("split_heads"):
            got = split_heads(x, H)
            if isinstance(got, torch.Tensor) and got.requires_grad:
                (got * g).sum().backward()
        _expect_grad(x, g.transpose(1, 2).reshape(B, L, D), "split_heads", "x", "split_heads")


@_core.guarded
def check_merge_heads(merge_heads: Callable[..., Any], thorough: bool = False) -> None:
    """``merge_heads(x)`` turns ``(B, H, L, d_head)`` back into ``(B, L, D)``, the inverse of
    ``split_heads``."""
    cases = [(2, 4, 3, 5)]  # (B, H, L, d_head): all sizes distinct
    if thorough:
        cases += [(1, 1, 1, 6), (3, 6, 4, 1), (2, 3, 5, 8), (1, 8, 7, 2)]
    for i, (B, H, L, d) in enumerate(cases):
        D = H * d
        x = _core.randn(B, H, L, d, seed=300 + i)
        expected = x.transpose(1, 2).reshape(B, L, D)
        mistakes = {
            _MERGE_NO_TRANSPOSE: x.reshape(B, L, D),
            _MERGE_INTERLEAVED: x.permute(0, 2, 3, 1).reshape(B, L, D),
        }
        given = x.clone()
        with _student("merge_heads"):
            got = merge_heads(given)
        what = f"merge_heads(x) for x of shape (B, H, L, d_head) = {(B, H, L, d)}"
        _expect_unchanged(given, x, "merge_heads", "x")
        hints = {
            (B, L, H, d): "the heads were moved back behind the sequence but not joined: reshape "
            "to (B, L, H * d_head).",
            (B, H, L * d): "transpose(1, 2) first, so that each position's heads end up side "
            "by side, then reshape to (B, L, D).",
        }
        _expect_shape(got, (B, L, D), what, "(B, L, D)", hints)
        _core.expect_close(got, expected, what, mistakes)
    if thorough:
        B, H, L, d = 2, 3, 4, 2
        x = _core.randn(B, H, L, d, seed=310).requires_grad_()
        g = _core.randn(B, L, H * d, seed=311)
        with _student("merge_heads"):
            got = merge_heads(x)
            if isinstance(got, torch.Tensor) and got.requires_grad:
                (got * g).sum().backward()
        _expect_grad(x, g.view(B, L, H, d).transpose(1, 2), "merge_heads", "x", "merge_heads")


# --- loading weights into any layout -------------------------------------------------------------


def _get(module: Any, name: str) -> Any:
    try:
        return getattr(module, name, None)
    except Exception:  # a property written by the student may raise anything
        return None


def _copy_into(owner: str, target: Any, source: torch.Tensor) -> None:
    if not isinstance(target, torch.Tensor):
        raise GradingError(
            f"{owner} should be a tensor (an nn.Parameter) of shape {tuple(source.shape)}, got "
            f"{type(target).__name__}"
        )
    if tuple(target.shape) != tuple(source.shape):
        raise GradingError(
            f"{owner} should have shape {tuple(source.shape)}, got {tuple(target.shape)}"
        )
    with torch.no_grad():
        target.copy_(source)


def _copy_bias(owner: str, target: Any, source: torch.Tensor | None) -> None:
    if source is None:
        if isinstance(target, torch.Tensor):
            with torch.no_grad():
                target.zero_()
        return
    if target is None:
        if bool(source.any()):
            raise GradingError(
                f"{owner} is missing (None), but the reference has a bias: keep bias=True "
                "(nn.Linear's default)."
            )
        return
    _copy_into(owner, target, source)


def _copy_layer(
    module: nn.Module, name: str, weight: torch.Tensor, bias: torch.Tensor | None
) -> None:
    cls = type(module).__name__
    layer = _get(module, name)
    _copy_into(f"{cls}.{name}.weight", _get(layer, "weight"), weight)
    _copy_bias(f"{cls}.{name}.bias", _get(layer, "bias"), bias)


def load_reference_weights(module: nn.Module, reference: nn.Module) -> nn.Module:
    """Copy ``reference``'s weights into ``module`` (a student's multi-head attention) and return
    ``module``.

    ``reference`` is an ``encoder_lib.MultiHeadAttention`` (or an ``nn.MultiheadAttention`` with
    ``kdim = vdim = embed_dim``): fused ``in_proj_weight (3D, D)`` (Q, K, V rows in that order),
    ``in_proj_bias`` and ``out_proj``. ``module`` may hold its projections as separate layers
    ``q_proj``/``k_proj``/``v_proj``, as PyTorch's fused ``in_proj_weight``/``in_proj_bias``, or as
    one fused layer ``in_proj`` or ``qkv_proj`` of ``weight (3D, D)``; every layout it has is
    loaded, so a module that keeps unused layers still gets the right weights where it reads them.
    It must have ``out_proj``. Values are copied into the existing tensors, which keep their dtype
    (as ``load_state_dict`` does): convert ``module`` first to compare in float64.

    Raises ``GradingError`` naming the attribute that is missing or has the wrong shape.
    """
    if not isinstance(module, nn.Module):
        raise GradingError(
            f"expected an nn.Module (an instance of your MultiHeadAttention), got "
            f"{type(module).__name__}"
        )
    cls = type(module).__name__
    weight = reference.in_proj_weight.detach()
    bias = None if reference.in_proj_bias is None else reference.in_proj_bias.detach()
    D = weight.shape[1]
    weights = weight.chunk(3)
    biases = (None,) * 3 if bias is None else bias.chunk(3)

    separate = ("q_proj", "k_proj", "v_proj")
    present = [name for name in separate if _get(module, name) is not None]
    loaded = False
    if len(present) == 3:
        layers = {name: _get(module, name) for name in separate}
        for a, b in itertools.combinations(separate, 2):
            wa, wb = _get(layers[a], "weight"), _get(layers[b], "weight")
            if layers[a] is layers[b] or (wa is not None and wa is wb):
                raise GradingError(
                    f"{cls}.{b} is the same layer as {cls}.{a}: each projection needs its own "
                    f"nn.Linear(D, D) with its own weights."
                )
        for name, w, b in zip(separate, weights, biases, strict=True):
            _copy_layer(module, name, w, b)
        loaded = True
    if _get(module, "in_proj_weight") is not None:
        _copy_into(f"{cls}.in_proj_weight", _get(module, "in_proj_weight"), weight)
        _copy_bias(f"{cls}.in_proj_bias", _get(module, "in_proj_bias"), bias)
        loaded = True
    for name in _FUSED_LINEAR_NAMES:
        if _get(module, name) is not None:
            _copy_layer(module, name, weight, bias)
            loaded = True
    if not loaded:
        if present:
            missing = ", ".join(f"`{n}`" for n in separate if n not in present)
            raise GradingError(
                f"{cls} has {', '.join(f'`{n}`' for n in present)} but no {missing}: keep the "
                f"three projections q_proj, k_proj, v_proj (nn.Linear({D}, {D}) each) that the "
                "given __init__ creates."
            )
        raise GradingError(
            f"{cls} has no attribute `q_proj` (nor PyTorch's fused `in_proj_weight`, nor a fused "
            f"layer `in_proj`): keep the projections q_proj, k_proj, v_proj (nn.Linear({D}, {D}) "
            "each) that the given __init__ creates."
        )
    if _get(module, "out_proj") is None:
        raise GradingError(
            f"{cls} has no attribute `out_proj`, the output projection nn.Linear({D}, {D}) that "
            "mixes the heads: keep the one the given __init__ creates."
        )
    _copy_layer(module, "out_proj", reference.out_proj.weight.detach(), _out_bias(reference))
    return module


def _out_bias(reference: nn.Module) -> torch.Tensor | None:
    b = reference.out_proj.bias
    return None if b is None else b.detach()


# --- MultiHeadAttention --------------------------------------------------------------------------


def _reference(D: int, H: int, seed: int) -> encoder_lib.MultiHeadAttention:
    """A float64 reference with random (not PyTorch's zero) biases, so every parameter shows."""
    ref = encoder_lib.MultiHeadAttention(D, H).to(torch.float64).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(_core.randn(3 * D, D, seed=seed) / math.sqrt(D))
        ref.in_proj_bias.copy_(_core.randn(3 * D, seed=seed + 1) * 0.2)
        ref.out_proj.weight.copy_(_core.randn(D, D, seed=seed + 2) / math.sqrt(D))
        ref.out_proj.bias.copy_(_core.randn(D, seed=seed + 3) * 0.2)
    return ref


_SLOT = ("queries", "keys", "values")
_INPUT = ("query", "key", "value")


def _attend(
    ref: encoder_lib.MultiHeadAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    proj: str = "qkv",
    inputs: tuple[int, int, int] = (0, 1, 2),
    scale: str = "head",
    split: str = "ok",
    merge: str = "ok",
    out_proj: bool = True,
    mask_mode: str = "ok",
    softmax_dim: int = -1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Multi-head attention with one mistake switched on: ``(output, weights, scores)``."""
    B, L_q, D = query.shape
    H = ref.num_heads
    d = D // H
    w = dict(zip("qkv", ref.in_proj_weight.chunk(3), strict=True))
    b = dict(zip("qkv", ref.in_proj_bias.chunk(3), strict=True))
    src = (query, key, value)

    def heads(t: torch.Tensor, kind: str) -> torch.Tensor:
        n, length, _ = t.shape
        if kind == "view":
            return t.reshape(n, H, length, d)
        if kind == "interleaved":
            return t.reshape(n, length, d, H).permute(0, 3, 1, 2)
        return t.reshape(n, length, H, d).transpose(1, 2)

    q, k, v = (heads(F.linear(src[inputs[i]], w[proj[i]], b[proj[i]]), split) for i in range(3))
    scores = q @ k.transpose(-2, -1)
    if scale == "head":
        scores = scores / math.sqrt(d)
    elif scale == "model":
        scores = scores / math.sqrt(D)
    masked = scores
    if mask is not None and mask_mode != "ignored":
        allowed = mask if mask_mode == "ok" else ~mask
        masked = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(masked, dim=softmax_dim).nan_to_num(0.0)
    out = weights @ v  # (B, H, L_q, d)
    if merge == "view":
        out = out.reshape(B, L_q, D)
    elif merge == "interleaved":
        out = out.permute(0, 2, 3, 1).reshape(B, L_q, D)
    else:
        out = out.transpose(1, 2).reshape(B, L_q, D)
    if out_proj:
        out = F.linear(out, ref.out_proj.weight, ref.out_proj.bias)
    return out, weights, scores


def _mistakes(
    ref: encoder_lib.MultiHeadAttention,
    args: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None],
) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """``(description, output, weights)`` of every mistake the check recognises, most common
    first (the first match is reported)."""
    D = args[0].shape[-1]
    H = ref.num_heads
    d = D // H
    found: list[tuple[str, dict[str, Any]]] = [
        (
            f"the scores are divided by sqrt(D) = sqrt(d_model) = sqrt({D}). Each head's dot "
            f"product sums only d_head = D / H = {d} products, so divide by sqrt(d_head) = "
            f"sqrt({d}).",
            {"scale": "model"},
        ),
        (
            f"the scores are not scaled: divide them by sqrt(d_head) = sqrt({d}) before the "
            "softmax.",
            {"scale": "none"},
        ),
        (
            "the heads were split and merged with view/reshape but no transpose, so each head "
            "mixes several tokens' features." + _SHAPE_HINT,
            {"split": "view", "merge": "view"},
        ),
        ("the heads were split wrongly: " + _SPLIT_NO_TRANSPOSE, {"split": "view"}),
        ("the heads were merged wrongly: " + _MERGE_NO_TRANSPOSE, {"merge": "view"}),
        (
            "the output projection is missing: pass the merged heads through self.out_proj, the "
            "layer that mixes what the heads found.",
            {"out_proj": False},
        ),
        (
            "q_proj is used for the queries, the keys and the values: project the keys with "
            "k_proj and the values with v_proj.",
            {"proj": "qqq"},
        ),
    ]
    for combo in itertools.product("qkv", repeat=3):
        proj = "".join(combo)
        if proj in ("qkv", "qqq"):
            continue
        wrong = [
            f"the {_SLOT[i]} are projected with {p}_proj instead of {'qkv'[i]}_proj"
            for i, p in enumerate(proj)
            if p != "qkv"[i]
        ]
        found.append(("the projections are mixed up: " + "; ".join(wrong) + ".", {"proj": proj}))
    for inputs in itertools.product(range(3), repeat=3):
        if inputs == (0, 1, 2):
            continue
        wrong = [
            f"the {_SLOT[i]} are computed from `{_INPUT[j]}` instead of `{_INPUT[i]}`"
            for i, j in enumerate(inputs)
            if j != i
        ]
        found.append(("the inputs are mixed up: " + "; ".join(wrong) + ".", {"inputs": inputs}))
    found += [
        (
            "the mask is ignored, so padding leaks into the result: before the softmax, set the "
            "scores where the mask is False to -inf.",
            {"mask_mode": "ignored"},
        ),
        (
            "the mask's polarity is reversed. Here True means 'may attend' (as in "
            "F.scaled_dot_product_attention), the opposite of nn.MultiheadAttention's "
            "key_padding_mask: hide the scores where the mask is False, masked_fill(~mask, -inf).",
            {"mask_mode": "reversed"},
        ),
        (
            "the softmax is taken over the queries (dim=-2): take it over the keys (dim=-1), so "
            "that each query's weights sum to 1.",
            {"softmax_dim": -2},
        ),
        (
            "heads built from interleaved features (head h took features h, h + H, ...): "
            + _SPLIT_INTERLEAVED,
            {"split": "interleaved", "merge": "interleaved"},
        ),
        ("the heads were split wrongly: " + _SPLIT_INTERLEAVED, {"split": "interleaved"}),
        ("the heads were merged wrongly: " + _MERGE_INTERLEAVED, {"merge": "interleaved"}),
    ]
    result = []
    with torch.no_grad():
        for description, flags in found:
            try:
                out, weights, _ = _attend(ref, *args, **flags)
            except RuntimeError:  # e.g. keys taken from an input of another length
                continue
            result.append((description, out, weights))
    return result


def _as_pair(result: Any, what: str) -> tuple[Any, Any]:
    if isinstance(result, torch.Tensor):
        raise GradingError(
            f"{what} returned one tensor; forward must return the pair (output, weights), "
            "weights of shape (B, H, L_q, L_k)."
        )
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise GradingError(
            f"{what} should return the pair (output, weights), got {type(result).__name__}"
            + (f" of length {len(result)}" if isinstance(result, tuple | list) else "")
        )
    return result[0], result[1]


def _reject_builtin(module: Any) -> None:
    if not isinstance(module, nn.Module):
        raise GradingError(
            f"MultiHeadAttention(...) should build an nn.Module, got {type(module).__name__}: "
            "define `class MultiHeadAttention(nn.Module)`."
        )
    for name, sub in module.named_modules():
        if isinstance(sub, _BUILTIN_MODULES):
            what = "the module itself is" if not name else f"self.{name} is"
            raise ForbiddenCallError(
                f"MultiHeadAttention uses {type(sub).__module__}.{type(sub).__qualname__} "
                f"({what} one), which already does what this exercise asks you to write, so it "
                "earns no points. Write it with the given q_proj, k_proj, v_proj and out_proj; "
                "you may use PyTorch's module afterwards to check your answer."
            )


def _build(cls: Any, D: int, H: int, dropout: float | None = None) -> nn.Module:
    with _student("MultiHeadAttention.__init__", forbidden=True):
        module = cls(D, H) if dropout is None else cls(D, H, dropout)
    _reject_builtin(module)
    with _student("MultiHeadAttention.to(torch.float64)"):
        module = module.to(torch.float64).eval()
    return module


def _case_inputs(name: str, seed: int) -> tuple[str, int, int, tuple, torch.Tensor | None]:
    """``(description, D, H, (query, key, value), mask)`` for one named case."""
    if name == "self":
        B, L, D, H = 2, 5, 12, 3
        x = _core.randn(B, L, D, seed=seed)
        return f"self-attention on x of shape (B, L, D) = {(B, L, D)}", D, H, (x, x, x), None
    if name == "padding":
        B, L, D, H = 2, 5, 12, 3
        x = _core.randn(B, L, D, seed=seed)
        mask = _core.keep_first([4, 2], L)
        return (
            f"self-attention on x of shape {(B, L, D)} with a padding mask of shape (B, 1, 1, L) "
            "(True = may attend)",
            D,
            H,
            (x, x, x),
            mask,
        )
    if name in ("cross", "cross_masked"):
        B, L_q, L_k, D, H = 2, 3, 6, 12, 3
        q = _core.randn(B, L_q, D, seed=seed)
        k = _core.randn(B, L_k, D, seed=seed + 1)
        v = _core.randn(B, L_k, D, seed=seed + 2)
        masked = name == "cross_masked"
        return (
            f"cross-attention, query {(B, L_q, D)}, key and value {(B, L_k, D)} (different "
            "tensors)" + (", padding mask (B, 1, 1, L_k)" if masked else ""),
            D,
            H,
            (q, k, v),
            _core.keep_first([5, 3], L_k) if masked else None,
        )
    if name == "cross_same_length":
        B, L, D, H = 3, 4, 8, 2
        q, k, v = (_core.randn(B, L, D, seed=seed + i) for i in range(3))
        return (
            f"cross-attention with three different tensors of shape {(B, L, D)}",
            D,
            H,
            (q, k, v),
            None,
        )
    if name == "causal":
        B, L, D, H = 3, 6, 8, 2
        x = _core.randn(B, L, D, seed=seed)
        return (
            f"self-attention on x of shape {(B, L, D)} with a causal mask (L, L)",
            D,
            H,
            (x, x, x),
            encoder_lib.causal_mask(L),
        )
    if name == "full_mask":
        B, H, L_q, L_k, D = 2, 4, 3, 5, 16
        q = _core.randn(B, L_q, D, seed=seed)
        kv = _core.randn(B, L_k, D, seed=seed + 1)
        scores = _core.randn(B, H, L_q, L_k, seed=seed + 2)
        mask = scores > 0
        mask[..., 0] = True  # every row keeps a key, and (below) loses one
        mask[..., 1] = False
        return (
            f"cross-attention, query {(B, L_q, D)}, key = value {(B, L_k, D)}, a mask of shape "
            "(B, H, L_q, L_k)",
            D,
            H,
            (q, kv, kv),
            mask,
        )
    if name == "tiny":
        x = _core.randn(1, 1, 4, seed=seed)
        return "self-attention on x of shape (1, 1, 4) with one head", 4, 1, (x, x, x), None
    if name == "d_head_1":
        B, L, D, H = 2, 3, 6, 6
        x = _core.randn(B, L, D, seed=seed)
        return f"self-attention on x of shape {(B, L, D)} with H = D = 6", D, H, (x, x, x), None
    raise ValueError(name)


def _run_case(cls: Any, name: str, seed: int, dropout: float | None = None) -> None:
    description, D, H, tensors, mask = _case_inputs(name, seed)
    query, key, value = tensors
    B, L_q, _ = query.shape
    L_k = key.shape[1]
    d = D // H
    ref = _reference(D, H, seed + 10)
    with torch.no_grad():
        expected_out, expected_w = ref(query, key, value, mask)
    known: list[Any] = []

    def mistakes() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        """Computed only when the answer is wrong (right answers do not pay for them)."""
        if not known:
            known.extend(_mistakes(ref, (query, key, value, mask)))
            with torch.no_grad():
                _, _, scores = _attend(ref, query, key, value, mask)
            known.append(
                (
                    "the weights returned are the scores before the softmax: return "
                    "softmax(scores).",
                    None,
                    scores,
                )
            )
        return known

    module = _build(cls, D, H, dropout)
    load_reference_weights(module, ref)
    # the student's call sees copies (self-attention keeps one tensor passed three times)
    copies = {id(t): t.clone() for t in tensors}
    args = [copies[id(t)] for t in tensors] + ([] if mask is None else [mask.clone()])
    with _student("MultiHeadAttention.forward", forbidden=True, shape_hint=True):
        result = module(*args)
    for label, original in zip(_INPUT, tensors, strict=True):
        _expect_unchanged(copies[id(original)], original, "MultiHeadAttention.forward", label)

    what = f"MultiHeadAttention({D}, {H}), {description}:"
    out, weights = _as_pair(result, f"{what} forward")
    out_hints = {
        (B, H, L_q, d): "the heads were never merged: transpose back to (B, L_q, H, d_head), "
        "reshape to (B, L_q, D), then apply out_proj.",
        (B, L_q, H, d): "the heads were moved back but not joined: reshape to (B, L_q, D).",
    }
    w_hints = {
        (B, L_q, L_k): "the weights were averaged over the heads (as nn.MultiheadAttention does "
        "by default); return every head's weights, shape (B, H, L_q, L_k).",
        (B, L_q, H, H): "the heads were never moved in front of the sequence: after "
        "view(B, L, H, d_head), transpose dimensions 1 and 2.",
    }
    if L_q != L_k:
        w_hints[(B, H, L_q, L_q)] = (
            "there is one column per query instead of one per key: project the keys from "
            "`key` and the values from `value`, not from `query`."
        )
    _expect_shape(out, (B, L_q, D), f"{what} the output", "(B, L_q, D)", out_hints)
    _expect_shape(
        weights, (B, H, L_q, L_k), f"{what} the weights tensor", "(B, H, L_q, L_k)", w_hints
    )
    if dropout is not None:
        try:
            _core.expect_close(out, expected_out, f"{what} the output")
            _core.expect_close(weights, expected_w, f"{what} the weights tensor")
        except GradingError as e:
            raise GradingError(
                f"With dropout={dropout} and the module in eval mode, the result changed: dropout "
                "must only act while training. Use nn.Dropout, or F.dropout(..., "
                f"training=self.training). ({e})"
            ) from None
        return
    # When no known mistake explains a difference, a broken property of the weights may.
    _core.expect_close(
        out,
        expected_out,
        f"{what} the output",
        lambda: {m: o for m, o, _ in mistakes() if o is not None},
        probes=(lambda: _expect_weight_properties(f"{what} the output", weights, mask),),
    )
    _core.expect_close(
        weights,
        expected_w,
        f"{what} the weights tensor",
        lambda: {m: w for m, _, w in mistakes()},
        probes=(lambda: _expect_weight_properties(f"{what} the weights tensor", weights, mask),),
    )


def _expect_weight_properties(what: str, weights: torch.Tensor, mask: torch.Tensor | None) -> None:
    """Raise when ``weights`` let padding leak or have rows that do not sum to 1."""
    with torch.no_grad():
        w = weights.detach().to(torch.float64)
        if mask is not None:
            hidden = ~mask.expand(w.shape)
            leak = float(w[hidden].abs().max()) if bool(hidden.any()) else 0.0
            if not leak <= 1e-9:
                raise GradingError(
                    f"{what} is wrong, and padding leaks: your weights give up to {leak:.3g} "
                    "to keys where the mask is False (True = may attend). Those keys must get "
                    "exactly zero weight: set their scores to -inf before the softmax."
                )
        error = float((w.sum(dim=-1) - 1).abs().max())
        if not error <= 1e-6:
            raise GradingError(
                f"{what} is wrong, and each query's weights should sum to 1 over the keys "
                f"(softmax over the last dimension); yours are off by up to {error:.3g}."
            )


@_core.guarded
def check_multi_head_attention(MultiHeadAttention: Any, thorough: bool = False) -> None:
    """``MultiHeadAttention(embed_dim, num_heads, dropout=0.0)``: ``forward(query, key, value,
    mask=None)`` returns ``(output (B, L_q, D), weights (B, H, L_q, L_k))``. The reference's
    weights are loaded into the module with ``load_reference_weights`` (any of its layouts)."""
    with _core.seeded():  # modules are built from a fork: the notebook's random stream is untouched
        names = ["self", "padding", "cross"]
        if thorough:
            names += ["cross_masked", "cross_same_length", "causal", "full_mask", "tiny"]
            names += ["d_head_1"]
        for i, name in enumerate(names):
            _run_case(MultiHeadAttention, name, seed=400 + 20 * i)
        if thorough:
            _run_case(MultiHeadAttention, "padding", seed=600, dropout=0.5)
            _check_gradients(MultiHeadAttention)


def _check_gradients(cls: Any) -> None:
    _, D, H, (query, key, value), mask = _case_inputs("cross_masked", 620)
    ref = _reference(D, H, 630)
    g_out = _core.randn(*query.shape, seed=640)
    g_w = _core.randn(query.shape[0], H, query.shape[1], key.shape[1], seed=641)

    def leaves() -> list[torch.Tensor]:
        return [t.clone().requires_grad_() for t in (query, key, value)]

    theirs = leaves()
    out, w = ref(*theirs, mask)
    ((out * g_out).sum() + (w * g_w).sum()).backward()
    module = _build(cls, D, H)
    load_reference_weights(module, ref)
    mine = leaves()
    with _student("MultiHeadAttention.forward", forbidden=True, shape_hint=True):
        out, w = _as_pair(module(*mine, mask), "MultiHeadAttention.forward")
        if (
            isinstance(out, torch.Tensor)
            and isinstance(w, torch.Tensor)
            and (out.requires_grad or w.requires_grad)
        ):
            ((out * g_out).sum() + (w * g_w).sum()).backward()
    for name, leaf, expected in zip(_INPUT, mine, theirs, strict=True):
        _expect_grad(leaf, expected.grad, "MultiHeadAttention.forward", name, "(output, weights)")
