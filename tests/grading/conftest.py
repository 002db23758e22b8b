"""Fixtures of the grader tests (the notebook-like namespace is in notebook_namespace.py)."""

import pytest
import torch


@pytest.fixture
def clean_mode_stack():
    """Leave no torch function mode behind (a test may enter one and never leave it)."""
    yield
    while torch._C._len_torch_function_stack() > 0:
        torch._C._pop_torch_function_stack()


@pytest.fixture(scope="module")
def one_torch_thread():
    """The checks are tiny; one thread avoids thread contention on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
