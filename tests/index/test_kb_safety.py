"""A knowledge base is never damaged or misread: builds over an existing knowledge base, TSV quoting, the
encoder's weights, file names in the manifest, leftovers of killed processes, ``kb info`` on a damaged
knowledge base, ``--out .``, duplicate ids and the shipped demo knowledge base's vectors."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

import openbook.index.kb.build as build_module
from openbook import atomic
from openbook.corpus import Passage, RecordErrors, iter_source_passages
from openbook.errors import InputError, KnowledgeBaseError
from openbook.index import KnowledgeBase
from openbook.index.kb import MANIFEST_FILE, add_passages, check_encoder_matches, delete_passages, read_manifest
from openbook.index.kb.folder import _locked, partial_dir
from openbook.models import Encoder
from tiny_encoders import save_bert
from tiny_kb import ENCODER, BowEncoder, Crash, build, build_kb, corpus, encode, run

QUOTES_TSV = 'id\ttext\ttitle\n1\tAlpha\tA\n2\t"open quote dogs\tB\n3\tGamma\tC\n4\tDelta "fish" x\tD\n'


def one_error_line(err: str) -> str:
    """The single ``openbook: error: ...`` line of a failed command (never a traceback)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("openbook: error: "), err
    return lines[0]


def temp_name(name: str, purpose: str) -> str:
    return f".{name}.{purpose}-{uuid.uuid4().hex[:12]}"


# -- a. a build over an existing knowledge base ------------------------------------------------------


def test_build_over_a_knowledge_base_needs_force_and_keeps_its_versions(capsys, tmp_path, corpus_dir, encoders):
    out = tmp_path / "kb"
    build_kb(capsys, corpus_dir, out)
    code, _, err = run(capsys, "kb", "delete", out, "paris")
    assert code == 0, err
    code, _, err = run(capsys, "kb", "build", corpus_dir / "articles.jsonl", "--out", out, "--quiet")
    assert code != 0 and "--force" in one_error_line(err)
    assert read_manifest(out)["latest_version"] == 2  # the version history is still there
    build_kb(capsys, corpus_dir, out, "--force")
    manifest = read_manifest(out)
    assert manifest["latest_version"] == 1 and manifest["num_passages"] == 6


def test_build_never_replaces_a_folder_holding_other_files(capsys, tmp_path, corpus_dir, encoders):
    out = tmp_path / "kb"
    build_kb(capsys, corpus_dir, out)
    (out / "my-notes.txt").write_text("mine", encoding="utf-8")
    code, _, err = run(capsys, "kb", "build", corpus_dir / "articles.jsonl", "--out", out, "--quiet", "--force")
    assert code != 0 and "my-notes.txt" in one_error_line(err)
    assert (out / "my-notes.txt").read_text(encoding="utf-8") == "mine"
    assert len(KnowledgeBase.load(out)) == 6
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "thesis.tex").write_text("x", encoding="utf-8")
    with pytest.raises(KnowledgeBaseError, match=r"not a knowledge base .*thesis\.tex"):
        build(plain, corpus(4), replace=True)


def test_build_over_a_knowledge_base_holds_the_edit_lock(tmp_path):
    kb = build(tmp_path / "kb", corpus(8))
    refused = []

    def encode_while_someone_edits(batch):
        with pytest.raises(KnowledgeBaseError, match="busy"):
            delete_passages(kb.path, ["doc:0"])
        refused.append(len(batch))
        return encode(batch)

    rebuilt = build(kb.path, corpus(6, "new"), encode=encode_while_someone_edits, replace=True)
    assert refused and len(rebuilt) == 6 and rebuilt.lookup("new:0") is not None
    with _locked(kb.path / ".lock", "an edit"), pytest.raises(KnowledgeBaseError, match="busy"):
        build(kb.path, corpus(3), replace=True)
    assert len(KnowledgeBase.load(kb.path)) == 6


# -- b. TSV quoting ----------------------------------------------------------------------------------


def test_tsv_unbalanced_quote_is_a_malformed_row_not_swallowed_rows(tmp_path):
    source = tmp_path / "q.tsv"
    source.write_text(QUOTES_TSV, encoding="utf-8")
    with pytest.raises(InputError, match=r"q\.tsv:3: unbalanced double quote"):
        list(iter_source_passages([source], errors=RecordErrors("stop")))
    errors = RecordErrors("skip")
    passages = [item.passage for item in iter_source_passages([source], errors=errors)]
    assert [p.id for p in passages] == ["1", "3", "4"] and errors.skipped == 1
    assert passages[2].text == 'Delta "fish" x'  # a quote inside an unquoted field is text, as in DPR


def test_tsv_quoted_fields_parse_as_dpr_parses_them(tmp_path):
    source = tmp_path / "psgs.tsv"
    source.write_text('id\ttext\ttitle\n1\t"Aaron ( or ; ""Ahärôn"") is a prophet"\t"Aaron"\n'
                      '2\t"tab\tinside"\tB\n', encoding="utf-8")
    passages = [item.passage for item in iter_source_passages([source])]
    assert [(p.id, p.title, p.text) for p in passages] == [
        ("1", "Aaron", 'Aaron ( or ; "Ahärôn") is a prophet'), ("2", "B", "tab inside"),
    ]


def test_kb_build_stops_at_an_unbalanced_quote(capsys, tmp_path, encoders):
    source = tmp_path / "q.tsv"
    source.write_text(QUOTES_TSV, encoding="utf-8")
    code, _, err = run(capsys, "kb", "build", source, "--out", tmp_path / "kb", "--quiet", "--on-error", "stop")
    assert code != 0 and "q.tsv:3" in one_error_line(err) and not (tmp_path / "kb").exists()


# -- c. the encoder's weights ------------------------------------------------------------------------


def test_encoder_fingerprint_tells_weights_apart_and_survives_fine_tuning(tmp_path):
    first = Encoder.from_pretrained(save_bert(tmp_path / "a", seed=0))
    same = Encoder.from_pretrained(save_bert(tmp_path / "b", seed=0))
    other = Encoder.from_pretrained(save_bert(tmp_path / "c", seed=1))
    assert len(first.info()["weights_sha256"]) == 64
    assert first.weights_sha256 == same.weights_sha256 != other.weights_sha256
    with torch.no_grad():
        next(first.parameters()).add_(1.0)  # fine-tuning q(x) keeps the identity it was loaded with
    assert first.info()["weights_sha256"] == same.weights_sha256


def test_knowledge_base_refuses_other_weights_at_the_same_path(tmp_path):
    folder = tmp_path / "enc"
    encoder = Encoder.from_pretrained(save_bert(folder, seed=0), name="./enc")
    passages = corpus(6)
    kb = KnowledgeBase.build(passages, encoder.encode_passages, encoder.info(), tmp_path / "kb", progress=False)
    assert read_manifest(kb.path)["encoder"]["weights_sha256"] == encoder.weights_sha256
    KnowledgeBase.load(kb.path, expected_encoder=Encoder.from_pretrained(folder, name="./enc").info())
    retrained = Encoder.from_pretrained(save_bert(folder, seed=1), name="./enc")  # other weights, same path
    with pytest.raises(KnowledgeBaseError, match="weights_sha256") as caught:
        KnowledgeBase.load(kb.path, expected_encoder=retrained.info())
    message = str(caught.value)
    assert encoder.weights_sha256[:12] in message and retrained.weights_sha256[:12] in message
    assert "\n" not in message
    with pytest.raises(KnowledgeBaseError, match="weights_sha256"):  # what `kb add` and `kb update` check
        check_encoder_matches(kb.path, read_manifest(kb.path)["encoder"], retrained.info())


def test_knowledge_base_without_a_fingerprint_is_checked_by_name(tmp_path):
    encoder = Encoder.from_pretrained(save_bert(tmp_path / "enc", seed=0), name="./enc")
    kb = KnowledgeBase.build(corpus(4), encoder.encode_passages, encoder.info(), tmp_path / "kb", progress=False)
    manifest_path = kb.path / MANIFEST_FILE
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    del manifest["encoder"]["weights_sha256"]  # as written before fingerprints existed
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    other = Encoder.from_pretrained(save_bert(tmp_path / "enc2", seed=1), name="./enc")
    assert len(KnowledgeBase.load(kb.path, expected_encoder=other.info())) == 4


# -- d. file names in the manifest -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../victim.faiss", "/tmp/victim.faiss", "sub/index.faiss", "passages.sqlite",
                                  MANIFEST_FILE])
def test_manifest_file_names_must_be_knowledge_base_files(tmp_path, name):
    kb = build(tmp_path / "kb", corpus(6))
    victim = tmp_path / "victim.faiss"
    victim.write_bytes(b"keep me")
    manifest_path = kb.path / MANIFEST_FILE
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    old = manifest["index"]["file"]
    manifest["index"]["file"] = name
    manifest["files"][name] = manifest["files"].pop(old)
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(KnowledgeBaseError, match="not a knowledge-base file"):
        add_passages(kb.path, [Passage("new", "New", "a new passage")], encode)
    with pytest.raises(KnowledgeBaseError, match="not a knowledge-base file"):
        KnowledgeBase.load(kb.path)
    assert victim.read_bytes() == b"keep me" and (kb.path / "passages.sqlite").is_file()


def test_manifest_files_entry_names_are_checked_too(tmp_path):
    kb = build(tmp_path / "kb", corpus(6))
    manifest_path = kb.path / MANIFEST_FILE
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["files"]["../../etc/passwd"] = {"bytes": 1, "sha256": "0" * 64}
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(KnowledgeBaseError, match=r"'\.\./\.\./etc/passwd'"):
        read_manifest(kb.path)


# -- e. leftovers of killed builds and edits ---------------------------------------------------------


def age(path: Path, seconds: float = 3600) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_next_edit_removes_leftovers_of_killed_processes(tmp_path):
    kb = build(tmp_path / "kb", corpus(8))
    inside = [kb.path / temp_name(MANIFEST_FILE, "tmp"), kb.path / temp_name("index.v2.faiss", "tmp")]
    for path in inside:
        path.write_bytes(b"half-written")
    building = tmp_path / temp_name("kb", "building")
    (building / "kb").mkdir(parents=True)
    (building / "work.sqlite").write_bytes(b"x" * 4096)
    old = tmp_path / temp_name("kb", "old")
    old.mkdir()
    (old / MANIFEST_FILE).write_text("{}", encoding="utf-8")
    live = tmp_path / temp_name("kb", "building")  # a build that is running now
    live.mkdir()
    fresh = tmp_path / temp_name("kb", "building")  # a build that has just started
    fresh.mkdir()
    for path in (building, old, live):
        age(path)
    others = [tmp_path / ".kb.notes", tmp_path / temp_name("other-kb", "building"), kb.path / ".mine.tmp-x"]
    for path in others:
        path.mkdir()
    with _locked(live / ".lock", "a running build"):
        delete_passages(kb.path, ["doc:0"])
    assert not any(path.exists() for path in [*inside, building, old])
    assert live.is_dir() and fresh.is_dir() and all(path.exists() for path in others)
    assert len(KnowledgeBase.load(kb.path)) == 7


def test_a_resumed_build_never_publishes_temporary_files(tmp_path, monkeypatch):
    out, stage = tmp_path / "kb", partial_dir(tmp_path / "kb") / "kb"
    made = []
    sibling_name = atomic._sibling_name

    def spy(path, purpose):
        made.append(sibling_name(path, purpose))
        return made[-1]

    monkeypatch.setattr(atomic, "_sibling_name", spy)
    with monkeypatch.context() as patch:  # killed while indexing: the stage holds the encoded passages
        patch.setattr(build_module, "_create_index", lambda *args: (_ for _ in ()).throw(Crash("killed")))
        with pytest.raises(Crash):
            build(out, corpus(8), resume=True)
    assert (stage / "embeddings.npy").is_file() and not out.exists()
    for folder, name in ((stage, MANIFEST_FILE), (stage, "index.faiss"), (stage.parent, "build-progress.json")):
        (folder / temp_name(name, "tmp")).write_bytes(b"half-written by an older openbook")
    kb = build(out, corpus(8), resume=True)
    assert not [p.name for p in kb.path.iterdir() if atomic.temp_name_of(p.name)]
    assert made and not [path for path in made if path.parent in (stage, kb.path)]
    assert len(kb) == 8 and not stage.parent.exists()


# -- f. kb info verifies -----------------------------------------------------------------------------


def test_kb_info_reports_failing_checksums(capsys, tmp_path, corpus_dir, encoders):
    out = tmp_path / "kb"
    build_kb(capsys, corpus_dir, out)
    index = out / read_manifest(out)["index"]["file"]
    data = bytearray(index.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes
    index.write_bytes(bytes(data))
    code, out_text, err = run(capsys, "kb", "info", out)
    assert code != 0 and "sha256" in one_error_line(err) and "integrity ok" not in out_text
    code, _, err = run(capsys, "retrieve", "capital", "--kb", out)
    assert code != 0 and "sha256" in one_error_line(err)


# -- g. --out . --------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [".", "..", "../here"])
def test_build_into_the_current_directory_is_a_clear_error(capsys, tmp_path, corpus_dir, encoders, monkeypatch,
                                                            target):
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    code, _, err = run(capsys, "kb", "build", corpus_dir / "articles.jsonl", "--out", target, "--quiet")
    assert code != 0 and "current directory" in one_error_line(err)
    assert list(here.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["here", "src"]
    with pytest.raises(InputError, match="current directory"):
        build(Path(target), corpus(4))


# -- h. duplicate ids in the input -------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 256])
def test_duplicate_id_inside_the_input_names_the_input(capsys, tmp_path, encoders, batch_size):
    source = tmp_path / "dups.jsonl"
    records = [{"id": "a", "text": "alpha"}, {"id": "b", "text": "beta"}, {"id": "a", "text": "again"}]
    source.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    code, _, err = run(capsys, "kb", "build", source, "--out", tmp_path / "kb", "--quiet",
                       "--batch-size", batch_size)
    line = one_error_line(err)
    assert code != 0 and "dups.jsonl:3: duplicate passage id 'a'" in line
    assert "input" in line and "knowledge base already has" not in line
    if batch_size > 1:
        assert "dups.jsonl:1" in line  # the first one, when it is still in memory


def test_duplicate_id_already_in_the_knowledge_base_blames_it(tmp_path):
    kb = build(tmp_path / "kb", corpus(4))
    with pytest.raises(InputError, match="knowledge base already has a passage with this id"):
        add_passages(kb.path, [Passage("doc:1", "Again", "a duplicate id")], encode)
    with pytest.raises(InputError, match="input already has a passage with this id"):
        add_passages(kb.path, [Passage("n", "N", "one"), Passage("n", "N", "two")], encode)
    assert np.array_equal(KnowledgeBase.load(kb.path).embeddings, kb.embeddings)
    assert ENCODER.info()["name"] == "fake/bow"


def test_demo_knowledge_base_of_an_older_format_is_rebuilt_in_the_cache(tmp_path, monkeypatch):
    from openbook.models import knowledge

    monkeypatch.setattr(knowledge, "cache_dir", lambda: tmp_path)
    encoder = BowEncoder("fake/bow")
    old = knowledge.demo_kb_dir(encoder)
    old.mkdir(parents=True)
    (old / MANIFEST_FILE).write_text(json.dumps({"format_version": 1}), encoding="utf-8")
    (old / "passages.jsonl").write_text("{}\n", encoding="utf-8")  # format 1 kept its passages here
    kb = knowledge.demo_knowledge_base(encoder, progress=False)
    assert kb.path == old and len(kb) > 0 and not (old / "passages.jsonl").exists()


def test_a_lock_file_replaced_while_it_is_taken_guards_nothing(tmp_path, monkeypatch):
    import fcntl

    lock = tmp_path / ".lock"
    real_flock = fcntl.flock

    def flock_then_replaced(handle, flags):  # a build renamed the whole folder meanwhile
        real_flock(handle, flags)
        replacement = tmp_path / "new-lock"
        replacement.touch()
        os.replace(replacement, lock)

    monkeypatch.setattr(fcntl, "flock", flock_then_replaced)
    with pytest.raises(KnowledgeBaseError, match="was replaced"), _locked(lock, "knowledge base x"):
        pass


def test_restart_never_deletes_the_state_of_a_running_build(capsys, tmp_path, corpus_dir, encoders):
    out = tmp_path / "kb"
    partial = partial_dir(out)
    partial.mkdir()
    (partial / "build-state.json").write_text("{}", encoding="utf-8")
    with _locked(partial / ".lock", "a running build"):
        code, _, err = run(capsys, "kb", "build", corpus_dir / "articles.jsonl", "--out", out, "--quiet", "--restart")
    assert code != 0 and "busy" in one_error_line(err) and (partial / "build-state.json").is_file()
    build_kb(capsys, corpus_dir, out, "--restart")
    assert not partial.exists() and len(KnowledgeBase.load(out)) == 6


def test_demo_knowledge_base_built_from_another_shipped_corpus_is_rebuilt(tmp_path, monkeypatch):
    from openbook.models import knowledge

    corpus = tmp_path / "data" / "passages.jsonl.gz"  # no shipped vectors next to it: the encoder is used
    corpus.parent.mkdir()

    def ship(texts):
        records = [{"id": f"d:{i}", "title": "T", "text": text} for i, text in enumerate(texts)]
        corpus.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode("utf-8")))

    monkeypatch.setattr(knowledge, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(knowledge, "demo_passages_path", lambda: corpus)
    encoder = BowEncoder("fake/bow")
    ship(["old one", "old two", "capital city."])
    first = knowledge.demo_knowledge_base(encoder, progress=False)
    built = read_manifest(first.path)
    assert len(first) == 3 and built["build"]["corpus_sha256"] == hashlib.sha256(corpus.read_bytes()).hexdigest()
    assert read_manifest(knowledge.demo_knowledge_base(encoder, progress=False).path) == built  # same corpus: kept
    ship(["new one", "new two"])  # an upgrade re-chunked the shipped corpus
    second = knowledge.demo_knowledge_base(encoder, progress=False)
    assert second.path == first.path and len(second) == 2
    assert [second[i].text for i in range(2)] == ["new one", "new two"]
    # A cache from before the corpus was recorded is rebuilt too.
    manifest_path = second.path / MANIFEST_FILE
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    del manifest["build"]["corpus_sha256"]
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    assert read_manifest(knowledge.demo_knowledge_base(encoder, progress=False).path)["build"]["corpus_sha256"]


def test_shipped_demo_vectors_are_used_only_for_the_corpus_and_weights_they_record():
    """A corpus change beyond the re-encoded sample (a re-chunking of later passages) must not reuse the
    shipped vectors: their record names the corpus file's sha256 and the encoder's weights."""
    from types import SimpleNamespace

    from openbook.corpus import read_passages
    from openbook.data import demo_passages_path
    from openbook.index.kb.layout import sha256_file
    from openbook.models import knowledge

    folder = demo_passages_path().parent
    meta = json.loads((folder / knowledge.SHIPPED_VECTORS).with_suffix(".json").read_text())
    vectors = np.load(folder / knowledge.SHIPPED_VECTORS).astype(np.float32)
    passages = list(read_passages(demo_passages_path()))
    encoded = []

    def encode_passages(batch):  # the stored rows, as a live encoder agreeing with them would give
        encoded.append(len(batch))
        return vectors[: len(batch)]

    encoder = SimpleNamespace(name=meta["encoder"]["name"], dim=vectors.shape[1],
                              weights_sha256=meta["encoder"]["weights_sha256"], encode_passages=encode_passages)
    corpus = sha256_file(demo_passages_path())
    assert meta["corpus_sha256"] == corpus
    assert knowledge._shipped_vectors(encoder, passages, corpus) is not None and encoded
    encoded.clear()
    assert knowledge._shipped_vectors(encoder, passages, "0" * 64) is None and not encoded  # another corpus
    encoder.weights_sha256 = "f" * 64  # other weights under the same name
    assert knowledge._shipped_vectors(encoder, passages, corpus) is None and not encoded
