"""Editing a knowledge base without rebuilding it: add, update, delete, versions, ``use``, crash safety,
and the RAG model seeing each change on its next question."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

import openbook.index.kb.edit as kb_module
from openbook.corpus import Passage, RecordErrors, SourcePassage
from openbook.errors import InputError, KnowledgeBaseError
from openbook.index import KnowledgeBase
from openbook.index.kb import MANIFEST_FILE, add_passages, delete_passages, read_manifest, update_passages, use_version
from tiny_kb import Crash, build, corpus, crashing_encoder, encode, hashed_bow

NEW = Passage("new:1", "Volcano", "a volcano erupts lava and ash near the village")


@pytest.fixture
def kb(tmp_path) -> KnowledgeBase:
    return build(tmp_path / "kb", corpus(12))


def top_ids(kb: KnowledgeBase, text: str, k: int = 1) -> list[str]:
    _, rows = kb.search(hashed_bow([text]), k)
    return [p.id for p in kb.passages(rows[0])]


def test_add_creates_a_version_and_is_searchable(kb):
    version = kb.add([NEW], encode)
    assert version == 2 == kb.version == kb.latest_version and len(kb) == 13 and kb.num_rows == 13
    assert top_ids(kb, NEW.text) == ["new:1"]
    assert kb.lookup("new:1") == (12, NEW)
    entry = kb.versions[-1]
    assert entry["added"] == 1 and entry["deleted"] == 0 and entry["description"] == "add 1 passage"
    assert list(kb)[-1] == NEW
    np.testing.assert_array_equal(kb.embeddings[12], encode([NEW])[0])
    reloaded = KnowledgeBase.load(kb.path, verify="full")  # checksums of the new segment, store and index
    assert len(reloaded) == 13 and reloaded.manifest["index"]["file"] == "index.v2.faiss"
    assert sorted(p.name for p in kb.path.glob("index*.faiss")) == ["index.v2.faiss"]  # old index removed
    old = KnowledgeBase.load(kb.path, version=1)
    assert len(old) == 12 and "new:1" not in top_ids(old, NEW.text, k=12) and old.lookup("new:1") is None


def test_delete_hides_and_use_restores(kb):
    target = corpus(12)[5]
    assert top_ids(kb, target.text) == [target.id]
    assert kb.delete([target.id]) == 2
    assert len(kb) == 11 and target.id not in top_ids(kb, target.text, k=11)
    assert target not in list(kb) and kb.lookup(target.id) is None
    with pytest.warns(UserWarning, match="only 11"):
        kb.search(hashed_bow([target.text]), 12)
    kb.use_version(1)  # restore the old knowledge
    assert kb.version == 1 == read_manifest(kb.path)["current_version"]
    assert top_ids(kb, target.text) == [target.id] and len(kb) == 12
    assert len(KnowledgeBase.load(kb.path)) == 12  # the choice is persistent
    kb.use_version(2)
    assert len(kb) == 11


def test_update_replaces_text_but_keeps_old_versions(kb):
    target = corpus(12)[3]
    kb.update([{"id": target.id, "text": "now about a volcano erupting lava"}], encode)
    row, passage = kb.lookup(target.id)
    assert row == 12 and passage == Passage(target.id, target.title, "now about a volcano erupting lava")
    assert len(kb) == 12 and kb.versions[-1]["added"] == 1 and kb.versions[-1]["deleted"] == 1
    assert top_ids(kb, "volcano erupting lava") == [target.id]
    assert kb.passages(kb.search(hashed_bow([target.text]), 12)[1][0]).count(target) == 0
    old = KnowledgeBase.load(kb.path, version=1)
    assert old.lookup(target.id) == (3, target)
    kb.update([Passage(target.id, "Renamed", "second edit")], encode)
    assert kb.lookup(target.id)[1] == Passage(target.id, "Renamed", "second edit")
    assert KnowledgeBase.load(kb.path, version=2).lookup(target.id)[1].text == "now about a volcano erupting lava"


def test_edit_errors_change_nothing(kb):
    before = read_manifest(kb.path)
    with pytest.raises(InputError, match="has no passage 'nope'; nothing was deleted"):
        kb.delete(["doc:1", "nope"])
    with pytest.raises(InputError, match="has no passage 'ghost'; use `openbook kb add`"):
        kb.update([{"id": "ghost", "text": "x"}], encode)
    with pytest.raises(InputError, match="updated twice"):
        kb.update([{"id": "doc:1", "text": "x"}, {"id": "doc:1", "text": "y"}], encode)
    with pytest.raises(InputError, match="needs the new 'text'"):
        kb.update([{"id": "doc:1"}], encode)
    with pytest.raises(InputError, match="no passage ids"):
        kb.delete([])
    assert read_manifest(kb.path) == before


def test_add_duplicate_id_stops_or_skips(kb):
    items = [SourcePassage("more.jsonl:1", NEW), SourcePassage("more.jsonl:2", Passage("doc:4", "", "dup"))]
    with pytest.raises(InputError, match="more.jsonl:2: duplicate passage id 'doc:4'"):
        add_passages(kb.path, items, encode, batch_size=1)
    manifest = read_manifest(kb.path)
    assert manifest["latest_version"] == 1 and "pending_edit" not in manifest  # rolled back at once
    fresh = KnowledgeBase.load(kb.path, verify="full")
    assert fresh.store.num_rows() == 12 and (kb.path / "embeddings.npy").stat().st_size == manifest["files"][
        "embeddings.npy"]["bytes"]
    errors = RecordErrors("skip")
    assert add_passages(kb.path, items, encode, on_error=errors) == 2
    assert errors.skipped == 1 and len(KnowledgeBase.load(kb.path)) == 13
    assert "1 records skipped" in read_manifest(kb.path)["versions"][-1]["description"]


def test_edits_need_the_latest_version(kb):
    kb.delete(["doc:0"])
    kb.use_version(1)
    with pytest.raises(KnowledgeBaseError, match="at version 1 but the latest is 2.*kb use .* 2"):
        kb.add([NEW], encode)
    with pytest.raises(InputError, match="versions 1..2, not 3"):
        use_version(kb.path, 3)


def test_failed_edit_is_rolled_back(kb):
    more = corpus(10, "more")
    with pytest.raises(Crash):
        kb.add(more, crashing_encoder(3, []), batch_size=2)  # two batches written, then a crash
    manifest = read_manifest(kb.path)
    assert manifest["latest_version"] == 1 and "pending_edit" not in manifest
    fresh = KnowledgeBase.load(kb.path, verify="full")
    assert fresh.store.num_rows() == 12 and len(fresh) == 12
    assert kb.add(more, encode) == 2 and len(kb) == 22


def test_killed_edit_leaves_previous_version_usable(kb, monkeypatch):
    """A killed process cannot clean up: simulate it by disabling the rollback."""
    before = read_manifest(kb.path)
    real_recover = kb_module._recover
    monkeypatch.setattr(kb_module, "_recover", lambda *args: None)
    with pytest.raises(Crash):  # killed after two batches of new rows were committed
        add_passages(kb.path, corpus(10, "more"), crashing_encoder(3, []), batch_size=2)
    monkeypatch.undo()
    manifest = read_manifest(kb.path)
    assert "pending_edit" in manifest and manifest["latest_version"] == 1
    left = KnowledgeBase.load(kb.path)  # "auto" verification passes; the extra rows are invisible
    assert left.store.num_rows() == 16 and len(left) == 12 and list(left) == corpus(12)
    assert set(left.search(hashed_bow(["more"]), 12)[1][0]) == set(range(12))
    calls = []

    def recover_only_at_start(*args):  # the next edit cleans up, then is killed after marking a deletion
        calls.append(1)
        return real_recover(*args) if len(calls) == 1 else None

    monkeypatch.setattr(kb_module, "_recover", recover_only_at_start)
    with pytest.raises(Crash):
        update_passages(kb.path, [{"id": "doc:1", "text": "edited"}], crashing_encoder(1, []))
    monkeypatch.undo()
    left = KnowledgeBase.load(kb.path)
    assert "pending_edit" in left.manifest and left.store.num_rows() == 12
    assert left.store.row_info(1) == (1, 2)  # marked deleted in the unfinished version 2 ...
    assert left.lookup("doc:1") == (1, corpus(12)[1]) and len(left) == 12  # ... which does not exist yet
    # The next edit cleans up first; row ids stay aligned with the vectors.
    assert delete_passages(kb.path, ["doc:0"]) == 2
    after = KnowledgeBase.load(kb.path, verify="full")
    assert after.store.num_rows() == 12 and len(after) == 11 and "pending_edit" not in after.manifest
    assert after.manifest["files"]["embeddings.npy"] == before["files"]["embeddings.npy"]
    assert add_passages(kb.path, [NEW], encode) == 3
    assert top_ids(KnowledgeBase.load(kb.path), NEW.text) == ["new:1"]


def test_concurrent_edits_are_refused(kb):
    with kb_module._locked(kb.path / kb_module.LOCK_FILE, "x"):
        with pytest.raises(KnowledgeBaseError, match="busy"):
            delete_passages(kb.path, ["doc:1"])


def test_versions_record_counts(kb):
    kb.add(corpus(3, "a"), encode, description="three more")
    kb.delete(["a:0", "doc:0"])
    kb.update([{"id": "a:1", "text": "changed"}], encode)
    versions = read_manifest(kb.path)["versions"]
    assert [(v["version"], v["num_passages"], v["num_rows"]) for v in versions] == [
        (1, 12, 12), (2, 15, 15), (3, 13, 15), (4, 13, 16)]
    assert versions[1]["description"] == "three more"
    assert versions[2]["description"] == "delete 2 passages: 'a:0', 'doc:0'"
    assert versions[3]["description"] == "update 1 passage: 'a:1'"
    for version, count in [(1, 12), (2, 15), (3, 13), (4, 13)]:
        loaded = KnowledgeBase.load(kb.path, version=version)
        assert len(loaded) == count == len(list(loaded))
    manifest = json.loads((kb.path / MANIFEST_FILE).read_text())
    assert manifest["num_passages"] == 13 and manifest["current_version"] == 4


# -- the RAG model sees each change on its next question -----------------------------------------------


@pytest.fixture(scope="module")
def tiny_parts():
    from openbook.models.generators import Seq2SeqGenerator
    from tiny import bart_tokenizer, tiny_bart, tiny_encoder

    tok = bart_tokenizer()
    return tiny_encoder(), Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=3), tok)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_rag_sees_edits_on_the_next_question(tmp_path, tiny_parts, dtype):
    from openbook.rag import RAG
    from openbook.rag.assemble import build_knowledge_base

    encoder, generator = tiny_parts
    passages = [Passage(f"p{i}", title, text) for i, (title, text) in enumerate([
        ("Paris", "paris is the capital of france"), ("Hamlet", "hamlet is a tragedy by shakespeare"),
        ("Nobel", "the first nobel prize in physics"), ("Ocean", "the pacific is the largest ocean"),
    ])]
    kb = build_knowledge_base(passages, encoder, tmp_path / "kb", progress=False, dtype=dtype, batch_size=2)
    assert kb.embeddings.dtype == np.dtype(dtype)
    rag = RAG(encoder, generator, kb, k=4)
    question = "who wrote the play hamlet"

    def retrieved_ids() -> set[str]:
        retrieval = rag.retrieve([question], k=len(rag.kb))
        assert retrieval.scores.dtype == torch.float32  # float16 vectors are upcast
        return {p.id for p in retrieval.passages[0]}

    assert retrieved_ids() == {"p0", "p1", "p2", "p3"}
    new = Passage("p9", "Music", "the king wrote music about the river")
    kb.add([new], lambda batch: encoder.encode_passages(batch))
    assert "p9" in retrieved_ids() and len(rag.kb) == 5
    kb.delete(["p1"])
    assert retrieved_ids() == {"p0", "p2", "p3", "p9"}
    kb.use_version(1)
    assert retrieved_ids() == {"p0", "p1", "p2", "p3"}
    answers = rag.ask([question], k=2, num_beams=1, max_new_tokens=3)
    assert len(answers[0].passages) == 2
    # An edit made by another process is seen after swapping in the reloaded knowledge base.
    kb.use_version(3)
    other = KnowledgeBase.load(kb.path)
    delete_passages(kb.path, ["p9"])
    rag.use_knowledge_base(KnowledgeBase.load(kb.path, expected_encoder=encoder.info()))
    assert retrieved_ids() == {"p0", "p2", "p3"} and len(other) == 4


@pytest.mark.parametrize("index_type, params", [("ivfpq", {"nlist": 8, "m": 4, "nbits": 4, "nprobe": 1}),
                                                 ("hnsw", {"M": 4, "ef_search": 4})])
def test_search_never_returns_hidden_rows_from_approximate_indexes(tmp_path, index_type, params):
    passages = corpus(200)
    kb = build(tmp_path / "kb", passages, batch_size=50, index_type=index_type, index_params=params)
    deleted = [p.id for p in passages[:190]]
    kb.delete(deleted)
    assert len(kb) == 10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an approximate index may find fewer than k (then it says so)
        scores, rows = kb.search(hashed_bow([p.text for p in passages[:5]]), 5)
    assert (rows >= 190).all() and np.isfinite(scores).all()
    assert rows.shape[0] == 5 and 1 <= rows.shape[1] <= 5

