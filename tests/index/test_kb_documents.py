"""Documents of a knowledge base: every passage read from a file knows its document (the path relative to the
folder given, however it is given), stored in the knowledge base; sync with a folder, delete and list documents."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import numpy as np
import pytest

from openbook.corpus import iter_source_passages
from openbook.errors import InputError
from openbook.index import KnowledgeBase
from openbook.index.kb import delete_document, list_documents, read_manifest, sync_documents

DIM = 16


def encode(batch) -> np.ndarray:
    """A hashed bag of words: enough to tell the tiny documents apart, no model."""
    vectors = np.zeros((len(batch), DIM), dtype=np.float32)
    for i, passage in enumerate(batch):
        for word in f"{passage.title} {passage.text}".split():
            vectors[i, int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-6)


INFO = {"name": "test/hashed-bow", "dim": DIM}


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "notes"
    (root / "guide").mkdir(parents=True)
    (root / "intro.md").write_text("# Intro\n\nthe ocean is large and deep", encoding="utf-8")
    (root / "guide" / "moon.txt").write_text("the moon orbits the earth", encoding="utf-8")
    (root / "guide" / "long.txt").write_text(" ".join(f"w{i}" for i in range(25)), encoding="utf-8")
    return root


def documents_of(sources, **kwargs) -> dict[str, str]:
    return {item.passage.id: (item.document, item.document_sha256) for item in iter_source_passages(sources, **kwargs)}


def build(folder, out) -> KnowledgeBase:
    return KnowledgeBase.build(lambda: iter_source_passages([folder], max_words=10), encode, INFO, out, progress=False)


def test_a_passage_names_its_document_however_the_folder_is_given(folder, tmp_path, monkeypatch):
    link = tmp_path / "link"
    link.symlink_to(folder)
    monkeypatch.chdir(tmp_path)
    seen = [documents_of([given], max_words=10) for given in (folder, "notes", "notes/", "./notes", link, "link/")]
    assert all(found == seen[0] for found in seen)
    sha = hashlib.sha256((folder / "guide" / "long.txt").read_bytes()).hexdigest()
    assert seen[0]["notes/guide/long.txt#2"] == ("guide/long.txt", sha)
    assert {doc for doc, _ in seen[0].values()} == {"intro.md", "guide/moon.txt", "guide/long.txt"}


def test_a_file_source_names_the_file_or_the_records_document_field(tmp_path):
    source = tmp_path / "records.jsonl"
    source.write_text(json.dumps({"id": "a", "text": "alpha"}) + "\n"
                      + json.dumps({"id": "b", "text": "beta", "document": "handbook/b.pdf"}) + "\n", encoding="utf-8")
    sha = hashlib.sha256(source.read_bytes()).hexdigest()
    assert documents_of([source]) == {"a": ("records.jsonl", sha), "b": ("handbook/b.pdf", sha)}


def test_documents_are_stored_and_listed(folder, tmp_path):
    kb = build(folder, tmp_path / "kb")
    listed = list_documents(kb.path)
    assert [(d["document"], d["passages"]) for d in listed] == [
        ("guide/long.txt", ["notes/guide/long.txt#0", "notes/guide/long.txt#1", "notes/guide/long.txt#2"]),
        ("guide/moon.txt", ["notes/guide/moon.txt"]),
        ("intro.md", ["notes/intro.md"]),
    ]
    assert listed[1]["sha256"] == hashlib.sha256((folder / "guide" / "moon.txt").read_bytes()).hexdigest()
    assert kb.documents() == listed
    kb.close()


def test_sync_adds_replaces_and_deletes_documents_as_one_version(folder, tmp_path):
    kb = build(folder, tmp_path / "kb")
    (folder / "intro.md").write_text("# Intro\n\nthe ocean is cold", encoding="utf-8")
    (folder / "guide" / "long.txt").unlink()
    (folder / "new.txt").write_text("a river flows into the lake", encoding="utf-8")
    encoded = []

    def counting(batch):
        encoded.extend(p.id for p in batch)
        return encode(batch)

    report = kb.sync(iter_source_passages([folder], max_words=10), counting)
    assert report == {"added": ["new.txt"], "replaced": ["intro.md"], "deleted": ["guide/long.txt"],
                      "unchanged": ["guide/moon.txt"], "kept": [], "version": 2, "passages_added": 2,
                      "passages_deleted": 4}
    assert sorted(encoded) == ["notes/intro.md", "notes/new.txt"]  # the unchanged file is not re-encoded
    assert kb.latest_version == 2 and len(kb) == 3
    assert {p.id: p.text for p in kb} == {"notes/guide/moon.txt": "the moon orbits the earth",
                                          "notes/intro.md": "the ocean is cold",
                                          "notes/new.txt": "a river flows into the lake"}
    assert {d["document"] for d in kb.documents()} == {"guide/moon.txt", "intro.md", "new.txt"}
    assert len(kb.at_version(1)) == 5  # the old documents stay in the earlier version
    again = kb.sync(iter_source_passages([folder], max_words=10), counting)
    assert again["version"] is None and kb.latest_version == 2  # nothing changed: no new version
    kb.close()


def test_a_failed_sync_changes_nothing(folder, tmp_path):
    kb = build(folder, tmp_path / "kb")
    before = (kb.manifest, kb.documents())
    (folder / "intro.md").write_text("# Intro\n\nchanged text", encoding="utf-8")
    (folder / "guide" / "moon.txt").unlink()

    def failing(batch):
        raise RuntimeError("encoder crashed")

    with pytest.raises(RuntimeError):
        sync_documents(kb.path, iter_source_passages([folder], max_words=10), failing)
    kb.reload()
    manifest = read_manifest(kb.path)
    assert manifest["versions"] == before[0]["versions"] and "pending_edit" not in manifest
    assert kb.documents() == before[1]
    report = kb.sync(iter_source_passages([folder], max_words=10), encode)  # run again: it completes
    assert report["replaced"] == ["intro.md"] and report["deleted"] == ["guide/moon.txt"]
    kb.close()


def test_a_sync_from_an_empty_folder_deletes_nothing(folder, tmp_path):
    kb = build(folder, tmp_path / "kb")
    empty = tmp_path / "empty"
    empty.mkdir()
    # refused by the folder reader (nothing in it to read) or by the sync (no documents): either way, unchanged
    with pytest.raises(InputError, match="has no documents|no file openbook reads"):
        sync_documents(kb.path, iter_source_passages([empty]), encode)
    assert read_manifest(kb.path)["latest_version"] == 1
    kb.close()


def test_a_file_that_gave_no_passages_but_is_there_is_kept(folder, tmp_path):
    from openbook.corpus import RecordErrors

    kb = build(folder, tmp_path / "kb")
    (folder / "guide" / "moon.txt").write_bytes(b"\x00\x01\x02 binary")  # skipped: binary data, no passages
    errors = RecordErrors("skip")
    report = sync_documents(kb.path, iter_source_passages([folder], max_words=10, errors=errors), encode,
                            on_error=errors, root=folder)
    assert report["kept"] == ["guide/moon.txt"] and report["deleted"] == [] and report["version"] is None
    kb.close()


def test_delete_document_removes_all_its_passages(folder, tmp_path):
    kb = build(folder, tmp_path / "kb")
    version = delete_document(kb.path, "guide/long.txt")
    kb.reload()
    assert version == 2 and len(kb) == 2
    assert [d["document"] for d in kb.documents()] == ["guide/moon.txt", "intro.md"]
    with pytest.raises(InputError, match="no document 'guide/long.txt'"):
        kb.delete_document("guide/long.txt")
    kb.close()


def test_a_knowledge_base_without_documents_still_loads_and_a_sync_adopts_its_passages(folder, tmp_path):
    kb = build(folder, tmp_path / "kb")
    kb.close()
    store = tmp_path / "kb" / "passages.sqlite"
    with sqlite3.connect(store) as db:  # as an openbook that did not record documents wrote it
        db.execute("DROP TABLE passage_documents")
    db.close()
    manifest = read_manifest(tmp_path / "kb")
    manifest["files"]["passages.sqlite"] = {"bytes": store.stat().st_size,
                                            "sha256": hashlib.sha256(store.read_bytes()).hexdigest()}
    (tmp_path / "kb" / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    old = KnowledgeBase.load(tmp_path / "kb")
    assert len(old) == 5 and old.documents() == [{"document": None, "sha256": None, "passages": [p.id for p in old]}]
    report = old.sync(iter_source_passages([folder], max_words=10), encode)
    assert report["added"] == ["guide/long.txt", "guide/moon.txt", "intro.md"] and len(old) == 5
    assert [d["document"] for d in old.documents()] == ["guide/long.txt", "guide/moon.txt", "intro.md"]
    old.close()


def test_shards_keep_their_passages_documents(folder, tmp_path):
    from openbook.index.sharded import shard_knowledge_base

    build(folder, tmp_path / "kb").close()
    out = shard_knowledge_base(tmp_path / "kb", 2, tmp_path / "sharded", progress=False)
    found = {}
    for shard in sorted(out.glob("shard-*")):
        for entry in list_documents(shard):
            found.setdefault(entry["document"], []).extend(entry["passages"])
    assert {doc: sorted(ids) for doc, ids in found.items()} == {
        doc["document"]: sorted(doc["passages"]) for doc in list_documents(tmp_path / "kb")}


def test_an_updated_passage_stays_in_its_document(folder, tmp_path):
    kb = build(folder, tmp_path / "kb")
    kb.update([{"id": "notes/guide/moon.txt", "text": "the moon is bright"}], encode)
    assert [(d["document"], d["passages"]) for d in kb.documents() if d["document"] == "guide/moon.txt"] == [
        ("guide/moon.txt", ["notes/guide/moon.txt"])]
    kb.close()
