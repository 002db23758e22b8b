"""The records autograde keeps and the report's counting, without grading a class (the report
on a class graded for real is tested in tests/pipeline/test_mistake_report.py).

- a verdict survives the trip through a notebook file; a record that is malformed, or a file
  that is not a notebook, is refused with one line naming the file and the cell;
- the counting: a student is counted once per mistake and exercise, a cascade at its root (with
  the points it cost downstream), unexplained failures grouped by their message;
- the command says in one line why it cannot report (no course, no gradebook).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import nbformat
import pytest

from encoder_lib.autograde import records
from encoder_lib.autograde.report import data as R
from encoder_lib.autograde.report.page import write

ROOT = Path(__file__).resolve().parents[2]


def _notebook(path: Path, verdicts: dict[str, records.Verdict | None]) -> Path:
    nb = nbformat.v4.new_notebook()
    for grade_id, verdict in verdicts.items():
        cell = nbformat.v4.new_code_cell("grading.check_something(f)")
        cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "points": 1}
        if verdict is not None:
            records.store(cell, verdict)
        nb.cells.append(cell)
    nb.cells.append(nbformat.v4.new_code_cell("def f(): ..."))  # not a test cell
    nbformat.write(nb, path)
    return path


def test_a_verdict_survives_the_notebook_file(tmp_path):
    failed = records.Verdict(
        "scaled_dot_product_attention",
        "Exercise 4 · scaled_dot_product_attention",
        passed=False,
        mistake="scaled-by-d-k",
        root="test_attention_scores",
        root_title="Exercise 1 · attention_scores",
        message="this comes from your attention_scores ...",
    )
    passed = records.Verdict("attention_scores", "Exercise 1 · attention_scores", passed=True)
    path = _notebook(tmp_path / "nb.ipynb", {"test_a": passed, "test_b": failed, "test_c": None})
    assert list(records.read_notebook(path)) == [
        ("test_a", passed),
        ("test_b", failed),
        ("test_c", None),
    ]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda v: v.pop("passed"), "the record has no 'passed'"),
        (lambda v: v.update(schema=7), "the record has schema 7, expected 1"),
        (lambda v: v.update(mistake=3), "the record's 'mistake' is 3"),
    ],
)
def test_a_malformed_record_is_refused_in_one_line(tmp_path, change, says):
    verdict = records.Verdict("x", "Exercise 1 · x", passed=False, mistake="no-eps", message="m")
    path = _notebook(tmp_path / "nb.ipynb", {"test_x": verdict})
    nb = json.loads(path.read_text())
    change(nb["cells"][0]["metadata"][records.KEY]["verdict"])
    path.write_text(json.dumps(nb))
    with pytest.raises(records.RecordError) as refused:
        list(records.read_notebook(path))
    assert str(refused.value) == f"{path}, test cell test_x: {says}"


def test_a_file_that_is_not_a_notebook_is_refused_in_one_line(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text('{"cells": [ this is not JSON')
    with pytest.raises(records.RecordError, match=r"nb.ipynb: not a readable notebook \("):
        list(records.read_notebook(path))


# --- counting ------------------------------------------------------------------------------------


def _row(student, cell, points, passed, mistake=None, root=None, message=None) -> R.Row:
    titles = {"t1": "Exercise 1 · a", "t2": "Exercise 2 · b", "t4": "Exercise 4 · d"}
    root = root or cell
    return R.Row(
        "01",
        student,
        "01",
        cell,
        titles[cell],
        points,
        points if passed else 0.0,
        passed,
        mistake,
        root,
        titles[root],
        message,
    )


def test_a_cascade_is_counted_once_at_its_root_with_the_points_it_cost():
    rows = [
        # s1: exercise 1 wrong, and exercise 4 fails because it calls exercise 1
        _row("s1", "t1", 2, False, "scaled-by-d-k", message="divided by d_k"),
        _row("s1", "t4", 3, False, "scaled-by-d-k", "t1", "this comes from your a"),
        # s2: exercise 4 wrong on its own, with a difference nothing names
        _row("s2", "t1", 2, True),
        _row("s2", "t4", 3, False, "mismatch", message="differs at index (0, 1) by 0.25"),
        # s3: the same kind of difference elsewhere: grouped with s2's
        _row("s3", "t1", 2, True),
        _row("s3", "t4", 3, False, "mismatch", message="differs at index (1, 0) by 0.5"),
    ]
    table = R.summarize(rows)
    first, fourth = table["01", "t1"], table["01", "t4"]
    assert (len(first.judged), len(first.correct)) == (3, 2)
    assert {m.id: m.students for m in first.named.values()} == {"scaled-by-d-k": {"s1"}}
    assert first.named["scaled-by-d-k"].wording == "divided by d_k"  # its own cell's words
    assert first.rooted == {"s1"} and first.lost == 5  # 2 here + 3 in exercise 4
    assert fourth.named == {}
    assert dict(fourth.cascaded) == {"Exercise 1 · a": {"s1"}}
    (group,) = fourth.unexplained.values()
    assert group.students == {"s2", "s3"} and fourth.lost == 6
    assert [s.test_cell for s in R.ranked(table)] == ["t4", "t1"]  # 2 students, then 1
    assert [(r.student, r.mistake) for r in R.office_hours(rows)["s1"]] == [("s1", "scaled-by-d-k")]
    assert [r.status for r in rows] == ["named"] * 2 + ["correct", "unexplained"] * 2


def test_an_unexplained_cascade_joins_its_roots_own_failure():
    rows = [
        _row("s4", "t1", 2, False, "mismatch", message="the scores differ by 0.5"),
        _row("s4", "t4", 3, False, "mismatch", "t1", "this comes from your a: differ by 0.5"),
    ]
    table = R.summarize(rows)
    (group,) = table["01", "t1"].unexplained.values()
    assert group.students == {"s4"} and group.wording == "the scores differ by 0.5"
    assert table["01", "t1"].lost == 5 and table["01", "t4"].unexplained == {}


def test_the_csv_has_one_row_per_verdict_with_its_columns(tmp_path):
    rows = [
        _row("s1", "t1", 2, False, "no-eps", message="it has no eps"),
        _row("s2", "t1", 2, True),
    ]
    report = R.Report("c", ["01"], rows, R.Problems(), Counter({"01": 2}), {"01": ["t1"]})
    page, table = write(report, tmp_path / "mistakes.html")
    lines = table.read_text(encoding="utf-8").splitlines()
    assert lines[0] == ",".join(R.CSV_COLUMNS)
    assert lines[1:] == [
        "01,s1,01,t1,Exercise 1 · a,2,0,named,no-eps,t1,Exercise 1 · a,it has no eps",
        "01,s2,01,t1,Exercise 1 · a,2,2,correct,,,,",
    ]
    text = page.read_text(encoding="utf-8")
    assert text.count('src="data:image/png;base64,') == 2  # the points and the mistakes
    assert "<script" not in text and 'src="http' not in text and 'href="http' not in text


# --- the command ---------------------------------------------------------------------------------


def _command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "encoder_lib.autograde.report", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_command_says_in_one_line_why_it_cannot_report(tmp_path):
    proc = _command("01_self_attention", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        f"report: no nbgrader_config.py in {tmp_path}: pass the course's --course-dir\n"
    )
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    proc = _command("01_self_attention", cwd=tmp_path)
    assert proc.returncode == 2
    assert (
        proc.stderr == f"report: no gradebook at {tmp_path / 'gradebook.db'}: run autograde first\n"
    )
    assert not (tmp_path / "gradebook.db").exists()
