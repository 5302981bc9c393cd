"""A minimal valid PDF written by hand (no PDF library): the one writer of bench/ingest.py's corpus and of the
tests' PDFs (tests/corpus/conftest.py loads this file).

Each page is a list of lines of Helvetica text, drawn top down; the cross-reference offsets are computed here.
Parentheses and backslashes in the text are escaped; the text should be Latin-1 (Helvetica's own encoding).
"""

from __future__ import annotations


def pdf_bytes(pages: list[list[str]], title: str | None = None, producer: str | None = None) -> bytes:
    """The PDF of ``pages`` (each a list of lines), with ``title`` and ``producer`` in its /Info if given."""
    n = len(pages)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{' '.join(f'{5 + 2 * i} 0 R' for i in range(n))}] /Count {n} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        _info(title, producer),
    ]
    for i, lines in enumerate(pages):
        shown = " T* ".join(f"({_escape(line)}) Tj" for line in lines)
        stream = f"BT /F1 10 Tf 13 TL 56 760 Td {shown} ET".encode()
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R "
                       f">> >> /Contents {6 + 2 * i} 0 R >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 4 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return out


def _info(title: str | None, producer: str | None) -> bytes:
    fields = [f"/{key} ({_escape(value)})" for key, value in (("Title", title), ("Producer", producer)) if value]
    return f"<< {' '.join(fields)} >>".encode()


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
