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


def test_a_field_at_its_default_is_left_out_so_a_new_field_changes_no_snapshot():
    from encoder_lib.grading import vocabulary
    from encoder_lib.grading.kernel import observe
    from tools.case_snapshot import _case, _normalised

    x = vocabulary.randn(3, seed=1)
    record = _case(vocabulary.Case(observe.Call("f", "f", (x,)), "f(x)", expected=x, atol=1e-3))
    assert set(record) == {"call", "what", "expected", "atol"}
    saved_earlier = {"test_f": [record | {"precheck": None, "slots": []}]}  # defaults recorded
    assert differences(_normalised(saved_earlier), {"test_f": [record]}) == []


def test_an_exercise_whose_cases_fail_to_build_is_reported_and_the_others_compared(monkeypatch):
    from encoder_lib.grading import runner

    def broken(thorough):
        raise KeyError("modern_encoder_layer")

    exercise = runner.EXERCISES["test_gelu"]
    before = take()
    monkeypatch.setattr(exercise, "cases", broken)
    after = take()
    assert after["test_gelu"] == "<error> KeyError: 'modern_encoder_layer'"
    found = differences(before, after)
    assert found == [".test_gelu: <error> KeyError: 'modern_encoder_layer'"]
