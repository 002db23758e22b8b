"""Checks for the attention notebook (placeholder: being written)."""

__all__: list[str] = []
