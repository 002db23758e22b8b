"""encoder_lib.jax_bridge and encoder_lib.jax_encoder (notebook 10's reference), against PyTorch's
own modules, both ways: PyTorch's weights written into the NNX modules give PyTorch's outputs,
and NNX weights written into PyTorch's modules give the NNX outputs."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
nnx = pytest.importorskip("flax.nnx")

from encoder_lib import jax_bridge as bridge  # noqa: E402
from encoder_lib import jax_encoder as J  # noqa: E402

ATOL = 1e-5


@pytest.fixture(autouse=True)
def _float32_matmuls():
    """Full float32 matrix products. The course runs JAX on the CPU (notebook 10 sets
    JAX_PLATFORMS=cpu), where this changes nothing; on a GPU JAX's default precision multiplies in
    TF32, which put the transplanted block 4e-4 away from PyTorch's on an H200 (2026-11-27)."""
    before = jax.config.jax_default_matmul_precision
    jax.config.update("jax_default_matmul_precision", "highest")
    yield
    jax.config.update("jax_default_matmul_precision", before)


def _random_norms(module: nn.Module, seed: int) -> nn.Module:
    """Every LayerNorm with a random gain and offset (ones and zeros would hide a swap)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name:
                p.copy_(
                    torch.randn(p.shape, generator=g) * 0.3 + (1.0 if "weight" in name else 0.0)
                )
    return module


def _torch_layer(D=16, H=4, d_ff=32, seed=0) -> nn.TransformerEncoderLayer:
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D, H, d_ff, dropout=0.1, batch_first=True)
    return _random_norms(layer, seed).eval()


def _run(block, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    mask = None if keep is None else bridge.to_jax(keep)
    return bridge.to_torch(block(bridge.to_jax(x), padding_mask=mask, deterministic=True))


@pytest.mark.parametrize(("D", "H", "d_ff"), [(16, 4, 32), (12, 3, 20), (8, 1, 8)])
def test_pytorch_weights_in_the_jax_block_give_pytorch_s_output(D, H, d_ff):
    layer = _torch_layer(D, H, d_ff, seed=D)
    block = J.EncoderBlock(D, H, d_ff, 0.1, rngs=nnx.Rngs(0))
    bridge.block_from_torch(block, layer.state_dict())
    x = torch.randn(3, 7, D)
    keep = torch.arange(7)[None, :] < torch.tensor([[7], [4], [1]])  # (B, L), True = real
    with torch.no_grad():
        torch.testing.assert_close(_run(block, x), layer(x), atol=ATOL, rtol=1e-4)
        want = layer(x, src_key_padding_mask=bridge.as_torch_padding_mask(keep))
    got = _run(block, x, keep)
    torch.testing.assert_close(got[keep], want[keep], atol=ATOL, rtol=1e-4)


def test_jax_weights_in_the_pytorch_layer_give_the_jax_output():
    block = J.EncoderBlock(16, 4, 32, 0.1, rngs=nnx.Rngs(params=3, dropout=4))
    for norm in (block.norm1, block.norm2):  # away from Flax's ones and zeros
        norm.scale.set_value(jax.random.normal(jax.random.key(1), (16,)) * 0.3 + 1.0)
        norm.bias.set_value(jax.random.normal(jax.random.key(2), (16,)) * 0.3)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True).eval()
    layer.load_state_dict(bridge.block_to_torch(block))  # strict: every name, every shape
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), _run(block, x), atol=ATOL, rtol=1e-4)


def test_the_round_trip_gives_back_every_weight_exactly():
    state = _torch_layer().state_dict()
    block = J.EncoderBlock(16, 4, 32, rngs=nnx.Rngs(0))
    bridge.block_from_torch(block, state)
    back = bridge.block_to_torch(block)
    assert back.keys() == state.keys()
    for name, value in state.items():
        assert torch.equal(back[name], value), name


def test_the_parts_match_pytorch_s_modules():
    torch.manual_seed(1)
    x = torch.randn(2, 5, 16)
    norm = _random_norms(nn.LayerNorm(16), 1)
    ours = J.LayerNorm(16)
    bridge.load_from_torch(ours, norm.state_dict(), "layer_norm")
    with torch.no_grad():
        torch.testing.assert_close(
            bridge.to_torch(ours(bridge.to_jax(x))), norm(x), atol=ATOL, rtol=1e-4
        )

    attention = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    ours = J.MultiHeadAttention(16, 4, rngs=nnx.Rngs(0))
    bridge.load_from_torch(ours, attention.state_dict(), "attention")
    with torch.no_grad():
        want, _ = attention(x, x, x, need_weights=False)
    got = bridge.to_torch(ours(bridge.to_jax(x), deterministic=True))
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-4)

    ff = nn.Sequential()
    ff.linear1, ff.linear2 = nn.Linear(16, 24), nn.Linear(24, 16)
    ours = J.FeedForward(16, 24, rngs=nnx.Rngs(0))
    bridge.load_from_torch(ours, ff.state_dict(), "feed_forward")
    with torch.no_grad():
        want = ff.linear2(torch.relu(ff.linear1(x)))
    torch.testing.assert_close(
        bridge.to_torch(ours(bridge.to_jax(x), deterministic=True)), want, atol=ATOL, rtol=1e-4
    )


def test_load_linear_transposes_and_accepts_no_bias():
    linear = nn.Linear(5, 3)
    layer = nnx.Linear(5, 3, rngs=nnx.Rngs(0))
    J.load_linear(layer, bridge.to_jax(linear.weight), bridge.to_jax(linear.bias))
    x = torch.randn(4, 5)
    with torch.no_grad():
        torch.testing.assert_close(
            bridge.to_torch(layer(bridge.to_jax(x))), linear(x), atol=1e-6, rtol=1e-5
        )
    no_bias = nnx.Linear(5, 3, use_bias=False, rngs=nnx.Rngs(0))
    J.load_linear(no_bias, bridge.to_jax(linear.weight), None)
    assert torch.equal(bridge.to_torch(no_bias.kernel[...]), linear.weight.detach().T)


def test_a_layout_that_does_not_fit_is_named():
    block = J.EncoderBlock(16, 4, 32, rngs=nnx.Rngs(0))
    state = _torch_layer().state_dict()
    with pytest.raises(KeyError, match=r"linear2\.weight"):
        bridge.block_from_torch(block, {k: v for k, v in state.items() if k != "linear2.weight"})
    wider = _torch_layer(16, 4, 48).state_dict()
    with pytest.raises(ValueError, match=r"feed_forward.linear1.kernel has shape \(16, 32\)"):
        bridge.block_from_torch(block, wider)
    del block.norm2
    with pytest.raises(AttributeError, match="has no norm2"):
        bridge.block_from_torch(block, state)


def test_dropout_keeps_the_expected_share_scales_and_follows_its_key():
    x = jnp.ones((200, 100))
    key = jax.random.key(5)
    out = J.dropout(x, 0.3, deterministic=False, key=key)
    kept = out != 0
    assert abs(float(kept.mean()) - 0.7) < 0.01
    assert bool(jnp.allclose(out[kept], 1 / 0.7))
    assert bool((J.dropout(x, 0.3, deterministic=False, key=key) == out).all())
    assert not bool((J.dropout(x, 0.3, deterministic=False, key=jax.random.key(6)) == out).all())
    assert J.dropout(x, 0.3, deterministic=True, key=key) is x
    assert not bool(J.dropout(x, 1.0, deterministic=False, key=key).any())


def test_every_dropout_site_and_call_of_the_block_gets_its_own_key():
    block = J.EncoderBlock(8, 2, 16, 0.5, rngs=nnx.Rngs(params=0, dropout=1))
    x = jnp.ones((2, 3, 8))
    first, second = block(x, deterministic=False), block(x, deterministic=False)
    assert not bool(jnp.allclose(first, second))
    twin = J.EncoderBlock(8, 2, 16, 0.5, rngs=nnx.Rngs(params=0, dropout=1))
    assert bool(jnp.array_equal(twin(x, deterministic=False), first))
    assert bool(jnp.array_equal(block(x, deterministic=True), block(x, deterministic=True)))


def test_the_pytorch_notebooks_never_import_jax():
    """encoder_lib and its checks load without JAX: notebooks 01-09 do not pay for it."""
    code = (
        "import sys, encoder_lib, encoder_lib.grading\n"
        "assert not {'jax', 'flax'} & set(sys.modules), sorted({'jax', 'flax'} & set(sys.modules))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
