"""Merging the shards' top k into the top k of the whole knowledge base, exactly."""

from __future__ import annotations

import numpy as np

from openbook.index.sharded.layout import global_rows
from openbook.index.topk import top_k


def merge_topk(parts: list[tuple[int, np.ndarray, np.ndarray]], num_shards: int, k: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of the shards' results ``(shard, scores (m, k_i), local rows (m, k_i))``.

    Each shard returns its own top ``min(k, its passages)``, which holds every member of the global top k
    that lives on it (local rows are in the order of global rows, and every shard keeps the lowest rows of
    those tied at its k-th place); so for an exact (Flat) index the merge is the unsharded top k, and for
    HNSW/IVF it is exactly the top k of the shards' candidates. Equal scores follow the one rule of
    :mod:`openbook.index.topk` (kept: lowest rows; listed: highest row first). Returns
    ``(scores float32 (m, k'), global rows int64 (m, k'))`` with k' = min(k, candidates).
    """
    scores = np.concatenate([np.asarray(s, dtype=np.float32) for _, s, _ in parts], axis=1)
    rows = np.concatenate([global_rows(r, shard, num_shards) for shard, _, r in parts], axis=1)
    return top_k(scores, rows, k)
