"""Helpers for comparing encoder_lib modules with PyTorch's own (imported by the tests here)."""

from __future__ import annotations

import torch
from torch import nn
from torch.testing import assert_close

# The tolerances the course promises: float64 to 1e-10, float32 to 1e-5.
TOL = {
    torch.float64: {"atol": 1e-10, "rtol": 1e-10},
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
}
DTYPES = [torch.float64, torch.float32]
DTYPE_IDS = ["float64", "float32"]


def perturb_parameters_(module: nn.Module, scale: float = 0.2) -> nn.Module:
    """Add noise to every parameter, so that zero biases, unit LayerNorm gains and the identical
    copies nn.TransformerEncoder makes of its layer cannot hide a transplant that drops or swaps
    a parameter."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * scale)
    return module


def keep_mask(batch: int, length: int) -> torch.Tensor:
    """``(B, L)`` boolean, True at real positions: row b has ``length - b`` real positions (at
    least one), so rows differ and none is fully padded."""
    lengths = torch.tensor([max(1, length - b) for b in range(batch)])
    return torch.arange(length)[None, :] < lengths[:, None]


def assert_param_grads_close(ours: nn.Module, theirs: nn.Module, dtype: torch.dtype) -> None:
    """The gradient of every parameter, matched by name, is the same in both modules."""
    ours_p, theirs_p = dict(ours.named_parameters()), dict(theirs.named_parameters())
    assert ours_p.keys() == theirs_p.keys()
    for name, p in ours_p.items():
        q = theirs_p[name]
        assert p.grad is not None and q.grad is not None, f"no gradient for {name}"
        assert_close(p.grad, q.grad, **TOL[dtype], msg=lambda m, name=name: f"grad {name}: {m}")


def assert_state_dict_keys_match(ours: nn.Module, theirs: nn.Module) -> None:
    ours_sd, theirs_sd = ours.state_dict(), theirs.state_dict()
    assert set(ours_sd) == set(theirs_sd)
    for name, value in ours_sd.items():
        assert value.shape == theirs_sd[name].shape, name
        assert value.dtype == theirs_sd[name].dtype, name
