"""How tools/verdict_snapshot.py compares two snapshots (its grading run: tests/pipeline)."""

from __future__ import annotations

import copy
import json

from tools.verdict_snapshot import Planned, against_saved, declared_problems, differences

VERDICT = {"exercise": "layer_norm", "title": "Exercise 1 · layer_norm", "passed": True}
SNAPSHOT = {
    "bug-x/03": {
        "flagged": False,
        "reasons": [],
        "cells": {
            "test_a": {"score": [0.0, False], "verdict": {**VERDICT, "passed": False}},
            "test_b": {"score": [3.0, False], "verdict": VERDICT, "outputs": ["Correct"]},
        },
    },
    "ref/03": {
        "flagged": False,
        "reasons": [],
        "cells": {
            "test_a": {"score": [3.0, False], "verdict": VERDICT},
            "test_b": {"score": [3.0, False], "verdict": VERDICT},
        },
    },
}
TESTS = {"03": {"test_a": 3.0, "test_b": 3.0}}


def test_identical_snapshots_have_no_difference():
    assert differences(SNAPSHOT, copy.deepcopy(SNAPSHOT)) == []


def test_every_kind_of_difference_is_named_with_its_submission_and_cell():
    cold = copy.deepcopy(SNAPSHOT)
    cold["bug-x/03"]["cells"]["test_b"]["outputs"] = ["Exercise 2: not right yet"]
    cold["bug-x/03"]["cells"]["test_a"]["verdict"]["mistake"] = "unbiased-variance"
    cold["ref/03"]["flagged"] = True
    del cold["ref/03"]["cells"]["test_b"]["score"]
    lines = differences(SNAPSHOT, cold)
    assert len(lines) == 4, lines
    assert any(line.startswith("bug-x/03, test_a: verdict warm") for line in lines)
    assert any(line.startswith("bug-x/03, test_b: outputs warm ['Correct']") for line in lines)
    assert "ref/03: flagged warm False, cold True" in lines
    assert "ref/03, test_b: score warm [3.0, False], cold None" in lines
    del cold["ref/03"]
    assert "ref/03: graded warm only" in differences(SNAPSHOT, cold)


def test_failing_cells_are_checked_against_what_each_variant_declares():
    planned = [Planned("bug-x", "03", ("test_a",)), Planned("ref", "03", None)]
    assert declared_problems(SNAPSHOT, planned, TESTS) == []
    wrong = [Planned("bug-x", "03", ("test_b",)), Planned("stub", "03", None)]
    stub = copy.deepcopy(SNAPSHOT["ref/03"])
    problems = declared_problems({**SNAPSHOT, "stub/03": stub}, wrong, TESTS)
    assert problems == [
        "bug-x/03: failed ['test_a'], declared ['test_b']",
        "stub/03: failed [], declared ['test_a', 'test_b']",
    ]


def test_a_saved_snapshot_is_compared_on_the_submissions_graded_now(tmp_path):
    (tmp_path / "warm.json").write_text(json.dumps(SNAPSHOT))
    now = {"ref/03": copy.deepcopy(SNAPSHOT["ref/03"])}
    assert against_saved(tmp_path, "warm", now) == []  # bug-x/03 was not graded now
    now["ref/03"]["cells"]["test_b"]["score"] = [0.0, False]
    now["new/03"] = copy.deepcopy(SNAPSHOT["ref/03"])
    lines = against_saved(tmp_path, "warm", now)
    assert lines[0] == f"new/03: not in {tmp_path}/warm.json"
    assert lines[1] == "ref/03, test_b: score saved warm [3.0, False], now warm [0.0, False]"
    assert len(lines) == 2
