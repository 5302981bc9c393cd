"""Which encoding may `kb build` use for a real Wikipedia by default: the fastest whose top 5 equal float32's.

Encodes the first ``--passages`` passages of a source folder (default the 2015 Wikipedia of ../shared/data,
read as ``kb build`` reads it) with openbook's document encoder in float32, int8 (eager, and compiled where a C++
compiler and torchao are found), bfloat16 (only where the CPU computes it natively, or with ``--bf16``), and with
sentence-transformers' ``encode`` on the same texts; one pass each, in one process. ``--bf32`` adds ``bf32``:
float32 throughout, each matrix product computed by oneDNN from bfloat16-rounded inputs with float32 outputs
(``torch.backends.mkldnn.matmul.fp32_precision = "bf16"``), which keeps activations in float32 between products.
Then, for the held-out NQ fifth (the questions the project scores on, encoded in float32 as ``ask`` does), it
searches each kind's vectors exactly and counts the questions whose top 5 are those of float32: as a set and in order. A kind qualifies (issue 32)
when at least ``--agree`` (0.99) of the questions keep float32's top 5 as a set.

Over a slice of the book rather than the whole of it: more passages put more of them near each question's fifth
score, so agreement over the whole book can only be expected lower than here; a kind that fails on the slice fails.

    OMP_NUM_THREADS=2 PYTHONPATH=. .venv/bin/python bench/encode_agreement.py [--source DIR] [--passages 2000]
        [--data-dir ../shared/data] [--st-batch-size 16] [--bf16] [--bf32] [--no-compile] [--book-passages 666158]

Prints the CPU, a table (passages/s, the hours the whole book would take at that rate, agreement) and ends with one
JSON line: ``passages_per_s``, ``top5_set_agreement``, ``top5_order_agreement``, ``min_cosine_to_fp32``,
``speedup_vs_sentence_transformers`` per kind, and ``fastest_qualifying``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from _common import nq_split, print_header, quiet  # noqa: E402
from build_throughput import can_compile, short  # noqa: E402

WIKI_PASSAGES = 666_158  # what `openbook kb build ../shared/data/wikipedia-2015-core` reads (docs/benchmarks.md)


def top5(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Each query's 5 best rows by inner product, best first, ties by row (as FAISS's flat index)."""
    return np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :5]


def agreement(ours: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """(share of rows with the same 5 as a set, share with the same 5 in the same order)."""
    same_set = np.mean([set(a) == set(b) for a, b in zip(ours, reference)])
    same_order = np.mean([list(a) == list(b) for a, b in zip(ours, reference)])
    return float(same_set), float(same_order)


@contextlib.contextmanager
def matmul_precision(precision: str | None):
    """oneDNN's float32 matrix products in ``precision`` ("bf16": bfloat16-rounded inputs) within the block;
    None changes nothing."""
    import torch

    if precision is None:
        yield
        return
    matmul = torch.backends.mkldnn.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = precision
    try:
        yield
    finally:
        matmul.fp32_precision = before


def main() -> None:
    repo = HERE.parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", default=str(repo.parent / "shared/data/wikipedia-2015-core"))
    p.add_argument("--data-dir", default=str(repo.parent / "shared/data"))
    p.add_argument("--passages", type=int, default=2000, help="passages of the source to encode")
    p.add_argument("--st-batch-size", type=int, default=16, help="sentence-transformers' batch size")
    p.add_argument("--bf16", action="store_true", help="time bfloat16 even where the CPU only emulates it")
    p.add_argument("--bf32", action="store_true", help="also float32 with bfloat16 matrix products (oneDNN)")
    p.add_argument("--no-compile", action="store_true", help="skip the compiled kinds")
    p.add_argument("--agree", type=float, default=0.99, help="share of questions that must keep float32's top 5")
    p.add_argument("--book-passages", type=int, default=WIKI_PASSAGES, help="passages of the whole book")
    args = p.parse_args()
    quiet()
    print_header()

    import torch
    from sentence_transformers import SentenceTransformer

    from openbook.corpus import iter_source_passages
    from openbook.models import load_encoder
    from openbook.models.loading import packaged_minilm_path
    from openbook.models.precision import bf16_hardware, int8_engine

    passages = [s.passage for s in itertools.islice(iter_source_passages([args.source]), args.passages)]
    encoder = load_encoder("default")
    texts = [f"{p.title}. {p.text}" if p.title else p.text for p in passages]  # openbook's "joined" format
    st = SentenceTransformer(str(packaged_minilm_path()), device="cpu")
    st.max_seq_length = encoder.max_length
    tokens = [len(f["input_ids"]) for f in encoder.tokenize_passages(passages)]
    print(f"passages:      {len(passages)} of {args.source} (mean {np.mean(tokens):.1f} tokens, max {max(tokens)})")

    dtypes = ["float32", "int8"] if int8_engine() else ["float32"]
    if bf16_hardware() or args.bf16:
        dtypes.append("bfloat16")
    # (name, dtype, compiled, oneDNN's float32 product precision: None leaves PyTorch's own)
    kinds = [(short(d, False), d, False, None) for d in dtypes]
    kinds += [(short(d, True), d, True, None) for d in dtypes if not args.no_compile and can_compile(d)]
    kinds += [("bf32", "float32", False, "bf16")] if args.bf32 else []
    vectors, rate, warm_up = {}, {}, {}
    for name, dtype, compiled, precision in kinds:
        with matmul_precision(precision):
            start = time.perf_counter()  # int8's quantisation, a compiled kind's compile: timed apart
            encoder.encode_passages(passages[:64], dtype=dtype, compile=compiled)
            warm_up[name] = time.perf_counter() - start
            start = time.perf_counter()
            vectors[name] = encoder.encode_passages(passages, dtype=dtype, compile=compiled)
            rate[name] = len(passages) / (time.perf_counter() - start)
        print(f"  {name:<16}{rate[name]:8.1f} passages/s (warm-up {warm_up[name]:.1f} s)", flush=True)
    start = time.perf_counter()
    vectors["st"] = st.encode(texts, batch_size=args.st_batch_size, convert_to_numpy=True,
                              normalize_embeddings=True, show_progress_bar=False)
    rate["st"] = len(passages) / (time.perf_counter() - start)

    questions = [r["question"] for r in nq_split(Path(args.data_dir))[1]]
    queries = encoder.encode_queries(questions, dtype="float32")
    reference = top5(queries, vectors["fp32"])
    result = {"passages": len(passages), "questions": len(questions), "threads": torch.get_num_threads(),
              "bf16_hardware": bf16_hardware(), "st_batch_size": args.st_batch_size, "agree": args.agree,
              "passages_per_s": {}, "book_hours": {}, "top5_set_agreement": {}, "top5_order_agreement": {},
              "min_cosine_to_fp32": {}, "speedup_vs_sentence_transformers": {}, "warm_up_s": {}}
    print(f"\n{'kind':<22}{'passages/s':>11}{'book hours':>11}{'vs s-t':>8}{'top-5 set':>11}{'in order':>10}"
          f"{'min cos':>9}")
    for name, found in vectors.items():
        same_set, same_order = agreement(top5(queries, found), reference)
        figures = {"passages_per_s": round(rate[name], 1), "book_hours": round(args.book_passages / rate[name] / 3600, 2),
                   "top5_set_agreement": round(same_set, 4), "top5_order_agreement": round(same_order, 4),
                   "min_cosine_to_fp32": round(float(np.min(np.sum(found * vectors["fp32"], axis=1))), 5),
                   "speedup_vs_sentence_transformers": round(rate[name] / rate["st"], 3)}
        for key, value in figures.items():
            result[key][name] = value
        label = "sentence-transformers" if name == "st" else f"openbook {name}"
        print(f"{label:<22}{figures['passages_per_s']:>11}{figures['book_hours']:>11}"
              f"{figures['speedup_vs_sentence_transformers']:>8}{same_set:>11.4f}{same_order:>10.4f}"
              f"{figures['min_cosine_to_fp32']:>9}")
    result["warm_up_s"] = {name: round(seconds, 1) for name, seconds in warm_up.items()}
    qualifying = [name for name in rate if name != "st" and result["top5_set_agreement"][name] >= args.agree]
    result["fastest_qualifying"] = max(qualifying, key=rate.__getitem__)
    print(f"top 5 over {len(passages)} passages for {len(questions)} held-out NQ questions; fastest keeping float32's "
          f"top 5 for >= {args.agree:.0%} of them: {result['fastest_qualifying']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
