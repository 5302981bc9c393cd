"""Small documents made by the tests themselves (no binary fixtures): PDFs written by hand (bench/_pdf.py), DOCX with
python-docx, HTML and Markdown pages. The ``docs`` fixture hands them to the tests of this folder."""

from __future__ import annotations

import importlib.util
import io
import types
from pathlib import Path

import pytest

import openbook.commands.kb as kb_commands
from tiny_kb import BowEncoder


def _load_pdf_writer():
    """bench/_pdf.py, the one hand-written PDF writer (bench/ is not a package, so loaded from its file)."""
    spec = importlib.util.spec_from_file_location("_pdf", Path(__file__).resolve().parents[2] / "bench" / "_pdf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PDF = _load_pdf_writer()


@pytest.fixture
def docs() -> types.SimpleNamespace:
    """The document makers and sample pages below."""
    return types.SimpleNamespace(make_pdf=make_pdf, encrypted_pdf=encrypted_pdf, make_docx=make_docx,
                                 HTML_PAGE=HTML_PAGE, MARKDOWN_NOTE=MARKDOWN_NOTE)


@pytest.fixture
def loaded(monkeypatch) -> list[str]:
    """Replace the encoder loader; returns the names it was asked for (empty: no model loaded)."""
    asked: list[str] = []

    def fake_load(name):
        asked.append(name)
        return BowEncoder("fake/bow")

    monkeypatch.setattr(kb_commands, "load_encoder", fake_load)
    return asked


def make_pdf(pages: list[str], title: str | None = None) -> bytes:
    """A minimal valid PDF with one line of Helvetica text per page (and ``title`` in its metadata), by the
    benchmark's writer (bench/_pdf.py)."""
    return PDF.pdf_bytes([[text] for text in pages], title=title)


def encrypted_pdf(pages: list[str], password: str = "secret") -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter(clone_from=io.BytesIO(make_pdf(pages)))
    writer.encrypt(user_password=password, owner_password=password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx(path: Path, title: str | None = "Leave policy") -> Path:
    import docx

    document = docx.Document()
    if title:
        document.core_properties.title = title
    document.add_heading("Vacation", level=1)
    document.add_paragraph("Employees get twenty five days of paid vacation each year.")
    table = document.add_table(rows=2, cols=2)
    for row, cells in zip(table.rows, [("Kind", "Days"), ("Sick leave", "ten")]):
        for cell, text in zip(row.cells, cells):
            cell.text = text
    document.add_paragraph("Ask your manager first.")
    document.save(path)
    return path


HTML_PAGE = """<html><head><title>Handbook</title><style>.nav { color: red }</style>
<script>var tracking = "script text";</script></head><body>
<nav><a href="/">Home</a> | <a href="/about">About navigation link</a></nav>
<main><h1>Vacation policy</h1>
<p>Employees get twenty five days of paid vacation each year, taken in agreement with their manager.</p>
<h2>Carry over</h2>
<p>Up to five unused days carry over into the next calendar year and expire at the end of March.</p></main>
<footer>Copyright footer text, all rights reserved.</footer></body></html>"""

MARKDOWN_NOTE = """# Expenses

Claim *travel* costs within [thirty days](https://example.org).

## Rates

| Item | Rate |
|------|-----:|
| Hotel | 120 |
| Meal | 30 |

```python
print("fenced code")
```
"""
