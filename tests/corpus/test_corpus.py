"""Tests of openbook.corpus (chunking and readers) and of the shipped demo corpus."""

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from openbook.corpus import Passage, chunk_article, passages_from_record, read_passages, read_records, split_words
from openbook.data import demo_passages_path
from openbook.errors import InputError

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path("/work/shared/data")

TEXTS = [
    "",
    "   \n\t ",
    "one",
    "a b c d e f g h i j",
    "  lots   of\nwhitespace\tbetween\n\n words  here ",
    " ".join(f"w{i}" for i in range(257)),
]


def write_jsonl(path: Path, lines: list[str]) -> Path:
    """Write raw lines (gzip if the name ends in .gz) and return the path."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if path.suffix == ".gz":
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


# -- chunking -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("max_words", [1, 3, 100])
def test_split_words_disjoint_and_complete(text, max_words):
    chunks = split_words(text, max_words)
    words_in_chunks = [word for chunk in chunks for word in chunk.split()]
    assert words_in_chunks == text.split()
    assert all(1 <= len(chunk.split()) <= max_words for chunk in chunks)
    assert all(len(chunk.split()) == max_words for chunk in chunks[:-2])


def chunk_sizes(num_words: int, max_words: int = 100) -> list[int]:
    return [len(chunk.split()) for chunk in split_words(" ".join(f"w{i}" for i in range(num_words)), max_words)]


def test_split_words_empty_and_default_size():
    assert split_words("") == []
    assert split_words(" \n ") == []
    assert chunk_sizes(250) == [100, 100, 50]


@pytest.mark.parametrize("num_words, sizes", [
    (205, [100, 53, 52]),  # not 100, 100, 5: a short tail shares the last two chunks' words evenly
    (150, [100, 50]),  # a tail of exactly half stays
    (149, [75, 74]),
    (120, [60, 60]),
    (101, [51, 50]),
    (100, [100]),
    (80, [80]),  # a text under max_words stays one chunk, however short
    (3, [3]),
    (349, [100, 100, 75, 74]),
])
def test_split_words_merges_a_short_last_chunk(num_words, sizes):
    assert chunk_sizes(num_words) == sizes


@pytest.mark.parametrize("max_words", [1, 2, 3, 4, 5, 7, 10, 100])
def test_split_words_properties_over_many_lengths(max_words):
    for num_words in range(0, 4 * max_words + 3):
        words = [f"w{i}" for i in range(num_words)]
        chunks = split_words(" ".join(words), max_words)
        sizes = [len(chunk.split()) for chunk in chunks]
        assert [word for chunk in chunks for word in chunk.split()] == words  # each word once, in order
        assert all(1 <= size <= max_words for size in sizes)
        if num_words == 0:
            assert chunks == []
        elif num_words <= max_words:
            assert sizes == [num_words]
        else:  # as many chunks as plain cutting gives: a short remainder shares the chunk before it
            assert len(chunks) == -(-num_words // max_words)
        assert all(size == max_words for size in sizes[:-2])  # DPR's fixed chunks up to the last two
        if len(chunks) > 1:  # no tiny tail: every chunk of a split text has at least half of max_words
            assert all(2 * size >= max_words for size in sizes)
            assert sizes[-2] == max_words or sizes[-2] - sizes[-1] in (0, 1)  # evened out


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "100"])
def test_split_words_rejects_bad_max_words(bad):
    with pytest.raises(InputError, match="max_words"):
        split_words("a b c", bad)


def test_chunk_article_keeps_title_and_numbers_ids():
    passages = chunk_article("Title", "a b c d e", max_words=2, id_prefix="doc7-")
    assert passages == [
        Passage("doc7-0", "Title", "a b"),
        Passage("doc7-1", "Title", "c d"),
        Passage("doc7-2", "Title", "e"),
    ]
    assert chunk_article("T", "  ") == []


# -- record forms -------------------------------------------------------------------------------------


def test_passages_from_record_title_text():
    assert passages_from_record({"title": "T", "text": "hello  world", "extra": 1}) == [
        Passage("", "T", "hello world")
    ]


def test_passages_from_record_text_only():
    assert passages_from_record({"text": "just text"}, base_id="b:1") == [Passage("b:1", "", "just text")]


def test_passages_from_record_dpr_contents():
    record = {"id": "42", "contents": '"Evan Morris"\nEvan Morris Evan L. Morris was a lobbyist.'}
    assert passages_from_record(record) == [
        Passage("42", "Evan Morris", "Evan Morris Evan L. Morris was a lobbyist.")
    ]


def test_passages_from_record_dpr_title_variants():
    unquoted = passages_from_record({"id": 1, "contents": "Absalon\ndragged forth"})
    assert unquoted == [Passage("1", "Absalon", "dragged forth")]
    escaped = passages_from_record({"contents": '"""Weird"" Al"\ntext'})
    assert escaped[0].title == '"Weird" Al'
    no_newline = passages_from_record({"contents": "only text here"})
    assert no_newline == [Passage("", "", "only text here")]


def test_passages_from_record_long_text_gets_chunk_ids():
    passages = passages_from_record({"title": "T", "text": "a b c d e"}, base_id="x:3", max_words=2)
    assert [p.id for p in passages] == ["x:3#0", "x:3#1", "x:3#2"]
    assert {p.title for p in passages} == {"T"}


@pytest.mark.parametrize(
    "record, message",
    [
        ({"title": "T"}, "neither a 'text' nor a 'contents'"),
        ({"text": 5}, "'text' must be a string"),
        ({"title": ["x"], "text": "t"}, "'title' must be a string"),
    ],
)
def test_passages_from_record_rejects_bad_records(record, message):
    with pytest.raises(InputError, match=message):
        passages_from_record(record)


# -- files --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["records.jsonl", "records.jsonl.gz"])
def test_read_records_plain_and_gzip(tmp_path, name):
    path = write_jsonl(tmp_path / name, ['{"text": "a"}', "", '{"text": "b"}'])
    assert list(read_records(path)) == [{"text": "a"}, {"text": "b"}]


def test_read_records_names_file_and_line_of_malformed_json(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", ['{"text": "a"}', "", '{"text": "b"', '{"text": "c"}'])
    with pytest.raises(InputError, match=rf"^{path}:3: malformed JSON"):
        list(read_records(path))


def test_read_records_rejects_non_objects(tmp_path):
    path = write_jsonl(tmp_path / "list.jsonl", ['{"text": "a"}', "[1, 2]"])
    with pytest.raises(InputError, match=rf"{path}:2: expected a JSON object, got list"):
        list(read_records(path))


def test_read_records_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        list(read_records(tmp_path / "nope.jsonl"))


def test_read_records_truncated_gzip(tmp_path):
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "a"}\n' * 1000)[:-30])
    with pytest.raises(InputError, match=f"{path}:.*gzip"):
        list(read_records(path))


def test_read_passages_all_forms_with_ids(tmp_path):
    lines = [
        json.dumps({"title": "Long", "text": "a b c d e"}),
        json.dumps({"text": "no title"}),
        json.dumps({"id": "17", "contents": '"Dpr"\ndpr text'}),
    ]
    path = write_jsonl(tmp_path / "mixed.jsonl.gz", lines)
    passages = list(read_passages(path, max_words=2, id_prefix="src:"))
    assert passages == [
        Passage("src:0#0", "Long", "a b"),
        Passage("src:0#1", "Long", "c d"),
        Passage("src:0#2", "Long", "e"),
        Passage("src:1", "", "no title"),
        Passage("src:17", "Dpr", "dpr text"),
    ]


def test_read_passages_names_file_and_line_of_bad_record(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [json.dumps({"text": "ok"}), json.dumps({"txt": "typo"})])
    with pytest.raises(InputError, match=rf"^{path}:2: record has neither"):
        list(read_passages(path))


# -- the shipped demo corpus --------------------------------------------------------------------------


def test_demo_corpus_is_shipped_and_well_formed():
    path = demo_passages_path()
    assert path.is_file() and path.stat().st_size < 10 * 1024 * 1024
    records = list(read_records(path))
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)) > 10_000
    assert {i.split(":")[0] for i in ids} == {"vital", "nqgold", "wiki18", "boolq"}
    assert all(set(r) == {"id", "title", "text"} for r in records)
    assert all(1 <= len(r["text"].split()) <= 100 for r in records)
    # No tiny article tails: every chunk of a split record has at least half of the 100 words.
    assert all(len(r["text"].split()) >= 50 for r in records if "#" in r["id"])
    assert len({(r["title"], r["text"]) for r in records}) == len(records)
    # Reading it back as passages keeps the ids (no re-chunking).
    assert [p.id for p in read_passages(path)] == ids


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs the shared development data")
def test_demo_corpus_is_reproducible(tmp_path):
    out = tmp_path / "demo.jsonl.gz"
    script = REPO / "scripts" / "make_demo_corpus.py"
    subprocess.run(
        [sys.executable, str(script), "--data-dir", str(SHARED_DATA), "--out", str(out)],
        check=True, capture_output=True,
    )
    assert out.read_bytes() == demo_passages_path().read_bytes()


def load_script(name: str):
    """A module of scripts/ (which import their neighbours by name)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rechunk_demo_splits_complete_articles_again():
    rechunk_demo = load_script("rechunk_demo")
    words = [f"w{i}" for i in range(105)]
    old = [
        Passage("s:0#0", "A", " ".join(words[:100])), Passage("s:0#1", "A", " ".join(words[100:])),
        Passage("s:1", "B", "capital city."),  # a record kept whole stays, however short
        Passage("s:2#1", "C", "a chunk whose first one was dropped"),  # incomplete: cannot be re-joined
    ]
    new = [p for _, p in rechunk_demo.rechunk(old)]
    assert new[0] == Passage("s:0#0", "A", " ".join(words[:53]))
    assert new[1] == Passage("s:0#1", "A", " ".join(words[53:]))
    assert new[2:] == old[2:]
    assert [p for _, p in rechunk_demo.rechunk(new)] == new  # running it again changes nothing


def test_shipped_demo_corpus_follows_the_current_chunking():
    rechunk_demo = load_script("rechunk_demo")
    shipped = rechunk_demo.read_demo(demo_passages_path())
    assert [p for _, p in rechunk_demo.rechunk(shipped)] == shipped


def test_rechunk_demo_encodes_only_changed_passages():
    rechunk_demo = load_script("rechunk_demo")
    old = [Passage("a", "T", "one"), Passage("b", "T", "two")]
    old_vectors = np.array([[1, 0], [0, 1]], dtype=np.float16)
    new = [Passage("b", "T", "two"), Passage("c", "T", "three"), Passage("a#0", "T", "one")]
    asked = []

    def encode(batch):
        asked.extend(batch)
        return np.full((len(batch), 2), 0.5, dtype=np.float32)

    vectors, encoded = rechunk_demo.reuse_vectors(old, old_vectors, new, encode)
    assert encoded == 1 and asked == [new[1]] and vectors.dtype == np.float16
    assert vectors.tolist() == [[0, 1], [0.5, 0.5], [1, 0]]  # copied rows exact; 0.5 is exact in float16
