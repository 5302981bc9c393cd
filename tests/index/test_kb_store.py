"""Knowledge bases at scale, in miniature: the SQLite passage store, the appendable embeddings file,
corpus readers (JSONL, DPR TSV, Parquet, text folders), streaming and resumable builds, index choice
and manifest validation. Everything runs on tiny corpora made here and a hashed bag-of-words encoder."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from openbook.corpus import Passage, RecordErrors, SourcePassage, iter_source_passages, source_kind
from openbook.errors import InputError, KnowledgeBaseError
from openbook.index import KnowledgeBase
from openbook.index.kb import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    parse_index_params,
    partial_dir,
    read_manifest,
    stored_format_version,
)
from openbook.index.store import EmbeddingsWriter, PassageStore, read_npy_header
from tiny_kb import DIM, ENCODER, Crash, build, corpus, crashing_encoder, data_bytes, encode, hashed_bow, without_times
from tolerance import dot_tolerance

# -- passage store ------------------------------------------------------------------------------------


def test_store_get_find_and_versions(tmp_path):
    store = PassageStore.create(tmp_path / "p.sqlite")
    passages = corpus(10)
    with store.transaction():
        store.insert(0, passages, version=1)
    assert store.num_rows() == 10
    assert store.get([3, 0, 3]) == [passages[3], passages[0], passages[3]]
    assert store.get([]) == []
    with pytest.raises(KnowledgeBaseError, match="no row 99"):
        store.get([1, 99])
    assert store.find("doc:4", version=1) == 4 and store.find("nope", version=1) is None
    assert store.live_rows(["doc:1", "doc:2", "zzz"]) == {"doc:1": 1, "doc:2": 2}
    with store.transaction():  # an update in version 2: doc:1 gets a new row with the same id
        store.mark_deleted([1], version=2)
        store.insert(10, [Passage("doc:1", "New", "new text")], version=2)
    assert store.find("doc:1", version=1) == 1 and store.find("doc:1", version=2) == 10
    assert store.deleted_rows(1).tolist() == [] and store.deleted_rows(2).tolist() == [1]
    with pytest.raises(InputError, match="duplicate passage id"), store.transaction():
        store.insert(11, [Passage("doc:2", "", "again")], version=2)
    assert store.num_rows() == 11  # the failed transaction was rolled back
    rows = [(row, p.id, deleted) for row, p, deleted in store.iter_rows(0, None, batch=3)]
    assert [r[0] for r in rows] == list(range(11)) and rows[1] == (1, "doc:1", 2)
    assert store.discard_after(10, version=1) == 2  # undo version 2: drop row 10, undelete row 1
    assert store.num_rows() == 10 and store.deleted_rows(5).tolist() == []
    store.close()
    readonly = PassageStore.open(tmp_path / "p.sqlite")
    with pytest.raises(KnowledgeBaseError, match="read-only"), readonly.transaction():
        pass
    readonly.close()


def test_store_get_is_fast(tmp_path, capsys):
    store = PassageStore.create(tmp_path / "p.sqlite")
    with store.transaction():
        store.insert(0, corpus(20_000), version=1)
    rng = np.random.default_rng(0)
    queries = [rng.integers(0, 20_000, size=5) for _ in range(200)]
    start = time.perf_counter()
    for rows in queries:
        assert len(store.get(rows)) == 5
    per_query = (time.perf_counter() - start) / len(queries)
    with capsys.disabled():
        print(f"\n[timing] PassageStore.get of 5 rows out of 20,000: {per_query * 1e6:.0f} us per query")
    store.close()


def test_store_compaction_is_deterministic(tmp_path):
    passages = corpus(30)
    one = PassageStore.create(tmp_path / "one.sqlite", bulk=True)
    with one.transaction():
        one.insert(0, passages, version=1)
    two = PassageStore.create(tmp_path / "two.sqlite", bulk=True)
    for start in range(0, 30, 7):  # other transactions, and rows written then discarded
        with two.transaction():
            two.insert(start, passages[start:start + 7], version=1)
    with two.transaction():
        two.insert(30, corpus(5, "junk"), version=1)
    two.discard_after(30, 1)
    one.compact_into(tmp_path / "a.sqlite")
    two.compact_into(tmp_path / "b.sqlite")
    assert (tmp_path / "a.sqlite").read_bytes() == (tmp_path / "b.sqlite").read_bytes()


def test_store_open_rejects_other_files(tmp_path):
    with pytest.raises(KnowledgeBaseError, match="missing"):
        PassageStore.open(tmp_path / "none.sqlite")
    (tmp_path / "junk.sqlite").write_bytes(b"x" * 4096)
    with pytest.raises(KnowledgeBaseError, match="not a readable passage store"):
        PassageStore.open(tmp_path / "junk.sqlite")


# -- embeddings file ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_embeddings_writer_appends_and_is_a_valid_npy(tmp_path, dtype):
    path = tmp_path / "e.npy"
    vectors = np.random.default_rng(0).standard_normal((10, DIM)).astype(np.float32)
    writer = EmbeddingsWriter.create(path, dtype, DIM)
    writer.append(vectors[:4])
    writer.append(vectors[4:])
    writer.publish()
    loaded = np.load(path)
    assert loaded.dtype == np.dtype(dtype) and loaded.shape == (10, DIM)
    np.testing.assert_array_equal(loaded, vectors.astype(dtype))
    assert read_npy_header(path) == (np.dtype(dtype), 10, DIM)
    with open(path, "ab") as handle:  # a killed append leaves a partial row behind
        handle.write(b"\x00" * 7)
    reopened = EmbeddingsWriter.reopen(path, 6)
    assert reopened.rows == 6 and reopened.complete_rows == 6
    reopened.publish()
    np.testing.assert_array_equal(np.load(path), vectors[:6].astype(dtype))


def test_float16_overflow_is_rejected(tmp_path):
    writer = EmbeddingsWriter.create(tmp_path / "e.npy", "float16", 2)
    with pytest.raises(InputError, match="overflow float16"):
        writer.append(np.array([[1e6, 0.0]], dtype=np.float32))


# -- corpus readers -----------------------------------------------------------------------------------


def write_lines(path: Path, lines: list[str]) -> Path:
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def read_all(sources, **kwargs) -> list[SourcePassage]:
    """The passages of ``sources`` without their metadata (tests/corpus/test_source_meta.py checks it)."""
    items = iter_source_passages([str(s) for s in sources], **kwargs)
    return [dataclasses.replace(i, passage=dataclasses.replace(i.passage, meta=None)) for i in items]


def test_jsonl_sources_give_file_named_ids_to_records_without_one(tmp_path):
    a = write_lines(tmp_path / "a.jsonl", [json.dumps({"title": "T", "text": "one two three"}),
                                          json.dumps({"id": 7, "contents": '"Dpr"\ndpr text'})])
    b = write_lines(tmp_path / "b.jsonl.gz", [json.dumps({"text": "x y z w"})])
    items = read_all([a, b], max_words=2)
    assert [i.passage for i in items] == [
        Passage("a.jsonl:0#0", "T", "one two"), Passage("a.jsonl:0#1", "T", "three"),
        Passage("7", "Dpr", "dpr text"),
        Passage("b.jsonl.gz:0#0", "", "x y"), Passage("b.jsonl.gz:0#1", "", "z w"),
    ]
    assert items[0].where == f"{a}:1" and items[2].where == f"{a}:2"


def test_dpr_tsv_source(tmp_path):
    path = tmp_path / "psgs_w100.tsv"
    path.write_text(
        'id\ttext\ttitle\n'
        '1\t"Aaron Aaron ( or ; ""Ahärôn"") is a prophet"\tAaron\n'
        '2\tplain text here\tSecond\n',
        encoding="utf-8",
    )
    items = read_all([path])
    assert [i.passage for i in items] == [
        Passage("1", "Aaron", 'Aaron Aaron ( or ; "Ahärôn") is a prophet'),
        Passage("2", "Second", "plain text here"),
    ]
    assert items[1].where == f"{path}:3"


def test_tsv_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("id\ttext\ttitle\n1\tok\tT\n2\tmissing title\n3\tfine\tT3\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}:3: expected 3 tab-separated fields"):
        read_all([path])
    errors = RecordErrors("skip")
    assert [i.passage.id for i in read_all([path], errors=errors)] == ["1", "3"]
    assert errors.skipped == 1 and errors.examples[0].startswith(f"{path}:3:")
    headless = tmp_path / "headless.tsv"
    headless.write_text("1\tsome text\tTitle\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"{headless}:1: expected a header row"):
        read_all([headless])


def test_parquet_sources(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    titled = tmp_path / "titled.parquet"
    pq.write_table(pa.table({"title": ["A", "B", None], "text": ["alpha beta", "gamma", "delta"]}), titled,
                   row_group_size=2)
    dpr = tmp_path / "dpr.parquet"
    pq.write_table(pa.table({"id": ["x1", "x2"], "contents": ['"T"\nbody one', "no title"]}), dpr)
    items = read_all([titled, dpr])
    assert [i.passage for i in items] == [
        Passage("titled.parquet:0", "A", "alpha beta"), Passage("titled.parquet:1", "B", "gamma"),
        Passage("titled.parquet:2", "", "delta"), Passage("x1", "T", "body one"), Passage("x2", "", "no title"),
    ]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"text": ["fine", None, "also fine"], "title": ["a", "b", "c"]}), bad)
    assert [i.passage.text for i in read_all([bad])] == ["fine", "also fine"]  # null text: no passage
    typed = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"text": ["ok"], "title": [3]}), typed)
    with pytest.raises(InputError, match=rf"{typed}:1: field 'title' must be a string"):
        read_all([typed])
    nocols = tmp_path / "nocols.parquet"
    pq.write_table(pa.table({"body": ["x"]}), nocols)
    with pytest.raises(InputError, match="neither a 'text' nor a 'contents' column"):
        read_all([nocols])


def test_text_folder_source(tmp_path):
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "b.txt").write_text("plain words here", encoding="utf-8")
    (notes / "a.md").write_text("intro line\n\n## The Heading ##\n\nbody of the note", encoding="utf-8")
    (notes / "sub" / "c.md").write_text("no heading at all", encoding="utf-8")
    (notes / ".hidden.txt").write_text("secret", encoding="utf-8")
    (notes / "image.png").write_bytes(b"\x89PNG")
    (notes / "latin1.txt").write_bytes("caf\xe9".encode("latin1"))
    errors = RecordErrors("skip")
    items = read_all([notes], max_words=3, errors=errors)
    assert [i.passage for i in items] == [
        Passage("notes/a.md#0", "The Heading", "intro line body"),
        Passage("notes/a.md#1", "The Heading", "of the note"),
        Passage("notes/b.txt", "b", "plain words here"),
        Passage("notes/latin1.txt", "latin1", "caf\xe9"),  # not UTF-8: decoded as detected
        Passage("notes/sub/c.md#0", "c", "no heading"),  # a 1-word tail of 3 shares the last two chunks
        Passage("notes/sub/c.md#1", "c", "at all"),
    ]
    assert errors.skipped == 0
    single = read_all([notes / "b.txt"])
    assert [i.passage.id for i in single] == ["b.txt"]


def test_source_kind_and_missing_sources(tmp_path):
    assert source_kind(tmp_path) == "folder"
    for name, kind in [("a.jsonl", "jsonl"), ("a.JSONL.gz", "jsonl"), ("p.tsv.gz", "tsv"), ("t.parquet", "parquet"),
                       ("n.md", "markdown"), ("n.txt", "text")]:
        (tmp_path / name).write_text("")
        assert source_kind(tmp_path / name) == kind
    (tmp_path / "data.xyz").write_text("")
    with pytest.raises(InputError, match="unknown corpus format"):
        source_kind(tmp_path / "data.xyz")
    with pytest.raises(InputError, match="no such file"):
        read_all([tmp_path / "missing.jsonl"])


def test_malformed_jsonl_stop_and_skip(tmp_path):
    path = write_lines(tmp_path / "c.jsonl", [json.dumps({"text": "good one"}), "{oops", json.dumps([1]),
                                               json.dumps({"title": "no text"}), json.dumps({"text": "good two"})])
    with pytest.raises(InputError, match=rf"^{path}:2: malformed JSON"):
        read_all([path])
    reported = []
    errors = RecordErrors("skip", report=reported.append, keep=2)
    assert [i.passage.text for i in read_all([path], errors=errors)] == ["good one", "good two"]
    assert errors.skipped == 3 and len(reported) == 2 and reported[1].startswith(f"{path}:3: expected a JSON object")


# -- streaming build ----------------------------------------------------------------------------------


def test_build_streams_in_batches(tmp_path):
    events = []

    def produce():
        for passage in corpus(23):
            events.append("read")
            yield passage

    def encode_logged(batch):
        events.append(("encode", len(batch)))
        return encode(batch)

    kb = build(tmp_path / "kb", produce(), encode=encode_logged, batch_size=5)
    ahead = max_ahead = 0
    for event in events:
        ahead = ahead + 1 if event == "read" else ahead - event[1]
        max_ahead = max(max_ahead, ahead)
    assert max_ahead <= 5  # never more than one batch held in memory
    assert len(kb) == 23 and list(kb) == corpus(23)
    assert isinstance(kb.embeddings, np.memmap) and not kb.embeddings.flags.writeable


def test_build_from_sources_float16(tmp_path):
    source = write_lines(tmp_path / "c.jsonl", [json.dumps({"id": p.id, "title": p.title, "text": p.text})
                                                for p in corpus(9)])
    kb = build(tmp_path / "kb", iter_source_passages([source]), dtype="float16")
    assert kb.embeddings.dtype == np.float16 and kb.manifest["dtype"] == "float16"
    np.testing.assert_array_equal(kb.embeddings, encode(corpus(9)).astype(np.float16))
    scores, rows = kb.search(hashed_bow([corpus(9)[4].text]), 1)
    assert rows[0, 0] == 4
    query = hashed_bow([corpus(9)[4].text])[0]
    np.testing.assert_allclose(scores[0, 0], kb.embeddings[4].astype(np.float32) @ query,
                               **dot_tolerance(query, kb.embeddings[4].astype(np.float32)))


def test_duplicate_ids_stop_or_skip(tmp_path):
    passages = corpus(6) + [Passage("doc:2", "Again", "a duplicate id")] + corpus(3, "more")
    with pytest.raises(InputError, match="passage 7: duplicate passage id 'doc:2'"):
        build(tmp_path / "stop", passages)
    assert not (tmp_path / "stop").exists()
    errors = RecordErrors("skip")
    kb = build(tmp_path / "skip", passages, on_error=errors)
    assert len(kb) == 9 and errors.skipped == 1 and kb.manifest["build"]["skipped"] == 1
    assert "1 malformed records skipped" in kb.versions[0]["description"]


def test_malformed_record_stop_leaves_nothing(tmp_path):
    source = write_lines(tmp_path / "c.jsonl", [json.dumps({"text": "fine"}), "not json"])
    out = tmp_path / "kb"
    with pytest.raises(InputError, match=r"c.jsonl:2: malformed JSON"):
        build(out, lambda: iter_source_passages([source]), resume=True)
    assert not out.exists() and not partial_dir(out).exists()


# -- resumable build ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_resumed_build_is_byte_identical(tmp_path, dtype):
    passages = corpus(30)
    clean = build(tmp_path / "clean", passages, dtype=dtype)
    out = tmp_path / "kb"
    calls: list = []
    with pytest.raises(Crash):
        build(out, passages, encode=crashing_encoder(4, calls), dtype=dtype, resume=True)
    work = partial_dir(out)
    assert not out.exists() and work.is_dir()
    assert json.loads((work / "build-progress.json").read_text())["rows"] == 12  # 3 batches of 4 done
    # A killed process may also have written past the last recorded batch: more rows and vector bytes.
    with open(work / "embeddings.npy", "ab") as handle:
        handle.write(b"\x01" * 100)
    store = PassageStore.open(work / "work.sqlite", writable=True)
    with store.transaction():
        store.insert(12, passages[12:14], version=1)
    store.close()
    resumed_calls: list = []
    kb = build(out, passages, encode=crashing_encoder(0, resumed_calls), dtype=dtype, resume=True)
    assert sum(resumed_calls) == 30 - 12  # only what was not done yet
    assert not work.exists()
    assert data_bytes(kb.path) == data_bytes(clean.path)
    assert without_times(kb.manifest) == without_times(clean.manifest)
    assert list(kb) == passages


def test_a_build_records_each_stage_and_a_resumed_one_sums_its_runs(tmp_path):
    passages = corpus(30)
    stages = build(tmp_path / "clean", passages).manifest["build"]["seconds"]
    assert set(stages) == {"encode", "store", "index", "encode_rows_timed", "encode_passages_per_s"}
    assert stages["encode_rows_timed"] == 30 and min(stages[name] for name in ("encode", "store", "index")) >= 0
    out = tmp_path / "kb"
    with pytest.raises(Crash):
        build(out, passages, encode=crashing_encoder(4, []), resume=True)
    first = json.loads((partial_dir(out) / "build-progress.json").read_text())
    assert first["encode_rows_timed"] == 12 and first["encode_seconds"] >= 0
    stages = build(out, passages, resume=True).manifest["build"]["seconds"]
    # the manifest rounds to 2 decimals, and rounding keeps order: the sum is at least the first run's share
    assert stages["encode_rows_timed"] == 30 and stages["encode"] >= round(first["encode_seconds"], 2)
    rate, seconds = stages["encode_passages_per_s"], stages["encode"]  # each rounded to 2 decimals
    assert abs(rate * seconds - 30) <= 0.005 * (rate + seconds) + 1e-6


def test_resume_with_changed_input_starts_over_or_fails(tmp_path):
    passages = corpus(20)
    out = tmp_path / "kb"
    with pytest.raises(Crash):
        build(out, passages, encode=crashing_encoder(3, []), resume=True)
    changed = [Passage("new:0", "X", "changed first passage")] + passages[1:]
    with pytest.raises(KnowledgeBaseError, match="differ from those of the interrupted build"):
        build(out, changed, resume=True)
    calls: list = []
    kb = build(out, lambda: iter(changed), encode=crashing_encoder(0, calls), resume=True)
    assert sum(calls) == 20 and list(kb) == changed  # started over


def test_resume_with_other_options_starts_over(tmp_path):
    out = tmp_path / "kb"
    with pytest.raises(Crash):
        build(out, corpus(20), encode=crashing_encoder(3, []), resume=True)
    calls: list = []
    kb = build(out, corpus(20), encode=crashing_encoder(0, calls), resume=True, dtype="float16")
    assert sum(calls) == 20 and kb.embeddings.dtype == np.float16


def test_interrupted_input_error_keeps_encoded_work(tmp_path):
    good = [json.dumps({"id": p.id, "title": p.title, "text": p.text}) for p in corpus(12)]
    source = write_lines(tmp_path / "c.jsonl", good[:10] + ["broken"] + good[10:])
    out = tmp_path / "kb"
    with pytest.raises(InputError, match=r"c.jsonl:11: malformed JSON.*8 passages already encoded"):
        build(out, lambda: iter_source_passages([source]), resume=True)
    write_lines(source, good)  # the user fixes the record
    calls: list = []
    kb = build(out, lambda: iter_source_passages([source]), encode=crashing_encoder(0, calls), resume=True)
    assert sum(calls) == 4 and len(kb) == 12


def test_rerun_with_skip_after_a_stop_continues(tmp_path):
    good = [json.dumps({"id": p.id, "title": p.title, "text": p.text}) for p in corpus(12)]
    source = write_lines(tmp_path / "c.jsonl", good[:10] + ["broken"] + good[10:])
    out = tmp_path / "kb"
    with pytest.raises(InputError, match="8 passages already encoded"):
        build(out, lambda: iter_source_passages([source]), resume=True)
    calls: list = []
    errors = RecordErrors("skip")
    kb = build(out, lambda: iter_source_passages([source], errors=errors), encode=crashing_encoder(0, calls),
               resume=True, on_error=errors)
    assert sum(calls) == 4 and len(kb) == 12 and kb.manifest["build"]["skipped"] == 1


# -- index choice -------------------------------------------------------------------------------------


def test_parse_index_params():
    assert parse_index_params(["M=32", "opq=true", "phi=1.5", "name=x", "nprobe=none"]) == {
        "M": 32, "opq": True, "phi": 1.5, "name": "x", "nprobe": None}
    with pytest.raises(InputError, match="KEY=VALUE"):
        parse_index_params(["M32"])


@pytest.mark.parametrize("index_type, params", [
    ("flat_ip", {}),
    ("hnsw", {"M": 8, "ef_construction": 40, "ef_search": 32}),
    ("hnsw_sq8", {"M": 8}),
    ("ivfpq", {"nlist": 4, "m": 4, "nbits": 4, "nprobe": 4}),
])
def test_index_types_are_recorded_and_searchable(tmp_path, index_type, params):
    passages = corpus(300)
    kb = build(tmp_path / "kb", passages, batch_size=64, index_type=index_type, index_params=params)
    index = kb.manifest["index"]
    assert index["type"] == kb.manifest["index_type"] == kb.index.type_name
    assert index["type"] == ("flat" if index_type == "flat_ip" else index_type)
    assert all(index["params"].get(key) == value for key, value in params.items())
    if index_type.startswith("hnsw"):
        assert index["params"]["phi"] > 1.0  # bound on |x|^2 with room for later additions
    assert kb.index.read_only  # memory-mapped by default
    queries = hashed_bow([p.text for p in passages[:20]])
    scores, rows = kb.search(queries, 5)
    assert rows.shape == (20, 5) and (rows >= 0).all()
    hits = np.mean([i in row for i, row in enumerate(rows)])
    assert hits >= (1.0 if index_type == "flat_ip" else 0.5)
    loaded = KnowledgeBase.load(kb.path, mmap=False)
    assert not loaded.index.read_only and loaded.index.ntotal == 300


@pytest.mark.parametrize("index_type, params", [
    ("hnsw_sq8", {"M": 8}),
    ("ivfpq", {"nlist": 4, "m": 2, "nbits": 4, "nprobe": 1}),  # deliberately coarse codes
])
def test_compressed_indexes_rerank_exactly_from_the_stored_vectors(tmp_path, index_type, params):
    """IVF-PQ / HNSW-SQ8 scores are lossy; the knowledge base re-scores 10·k candidates from d(z), so the
    returned scores are exact inner products and the ranking matches exact search where the candidates
    cover it."""
    passages = corpus(300)
    kb = build(tmp_path / "kb", passages, batch_size=64, index_type=index_type, index_params=params)
    queries = hashed_bow([p.text for p in passages[:20]])
    scores, rows = kb.search(queries, 5)
    vectors = np.asarray(kb.embeddings, dtype=np.float32)
    exact = np.einsum("qkd,qd->qk", vectors[rows], queries.astype(np.float32))
    tol = dot_tolerance(queries, vectors)  # re-scored exactly: the same dot products up to rounding
    np.testing.assert_allclose(scores, exact, **tol)
    assert (np.diff(scores, axis=1) <= tol["atol"]).all()  # best first
    kb.index.rerank_with(None)  # the raw compressed search for comparison
    raw_scores, _ = kb.index.search(queries, 5)
    assert not np.allclose(raw_scores, exact, **tol)  # without re-ranking the scores are approximations


def test_unknown_index_type_fails_before_encoding(tmp_path):
    calls: list = []
    with pytest.raises(InputError, match="unknown index type 'annoy'"):
        build(tmp_path / "kb", corpus(4), encode=crashing_encoder(0, calls), index_type="annoy")
    assert calls == [] and list(tmp_path.iterdir()) == []


# -- manifest validation ------------------------------------------------------------------------------


@pytest.fixture
def small_kb(tmp_path) -> KnowledgeBase:
    return build(tmp_path / "kb", corpus(10))


def test_manifest_contents(small_kb):
    manifest = read_manifest(small_kb.path)
    assert manifest["format_version"] == FORMAT_VERSION == 2
    assert manifest["encoder"] == ENCODER.info() and manifest["dim"] == DIM and manifest["dtype"] == "float32"
    assert manifest["num_rows"] == manifest["num_passages"] == 10
    files = manifest["files"]
    assert set(files) == {"passages.sqlite", "embeddings.npy", "index.faiss"}
    assert files["embeddings.npy"]["segments"][0]["start"] == 0 and files["embeddings.npy"]["segments"][0]["stop"] == 10
    assert all(files[name]["bytes"] == (small_kb.path / name).stat().st_size for name in files)
    assert manifest["versions"][0]["version"] == 1 and manifest["current_version"] == 1
    assert stored_format_version(small_kb.path) == 2 and stored_format_version(small_kb.path / "nope") is None


def test_query_encoder_mismatch_names_both(small_kb):
    with pytest.raises(KnowledgeBaseError) as info:
        KnowledgeBase.load(small_kb.path, expected_encoder={"name": "other", "pooling": "cls", "dim": 768})
    message = str(info.value)
    assert "'fake/bow' (mean pooling" in message and "'other' (cls pooling, dim 768)" in message


def test_modified_embedding_rows_fail_their_checksum(small_kb):
    path = small_kb.path / "embeddings.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(KnowledgeBaseError, match="rows 0..9 do not match their sha256"):
        KnowledgeBase.load(small_kb.path)
    KnowledgeBase.load(small_kb.path, verify="size")


def test_missing_part_and_old_format(small_kb):
    manifest = json.loads((small_kb.path / MANIFEST_FILE).read_text())
    old = dict(manifest, format_version=1)
    (small_kb.path / MANIFEST_FILE).write_text(json.dumps(old))
    with pytest.raises(KnowledgeBaseError, match="format_version 1.*rebuild it with `openbook kb build"):
        KnowledgeBase.load(small_kb.path)
    broken = dict(manifest)
    del broken["versions"]
    (small_kb.path / MANIFEST_FILE).write_text(json.dumps(broken))
    with pytest.raises(KnowledgeBaseError, match="field 'versions' is missing"):
        KnowledgeBase.load(small_kb.path)
    (small_kb.path / MANIFEST_FILE).write_text(json.dumps(manifest))
    shutil.copy(small_kb.path / "index.faiss", small_kb.path.parent / "saved.faiss")
    (small_kb.path / "index.faiss").unlink()
    with pytest.raises(KnowledgeBaseError, match="incomplete: index.faiss is missing"):
        KnowledgeBase.load(small_kb.path)


def test_version_argument_is_checked(small_kb):
    with pytest.raises(InputError, match="has versions 1..1, not 2"):
        KnowledgeBase.load(small_kb.path, version=2)
