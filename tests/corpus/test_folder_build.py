"""``openbook kb build FOLDER``: every supported file is read, every other file is named with its reason,
the summary (and ``--json``) counts the files read per type, and a bad file never stops the build after
the encoder has loaded (``--strict`` stops before it instead)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from openbook.index import KnowledgeBase
from tiny_kb import run

pytest.importorskip("trafilatura")
pytest.importorskip("pypdf")
pytest.importorskip("docx")

GOOD = {"handbook.html": "html", "guide.pdf": "pdf", "leave.docx": "docx", "staff.csv": "csv",
        "notes/expenses.md": "markdown", "notes/cafe.txt": "text", "records.jsonl": "jsonl", "psgs.tsv": "tsv"}


@pytest.fixture
def folder(tmp_path, docs) -> Path:
    """A folder of ordinary documents of every supported type, and files that cannot be read."""
    root = tmp_path / "docs"
    (root / "notes").mkdir(parents=True)
    (root / "handbook.html").write_text(docs.HTML_PAGE, encoding="utf-8")
    (root / "guide.pdf").write_bytes(docs.make_pdf(["First page words", "Second page words"]))
    docs.make_docx(root / "leave.docx")
    (root / "staff.csv").write_text("name,role\nAnn,engineer\nBo,manager\n", encoding="utf-8")
    (root / "notes" / "expenses.md").write_text(docs.MARKDOWN_NOTE, encoding="utf-8")
    (root / "notes" / "cafe.txt").write_bytes("Le café est fermé le dimanche et les jours fériés.".encode("cp1252"))
    (root / "records.jsonl").write_text(json.dumps({"title": "Moon", "text": "the moon orbits the earth"}) + "\n")
    (root / "psgs.tsv").write_text("id\ttext\ttitle\n7\tthe pacific is the largest ocean\tPacific\n")
    (root / ".hidden.md").write_text("# secret", encoding="utf-8")
    return root


def add_bad_files(root: Path, docs) -> dict[str, str]:
    """Files a folder build cannot read, by name, with their reasons."""
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (root / "empty.txt").write_bytes(b"")
    (root / "locked.pdf").write_bytes(docs.encrypted_pdf(["secret words"]))
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\nnot really a pdf\n")
    (root / "blob.txt").write_bytes(bytes(range(256)) * 8)
    (root / "numbers.csv").write_text("1,2,3\n4,5,6\n", encoding="utf-8")
    os.symlink("self.md", root / "self.md")  # a symbolic link to itself
    os.symlink("..", root / "notes" / "up")  # a folder that contains itself
    return {"photo.png": "unsupported type", "empty.txt": "empty", "locked.pdf": "encrypted",
            "broken.pdf": "corrupt", "blob.txt": "binary", "numbers.csv": "no header", "self.md": "unreadable",
            "notes/up": "unreadable"}


def test_a_folder_build_reads_every_type_and_names_every_file_it_did_not_read(capsys, tmp_path, folder, docs, loaded):
    bad = add_bad_files(folder, docs)
    out = tmp_path / "kb"
    code, stdout, err = run(capsys, "kb", "build", folder, "--out", out, "--quiet")
    assert code == 0, err
    assert loaded == ["default"]
    assert ("files read: 1 csv, 1 docx, 1 html, 1 jsonl, 1 markdown, 1 pdf, 1 text, 1 tsv") in stdout
    assert f"{folder / 'notes' / 'cafe.txt'}: read as cp1252 text (not UTF-8)" in stdout
    assert f"files not read: {len(bad)} (use --strict to stop before encoding instead)" in stdout
    for name in bad:
        assert f"  {folder / name}: " in stdout and f"not read {folder / name}: " in err
    assert "hidden files ignored: 1" in stdout
    kb = KnowledgeBase.load(out)
    titles = {passage.title for passage in kb}
    assert {"Vacation policy", "guide > page 1", "guide > page 2", "Leave policy > Vacation", "staff", "Expenses", "cafe",
            "Moon", "Pacific"} <= titles


def test_kb_build_json_carries_the_files_read_and_not_read(capsys, tmp_path, folder, docs, loaded):
    bad = add_bad_files(folder, docs)
    code, stdout, err = run(capsys, "kb", "build", folder, "--out", tmp_path / "kb", "--quiet", "--json")
    assert code == 0, err
    record = json.loads(stdout)
    assert record["files_read"] == {kind: 1 for kind in GOOD.values()}
    assert {Path(s["path"]).relative_to(folder).as_posix(): s["reason"] for s in record["files_not_read"]} == bad
    assert all(s["detail"] and "\n" not in s["detail"] for s in record["files_not_read"])
    assert record["encodings"] == {str(folder / "notes" / "cafe.txt"): "cp1252"}
    assert record["num_passages"] > 0 and record["hidden_files_ignored"] == 1
    assert record["seconds"]["encode_rows_timed"] == record["num_passages"] and record["disk_bytes"] > 0
    assert record["index"] == {"type": "flat", "params": {}}  # chosen by size: --index auto, the default


def test_strict_stops_before_the_encoder_loads(capsys, tmp_path, folder, docs, loaded):
    (folder / "locked.pdf").write_bytes(docs.encrypted_pdf(["secret words"]))
    out = tmp_path / "kb"
    code, _, err = run(capsys, "kb", "build", folder, "--out", out, "--quiet", "--strict")
    assert code == 2 and loaded == [] and not out.exists()
    assert len(err.strip().splitlines()) == 1
    assert f"{folder / 'locked.pdf'}: encrypted PDF" in err and "without --strict such files are named and skipped" in err
    (folder / "locked.pdf").unlink()
    code, stdout, err = run(capsys, "kb", "build", folder, "--out", out, "--quiet", "--strict")
    assert code == 0 and loaded == ["default"] and "files not read" not in stdout


def test_text_columns_pick_the_csv_columns(capsys, tmp_path, loaded):
    table = tmp_path / "staff.csv"
    table.write_text("name,role,salary\nAnn,engineer,100\n", encoding="utf-8")
    code, _, err = run(capsys, "kb", "build", table, "--out", tmp_path / "kb", "--quiet", "--text-columns", "name,role")
    assert code == 0, err
    kb = KnowledgeBase.load(tmp_path / "kb")
    assert [passage.text for passage in kb] == ["name: Ann role: engineer"]


def test_a_missing_docs_extra_stops_before_the_encoder_loads(capsys, tmp_path, folder, loaded, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "docx", None)
    code, _, err = run(capsys, "kb", "build", folder, "--out", tmp_path / "kb", "--quiet")
    assert code == 2 and loaded == [] and len(err.strip().splitlines()) == 1
    assert f"{folder}: reading DOCX files needs docx: pip install 'openbook[docs]'" in err


def test_corrupt_or_headerless_record_files_in_a_folder_are_named_not_fatal(capsys, tmp_path, folder, loaded):
    import gzip

    records = "".join(json.dumps({"title": f"T{i}", "text": f"record number {i}"}) + "\n" for i in range(2000))
    (folder / "cut.jsonl.gz").write_bytes(gzip.compress(records.encode())[:-40])
    (folder / "headless.tsv").write_text("7\tthe pacific\tPacific\n", encoding="utf-8")
    code, stdout, err = run(capsys, "kb", "build", folder, "--out", tmp_path / "kb", "--quiet", "--json")
    assert code == 0, err  # with the default --on-error stop: these are whole files, not malformed records
    not_read = {Path(s["path"]).name: s for s in json.loads(stdout)["files_not_read"]}
    assert not_read["cut.jsonl.gz"]["reason"] == "corrupt" and "gzip" in not_read["cut.jsonl.gz"]["detail"]
    assert "passage(s) before it were kept" in not_read["cut.jsonl.gz"]["detail"]
    assert not_read["headless.tsv"]["reason"] == "no header"
    assert not_read["headless.tsv"]["detail"].startswith("line 1: expected a header row")


def test_a_folder_with_nothing_readable_is_one_line(capsys, tmp_path, loaded):
    folder = tmp_path / "pictures"
    folder.mkdir()
    (folder / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    code, _, err = run(capsys, "kb", "build", folder, "--out", tmp_path / "kb", "--quiet")
    assert code == 2 and loaded == [] and len(err.strip().splitlines()) == 1
    assert f"{folder}: no file openbook reads in this folder (1 not read: {folder / 'photo.png'}: unsupported type" in err


def test_kb_add_of_a_folder_reports_the_same(capsys, tmp_path, folder, loaded):
    first = tmp_path / "first.jsonl"
    first.write_text(json.dumps({"id": "sun", "title": "Sun", "text": "the sun is a star"}) + "\n", encoding="utf-8")
    kb = tmp_path / "kb"
    assert run(capsys, "kb", "build", first, "--out", kb, "--quiet")[0] == 0
    (folder / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    code, stdout, err = run(capsys, "kb", "add", kb, folder, "--quiet", "--json")
    assert code == 0, err
    record = json.loads(stdout)
    assert record["version"] == 2 and record["files_read"] == {kind: 1 for kind in GOOD.values()}
    assert [(Path(s["path"]).name, s["reason"]) for s in record["files_not_read"]] == [("photo.png", "unsupported type")]
