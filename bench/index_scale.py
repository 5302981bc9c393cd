"""Dense index kinds at scale: build time, size, recall@10 and latency of flat, HNSW and IVF-PQ (and HNSW-SQ8).

Builds each index kind of ``openbook.index.dense`` over N synthetic vectors (default 1,000,000 of
dimension 768, like DPR's passage vectors) and reports, per kind (the first line printed is the command):

* build time (train + add) and bytes per vector (saved index file size / N);
* recall@10 against exact (flat) search: |approximate top-10 ∩ exact top-10| / 10, averaged over the
  queries; and the largest difference between returned scores and the exact inner products of the
  returned ids (checks the HNSW inner-product-to-L2 transform is undone correctly);
* latency per query at batch size 1 (average over ``--latency-queries`` single queries) and at batch 64
  (average over up to 10 batches);
* the speedup of HNSW over flat at batch 1;
* HNSW's ef_search is chosen (``--hnsw-ef-search auto``) as the smallest of 16, 32, ..., 8192 reaching
  recall@10 0.95 on 200 separate TUNING queries (another seed), then measured on the evaluation queries;
  the graph itself is built with M=32 (openbook's default) and ef_construction=80 (openbook's default,
  200, builds ~2.5x slower: over 40 minutes for 1M x 768 on 2 busy cores);
* IVF-PQ uses openbook's defaults: nlist = 4·√N, m = dim/12 = 64 sub-quantizers of 8 bits (64 B code
  + 8 B id per vector), OPQ rotation, nprobe = nlist/16;
* a small sweep of the search-time knob (HNSW ef_search, IVF-PQ nprobe);
* for the compressed kinds (IVF-PQ, HNSW-SQ8), also recall and latency with exact re-ranking
  (``DenseIndex.rerank_with``): the top 100 candidates re-scored from the float vectors, which a
  knowledge base keeps anyway (embeddings.npy, memory-mapped) so this costs no index bytes;

then projects memory and disk for the RAG paper's 21,015,300 Wikipedia passages, prints that as a
Markdown table, and ends with ONE JSON line of the headline figures. In it ``ivfpq_recall_at_10`` is the
IVF-PQ index ALONE (PQ-approximate scores); ``ivfpq_rerank_recall_at_10`` is the same search with the
top 100 candidates re-scored exactly from the float vectors. ``hnsw_speedup_vs_flat`` is the ratio of
batch-1 latencies.

By default the data are CLUSTERED SYNTHETIC (described next). With ``--kb DIR`` they are a knowledge base's
passage vectors (its embeddings.npy, memory-mapped) and the queries real questions encoded with its own query
encoder: ``--questions FILE`` or NQ-open's held-out fifth, the ef_search tuning questions kept apart from the
evaluation ones (bench/_index_vectors.py); ``--n`` and ``--dim`` are then the book's. Either way the output
also names the index kind ``openbook kb build`` chooses for N passages without ``--index``, with its measured
recall@10, latency and size (``kb_build_default_*`` in the JSON line).

The synthetic data (written before real vectors of this size existed offline): 1,000
Gaussian cluster centres c ~ N(0, I); each point is c + L·z + e, where z ~ N(0, I_64) drives a
64-dimensional latent subspace shared by all clusters with decaying variances (∝ 1/(i+1)), and e is
small isotropic noise; within-cluster variance is 0.5 per dimension, 90% of it in the latent subspace
(real sentence embeddings have a low intrinsic dimension; isotropic 768-d noise would be an unrealistic
worst case). Queries are drawn the same way from the same centres, with a different seed, so they are
not in the database. Vectors are NOT L2-normalised: DPR's d(z) are not, and un-normalised vectors are
what makes maximum inner product search differ from nearest-neighbour search and exercises the
inner-product-to-L2 transform (norms here range over about 0.85-1.5x their mean of sqrt(1.5·dim)).

Memory: the N×dim float32 data (3.1 GB at the defaults) is held once; each index is built, measured,
saved to ``--workdir`` (a temporary directory by default) and freed before the next; the peak is about
6.5 GB. Time at the defaults on 2 busy cores (docs/benchmarks.md, "Index scale"): about 15 minutes for the HNSW
graph and 40 for IVF-PQ (most of it OPQ + k-means training on 100,000 vectors).

Usage:  PYTHONPATH=. python bench/index_scale.py [--n 1000000] [--dim 768] [--queries 1000] [--kinds flat,hnsw,ivfpq]
Smoke:  PYTHONPATH=. python bench/index_scale.py --n 20000 --dim 64 --queries 100
A book: OMP_NUM_THREADS=1 PYTHONPATH=. python bench/index_scale.py --kb DIR [--questions FILE | --data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
from _index_report import HNSW_TARGET, PAPER_PASSAGES, K, check_targets, markdown_table, projection
from _index_vectors import Vectors, from_kb, kb_build_default, synthetic

from openbook.errors import OpenbookError
from openbook.index.dense import index_class

BATCH = 64
RERANKED = ("ivfpq", "hnsw_sq8")  # also measured with DenseIndex.rerank_with(float vectors)
RERANK_FACTOR = 10


# -- measuring --------------------------------------------------------------------------------------


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean over queries of |found ∩ truth| / k."""
    hits = [len(np.intersect1d(f[f >= 0], t)) for f, t in zip(found, truth)]
    return float(np.mean(hits)) / truth.shape[1]


def score_error(scores: np.ndarray, ids: np.ndarray, queries: np.ndarray, data: np.ndarray) -> float:
    """Largest |returned score - exact inner product of the returned id| over found results."""
    worst = 0.0
    for q, row_scores, row_ids in zip(queries, scores, ids):
        ok = row_ids >= 0
        exact = data[row_ids[ok]].astype(np.float64) @ q.astype(np.float64)
        worst = max(worst, float(np.abs(exact - row_scores[ok]).max(initial=0.0)))
    return worst


def latency(index, queries: np.ndarray, single: int) -> tuple[float, float]:
    """(ms per query at batch 1 over ``single`` queries, ms per query at batch 64 over up to 10 batches)."""
    index.search(queries[:2], K)  # warm up
    start = time.perf_counter()
    for q in queries[:single]:
        index.search(q[None, :], K)
    batch1 = (time.perf_counter() - start) / min(single, len(queries))
    batched = queries[: BATCH * 10]
    start = time.perf_counter()
    for begin in range(0, len(batched), BATCH):
        index.search(batched[begin : begin + BATCH], K)
    batch64 = (time.perf_counter() - start) / len(batched)
    return batch1 * 1e3, batch64 * 1e3


def rss_gb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9


def log(message: str) -> None:
    print(message, flush=True)


# -- per kind ---------------------------------------------------------------------------------------


def tune(index, knob: str, values: list[int], target: float, queries: np.ndarray, truth: np.ndarray) -> dict:
    """Set ``knob`` to the smallest of ``values`` whose recall@10 on the TUNING queries reaches ``target``
    (else to the value with the best recall); the evaluation queries are not used for this."""
    tried = []
    for value in values:
        setattr(index, knob, value)
        tried.append((value, recall_at_k(index.search(queries, K)[1], truth)))
        if tried[-1][1] >= target:
            break
    value, tuning_recall = next(((v, r) for v, r in tried if r >= target), max(tried, key=lambda item: item[1]))
    setattr(index, knob, value)
    log(f"  tuned {knob} on {len(queries)} separate tuning queries: " + ", ".join(f"{v}: {r:.4f}" for v, r in tried)
        + f" -> {knob}={value}")
    return {"knob": knob, "value": value, "target": target, "tuning_recall_at_10": tuning_recall}


def bench_kind(name, params, data, queries, truth, workdir, latency_queries, sweep, tuning=None, tuning_queries=None):
    """Build, save, measure one kind; return its row of results (index freed on return).

    ``tuning``: None, or ``(knob, values, target, tuning queries, their exact top-10)`` for :func:`tune`.
    For flat (``truth`` None) the exact top-10 of ``queries`` and of ``tuning_queries`` are returned in
    the row as ``truth`` and ``tuning_truth``.
    """
    n, dim = data.shape
    log(f"\n== {name} {params} ==")
    index = index_class(name).create(dim, **params)
    start = time.perf_counter()
    index.train(data)
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    index.add(data)
    add_s = time.perf_counter() - start
    log(f"  built in {train_s + add_s:.1f} s (train {train_s:.1f} s, add {add_s:.1f} s); RSS {rss_gb():.1f} GB")
    path = workdir / f"{name}.faiss"
    start = time.perf_counter()
    index.save(path)
    file_bytes = path.stat().st_size
    log(f"  saved {file_bytes / 1e9:.3f} GB in {time.perf_counter() - start:.1f} s: {file_bytes / n:.1f} bytes/vector")

    tuned = tune(index, *tuning) if tuning is not None else None
    start = time.perf_counter()
    scores, ids = index.search(queries, K)
    search_all_s = time.perf_counter() - start
    row = {
        "kind": name,
        "params": index.params,
        "build_s": train_s + add_s,
        "train_s": train_s,
        "add_s": add_s,
        "file_bytes": file_bytes,
        "bytes_per_vector": file_bytes / n,
        "recall_at_10": 1.0 if truth is None else recall_at_k(ids, truth),
        "score_max_abs_err": score_error(scores, ids, queries, data),
        "search_all_queries_s": search_all_s,
    }
    if tuned is not None:
        row["tuned"] = tuned
    if truth is None:  # flat: the ground truth itself
        row["truth"] = ids
        row["tuning_truth"] = index.search(tuning_queries, K)[1]
    row["latency_b1_ms"], row["latency_b64_ms"] = latency(index, queries, latency_queries)
    log(
        f"  recall@10 {row['recall_at_10']:.4f}; max |score - exact IP| {row['score_max_abs_err']:.3g}; "
        f"latency {row['latency_b1_ms']:.3f} ms/query at batch 1, {row['latency_b64_ms']:.3f} ms/query at batch 64"
    )
    if sweep and truth is not None:
        knob, values = sweep
        row["sweep"] = []
        for value in values:
            setattr(index, knob, value)
            _, found = index.search(queries, K)
            b1, b64 = latency(index, queries, min(latency_queries, 100))
            point = {knob: value, "recall_at_10": recall_at_k(found, truth), "latency_b1_ms": b1, "latency_b64_ms": b64}
            row["sweep"].append(point)
            log(f"    {knob}={value:<4d} recall@10 {point['recall_at_10']:.4f}  {b1:.3f} ms (batch 1)  {b64:.3f} ms (batch 64)")
        setattr(index, knob, row["params"][knob])
    if name in RERANKED and truth is not None:
        index.rerank_with(data, factor=RERANK_FACTOR)
        scores, found = index.search(queries, K)
        b1, b64 = latency(index, queries, min(latency_queries, 100))
        row["rerank"] = {
            "factor": RERANK_FACTOR,
            "recall_at_10": recall_at_k(found, truth),
            "score_max_abs_err": score_error(scores, found, queries, data),
            "latency_b1_ms": b1,
            "latency_b64_ms": b64,
        }
        log(
            f"  + exact re-ranking of the top {RERANK_FACTOR * K} from the float vectors: recall@10 "
            f"{row['rerank']['recall_at_10']:.4f}, {b1:.3f} ms (batch 1), {b64:.3f} ms (batch 64)"
        )
        index.rerank_with(None)
    del index
    gc.collect()
    path.unlink()
    return row


# -- main -------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", type=Path, default=None,
                        help="measure on this knowledge base's passage vectors and real questions (bench/_index_vectors.py) "
                        "instead of synthetic vectors")
    parser.add_argument("--questions", type=Path, default=None,
                        help="with --kb: JSON Lines {question}, split by --seed into tuning and evaluation questions "
                        "(default: NQ-open's held-out fifth in --data-dir)")
    parser.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data",
                        help="with --kb and no --questions: where nq-open-oracle.dev-split.jsonl.gz is")
    parser.add_argument("--seed", type=int, default=0, help="with --kb: the tuning / evaluation split's seed")
    parser.add_argument("--n", type=int, default=1_000_000, help="synthetic database vectors")
    parser.add_argument("--dim", type=int, default=768, help="synthetic vectors' dimension")
    parser.add_argument("--queries", type=int, default=1000, help="evaluation queries (with --kb: at most this many)")
    parser.add_argument("--latency-queries", type=int, default=200, help="single queries timed at batch 1")
    parser.add_argument("--kinds", default="flat,hnsw,ivfpq",
                        help="comma-separated index kinds (flat always runs first); hnsw_sq8 is also available")
    parser.add_argument("--hnsw-M", type=int, default=32, help="HNSW graph degree (openbook's default is 32)")
    parser.add_argument("--hnsw-ef-construction", type=int, default=80,
                        help="HNSW build candidate list (openbook's default is 200; 80 keeps a 1M x 768 build on "
                        "2 cores to ~20-30 minutes)")
    parser.add_argument("--hnsw-ef-max", type=int, default=8192, help="largest ef_search tuned / swept")
    parser.add_argument("--hnsw-ef-search", default="auto",
                        help="HNSW search candidate list, or 'auto': the smallest of 16, 32, .. --hnsw-ef-max reaching recall@10 "
                        "0.95 on --tuning-queries separate queries")
    parser.add_argument("--tuning-queries", type=int, default=200, help="queries used only for 'auto' tuning (with --kb --questions: at most a third of the questions)")
    parser.add_argument("--no-sweep", action="store_true", help="skip the ef_search / nprobe sweeps")
    parser.add_argument("--workdir", type=Path, default=None, help="where index files go (default: a temp dir)")
    parser.add_argument("--ivfpq-no-opq", action="store_true", help="IVF-PQ without its OPQ rotation")
    parser.add_argument("--ivfpq-m", type=int, default=None, help="IVF-PQ sub-quantizers (default: openbook's)")
    parser.add_argument("--ivfpq-nprobe", type=int, default=None, help="IVF-PQ nprobe (default: openbook's)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    if kinds[0] != "flat":
        kinds.insert(0, "flat")  # the exact ground truth
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="openbook-index-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)

    log(f"command: PYTHONPATH=. python {shlex.join(sys.argv)}")
    log(f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} OpenMP threads, {os.cpu_count()} CPUs "
        f"(shared machine: latencies are indicative)")
    start = time.perf_counter()
    if args.kb is None:
        vectors = synthetic(args.n, args.dim, args.queries, args.tuning_queries)
    else:
        try:
            vectors = from_kb(args.kb, args.questions, args.data_dir, args.queries, args.tuning_queries, args.seed)
        except (OSError, ValueError, OpenbookError) as exc:  # a wrong path or a malformed question file
            print(f"index_scale.py: error: {exc}", file=sys.stderr)
            return 2
    data, queries, tuning_queries = vectors.data, vectors.queries, vectors.tuning_queries
    n, dim = data.shape
    log(f"data: {vectors.description}")
    norms = np.linalg.norm(data[: min(n, 100_000)], axis=1)
    log(f"{'generated' if args.kb is None else 'loaded'} {n:,} x {dim} database vectors ({data.nbytes / 1e9:.2f} GB), "
        f"{len(queries)} queries and {len(tuning_queries)} tuning queries in {time.perf_counter() - start:.1f} s; "
        f"norms {norms.min():.1f}..{norms.max():.1f} (mean {norms.mean():.1f})")

    ivfpq_params = {"opq": not args.ivfpq_no_opq}
    if args.ivfpq_m is not None:
        ivfpq_params["m"] = args.ivfpq_m
    if args.ivfpq_nprobe is not None:
        ivfpq_params["nprobe"] = args.ivfpq_nprobe
    hnsw_params = {"M": args.hnsw_M, "ef_construction": args.hnsw_ef_construction}
    ef_values = [16 * 2**i for i in range(20) if 16 * 2**i <= args.hnsw_ef_max]
    auto_ef = args.hnsw_ef_search == "auto"
    if not auto_ef:
        hnsw_params["ef_search"] = int(args.hnsw_ef_search)
    settings = {
        "flat": ({}, None),
        "hnsw": (hnsw_params, ("ef_search", ef_values)),
        "hnsw_sq8": (hnsw_params, ("ef_search", ef_values)),
        "ivfpq": (ivfpq_params, ("nprobe", [16, 32, 64, 128, 256, 512])),
    }
    rows, truth, tuning_truth = [], None, None
    try:
        for kind in kinds:
            params, sweep = settings[kind]
            tuning = None
            if kind.startswith("hnsw") and auto_ef:
                tuning = ("ef_search", ef_values, HNSW_TARGET["recall_at_10"], tuning_queries, tuning_truth)
            row = bench_kind(kind, params, data, queries, truth, workdir, args.latency_queries,
                             None if args.no_sweep else sweep, tuning, tuning_queries)
            if kind == "flat":
                truth = row.pop("truth")
                tuning_truth = row.pop("tuning_truth")
            rows.append(row)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    report(rows, vectors)
    return 0


def kb_default(by_kind: dict[str, dict], n: int, dim: int) -> dict:
    """The index kind ``openbook kb build`` chooses for ``n`` passages of ``dim``, with its figures measured here."""
    kind, rule = kb_build_default(n, dim)
    out = {"kb_build_default_index": kind, "kb_build_default_rule": rule}
    row = by_kind.get(kind)
    if row is None:
        out["line"] = f"openbook kb build's default index for {n:,} passages: {kind} ({rule}); not measured here (add it to --kinds)"
        return out
    out |= {"kb_build_default_recall_at_10": round(row["recall_at_10"], 4),
            "kb_build_default_latency_b1_ms": round(row["latency_b1_ms"], 4),
            "kb_build_default_bytes_per_vector": round(row["bytes_per_vector"], 2)}
    out["line"] = (f"openbook kb build's default index for {n:,} passages: {kind} ({rule}): recall@10 "
                   f"{row['recall_at_10']:.4f}, {row['latency_b1_ms']:.3f} ms/query at batch 1, "
                   f"{row['bytes_per_vector']:.1f} bytes/vector")
    return out


def report(rows: list[dict], vectors: Vectors) -> None:
    """Print the results, the targets, the kind `kb build` would choose, the projection and the JSON line."""
    n, dim = vectors.data.shape
    by_kind = {row["kind"]: row for row in rows}
    flat = by_kind["flat"]

    log("\n## Results\n")
    log(f"N = {n:,}, dim = {dim}, {len(vectors.queries)} queries, k = {K}; data: {vectors.name}, "
        f"{'normalised' if vectors.normalised else 'un-normalised'}\n")
    log("| index | params | build (train + add) | bytes/vector | recall@10 | ms/query batch 1 | ms/query batch 64 | speedup vs flat (batch 1) |")
    log("|---|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        speedup = flat["latency_b1_ms"] / row["latency_b1_ms"]
        log(f"| {row['kind']} | {json.dumps(row['params'])} | {row['build_s']:.1f} s ({row['train_s']:.1f} + {row['add_s']:.1f}) "
            f"| {row['bytes_per_vector']:.1f} | {row['recall_at_10']:.4f} | {row['latency_b1_ms']:.3f} | "
            f"{row['latency_b64_ms']:.3f} | {speedup:.1f}x |")

    default = kb_default(by_kind, n, dim)
    log(f"\n{default.pop('line')}")

    checked = check_targets(by_kind)
    if checked:
        log("\n## Targets\n")
        for line in checked.pop("lines"):
            log(f"  - {line.strip()}" if line.startswith(" ") else f"- {line}")

    projected = projection(rows, n, dim)
    log(f"\n## Projected size for the RAG paper's {PAPER_PASSAGES:,} passages (per-vector bytes measured above)\n")
    log(markdown_table(projected, dim))
    log("")

    summary = {  # the headline figures first
        key: None for key in ("hnsw_recall_at_10", "hnsw_speedup_vs_flat", "ivfpq_bytes_per_vector",
                              "ivfpq_recall_at_10", "flat_bytes_per_vector", "hnsw_bytes_per_vector")
        if key.split("_")[0] in by_kind
    }
    summary |= {
        "n": n,
        "dim": dim,
        "queries": len(vectors.queries),
        "data": vectors.name,
        "normalised": vectors.normalised,
        **vectors.extra,
        **default,
    }
    for row in rows:
        kind = row["kind"]
        summary[f"{kind}_params"] = row["params"]
        summary[f"{kind}_build_s"] = round(row["build_s"], 1)
        if "tuned" in row:
            summary[f"{kind}_tuned_on_separate_queries"] = {
                key: round(value, 4) if isinstance(value, float) else value for key, value in row["tuned"].items()
            }
        summary[f"{kind}_bytes_per_vector"] = round(row["bytes_per_vector"], 2)
        summary[f"{kind}_recall_at_10"] = round(row["recall_at_10"], 4)
        summary[f"{kind}_latency_b1_ms"] = round(row["latency_b1_ms"], 4)
        summary[f"{kind}_latency_b64_ms"] = round(row["latency_b64_ms"], 4)
        summary[f"{kind}_score_max_abs_err"] = float(f"{row['score_max_abs_err']:.3g}")
        if kind != "flat":
            summary[f"{kind}_speedup_vs_flat"] = round(flat["latency_b1_ms"] / row["latency_b1_ms"], 1)
        if "rerank" in row:
            for key, value in row["rerank"].items():
                summary[f"{kind}_rerank_{key}"] = round(value, 4) if isinstance(value, float) else value
        if "sweep" in row:
            summary[f"{kind}_sweep"] = [{key: round(value, 4) if isinstance(value, float) else value
                                         for key, value in point.items()} for point in row["sweep"]]
    summary.update(checked)
    for item in projected:
        summary[f"{item['kind']}_paper_scale_disk_gb"] = round(item["disk_bytes"] / 1e9, 1)
        summary[f"{item['kind']}_paper_scale_ram_gb"] = round(item["ram_bytes"] / 1e9, 1)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    sys.exit(main())
