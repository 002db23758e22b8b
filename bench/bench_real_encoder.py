"""Notebook 11's search and fine-tuning sections, measured: all-MiniLM-L6-v2 in the course's
modules against TF-IDF and a random-weights encoder on ``encoder_lib.retrieval``'s collection,
then fine-tuned on the invented company's help pages.

Run from the repository root::

    .venv/bin/python bench/bench_real_encoder.py
    .venv/bin/python bench/bench_real_encoder.py --seeds 1 2      # fine-tuning with other seeds
    .venv/bin/python bench/bench_real_encoder.py --rank 16 --steps 80 --lr 3e-4

Targets: 1,000 sentences embedded within 10 s on one thread; on the search collection, MiniLM's
recall@1 at least 80% and at least 25 points above TF-IDF's, the random encoder's at most 2%
(chance is 0.3%), a query's content words found in its document at most 25% on average;
fine-tuning within 60 s on one thread raises the held-out recall@1 by at least 10 points and
leaves the general recall@1 at least 80%; the same seed gives the same losses; peak memory
under 450 MB.

Everything runs in this one fresh process, in the notebook's order, on one torch thread, with
matplotlib imported (the notebook's kernel has it: its memory counts). "Peak MB" is the
process's high-water mark of resident memory after each stage. The model's weights are read from
a memory-mapped file, so the word-table rows a text touches become resident as they are used:
the peak after "load" is not yet the model's full size. Timings on a shared machine are noisy:
the load average is printed with them.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import time

import torch

from encoder_lib import retrieval
from encoder_lib.minilm import load_minilm

TARGETS = {
    "embed_seconds": 10.0,
    "minilm_recall": 0.80,
    "margin": 0.25,
    "random_recall": 0.02,
    "overlap": 0.25,
    "fine_tune_seconds": 60.0,
    "gain": 0.10,
    "general_after": 0.80,
    "mb": 450.0,
}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _sentences(corpus: retrieval.SearchCorpus, domain: retrieval.FineTuneDomain) -> list[str]:
    """1,000 sentences of the course's collections: the search documents and queries first, so
    that their vectors serve the search measure too."""
    texts = corpus.documents + corpus.queries + [q for q, _ in domain.train_pairs]
    return texts[:1000]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=retrieval.FINE_TUNE_STEPS)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--rank", type=int, default=retrieval.LORA_RANK)
    parser.add_argument(
        "--seeds", type=int, nargs="*", default=[], help="also fine-tune with these seeds"
    )
    args = parser.parse_args()
    recipe = {
        "steps": args.steps,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "rank": args.rank,
    }

    import matplotlib.pyplot  # noqa: F401  (the notebook's kernel has it: count its memory)

    torch.set_num_threads(1)
    print(
        f"{datetime.datetime.now().isoformat(timespec='minutes')}; torch {torch.__version__}, "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"1 torch thread, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    print("fine-tuning recipe:", ", ".join(f"{k}={v}" for k, v in recipe.items()))
    peaks = {"imports": _peak_mb()}

    start = time.perf_counter()
    model = load_minilm()
    load_seconds = time.perf_counter() - start
    peaks["load"] = _peak_mb()

    corpus, domain = retrieval.search_corpus(), retrieval.finetune_domain()
    sentences = _sentences(corpus, domain)
    start = time.perf_counter()
    vectors = model.encode(sentences)
    embed_seconds = time.perf_counter() - start
    peaks["embed 1,000"] = _peak_mb()
    N = len(corpus.documents)
    doc_vectors, query_vectors = vectors[:N], vectors[N : N + len(corpus.queries)]

    random_model = retrieval.random_encoder(
        model.tokenizer, seed=0, texts=corpus.documents + corpus.queries
    )
    random_vectors = random_model.encode(corpus.queries), random_model.encode(corpus.documents)
    del random_model
    comparison = retrieval.compare_search(corpus, (query_vectors, doc_vectors), random_vectors)
    peaks["search (random encoder)"] = _peak_mb()

    before = retrieval.domain_recall(model, domain)
    start = time.perf_counter()
    losses = retrieval.fine_tune(model, domain.train_pairs, seed=args.seed, **recipe)
    fine_tune_seconds = time.perf_counter() - start
    peaks["fine-tuning"] = _peak_mb()
    after = retrieval.domain_recall(model, domain)
    general_after = retrieval.recall_at_k(
        model.encode(corpus.queries), model.encode(corpus.documents), corpus.targets, 1
    )
    peaks["after"] = _peak_mb()

    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print()
    r = comparison.recall
    minilm, tfidf, random = (r[name][1] for name in ("MiniLM", "TF-IDF", "random encoder"))
    print(str(comparison))
    print()
    print(f"load_minilm: {load_seconds:.2f} s")
    rate = len(sentences) / embed_seconds
    print(
        f"{len(sentences):,} sentences embedded in {embed_seconds:.2f} s ({rate:.0f}/s) "
        f"(target <= {TARGETS['embed_seconds']:.0f} s): "
        f"{_verdict(embed_seconds <= TARGETS['embed_seconds'])}"
    )
    print(
        f"MiniLM recall@1 {minilm:.1%} (target >= {TARGETS['minilm_recall']:.0%}): "
        f"{_verdict(minilm >= TARGETS['minilm_recall'])}"
    )
    print(
        f"MiniLM - TF-IDF recall@1 {100 * (minilm - tfidf):.1f} points "
        f"(target >= {100 * TARGETS['margin']:.0f}): "
        f"{_verdict(minilm - tfidf >= TARGETS['margin'])}"
    )
    print(
        f"random encoder recall@1 {random:.1%} (chance {1 / N:.1%}; target <= "
        f"{TARGETS['random_recall']:.0%}): {_verdict(random <= TARGETS['random_recall'])}"
    )
    print(
        f"query words found in their document {comparison.overlap:.1%} "
        f"(target <= {TARGETS['overlap']:.0%}): "
        f"{_verdict(comparison.overlap <= TARGETS['overlap'])}"
    )
    print()
    print(retrieval.finetune_report(before, after, losses))
    gain = after.recall_at_1 - before.recall_at_1
    print(
        f"fine-tuning {fine_tune_seconds:.1f} s for {len(losses)} steps "
        f"(target <= {TARGETS['fine_tune_seconds']:.0f} s): "
        f"{_verdict(fine_tune_seconds <= TARGETS['fine_tune_seconds'])}"
    )
    print(
        f"held-out recall@1 gain {100 * gain:.1f} points (target >= {100 * TARGETS['gain']:.0f}): "
        f"{_verdict(gain >= TARGETS['gain'])}"
    )
    print(
        f"general recall@1 after fine-tuning {general_after:.1%} (before {minilm:.1%}; target >= "
        f"{TARGETS['general_after']:.0%}): {_verdict(general_after >= TARGETS['general_after'])}"
    )

    # the same seed again, on a fresh copy of the model: the same losses?
    del model
    again = retrieval.fine_tune(load_minilm(), domain.train_pairs, seed=args.seed, **recipe)
    print(f"same seed, same {len(losses)} losses bit for bit: {_verdict(again == losses)}")
    print()
    stages = ", ".join(f"{name} {mb:.0f}" for name, mb in peaks.items())
    print(f"peak MB after each stage: {stages}")
    peak = max(peaks.values())
    print(
        f"peak memory {peak:.0f} MB (target < {TARGETS['mb']:.0f} MB): "
        f"{_verdict(peak < TARGETS['mb'])}"
    )

    for seed in args.seeds:
        model = load_minilm()
        start = time.perf_counter()
        losses = retrieval.fine_tune(model, domain.train_pairs, seed=seed, **recipe)
        seconds = time.perf_counter() - start
        result = retrieval.domain_recall(model, domain)
        print(
            f"seed {seed}: held-out recall@1 {result.recall_at_1:.1%}, recall@5 "
            f"{result.recall_at_5:.1%}, right tool {result.right_tool:.1%}, {seconds:.1f} s"
        )


if __name__ == "__main__":
    main()
