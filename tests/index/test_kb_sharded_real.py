"""Sharding on real vectors (issue 32 item 6): a knowledge base of real Wikipedia passages (the first
WikiExtractor file of ../shared/data/wikipedia-2015-core) encoded by the offline default encoder, split by
``kb shard`` into 2 and 3 shards served by Ray actors, returns the unsharded book's top k for real NQ
questions: the same rows in the same order, at k=5 and k=100, one question at a time and in a batch.

Real Wikipedia repeats passages (the same text in two articles), and equal vectors tie exactly; the book
here also holds a copy of the passages ranked 4th-6th and 99th-101st for each question, so equal scores
sit inside the top k and straddle its cut, where the rule of openbook.index.topk decides which rows are
kept. Needs the shared data folder (skipped without it) and loads the real encoder (slow)."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from openbook.corpus import Passage
from openbook.index import KnowledgeBase, ShardedKnowledgeBase
from openbook.index.sharded import shard_knowledge_base
from ray_fixture import ray_local  # noqa: F401
from tolerance import dot_tolerance

DATA = next((p for p in (Path(__file__).resolve().parents[3] / "shared" / "data", Path("/work/shared/data"))
             if (p / "wikipedia-2015-core").is_dir()), None)
PASSAGES = 800  # of AA/wiki_00.gz: encoding them is most of this test's time
QUESTIONS = 40
COPIED_RANKS = (3, 4, 5, 98, 99, 100)  # 0-based: around the 5th and the 100th place
KS = (5, 100)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(DATA is None, reason="needs ../shared/data/wikipedia-2015-core")]


def nq_questions() -> list[str]:
    with gzip.open(DATA / "nq-open-oracle.dev-split.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line)["question"] for line in itertools.islice(fh, QUESTIONS)]


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> tuple[KnowledgeBase, np.ndarray]:
    """(the book, the questions' vectors): real passages, then a copy of those around the cuts."""
    from openbook.corpus import iter_source_passages
    from openbook.models import load_encoder
    from openbook.models.knowledge import build_knowledge_base

    root = tmp_path_factory.mktemp("real")
    encoder = load_encoder("default")
    source = iter_source_passages([DATA / "wikipedia-2015-core" / "AA" / "wiki_00.gz"])
    real = build_knowledge_base([item.passage for item in itertools.islice(source, PASSAGES)], encoder,
                                root / "real", progress=False)
    queries = encoder.encode_queries(nq_questions())
    order = np.argsort(-(queries @ np.asarray(real.embeddings, np.float32).T), axis=1, kind="stable")
    copied = sorted({int(row) for row in order[:, COPIED_RANKS].ravel()})
    passages = list(real) + [Passage(f"copy:{p.id}", p.title, p.text, p.meta) for p in real.passages(copied)]
    vectors = np.concatenate([real.embeddings, real.embeddings[copied]])
    rows = {p.id: i for i, p in enumerate(passages)}
    whole = KnowledgeBase.build(passages, lambda batch: vectors[[rows[p.id] for p in batch]], real.manifest["encoder"],
                                root / "book", progress=False)
    real.close()
    yield whole, queries
    whole.close()


def test_the_book_is_real_and_ties_straddle_the_cuts(book):
    whole, queries = book
    assert len(whole) > PASSAGES and whole.dim == 384 and whole.manifest["index"]["type"] == "flat"
    assert whole[0].title == "Anarchism" and whole[0].meta["page_id"] == "12"
    scores, _ = whole.search(queries, max(KS) + 1)
    assert (np.diff(scores[:, :5], axis=1) == 0).any()  # equal scores inside the top 5
    for k in KS:
        assert (scores[:, k - 1] == scores[:, k]).any()  # and at the k-th place, for some questions


@pytest.mark.parametrize("num_shards", [2, 3])
def test_ray_shards_return_the_unsharded_top_k_on_real_vectors(book, tmp_path, ray_local, num_shards):  # noqa: F811
    whole, queries = book
    sharded = ShardedKnowledgeBase.load(shard_knowledge_base(whole.path, num_shards, tmp_path / "s"),
                                        ray_address="local")
    vectors = np.asarray(whole.embeddings, np.float64)
    tolerance = dot_tolerance(queries, vectors)
    try:
        assert len(sharded) == len(whole)
        for k in KS:
            for batch in (queries, *queries[:8, None]):  # all questions at once, then one at a time
                scores, rows = whole.search(batch, k)
                got_scores, got_rows = sharded.search(batch, k)
                assert got_rows.tolist() == rows.tolist(), (num_shards, k)
                np.testing.assert_allclose(got_scores, scores, **tolerance)
                # and both are the dot products (no drift from the exact value beyond float32 rounding)
                exact = np.einsum("qd,qkd->qk", np.asarray(batch, np.float64), vectors[got_rows])
                np.testing.assert_allclose(got_scores, exact, **tolerance)
            _, rows = whole.search(queries[:3], k)
            assert sharded.passages(rows[0]) == whole.passages(rows[0])
    finally:
        sharded.close()
