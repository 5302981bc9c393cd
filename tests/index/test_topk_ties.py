"""One rule for equal scores in every top k (openbook.index.topk): the k kept are the best by score, then by
lowest row; they are listed best first, equal scores highest row first (as FAISS's flat index lists them).

Duplicate passages (the same text in two articles, a list repeated) have equal vectors, so their scores tie
exactly. FAISS's flat search keeps, of rows tied at the k-th place, whichever its heap happened to hold,
which depends on the scan order: the same book split into shards (which scan in another order) would keep
other rows. With the one rule the unsharded book, its shards, a filtered search and the merge agree."""

from __future__ import annotations

import numpy as np
import pytest

from openbook.index import KnowledgeBase, load_knowledge_base
from openbook.index.exact import exact_search
from openbook.index.filters import parse_where
from openbook.index.sharded import shard_knowledge_base
from tiny_kb import DIM, build, corpus

DISTINCT, COPIES = 41, 4  # 41 is prime to 2 and 3: the copies of a vector land on different shards
N = DISTINCT * COPIES
KS = (1, 2, 3, 4, 5, 7, 10, 33, 100, N)


def tied_vectors() -> np.ndarray:
    """Row i holds the (unit) vector i mod DISTINCT: every score ties with COPIES - 1 others."""
    distinct = np.random.default_rng(3).standard_normal((DISTINCT, DIM)).astype(np.float32)
    distinct /= np.linalg.norm(distinct, axis=1, keepdims=True)
    return distinct[np.arange(N) % DISTINCT]


def queries(count: int = 30) -> np.ndarray:
    return np.random.default_rng(4).standard_normal((count, DIM)).astype(np.float32)


@pytest.fixture(scope="module")
def tied(tmp_path_factory) -> KnowledgeBase:
    passages, vectors = corpus(N), tied_vectors()
    rows = {p.id: i for i, p in enumerate(passages)}
    return build(tmp_path_factory.mktemp("tied") / "kb", passages,
                 encode=lambda batch: vectors[[rows[p.id] for p in batch]])


def rule(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The rule, spelled out on one query's scores of every row: keep by (score, lowest row), list by
    (score, highest row)."""
    keep = np.lexsort((rows, -scores.astype(np.float64)))[:k]
    listed = keep[np.lexsort((-rows[keep], -scores[keep].astype(np.float64)))]
    return scores[listed], rows[listed]


def test_a_flat_search_keeps_the_lowest_rows_of_those_tied_at_the_kth_place(tied):
    q = queries()
    every_score, every_row = tied.search(q, N)  # all rows: no cut, nothing to choose
    assert (np.diff(every_score, axis=1) == 0).sum() >= len(q) * N // 2  # ties all along
    for k in KS:
        scores, rows = tied.search(q, k)
        for i in range(len(q)):
            want_scores, want_rows = rule(every_score[i], every_row[i], k)
            assert rows[i].tolist() == want_rows.tolist(), (k, i)
            np.testing.assert_array_equal(scores[i], want_scores)


@pytest.mark.parametrize("num_shards", [2, 3])
def test_shards_keep_the_same_tied_rows_as_the_unsharded_book(tied, tmp_path, num_shards):
    sharded = load_knowledge_base(shard_knowledge_base(tied.path, num_shards, tmp_path / "s"))
    try:
        q = queries()
        for k in KS:
            scores, rows = tied.search(q, k)
            got_scores, got_rows = sharded.search(q, k)
            assert got_rows.tolist() == rows.tolist(), k
            np.testing.assert_array_equal(got_scores, scores)  # the same dot products of the same vectors
    finally:
        sharded.close()


def test_a_filtered_search_keeps_and_lists_ties_by_the_same_rule(tied):
    """A filter's exact search (openbook.index.filters: numpy's dot products, read in chunks) follows the
    rule on its own scores."""
    q, rows = queries(), np.arange(N, dtype=np.int64)
    every_score, every_row = exact_search(tied.embeddings, rows, q, N)
    for k in KS:
        scores, found = exact_search(tied.embeddings, rows, q, k)
        for i in range(len(q)):
            want_scores, want_rows = rule(every_score[i], every_row[i], k)
            assert found[i].tolist() == want_rows.tolist(), (k, i)
            np.testing.assert_array_equal(scores[i], want_scores)


def test_a_filtered_search_over_shards_keeps_the_unsharded_rows(tmp_path):
    """Each shard's filtered search computes its own dot products; equal vectors must still score equally
    there, wherever their rows fall in the shard, so the merge keeps the rows the unsharded search keeps."""
    from openbook.corpus import Passage

    vectors = tied_vectors()
    passages = [Passage(p.id, p.title, p.text, {"type": "even" if i % 2 == 0 else "odd", "all": "yes"})
                for i, p in enumerate(corpus(N))]
    rows = {p.id: i for i, p in enumerate(passages)}
    kb = build(tmp_path / "kb", passages, encode=lambda batch: vectors[[rows[p.id] for p in batch]])
    q = queries()
    for num_shards in (2, 3):
        sharded = load_knowledge_base(shard_knowledge_base(kb.path, num_shards, tmp_path / f"s{num_shards}"))
        try:
            for where in (parse_where(["all=yes"]), parse_where(["type=odd"])):
                for k in KS[:-1]:
                    scores, found = kb.search(q, k, where=where)
                    got_scores, got_found = sharded.search(q, k, where=where)
                    assert got_found.tolist() == found.tolist(), (num_shards, where, k)
                    np.testing.assert_array_equal(got_scores, scores)
        finally:
            sharded.close()
