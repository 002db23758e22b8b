"""Checks for the feed_forward notebook (placeholder: being written)."""

__all__: list[str] = []
