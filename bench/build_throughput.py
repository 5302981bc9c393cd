"""Passages encoded per second: openbook's document-encoder loop vs sentence-transformers' ``encode``.

Same model (the packaged all-MiniLM-L6-v2), same passages (the shipped demo corpus, formatted the way
openbook formats them), same batch size, in the same process and interleaved, so machine load hits both.
Also checks that the two give the same vectors (max abs difference).

    .venv/bin/python bench/build_throughput.py [--passages 2000] [--batch-size 64] [--repeats 3]

Ends with one JSON line holding ``speedup_vs_sentence_transformers``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time

import numpy as np
import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passages", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    from openbook.corpus import read_passages
    from openbook.data import demo_passages_path
    from openbook.models import load_encoder
    from openbook.models.loading import packaged_minilm_path

    hf_logging.set_verbosity_error()
    passages = list(itertools.islice(read_passages(demo_passages_path()), args.passages))
    ours = load_encoder("minilm")
    texts = [f"{p.title}. {p.text}" if p.title else p.text for p in passages]  # openbook's "joined" format
    st = SentenceTransformer(str(packaged_minilm_path()), device="cpu")
    st.max_seq_length = ours.max_length

    def run_ours():
        return ours.encode_passages(passages, batch_size=args.batch_size)

    def run_st():
        return st.encode(texts, batch_size=args.batch_size, convert_to_numpy=True, normalize_embeddings=True,
                         show_progress_bar=False)

    run_ours(), run_st()  # warm-up
    times = {"openbook": [], "sentence_transformers": []}
    for _ in range(args.repeats):
        for name, fn in (("openbook", run_ours), ("sentence_transformers", run_st)):
            start = time.perf_counter()
            vectors = fn()
            times[name].append(time.perf_counter() - start)
            if name == "openbook":
                a = vectors
            else:
                b = vectors
    median = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "passages": len(passages),
        "batch_size": args.batch_size,
        "threads": torch.get_num_threads(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "openbook_passages_per_s": round(len(passages) / median["openbook"], 1),
        "sentence_transformers_passages_per_s": round(len(passages) / median["sentence_transformers"], 1),
        "speedup_vs_sentence_transformers": round(median["sentence_transformers"] / median["openbook"], 3),
        "max_abs_diff": float(np.abs(a - b).max()),
    }
    print("command:", " ".join([sys.executable, *sys.argv]))
    print(f"{'encoder loop':<24}{'passages/s':>12}")
    print(f"{'openbook':<24}{result['openbook_passages_per_s']:>12}")
    print(f"{'sentence-transformers':<24}{result['sentence_transformers_passages_per_s']:>12}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
