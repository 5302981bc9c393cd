"""Tests of openbook.index: the dense index and the on-disk knowledge base."""

import json
import subprocess
import sys
import zlib

import numpy as np
import pytest

from openbook.corpus import Passage
from openbook.errors import InputError, KnowledgeBaseError
from openbook.index import DenseIndex, FlatIPIndex, KnowledgeBase, index_class
from tolerance import dot_tolerance

DIM = 32
ENCODER = {"name": "fake/hashed-bow", "pooling": "mean", "normalize": True, "dim": DIM}
PASSAGES = [
    Passage(f"p:{i}", title, text)
    for i, (title, text) in enumerate(
        [
            ("Paris", "Paris is the capital and largest city of France"),
            ("Berlin", "Berlin is the capital of Germany"),
            ("Photosynthesis", "plants turn light water and carbon dioxide into sugar"),
            ("Moon", "the Moon orbits the Earth every month"),
            ("Jupiter", "Jupiter is the largest planet of the solar system"),
            ("", "a passage without a title about rivers and lakes"),
        ]
    )
]


def hashed_bow(texts: list[str]) -> np.ndarray:
    """Deterministic unit-norm hashed bag-of-words vectors: a stand-in for a neural encoder."""
    vectors = np.zeros((len(texts), DIM), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in text.lower().split():
            vectors[row, zlib.crc32(word.encode()) % DIM] += 1.0
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-6)


def encode_passages(batch: list[Passage]) -> np.ndarray:
    return hashed_bow([f"{p.title} {p.text}" for p in batch])


def build(out_dir, passages=PASSAGES, encode=encode_passages, **kwargs) -> KnowledgeBase:
    kwargs.setdefault("progress", False)
    return KnowledgeBase.build(passages, encode, ENCODER, out_dir, batch_size=4, **kwargs)


@pytest.fixture
def kb(tmp_path) -> KnowledgeBase:
    return build(tmp_path / "kb")


def entries(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# -- dense index --------------------------------------------------------------------------------------


def random_vectors(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def test_flat_search_equals_brute_force_inner_product():
    docs, queries, k = random_vectors(200, 0), random_vectors(5, 1), 7
    index = FlatIPIndex.create(DIM)
    index.add(docs[:120])
    index.add(docs[120:])
    scores, ids = index.search(queries, k)
    exact = queries @ docs.T
    expected_ids = np.argsort(-exact, axis=1)[:, :k]
    assert scores.dtype == np.float32 and ids.dtype == np.int64 and ids.shape == (5, k)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, np.take_along_axis(exact, expected_ids, axis=1), **dot_tolerance(queries, docs))
    assert index.ntotal == 200 and index.dim == DIM


def test_flat_search_single_query_and_k_above_ntotal():
    index = FlatIPIndex.create(DIM)
    index.add(random_vectors(3, 0))
    scores, ids = index.search(random_vectors(1, 1)[0], 10)
    assert scores.shape == ids.shape == (1, 3)
    assert sorted(ids[0]) == [0, 1, 2]


@pytest.mark.parametrize(
    "queries, k, message",
    [
        (np.zeros((2, DIM + 1)), 1, f"dimension {DIM + 1} but the index has dimension {DIM}"),
        (np.full((1, DIM), np.nan), 1, "NaN or infinite"),
        (np.zeros((2, 2, DIM)), 1, "2-D array"),
        (np.zeros((1, DIM)), 0, "k .* positive integer"),
    ],
)
def test_flat_search_rejects_bad_input(queries, k, message):
    index = FlatIPIndex.create(DIM)
    index.add(random_vectors(3, 0))
    with pytest.raises(InputError, match=message):
        index.search(queries, k)


def test_index_save_load_round_trip(tmp_path):
    index = FlatIPIndex.create(DIM)
    index.add(random_vectors(50, 0))
    path = tmp_path / "index.faiss"
    index.save(path)
    assert entries(tmp_path) == ["index.faiss"]  # no temporary file left behind
    for loader in (FlatIPIndex, DenseIndex):
        loaded = loader.load(path)
        assert isinstance(loaded, FlatIPIndex) and loaded.ntotal == 50
        queries = random_vectors(4, 1)
        for got, want in zip(loaded.search(queries, 5), index.search(queries, 5)):
            np.testing.assert_array_equal(got, want)


def test_index_load_errors(tmp_path):
    with pytest.raises(InputError, match="no such index file"):
        FlatIPIndex.load(tmp_path / "missing.faiss")
    garbage = tmp_path / "garbage.faiss"
    garbage.write_bytes(b"not an index at all")
    with pytest.raises(InputError, match=f"{garbage}: not a readable FAISS index"):
        DenseIndex.load(garbage)
    with pytest.raises(InputError, match="unknown index type 'hnsw_magic'; known types: flat"):
        index_class("hnsw_magic")


# -- knowledge base: build and load -------------------------------------------------------------------


def test_kb_build_load_round_trip(kb, tmp_path):
    assert entries(tmp_path) == ["kb"]  # temporary build directory renamed away
    assert entries(kb.path) == ["embeddings.npy", "index.faiss", "manifest.json", "passages.sqlite"]
    loaded = KnowledgeBase.load(kb.path, expected_encoder=dict(ENCODER))
    assert len(loaded) == len(PASSAGES) and list(loaded) == PASSAGES
    assert loaded[2] == PASSAGES[2] and loaded[-1] == PASSAGES[-1]
    np.testing.assert_array_equal(loaded.embeddings, encode_passages(PASSAGES))
    assert loaded.embeddings.dtype == np.float32 and not loaded.embeddings.flags.writeable
    manifest = loaded.manifest
    assert manifest["format_version"] == 2 and manifest["encoder"] == ENCODER == loaded.encoder_info
    assert manifest["dim"] == DIM and manifest["index_type"] == "flat" and manifest["dtype"] == "float32"
    assert manifest["index"] == {"type": "flat", "params": {}, "file": "index.faiss"}
    assert manifest["num_passages"] == manifest["num_rows"] == len(PASSAGES) and "created_at" in manifest
    assert manifest["current_version"] == manifest["latest_version"] == 1 and len(manifest["versions"]) == 1
    assert set(manifest["files"]) == {"passages.sqlite", "embeddings.npy", "index.faiss"}
    loaded.verify()


def test_kb_search_finds_the_right_passage(kb):
    scores, indices = kb.search(hashed_bow(["largest planet solar system", "capital of Germany"]), 2)
    assert scores.shape == indices.shape == (2, 2)
    assert [row[0].title for row in kb.passages(indices)] == ["Jupiter", "Berlin"]
    assert kb.passages(indices[0]) == [kb[int(i)] for i in indices[0]]
    query = hashed_bow(["largest planet solar system"])[0]
    np.testing.assert_allclose(scores[0, 0], kb.embeddings[indices[0, 0]] @ query, **dot_tolerance(query, kb.embeddings))


def test_kb_search_clamps_k_with_warning(kb):
    with pytest.warns(UserWarning, match=rf"k=50 .* only {len(PASSAGES)}"):
        _, indices = kb.search(hashed_bow(["moon"]), 50)
    assert indices.shape == (1, len(PASSAGES))


def test_kb_passages_rejects_missing_results(kb):
    with pytest.raises(InputError, match=f"passage index -1 is out of range .* {len(PASSAGES)} passages"):
        kb.passages([0, -1])


def test_kb_progress_bar_goes_to_stderr_only_when_asked(tmp_path, capsys):
    build(tmp_path / "quiet")
    assert capsys.readouterr().err == ""
    build(tmp_path / "loud", progress=True)
    captured = capsys.readouterr()
    assert "encoding passages" in captured.err and captured.out == ""


def test_kb_build_from_a_generator(tmp_path):
    kb = build(tmp_path / "gen", passages=(p for p in PASSAGES))
    assert list(kb) == PASSAGES


def test_kb_rebuild_replaces_existing(kb):
    with pytest.raises(KnowledgeBaseError, match="already holds a knowledge base.*--force"):
        build(kb.path, passages=PASSAGES[:2])  # replacing loses the version history: only when asked
    assert len(KnowledgeBase.load(kb.path)) == len(PASSAGES)
    rebuilt = build(kb.path, passages=PASSAGES[:2], replace=True)
    assert len(rebuilt) == 2 and len(KnowledgeBase.load(kb.path)) == 2
    assert entries(kb.path.parent) == ["kb"]


# -- knowledge base: bad input and damaged directories ------------------------------------------------


def test_kb_build_rejects_empty_input_and_bad_encoder_output(tmp_path):
    with pytest.raises(InputError, match="no passages"):
        build(tmp_path / "empty", passages=[])
    with pytest.raises(InputError, match="has 1 rows for a batch of 4 passages"):
        build(tmp_path / "rows", encode=lambda batch: encode_passages(batch)[:1])
    with pytest.raises(InputError, match="encoder_info says dim 16 but .* dimension 32"):
        KnowledgeBase.build(
            PASSAGES, encode_passages, {"name": "x", "dim": 16}, tmp_path / "dim", progress=False
        )
    assert entries(tmp_path) == []


def test_kb_build_refuses_to_replace_a_non_kb_directory(tmp_path):
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "thesis.tex").write_text("do not delete")
    with pytest.raises(KnowledgeBaseError, match=f"refusing to replace {precious}"):
        build(precious)
    assert (precious / "thesis.tex").read_text() == "do not delete"


class EncoderCrash(RuntimeError):
    pass


def crash_on_second_batch():
    calls = []

    def encode(batch):
        calls.append(len(batch))
        if len(calls) == 2:
            raise EncoderCrash("simulated crash mid-build")
        return encode_passages(batch)

    return encode


def test_interrupted_build_leaves_no_output(tmp_path):
    with pytest.raises(EncoderCrash):
        build(tmp_path / "kb", encode=crash_on_second_batch())
    assert entries(tmp_path) == []


def test_interrupted_rebuild_keeps_previous_kb(kb, tmp_path):
    before = {name: (kb.path / name).read_bytes() for name in entries(kb.path)}
    more = [Passage(f"{p.id}/{copy}", p.title, p.text) for copy in range(3) for p in PASSAGES]
    with pytest.raises(EncoderCrash):
        build(kb.path, passages=more, encode=crash_on_second_batch(), replace=True)
    assert entries(tmp_path) == ["kb"]
    after = {name: (kb.path / name).read_bytes() for name in entries(kb.path) if name != ".lock"}
    assert after == before  # untouched but for the (empty) lock file the build held meanwhile
    assert list(KnowledgeBase.load(kb.path)) == PASSAGES


def test_kb_load_missing_directory(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(KnowledgeBaseError, match=f"knowledge base {missing} does not exist; build one"):
        KnowledgeBase.load(missing)


def test_kb_load_directory_without_manifest(tmp_path):
    with pytest.raises(KnowledgeBaseError, match="manifest.json is missing"):
        KnowledgeBase.load(tmp_path)


@pytest.mark.parametrize("name", ["passages.sqlite", "embeddings.npy", "index.faiss"])
def test_kb_load_missing_file(kb, name):
    (kb.path / name).unlink()
    with pytest.raises(KnowledgeBaseError, match=f"incomplete: {name} is missing"):
        KnowledgeBase.load(kb.path)


@pytest.mark.parametrize("name", ["passages.sqlite", "embeddings.npy", "index.faiss"])
def test_kb_load_truncated_file(kb, name):
    path = kb.path / name
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(KnowledgeBaseError, match=f"{path} has .* bytes .* truncated"):
        KnowledgeBase.load(kb.path, verify="size")


def test_kb_load_checksum_mismatch(kb):
    path = kb.path / "passages.sqlite"
    path.write_bytes(path.read_bytes().replace(b"Berlin", b"Bonn!!"))
    with pytest.raises(KnowledgeBaseError, match=f"{path} does not match its sha256 checksum"):
        KnowledgeBase.load(kb.path)
    assert KnowledgeBase.load(kb.path, verify="size")[1].title == "Bonn!!"  # size-only skips hashing
    with pytest.raises(KnowledgeBaseError, match="sha256"):
        KnowledgeBase.load(kb.path, verify="size").verify()


def test_kb_load_corrupt_manifest(kb):
    (kb.path / "manifest.json").write_text("{not json")
    with pytest.raises(KnowledgeBaseError, match="manifest.json is corrupt"):
        KnowledgeBase.load(kb.path)


def test_kb_load_newer_format(kb):
    manifest = json.loads((kb.path / "manifest.json").read_text())
    manifest["format_version"] = 99
    (kb.path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(KnowledgeBaseError, match="format_version 99"):
        KnowledgeBase.load(kb.path)


def test_kb_load_encoder_mismatch_names_both(kb):
    query_encoder = {"name": "other/encoder", "pooling": "cls"}
    with pytest.raises(KnowledgeBaseError) as info:
        KnowledgeBase.load(kb.path, expected_encoder=query_encoder)
    message = str(info.value)
    assert str(kb.path) in message
    assert "'fake/hashed-bow' (mean pooling" in message and "'other/encoder' (cls pooling)" in message
    assert "rebuild" in message


def test_kb_load_accepts_matching_encoder_subset(kb):
    assert len(KnowledgeBase.load(kb.path, expected_encoder={"name": "fake/hashed-bow"})) == len(PASSAGES)


def test_lower_layers_do_not_import_torch_or_higher_layers():
    code = (
        "import sys, openbook.corpus, openbook.index, openbook.data\n"
        "banned = ('torch', 'transformers', 'openbook.models', 'openbook.rag')\n"
        "bad = [m for m in banned if m in sys.modules]\n"
        "print(bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert result.stdout.strip() == "[]"
