"""Prototype of notebook 07's demonstration, timed: a tiny encoder-decoder built from
``encoder_lib`` learns to reverse (or copy) short token sequences on one CPU thread, then
decodes held-out sequences greedily; its cross-attention map shows the reversal as an
anti-diagonal.

Run from the repository root::

    .venv/bin/python bench/bench_decoder_demo.py                 # reverse, lengths 5-8, 1 thread
    .venv/bin/python bench/bench_decoder_demo.py --task copy
    .venv/bin/python bench/bench_decoder_demo.py --figures /tmp/decoder_phase1
    .venv/bin/python bench/bench_decoder_demo.py --seeds 0 1 2 3   # one fresh run per seed
    .venv/bin/python bench/bench_decoder_demo.py --scale-embeddings  # the recipe that fails

Targets (issue 12): at least 95% of held-out sequences decoded exactly, within 5 s of training
on one thread, so that the notebook's whole Run All stays under 15 s and 450 MB. The time
target is judged on the training loop's CPU time, which is its wall time on one idle thread;
this machine is shared, so the wall time printed beside it is usually longer.

Every seed runs in a fresh Python process (as a notebook kernel would). "train s" is the
training loop's wall time, "cpu s" its CPU time (on one thread and an idle machine the two
agree; on a shared machine the wall time grows with the load average, printed beside it);
"peak MB" is the process's resident-memory high-water mark, torch and matplotlib included.

The task: a sequence of 5 to 8 symbols (10 symbols) padded on the right to 8; the target is the
same symbols reversed, then ``<end>``. The decoder reads ``<start>`` and the target shifted by
one (teacher forcing) under a causal mask; its cross-attention sees the encoder's output with
the source padding mask. Two choices matter, both measured:

* the token embedding keeps nn.Embedding's N(0, 1) start and is *not* multiplied by sqrt(D):
  the task is about positions, and N(0, 1) entries times sqrt(D) make token vectors
  sqrt(2D) = 8 times longer than the sinusoidal encoding's rows, which they drown. With that
  combination (``--scale-embeddings``) the same recipe decodes 2% to 3% of the held-out
  sequences exactly (about half of the tokens) instead of 99.6% to 100% (seeds 0 to 3);
* lr 1e-2 with a one-cycle schedule over 300 steps of 64 sequences.

``greedy_decode`` below is the reference for the notebook's exercise, so it stays here, not in
encoder_lib.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import encoder_lib

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"accuracy": 0.95, "train_s": 5.0, "peak_mb": 450.0}
PAD, START, END = 0, 1, 2  # the course's special ids; symbols follow
SPECIALS = ["<pad>", "<start>", "<end>"]


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the numbers; the notebook would use the same values."""

    seed: int = 0
    task: str = "reverse"  # or "copy"
    symbols: int = 10
    min_len: int = 5
    max_len: int = 8
    train_sequences: int = 20000
    test_sequences: int = 500
    d_model: int = 32
    num_heads: int = 2
    d_ff: int = 64
    num_layers: int = 1  # encoder layers and decoder layers each
    steps: int = 300
    batch_size: int = 64
    lr: float = 1e-2
    scale_embeddings: bool = False

    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + self.symbols


# --- data --------------------------------------------------------------------------------------


def make_pairs(recipe: Recipe, n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources ``(n, max_len)`` padded on the right, and targets ``(n, max_len + 1)``: the
    symbols copied or reversed, then ``<end>``, then padding."""
    lengths = torch.randint(recipe.min_len, recipe.max_len + 1, (n,), generator=g)
    symbols = torch.randint(len(SPECIALS), recipe.vocab_size, (n, recipe.max_len), generator=g)
    real = torch.arange(recipe.max_len)[None, :] < lengths[:, None]  # (n, max_len)
    src = torch.where(real, symbols, PAD)
    tgt = torch.full((n, recipe.max_len + 1), PAD)
    for i, length in enumerate(lengths.tolist()):
        body = src[i, :length]
        tgt[i, :length] = body.flip(0) if recipe.task == "reverse" else body
        tgt[i, length] = END
    return src, tgt


def held_out(recipe: Recipe, g: torch.Generator):
    """Training and test pairs; test sources that also occur in training are dropped."""
    train_src, train_tgt = make_pairs(recipe, recipe.train_sequences, g)
    test_src, test_tgt = make_pairs(recipe, recipe.test_sequences, g)
    seen = {tuple(row) for row in train_src.tolist()}
    fresh = torch.tensor([tuple(row) not in seen for row in test_src.tolist()])
    return train_src, train_tgt, test_src[fresh], test_tgt[fresh]


# --- the model ---------------------------------------------------------------------------------


class Seq2Seq(nn.Module):
    """Embedding + sinusoidal positions -> encoder (source padding mask) -> memory; embedding +
    positions -> decoder (causal mask, source padding mask on the cross-attention) -> logits.
    One embedding table serves both sides (they share the vocabulary)."""

    def __init__(self, recipe: Recipe):
        super().__init__()
        D, H, d_ff, n = recipe.d_model, recipe.num_heads, recipe.d_ff, recipe.num_layers
        self.embedding = encoder_lib.TokenEmbedding(
            recipe.vocab_size, D, padding_idx=PAD, scale=recipe.scale_embeddings
        )
        if recipe.scale_embeddings:  # N(0, 1) entries times sqrt(D), the tutorials' combination
            with torch.no_grad():  # (TokenEmbedding(scale=True) alone starts at std 1/sqrt(D))
                self.embedding.embedding.weight.mul_(D**0.5)
        self.positional = encoder_lib.SinusoidalPositionalEncoding(D, recipe.max_len + 1)
        self.encoder = encoder_lib.TransformerEncoder(
            encoder_lib.EncoderLayer(D, H, d_ff, dropout=0.0), n
        )
        self.decoder = encoder_lib.TransformerDecoder(
            encoder_lib.DecoderLayer(D, H, d_ff, dropout=0.0), n
        )
        self.generator = nn.Linear(D, recipe.vocab_size)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(memory (B, L_src, D), source padding mask (B, 1, 1, L_src), True = real)``."""
        keep = encoder_lib.padding_mask(src, PAD)
        return self.encoder(self.positional(self.embedding(src)), keep), keep

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, keep: torch.Tensor):
        """Logits ``(B, L_tgt, vocab)``: position i predicts the token after ``tgt_in[:, i]``."""
        x = self.positional(self.embedding(tgt_in))  # (B, L_tgt, D)
        causal = encoder_lib.causal_mask(tgt_in.shape[1], device=tgt_in.device)
        return self.generator(self.decoder(x, memory, causal, keep))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        memory, keep = self.encode(src)
        return self.decode(tgt_in, memory, keep)

    def cross_attention(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """The last decoder layer's cross-attention weights ``(B, H, L_tgt, L_src)``."""
        memory, keep = self.encode(src)
        x = self.positional(self.embedding(tgt_in))
        causal = encoder_lib.causal_mask(tgt_in.shape[1], device=tgt_in.device)
        *earlier, last = self.decoder.layers
        for layer in earlier:
            x = layer(x, memory, causal, keep)
        return last.cross_attention_weights(x, memory, causal, keep)


def shift_right(tgt: torch.Tensor) -> torch.Tensor:
    """Teacher forcing: the decoder reads ``<start>`` then the target without its last token."""
    start = torch.full_like(tgt[:, :1], START)
    return torch.cat([start, tgt[:, :-1]], dim=1)


@torch.no_grad()
def greedy_decode(model: Seq2Seq, src: torch.Tensor, max_len: int) -> torch.Tensor:
    """Grow the output one token at a time, always taking the most likely next token; the
    causal mask is what makes step t's answer the same as in training. Returns ``(B, max_len)``
    token ids (anything after ``<end>`` is meaningless)."""
    memory, keep = model.encode(src)
    out = torch.full((src.shape[0], 1), START, device=src.device)
    for _ in range(max_len):
        logits = model.decode(out, memory, keep)  # (B, t, vocab)
        next_token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1): the last position
        out = torch.cat([out, next_token], dim=1)
        if (out == END).any(dim=1).all():
            break
    return F.pad(out[:, 1:], (0, max_len + 1 - out.shape[1]), value=PAD)


def exact_match(pred: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Per sequence: every target token up to and including ``<end>`` decoded right."""
    return ((pred == tgt) | (tgt == PAD)).all(dim=1)


# --- one run -----------------------------------------------------------------------------------


def run(recipe: Recipe, figures: Path | None) -> dict:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(recipe.seed)
    torch.manual_seed(recipe.seed)
    train_src, train_tgt, test_src, test_tgt = held_out(recipe, g)
    model = Seq2Seq(recipe)
    optimizer = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, recipe.lr, total_steps=recipe.steps, pct_start=0.2
    )
    losses = []
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(recipe.steps):
        idx = torch.randint(len(train_src), (recipe.batch_size,), generator=g)
        src, tgt = train_src[idx], train_tgt[idx]
        logits = model(src, shift_right(tgt))  # (B, L_tgt, vocab)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=PAD)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    train_s, cpu_s = time.perf_counter() - wall, time.process_time() - cpu

    model.eval()
    start = time.perf_counter()
    pred = greedy_decode(model, test_src, recipe.max_len + 1)
    decode_s = time.perf_counter() - start
    real = test_tgt != PAD
    result = {
        "recipe": asdict(recipe),
        "train_s": train_s,
        "cpu_s": cpu_s,
        "decode_s": decode_s,
        "test_sequences": len(test_src),
        "accuracy": exact_match(pred, test_tgt).float().mean().item(),
        "token_accuracy": (pred == test_tgt)[real].float().mean().item(),
        "final_loss": sum(losses[-20:]) / 20,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    if figures is not None:
        result["figure"] = str(save_figure(model, recipe, test_src, pred, losses, figures))
    result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def save_figure(model, recipe, test_src, pred, losses, folder: Path) -> Path:
    """Loss curve, then the cross-attention of one held-out sequence of each length: each head
    and their mean (rows: decoding steps, labelled with the token produced; columns: the
    padded source)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def names(ids):
        return [SPECIALS[i] if i < len(SPECIALS) else str(i - len(SPECIALS)) for i in ids]

    lengths = (test_src != PAD).sum(dim=1)
    examples = [int((lengths == n).nonzero()[0]) for n in (recipe.min_len, recipe.max_len)]
    H = recipe.num_heads
    fig, axes = plt.subplots(len(examples), H + 2, figsize=(3.2 * (H + 2), 3.2 * len(examples)))
    for row, i in enumerate(examples):
        src = test_src[i : i + 1]
        n = int(lengths[i])
        out = pred[i : i + 1, : n + 1]  # the decoded symbols and <end>
        with torch.no_grad():
            weights = model.cross_attention(src, shift_right(out))[0]  # (H, n + 1, L_src)
        panels = [*weights, weights.mean(dim=0)]
        titles = [f"head {h}" for h in range(H)] + ["mean of heads"]
        ax = axes[row, 0]
        if row == 0:
            ax.plot(losses)
            ax.set(title="training loss", xlabel="step", yscale="log")
        else:
            ax.axis("off")
        for ax, w, title in zip(axes[row, 1:], panels, titles, strict=True):
            ax.imshow(w.numpy(), vmin=0, vmax=1, cmap="viridis")
            ax.set_xticks(range(src.shape[1]), names(src[0].tolist()), fontsize=8, rotation=90)
            ax.set_yticks(range(n + 1), names(out[0].tolist()), fontsize=8)
            ax.set(title=f"{title} (length {n})", xlabel="source", ylabel="output")
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"cross_attention_{recipe.task}_seed{recipe.seed}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- driver ------------------------------------------------------------------------------------


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=["reverse", "copy"], default="reverse")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=Recipe.steps)
    parser.add_argument("--scale-embeddings", action="store_true")
    parser.add_argument("--figures", type=Path, default=None, help="save the figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one run, JSON in, JSON out
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        figures = None if spec["figures"] is None else Path(spec["figures"])
        print(json.dumps(run(Recipe(**spec["recipe"]), figures)))
        return

    print(f"torch {torch.__version__}, 1 thread, {os.cpu_count()} CPUs; load average {load()}")
    failures = 0
    for seed in args.seeds:
        recipe = Recipe(
            seed=seed, task=args.task, steps=args.steps, scale_embeddings=args.scale_embeddings
        )
        spec = {
            "recipe": asdict(recipe),
            "figures": None if args.figures is None else str(args.figures),
        }
        started = time.perf_counter()
        child = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(spec)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        r = json.loads(child.stdout.strip().splitlines()[-1])
        ok = (
            r["accuracy"] >= TARGETS["accuracy"]
            and r["cpu_s"] <= TARGETS["train_s"]  # = wall time on one idle thread
            and r["peak_mb"] <= TARGETS["peak_mb"]
        )
        failures += not ok
        print(
            f"{args.task} seed {seed}: exact {r['accuracy']:.1%} of {r['test_sequences']} held-out "
            f"(tokens {r['token_accuracy']:.1%}), train {r['train_s']:.2f} s wall / "
            f"{r['cpu_s']:.2f} s cpu ({recipe.steps} steps), "
            f"greedy decoding {r['decode_s']:.2f} s, "
            f"process {time.perf_counter() - started:.1f} s, peak {r['peak_mb']:.0f} MB, "
            f"{r['parameters']} parameters; load average {load()} "
            f"-> {'meets' if ok else 'MISSES'} the targets "
            f"(>= {TARGETS['accuracy']:.0%}, <= {TARGETS['train_s']:.0f} s cpu, "
            f"<= {TARGETS['peak_mb']:.0f} MB)"
        )
        if "figure" in r:
            print(f"  figure: {r['figure']}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
