"""The capstone's training recipe, timed: a bag-of-words baseline and a small encoder classifier
trained the same way on ``encoder_lib.make_order_task``, with 1 and with 2 torch threads.

Run from the repository root::

    .venv/bin/python bench/bench_capstone.py                  # 1 and 2 threads, each run twice
    .venv/bin/python bench/bench_capstone.py --threads 1 --repeat 1
    .venv/bin/python bench/bench_capstone.py --figures /tmp/curves   # also save the curves
    .venv/bin/python bench/bench_capstone.py --threads 1 --repeat 1 --seeds 1 2 3 4

Targets (issue 9): the baseline's held-out accuracy at most 60%; the encoder's at least 95%,
within 60 s of training on 2 threads and 120 s on 1; peak memory under 450 MB; the same seed
gives bit-identical losses and accuracies when run again.

Every training run is a fresh Python process (as a fresh notebook kernel would be) that imports
torch, matplotlib and tqdm, sets its thread count, builds the data, trains with a tqdm bar and
reports its history. "train s" is the training loop's wall time (every epoch's held-out
evaluation included, data generation and imports not), "cpu s" its CPU time (all threads);
"peak MB" is the process's high-water mark of resident memory. Timings on a shared machine are
noisy: the load average is printed with them. On a busy machine, 2 threads can be several times
slower than 1: idle OpenMP threads spin while they wait for work and fight the other jobs for
the cores. ``--passive`` runs the workers with ``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep);
the notebooks use 1 thread, where this does not arise.

The model code below is the *reference* for what students write in the capstone notebook
(masked mean pooling, the classifier, the training step); it lives here, not in encoder_lib,
on purpose.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import encoder_lib

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"baseline_max": 0.60, "encoder_min": 0.95, "seconds": {1: 120.0, 2: 60.0}, "mb": 450.0}


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the numbers: the values proposed for the capstone notebook."""

    seed: int = 0  # data, initialisation, shuffling and dropout
    train_pairs: int = 2000  # 4000 training sentences
    validation_pairs: int = 250  # 500 held-out sentences for the curves
    test_pairs: int = 250  # 500 held-out sentences for the final figure
    d_model: int = 32
    num_heads: int = 4
    d_ff: int = 64
    num_layers: int = 2
    dropout: float = 0.1
    scale_embedding: bool = False  # see _EncoderClassifier
    epochs: int = 15
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.01
    cosine: bool = True  # learning rate decays from lr to 0 along a cosine, batch by batch


# --- the reference model and training loop -------------------------------------------------------


def _masked_mean(h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean of ``h`` (B, L, D) over the positions where ``keep`` (B, L) is True: (B, D)."""
    weights = keep.to(h.dtype)[:, :, None]  # (B, L, 1)
    return (h * weights).sum(dim=1) / weights.sum(dim=1)  # (B, D)


class _EncoderClassifier(nn.Module):
    """Token embedding + sinusoidal positions + encoder layers + masked mean + linear head.

    ``scale_embedding=False``: nn.Embedding starts from N(0, 1) entries, so multiplying them by
    sqrt(D) (the paper's scaling, meant for embeddings of size 1/sqrt(D)) makes every word
    vector sqrt(2D) = 8 times longer than the positional encoding's rows (length D against
    sqrt(D/2)). On a task where only the order of the words tells the labels apart, that model
    stays at chance for many epochs; unscaled, it learns within a few. ``scale_embedding=True``
    measures that combination: TokenEmbedding(scale=True) alone starts small (std 1/sqrt(D)),
    so its table is brought back to N(0, 1) first.
    """

    def __init__(self, vocab: encoder_lib.Vocabulary, max_len: int, recipe: Recipe):
        super().__init__()
        D = recipe.d_model
        self.pad_id = vocab.pad_id
        self.embedding = encoder_lib.TokenEmbedding(
            len(vocab), D, padding_idx=vocab.pad_id, scale=recipe.scale_embedding
        )
        if recipe.scale_embedding:  # N(0, 1) entries times sqrt(D), the tutorials' combination
            with torch.no_grad():
                self.embedding.embedding.weight.mul_(D**0.5)
        self.positional = encoder_lib.SinusoidalPositionalEncoding(D, max_len)
        layer = encoder_lib.EncoderLayer(D, recipe.num_heads, recipe.d_ff, recipe.dropout)
        self.encoder = encoder_lib.TransformerEncoder(layer, recipe.num_layers)
        self.head = nn.Linear(D, 2)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        keep = token_ids != self.pad_id  # (B, L)
        x = self.positional(self.embedding(token_ids))  # (B, L, D)
        h = self.encoder(x, keep[:, None, None, :])  # mask (B, 1, 1, L): True = may attend
        return self.head(_masked_mean(h, keep))  # (B, 2) logits


class _BagOfWords(nn.Module):
    """The baseline: the mean of the token embeddings of the real tokens, then a linear head.
    No attention, no positions: it sees which words a sentence has, not their order."""

    def __init__(self, vocab: encoder_lib.Vocabulary, recipe: Recipe):
        super().__init__()
        self.pad_id = vocab.pad_id
        self.embedding = nn.Embedding(len(vocab), recipe.d_model, padding_idx=vocab.pad_id)
        self.head = nn.Linear(recipe.d_model, 2)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        keep = token_ids != self.pad_id  # (B, L)
        return self.head(_masked_mean(self.embedding(token_ids), keep))  # (B, 2)


def _train_step(model, optimizer, ids, labels) -> tuple[float, int]:
    """One step on one mini-batch: (mean loss, number of correct predictions)."""
    logits = model(ids)  # (B, 2)
    loss = F.cross_entropy(logits, labels)  # on logits, not probabilities
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item(), int((logits.argmax(dim=-1) == labels).sum())


def _evaluate(model, ids, labels) -> tuple[float, float]:
    """(mean loss, accuracy) in eval mode, without gradients."""
    model.eval()
    with torch.no_grad():
        logits = model(ids)  # (B, 2)
    accuracy = (logits.argmax(dim=-1) == labels).float().mean()
    return F.cross_entropy(logits, labels).item(), float(accuracy)


def _train(model, train, held_out, recipe: Recipe, progress: bool) -> dict[str, list[float]]:
    """The training loop; returns the per-epoch curves the notebook draws. ``train`` and
    ``held_out`` are (ids, labels) pairs; the training loss and accuracy of an epoch are the
    running means over its mini-batches (in train mode, with dropout)."""
    from tqdm.auto import tqdm

    optimizer = torch.optim.AdamW(
        model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay
    )
    shuffle = torch.Generator().manual_seed(recipe.seed)
    ids, labels = train
    steps = recipe.epochs * math.ceil(len(ids) / recipe.batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: 0.5 * (1 + math.cos(math.pi * step / steps)) if recipe.cosine else 1.0,
    )
    history: dict[str, list[float]] = {
        k: [] for k in ("train_loss", "train_accuracy", "held_out_loss", "held_out_accuracy")
    }
    bar = tqdm(range(recipe.epochs), desc="epochs", disable=not progress, leave=False)
    for _ in bar:
        model.train()
        total_loss, correct = 0.0, 0
        for batch in torch.randperm(len(ids), generator=shuffle).split(recipe.batch_size):
            loss, right = _train_step(model, optimizer, ids[batch], labels[batch])
            schedule.step()
            total_loss += loss * len(batch)
            correct += right
        history["train_loss"].append(total_loss / len(ids))
        history["train_accuracy"].append(correct / len(ids))
        loss, accuracy = _evaluate(model, *held_out)
        history["held_out_loss"].append(loss)
        history["held_out_accuracy"].append(accuracy)
        bar.set_postfix(loss=f"{history['train_loss'][-1]:.3f}", held_out=f"{accuracy:.1%}")
    return history


# --- one run (a fresh process) and the comparison ------------------------------------------------


def run_one(model_name: str, threads: int, recipe: Recipe, progress: bool) -> dict:
    """Train one model from scratch; the report the parent process prints."""
    import matplotlib.pyplot  # noqa: F401  (the notebook's kernel has it: count its memory)

    torch.set_num_threads(threads)
    task = encoder_lib.make_order_task(
        recipe.seed, recipe.train_pairs, recipe.validation_pairs, recipe.test_pairs
    )
    vocab, L = task.vocab, task.max_sequence_length

    def tensors(split):
        return vocab.encode_batch([s for s, _ in split], L), torch.tensor([y for _, y in split])

    torch.manual_seed(recipe.seed)
    if model_name == "baseline":
        model = _BagOfWords(vocab, recipe)
    else:
        model = _EncoderClassifier(vocab, L, recipe)
    start, cpu_start = time.perf_counter(), time.process_time()
    history = _train(model, tensors(task.train), tensors(task.validation), recipe, progress)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    test_ids, test_labels = tensors(task.test)
    test_loss, test_accuracy = _evaluate(model, test_ids, test_labels)
    with torch.no_grad():
        right = (model(test_ids).argmax(dim=-1) == test_labels).tolist()
    by_kind: dict[str, list[bool]] = {}
    for k, kind in enumerate(task.kinds["test"]):  # pair k is sentences 2k and 2k + 1
        by_kind.setdefault(kind, []).extend(right[2 * k : 2 * k + 2])
    reached = [i + 1 for i, a in enumerate(history["held_out_accuracy"]) if a >= 0.95]
    return {
        "model": model_name,
        "threads": threads,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_seconds": seconds,
        "train_cpu_seconds": cpu_seconds,
        "test_accuracy": test_accuracy,
        "test_loss": test_loss,
        "first_epoch_95": reached[0] if reached else None,
        "test_accuracy_by_construction": {k: sum(v) / len(v) for k, v in by_kind.items()},
        "history": history,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _fingerprint(report: dict) -> list[str]:
    """Every printed figure, exactly (float.hex), to compare two runs bit for bit."""
    numbers = [report["test_accuracy"], report["test_loss"]]
    numbers += [x for curve in report["history"].values() for x in curve]
    return [float(x).hex() for x in numbers]


def _spawn(model_name: str, threads: int, recipe: Recipe, progress: bool, passive: bool) -> dict:
    command = [sys.executable, __file__, "--worker", model_name, "--threads", str(threads)]
    command += ["--recipe", json.dumps(asdict(recipe))] + (["--progress"] if progress else [])
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE") if passive else None
    out = subprocess.run(
        command, check=True, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=2, help="runs per case (determinism check)")
    parser.add_argument("--epochs", type=int, default=Recipe.epochs)
    parser.add_argument(
        "--seeds", type=int, nargs="*", default=[], help="also train the encoder with these seeds"
    )
    parser.add_argument("--progress", action="store_true", help="show the tqdm bars")
    parser.add_argument(
        "--passive",
        action="store_true",
        help="run the workers with OMP_WAIT_POLICY=PASSIVE (idle OpenMP threads sleep instead of "
        "spinning: on a busy machine this decides the 2-thread time)",
    )
    parser.add_argument("--figures", type=Path, help="save the training curves in this folder")
    parser.add_argument("--worker", choices=("baseline", "encoder"), help=argparse.SUPPRESS)
    parser.add_argument("--recipe", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        recipe = Recipe(**json.loads(args.recipe))
        print(json.dumps(run_one(args.worker, args.threads[0], recipe, args.progress)))
        return

    recipe = Recipe(epochs=args.epochs)
    print("recipe:", ", ".join(f"{k}={v}" for k, v in asdict(recipe).items()))
    policy = "PASSIVE" if args.passive else os.environ.get("OMP_WAIT_POLICY", "(unset)")
    print(f"OMP_WAIT_POLICY for the workers: {policy}")
    print(f"load average before: {_load()}  ({os.cpu_count()} cores)")
    reports: dict[tuple[str, int], list[dict]] = {}
    for threads in args.threads:
        for name in ("baseline", "encoder"):
            reports[name, threads] = [
                _spawn(name, threads, recipe, args.progress, args.passive)
                for _ in range(args.repeat)
            ]
    print(f"load average after:  {_load()}")
    print()
    _print_table(reports)
    print()
    for threads in args.threads:
        base, enc = reports["baseline", threads][0], reports["encoder", threads][0]
        fastest = min(r["train_seconds"] for r in reports["encoder", threads])
        ok = (
            base["test_accuracy"] <= TARGETS["baseline_max"]
            and enc["test_accuracy"] >= TARGETS["encoder_min"]
            and fastest <= TARGETS["seconds"][threads]
            and all(r["peak_mb"] < TARGETS["mb"] for runs in reports.values() for r in runs)
        )
        print(
            f"{threads} thread(s): baseline {base['test_accuracy']:.1%} (target <= 60%), "
            f"encoder {enc['test_accuracy']:.1%} (>= 95%) in {fastest:.1f} s of training "
            f"(<= {TARGETS['seconds'][threads]:.0f} s): {'meets the targets' if ok else 'MISSES'}"
        )
    if len(args.threads) > 1:
        a, b = (reports["encoder", t][0] for t in args.threads[:2])
        same = _fingerprint(a) == _fingerprint(b)
        print(
            f"encoder figures identical on {args.threads[0]} and {args.threads[1]} threads: {same}"
        )
    first = reports["encoder", args.threads[0]][0]
    print("encoder held-out accuracy by construction:", _by_construction(first))
    print(f"per-epoch curves of the encoder ({args.threads[0]} thread(s), first run):")
    history = first["history"]
    for epoch, values in enumerate(zip(*history.values(), strict=True), start=1):
        figures = ", ".join(f"{k} {v:.4f}" for k, v in zip(history, values, strict=True))
        print(f"  epoch {epoch:2d}: {figures}")
    if args.seeds:
        print(f"encoder with other seeds ({args.threads[0]} thread(s)), load {_load()}:")
        for seed in args.seeds:
            seeded = replace(recipe, seed=seed)
            report = _spawn("encoder", args.threads[0], seeded, args.progress, args.passive)
            print(
                f"  seed {seed}: held-out {report['test_accuracy']:.1%} "
                f"({_by_construction(report)}), >= 95% at epoch {report['first_epoch_95']}, "
                f"{report['train_seconds']:.1f} s"
            )
    if args.figures:
        _save_curves(reports, args.threads[0], args.figures)


def _print_table(reports: dict[tuple[str, int], list[dict]]) -> None:
    """One line per (model, threads); times of every run, "identical" when all runs agree."""
    header = f"{'threads':>7}  {'model':<9} {'params':>6} {'held-out acc':>12} {'loss':>7}"
    header += f" {'>=95% at':>8} {'train s (runs)':>15} {'cpu s':>6} {'peak MB':>8}  identical"
    print(header)
    for (name, threads), runs in reports.items():
        first = runs[0]
        same = all(_fingerprint(r) == _fingerprint(first) for r in runs)
        seconds = "/".join(f"{r['train_seconds']:.1f}" for r in runs)
        cpu = min(r["train_cpu_seconds"] for r in runs)
        print(
            f"{threads:>7}  {name:<9} {first['parameters']:>6} {first['test_accuracy']:>12.1%} "
            f"{first['test_loss']:>7.4f} {first['first_epoch_95'] or '-':>8} {seconds:>15} "
            f"{cpu:>6.1f} {max(r['peak_mb'] for r in runs):>8.0f}  {'yes' if same else 'NO'}"
        )


def _by_construction(report: dict) -> str:
    return ", ".join(f"{k} {v:.0%}" for k, v in report["test_accuracy_by_construction"].items())


def _save_curves(reports: dict, threads: int, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, style in (("baseline", "--"), ("encoder", "-")):
        history = reports[name, threads][0]["history"]
        epochs = range(1, len(history["train_loss"]) + 1)
        for split, color in (("train", "C0"), ("held_out", "C1")):
            label = f"{name}, {split.replace('_', '-')}"
            ax_loss.plot(epochs, history[f"{split}_loss"], style, color=color, label=label)
            ax_acc.plot(epochs, history[f"{split}_accuracy"], style, color=color, label=label)
    ax_loss.axhline(math.log(2), color="gray", linewidth=0.8)
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy", title="loss (gray: ln 2, guessing)")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title="accuracy", ylim=(0.4, 1.02))
    ax_acc.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "capstone_curves.png", dpi=110)
    print(f"saved {folder / 'capstone_curves.png'}")


if __name__ == "__main__":
    main()
