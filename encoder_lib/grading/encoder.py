"""Checks for the encoder notebook (placeholder: being written)."""

__all__: list[str] = []
