"""``python -m encoder_lib.autograde.report``: build the report and write its page and CSV."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from encoder_lib.autograde.report.data import ReportError, build
from encoder_lib.autograde.report.page import write


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m encoder_lib.autograde.report",
        description="Which mistakes did the class make: an HTML report (and a CSV beside it) "
        "from the verdicts autograde kept. Run it after autograde.",
    )
    parser.add_argument("assignments", nargs="+", help='assignment names or globs, e.g. "*"')
    parser.add_argument(
        "--course-dir",
        type=Path,
        default=Path.cwd(),
        help="the nbgrader course folder, where nbgrader_config.py and the gradebook are "
        "(default: the current folder)",
    )
    parser.add_argument("--student", default="*", help="only these students (a glob)")
    parser.add_argument(
        "--output",
        type=Path,
        help="the HTML file to write (default: reports/mistakes.html in the course folder); "
        "the CSV goes beside it, with the same name",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    try:
        report = build(args.course_dir, args.assignments, args.student)
    except ReportError as error:
        print(f"report: {error}", file=sys.stderr)
        return 2
    for line in report.problems.lines(report.submissions):
        print(f"report: {line}", file=sys.stderr)
    output = args.output or args.course_dir.resolve() / "reports" / "mistakes.html"
    page, table = write(report, output)
    print(f"wrote {page} and {table} ({len(report.rows)} verdicts)")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
