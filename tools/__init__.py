"""Maintenance scripts for the course (run from the repository root; see docs/INSTRUCTORS.md and
docs/AUTHORING.md)."""
