"""The BM25 cache of a knowledge base is used without reading its rows while the passage store is the one the
manifest records (a book's hundreds of thousands of passages are not read into Python at each load); the rows are
read, and compared, only when the store changed, and a replaced knowledge base gets a new index."""

from __future__ import annotations

import json

import numpy as np
import pytest

from openbook.index import KnowledgeBase
from openbook.index.bm25 import BM25_CACHE_DIR, META_FILE, BM25Index, knowledge_base_bm25, knowledge_base_rows
from openbook.index.store import PassageStore
from tiny_kb import build, corpus, encode


@pytest.fixture
def no_row_reads(monkeypatch):
    """Reading a passage from a store, or building a BM25 index, fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the passages were read")

    def no_build(*args, **kwargs):
        raise AssertionError("the BM25 index was rebuilt")

    with monkeypatch.context() as patch:
        for name in ("iter_rows", "get"):
            patch.setattr(PassageStore, name, refuse)
        patch.setattr(BM25Index, "build", no_build)
        yield


def test_a_cached_index_is_used_without_reading_the_rows(tmp_path, request):
    kb = build(tmp_path / "kb", corpus(30))
    built, exclude = knowledge_base_bm25(kb)
    assert exclude is None
    kb.close()
    reloaded = KnowledgeBase.load(tmp_path / "kb")
    request.getfixturevalue("no_row_reads")
    index, exclude = knowledge_base_bm25(reloaded)
    assert len(index) == 30 and exclude is None
    assert index.search(["number7"], 1)[1].tolist() == built.search(["number7"], 1)[1].tolist()
    recorded = json.loads((tmp_path / "kb" / BM25_CACHE_DIR / META_FILE).read_text())["source"]
    assert recorded["store"] == reloaded.rows_key == {
        "sha256": reloaded.manifest["files"]["passages.sqlite"]["sha256"], "num_rows": 30}
    reloaded.close()


def test_after_an_edit_the_rows_are_compared_once_then_the_cache_is_used_again(tmp_path, monkeypatch):
    kb = build(tmp_path / "kb", corpus(20))
    knowledge_base_bm25(kb)
    kb.delete(["doc:3"])  # the store changes, its rows do not: the cache still fits
    kb.add(corpus(2, prefix="new"), encode)  # two rows past the index: it is rebuilt for all 22
    index, exclude = knowledge_base_bm25(kb)
    assert len(index) == 22 and exclude.tolist() == [3]

    kb.delete(["doc:5"])
    with monkeypatch.context() as patch:
        patch.setattr(BM25Index, "build", lambda *a, **k: pytest.fail("rebuilt although the rows are the same"))
        index, exclude = knowledge_base_bm25(kb)  # reads and compares the rows, records the new store
    assert len(index) == 22 and exclude.tolist() == [3, 5]
    slow = knowledge_base_rows(kb)[1]
    with monkeypatch.context() as patch:
        patch.setattr(PassageStore, "iter_rows", lambda *a, **k: pytest.fail("the passages were read"))
        patch.setattr(PassageStore, "get", lambda *a, **k: pytest.fail("the passages were read"))
        _, exclude = knowledge_base_bm25(kb)
        assert exclude.tolist() == slow.tolist() == [3, 5]
        older = kb.at_version(2)  # before the new rows and the second deletion
        _, exclude = knowledge_base_bm25(older)
        assert exclude.tolist() == [3, 20, 21]
    assert np.array_equal(older.excluded_rows, knowledge_base_rows(older)[1])
    older.close()
    kb.close()


def test_a_replaced_knowledge_base_gets_a_new_index(tmp_path):
    kb = build(tmp_path / "kb", corpus(12))
    knowledge_base_bm25(kb)
    kb.close()
    other = build(tmp_path / "kb", corpus(12, prefix="other"), replace=True)  # the same number of rows
    index, _ = knowledge_base_bm25(other)
    (row,) = index.search(["number4"], 1)[1][0]
    assert other.passages([row])[0].id == "other:4"
    assert index.source["store"] == other.rows_key
    other.close()
