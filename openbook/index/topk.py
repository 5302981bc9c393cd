"""The one rule for equal scores in every top k: which rows are kept, in which order they are listed.

Duplicate passages (the same text in two articles) have equal vectors, so their scores tie exactly. Of
rows tied at the k-th place, FAISS's flat search keeps whichever its heap happened to hold, which
depends on the order it scanned the rows in; the same book split into shards scans in another order.
So every top k here follows one rule, whoever computed the scores (a FAISS index, a filter's exact
search, the merge of the shards' results):

* **kept**: the k best by score, and of equal scores the lowest rows;
* **listed**: best score first, and equal scores highest row first (as FAISS's flat index lists them).

Missing entries (row -1, as FAISS reports too few results) sort after every real one.
"""

from __future__ import annotations

import numpy as np

MISSING_LAST = np.iinfo(np.int64).max


def top_k(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` of candidates ``(scores (m, n), rows (m, n))`` by the rule above:
    ``(scores float32 (m, min(k, n)), rows int64 (m, min(k, n)))``. Candidates must hold every row that
    ties with the k-th best (:func:`cut_is_open` says when they may not)."""
    scores, rows = np.asarray(scores, dtype=np.float32), np.asarray(rows, dtype=np.int64)
    missing = rows < 0
    key = np.where(missing, np.inf, -scores.astype(np.float64))
    order = np.lexsort((np.where(missing, MISSING_LAST, rows), key), axis=-1)[:, :k]
    scores, rows, key = (np.take_along_axis(a, order, 1) for a in (scores, rows, key))
    listed = np.lexsort((-rows, key), axis=-1)
    return np.take_along_axis(scores, listed, 1), np.take_along_axis(rows, listed, 1)


def cut_is_open(scores: np.ndarray, rows: np.ndarray, k: int) -> bool:
    """Whether a search that returned these ``(m, n)`` results, best first, with ``n > k``, may have left
    out rows tied with the k-th best: for some query the last result found scores as the k-th."""
    if scores.shape[1] <= k:
        return False
    last = scores[:, -1]
    return bool(((rows[:, -1] >= 0) & (rows[:, k - 1] >= 0) & (last == scores[:, k - 1])).any())
