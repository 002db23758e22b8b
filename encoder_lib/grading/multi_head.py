"""Checks for the multi_head notebook (placeholder: being written)."""

__all__: list[str] = []
