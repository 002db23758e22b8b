"""Time encoder_lib's TransformerEncoder against nn.TransformerEncoder holding the same weights.

Run from the repository root::

    .venv/bin/python bench/bench_encoder.py            # the headline size, full repeats
    .venv/bin/python bench/bench_encoder.py --quick    # fewer repeats
    .venv/bin/python bench/bench_encoder.py --batch 8 --length 128

Headline size: B=32, L=256, D=512, H=8, d_ff=2048, 4 layers, float32, CPU, 2 threads. Each case
is warmed up, then ours and PyTorch's are timed alternately (the order flips every repeat, so
drift in the machine's speed hits both), and the medians are compared.

Cases:
  (a) inference, no weights: eval mode under torch.inference_mode, the whole encoder. PyTorch
      takes its C++ fast path here (``torch._transformer_encoder_layer_fwd``); the script checks
      which path it took and also times PyTorch with the fast path switched off
      (``torch.backends.mha.set_fastpath_enabled(False)``), i.e. its ordinary Python path.
  (b) inference with attention weights: nn.TransformerEncoder cannot return weights, so this
      times the 4 layers' self-attention modules, each on the input that layer sees in (a):
      ours ``MultiHeadAttention(x, x, x, need_weights=True)`` against
      ``nn.MultiheadAttention(x, x, x, need_weights=True, average_attn_weights=False)``, both
      returning (B, H, L, L) weights; inference_mode, eval. PyTorch's fast path
      (``torch._native_multi_head_attention``) applies here too; both are timed.
  (c) a training step: train mode, dropout 0.1 in both, forward + backward of a sum of the
      output times a fixed random tensor, gradients reset (set to None) before each step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from encoder_lib import TransformerEncoder

D_MODEL, HEADS, D_FF, LAYERS = 512, 8, 2048, 4


@contextlib.contextmanager
def count_calls(name: str):
    """Count calls to ``torch.<name>`` (how we learn which path PyTorch took)."""
    calls: list[int] = []
    original = getattr(torch, name)

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    setattr(torch, name, spy)
    try:
        yield calls
    finally:
        setattr(torch, name, original)


@contextlib.contextmanager
def fast_path(enabled: bool):
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(enabled)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


PAIRED: dict[str, float] = {}  # case -> median over repeats of (ours / theirs) in that repeat


def time_pair(
    ours: Callable[[], object], theirs: Callable[[], object], repeats: int, warmup: int
) -> tuple[float, float, float]:
    """Median wall times in ms, ours and theirs timed alternately, order flipped each repeat;
    and the median of the per-repeat ratios, which drifts less when the machine is shared."""
    for _ in range(warmup):
        ours()
        theirs()
    times: dict[str, list[float]] = {"ours": [], "theirs": []}
    for r in range(repeats):
        order = (("ours", ours), ("theirs", theirs))
        for key, fn in order if r % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            fn()
            times[key].append(1000 * (time.perf_counter() - start))
    paired = statistics.median(o / t for o, t in zip(times["ours"], times["theirs"], strict=True))
    return statistics.median(times["ours"]), statistics.median(times["theirs"]), paired


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a rough look)")
    parser.add_argument("--batch", type=int, default=32, help="B (default 32)")
    parser.add_argument("--length", type=int, default=256, help="L (default 256)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    B, L = args.batch, args.length
    repeats, train_repeats, warmup = (3, 3, 1) if args.quick else (15, 9, 2)

    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.1, batch_first=True)
    theirs = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
    with torch.no_grad():  # make the layers differ, as after training
        for p in theirs.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    ours = TransformerEncoder.from_torch(theirs)
    x = torch.randn(B, L, D_MODEL)
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads; B={B} L={L} D={D_MODEL} H={HEADS} d_ff={D_FF} "
        f"layers={LAYERS} float32; medians of {repeats} (training {train_repeats}) "
        f"alternating runs after {warmup} warm-up; load average now "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs",
        flush=True,
    )
    rows: list[tuple[str, float, float, float]] = []
    notes: list[str] = []

    def add_row(name: str, t_ours: float, t_theirs: float, target: float, paired: float) -> None:
        rows.append((name, t_ours, t_theirs, target))
        PAIRED[name] = paired
        print(
            f"  done: {name}: {t_ours:.1f} ms vs {t_theirs:.1f} ms (paired ratio {paired:.2f}x, "
            f"load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )

    # --- (a) inference without weights ---------------------------------------------------------
    ours.eval()
    theirs.eval()
    with torch.inference_mode():
        with count_calls("_transformer_encoder_layer_fwd") as calls:
            ref = theirs(x)
        took_fast = len(calls) == LAYERS
        with fast_path(False), count_calls("_transformer_encoder_layer_fwd") as calls_off:
            ref_slow = theirs(x)
        out = ours(x)
        notes.append(
            f"(a) PyTorch path: {'fast path (C++ fused layer)' if took_fast else 'Python path'}; "
            f"with set_fastpath_enabled(False): "
            f"{'fast path' if calls_off else 'Python path'}. max |ours - torch| = "
            f"{(out - ref).abs().max().item():.2e} (fast), "
            f"{(out - ref_slow).abs().max().item():.2e} (Python path)"
        )
        t_ours, t_theirs, paired = time_pair(lambda: ours(x), lambda: theirs(x), repeats, warmup)
        add_row("(a) inference, no weights", t_ours, t_theirs, 1.15, paired)

        def theirs_slow():
            with fast_path(False):
                return theirs(x)

        t_ours, t_theirs, paired = time_pair(lambda: ours(x), theirs_slow, repeats, warmup)
        add_row("(a) ... torch fast path off", t_ours, t_theirs, 1.15, paired)

        # --- (b) inference with per-head attention weights, the 4 layers' attention modules ---
        inputs, h = [], x
        for lyr in ours.layers:
            inputs.append(h)
            h = lyr(h)

        def ours_weights():
            for lyr, xi in zip(ours.layers, inputs, strict=True):
                lyr.self_attn(xi, xi, xi, need_weights=True)

        def theirs_weights():
            for lyr, xi in zip(theirs.layers, inputs, strict=True):
                lyr.self_attn(xi, xi, xi, need_weights=True, average_attn_weights=False)

        def theirs_weights_slow():
            with fast_path(False):
                theirs_weights()

        with count_calls("_native_multi_head_attention") as calls:
            theirs_weights()
        with fast_path(False), count_calls("_native_multi_head_attention") as calls_off:
            theirs_weights()
        _, wa = ours.layers[0].self_attn(inputs[0], inputs[0], inputs[0], need_weights=True)
        _, wb = theirs.layers[0].self_attn(
            inputs[0], inputs[0], inputs[0], need_weights=True, average_attn_weights=False
        )
        notes.append(
            f"(b) PyTorch path: {'fast path (native MHA)' if calls else 'Python path'}; with "
            f"set_fastpath_enabled(False): {'fast path' if calls_off else 'Python path'}. "
            f"weights {tuple(wa.shape)}, max |ours - torch| = {(wa - wb).abs().max().item():.2e}"
        )
        t_ours, t_theirs, paired = time_pair(ours_weights, theirs_weights, repeats, warmup)
        add_row("(b) attention + weights, 4 layers", t_ours, t_theirs, 2.0, paired)
        t_ours, t_theirs, paired = time_pair(ours_weights, theirs_weights_slow, repeats, warmup)
        add_row("(b) ... torch fast path off", t_ours, t_theirs, 2.0, paired)

    # --- (c) training step ---------------------------------------------------------------------
    ours.train()
    theirs.train()
    grad_out = torch.randn(B, L, D_MODEL)

    def step(module: nn.Module) -> Callable[[], None]:
        def run() -> None:
            module.zero_grad(set_to_none=True)
            (module(x) * grad_out).sum().backward()

        return run

    t_ours, t_theirs, paired = time_pair(step(ours), step(theirs), train_repeats, warmup)
    add_row("(c) training step (fwd + bwd)", t_ours, t_theirs, 1.3, paired)
    report(rows, notes)


def report(rows: list[tuple[str, float, float, float]], notes: list[str]) -> None:
    print()
    for note in notes:
        print(note)
    header = ("case", "encoder_lib ms", "torch ms", "ratio", "target", "ok?")
    table = [
        (
            name,
            f"{o:.1f}",
            f"{t:.1f}",
            f"{o / t:.2f}x",
            f"<={target:.2f}x",
            "yes" if o / t <= target else "NO",
        )
        for name, o, t, target in rows
    ]
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    for r in [header, tuple("-" * w for w in widths), *table]:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(
        "ratio = median(ours) / median(torch); median of the per-repeat ratios: "
        + "; ".join(f"{name} {r:.2f}x" for name, r in PAIRED.items())
    )


if __name__ == "__main__":
    main()
