"""Word documents (``.docx``; needs ``openbook[docs]``): paragraphs and tables, read with python-docx.

A DOCX is a zip: the sizes its entries declare are summed before anything is decompressed, and a file
declaring more than ``MAX_DOCX_UNZIPPED_BYTES`` is refused (Python's zipfile never reads past a declared
size, so a zip bomb cannot get further). Headings stay as lines of their own; a table row becomes its
cells joined by ``" | "``. The title is the document's own (core properties), else the file name.
"""

import io
import zipfile
from pathlib import Path

from openbook.corpus.readers.document import Document, FileProblem, Part, need, read_bytes

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
        lines = []
        for block in doc.iter_inner_content():  # paragraphs and tables in document order
            if hasattr(block, "rows"):
                lines.extend(" | ".join(c.text.strip() for c in row.cells if c.text.strip()) for row in block.rows)
            else:
                lines.append(block.text.strip())
        title = doc.core_properties.title
    except Exception as exc:  # python-docx raises KeyError, ValueError, lxml errors ... on broken files
        raise FileProblem("corrupt", f"corrupt DOCX ({type(exc).__name__}: {exc})") from None
    text = "\n\n".join(line for line in lines if line)
    if not text:
        raise FileProblem("empty", "no text in the document")
    return Document((title or "").strip() or path.stem, [Part(text)])
