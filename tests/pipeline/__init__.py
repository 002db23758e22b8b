"""End-to-end tests: the real nbgrader commands on a synthetic class (see conftest.py).

    pytest tests/pipeline                          # docs/BENCHMARKS.md has its time
    PIPELINE_VARIANTS=all pytest tests/pipeline    # every variant of tests/variants

Environment:
- ``PIPELINE_WORKERS`` (default 2): Dask workers of the local cluster that grades the class
  (``python -m encoder_lib.autograde``).
- ``PIPELINE_VARIANTS``: ``sample`` (default) grades, for every answer cell and every distinct
  set of failing cells, the first buggy variant, and the first correct variant of every answer
  cell; ``all`` grades every variant (about 880 notebooks, 5-6 s of CPU each).
- ``PIPELINE_REPO``: grade another checkout with the same layout (a demo course when developing).

Files: ``course.py`` (the harness: a course folder and the nbgrader commands), ``roster.py``
(who submits what), ``cheats.py`` (cheating submissions), ``conftest.py`` (builds and grades the
class once per session), the tests.
"""
