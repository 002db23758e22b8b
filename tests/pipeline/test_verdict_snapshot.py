"""tools/verdict_snapshot.py on a small class: the same decisions with warm and cold kernels.

The whole snapshot (every variant of every notebook, about an hour on two cores) is run by hand
before a change to the kernels or the judge lands (docs/GRADING.md); here one
notebook's reference, stub and first variant per answer cell keep the tool itself working.
"""

from __future__ import annotations

import json
import subprocess
import sys

from pipeline import course as C

ASSIGNMENT = "03_layer_norm"


def test_a_small_class_is_decided_alike_with_warm_and_cold_kernels(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.verdict_snapshot",
            "--assignments",
            ASSIGNMENT,
            "--variants",
            "1",
            "--save",
            str(tmp_path),
        ],
        cwd=C.REPO,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "identical warm and cold; 0 not as declared" in proc.stdout, proc.stdout
    warm = json.loads((tmp_path / "warm.json").read_text())
    cold = json.loads((tmp_path / "cold.json").read_text())
    assert warm == cold

    # What was decided, read back from the snapshot against the variants themselves.
    layout = C.layout(C.source_notebook(ASSIGNMENT))
    buggy, correct = C.load_variants(ASSIGNMENT)
    first = {}
    for kind, variants in (("bug", buggy), ("ok", correct)):
        for v in variants:
            first.setdefault((kind, v.cell), v)
    expected = {"ref": set(), "stub": set(layout.tests)}
    for (kind, cell), v in first.items():
        expected[f"{kind}-{C.slug(cell)}-{C.slug(v.name)}"] = set(v.fails)
    assert set(warm) == {f"{s}/{ASSIGNMENT}" for s in expected}
    for student, fails in expected.items():
        cells = warm[f"{student}/{ASSIGNMENT}"]["cells"]
        assert set(cells) == set(layout.tests)
        for cell, points in layout.tests.items():
            score, manual = cells[cell]["score"]
            verdict = cells[cell]["verdict"]
            assert (score == 0.0, verdict["passed"]) == (cell in fails, cell not in fails), student
            assert score in (0.0, points) and not manual
            said = "".join(cells[cell]["outputs"])
            assert said.startswith("Correct" if verdict["passed"] else verdict["title"]), said
    assert {c["verdict"]["mistake"] for c in warm[f"stub/{ASSIGNMENT}"]["cells"].values()} == {
        "not-written"
    }
