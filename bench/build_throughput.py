"""Passages encoded per second: openbook's document encoder in float32, int8 and bfloat16 (all with
length-sorted batches), eager and compiled, vs sentence-transformers' ``encode``; and whether they keep retrieval.

bfloat16 runs only where the CPU computes it natively (AVX-512 BF16 or AMX; ``--bf16`` forces it), int8
(dynamic quantisation, :func:`openbook.models.precision.quantize_int8`) where PyTorch has its x86 engine.
Each type also runs compiled (``kb build --compile``: TorchInductor, int8 through PyTorch 2 export and
torchao's x86 quantiser, :func:`openbook.models.precision.compile_for_inference`) where a C++ compiler (and for
int8 torchao) is found, ``--compiled`` lists which; the compile is timed apart (``compile_seconds_*``, the warm-up call).

Speed: same model (the packaged all-MiniLM-L6-v2), same passages (the shipped demo corpus, formatted the
way openbook formats them), in the same process and interleaved, so machine load hits every variant alike; max
abs difference of the vectors to sentence-transformers'. openbook runs at each of ``--batch-sizes`` (passages per
forward pass; its figures without a batch size are at :data:`openbook.models.encoders.PASSAGE_BATCH`, what ``kb
build`` uses), sentence-transformers at each of ``--st-batch-sizes``, and the peer is its fastest.

Recall: held-out NQ (``nq-open-oracle.dev-split``, the questions the project scores on) against the NQ
gold passages (``nq-gold-passages``, every question's gold passage among them): gold recall@5 of the
float32 queries over passages encoded in each type, as ``openbook eval retrieval`` counts it (the gold
passage, matched by title and text, in the top 5). A type counts (``best_dtype_within_recall``) only if
its recall@5 is within 0.5 point of float32's.

    .venv/bin/python bench/build_throughput.py [--passages 1000] [--batch-sizes 16,64] [--st-batch-sizes 16,32,64]
        [--compiled float32,bfloat16,int8] [--repeats 3] [--recall-passages 0 (all)] [--questions 0 (all)]

Ends with one JSON line holding ``{fp32,int8,bf16}[_compiled]_speedup_vs_sentence_transformers``,
``recall_at5_*`` and ``best_speedup_vs_sentence_transformers`` (of the fastest kind within the recall tolerance,
``best_dtype_within_recall``).
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
RECALL_TOLERANCE = 0.005  # bfloat16 or int8 may be the default only within 0.5 point of float32's recall@5
SHORT = {"float32": "fp32", "bfloat16": "bf16", "int8": "int8"}


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


def short(dtype: str, compiled: bool) -> str:
    """The figures' name of a kind: ``fp32``, ``int8``, ``bf16``, and ``..._compiled``."""
    return SHORT[dtype] + ("_compiled" if compiled else "")


def can_compile(dtype: str) -> bool:
    """Whether ``kb build --compile`` can run ``dtype`` here: a C++ compiler, and torchao for int8."""
    import importlib.util
    import shutil

    if not any(shutil.which(name) for name in (os.environ.get("CXX", ""), "g++", "clang++") if name):
        return False
    return dtype != "int8" or importlib.util.find_spec("torchao") is not None


def recall_at(k: int, queries: np.ndarray, passages: np.ndarray, gold: np.ndarray) -> float:
    top = np.argsort(-(queries @ passages.T), axis=1, kind="stable")[:, :k]
    return float(np.mean([g in row for g, row in zip(gold, top)]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passages", type=int, default=1000, help="demo passages to time")
    p.add_argument("--batch-sizes", default="16,64", help="openbook's passages per forward pass to time")
    p.add_argument("--st-batch-sizes", default="16,32,64", help="sentence-transformers' batch sizes to time")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--recall-passages", type=int, default=0, help="NQ gold passages to search (0: all)")
    p.add_argument("--questions", type=int, default=0, help="NQ dev questions (0: all)")
    p.add_argument("--bf16", action="store_true", help="time bfloat16 even where the CPU only emulates it")
    p.add_argument("--compiled", default="float32,bfloat16,int8",
                   help="types also timed compiled (kb build --compile), of those timed eager; '' for none")
    args = p.parse_args()

    import logging

    for name in ("torchao", "torch.utils._pytree"):  # torchao's import-time noise, as openbook's CLI quiets it
        logging.getLogger(name).setLevel(logging.ERROR)
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    from openbook.corpus import read_passages
    from openbook.data import demo_passages_path
    from openbook.models import load_encoder
    from openbook.models.encoders import PASSAGE_BATCH
    from openbook.models.loading import packaged_minilm_path
    from openbook.models.precision import bf16_hardware, int8_engine

    hf_logging.set_verbosity_error()
    passages = list(itertools.islice(read_passages(demo_passages_path()), args.passages))
    ours = load_encoder("minilm")
    texts = [f"{p.title}. {p.text}" if p.title else p.text for p in passages]  # openbook's "joined" format
    st = SentenceTransformer(str(packaged_minilm_path()), device="cpu")
    st.max_seq_length = ours.max_length

    dtypes = ["float32", "int8"] if int8_engine() else ["float32"]
    if bf16_hardware() or args.bf16:  # emulated elsewhere, and many times slower than float32
        dtypes.append("bfloat16")
    compiled = [d for d in args.compiled.split(",") if d in dtypes and can_compile(d)]
    kinds = [(d, False) for d in dtypes] + [(d, True) for d in compiled]  # (dtype, compiled)
    sizes = sorted({PASSAGE_BATCH, *map(int, args.batch_sizes.split(","))})
    st_sizes = sorted(set(map(int, args.st_batch_sizes.split(","))))
    variants = {f"openbook_{short(d, c)}_bs{b}":
                (lambda d=d, c=c, b=b: ours.encode_passages(passages, batch_size=b, dtype=d, compile=c))
                for d, c in kinds for b in sizes}
    for b in st_sizes:
        variants[f"sentence_transformers_bs{b}"] = lambda b=b: st.encode(
            texts, batch_size=b, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    vectors, warm_up = {}, {}
    for name, fn in variants.items():  # warm-up: int8's one-time quantisation, each compiled kind's compile
        start = time.perf_counter()
        vectors[name] = fn()
        warm_up[name] = time.perf_counter() - start
    times: dict[str, list[float]] = {name: [] for name in variants}
    for repeat in range(args.repeats):
        names = list(variants) if repeat % 2 == 0 else list(reversed(variants))
        for name in names:
            start = time.perf_counter()
            vectors[name] = variants[name]()
            times[name].append(time.perf_counter() - start)
    pps = {name: len(passages) / statistics.median(t) for name, t in times.items()}
    st_best = max(st_sizes, key=lambda b: pps[f"sentence_transformers_bs{b}"])
    for d, c in kinds:  # the figures of kb build's own batch size
        pps[f"openbook_{short(d, c)}"] = pps[f"openbook_{short(d, c)}_bs{PASSAGE_BATCH}"]
        vectors[f"openbook_{short(d, c)}"] = vectors[f"openbook_{short(d, c)}_bs{PASSAGE_BATCH}"]
    pps["sentence_transformers"] = pps[f"sentence_transformers_bs{st_best}"]
    vectors["sentence_transformers"] = vectors[f"sentence_transformers_bs{st_best}"]

    nq_passages, questions, gold = nq_recall_data(args.recall_passages, args.questions)
    queries = ours.encode_queries(questions, dtype="float32")
    recall = {(d, c): recall_at(5, queries, ours.encode_passages(nq_passages, dtype=d, compile=c), gold)
              for d, c in kinds}
    st_pps = pps["sentence_transformers"]
    result = {
        "passages": len(passages),
        "batch_size": PASSAGE_BATCH,
        "passages_per_s_by_batch_size": {name: round(rate, 1) for name, rate in pps.items() if "_bs" in name},
        "sentence_transformers_best_batch_size": st_best,
        "threads": torch.get_num_threads(),
        "bf16_hardware": bf16_hardware(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "sentence_transformers_passages_per_s": round(st_pps, 1),
        "recall_passages": len(nq_passages),
        "recall_questions": len(questions),
    }
    for d, c in kinds:
        name = short(d, c)
        result[f"openbook_{name}_passages_per_s"] = round(pps[f"openbook_{name}"], 1)
        result[f"{name}_speedup_vs_sentence_transformers"] = round(pps[f"openbook_{name}"] / st_pps, 3)
        result[f"max_abs_diff_{name}"] = float(np.abs(vectors[f"openbook_{name}"] - vectors["sentence_transformers"]).max())
        result[f"recall_at5_{name}"] = round(recall[d, c], 4)
        if c:
            result[f"compile_seconds_{SHORT[d]}"] = round(warm_up[f"openbook_{name}_bs{sizes[0]}"], 1)
        if (d, c) != ("float32", False):
            gap = recall[d, c] - recall["float32", False]
            result[f"recall_at5_{name}_minus_fp32"] = round(gap, 4)
            result[f"{name}_within_half_point"] = abs(gap) <= RECALL_TOLERANCE
    result["speedup_vs_sentence_transformers"] = result["fp32_speedup_vs_sentence_transformers"]
    kept = [(d, c) for d, c in kinds if (d, c) == ("float32", False) or result[f"{short(d, c)}_within_half_point"]]
    best = max(kept, key=lambda kind: pps[f"openbook_{short(*kind)}"])
    result["best_dtype_within_recall"] = best[0] + (" compiled" if best[1] else "")
    result["best_speedup_vs_sentence_transformers"] = result[f"{short(*best)}_speedup_vs_sentence_transformers"]
    print("command:", " ".join([sys.executable, *sys.argv]))
    print(f"{'encoder loop':<32}{'passages/s':>12}{'NQ recall@5':>14}")
    for d, c in kinds:
        name = short(d, c)
        print(f"{'openbook ' + d + (' compiled' if c else '') + ', sorted':<32}"
              f"{result[f'openbook_{name}_passages_per_s']:>12}{result[f'recall_at5_{name}']:>14.4f}")
    print(f"{'sentence-transformers (fastest)':<32}{result['sentence_transformers_passages_per_s']:>12}")
    for name, rate in result["passages_per_s_by_batch_size"].items():
        print(f"  {name:<30}{rate:>12}")
    print(f"NQ gold recall@5 over {len(nq_passages)} passages, {len(questions)} questions")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
