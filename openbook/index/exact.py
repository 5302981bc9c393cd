"""Exact top k over a subset of the stored vectors (a metadata filter's matching rows), fast and rounded once.

The scores are the float64 inner products of the queries with the stored vectors, rounded once to float32:
a matrix product rounds each entry by where its row falls in the blocks, so float32's last bit would differ
between a shard and the whole book; float64's differences vanish in that rounding (unless a value lies
within them of a float32 halfway point, about 1e-9 of values), so equal vectors score equally wherever their
rows are, and ties are kept and listed by the one rule of :mod:`openbook.index.topk`.

Computing every score in float64 from gathered rows is slow when many rows match (all of a 666k-passage
book, for a date range). So :func:`exact_search` works in two passes:

1. **float32, streaming** over the stored rows in blocks of :data:`BLOCK_ROWS`: a block with many matching
   rows is multiplied whole, where it lies in the file (no gathering), and its matching columns kept; a
   block with few is gathered. Each float32 score ``f`` is within ``delta = gamma_d * |q| * max|v|`` of the
   exact one (``gamma_d = d u / (1 - d u)``, ``u = 2^-24``: the classic bound for a dot product of length d
   in any summation order, with or without fused multiply-adds). Of every row, only the candidates with
   ``f >= T - margin`` are kept, ``T`` being a lower bound of the k-th best ``f`` so far: the k rows at or
   above ``T`` are exactly at least ``T - delta``, so any row that belongs to the top k (or ties with its
   k-th after rounding to float32, hence the extra two float32 spacings) has ``f >= T - 2 delta``.
2. **float64** over the candidates only (usually a few times k rows), rounded once, and
   :func:`~openbook.index.topk.top_k`.

The result is the same as computing every score in float64; ``tests/index/test_exact_search.py`` checks it
against that brute force, with ties, float16 storage and vectors that are not unit length.
"""

from __future__ import annotations

import numpy as np

from openbook.index.topk import top_k

BLOCK_ROWS = 16384  # stored rows per block of the float32 pass
DENSE_SHARE = 3  # a block is multiplied whole when at least 1/DENSE_SHARE of its rows match
_UNIT = 2.0 ** -24  # float32's unit roundoff


def _error_bound(dim: int, query_norms: np.ndarray, vector_norm: float) -> np.ndarray:
    """An upper bound of |float32 dot product - exact| per query, for vectors of norm at most ``vector_norm``
    (norms computed in float32 are inflated to cover their own rounding)."""
    gamma = dim * _UNIT / (1.0 - dim * _UNIT)
    return gamma * query_norms * (vector_norm * (1.0 + 1e-3)) * (1.0 + 1e-3)


def _margins(kth: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """How far below the k-th best float32 score a candidate may lie and still be in the top k."""
    finite = np.where(np.isfinite(kth), np.abs(kth), 0.0)
    return 2.0 * delta + 2.0 * np.spacing((finite + 2.0 * delta).astype(np.float32)).astype(np.float64)


def _blocks(embeddings, rows: np.ndarray):
    """``(rows of one block, the float32 vectors read, the columns of those rows among them or None when the
    vectors are those rows, the first row read or None)``, block by block."""
    if not len(rows):
        return
    block_ids = rows // BLOCK_ROWS
    bounds = np.flatnonzero(np.diff(block_ids)) + 1
    for part in np.split(rows, bounds):
        start = int(part[0]) - int(part[0]) % BLOCK_ROWS
        stop = min(start + BLOCK_ROWS, len(embeddings))  # the whole block, as its cached norm covers
        if len(part) * DENSE_SHARE >= stop - start:
            whole = np.asarray(embeddings[start:stop], dtype=np.float32)
            yield part, whole, part - start, start
        else:
            yield part, np.asarray(embeddings[part], dtype=np.float32), None, None


def exact_search(embeddings, rows: np.ndarray, queries, k: int,
                 block_norms: dict[int, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The exact top ``k`` (``1 <= k <= len(rows)``) by inner product of ``queries`` (m, d) with the stored
    vectors ``embeddings[rows]`` (``rows`` sorted, distinct): ``(scores float32 (m, k), rows int64 (m, k))``,
    best first, equal scores as :mod:`openbook.index.topk` keeps and lists them (module docs).

    ``block_norms`` caches the largest vector norm of each block read whole (keyed by its first row), for
    the next searches of the same ``embeddings``: computing it costs about as much as the block's scores."""
    q32 = np.asarray(queries, dtype=np.float32)
    rows = np.asarray(rows, dtype=np.int64)
    m, dim = q32.shape
    query_norms = np.linalg.norm(q32.astype(np.float64), axis=1)
    kth = np.full(m, -np.inf)  # a lower bound of each query's k-th best float32 score so far
    vector_norm = 0.0
    found_rows: list[list[np.ndarray]] = [[] for _ in range(m)]
    found_scores: list[list[np.ndarray]] = [[] for _ in range(m)]
    kept = np.zeros(m, dtype=np.int64)
    block_norms = {} if block_norms is None else block_norms
    for part, vectors, columns, start in _blocks(embeddings, rows):
        norm = block_norms.get(start) if start is not None else None
        if norm is None:
            norm = float(np.sqrt(np.einsum("ij,ij->i", vectors, vectors).max()))  # float32: the bound covers it
            if start is not None:
                block_norms[start] = norm
        vector_norm = max(vector_norm, norm)
        scores = (q32 @ vectors.T).astype(np.float64)
        if columns is not None:
            scores = scores[:, columns]
        if scores.shape[1] >= k:
            kth = np.maximum(kth, -np.partition(-scores, k - 1, axis=1)[:, k - 1])
        delta = _error_bound(dim, query_norms, vector_norm)
        floor = kth - _margins(kth, delta)
        for i in range(m):
            keep = scores[i] >= floor[i]
            found_rows[i].append(part[keep])
            found_scores[i].append(scores[i, keep])
            kept[i] += int(keep.sum())
            if kept[i] > 8 * k + BLOCK_ROWS:  # many kept: the k-th best of them rules more out
                r, s, kth[i] = _near_top(found_rows[i], found_scores[i], kth[i], delta[i], k)
                found_rows[i], found_scores[i], kept[i] = [r], [s], len(r)
    delta = _error_bound(dim, query_norms, vector_norm)
    candidates = [_near_top(found_rows[i], found_scores[i], kth[i], delta[i], k)[0] for i in range(m)]
    return _rescore(embeddings, q32, candidates, k)


def _near_top(rows: list[np.ndarray], scores: list[np.ndarray], kth: float, delta: float,
              k: int) -> tuple[np.ndarray, np.ndarray, float]:
    """``(rows, float32 scores, the k-th best score)`` of one query's candidates (at least k, given in parts) that
    may still be in the top k: those within the margin of the k-th best (``kth``: a lower bound of it known so far)."""
    r, s = np.concatenate(rows), np.concatenate(scores)
    kth = max(kth, float(-np.partition(-s, k - 1)[k - 1]))
    keep = s >= kth - _margins(np.array([kth]), np.array([delta]))[0]
    return r[keep], s[keep], kth


def _rescore(embeddings, q32: np.ndarray, candidates: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top k of each query's candidate rows (sorted), scored in float64 and rounded once to float32, a block of
    rows at a time (the candidates are all the rows when they all tie)."""
    union = np.unique(np.concatenate(candidates))
    q64 = q32.astype(np.float64)
    m = len(candidates)
    best_scores = np.full((m, 0), -np.inf, dtype=np.float32)
    best_rows = np.zeros((m, 0), dtype=np.int64)
    for start in range(0, len(union), BLOCK_ROWS):
        part = union[start:start + BLOCK_ROWS]
        scores = (q64 @ np.asarray(embeddings[part], dtype=np.float64).T).astype(np.float32)
        mine = np.stack([np.isin(part, c, assume_unique=True) for c in candidates])
        scores = np.concatenate([best_scores, np.where(mine, scores, -np.inf).astype(np.float32)], axis=1)
        rows = np.concatenate([best_rows, np.where(mine, part, -1)], axis=1)
        best_scores, best_rows = top_k(scores, rows, k)
    return best_scores, best_rows
