"""The exact top k over a subset of stored rows (openbook.index.exact): equal to scoring every matching row in
float64, rounded once to float32, and keeping ties by the one rule (openbook.index.topk), however the rows
fall into blocks; and only a few rows are scored in float64 or gathered, even when every row matches."""

from __future__ import annotations

import numpy as np
import pytest

from openbook.index import exact
from openbook.index.exact import exact_search
from openbook.index.topk import top_k


def brute(embeddings, rows: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every matching row scored in float64, rounded once, the rule applied to all of them."""
    scores = (queries.astype(np.float64) @ np.asarray(embeddings[rows], dtype=np.float64).T).astype(np.float32)
    return top_k(scores, np.broadcast_to(rows, scores.shape), k)


class Counting:
    """A stored-vectors array that counts the rows fetched: by slices (read where they lie), gathered by an
    index array, and fetched as float64 (the exact pass)."""

    def __init__(self, array: np.ndarray):
        self.array, self.sliced, self.gathered = array, 0, 0

    def __getitem__(self, key):
        part = self.array[key]
        if isinstance(key, slice):
            self.sliced += len(part)
        else:
            self.gathered += len(part)
        return part

    def __len__(self) -> int:
        return len(self.array)


def near_ties(n: int, dim: int, seed: int) -> np.ndarray:
    """Vectors whose scores differ by less than float32 rounding: copies of a few vectors, each nudged in its
    last bits, with exact duplicates among them; not of unit length."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((7, dim)).astype(np.float32) * rng.uniform(0.5, 3.0, (7, 1)).astype(np.float32)
    vectors = base[rng.integers(0, 7, n)]
    nudged = rng.random(n) < 0.5
    ulps = rng.integers(-3, 4, (n, dim)).astype(np.float32)
    vectors[nudged] = vectors[nudged] + ulps[nudged] * np.spacing(np.abs(vectors[nudged]))
    return vectors


def cancelling(n: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(vectors, a query) whose scores are small sums of large products: a long vector nearly orthogonal to
    the query plus a small distinct part, so float32's rounding reorders them often."""
    rng = np.random.default_rng(seed)
    query = rng.standard_normal(dim)
    long = rng.standard_normal(dim) * 1e3
    long -= (long @ query) / (query @ query) * query
    vectors = long + rng.standard_normal((n, dim)) * 1e-3
    return vectors.astype(np.float32), query.astype(np.float32)


def random_rows(n: int, share: float, rng) -> np.ndarray:
    rows = np.flatnonzero(rng.random(n) < share)
    return rows if len(rows) else np.array([n // 2])


@pytest.mark.parametrize("block_rows", [64, 1000, exact.BLOCK_ROWS])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_filtered_top_k_is_every_matching_row_scored_in_float64(monkeypatch, block_rows, dtype):
    monkeypatch.setattr(exact, "BLOCK_ROWS", block_rows)
    rng = np.random.default_rng(block_rows)
    n, dim = 5000, 24
    long, long_query = cancelling(n, dim, seed=2)
    stores = {
        "random": (rng.standard_normal((n, dim)) * rng.uniform(0.1, 10.0, (n, 1))).astype(dtype),
        "near ties": near_ties(n, dim, seed=1).astype(dtype),
        "cancelling": long.astype(dtype),
    }
    for name, embeddings in stores.items():
        norms: dict = {}  # one cache for every search of these vectors, as a knowledge base keeps it
        for share in (0.002, 0.05, 0.5, 1.0):  # gathered blocks, mixed, every block read whole
            rows = random_rows(n, share, rng)
            for m in (1, 7):
                queries = rng.standard_normal((m, dim)).astype(np.float32)
                if name == "near ties":
                    queries[0] = embeddings[rows[0]].astype(np.float32)  # a query on a vector with many copies
                if name == "cancelling":
                    queries[0] = long_query
                for k in sorted({1, 5, 37, len(rows)}):
                    if k > len(rows):
                        continue
                    got = exact_search(embeddings, rows, queries, k, norms)
                    want = brute(embeddings, rows, queries, k)
                    np.testing.assert_array_equal(got[1], want[1], err_msg=f"{name} share={share} m={m} k={k}")
                    np.testing.assert_array_equal(got[0], want[0], err_msg=f"{name} share={share} m={m} k={k}")


def test_every_row_tied_is_still_exact():
    embeddings = np.tile(np.random.default_rng(5).standard_normal((1, 16)).astype(np.float32), (3000, 1))
    rows, queries = np.arange(3000), np.random.default_rng(6).standard_normal((2, 16)).astype(np.float32)
    for k in (1, 10, 3000):
        got, want = exact_search(embeddings, rows, queries, k), brute(embeddings, rows, queries, k)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[1], np.tile(np.arange(k)[::-1], (2, 1)))  # the lowest rows, listed last first


def test_a_filter_matching_every_row_reads_them_in_place_and_rescores_few():
    n, dim, k = 3 * exact.BLOCK_ROWS + 123, 8, 5
    vectors = np.random.default_rng(7).standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    embeddings = Counting(vectors)
    queries = np.random.default_rng(8).standard_normal((4, dim)).astype(np.float32)
    got = exact_search(embeddings, np.arange(n), queries, k)
    want = brute(vectors, np.arange(n), queries, k)
    np.testing.assert_array_equal(got[1], want[1])
    assert embeddings.sliced == n  # every block multiplied where it lies
    assert embeddings.gathered <= 4 * k * 4  # the float64 pass: a few candidates per query, not every row
