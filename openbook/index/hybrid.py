"""Hybrid retrieval by reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009). Pure numpy.

Each input ranking is an ``(m, k_i)`` array of row ids, best first (as returned by a dense index or
:class:`openbook.index.bm25.BM25Index`), with ``-1`` for "no result". The fused score of a passage d for
query q is

    RRF(d) = sum over rankings r of  w_r / (c + rank_r(d))

where ``rank_r(d)`` is d's 1-based position (column + 1) in ranking r, and rankings that do not contain
d contribute nothing. Only ranks matter, so scores of different scales (inner products, BM25) can be
fused without calibration.

Details: a ``-1`` entry is skipped but still occupies its position (the ranks of later entries do not
move up); an id repeated within one ranking counts once, at its best rank. Ties in fused score are broken
by first appearance when the rankings are read rank by rank (rank 1 of every ranking in order, then rank
2, ...), so with equal weights a passage ranked first by an earlier ranking wins a tie.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from openbook.errors import InputError, positive_int
from openbook.index.bm25 import PAD_SCORE

DEFAULT_C = 60  # the constant of Cormack et al. (2009)


def _check_rankings(rankings: Sequence) -> list[np.ndarray]:
    if isinstance(rankings, np.ndarray) or not isinstance(rankings, Sequence) or not rankings:
        raise InputError("rankings must be a non-empty list of (m, k_i) id arrays")
    arrays = []
    for i, ranking in enumerate(rankings):
        array = np.asarray(ranking)
        if array.ndim != 2:
            raise InputError(f"ranking {i} must be a 2-D (m, k) array of ids, got shape {array.shape}")
        if array.size and not np.issubdtype(array.dtype, np.integer):
            raise InputError(f"ranking {i} must hold integer ids, got {array.dtype}")
        if array.size and (array < -1).any():
            raise InputError(f"ranking {i} holds negative ids other than -1 (the 'no result' marker)")
        arrays.append(array.astype(np.int64, copy=False))
    rows = {a.shape[0] for a in arrays}
    if len(rows) != 1:
        raise InputError(f"rankings must have the same number of rows (queries), got {sorted(rows)}")
    return arrays


def _check_weights(weights, count: int) -> list[float]:
    if weights is None:
        return [1.0] * count
    values = np.asarray(weights, dtype=np.float64).reshape(-1)
    if values.shape[0] != count:
        raise InputError(f"got {values.shape[0]} weights for {count} rankings")
    if not np.isfinite(values).all() or (values < 0).any():
        raise InputError("fusion weights must be finite and non-negative")
    return values.tolist()


def reciprocal_rank_fusion(
    rankings: Sequence[np.ndarray], k: int, c: float = DEFAULT_C, weights: Sequence[float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Fuse ranked id lists: ``(scores float32 (m, k), ids int64 (m, k))``, best first (see module docs).

    Rows with fewer than ``k`` distinct ids are padded with id ``-1`` and score ``-inf`` (as the dense
    indexes mark missing results).
    """
    arrays = _check_rankings(rankings)
    k = positive_int(k, "k")
    if isinstance(c, bool) or not isinstance(c, (int, float, np.integer, np.floating)) or not c >= 0:
        raise InputError(f"the RRF constant c must be a non-negative number, got {c!r}")
    w = _check_weights(weights, len(arrays))
    m = arrays[0].shape[0]
    depth = max(a.shape[1] for a in arrays)
    out_scores = np.full((m, k), PAD_SCORE, dtype=np.float32)
    out_ids = np.full((m, k), -1, dtype=np.int64)
    for row in range(m):
        fused: dict[int, float] = {}  # insertion order = first appearance, rank-major
        for position in range(depth):
            contribution = 1.0 / (c + position + 1)
            for r, array in enumerate(arrays):
                if position >= array.shape[1]:
                    continue
                doc = int(array[row, position])
                if doc < 0 or (doc in fused and _seen_before(array[row], doc, position)):
                    continue
                fused[doc] = fused.get(doc, 0.0) + w[r] * contribution
        if not fused:
            continue
        docs = np.fromiter(fused.keys(), dtype=np.int64, count=len(fused))
        scores = np.fromiter(fused.values(), dtype=np.float64, count=len(fused))
        order = np.argsort(-scores, kind="stable")[:k]
        out_ids[row, : order.shape[0]] = docs[order]
        out_scores[row, : order.shape[0]] = scores[order]
    return out_scores, out_ids


def _seen_before(ranking_row: np.ndarray, doc: int, position: int) -> bool:
    """Whether ``doc`` already occurs in ``ranking_row`` before ``position`` (a repeated id)."""
    return bool((ranking_row[:position] == doc).any())
