"""Notebook 08's recipe, timed: masked-language-model pretraining on
``encoder_lib.make_review_language``, then fine-tuning on 16, 32 and 64 labels against training
from scratch and a bag of words, with 1 and with 2 torch threads.

Run from the repository root::

    .venv/bin/python bench/bench_pretraining.py                 # 1 and 2 threads
    .venv/bin/python bench/bench_pretraining.py --threads 1
    .venv/bin/python bench/bench_pretraining.py --threads 1 --seeds 1 2 3   # other seeds too

Targets: on sentences whose adjectives no labelled sentence contains, the pretrained and
fine-tuned encoder scores at least 90%, and at least 30 points more than the same encoder
trained from scratch, at the smallest labelled size; masked-token accuracy at least 30 points
above always guessing the most frequent word; at least 80% of the adjectives have as nearest
neighbour (cosine of embeddings, among the adjectives) one of the same polarity; pretraining
plus all the fine-tuning within 60 s on one thread; peak memory under 450 MB.

Every run is a fresh Python process (as a fresh notebook kernel would be) that imports torch,
matplotlib and tqdm, sets its thread count, builds the language, pretrains and fine-tunes with
``encoder_lib.pretraining`` (the functions the notebook calls) and reports. "wall s" and
"cpu s" (all threads) cover pretraining and the whole transfer experiment (every size, seed and
model), not imports or data generation; "peak MB" is the process's high-water mark of resident
memory. Timings on a shared machine are noisy: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"held_out": 0.90, "margin": 0.30, "mlm_margin": 0.30, "neighbours": 0.80}
TARGETS |= {"seconds": 60.0, "mb": 450.0}


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the numbers: the values notebook 08 uses."""

    seed: int = 0  # the language, the model's initialisation, batches and masking
    corpus_size: int = 20_000
    d_model: int = 32
    num_heads: int = 4
    d_ff: int = 64
    num_layers: int = 2
    steps: int = 2000
    batch_size: int = 128
    lr: float = 5e-3
    warmup: int = 100
    sizes: tuple[int, ...] = (16, 32, 64)
    fine_tune_seeds: tuple[int, ...] = (0, 1, 2)
    fine_tune_steps: int = 100
    fine_tune_lr: float = 1e-3
    bag_of_words_lr: float = 0.1


def run_one(threads: int, recipe: Recipe, progress: bool) -> dict:
    """Pretrain, analyse, fine-tune; the report the parent process prints."""
    import matplotlib.pyplot  # noqa: F401  (the notebook's kernel has it: count its memory)
    import torch
    from tqdm.auto import tqdm

    from encoder_lib.mlm import MaskedLanguageModel
    from encoder_lib.pretraining import (
        evaluate_mlm,
        pretrain,
        same_category_rate,
        transfer_experiment,
    )
    from encoder_lib.review_language import NOUNS, make_review_language

    torch.set_num_threads(threads)
    language = make_review_language(recipe.seed, recipe.corpus_size)
    corpus_ids = language.corpus_ids()
    torch.manual_seed(recipe.seed)
    model = MaskedLanguageModel(
        len(language.vocab),
        language.max_sequence_length,
        d_model=recipe.d_model,
        num_heads=recipe.num_heads,
        d_ff=recipe.d_ff,
        num_layers=recipe.num_layers,
    )
    before = {
        "adjectives": same_category_rate(model, language),
        "nouns": same_category_rate(model, language, tuple(NOUNS)),
    }
    start, cpu_start = time.perf_counter(), time.process_time()
    history = pretrain(
        model,
        corpus_ids,
        mask_id=language.mask_id,
        first_word_id=language.first_word_id,
        steps=recipe.steps,
        batch_size=recipe.batch_size,
        lr=recipe.lr,
        warmup=recipe.warmup,
        seed=recipe.seed,
        progress=tqdm if progress else None,
    )
    pretrain_seconds = time.perf_counter() - start
    mlm = evaluate_mlm(model, language, corpus_ids, seed=recipe.seed)
    after = {
        "adjectives": same_category_rate(model, language),
        "nouns": same_category_rate(model, language, tuple(NOUNS)),
    }
    middle = time.perf_counter()
    rows = transfer_experiment(
        language,
        model,
        sizes=recipe.sizes,
        seeds=recipe.fine_tune_seeds,
        steps=recipe.fine_tune_steps,
        lr=recipe.fine_tune_lr,
        bag_of_words_lr=recipe.bag_of_words_lr,
    )
    end, cpu_end = time.perf_counter(), time.process_time()
    return {
        "threads": threads,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocabulary": len(language.vocab),
        "pretrain_seconds": pretrain_seconds,
        "fine_tune_seconds": end - middle,
        "seconds": end - start,
        "cpu_seconds": cpu_end - cpu_start,
        "history": history,
        "mlm": mlm,
        "before": before,
        "after": after,
        "rows": rows,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _fingerprint(report: dict) -> list[str]:
    """Every figure, exactly (float.hex), to compare two runs bit for bit."""
    numbers = [x for curve in report["history"].values() for x in curve]
    numbers += list(report["mlm"].values())
    numbers += [x for pair in report["after"].values() for x in pair]
    for row in report["rows"]:
        for name in ("pretrained", "scratch", "bag_of_words"):
            numbers += row[f"{name}_runs"]
    return [float(x).hex() for x in numbers]


def _spawn(threads: int, recipe: Recipe, progress: bool) -> dict:
    command = [sys.executable, __file__, "--worker", "--threads", str(threads)]
    command += ["--recipe", json.dumps(asdict(recipe))] + (["--progress"] if progress else [])
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--seeds", type=int, nargs="*", default=[], help="also run these seeds (1 thread)"
    )
    parser.add_argument("--progress", action="store_true", help="show the tqdm bar")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--recipe", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        fields = json.loads(args.recipe)
        recipe = Recipe(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
        print(json.dumps(run_one(args.threads[0], recipe, args.progress)))
        return

    recipe = Recipe()
    print("recipe:", ", ".join(f"{k}={v}" for k, v in asdict(recipe).items()))
    print(f"load average before: {_load()}  ({os.cpu_count()} cores)")
    reports = {}
    for threads in args.threads:
        reports[threads] = _spawn(threads, recipe, args.progress)
        print(f"load average after {threads} thread(s): {_load()}")
    print()
    print(
        f"{'threads':>7} {'pretrain s':>10} {'fine-tune s':>11} {'wall s':>7} {'cpu s':>6}", end=""
    )
    print(f" {'peak MB':>8}")
    for threads, r in reports.items():
        print(
            f"{threads:>7} {r['pretrain_seconds']:>10.1f} {r['fine_tune_seconds']:>11.1f} "
            f"{r['seconds']:>7.1f} {r['cpu_seconds']:>6.1f} {r['peak_mb']:>8.0f}"
        )
    first = reports[args.threads[0]]
    if len(reports) > 1:
        same = all(_fingerprint(r) == _fingerprint(first) for r in reports.values())
        print(f"figures identical on {' and '.join(map(str, reports))} threads: {same}")
    print()
    print(f"figures ({args.threads[0]} thread(s)):")
    _print_figures(first)
    print()
    _print_targets(first, reports)
    for seed in args.seeds:
        print()
        print(f"seed {seed} (1 thread), load average {_load()}:")
        report = _spawn(1, replace(recipe, seed=seed), args.progress)
        _print_figures(report)
        print(f"  {report['seconds']:.1f} s, peak {report['peak_mb']:.0f} MB")


def _print_figures(r: dict) -> None:
    from encoder_lib.pretraining import format_transfer_row

    print(f"{r['parameters']} parameters, vocabulary {r['vocabulary']}")
    h = r["history"]
    curve = ", ".join(
        f"{s}: {a:.1%}" for s, a in zip(h["step"], h["accuracy"], strict=True) if s % 500 == 0
    )
    print(f"masked-token accuracy on training batches by step: {curve}")
    mlm = r["mlm"]
    print(
        f"masked-token accuracy (test corpus): {mlm['accuracy']:.1%}, "
        f"most frequent word {mlm['unigram']:.1%}"
    )
    for name, words in (("adjectives", "polarity"), ("nouns", "kind")):
        (rate0, _), (rate, chance) = r["before"][name], r["after"][name]
        print(
            f"nearest neighbour of the same {words} ({name}): {rate:.1%} "
            f"(before pretraining {rate0:.1%}, chance {chance:.1%})"
        )
    for row in r["rows"]:
        print(format_transfer_row(row))
    for row in r["rows"]:
        runs = "; ".join(
            f"{name} " + " ".join(f"{x:.1%}" for x in row[f"{name}_runs"])
            for name in ("pretrained", "scratch", "bag_of_words")
        )
        seen = ", ".join(f"{name} {x:.1%}" for name, x in row["seen"].items())
        print(f"  {row['labels']} labels, per seed: {runs}; seen words: {seen}")


def _print_targets(first: dict, reports: dict) -> None:
    smallest = first["rows"][0]
    ok = smallest["pretrained"] >= TARGETS["held_out"]
    ok &= smallest["pretrained"] - smallest["scratch"] >= TARGETS["margin"]
    print(
        f"{_verdict(ok)}  held-out accuracy at {smallest['labels']} labels: pretrained "
        f"{smallest['pretrained']:.1%} (>= 90%), "
        f"{100 * (smallest['pretrained'] - smallest['scratch']):.1f} points above from scratch "
        "(>= 30)"
    )
    mlm = first["mlm"]
    ok = mlm["accuracy"] - mlm["unigram"] >= TARGETS["mlm_margin"]
    print(
        f"{_verdict(ok)}  masked-token accuracy {mlm['accuracy']:.1%}, most frequent word "
        f"{mlm['unigram']:.1%} (>= 30 points above)"
    )
    rate, chance = first["after"]["adjectives"]
    ok = rate >= TARGETS["neighbours"]
    print(
        f"{_verdict(ok)}  adjectives whose nearest neighbour has the same polarity: {rate:.1%} "
        f"(>= 80%, chance {chance:.1%})"
    )
    if 1 in reports:
        seconds = reports[1]["seconds"]
        ok = seconds <= TARGETS["seconds"]
        print(
            f"{_verdict(ok)}  pretraining and all fine-tuning on 1 thread: {seconds:.1f} s "
            f"(<= 60 s)"
        )
    peak = max(r["peak_mb"] for r in reports.values())
    print(f"{_verdict(peak < TARGETS['mb'])}  peak memory {peak:.0f} MB (< 450 MB)")


if __name__ == "__main__":
    main()
