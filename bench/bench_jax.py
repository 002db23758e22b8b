"""The encoder block of notebook 10 in JAX, eager and jitted, against PyTorch's layer: one run,
figures side by side.

    python bench/bench_jax.py [--repeats 20]

For each size: the reference NNX block (``encoder_lib.jax_encoder.EncoderBlock``, the
notebook's solution) called eagerly, its first ``nnx.jit`` call (tracing and compiling
included), its later jitted calls, and ``nn.TransformerEncoderLayer`` with the same weights on 1
and 2 torch threads, all in evaluation mode (``deterministic=True`` / ``.eval()`` with
``torch.no_grad()``). Steady-state figures are the median of ``--repeats`` calls; the ratio
column divides by PyTorch on one thread. XLA picks its own threads on the CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import torch
from flax import nnx
from torch import nn

from encoder_lib import jax_bridge
from encoder_lib.jax_encoder import EncoderBlock

SIZES = [(8, 64, 128, 4), (32, 128, 256, 8)]  # (B, L, D, H), d_ff = 4 D


def _median_ms(fn, repeats: int) -> float:
    fn()  # one call outside the timing (caches, allocator)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(B: int, L: int, D: int, H: int, repeats: int) -> dict[str, float]:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, H, 4 * D, 0.1, batch_first=True).eval()
    block = EncoderBlock(D, H, 4 * D, 0.1, rngs=nnx.Rngs(params=0, dropout=1))
    jax_bridge.block_from_torch(block, layer.state_dict())
    x = torch.randn(B, L, D)
    x_jax = jax_bridge.to_jax(x)

    @nnx.jit(static_argnames="deterministic")
    def run(block, x, deterministic):
        return block(x, deterministic=deterministic)

    figures = {}
    start = time.perf_counter()
    out = run(block, x_jax, True).block_until_ready()
    figures["jit, first call (compiles)"] = (time.perf_counter() - start) * 1000
    figures["jit, later calls"] = _median_ms(
        lambda: run(block, x_jax, True).block_until_ready(), repeats
    )
    figures["eager JAX"] = _median_ms(
        lambda: block(x_jax, deterministic=True).block_until_ready(), repeats
    )
    with torch.no_grad():
        want = layer(x)
        for threads in (1, 2):
            torch.set_num_threads(threads)
            figures[f"PyTorch, {threads} thread{'s' * (threads > 1)}"] = _median_ms(
                lambda: layer(x), repeats
            )
    gap = (jax_bridge.to_torch(out) - want).abs().max().item()
    print(f"  (jitted block against PyTorch: largest difference {gap:.1e})")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    print(
        f"jax {jax.__version__} on {jax.devices()[0].platform}, torch {torch.__version__}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}"
    )
    for B, L, D, H in SIZES:
        print(f"\nB={B} L={L} D={D} H={H} d_ff={4 * D} (median of {args.repeats} calls):")
        figures = measure(B, L, D, H, args.repeats)
        base = figures["PyTorch, 1 thread"]
        for name, ms in figures.items():
            print(f"  {name:>28}: {ms:9.2f} ms  {ms / base:6.2f} x PyTorch (1 thread)")


if __name__ == "__main__":
    main()
