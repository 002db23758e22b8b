"""How big the grading topic modules are, per exercise: the measure of issue 19.

    python -m tools.grading_size            # the table for the working tree
    python -m tools.grading_size --at REV   # the same for a commit (read with git show)

For every topic module of ``encoder_lib/grading`` (``*_checks.py``, plus the shared
``_layers.py`` counted apart): its lines, how many of them hold nothing but string literals
(message text: what a student reads), the rest (the representation), its exercises and the
lines per exercise. Blank lines and comments count as lines, as a reader scrolls past them.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRADING = "encoder_lib/grading"
STRING_ONLY = {tokenize.STRING, tokenize.OP, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT}
EXERCISE = re.compile(r"^check_\w+ = ", re.MULTILINE)
"""Every exercise's check is assigned at the top level of its module: ``check_x = register...``."""


def string_only_lines(source: str) -> int:
    """Lines whose tokens are string literals, brackets and commas only, with a string."""
    lines: dict[int, set[int]] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        for row in range(token.start[0], token.end[0] + 1):  # an f-string is one STRING (3.11)
            lines.setdefault(row, set()).add(token.type)
    return sum(1 for kinds in lines.values() if tokenize.STRING in kinds and kinds <= STRING_ONLY)


def modules(rev: str | None) -> dict[str, str]:
    """File name -> source of the topic modules (and ``_layers.py``), now or at ``rev``."""
    if rev is None:
        paths = [*sorted((ROOT / GRADING).glob("*_checks.py")), ROOT / GRADING / "_layers.py"]
        return {p.name: p.read_text() for p in paths if p.exists()}
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:{GRADING}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    wanted = [*sorted(n for n in names if n.endswith("_checks.py")), "_layers.py"]
    return {
        n: subprocess.run(
            ["git", "show", f"{rev}:{GRADING}/{n}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for n in wanted
        if n in names
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--at", metavar="REV", help="a commit instead of the working tree")
    args = parser.parse_args(argv)
    rows, total = [], [0, 0, 0]
    for name, source in modules(args.at).items():
        lines, text = len(source.splitlines()), string_only_lines(source)
        exercises = len(EXERCISE.findall(source))
        rows.append((name, lines, text, exercises))
        total = [total[0] + lines, total[1] + text, total[2] + exercises]
    print(f"{'module':28s} {'lines':>6s} {'text':>6s} {'rest':>6s} {'ex.':>4s} {'per ex.':>8s}")
    for name, lines, text, n in [*rows, ("all", *total)]:
        per = f"{lines / n:8.0f}" if n else f"{'-':>8s}"
        print(f"{name:28s} {lines:6d} {text:6d} {lines - text:6d} {n:4d} {per}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
