"""Passage-encoding speed of the default encoder: naive vs length-sorted batching, float32 vs bfloat16.

Encodes ~500 real NQ gold passages three ways and reports passages per second:

1. ``fp32_naive``  -- float32, batches in input order (each padded to its longest passage);
2. ``fp32_sorted`` -- float32, batches of similar token length (openbook's default);
3. ``bf16_sorted`` -- sorted batches under CPU bfloat16 autocast.

Then checks whether bfloat16 is safe as a default: the cosine similarity between bf16 and fp32 passage
embeddings, and whether top-5 retrieval for 100 NQ dev questions (whose gold passages are among the
encoded ones) is unchanged. Prints readable figures, then ONE JSON line with all of them.

Usage:  python bench/encode_speed.py [--passages 500] [--questions 100] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from openbook.models import load_encoder

DATA = Path(os.environ.get("OPENBOOK_DATA", "/work/shared/data"))
PASSAGES_FILE = DATA / "nq-gold-passages.jsonl.gz"
QUESTIONS_FILE = DATA / "nq-open-oracle.dev-split.jsonl.gz"


def read_jsonl(path: Path, limit: int) -> list[dict]:
    """The first ``limit`` records of a gzipped JSONL file."""
    records = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            records.append(json.loads(line))
            if len(records) == limit:
                break
    return records


def load_data(n_passages: int, n_questions: int) -> tuple[list, list[str], list[int]]:
    """Passages (the questions' gold passages first, then other NQ gold passages), questions, gold indices."""
    questions = read_jsonl(QUESTIONS_FILE, n_questions)
    passages, index = [], {}
    for record in [q["ctxs"][0] for q in questions] + read_jsonl(PASSAGES_FILE, n_passages):
        key = (record["title"], record["text"])
        if key not in index and len(passages) < n_passages:
            index[key] = len(passages)
            passages.append(SimpleNamespace(title=record["title"], text=record["text"]))
    gold = [index[(q["ctxs"][0]["title"], q["ctxs"][0]["text"])] for q in questions]
    return passages, [q["question"] for q in questions], gold


def timed(encoder, passages, batch_size: int, dtype: str, sort: bool) -> tuple[np.ndarray, float, float]:
    """Embeddings of ``passages``, passages per wall-clock second and per CPU second of this process.

    The machine may be shared: CPU seconds are less disturbed by other processes than wall time.
    """
    wall, cpu = time.perf_counter(), time.process_time()
    vectors = encoder.encode_passages(passages, batch_size=batch_size, dtype=dtype, sort=sort)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return vectors, len(passages) / wall, len(passages) / cpu


def padded_tokens(lengths: list[int], batch_size: int) -> int:
    """Tokens the model processes when batches (in the given order) are padded to their longest text."""
    batches = [lengths[start : start + batch_size] for start in range(0, len(lengths), batch_size)]
    return sum(max(batch) * len(batch) for batch in batches)


def top_k(queries: np.ndarray, passages: np.ndarray, k: int = 5) -> np.ndarray:
    """Indices of the ``k`` highest inner products per query, best first."""
    return np.argsort(-(queries @ passages.T), axis=1, kind="stable")[:, :k]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=500)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    passages, questions, gold = load_data(args.passages, args.questions)
    encoder = load_encoder("minilm")
    encoder.encode_passages(passages[:16])  # warm-up

    fp32_naive, naive_speed, naive_cpu = timed(encoder, passages, args.batch_size, "float32", sort=False)
    fp32, sorted_speed, sorted_cpu = timed(encoder, passages, args.batch_size, "float32", sort=True)
    bf16, bf16_speed, bf16_cpu = timed(encoder, passages, args.batch_size, "bfloat16", sort=True)
    lengths = [len(feature["input_ids"]) for feature in encoder.tokenize_passages(passages)]

    cosine = np.sum(fp32 * bf16, axis=1) / (np.linalg.norm(fp32, axis=1) * np.linalg.norm(bf16, axis=1))
    queries32 = encoder.encode_queries(questions, dtype="float32")
    queries16 = encoder.encode_queries(questions, dtype="bfloat16")
    top32, top16 = top_k(queries32, fp32), top_k(queries16, bf16)
    figures = {
        "passages": len(passages),
        "questions": len(questions),
        "batch_size": args.batch_size,
        "threads": torch.get_num_threads(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "tokens_real": sum(lengths),
        "tokens_padded_naive": padded_tokens(lengths, args.batch_size),
        "tokens_padded_sorted": padded_tokens(sorted(lengths, reverse=True), args.batch_size),
        "fp32_naive_pps": round(naive_speed, 1),
        "fp32_sorted_pps": round(sorted_speed, 1),
        "bf16_sorted_pps": round(bf16_speed, 1),
        "fp32_naive_pps_cpu": round(naive_cpu, 1),
        "fp32_sorted_pps_cpu": round(sorted_cpu, 1),
        "bf16_sorted_pps_cpu": round(bf16_cpu, 1),
        "sorted_speedup": round(sorted_speed / naive_speed, 2),
        "bf16_speedup": round(bf16_speed / sorted_speed, 2),
        "sorted_vs_naive_max_abs_diff": float(np.abs(fp32 - fp32_naive).max()),
        "bf16_cosine_min": round(float(cosine.min()), 5),
        "bf16_cosine_mean": round(float(cosine.mean()), 5),
        "top5_identical_sets": int(sum(set(a) == set(b) for a, b in zip(top32, top16))),
        "top5_identical_order": int(np.sum(np.all(top32 == top16, axis=1))),
        "gold_recall_at5_fp32": round(float(np.mean([g in row for g, row in zip(gold, top32)])), 3),
        "gold_recall_at5_bf16": round(float(np.mean([g in row for g, row in zip(gold, top16)])), 3),
    }
    for key, value in figures.items():
        print(f"{key:30s} {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
