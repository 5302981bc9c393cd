"""Passages encoded per second: openbook's document encoder in float32 and in bfloat16 (both with
length-sorted batches) vs sentence-transformers' ``encode``; and whether bfloat16 keeps retrieval.

Speed: same model (the packaged all-MiniLM-L6-v2), same passages (the shipped demo corpus, formatted the
way openbook formats them), same batch size, in the same process and interleaved, so machine load hits
every variant alike; max abs difference of the vectors to sentence-transformers'.

Recall: held-out NQ (``nq-open-oracle.dev-split``, the questions the project scores on) against the NQ
gold passages (``nq-gold-passages``, every question's gold passage among them): gold recall@5 of the
float32 queries over passages encoded in float32 and in bfloat16, as ``openbook eval retrieval`` counts
it (the gold passage, matched by title and text, in the top 5). ``kb build --encode-dtype`` may default
to bfloat16 only if it is within 0.5 point of float32.

    .venv/bin/python bench/build_throughput.py [--passages 2000] [--batch-size 64] [--repeats 3]
        [--recall-passages 0 (all)] [--questions 0 (all)]

Ends with one JSON line holding ``bf16_speedup_vs_sentence_transformers`` and ``recall_at5_*``.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

DATA = Path(os.environ.get("OPENBOOK_DATA", "/work/shared/data"))
RECALL_TOLERANCE = 0.005  # bfloat16 may be the default only within 0.5 point of float32's recall@5


def read_jsonl(path: Path, limit: int = 0) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = itertools.islice(handle, limit or None)
        return [json.loads(line) for line in lines]


def nq_recall_data(n_passages: int, n_questions: int):
    """NQ gold passages (each question's gold passage first, then the others; distinct), questions, gold rows."""
    from openbook.corpus import Passage

    questions = read_jsonl(DATA / "nq-open-oracle.dev-split.jsonl.gz", n_questions)
    rows: dict[tuple[str, str], int] = {}
    passages = []
    for record in [q["ctxs"][0] for q in questions] + read_jsonl(DATA / "nq-gold-passages.jsonl.gz"):
        key = (record["title"], record["text"])
        if key not in rows and (not n_passages or len(passages) < n_passages):
            rows[key] = len(passages)
            passages.append(Passage(f"nq:{len(passages)}", record["title"], record["text"]))
    gold = np.array([rows[(q["ctxs"][0]["title"], q["ctxs"][0]["text"])] for q in questions])
    return passages, [q["question"] for q in questions], gold


def recall_at(k: int, queries: np.ndarray, passages: np.ndarray, gold: np.ndarray) -> float:
    top = np.argsort(-(queries @ passages.T), axis=1, kind="stable")[:, :k]
    return float(np.mean([g in row for g, row in zip(gold, top)]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passages", type=int, default=2000, help="demo passages to time")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--recall-passages", type=int, default=0, help="NQ gold passages to search (0: all)")
    p.add_argument("--questions", type=int, default=0, help="NQ dev questions (0: all)")
    args = p.parse_args()

    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    from openbook.corpus import read_passages
    from openbook.data import demo_passages_path
    from openbook.models import load_encoder
    from openbook.models.loading import packaged_minilm_path
    from openbook.models.precision import bf16_hardware

    hf_logging.set_verbosity_error()
    passages = list(itertools.islice(read_passages(demo_passages_path()), args.passages))
    ours = load_encoder("minilm")
    texts = [f"{p.title}. {p.text}" if p.title else p.text for p in passages]  # openbook's "joined" format
    st = SentenceTransformer(str(packaged_minilm_path()), device="cpu")
    st.max_seq_length = ours.max_length

    variants = {
        "openbook_fp32": lambda: ours.encode_passages(passages, batch_size=args.batch_size, dtype="float32"),
        "openbook_bf16": lambda: ours.encode_passages(passages, batch_size=args.batch_size, dtype="bfloat16"),
        "sentence_transformers": lambda: st.encode(texts, batch_size=args.batch_size, convert_to_numpy=True,
                                                   normalize_embeddings=True, show_progress_bar=False),
    }
    vectors = {name: fn() for name, fn in variants.items()}  # warm-up
    times: dict[str, list[float]] = {name: [] for name in variants}
    for repeat in range(args.repeats):
        names = list(variants) if repeat % 2 == 0 else list(reversed(variants))
        for name in names:
            start = time.perf_counter()
            vectors[name] = variants[name]()
            times[name].append(time.perf_counter() - start)
    pps = {name: len(passages) / statistics.median(t) for name, t in times.items()}

    nq_passages, questions, gold = nq_recall_data(args.recall_passages, args.questions)
    queries = ours.encode_queries(questions, dtype="float32")
    recall = {dtype: recall_at(5, queries, ours.encode_passages(nq_passages, batch_size=args.batch_size,
                                                               dtype=dtype), gold)
              for dtype in ("float32", "bfloat16")}
    recall_gap = recall["bfloat16"] - recall["float32"]
    st_pps = pps["sentence_transformers"]
    result = {
        "passages": len(passages),
        "batch_size": args.batch_size,
        "threads": torch.get_num_threads(),
        "bf16_hardware": bf16_hardware(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "openbook_fp32_passages_per_s": round(pps["openbook_fp32"], 1),
        "openbook_bf16_sorted_passages_per_s": round(pps["openbook_bf16"], 1),
        "sentence_transformers_passages_per_s": round(st_pps, 1),
        "speedup_vs_sentence_transformers": round(pps["openbook_fp32"] / st_pps, 3),
        "bf16_speedup_vs_sentence_transformers": round(pps["openbook_bf16"] / st_pps, 3),
        "max_abs_diff_fp32": float(np.abs(vectors["openbook_fp32"] - vectors["sentence_transformers"]).max()),
        "max_abs_diff_bf16": float(np.abs(vectors["openbook_bf16"] - vectors["sentence_transformers"]).max()),
        "recall_passages": len(nq_passages),
        "recall_questions": len(questions),
        "recall_at5_fp32": round(recall["float32"], 4),
        "recall_at5_bf16": round(recall["bfloat16"], 4),
        "recall_at5_bf16_minus_fp32": round(recall_gap, 4),
        "bf16_within_half_point": abs(recall_gap) <= RECALL_TOLERANCE,
    }
    print("command:", " ".join([sys.executable, *sys.argv]))
    print(f"{'encoder loop':<32}{'passages/s':>12}")
    for name, key in (("openbook float32, sorted", "openbook_fp32_passages_per_s"),
                      ("openbook bfloat16, sorted", "openbook_bf16_sorted_passages_per_s"),
                      ("sentence-transformers", "sentence_transformers_passages_per_s")):
        print(f"{name:<32}{result[key]:>12}")
    print(f"NQ gold recall@5 over {len(nq_passages)} passages, {len(questions)} questions: "
          f"float32 {recall['float32']:.4f}, bfloat16 {recall['bfloat16']:.4f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
