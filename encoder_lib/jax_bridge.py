"""Arrays and weights between PyTorch and JAX: how notebook 10 checks a JAX encoder block
against ``nn.TransformerEncoderLayer``.

``block_from_torch(block, layer.state_dict())`` writes a PyTorch layer's weights into an NNX
block laid out as ``encoder_lib.jax_encoder.EncoderBlock`` (a student's block with the given
``__init__`` has that layout), so both compute the same function and can be compared on one
input; ``block_to_torch(block)`` goes the other way. The same works for the parts:
``"layer_norm"`` (``nn.LayerNorm``), ``"feed_forward"`` (an ``nn.Module`` with ``linear1`` and
``linear2``), ``"attention"`` (``nn.MultiheadAttention``) and ``"encoder_block"``.

Each weight's move is one line of ``_MOVES``: PyTorch's name, the NNX path, and how the array
changes on the way. ``nn.Linear.weight`` is ``(out, in)``, ``nnx.Linear.kernel`` ``(in, out)``:
transposed. ``nn.MultiheadAttention`` keeps the query, key and value projections stacked in one
``in_proj_weight`` ``(3D, D)``: its thirds, each transposed. ``nn.LayerNorm.weight`` is
``nnx``'s ``scale``.

Arrays cross as NumPy arrays (a copy each way, float32 stays float32). Imported only where JAX
is installed.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import numpy as np
import torch
from flax import nnx

__all__ = [
    "LAYOUTS",
    "to_jax",
    "to_torch",
    "load_from_torch",
    "export_to_torch",
    "block_from_torch",
    "block_to_torch",
    "as_torch_padding_mask",
]


def to_jax(t: torch.Tensor) -> jax.Array:
    """A JAX array with ``t``'s values, shape and dtype (a copy).

    ``jax.device_put`` of a NumPy copy, not ``jnp.asarray``: run eagerly, ``jnp.asarray``
    compiles an identity program (``stage``) for every new shape and dtype, 31 of the 241
    programs notebook 10's checks compiled before (measured 2026-11-29); the copy keeps the array
    from sharing memory with ``t``, which may change in place."""
    return jax.device_put(np.array(t.detach().cpu().numpy(), copy=True))


def to_torch(a: jax.Array) -> torch.Tensor:
    """A torch tensor with ``a``'s values, shape and dtype (a copy)."""
    return torch.from_numpy(np.array(a))


# What happens to an array on its way from PyTorch to NNX; each has its inverse below.
_SAME, _T = "same", "transpose"
_THIRD = ("query", "key", "value")  # in_proj_weight's thirds, in this order


def _linear(torch_prefix: str, path: tuple[str, ...]) -> list[tuple[str, tuple, str]]:
    return [
        (f"{torch_prefix}weight", (*path, "kernel"), _T),
        (f"{torch_prefix}bias", (*path, "bias"), _SAME),
    ]


def _norm(torch_prefix: str, path: tuple[str, ...]) -> list[tuple[str, tuple, str]]:
    return [
        (f"{torch_prefix}weight", (*path, "scale"), _SAME),
        (f"{torch_prefix}bias", (*path, "bias"), _SAME),
    ]


def _attention(torch_prefix: str, path: tuple[str, ...]) -> list[tuple[str, tuple, str]]:
    moves = [
        (f"{torch_prefix}in_proj_{kind}", (*path, name, nnx_name), f"third {i}")
        for i, name in enumerate(_THIRD)
        for kind, nnx_name in (("weight", "kernel"), ("bias", "bias"))
    ]
    return moves + _linear(f"{torch_prefix}out_proj.", (*path, "out"))


def _feed_forward(torch_prefix: str, path: tuple[str, ...]) -> list[tuple[str, tuple, str]]:
    return _linear(f"{torch_prefix}linear1.", (*path, "linear1")) + _linear(
        f"{torch_prefix}linear2.", (*path, "linear2")
    )


LAYOUTS: dict[str, list[tuple[str, tuple, str]]] = {
    "layer_norm": _norm("", ()),
    "feed_forward": _feed_forward("", ()),
    "attention": _attention("", ()),
    "encoder_block": _attention("self_attn.", ("attention",))
    + _feed_forward("", ("feed_forward",))
    + _norm("norm1.", ("norm1",))
    + _norm("norm2.", ("norm2",)),
}
"""Layout -> ``(PyTorch name, NNX path, move)`` for every weight."""


def _to_nnx(value: torch.Tensor, move: str) -> jax.Array:
    if move.startswith("third"):
        i = int(move.split()[1])
        third = value.chunk(3, dim=0)[i]  # rows i*D:(i+1)*D of in_proj: (D, D) or (D,)
        return to_jax(third.T if third.ndim == 2 else third)
    return to_jax(value.T if move == _T else value)


def _variable(module: nnx.Module, path: tuple[str, ...]) -> nnx.Variable:
    obj = module
    for i, name in enumerate(path):
        obj = getattr(obj, name, None)
        if obj is None:
            where = ".".join(path[: i + 1])
            raise AttributeError(
                f"{type(module).__name__} has no {where}: keep the attribute names of the given "
                f"__init__ ({'.'.join(path)} receives a PyTorch weight)"
            )
    if not isinstance(obj, nnx.Variable):
        raise TypeError(f"{'.'.join(path)} should be an nnx.Param, got {type(obj).__name__}")
    return obj


def load_from_torch(
    module: nnx.Module, state_dict: Mapping[str, torch.Tensor], layout: str
) -> None:
    """Write a PyTorch ``state_dict`` into ``module`` in place (``layout``: a key of
    ``LAYOUTS``). Raises ``KeyError`` for a missing PyTorch weight and ``ValueError`` when an
    NNX array has another shape than the weight it receives."""
    for torch_name, path, move in LAYOUTS[layout]:
        if torch_name not in state_dict:
            raise KeyError(f"the PyTorch state dict has no {torch_name!r} (layout {layout!r})")
        variable = _variable(module, path)
        value = _to_nnx(state_dict[torch_name], move)
        if variable[...].shape != value.shape:
            raise ValueError(
                f"{'.'.join(path)} has shape {tuple(variable[...].shape)}, but PyTorch's "
                f"{torch_name} gives {tuple(value.shape)}"
            )
        variable.set_value(value.astype(variable[...].dtype))  # no scatter to compile


def export_to_torch(module: nnx.Module, layout: str) -> dict[str, torch.Tensor]:
    """``module``'s weights as the PyTorch state dict of ``layout`` (the inverse of
    ``load_from_torch``)."""
    state: dict[str, torch.Tensor] = {}
    thirds: dict[str, list[torch.Tensor | None]] = {}
    for torch_name, path, move in LAYOUTS[layout]:
        value = to_torch(_variable(module, path)[...])
        if move.startswith("third"):
            parts = thirds.setdefault(torch_name, [None, None, None])
            parts[int(move.split()[1])] = value.T if value.ndim == 2 else value
        else:
            state[torch_name] = value.T.contiguous() if move == _T else value
    for torch_name, parts in thirds.items():
        state[torch_name] = torch.cat(parts, dim=0)  # type: ignore[arg-type]
    return state


def block_from_torch(block: nnx.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """``nn.TransformerEncoderLayer`` weights into an NNX encoder block, in place."""
    load_from_torch(block, state_dict, "encoder_block")


def block_to_torch(block: nnx.Module) -> dict[str, torch.Tensor]:
    """An NNX encoder block's weights as a state dict ``nn.TransformerEncoderLayer`` loads."""
    return export_to_torch(block, "encoder_block")


def as_torch_padding_mask(padding_mask: torch.Tensor | None) -> torch.Tensor | None:
    """True = a real token (this course, NNX) -> True = padding (``src_key_padding_mask``)."""
    return None if padding_mask is None else ~padding_mask
