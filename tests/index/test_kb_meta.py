"""Passage metadata in the passage store: kept through build (and its compaction), add, update, delete,
versions and shard splits; refused when it cannot be stored; older knowledge bases without the column."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from openbook.corpus import Passage
from openbook.corpus.readers import RecordErrors
from openbook.corpus.readers.files import sha256_file
from openbook.errors import InputError
from openbook.index import KnowledgeBase, ShardedKnowledgeBase
from openbook.index.filters import parse_where
from openbook.index.sharded import shard_knowledge_base
from openbook.index.store import PassageStore
from openbook.index.store_meta import MAX_META_CHARS
from tiny_kb import build, corpus, encode

META = {"source": "guide/a.md", "type": "markdown", "page": 2, "section": "Intro > Setup",
        "modified": "2026-11-27T12:00:00Z", "score": 0.25, "public": True, "émoji": "☃"}


def passages(n: int = 9) -> list[Passage]:
    return [Passage(p.id, p.title, p.text, None if i == 0 else {**META, "page": i}) for i, p in enumerate(corpus(n))]


def metas(kb) -> dict[str, dict | None]:
    return {p.id: p.meta for p in kb}


def test_metadata_round_trips_through_build_add_update_and_versions(tmp_path):
    given = passages()
    kb = build(tmp_path / "kb", given)
    assert metas(kb) == {p.id: p.meta for p in given}
    assert kb[1].meta == {**META, "page": 1} and kb[0].meta is None
    assert kb.passages([2])[0].meta == {**META, "page": 2}

    kb.add([Passage("new", "t", "paris moon", {"source": "b.md"})], encode)
    assert kb.lookup("new")[1].meta == {"source": "b.md"}
    kb.update([{"id": given[3].id, "text": "new text"}], encode)  # metadata kept
    assert kb.lookup(given[3].id)[1].meta == given[3].meta
    kb.update([Passage(given[4].id, "t", "other text", {"source": "c.md"})], encode)  # metadata replaced
    assert kb.lookup(given[4].id)[1].meta == {"source": "c.md"}
    kb.update([{"id": given[5].id, "text": "third", "meta": {"source": "d.md"}}], encode)
    assert kb.lookup(given[5].id)[1].meta == {"source": "d.md"}
    kb.update([{"id": given[6].id, "text": "fourth", "set_meta": {"lang": "en", "page": 60}}], encode)  # fields set
    assert kb.lookup(given[6].id)[1].meta == {**given[6].meta, "lang": "en", "page": 60}
    kb.update([{"id": given[0].id, "text": "fifth", "set_meta": {"lang": "en"}}], encode)  # it had none
    assert kb.lookup(given[0].id)[1].meta == {"lang": "en"}
    with pytest.raises(InputError, match="give 'meta' .* or 'set_meta' .*, not both"):
        kb.update([{"id": given[7].id, "text": "x", "meta": {}, "set_meta": {"lang": "en"}}], encode)
    with pytest.raises(InputError, match="metadata field 'lang' must be a string, number or boolean"):
        kb.update([{"id": given[7].id, "text": "x", "set_meta": {"lang": ["en"]}}], encode)
    old = kb.at_version(1)
    assert metas(old) == {p.id: p.meta for p in given}
    old.close()
    reopened = KnowledgeBase.load(kb.path)
    assert reopened.lookup("new")[1].meta == {"source": "b.md"}
    reopened.close()


def test_a_resumed_build_keeps_metadata(tmp_path):
    """A resumed build compares the stored passages (metadata included) with the input, then compacts."""
    given = passages(12)
    calls = {"n": 0}

    def failing(batch):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return encode(batch)

    with pytest.raises(KeyboardInterrupt):
        build(tmp_path / "kb", given, encode=failing, resume=True)
    kb = build(tmp_path / "kb", given, resume=True)
    assert metas(kb) == {p.id: p.meta for p in given}


def test_a_resumed_build_keeps_its_vectors_when_only_metadata_changed(tmp_path):
    """Files touched after a crash (their ``modified`` moved; the texts the same) are not encoded again: the
    stored passages take the new metadata and the build goes on."""
    given = passages(12)
    calls: list[int] = []

    def failing(batch):
        calls.append(len(batch))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return encode(batch)

    with pytest.raises(KeyboardInterrupt):
        build(tmp_path / "kb", given, encode=failing, batch_size=4, resume=True)
    touched = [Passage(p.id, p.title, p.text, {**(p.meta or {}), "modified": "2026-11-28T00:00:00Z"}) for p in given]
    resumed: list[int] = []

    def counting(batch):
        resumed.append(len(batch))
        return encode(batch)

    kb = build(tmp_path / "kb", touched, encode=counting, batch_size=4, resume=True)
    assert sum(resumed) == 12 - 8  # the two batches encoded before the crash were kept
    assert metas(kb) == {p.id: p.meta for p in touched}
    np.testing.assert_array_equal(kb.embeddings, build(tmp_path / "clean", touched, batch_size=4).embeddings)


def test_metadata_survives_a_shard_split_and_sharded_edits(tmp_path):
    kb = build(tmp_path / "kb", passages(10))
    out = shard_knowledge_base(kb.path, 3, tmp_path / "sharded")
    sharded = ShardedKnowledgeBase.load(out)
    try:
        assert metas(sharded) == metas(kb)
        sharded.add([Passage("new", "t", "paris", {"source": "new.md"})], encode)
        sharded.update([{"id": "doc:2", "text": "changed"}], encode)
        assert sharded.lookup("new")[1].meta == {"source": "new.md"}
        assert sharded.lookup("doc:2")[1].meta == kb.lookup("doc:2")[1].meta
        assert sharded.count_matching(parse_where(["source=new.md"])) == 1
    finally:
        sharded.close()


@pytest.mark.parametrize("meta, message", [
    ({"a": [1, 2]}, "metadata field 'a' must be a string, number or boolean"),
    ({"a": None}, "metadata field 'a' must be a string"),
    ({"a": float("inf")}, "metadata field 'a' must be a finite number"),
    ({"": 1}, "metadata key '' must be"),
    ({"a": "x" * MAX_META_CHARS}, f"metadata is {MAX_META_CHARS + 8} characters of JSON, above the limit of {MAX_META_CHARS}"),
])
def test_metadata_that_cannot_be_stored_is_a_bad_record(tmp_path, meta, message):
    given = [*passages(3), Passage("bad", "t", "text", meta)]
    with pytest.raises(InputError, match=f"passage 'bad': {message}"):
        build(tmp_path / "kb", given)
    errors = RecordErrors("skip")
    kb = build(tmp_path / "skipped", given, on_error=errors)
    assert len(kb) == 3 and errors.skipped == 1


def old_knowledge_base(tmp_path) -> KnowledgeBase:
    """A knowledge base whose passage store predates the metadata column (its manifest updated to match)."""
    kb = build(tmp_path / "kb", corpus(8))
    kb.close()
    store = kb.path / "passages.sqlite"
    db = sqlite3.connect(store)
    db.execute("ALTER TABLE passages DROP COLUMN meta")
    db.execute("VACUUM")
    db.close()
    manifest = json.loads((kb.path / "manifest.json").read_text())
    manifest["files"]["passages.sqlite"] = {"bytes": store.stat().st_size, "sha256": sha256_file(store)}
    (kb.path / "manifest.json").write_text(json.dumps(manifest))
    return KnowledgeBase.load(kb.path)


def test_an_older_knowledge_base_opens_read_only_and_gains_the_column_at_its_first_edit(tmp_path):
    kb = old_knowledge_base(tmp_path)
    store = kb.path / "passages.sqlite"
    before = store.read_bytes()
    assert not kb.store.has_meta and all(p.meta is None for p in kb)
    scores, rows = kb.search(np.ones((1, kb.dim), dtype=np.float32), 3)
    assert rows.shape == (1, 3)
    with pytest.raises(InputError, match="no passage of knowledge base .* matches the filter source=a.md"):
        kb.search(np.ones((1, kb.dim), dtype=np.float32), 3, where=parse_where(["source=a.md"]))
    assert store.read_bytes() == before  # reading changed nothing

    kb.add([Passage("plain", "t", "no metadata")], encode)  # no metadata: the store keeps its old columns
    assert not PassageStore.open(store).has_meta
    kb.add([Passage("new", "t", "paris", {"source": "a.md"})], encode)
    assert kb.store.has_meta and kb.lookup("new")[1].meta == {"source": "a.md"}
    assert kb.count_matching(parse_where(["source=a.md"])) == 1
    assert kb.lookup("doc:1")[1].meta is None
