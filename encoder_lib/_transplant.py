"""The last step of every ``from_torch``/``to_torch``: copy one module's weights into its twin."""

from __future__ import annotations

from typing import TypeVar

from torch import nn

__all__: list[str] = []

M = TypeVar("M", bound=nn.Module)


def copy_weights(target: M, source: nn.Module) -> M:
    """``target`` moved to the dtype and device of ``source``'s parameters, holding a copy of
    ``source``'s weights, in ``source``'s training mode. The move comes first: ``load_state_dict``
    copies into the existing parameters, so float64 weights loaded into a float32 module would be
    rounded. The parameter names must match exactly (``load_state_dict`` is strict)."""
    target = target.to(next(source.parameters()))
    target.load_state_dict(source.state_dict())
    return target.train(source.training)
