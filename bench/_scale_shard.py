"""Sharded retrieval (issue 12, part b of bench/scale_out.py): latency and exactness of a Flat knowledge base
split into S = 1, 2, 4 shards, against the unsharded knowledge base, over synthetic unit 384-d vectors.

The vectors are drawn with a fixed seed (1,000,000 rows; ``--quick``: 20,000) and written as an ordinary
knowledge base with :meth:`KnowledgeBase.build`; ``openbook kb shard``'s code splits it. Each sharded
knowledge base searches a batch of ``QUERIES`` random queries for the top ``K``: in this process (shards
searched one after another), and with ``--ray`` on one local Ray actor per shard (2 CPUs). Exact means the
same row ids as the unsharded Flat index for every query and k (10 and 100) and scores equal within
float32 rounding of 384-term dot products. Latency is the median over ``REPEATS`` timed batches, in ms per
batch (``ms_per_query`` divides by the batch).

    PYTHONPATH=. .venv/bin/python bench/_scale_shard.py [--quick] [--ray] [--workdir DIR]

Ends with one JSON line (``sharded_topk_exact``, ``shard_latency_ms`` ...).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

DIM, QUERIES, K, REPEATS, SEED = 384, 64, 10, 5, 12
SHARDS = (1, 2, 4)
ROWS, QUICK_ROWS = 1_000_000, 20_000
CHUNK = 65_536


def synthetic_vectors(rows: int, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of the fixed synthetic corpus: unit float32 vectors (one seed per chunk)."""
    out = []
    for chunk in range(start // CHUNK, (stop - 1) // CHUNK + 1):
        rng = np.random.default_rng([SEED, chunk])
        block = rng.standard_normal((min(CHUNK, rows - chunk * CHUNK), DIM), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        lo, hi = max(start, chunk * CHUNK) - chunk * CHUNK, min(stop, (chunk + 1) * CHUNK) - chunk * CHUNK
        out.append(block[lo:hi])
    return np.concatenate(out)


def build_synthetic(path: Path, rows: int):
    from openbook.corpus import Passage
    from openbook.index import KnowledgeBase

    passages = (Passage(f"p{i}", "", f"synthetic passage {i}") for i in range(rows))

    def vectors(batch):
        first = int(batch[0].id[1:])
        return synthetic_vectors(rows, first, first + len(batch))

    info = {"name": "synthetic-unit-384", "pooling": "none", "normalize": True, "dim": DIM}
    return KnowledgeBase.build(passages, vectors, info, path, batch_size=CHUNK, progress=False)


def timed(search, queries: np.ndarray, k: int) -> float:
    search(queries, k)  # warm-up
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        search(queries, k)
        times.append(time.perf_counter() - t)
    return 1000.0 * statistics.median(times)


def same_topk(reference, other, queries: np.ndarray) -> bool:
    for k in (K, 100):
        scores, ids = reference.search(queries, k)
        got_scores, got_ids = other.search(queries, k)
        # float32 rounding of DIM-term dot products of unit vectors, whatever BLAS blocking each index uses
        bound = 2 * DIM * np.finfo(np.float32).eps * float(np.linalg.norm(queries, axis=1).max())
        if not (np.array_equal(ids, got_ids) and np.abs(scores - got_scores).max() <= bound):
            return False
    return True


def measure(quick: bool = False, ray: bool = False, workdir: str | None = None) -> dict:
    """Latency (ms per batch of QUERIES queries, top K) and exactness of S = 1, 2, 4 Flat shards."""
    from openbook.index import ShardedKnowledgeBase
    from openbook.index.sharded import shard_knowledge_base

    rows = QUICK_ROWS if quick else ROWS
    root = Path(tempfile.mkdtemp(prefix="openbook-scale-shard-", dir=workdir))
    result = {"rows": rows, "dim": DIM, "index": "flat", "queries_per_batch": QUERIES, "k": K,
              "split": "round-robin", "shards": list(SHARDS)}
    try:
        t = time.perf_counter()
        whole = build_synthetic(root / "kb", rows)
        result["build_s"] = round(time.perf_counter() - t, 1)
        queries = np.random.default_rng(SEED + 1).standard_normal((QUERIES, DIM), dtype=np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        result["unsharded_latency_ms"] = round(timed(whole.search, queries, K), 2)
        latency, ray_latency, exact, shard_s = {}, {}, [], {}
        for s in SHARDS:
            t = time.perf_counter()
            out = shard_knowledge_base(root / "kb", s, root / f"shards-{s}")
            shard_s[str(s)] = round(time.perf_counter() - t, 1)
            sharded = ShardedKnowledgeBase.load(out)
            exact.append(same_topk(whole, sharded, queries))
            latency[str(s)] = round(timed(sharded.search, queries, K), 2)
            sharded.close()
            if ray:
                on_ray = ShardedKnowledgeBase.load(out, ray_address="local")
                exact.append(same_topk(whole, on_ray, queries))
                ray_latency[str(s)] = round(timed(on_ray.search, queries, K), 2)
                on_ray.close()
            shutil.rmtree(out)
        whole.close()
        result.update({"sharded_topk_exact": all(exact), "shard_latency_ms": latency,
                       "shard_ms_per_query": {s: round(v / QUERIES, 3) for s, v in latency.items()},
                       "shard_seconds": shard_s})
        if ray:
            result["ray_shard_latency_ms"] = ray_latency
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"{QUICK_ROWS} rows instead of {ROWS}")
    p.add_argument("--ray", action="store_true", help="also serve the shards on local Ray actors (2 CPUs)")
    p.add_argument("--workdir", default=None, help="where the temporary knowledge bases go (default: $TMPDIR)")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    if args.ray:
        import ray

        ray.init(num_cpus=2, object_store_memory=256 * 1024**2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    try:
        result = measure(quick=args.quick, ray=args.ray, workdir=args.workdir)
    finally:
        if args.ray:
            ray.shutdown()
    print(f"threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}, load {os.getloadavg()[0]:.2f}",
          file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
