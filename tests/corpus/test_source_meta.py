"""Each passage read from a file carries its metadata: source (its document id), type, page, section,
modified (ISO 8601 UTC), and the JSON Lines, Parquet, CSV and TSV fields a user names (``--meta-fields``,
``build_kb(meta_fields=...)``); a value that is not a JSON scalar, or too long, makes its record malformed."""

from __future__ import annotations

import calendar
import json
import os
import time
from pathlib import Path

import pytest

import openbook.commands.kb as kb_commands
from openbook.corpus import RecordErrors, SourceReport, check_meta_fields, iter_source_passages
from openbook.corpus.readers.meta import MAX_META_CHARS
from openbook.errors import InputError
from openbook.rag import build_kb
from tiny_kb import BowEncoder, run

STAMP = "2026-01-02T03:04:05Z"


def stamped(path: Path) -> Path:
    """``path`` with its modification time set to ``STAMP``."""
    seconds = calendar.timegm(time.strptime(STAMP, "%Y-%m-%dT%H:%M:%SZ"))
    os.utime(path, (seconds, seconds))
    return path


def metas(sources, **kwargs) -> list[dict]:
    report = SourceReport()
    items = list(iter_source_passages(sources, report=report, **kwargs))
    assert not report.skipped, report.skipped
    return [item.passage.meta for item in items]


class RecordingEncoder(BowEncoder):
    """The test encoder, remembering the passages it was given (with their metadata)."""

    def __init__(self):
        super().__init__()
        self.seen: list = []

    def encode_passages(self, passages, batch_size: int = 64):
        self.seen.extend(passages)
        return super().encode_passages(passages)


@pytest.fixture
def recording(monkeypatch) -> RecordingEncoder:
    encoder = RecordingEncoder()
    monkeypatch.setattr(kb_commands, "load_encoder", lambda name: encoder)
    return encoder


def test_every_type_has_source_type_and_modified(tmp_path, docs):
    pytest.importorskip("trafilatura")
    pytest.importorskip("pypdf")
    pytest.importorskip("docx")
    root = tmp_path / "docs"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "guide.md").write_text("# Guide\n\nIntro.\n\n## Setup\n\nSetup words.\n", encoding="utf-8")
    (root / "handbook.html").write_text(docs.HTML_PAGE, encoding="utf-8")
    (root / "guide.pdf").write_bytes(docs.make_pdf(["First page", "Second page"]))
    docs.make_docx(root / "leave.docx")
    (root / "staff.csv").write_text("name,role\nAnn,engineer\n", encoding="utf-8")
    (root / "cafe.txt").write_text("Open on Sundays.", encoding="utf-8")
    (root / "records.jsonl").write_text(json.dumps({"text": "the moon"}) + "\n", encoding="utf-8")
    (root / "psgs.tsv").write_text("id\ttext\ttitle\n7\tthe pacific\tPacific\n", encoding="utf-8")
    for path in root.rglob("*.*"):
        stamped(path)
    got = {(m["source"], m.get("page"), m.get("section")): m for m in metas([root])}
    assert set(got) == {
        ("cafe.txt", None, None), ("guide.pdf", 1, None), ("guide.pdf", 2, None), ("handbook.html", None, None),
        ("handbook.html", None, "Carry over"), ("leave.docx", None, "Vacation"), ("notes/guide.md", None, None),
        ("notes/guide.md", None, "Setup"), ("psgs.tsv", None, None), ("records.jsonl", None, None),
        ("staff.csv", None, None),
    }
    types = {"cafe.txt": "text", "guide.pdf": "pdf", "handbook.html": "html", "leave.docx": "docx",
             "notes/guide.md": "markdown", "psgs.tsv": "tsv", "records.jsonl": "jsonl", "staff.csv": "csv"}
    for (source, page, section), meta in got.items():
        expected = {"source": source, "type": types[source], "modified": STAMP}
        expected.update({"page": page} if page else {}, **({"section": section} if section else {}))
        assert meta == expected


def test_a_file_source_and_a_record_document_name_the_source(tmp_path):
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"text": "a"}) + "\n" + json.dumps({"text": "b", "document": "faq/b"}) + "\n")
    assert [m for m in metas([stamped(records)])] == [{"source": "records.jsonl", "type": "jsonl", "modified": STAMP},
                                                      {"source": "faq/b", "type": "jsonl", "modified": STAMP}]


def test_jsonl_keeps_the_named_fields_that_are_scalars(tmp_path):
    path = tmp_path / "records.jsonl"
    lines = [{"text": "one two three", "lang": "en", "year": 2020, "score": 0.5, "public": True, "other": "x"},
             {"text": "four", "lang": None}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    got = metas([path], max_words=2, meta_fields=["lang", "year", "score", "public"])
    kept = {"lang": "en", "year": 2020, "score": 0.5, "public": True}
    assert [{k: m[k] for k in m if k not in ("source", "type", "modified")} for m in got] == [kept, kept, {}]


@pytest.mark.parametrize("value,problem", [
    (["a", "b"], "must be text, a number or true/false, got a list"),
    ({"a": 1}, "must be text, a number or true/false, got an object"),
    ("x" * (MAX_META_CHARS + 1), f"more than the {MAX_META_CHARS} a metadata value may have"),
    (2**70, "out of range"),
])
def test_a_value_that_cannot_be_kept_makes_its_record_malformed(tmp_path, value, problem):
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"text": "good", "tags": "fine"}) + "\n" + json.dumps({"text": "bad", "tags": value})
                    + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}:2: metadata field 'tags'.*{problem[:20]}"):
        list(iter_source_passages([path], meta_fields=["tags"]))
    errors = RecordErrors("skip")
    items = list(iter_source_passages([path], errors=errors, meta_fields=["tags"]))
    assert [i.passage.text for i in items] == ["good"] and errors.skipped == 1 and problem in errors.examples[0]


def test_nan_is_refused(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"text": "x", "score": NaN}\n', encoding="utf-8")
    with pytest.raises(InputError, match="'score': nan is not a finite number"):
        list(iter_source_passages([path], meta_fields=["score"]))


def test_csv_and_tsv_keep_the_named_columns_as_text(tmp_path):
    table = tmp_path / "staff.csv"
    table.write_text("name,Dept,year\nAnn,eng,2020\nBo,,2021\n", encoding="utf-8")
    got = metas([table], meta_fields=["dept", "year", "missing"])
    assert [{k: m[k] for k in ("dept", "year") if k in m} for m in got] == [{"dept": "eng", "year": "2020"},
                                                                           {"year": "2021"}]
    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("id\ttext\ttitle\tlang\n1\tthe pacific\tPacific\tEN\n", encoding="utf-8")
    assert metas([tsv], meta_fields=["lang"])[0]["lang"] == "EN"


def test_parquet_keeps_the_named_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"text": ["a b", "c"], "year": [2020, None], "tags": [["x"], ["y"]]}), path)
    assert [m.get("year") for m in metas([path], meta_fields=["year"])] == [2020, None]
    errors = RecordErrors("skip")
    assert list(iter_source_passages([path], errors=errors, meta_fields=["tags"])) == []
    assert errors.skipped == 2 and "got a list" in errors.examples[0]


@pytest.mark.parametrize("fields,problem", [
    (["source"], "'source' is set by openbook itself"),
    (["Modified"], "set by openbook itself"),
    ([""], "must be non-empty text"),
    ("lang", "a list of field names"),
])
def test_bad_field_names_are_refused(fields, problem):
    with pytest.raises(InputError, match=problem):
        check_meta_fields(fields)


def test_meta_fields_on_the_command_line(capsys, tmp_path, recording):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "records.jsonl").write_text(json.dumps({"text": "the moon", "lang": "en", "n": 3}) + "\n")
    (folder / "staff.csv").write_text("name,dept\nAnn,eng\n", encoding="utf-8")
    code, _, err = run(capsys, "kb", "build", folder, "--out", tmp_path / "kb", "--quiet", "--meta-fields", "lang,n,dept")
    assert code == 0, err
    assert sorted((p.meta["source"], p.meta.get("lang"), p.meta.get("n"), p.meta.get("dept")) for p in recording.seen) \
        == [("records.jsonl", "en", 3, None), ("staff.csv", None, None, "eng")]
    recording.seen.clear()
    (folder / "more.jsonl").write_text(json.dumps({"text": "the sun", "lang": "fr"}) + "\n")
    code, _, err = run(capsys, "kb", "sync", tmp_path / "kb", folder, "--quiet", "--meta-fields", "lang")
    assert code == 0, err
    assert [(p.text, p.meta["lang"]) for p in recording.seen] == [("the sun", "fr")]
    recording.seen.clear()
    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps({"text": "the stars", "lang": "de"}) + "\n")
    code, _, err = run(capsys, "kb", "add", tmp_path / "kb", extra, "--quiet", "--meta-fields", "lang")
    assert code == 0, err
    assert [(p.text, p.meta["lang"]) for p in recording.seen] == [("the stars", "de")]


def test_bad_meta_fields_on_the_command_line_are_one_line(capsys, tmp_path, recording):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "x", "tags": ["a"]}) + "\n")
    code, _, err = run(capsys, "kb", "build", bad, "--out", tmp_path / "kb", "--meta-fields", "type")
    assert code == 2 and "--meta-fields: metadata field 'type' is set by openbook itself" in err
    code, _, err = run(capsys, "kb", "build", bad, "--out", tmp_path / "kb", "--quiet", "--meta-fields", "tags")
    assert code == 2 and f"{bad}:1: metadata field 'tags' must be text, a number or true/false, got a list" in err
    assert "Traceback" not in err and not (tmp_path / "kb").exists()


def test_build_kb_keeps_the_named_fields(tmp_path):
    encoder = RecordingEncoder()
    build_kb([{"text": "Paris is in France", "lang": "en", "year": 2020}, "no fields here"], tmp_path / "kb",
             encoder=encoder, progress=False, meta_fields=["lang", "year"])
    assert [p.meta for p in encoder.seen] == [{"lang": "en", "year": 2020}, None]
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "staff.csv").write_text("name,dept\nAnn,eng\n", encoding="utf-8")
    encoder = RecordingEncoder()
    build_kb(folder, tmp_path / "kb2", encoder=encoder, progress=False, meta_fields=["dept"])
    assert [(p.meta["source"], p.meta["type"], p.meta["dept"]) for p in encoder.seen] == [("staff.csv", "csv", "eng")]
    with pytest.raises(InputError, match=r"^item 1 of the texts: metadata field 'lang' must be text"):
        build_kb(["fine", {"text": "x", "lang": {"code": "en"}}], tmp_path / "kb3", encoder=RecordingEncoder(),
                 progress=False, meta_fields=["lang"])
    assert not (tmp_path / "kb3").exists()
