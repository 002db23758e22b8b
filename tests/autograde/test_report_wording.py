"""Small wording rules of the instructor's report (encoder_lib/autograde/report/page.py)."""

from __future__ import annotations

from encoder_lib.autograde.report import page


def test_one_point_is_singular():
    assert page._points(1) == "1 point"
    assert page._points(1.0) == "1 point"
    assert page._points(2) == "2 points"
    assert page._points(0.5) == "0.5 points"
    assert page._points(0) == "0 points"
