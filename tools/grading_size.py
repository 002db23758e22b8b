"""How big the grading checks modules are, per exercise: the measure of issue 19.

    python -m tools.grading_size            # the table for the working tree
    python -m tools.grading_size --at REV   # the same for a commit (read with git show)
    python -m tools.grading_size --anatomy  # what the lines hold, per exercise

For every checks module of ``encoder_lib/grading/checks`` (``nNN_<notebook>.py``, plus the
shared ``layer_cases.py`` counted apart): its lines, how many of them hold nothing but string
literals (message text: what a student reads), the rest (the representation), its exercises and
the lines per exercise. Blank lines and comments count as lines, as a reader scrolls past them.

``--anatomy`` splits every module's lines by what they hold, each line counted once, in this
order: the named mistakes (``Mistake(id, message)`` calls: the catalogue's ids and the text a
student reads), docstrings, the exercises' registrations (``check_x = ...``), forbidden tables
(``Forbidden(...)``), imports, blank lines and comments, and the rest: code (case builders, the
reference with its switches, each mistake's value, probes and hints).
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRADING = "encoder_lib/grading"
CHECKS = "encoder_lib/grading/checks"
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


PARTS = ("mistakes", "docstrings", "registrations", "forbidden", "imports", "blank/comment")
"""What ``anatomy`` tells apart, in the order a line is claimed (the rest is ``code``)."""


def _called(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    return getattr(node.func, "id", None) or getattr(node.func, "attr", None)


def anatomy(source: str) -> dict[str, int]:
    """Lines of ``source`` by what they hold (``PARTS``, then ``code``): every line counted once,
    so that the values add up to the number of lines."""
    spans: dict[str, set[int]] = {part: set() for part in PARTS}
    for node in ast.walk(ast.parse(source)):
        part = None
        if _called(node) == "Mistake":
            part = "mistakes"
        elif _called(node) == "Forbidden":
            part = "forbidden"
        elif isinstance(node, ast.Import | ast.ImportFrom):
            part = "imports"
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id.startswith("check_") for t in node.targets
        ):
            part = "registrations"
        elif isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and (
            ast.get_docstring(node) is not None
        ):
            node = node.body[0]
            part = "docstrings"
        if part is not None:
            spans[part] |= set(range(node.lineno, node.end_lineno + 1))
    lines = source.splitlines()
    spans["blank/comment"] = {
        i for i, line in enumerate(lines, 1) if not line.strip() or line.lstrip().startswith("#")
    }
    counts, claimed = {}, set()
    for part in PARTS:
        counts[part] = len(spans[part] - claimed)
        claimed |= spans[part]
    counts["code"] = len(lines) - len(claimed)
    return counts


def _is_topic(name: str) -> bool:
    """A checks module's file name: ``checks/nNN_<notebook>.py`` now, ``*_checks.py`` before the
    layout of issue 41."""
    return re.fullmatch(r"n\d\d_\w+\.py", name) is not None or name.endswith("_checks.py")


SHARED = ("layer_cases.py", "_layers.py")
"""The cases the layer exercises share, now and before issue 41."""


def modules(rev: str | None) -> dict[str, str]:
    """File name -> source of the checks modules (and ``layer_cases.py``), now or at ``rev``."""
    if rev is None:
        folder = ROOT / CHECKS
        return {p.name: p.read_text() for p in sorted(folder.glob("*.py")) if _wanted(p.name)}
    for folder in (CHECKS, GRADING):  # the layout of issue 41, then the flat one before it
        listed = subprocess.run(
            ["git", "ls-tree", "--name-only", f"{rev}:{folder}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        names = [n for n in listed.stdout.split() if _wanted(n)]
        if listed.returncode == 0 and names:
            break
    return {
        n: subprocess.run(
            ["git", "show", f"{rev}:{folder}/{n}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for n in sorted(names, key=lambda n: (n in SHARED, n))
    }


def _wanted(name: str) -> bool:
    return _is_topic(name) or name in SHARED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--at", metavar="REV", help="a commit instead of the working tree")
    parser.add_argument("--anatomy", action="store_true", help="what the lines hold")
    args = parser.parse_args(argv)
    if args.anatomy:
        return print_anatomy(modules(args.at))
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


def print_anatomy(sources: dict[str, str]) -> int:
    """Per module, its lines by part (``anatomy``); then the sum and the sum per exercise."""
    columns = [*PARTS, "code"]
    heads = [c.split("/")[0][:8] for c in columns]
    print(f"{'module':24s} {'lines':>6s} " + " ".join(f"{h:>8s}" for h in heads))
    total, exercises = dict.fromkeys(columns, 0), 0
    for name, source in sources.items():
        parts = anatomy(source)
        exercises += len(EXERCISE.findall(source))
        total = {c: total[c] + parts[c] for c in columns}
        cells = " ".join(f"{parts[c]:8d}" for c in columns)
        print(f"{name:24s} {len(source.splitlines()):6d} {cells}")
    lines = sum(total.values())
    print(f"{'all':24s} {lines:6d} " + " ".join(f"{total[c]:8d}" for c in columns))
    per = " ".join(f"{total[c] / exercises:8.1f}" for c in columns)
    print(f"{f'per exercise ({exercises})':24s} {lines / exercises:6.1f} {per}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
