"""Fixtures shared by every test directory. Keep this file small: directory-specific fixtures
belong in that directory's own conftest.py."""

from pathlib import Path

import pytest
import torch

SLOW_SUITES = ("pipeline", "ui", "dask")
"""Folders of tests/ whose tests are marked ``slow`` (real nbgrader, a real browser, Dask)."""


def pytest_collection_modifyitems(items):
    tests = Path(__file__).parent
    for item in items:
        parts = Path(item.path).relative_to(tests).parts if tests in Path(item.path).parents else ()
        if parts and parts[0] in SLOW_SUITES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _deterministic_torch():
    """Every test starts from the same random state, with the default dtype left untouched."""
    torch.manual_seed(0)
    dtype = torch.get_default_dtype()
    yield
    torch.set_default_dtype(dtype)
