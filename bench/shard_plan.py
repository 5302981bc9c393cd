#!/usr/bin/env python
"""Sharding a knowledge base given on the command line, measured, and a plan for the paper's 21M passages from it.

The knowledge base at ``--kb`` is split (``openbook kb shard``'s code, into a temporary folder) into S = 1, 2, 3
shards, each split served by local Ray actors, one per shard; on its real vectors this measures

* memory: the resident set (VmRSS, Linux /proc) of each shard actor's process after the timed searches and a
  passage lookup: the shard's index (memory-mapped, all of it read by a flat search) plus the process's own
  overhead (Python, Ray, FAISS), taken as RSS minus the shard's index bytes;
* query time at k=5 and k=100: the median over questions of one question per search and over batches of 32,
  for the unsharded knowledge base in this process and for each split on Ray. The questions are the held-out
  fifth of NQ-open (``--data``, as scripts/split_qa_data.py splits it), encoded by the knowledge base's encoder;
* exactness: every split returns the unsharded rows in the same order, scores within float32 rounding.

The plan for ``--passages`` (default: the paper's 21,015,324) puts one shard on each worker and fills a worker's
``--worker-memory-gb`` (1 GB = 1e9 bytes) with the measured overhead plus index bytes per passage (the index
file over its rows); it gives shards, workers, memory per worker, build hours at ``--build-rate`` passages/s per
worker (default: the rate the knowledge base's build record holds, if any) on ``--build-workers`` (default: one
per shard), and the expected latency. A flat search reads every row of its shard, so its time is linear in the
rows per shard: t = a + b x rows, with b the unsharded search time in this process over its rows and a the
fixed cost of the fan-out to the actors and the merge (the median over S of the measured time minus b x rows
per shard); the shards search in parallel, one per worker. For other index kinds time is not linear in rows
and the latency line is only an upper bound.

    PYTHONPATH=. .venv/bin/python bench/shard_plan.py --kb KB [--build-rate P] [--worker-memory-gb 24]

Prints the command, versions and CPU (bench/_common.py), the measurements and the plan, and ends with one JSON
line of every figure. Docs: docs/scaling.md ("The paper's 21M passages").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from openbook.commands import finite_float, positive_int

HERE = Path(__file__).resolve().parent
PAPER_PASSAGES = 21_015_324
SHARDS = (1, 2, 3)
KS = (5, 100)
BATCH = 32
GB = 1e9


def fail(message: str) -> None:
    """Stop on bad input: one line naming it, exit status 2 (as argparse does)."""
    print(f"shard_plan.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def positive_float(text: str) -> float:
    """argparse type: a finite number above 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text!r}")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kb", required=True, metavar="DIR", help="a built (unsharded) knowledge base")
    p.add_argument("--build-rate", type=positive_float, default=None, metavar="PASSAGES_PER_S",
                   help="passages one worker builds per second (default: from the knowledge base's build record)")
    p.add_argument("--worker-memory-gb", type=positive_float, default=24.0, metavar="GB",
                   help="memory one worker gives its shard (default: %(default)s)")
    p.add_argument("--build-workers", type=positive_int, default=None, metavar="W",
                   help="workers that build the index (default: one per shard)")
    p.add_argument("--passages", type=positive_int, default=PAPER_PASSAGES, metavar="N",
                   help="passages to plan for (default: the paper's %(default)s)")
    p.add_argument("--questions", type=positive_int, default=128, metavar="N",
                   help="NQ questions timed (default: %(default)s)")
    p.add_argument("--data", default=str(HERE.parents[1] / "shared" / "data"), metavar="DIR",
                   help="the folder of nq-open-oracle.dev-split.jsonl.gz (default: ../shared/data)")
    p.add_argument("--workdir", default=None, metavar="DIR", help="where the splits go (default: $TMPDIR)")
    return p.parse_args(argv)


def build_rate(manifest: dict) -> float | None:
    """Passages encoded per second by the build, as `kb build` records it (``build.seconds``), if it does."""
    rate = ((manifest.get("build") or {}).get("seconds") or {}).get("encode_passages_per_s")
    return float(rate) if isinstance(rate, (int, float)) and rate > 0 else None


def questions(kb_path: Path, data: Path, count: int) -> np.ndarray:
    """The first ``count`` held-out NQ questions, encoded by the encoder ``openbook retrieve --kb`` loads for it."""
    sys.path.insert(0, str(HERE))
    from _common import nq_split

    import openbook.commands.kb as kb_commands
    from openbook.models.knowledge import encoder_name

    held_out = nq_split(data)[1][:count]
    encoder = kb_commands.load_encoder(encoder_name(None, kb_path))
    return np.asarray(encoder.encode_queries([r["question"] for r in held_out]), dtype=np.float32)


def median_ms(search, queries: np.ndarray, k: int, batch: int) -> float:
    """Median milliseconds of one search of ``batch`` questions (after one untimed search)."""
    batch = min(batch, len(queries))
    search(queries[:batch], k)
    times = []
    for start in range(0, len(queries) - batch + 1, batch):
        t = time.perf_counter()
        search(queries[start:start + batch], k)
        times.append(time.perf_counter() - t)
    return 1000.0 * statistics.median(times)


def timings(search, queries: np.ndarray, rows: int) -> dict[str, float]:
    return {f"k{k}_b{batch}": round(median_ms(search, queries, min(k, rows), batch), 3)
            for k in KS for batch in (1, BATCH)}


def same_topk(whole, sharded, queries: np.ndarray, rows: int) -> bool:
    bound = 2 * queries.shape[1] * np.finfo(np.float32).eps * float(np.linalg.norm(queries, axis=1).max())
    for k in KS:
        scores, ids = whole.search(queries, min(k, rows))
        got_scores, got_ids = sharded.search(queries, min(k, rows))
        if not (np.array_equal(ids, got_ids) and np.abs(scores - got_scores).max() <= bound):
            return False
    return True


def measure(kb_path: Path, queries: np.ndarray, workdir: str | None = None) -> dict:
    """Time, memory and exactness of the knowledge base at ``kb_path`` split into S = 1, 2, 3 (module docs)."""
    from openbook.index import KnowledgeBase, ShardedKnowledgeBase
    from openbook.index.sharded import shard_knowledge_base

    whole = KnowledgeBase.load(kb_path)
    rows = len(whole)
    out = {"rows": rows, "dim": whole.dim, "index_type": whole.manifest["index"]["type"],
           "dtype": whole.manifest["dtype"], "index_bytes": whole.manifest["files"]["index.faiss"]["bytes"],
           "questions": len(queries), "batch": BATCH, "unsharded_ms": timings(whole.search, queries, rows),
           "ray_ms": {}, "shard_rows": {}, "shard_index_bytes": {}, "shard_rss_bytes": {}, "exact": True}
    root = Path(tempfile.mkdtemp(prefix="openbook-shard-plan-", dir=workdir))
    try:
        for s in SHARDS:
            path = shard_knowledge_base(kb_path, s, root / f"shards-{s}")
            sharded = ShardedKnowledgeBase.load(path, ray_address="local")
            try:
                out["exact"] &= same_topk(whole, sharded, queries, rows)
                out["ray_ms"][str(s)] = timings(sharded.search, queries, rows)
                _, found = sharded.search(queries, min(5, rows))
                sharded.passages(found.ravel())  # what answering reads too
                memory = sharded._gather("memory", [()] * s)
            finally:
                sharded.close()
            manifests = [KnowledgeBase.load(path / f"shard-{i:03d}").manifest for i in range(s)]
            out["shard_rows"][str(s)] = [m["num_rows"] for m in manifests]
            out["shard_index_bytes"][str(s)] = [m["files"]["index.faiss"]["bytes"] for m in manifests]
            out["shard_rss_bytes"][str(s)] = [m["rss_bytes"] for m in memory]
            shutil.rmtree(path)
    finally:
        whole.close()
        shutil.rmtree(root, ignore_errors=True)
    return out


def plan(m: dict, passages: int, worker_memory_gb: float, rate: float, build_workers: int | None) -> dict:
    """The plan for ``passages`` from the measurements ``m`` (module docs), with the arithmetic as text."""
    per_passage = m["index_bytes"] / m["rows"]
    overheads = [rss - index for s in m["shard_rss_bytes"] for rss, index in
                 zip(m["shard_rss_bytes"][s], m["shard_index_bytes"][s]) if rss is not None]
    overhead = statistics.median(overheads) if overheads else 0.0
    room = worker_memory_gb * GB - overhead
    if room <= per_passage:
        fail(f"--worker-memory-gb {worker_memory_gb} leaves no room beside the measured overhead of "
             f"{overhead / GB:.2f} GB per shard process")
    shards = math.ceil(passages / math.floor(room / per_passage))
    rows_per_shard = math.ceil(passages / shards)
    workers = build_workers or shards
    hours = passages / (rate * workers) / 3600
    lines = [f"bytes per passage = index bytes / rows = {m['index_bytes']:,} / {m['rows']:,} = {per_passage:,.1f}",
             f"overhead per shard process = median(RSS - index bytes) = {overhead / GB:.3f} GB",
             f"shards = ceil({passages:,} / floor(({worker_memory_gb:g} GB - overhead) / {per_passage:,.1f} B)) = {shards}"
             f" (one per worker: {shards} workers, {rows_per_shard:,} passages each)",
             f"memory per worker = {rows_per_shard:,} x {per_passage:,.1f} B + overhead = "
             f"{(rows_per_shard * per_passage + overhead) / GB:.2f} GB",
             f"build = {passages:,} / ({rate:,.1f} passages/s x {workers} workers) = {hours:,.1f} h"]
    latency = {}
    for key, local_ms in m["unsharded_ms"].items():
        per_row = local_ms / m["rows"]  # b: ms per row of a shard
        fixed = statistics.median(m["ray_ms"][str(s)][key] - per_row * max(m["shard_rows"][str(s)])
                                  for s in m["ray_ms"])  # a
        latency[key] = round(max(fixed, 0.0) + per_row * rows_per_shard, 1)
        lines.append(f"latency {key} = a + b x rows = {max(fixed, 0.0):.2f} ms + {per_row * 1e3:.4f} us x "
                     f"{rows_per_shard:,} = {latency[key]:,.1f} ms")
    return {"passages": passages, "worker_memory_gb": worker_memory_gb, "bytes_per_passage": round(per_passage, 1),
            "overhead_bytes": int(overhead), "shards": shards, "workers": shards, "rows_per_shard": rows_per_shard,
            "memory_per_worker_gb": round((rows_per_shard * per_passage + overhead) / GB, 2),
            "build_rate_passages_per_s": rate, "build_workers": workers, "build_hours": round(hours, 2),
            "latency_ms": latency, "arithmetic": lines}


def main(argv=None) -> None:
    args = parse_args(argv)
    sys.path.insert(0, str(HERE))
    from _common import cpu_description, print_header, quiet

    from openbook.errors import OpenbookError
    from openbook.index import KnowledgeBase, is_sharded

    quiet()
    kb_path = Path(args.kb)
    if is_sharded(kb_path):
        fail(f"--kb {kb_path} is sharded; give the unsharded knowledge base")
    try:
        kb = KnowledgeBase.load(kb_path)
    except OpenbookError as exc:
        fail(f"--kb {kb_path}: {exc}")
    rate, rate_from = (args.build_rate, "--build-rate") if args.build_rate else (build_rate(kb.manifest), "build record")
    if rate is None:
        fail(f"the build record of {kb_path} holds no build rate; give --build-rate")
    if len(kb) < max(SHARDS):
        fail(f"--kb {kb_path} has {len(kb)} passages; splitting needs {max(SHARDS)}")
    data = Path(args.data)
    if not (data / "nq-open-oracle.dev-split.jsonl.gz").is_file():
        fail(f"--data {data} holds no nq-open-oracle.dev-split.jsonl.gz")
    print_header()
    queries = questions(kb_path, data, args.questions)
    kb.close()
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=os.cpu_count(), object_store_memory=256 * 1024**2, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            figures = measure(kb_path, queries, args.workdir)
    finally:
        if started:
            ray.shutdown()
    figures["plan"] = plan(figures, args.passages, args.worker_memory_gb, rate, args.build_workers)
    figures.update({"kb": str(kb_path), "build_rate_from": rate_from, "cpu": cpu_description(),
                    "cpu_count": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2)})
    print(f"knowledge base: {kb_path} ({figures['rows']:,} passages, {figures['index_type']} index, "
          f"{figures['index_bytes']:,} index bytes); {figures['questions']} NQ questions")
    print(f"exact top k on every split: {figures['exact']}")
    print(f"unsharded, this process (ms): {figures['unsharded_ms']}")
    for s in SHARDS:
        rss = ", ".join(f"{b / 1e6:,.0f} MB" for b in figures["shard_rss_bytes"][str(s)] if b is not None)
        print(f"S={s} on Ray (ms): {figures['ray_ms'][str(s)]}; actor RSS: {rss or 'unknown'}")
    print(f"plan for {args.passages:,} passages at {args.worker_memory_gb:g} GB per worker "
          f"(build rate from the {rate_from}):")
    for line in figures["plan"]["arithmetic"]:
        print(f"  {line}")
    print("  (kK_bB: the top K for one search of B questions, in ms; the shards search in parallel, one per worker)")
    if figures["index_type"] != "flat":
        print(f"  a {figures['index_type']} index does not read every row: its time is not linear in rows, so the "
              "latency above is an upper bound")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
