"""Word documents (``.docx``; needs ``openbook[docs]``): paragraphs and tables, read with python-docx.

A DOCX is a zip: the sizes its entries declare are summed before anything is decompressed, and a file
declaring more than ``MAX_DOCX_UNZIPPED_BYTES`` is refused (Python's zipfile never reads past a declared
size, so a zip bomb cannot get further). Paragraphs styled "Heading 1" to "Heading 9" split the document
into sections (:func:`~openbook.corpus.readers.document.sectioned`); a table row becomes its cells joined
by ``" | "``. The title is the document's own (core properties), else its first "Title" paragraph, else
the file name.
"""

import io
import re
import zipfile
from pathlib import Path

from openbook.corpus.readers.document import Document, FileProblem, Heading, need, read_bytes, sectioned

DOCX_SUFFIXES = (".docx",)
MAX_DOCX_UNZIPPED_BYTES = 256 << 20


def read_docx(path: Path) -> Document:
    data = read_bytes(path, "docx")
    docx = need("docx", "DOCX files")
    if not data.strip():
        raise FileProblem("empty", "empty file")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            declared = sum(info.file_size for info in archive.infolist())
            if any(info.flag_bits & 0x1 for info in archive.infolist()):
                raise FileProblem("encrypted", "encrypted DOCX (it needs a password): save an unencrypted copy")
    except zipfile.BadZipFile as exc:
        if data.startswith(b"\xd0\xcf\x11\xe0"):  # an OLE container: a password-protected or old .doc file
            raise FileProblem("encrypted", "encrypted or old-format Word file, not a DOCX zip") from None
        raise FileProblem("corrupt", f"corrupt or not a DOCX ({exc})") from None
    limit = MAX_DOCX_UNZIPPED_BYTES
    if declared > limit:
        raise FileProblem("too large", f"too large once decompressed ({declared} bytes declared; the limit is {limit})")
    try:
        doc = docx.Document(io.BytesIO(data))
        blocks: list[str | Heading] = []
        for block in doc.iter_inner_content():  # paragraphs and tables in document order
            if hasattr(block, "rows"):
                blocks.extend(" | ".join(c.text.strip() for c in row.cells if c.text.strip()) for row in block.rows)
            else:
                blocks.append(_heading(block) or block.text.strip())
        title = (doc.core_properties.title or "").strip()
    except Exception as exc:  # python-docx raises KeyError, ValueError, lxml errors ... on broken files
        raise FileProblem("corrupt", f"corrupt DOCX ({type(exc).__name__}: {exc})") from None
    if not any(block.strip() for block in blocks if isinstance(block, str)):
        raise FileProblem("empty", "no text in the document")
    title = title or next((b.text for b in blocks if isinstance(b, Heading) and b.level == 0 and b.text), path.stem)
    return Document(title, sectioned(title, blocks))


def _heading(paragraph) -> Heading | None:
    """The heading a paragraph is, by its style: "Heading <n>" (level n) or "Title" (level 0)."""
    name = (paragraph.style.name if paragraph.style is not None else None) or ""
    match = re.fullmatch(r"heading ([1-9])|(title)", name.strip().lower())
    if match is None or not paragraph.text.strip():
        return None
    return Heading(int(match.group(1) or 0), " ".join(paragraph.text.split()))
