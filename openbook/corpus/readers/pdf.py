"""PDF (``.pdf``; needs ``openbook[docs]``): the text of each page, read with pypdf, page numbers kept.

The title is the document's own (its metadata) or the file name. Encrypted files open only when they
need no password; corrupt ones are named, as are PDFs without any text (e.g. scanned images).
"""

import io
import logging
from pathlib import Path

from openbook.corpus.readers.document import Document, FileProblem, Part, need, read_bytes

PDF_SUFFIXES = (".pdf",)


def read_pdf(path: Path) -> Document:
    data = read_bytes(path, "pdf")
    pypdf = need("pypdf", "PDF files")
    if not data.strip():
        raise FileProblem("empty", "empty file")
    log = logging.getLogger("pypdf")  # its warnings about a broken file would repeat the one-line problem
    level = log.level
    log.setLevel(logging.ERROR + 1)
    try:
        return _read(path, data, pypdf)
    finally:
        log.setLevel(level)


def _read(path: Path, data: bytes, pypdf) -> Document:
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise FileProblem("encrypted", "encrypted PDF (it needs a password): save an unencrypted copy")
        parts = [Part(page.extract_text() or "", page=number) for number, page in enumerate(reader.pages, start=1)]
        title = (reader.metadata.title if reader.metadata is not None else None) or path.stem
    except FileProblem:
        raise
    except Exception as exc:  # pypdf raises PdfReadError, but also ValueError, KeyError, ... on broken files
        if isinstance(exc, pypdf.errors.FileNotDecryptedError) or "decrypt" in str(exc).lower():
            raise FileProblem("encrypted", "encrypted PDF (it needs a password): save an unencrypted copy") from None
        raise FileProblem("corrupt", f"corrupt or not a PDF ({type(exc).__name__}: {exc})") from None
    if not any(part.text.strip() for part in parts):
        raise FileProblem("empty", f"no text in its {len(parts)} page(s) (scanned images need OCR first)")
    return Document(str(title).strip() or path.stem, parts)
