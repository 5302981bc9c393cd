"""Metadata filters: the filtered top k equals brute force over the matching passages, for dense (flat and
approximate indexes), BM25, hybrid and sharded knowledge bases; parsing and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from openbook.corpus import Passage
from openbook.errors import InputError
from openbook.index import ShardedKnowledgeBase
from openbook.index.bm25 import knowledge_base_bm25
from openbook.index.filters import Condition, Filter, as_filter, parse_filter, parse_where
from openbook.index.hybrid import reciprocal_rank_fusion
from openbook.index.retriever import BM25Retriever, DenseRetriever, HybridRetriever
from openbook.index.sharded import shard_knowledge_base
from ray_fixture import ray_local  # noqa: F401
from tiny_kb import DIM, build, corpus
from tolerance import dot_tolerance

N = 61


def with_meta(passages: list[Passage]) -> list[Passage]:
    out = []
    for i, p in enumerate(passages):
        meta = {"source": f"dir{i % 3}/file{i % 5}.md", "page": i % 7, "type": "pdf" if i % 2 else "md",
                "modified": f"2026-{1 + i % 12:02d}-15T12:00:00Z", "draft": i % 4 == 0}
        if i % 10 == 9:
            meta = None  # some passages have no metadata at all
        out.append(Passage(p.id, p.title, p.text, meta))
    return out


PASSAGES = with_meta(corpus(N))
VECTORS = {p.id: v for p, v in zip(PASSAGES, np.random.default_rng(0).standard_normal((N, DIM)).astype(np.float32))}


def encode(batch) -> np.ndarray:
    return np.stack([VECTORS[p.id] for p in batch])


def queries(count: int = 6, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)


FILTERS = [
    parse_where(["source=dir1/file1.md"]),
    parse_where(["source^=dir2/"]),
    parse_where(["modified>=2026-06-01", "modified<=2026-09-30"]),
    parse_where(["page>=2", "page<=4", "type=pdf"]),
    parse_filter({"draft": True}),
    parse_filter({"source": {"prefix": "dir0/"}, "page": 3}),
]


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    return build(tmp_path_factory.mktemp("flat") / "kb", PASSAGES, encode=encode)


def matching(kb, where: Filter) -> tuple[np.ndarray, list[Passage]]:
    """Brute force: the rows (and passages) visible at kb's version whose metadata matches, in Python."""
    pairs = [(row, p) for row, p in kb.live_rows() if where.matches(p.meta)]
    return np.array([row for row, _ in pairs], dtype=np.int64), [p for _, p in pairs]


def brute_dense(kb, rows: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = q.astype(np.float64) @ np.asarray(kb.embeddings[rows], dtype=np.float64).T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, 1), rows[order]


def test_matching_rows_are_the_passages_whose_metadata_matches(flat):
    for where in FILTERS:
        rows, _ = matching(flat, where)
        assert len(rows) > 0, where.describe()
        np.testing.assert_array_equal(flat.matching_rows(where), rows)
        assert flat.count_matching(where) == len(rows)


@pytest.mark.parametrize("index_type, params", [
    ("flat", {}),
    ("hnsw", {"M": 4, "ef_construction": 8, "ef_search": 4}),
    ("ivfpq", {"nlist": 4, "m": 2, "nbits": 4, "nprobe": 1}),
])
def test_dense_filtered_top_k_is_brute_force_over_the_matches(flat, tmp_path, index_type, params):
    kb = flat if index_type == "flat" else build(tmp_path / "kb", PASSAGES, encode=encode, index_type=index_type,
                                                 index_params=params)
    q = queries()
    for where in FILTERS:
        rows, _ = matching(kb, where)
        for k in (1, 3, len(rows)):
            scores, ids = kb.search(q, k, where=where)
            expected_scores, expected_ids = brute_dense(kb, rows, q, k)
            np.testing.assert_array_equal(ids, expected_ids)
            np.testing.assert_allclose(scores, expected_scores, **dot_tolerance(q, kb.embeddings))


def test_dense_retriever_clamps_k_to_the_matches_and_refuses_no_match(flat):
    retriever = DenseRetriever(flat, lambda questions: queries(len(questions)))
    where = FILTERS[0]
    rows, passages = matching(flat, where)
    with pytest.warns(UserWarning, match=f"using k={len(rows)}"):
        hits = retriever.retrieve(["a", "b"], len(rows) + 5, where=where)
    assert hits.ids.shape == (2, len(rows)) and set(hits.ids[0]) == set(rows)
    assert all(where.matches(p.meta) for row in hits.passages for p in row)
    with pytest.raises(InputError, match="no passage of knowledge base .* matches the filter source=nowhere"):
        retriever.retrieve(["a"], 3, where=parse_where(["source=nowhere"]))


def test_torch_queries_rescore_the_filtered_rows(flat):
    import torch

    retriever = DenseRetriever(flat, lambda questions: torch.from_numpy(queries(len(questions))).requires_grad_())
    where = FILTERS[2]
    hits = retriever.retrieve(["a", "b"], 4, where=where)
    rows, _ = matching(flat, where)
    expected_scores, expected_ids = brute_dense(flat, rows, queries(2), 4)
    np.testing.assert_array_equal(hits.ids, expected_ids)
    assert hits.scores.requires_grad


def words(i: int) -> str:
    return " ".join(PASSAGES[i].text.split()[:3])


def brute_bm25(kb, rows: np.ndarray, question: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    index, _ = knowledge_base_bm25(kb, progress=False)
    scores = index.scores(question)[rows].astype(np.float64)
    order = np.lexsort((rows, -scores))[:k]  # best first, equal scores by row
    return scores[order], rows[order]


def test_bm25_filtered_top_k_is_brute_force_over_the_matches(flat):
    retriever = BM25Retriever(flat, progress=False)
    questions = [words(i) for i in (0, 5, 17, 30)]
    for where in FILTERS:
        rows, _ = matching(flat, where)
        for k in (1, 3, len(rows)):
            scores, ids = retriever.search(questions, k, where=where)
            for b, question in enumerate(questions):
                expected_scores, expected_ids = brute_bm25(flat, rows, question, k)
                np.testing.assert_array_equal(ids[b], expected_ids)
                np.testing.assert_allclose(scores[b], expected_scores, rtol=1e-6)


def test_hybrid_fuses_the_filtered_lists(flat):
    dense = DenseRetriever(flat, lambda questions: queries(len(questions)))
    hybrid = HybridRetriever(flat, [dense, BM25Retriever(flat, progress=False)], depth=10)
    questions = [words(i) for i in range(len(queries()))]
    for where in FILTERS:
        rows, _ = matching(flat, where)
        k = min(3, len(rows))
        fetch = min(10, len(rows))
        dense_ids = brute_dense(flat, rows, queries(), fetch)[1]
        bm25_ids = np.stack([brute_bm25(flat, rows, q, fetch)[1] for q in questions])
        expected_scores, expected_ids = reciprocal_rank_fusion([dense_ids, bm25_ids], k)
        scores, ids = hybrid.search(questions, k, where=where)
        np.testing.assert_array_equal(ids, expected_ids)
        np.testing.assert_allclose(scores, expected_scores)
        assert set(ids.reshape(-1)) <= set(rows)


@pytest.mark.parametrize("num_shards, on_ray", [(2, False), (3, False), (3, True)])
def test_sharded_filtered_top_k_is_brute_force_over_the_matches(flat, tmp_path, request, num_shards, on_ray):
    out = shard_knowledge_base(flat.path, num_shards, tmp_path / "sharded")
    if on_ray:  # the shards served by Ray actors: the same calls, sent to them
        request.getfixturevalue("ray_local")
    sharded = ShardedKnowledgeBase.load(out, ray_address="local" if on_ray else None)
    try:
        # metadata survives the split
        assert {p.id: p.meta for p in sharded} == {p.id: p.meta for p in flat}
        q = queries()
        for where in FILTERS:
            rows, _ = matching(flat, where)
            assert sharded.count_matching(where) == len(rows)
            for k in (1, 4, len(rows)):
                scores, ids = sharded.search(q, k, where=where)
                expected_scores, expected_ids = brute_dense(flat, rows, q, k)
                got = [[p.id for p in row] for row in sharded.passages(ids)]
                assert got == [[p.id for p in row] for row in flat.passages(expected_ids)]
                np.testing.assert_allclose(scores, expected_scores, **dot_tolerance(q, flat.embeddings))
        with pytest.raises(InputError, match="matches the filter"):
            sharded.search(q, 3, where=parse_where(["source=nowhere"]))
    finally:
        sharded.close()


def test_filters_see_the_knowledge_base_at_its_version(tmp_path):
    kb = build(tmp_path / "kb", PASSAGES, encode=encode)
    where = parse_where(["source=dir1/file1.md"])
    before, _ = matching(kb, where)
    VECTORS["late"] = np.ones(DIM, dtype=np.float32)
    kb.add([Passage("late", "t", "late passage", {"source": "dir1/file1.md"})], encode)
    kb.delete([PASSAGES[int(before[0])].id])
    after = kb.matching_rows(where)
    assert len(after) == len(before) and int(before[0]) not in after and kb.lookup("late")[0] in after
    old = kb.at_version(1)
    np.testing.assert_array_equal(old.matching_rows(where), before)
    old.close()


# -- parsing -------------------------------------------------------------------------------------------


def test_the_command_line_syntax():
    where = parse_where(["source=a.md", "section^=Intro", "modified>=2026-01-01", "page<=3", "draft=true"])
    assert where.conditions == (
        Condition("source", "eq", ("a.md",)), Condition("section", "prefix", ("Intro",)),
        Condition("modified", "gte", ("2026-01-01",)), Condition("page", "lte", (3,)),
        Condition("draft", "eq", (True, "true")))
    assert where.describe() == "source=a.md AND section^=Intro AND modified>=2026-01-01 AND page<=3 AND draft=true"
    assert parse_where([]) is None and parse_where(None) is None
    page = parse_where(["page=3"])  # the number 3 or the text "3"
    assert page.matches({"page": 3}) and page.matches({"page": "3"}) and not page.matches({"page": 4})
    assert not page.matches({"page": True}) and not page.matches(None) and not page.matches({})
    huge = parse_where(["id=100000000000000000000", "score<=1e999"])  # beyond int64 is a number; inf is text
    assert huge.conditions == (Condition("id", "eq", (10 ** 20, "100000000000000000000")),
                               Condition("score", "lte", ("1e999",)))


def test_the_json_syntax_is_the_same_filter():
    assert parse_filter({"source": "a.md", "modified": {"gte": "2026-01-01", "lte": "2026-12-31"},
                         "section": {"prefix": "Intro"}}) == Filter((
        Condition("source", "eq", ("a.md",)), Condition("modified", "gte", ("2026-01-01",)),
        Condition("modified", "lte", ("2026-12-31",)), Condition("section", "prefix", ("Intro",))))
    assert parse_filter({}) is None and parse_filter(None) is None
    assert as_filter({"page": 2}) == Filter((Condition("page", "eq", (2,)),))
    assert as_filter("page>=2") == as_filter(["page>=2"]) == parse_where(["page>=2"])


def test_ranges_compare_numbers_as_numbers_and_dates_as_text():
    assert parse_where(["page>=10"]).matches({"page": 12}) and not parse_where(["page>=10"]).matches({"page": 9})
    assert not parse_where(["page>=10"]).matches({"page": "12"})  # text is not a number
    dates = parse_where(["modified>=2026-02-01", "modified<=2026-03-01T00:00:00Z"])
    assert dates.matches({"modified": "2026-02-15T08:00:00Z"}) and not dates.matches({"modified": "2026-03-02"})


@pytest.mark.parametrize("expression, message", [
    ("source", "expected FIELD=VALUE"),
    ("source!=a", "unknown operator '!='"),
    ("page>3", "unknown operator '>3'"),
    ("page~=3", "unknown operator"),
    ("=a", "field '' must be"),
    ("bad field=a", "field 'bad field' must be"),
    ('a"b=1', "must be letters"),
    ("page>=", "no value after >="),
])
def test_bad_command_line_filters_are_one_line_errors(expression, message):
    with pytest.raises(InputError, match=message) as error:
        parse_where([expression])
    assert str(error.value).startswith(f"--where {expression!r}") and "\n" not in str(error.value)


@pytest.mark.parametrize("spec, message", [
    ([1], "filter: must be an object"),
    ({"page": {"gt": 3}}, "filter.page: unknown operator 'gt'"),
    ({"page": {}}, "filter.page: give at least one of"),
    ({"page": [1, 2]}, "filter.page.eq: the value must be"),
    ({"page": {"gte": True}}, "filter.page.gte: a bound must be"),
    ({"source": {"prefix": 3}}, "filter.source.prefix: a prefix must be a string"),
    ({"page": {"lte": float("nan")}}, "filter.page.lte: the value must be a finite number"),
    ({"a.b": 1}, "filter.a.b: field 'a.b' must be"),
])
def test_bad_json_filters_name_the_field(spec, message):
    with pytest.raises(InputError, match=message.replace(".", r"\.").replace("[", r"\[")):
        parse_filter(spec)
