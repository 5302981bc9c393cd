"""Small documents made by the tests themselves (no binary fixtures): PDFs written by hand, DOCX with
python-docx, HTML and Markdown pages. The ``docs`` fixture hands them to the tests of this folder."""

from __future__ import annotations

import io
import types
from pathlib import Path

import pytest

import openbook.commands.kb as kb_commands
from tiny_kb import BowEncoder


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


def make_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF with one line of Helvetica text per page (the xref offsets computed here)."""
    n = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R "
                       f">> >> /Contents {5 + 2 * i} 0 R >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return out


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
