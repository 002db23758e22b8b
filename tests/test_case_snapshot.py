"""tools/case_snapshot.py: what it compares, and that the cases it records are reproducible."""

from __future__ import annotations

import torch

from tools.case_snapshot import differences, take


def test_identical_records_have_no_difference_and_nan_equals_nan():
    record = {"expected": torch.tensor([1.0, float("nan")]), "what": "f(x)", "slots": ["a"]}
    assert differences(record, {k: v for k, v in record.items()}) == []


def test_every_kind_of_change_is_named_with_where_it_is():
    before = {
        "expected": torch.zeros(2),
        "what": "f(x)",
        "grads": {"<map>": [["x", torch.ones(2)]]},
    }
    after = {
        "expected": torch.tensor([0.0, 1e-9]),
        "what": "f(y)",
        "grads": {"<map>": [["x", torch.ones(2, dtype=torch.float64)]]},
        "atol": 1e-6,
    }
    found = differences(before, after)
    assert found[0].startswith(".expected: values differ (largest difference 1e-09")
    assert found[1] == ".what: 'f(x)' -> 'f(y)'"
    assert found[2].startswith(".grads.<map>[0][1]: torch.float32 (2,) -> torch.float64 (2,)")
    assert found[3] == ".atol: added"
    assert len(found) == 4


def test_the_cases_of_every_exercise_are_built_the_same_twice():
    first, second = take(), take()
    assert len(first) >= 39
    assert differences(first, second) == []
