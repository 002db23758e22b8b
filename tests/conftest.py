"""Fixtures shared by every test directory. Keep this file small: directory-specific fixtures
belong in that directory's own conftest.py."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _deterministic_torch():
    """Every test starts from the same random state, with the default dtype left untouched."""
    torch.manual_seed(0)
    dtype = torch.get_default_dtype()
    yield
    torch.set_default_dtype(dtype)
