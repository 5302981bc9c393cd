"""Merging the shards' top k into the top k of the whole knowledge base, exactly."""

from __future__ import annotations

import numpy as np

from openbook.index.sharded.layout import global_rows


def merge_topk(parts: list[tuple[int, np.ndarray, np.ndarray]], num_shards: int, k: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of the shards' results ``(shard, scores (m, k_i), local rows (m, k_i))``.

    Each shard returns its own top ``min(k, its passages)``, which holds every member of the global top k
    that lives on it; so for an exact (Flat) index the merge is the unsharded top k, and for HNSW/IVF it is
    exactly the top k of the shards' candidates. Equal scores are listed highest id first, as FAISS's flat
    index lists them; where equal scores straddle the k-th place the merge keeps the lowest ids, while
    FAISS's choice there follows its heap's scan order (so with exact ties at the cut, the ids may differ
    from the unsharded search; the scores never do). Missing entries (row -1) sort last. Returns ``(scores float32 (m, k'), global rows int64 (m, k'))`` with k' = min(k, candidates).
    """
    scores = np.concatenate([np.asarray(s, dtype=np.float32) for _, s, _ in parts], axis=1)
    rows = np.concatenate([global_rows(r, shard, num_shards) for shard, _, r in parts], axis=1)
    missing = rows < 0
    key = np.where(missing, np.inf, -scores.astype(np.float64))
    order = np.lexsort((np.where(missing, np.iinfo(np.int64).max, rows), key), axis=-1)[:, :k]
    scores, rows = np.take_along_axis(scores, order, 1), np.take_along_axis(rows, order, 1)
    key = np.take_along_axis(key, order, 1)
    display = np.lexsort((-rows, key), axis=-1)  # within equal scores: highest id first, as FAISS lists them
    return np.take_along_axis(scores, display, 1), np.take_along_axis(rows, display, 1)
