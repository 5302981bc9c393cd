"""Tests of the dense index kinds in openbook.index.dense: flat, hnsw, ivfpq, hnsw_sq8.

All on 2,000 clustered random vectors of dimension 32 (not normalised), so each test takes well under a
second. Recall is measured against exact inner-product search.
"""

import json
import os

import faiss
import numpy as np
import pytest

from openbook.errors import InputError
from openbook.index.dense import (
    INDEX_TYPES,
    DenseIndex,
    FlatIPIndex,
    HNSWIndex,
    HNSWSQ8Index,
    IVFPQIndex,
    default_pq_m,
    index_class,
)
from tolerance import tolerance

DIM, N, N_QUERIES, K = 32, 2000, 50, 10

# small-scale parameters: IVF-PQ with 2-dimensional sub-quantizers and 6-bit codes trains on 2,000 vectors
PARAMS = {
    "flat": {},
    "hnsw": {"M": 16, "ef_construction": 80, "ef_search": 64},
    "ivfpq": {"nlist": 16, "m": 16, "nbits": 6, "nprobe": 8, "opq": False},
    "hnsw_sq8": {"M": 16, "ef_construction": 80, "ef_search": 64},
}
CLASSES = {"flat": FlatIPIndex, "hnsw": HNSWIndex, "ivfpq": IVFPQIndex, "hnsw_sq8": HNSWSQ8Index}
EXACT_SCORES = {"flat", "hnsw"}  # the others score quantized vectors
KINDS = list(PARAMS)


def clustered(n: int, seed: int) -> np.ndarray:
    """Points around 20 fixed Gaussian centres, with norms varying (as DPR's vectors do)."""
    centres = np.random.default_rng(0).standard_normal((20, DIM)) * 2
    rng = np.random.default_rng(seed)
    points = centres[rng.integers(0, len(centres), n)] + rng.standard_normal((n, DIM))
    return points.astype(np.float32)


@pytest.fixture(autouse=True, scope="module")
def single_faiss_thread():
    """FAISS's OpenMP threads only add overhead at this size (much of it on a busy machine)."""
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(threads)


DOCS = clustered(N, 1)
QUERIES = clustered(N_QUERIES, 2)
EXACT = QUERIES.astype(np.float64) @ DOCS.T.astype(np.float64)
TRUE_TOP = np.argsort(-EXACT, axis=1)[:, :K]


def score_tolerance(queries: np.ndarray, docs: np.ndarray = DOCS) -> dict[str, float]:
    """Inner products as the indexes compute them in float32 (tests/helpers/tolerance.py): directly (terms up to
    |q||d|) or, for HNSW, from the L2 distance to docs padded to norm phi = max|d|^2, whose terms are up to
    |q|^2 + phi. Both are bounded by max|q|^2 + max|d|^2, over DIM + 1 terms."""
    scale = float((np.asarray(queries, np.float64) ** 2).sum(-1).max() + (np.asarray(docs, np.float64) ** 2).sum(-1).max())
    return tolerance(terms=DIM + 1, dtype=np.float32, scale=scale)


def recall(ids: np.ndarray) -> float:
    return float(np.mean([len(np.intersect1d(found, true)) for found, true in zip(ids, TRUE_TOP)])) / K


_BUILT: dict[str, DenseIndex] = {}


def built(kind: str) -> DenseIndex:
    """A (shared, never modified) index of DOCS, added in two batches."""
    if kind not in _BUILT:
        index = index_class(kind).create(DIM, **PARAMS[kind])
        index.train(DOCS)
        index.add(DOCS[:1500])
        index.add(DOCS[1500:])
        _BUILT[kind] = index
    return _BUILT[kind]


# -- registry and parameters ------------------------------------------------------------------------


def test_registry_names_and_alias():
    assert sorted(INDEX_TYPES) == ["flat", "hnsw", "hnsw_sq8", "ivfpq"]
    for kind, cls in CLASSES.items():
        assert index_class(kind) is cls and cls.type_name == kind
    assert index_class("flat_ip") is FlatIPIndex  # knowledge bases written before record "flat_ip"
    with pytest.raises(InputError, match=r"unknown index type 'annoy'; known types: flat, hnsw, hnsw_sq8, ivfpq"):
        index_class("annoy")


def test_needs_training_on_class_and_instance():
    assert not FlatIPIndex.needs_training and not HNSWIndex.needs_training
    assert IVFPQIndex.needs_training and HNSWSQ8Index.needs_training
    for kind in KINDS:
        assert index_class(kind).create(DIM, **PARAMS[kind]).needs_training == (kind in ("ivfpq", "hnsw_sq8"))
        assert not built(kind).needs_training


def test_defaults_and_params():
    assert HNSWIndex.create(DIM).params == {"M": 32, "ef_construction": 200, "ef_search": 128, "phi": None}
    ivfpq = IVFPQIndex.create(768)
    assert ivfpq.params == {"nlist": None, "m": 64, "nbits": 8, "nprobe": None, "opq": True, "phi": None}
    assert default_pq_m(768) == 64 and default_pq_m(384) == 32 and default_pq_m(DIM) == 2
    phi = float((DOCS.astype(np.float64) ** 2).sum(axis=1).max())
    ivfpq_params = built("ivfpq").params
    phi_rel = tolerance(terms=DIM, dtype=np.float32)["rtol"]  # a float32 sum of DIM squares
    assert ivfpq_params.pop("phi") == pytest.approx(phi, rel=phi_rel)
    assert ivfpq_params == {"nlist": 16, "m": 16, "nbits": 6, "nprobe": 8, "opq": False}
    assert built("ivfpq").bytes_per_code == 12  # 16 codes of 6 bits
    for kind in ("hnsw", "hnsw_sq8"):
        params = built(kind).params
        assert params.pop("phi") == pytest.approx(phi, rel=phi_rel)
        assert params == {"M": 16, "ef_construction": 80, "ef_search": 64}
    json.dumps([built(kind).params for kind in KINDS])  # manifest-ready


@pytest.mark.parametrize(
    "kind, params, message",
    [
        ("flat", {"M": 8}, "flat index: unknown parameter.* M; it takes no parameters"),
        ("hnsw", {"m": 8}, "hnsw index: unknown parameter.* m; it takes M, ef_construction, ef_search, phi"),
        ("hnsw", {"M": 0}, "hnsw index parameter M must be a positive integer, got 0"),
        ("hnsw", {"phi": -1.0}, "phi must be a positive number"),
        ("ivfpq", {"m": 33}, "m=33 is more than the vector dimension 32"),
        ("ivfpq", {"opq": "yes"}, "opq must be true or false"),
        ("hnsw_sq8", {"ef_search": 2.5}, "ef_search must be a positive integer"),
    ],
)
def test_bad_params(kind, params, message):
    with pytest.raises(InputError, match=message):
        index_class(kind).create(DIM, **params)


# -- search quality ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_search_shapes_scores_and_recall(kind):
    index = built(kind)
    assert index.ntotal == N and index.dim == DIM and len(index) == N
    scores, ids = index.search(QUERIES, K)
    assert scores.dtype == np.float32 and ids.dtype == np.int64 and scores.shape == ids.shape == (N_QUERIES, K)
    assert (ids >= 0).all() and all(len(set(row)) == K for row in ids)
    tol = score_tolerance(QUERIES)
    assert (np.diff(scores, axis=1) <= tol["atol"]).all()  # best first
    exact = np.take_along_axis(EXACT, ids, axis=1)
    if kind in EXACT_SCORES:
        np.testing.assert_allclose(scores, exact, **tol)
    else:  # scores of quantized vectors: close to the exact inner products on average
        assert np.abs(scores - exact).mean() < {"hnsw_sq8": 0.005, "ivfpq": 0.05}[kind] * np.abs(exact).mean()
    minimum = {"flat": 1.0, "hnsw": 0.95, "hnsw_sq8": 0.9, "ivfpq": 0.6}[kind]
    assert recall(ids) >= minimum, f"{kind} recall@{K} {recall(ids):.3f} < {minimum}"


def test_hnsw_transform_is_undone_for_unnormalised_vectors():
    # a single query vector, 1-D, with norm far from the data's: scores stay exact inner products
    index = built("hnsw")
    query = QUERIES[0] * 7
    scores, ids = index.search(query, 5)
    assert scores.shape == (1, 5)
    np.testing.assert_allclose(scores[0], DOCS[ids[0]].astype(np.float64) @ query, **score_tolerance(query))
    assert list(ids[0]) == list(np.argsort(-(DOCS.astype(np.float64) @ query))[:5])


def test_hnsw_later_batch_with_larger_norm_is_refused_unless_phi_bounds_it():
    index = HNSWIndex.create(DIM, M=8)
    index.add(DOCS[:100])
    with pytest.raises(InputError, match=r"squared norm .* above phi = .* add all vectors in one call"):
        index.add(DOCS[:1] * 10)
    assert index.ntotal == 100  # nothing added
    bounded = HNSWIndex.create(DIM, M=8, phi=1.0)
    unit = DOCS[:200] / np.linalg.norm(DOCS[:200], axis=1, keepdims=True)
    bounded.add(unit[:100])
    bounded.add(unit[100:] * 0.5)
    stored = np.vstack([unit[:100], unit[100:] * 0.5]).astype(np.float64)
    scores, ids = bounded.search(unit[150], 3)
    assert list(ids[0]) == list(np.argsort(-(stored @ unit[150]))[:3])
    np.testing.assert_allclose(scores[0], stored[ids[0]] @ unit[150], **score_tolerance(unit[150][None], unit))


def test_k_larger_than_ntotal_is_reduced():
    for kind in ("flat", "hnsw"):
        index = index_class(kind).create(DIM)
        index.add(DOCS[:3])
        scores, ids = index.search(QUERIES[:2], 10)
        assert ids.shape == (2, 3) and sorted(ids[0]) == [0, 1, 2]


# -- exclude ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_exclude(kind):
    index = built(kind)
    _, ids = index.search(QUERIES, K)
    excluded = np.unique(ids[:, :3])  # every query's best three
    scores, found = index.search(QUERIES, K, exclude=excluded)
    assert not np.isin(found, excluded).any()
    assert (found >= 0).all()
    # the remaining true neighbours are still found
    kept = [np.setdiff1d(row, excluded) for row in ids]
    still = np.mean([np.isin(row, got).mean() for row, got in zip(kept, found) if len(row)])
    assert still >= 0.9
    # excluding everything but a few ids leaves -1 / -inf beyond them
    keep = np.array([5, 17, 1999])
    scores, found = index.search(QUERIES[:3], 5, exclude=np.setdiff1d(np.arange(N), keep))
    for row, row_scores in zip(found, scores):
        assert set(row[row >= 0]) <= set(keep) and np.isneginf(row_scores[row < 0]).all()
    if kind in ("flat", "ivfpq"):  # exhaustive, or IVF widening nprobe until k are found (or all lists)
        assert (np.sort(found, axis=1)[:, 2:] == np.sort(keep)).all()


def test_exclude_accepts_lists_and_rejects_non_integers():
    index = built("flat")
    _, ids = index.search(QUERIES[:1], 2, exclude=[])
    _, without = index.search(QUERIES[:1], 1, exclude=[int(ids[0, 0])])
    assert without[0, 0] == ids[0, 1]
    with pytest.raises(InputError, match="exclude must be a 1-D array of integer passage ids"):
        index.search(QUERIES[:1], 2, exclude=np.array([1.5]))


# -- files ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_round_trip(kind, tmp_path):
    index = built(kind)
    path = tmp_path / f"{kind}.faiss"
    index.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{kind}.faiss"]  # no sidecar, no temporary
    expected = index.search(QUERIES, K, exclude=[3, 4])
    for loader in (DenseIndex, CLASSES[kind], index_class(kind)):
        for mmap in (False, True):
            loaded = loader.load(path, mmap=mmap)
            assert type(loaded) is CLASSES[kind] and loaded.read_only == mmap
            assert loaded.params == index.params and loaded.ntotal == N and loaded.dim == DIM
            for got, want in zip(loaded.search(QUERIES, K, exclude=[3, 4]), expected):
                np.testing.assert_array_equal(got, want)


def test_mmap_loaded_index_is_read_only_and_plain_load_can_grow(tmp_path):
    path = tmp_path / "hnsw.faiss"
    built("hnsw").save(path)
    mapped = DenseIndex.load(path, mmap=True)
    with pytest.raises(InputError, match="loaded with mmap=True and is read-only"):
        mapped.add(DOCS[:1])
    loaded = DenseIndex.load(path)
    # the best possible vector for QUERIES[0] within the norm bound phi
    best = QUERIES[0] / np.linalg.norm(QUERIES[0]) * np.sqrt(loaded.phi) * 0.999
    loaded.add(best[None, :])
    assert loaded.ntotal == N + 1 and loaded.search(QUERIES[0], 1)[1][0, 0] == N


def test_loading_a_file_of_another_kind_names_both(tmp_path):
    path = tmp_path / "index.faiss"
    built("ivfpq").save(path)
    with pytest.raises(InputError, match=r"holds a FAISS IndexPreTransform .*not a hnsw index"):
        HNSWIndex.load(path)
    flat_path = tmp_path / "flat.faiss"
    built("flat").save(flat_path)
    assert type(index_class("flat_ip").load(flat_path)) is FlatIPIndex


def test_file_written_before_the_new_kinds_still_loads(tmp_path):
    path = tmp_path / "old.faiss"
    old = faiss.IndexFlatIP(DIM)
    old.add(DOCS[:10])
    faiss.write_index(old, str(path))
    loaded = DenseIndex.load(path)
    assert isinstance(loaded, FlatIPIndex) and loaded.type_name == "flat" and loaded.ntotal == 10


def test_interrupted_save_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "index.faiss"
    built("flat").save(path)
    before = path.read_bytes()

    def failing_write(index, name):
        with open(name, "wb") as handle:
            handle.write(b"half an index")
        raise RuntimeError("disk full")

    monkeypatch.setattr(faiss, "write_index", failing_write)
    with pytest.raises(RuntimeError, match="disk full"):
        built("hnsw").save(path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["index.faiss"]
    assert isinstance(DenseIndex.load(path), FlatIPIndex)


def test_untrained_ivfpq_cannot_be_saved_and_small_training_sets_are_refused(tmp_path):
    with pytest.raises(InputError, match="cannot save an untrained ivfpq index"):
        IVFPQIndex.create(DIM, m=16).save(tmp_path / "x.faiss")
    with pytest.raises(InputError, match=r"needs at least 256 training vectors, got 100"):
        IVFPQIndex.create(DIM, nlist=4, m=16).add(DOCS[:100])


def test_ivfpq_defaults_choose_nlist_and_nprobe_from_the_data():
    index = IVFPQIndex.create(DIM, m=16, nbits=6, opq=False)
    index.add(DOCS)  # trains on this first batch
    assert index.params["nlist"] == round(4 * N**0.5) and index.params["nprobe"] == index.params["nlist"] // 16
    index.nprobe = 40
    assert index.params["nprobe"] == 40


def test_ivfpq_with_opq(tmp_path, monkeypatch):
    monkeypatch.setattr(IVFPQIndex, "max_train_vectors", 500)  # trains on a sample, fast
    index = IVFPQIndex.create(DIM, nlist=16, m=8, nbits=5, nprobe=8, opq=True)
    index.add(DOCS)
    assert index.params["opq"] is True and recall(index.search(QUERIES, K)[1]) >= 0.5
    index.save(tmp_path / "opq.faiss")
    loaded = DenseIndex.load(tmp_path / "opq.faiss")
    assert type(loaded) is IVFPQIndex and loaded.params == index.params
    _, found = loaded.search(QUERIES, K, exclude=[1, 2, 3])
    assert not np.isin(found, [1, 2, 3]).any()


def test_ivfpq_sub_quantizers_need_not_divide_dim():
    index = IVFPQIndex.create(DIM, nlist=8, m=5, nbits=6, nprobe=8, opq=False)  # 33 -> padded to 35
    index.add(DOCS)
    assert index.params["m"] == 5 and recall(index.search(QUERIES, K)[1]) >= 0.3


def test_phi_travels_in_the_file_for_padded_kinds(tmp_path):
    for kind in ("hnsw_sq8", "ivfpq"):
        index = index_class(kind).create(DIM, **{**PARAMS[kind], "phi": 5000.0})
        index.add(DOCS)
        index.save(tmp_path / kind)
        loaded = DenseIndex.load(tmp_path / kind)
        assert loaded.phi == index.phi == 5000.0
        for got, want in zip(loaded.search(QUERIES, K), index.search(QUERIES, K)):
            np.testing.assert_array_equal(got, want)


def test_rerank_with_exact_vectors():
    index = built("ivfpq")
    approximate = recall(index.search(QUERIES, K)[1])
    try:
        index.rerank_with(DOCS, factor=10)
        scores, ids = index.search(QUERIES, K, exclude=[int(TRUE_TOP[0, 0])])
        assert ids[0, 0] == TRUE_TOP[0, 1] and int(TRUE_TOP[0, 0]) not in ids
        scores, ids = index.search(QUERIES, K)
        np.testing.assert_allclose(scores, np.take_along_axis(EXACT, ids, axis=1), **score_tolerance(QUERIES))
        assert recall(ids) >= max(0.95, approximate)
        with pytest.raises(InputError, match="only 10 re-ranking vectors"):
            index.rerank_with(DOCS[:10])
            index.search(QUERIES, K)
        with pytest.raises(InputError, match="float32 or float16 numpy array"):
            index.rerank_with(DOCS.astype(np.float64))
    finally:
        index.rerank_with(None)
    assert recall(index.search(QUERIES, K)[1]) == approximate


# -- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_bad_input_errors_name_the_input(kind, tmp_path):
    index = built(kind)
    with pytest.raises(InputError, match=r"query vectors have dimension 31 but the index has dimension 32"):
        index.search(QUERIES[:, :31], K)
    with pytest.raises(InputError, match=r"query vectors contain NaN or infinite values"):
        index.search(np.full((1, DIM), np.nan, dtype=np.float32), K)
    with pytest.raises(InputError, match=r"query vectors must be a 2-D array"):
        index.search(QUERIES[None], K)
    with pytest.raises(InputError, match=r"k must be a positive integer, got 0"):
        index.search(QUERIES, 0)
    fresh = index_class(kind).create(DIM, **PARAMS[kind])
    with pytest.raises(InputError, match=r"vectors to add have dimension 16 but the index has dimension 32"):
        fresh.add(DOCS[:, :16])
    with pytest.raises(InputError, match=r"training vectors must be a numeric array"):
        fresh.train([["a"] * DIM])
    with pytest.raises(InputError, match="cannot search an empty index"):
        fresh.search(QUERIES, K)
    missing = tmp_path / "missing.faiss"
    with pytest.raises(InputError, match=f"{missing}: no such index file"):
        DenseIndex.load(missing)
    junk = tmp_path / "junk.faiss"
    junk.write_bytes(b"not an index")
    with pytest.raises(InputError, match=f"{junk}: not a readable FAISS index"):
        DenseIndex.load(junk)
