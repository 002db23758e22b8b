"""Commands an instructor runs print no warning that looks like a failure."""

from __future__ import annotations

import nbformat
import pytest

from tools.throwaway_course import Course

ASSIGNMENT = "04_feed_forward"


@pytest.mark.slow  # nbgrader's db, generate_assignment and autograde: about half a minute here
def test_plain_autograde_of_a_class_prints_no_warning(tmp_path):
    """Plain `nbgrader autograde` with the course's config: no SQLAlchemy SAWarning block (see
    nbgrader_config.py), no warning of any kind, and the grades are still written."""
    course = Course.create(tmp_path / "course", [ASSIGNMENT])
    course.add_students(["s1", "s2"])
    course.generate(ASSIGNMENT)
    released = nbformat.read(course.release_path(ASSIGNMENT, ASSIGNMENT), as_version=4)
    for student in ("s1", "s2"):
        course.submit(student, ASSIGNMENT, ASSIGNMENT, released)
    done = course.nbgrader("autograde", ASSIGNMENT)
    output = done.stdout + done.stderr
    assert "Warning" not in output, output
    assert sorted(course.submissions()) == [(ASSIGNMENT, "s1"), (ASSIGNMENT, "s2")]
