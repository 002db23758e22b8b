"""``python -m encoder_lib.autograde``: grade a course on Dask (see ``distributed.py``).

Before any worker or kernel starts, the instructor's JAX compile cache is read (and built if a
graded assignment imports JAX and there is none), and its manifest's digest handed to the workers
(``jax_cache.pin``): a student's kernel that rewrites the folder reaches no later worker."""

import contextlib
import glob
import io
import sys

import nbformat

from encoder_lib.autograde import jax_cache
from encoder_lib.autograde.distributed import Course, main, parse_args


def _graded_sources_import_jax(argv: list[str]) -> bool:
    quiet = io.StringIO()
    try:  # the command's own parsing, below, says what is wrong (or prints --help) once
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            args = parse_args(argv)
            course = Course.open(args.course_dir)
    except SystemExit:
        return False
    for pattern in args.assignments:
        for notebook in glob.glob(str(course.path("source", ".", pattern) / "*.ipynb")):
            try:
                if jax_cache.imports_jax(nbformat.read(notebook, as_version=4)):
                    return True
            except Exception:  # not a notebook nbformat reads: it is not graded either
                continue
    return False


jax_cache.pin(_graded_sources_import_jax(sys.argv[1:]))
sys.exit(main())
