"""Maintenance scripts for the course (run from the repository root; see README)."""
