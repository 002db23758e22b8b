"""Checks for the layer_norm notebook (placeholder: being written)."""

__all__: list[str] = []
