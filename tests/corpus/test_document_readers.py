"""The readers of ordinary documents (HTML, PDF, DOCX, CSV, Markdown, text in any encoding), each with the
files it must refuse, named with a one-line reason. The documents are made by the tests (conftest.py), never stored."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from openbook.corpus import RecordErrors, SourceReport, check_sources, iter_source_passages
from openbook.corpus.readers import document
from openbook.corpus.readers import docx as docx_reader
from openbook.corpus.readers.document import FileProblem
from openbook.errors import InputError

pytest.importorskip("trafilatura")
pytest.importorskip("pypdf")
pytest.importorskip("docx")


def read(path: Path, **kwargs) -> tuple[list, SourceReport]:
    report = SourceReport()
    passages = [item.passage for item in iter_source_passages([path], report=report, **kwargs)]
    return passages, report


def words(passages) -> str:
    return " ".join(p.text for p in passages)


def test_html_keeps_the_main_content_and_drops_navigation_scripts_styles_and_footers(docs, tmp_path):
    page = tmp_path / "handbook.html"
    page.write_text(docs.HTML_PAGE, encoding="utf-8")
    passages, report = read(page)
    text = words(passages)
    assert "twenty five days of paid vacation" in text and "expire at the end of March" in text
    for dropped in ("navigation link", "script text", "color", "footer text"):
        assert dropped not in text
    assert [p.title for p in passages] == ["Vacation policy", "Vacation policy > Carry over"]  # headings: sections
    assert report.read == {"html": 1}


def test_pdf_pages_keep_their_numbers(docs, tmp_path):
    pdf = tmp_path / "guide.pdf"
    pdf.write_bytes(docs.make_pdf(["First page words", "Second page words"]))
    passages, report = read(pdf)
    assert [(p.id, p.title, p.text) for p in passages] == [
        ("guide.pdf:page1", "guide > page 1", "First page words"),
        ("guide.pdf:page2", "guide > page 2", "Second page words"),
    ]
    assert report.read == {"pdf": 1}


def test_pdf_text_and_title_with_parentheses_and_backslashes_read_back_as_written(docs, tmp_path):
    """The hand-written PDFs (bench/_pdf.py, also the benchmark's) escape what a PDF string cannot hold as is."""
    pdf = tmp_path / "rates.pdf"
    pdf.write_bytes(docs.make_pdf(["Rates (net: 5) apply :-) see C:\\rates"], title="Travel (2026"))
    passages, _ = read(pdf)
    assert [(p.title, p.text) for p in passages] == [("Travel (2026 > page 1", "Rates (net: 5) apply :-) see C:\\rates")]


def test_docx_paragraphs_headings_and_tables(docs, tmp_path):
    passages, report = read(docs.make_docx(tmp_path / "leave.docx"))
    assert [p.title for p in passages] == ["Leave policy > Vacation"]  # a Heading 1 starts a section
    assert passages[0].text == ("Employees get twenty five days of paid vacation each year. "
                                "Kind | Days Sick leave | ten Ask your manager first.")  # in document order
    assert report.read == {"docx": 1}


def test_markdown_is_rendered_to_text(docs, tmp_path):
    note = tmp_path / "expenses.md"
    note.write_text(docs.MARKDOWN_NOTE, encoding="utf-8")
    passages, _ = read(note)
    assert [(p.title, p.text) for p in passages] == [
        ("Expenses", "Claim travel costs within thirty days."),
        ("Expenses > Rates", 'Item: Hotel; Rate: 120 Item: Meal; Rate: 30 print("fenced code")'),
    ]
    for markup in ("#", "```", "|", "---", "*", "]("):
        assert markup not in " ".join(p.text for p in passages)


def test_csv_rows_are_records_with_named_columns(tmp_path):
    table = tmp_path / "staff.csv"
    table.write_text("id,title,name,role,notes\nann,Ann Lee,Ann,engineer,likes maps\nbo,,Bo,manager,\n", encoding="utf-8")
    passages, report = read(table)
    assert [(p.id, p.title, p.text) for p in passages] == [
        ("ann", "Ann Lee", "name: Ann role: engineer notes: likes maps"),
        ("bo", "", "name: Bo role: manager"),
    ]
    passages, _ = read(table, text_columns=["role"])
    assert [p.text for p in passages] == ["role: engineer", "role: manager"]
    semicolons = tmp_path / "prices.csv"
    semicolons.write_text("item;price\ntea;3\n", encoding="utf-8")
    assert [(p.id, p.title, p.text) for p in read(semicolons)[0]] == [("prices.csv:0", "prices", "item: tea price: 3")]
    passages, report = read(table, text_columns=["salary"])
    assert passages == [] and "no column 'salary' for --text-columns" in report.skipped[0].detail


def test_text_in_other_encodings_is_decoded_and_the_encoding_named(tmp_path):
    text = "Le café est fermé le dimanche; les employés reçoivent vingt-cinq jours de congés payés."
    latin = tmp_path / "cafe.txt"
    latin.write_bytes(text.encode("cp1252"))
    (passage,), report = read(latin)
    assert passage.text == text and report.encodings == {str(latin): "cp1252"}
    russian = tmp_path / "privet.txt"
    russian.write_bytes("Привет, как дела? Это обычный текст на русском языке.".encode("cp1251"))
    (passage,), report = read(russian)
    assert passage.text.startswith("Привет") and report.encodings == {str(russian): "cp1251"}
    utf16 = tmp_path / "wide.md"
    utf16.write_text("# Wide\n\nwritten in UTF-16", encoding="utf-16")
    (passage,), report = read(utf16)
    assert (passage.title, passage.text) == ("Wide", "written in UTF-16") and "utf_16" in report.encodings[str(utf16)]


def refused(path: Path) -> tuple[str, str]:
    passages, report = read(path)
    assert passages == [] and len(report.skipped) == 1 and report.read == {}
    skipped = report.skipped[0]
    assert skipped.path == str(path) and "\n" not in skipped.detail
    return skipped.reason, skipped.detail


def test_bad_pdfs_are_named(docs, tmp_path):
    encrypted = tmp_path / "locked.pdf"
    encrypted.write_bytes(docs.encrypted_pdf(["secret words"]))
    assert refused(encrypted) == ("encrypted", "encrypted PDF (it needs a password): save an unencrypted copy")
    for name, data in [("garbage.pdf", b"%PDF-1.4\nnot really a pdf\n"), ("cut.pdf", docs.make_pdf(["Hello"])[:150])]:
        (tmp_path / name).write_bytes(data)
        reason, detail = refused(tmp_path / name)
        assert reason == "corrupt" and detail.startswith("corrupt or not a PDF")


def test_docx_with_an_absurd_decompressed_size_is_refused_before_reading(docs, tmp_path, monkeypatch):
    path = docs.make_docx(tmp_path / "big.docx")
    declared = sum(info.file_size for info in zipfile.ZipFile(path).infolist())
    monkeypatch.setattr(docx_reader, "MAX_DOCX_UNZIPPED_BYTES", declared - 1)

    def never(*args, **kwargs):
        raise AssertionError("python-docx must not open a DOCX over the bound")

    monkeypatch.setattr("docx.Document", never)
    reason, detail = refused(path)
    assert reason == "too large" and f"{declared} bytes declared" in detail
    (tmp_path / "not.docx").write_bytes(b"PK\x03\x04 broken zip")
    assert refused(tmp_path / "not.docx")[0] == "corrupt"


def test_huge_html_is_refused_by_size_before_parsing(docs, tmp_path, monkeypatch):
    page = tmp_path / "huge.html"
    page.write_text(docs.HTML_PAGE, encoding="utf-8")
    monkeypatch.setitem(document.MAX_BYTES, "html", 100)
    monkeypatch.setattr("trafilatura.extract", lambda *a, **k: pytest.fail("a huge page must not be parsed"))
    reason, detail = refused(page)
    assert reason == "too large" and "the limit for html files is 100" in detail


def test_binary_data_with_a_text_suffix_is_refused(tmp_path):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    for name in ("image.txt", "image.md", "image.csv", "image.html"):
        (tmp_path / name).write_bytes(png)
        reason, detail = refused(tmp_path / name)
        assert reason == "binary" and "binary data" in detail


def test_csv_without_a_header_is_refused(tmp_path):
    table = tmp_path / "rows.csv"
    table.write_text("1,Paris,capital of France\n2,Berlin,capital of Germany\n", encoding="utf-8")
    reason, detail = refused(table)
    assert reason == "no header" and "the first row must name the columns" in detail
    blank = tmp_path / "blank.csv"
    blank.write_text(",name\nx,y\n", encoding="utf-8")
    assert refused(blank)[0] == "no header"


def test_a_missing_docs_extra_is_one_line_naming_the_extra(docs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pypdf", None)  # what an install without openbook[docs] has
    pdf = tmp_path / "guide.pdf"
    pdf.write_bytes(docs.make_pdf(["words"]))
    with pytest.raises(FileProblem, match=r"^reading PDF files needs pypdf: pip install 'openbook\[docs\]'$"):
        document.need("pypdf", "PDF files")
    with pytest.raises(InputError, match=rf"^{tmp_path}: reading PDF files needs pypdf: pip install"):
        check_sources([tmp_path])


def test_malformed_csv_rows_go_to_record_errors(tmp_path):
    table = tmp_path / "short.csv"
    table.write_text("name,role\nann,engineer\nbo\n", encoding="utf-8")
    errors = RecordErrors("skip")
    passages = [i.passage for i in iter_source_passages([table], errors=errors)]
    assert [p.text for p in passages] == ["name: ann role: engineer"]
    assert errors.examples == [f"{table}:3: expected 2 fields (name, role), got 1"]


def test_an_html_fragment_keeps_its_text(tmp_path):
    fragment = tmp_path / "fragment.htm"
    fragment.write_text("<p>Office hours are nine to five</p><style>p { color: red }</style>", encoding="utf-8")
    (passage,), report = read(fragment)
    assert (passage.title, passage.text) == ("fragment", "Office hours are nine to five") and report.read == {"html": 1}
