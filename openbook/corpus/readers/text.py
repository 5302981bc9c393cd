"""Plain text (``.txt``) and Markdown (``.md``, ``.markdown``) files, in any common encoding.

The bytes are decoded as UTF-8, else in the encoding charset-normalizer detects (the report says which);
binary data is refused. Markdown is rendered to text (:mod:`~openbook.corpus.readers.markdown`): its
first heading is the title. A plain text file's title is its file name without the suffix.
"""

from pathlib import Path

from openbook.corpus.readers.decode import decode_text
from openbook.corpus.readers.document import Document, FileProblem, Part, read_bytes
from openbook.corpus.readers.markdown import render_markdown

TEXT_SUFFIXES = (".txt",)
MARKDOWN_SUFFIXES = (".md", ".markdown")


def read_text(path: Path) -> Document:
    text, encoding = _decoded(path, "text")
    return Document(path.stem, [Part(text)], encoding)


def read_markdown(path: Path) -> Document:
    text, encoding = _decoded(path, "markdown")
    document = render_markdown(text, path.stem)
    document.encoding = encoding
    return document


def _decoded(path: Path, kind: str) -> tuple[str, str]:
    data = read_bytes(path, kind)
    if not data.strip():
        raise FileProblem("empty", "empty file")
    text, encoding = decode_text(data)
    return text.lstrip("\ufeff"), encoding


def content_line(path: Path, offset: int) -> int:
    """1-based line number of byte ``offset`` of ``path``."""
    with open(path, "rb") as handle:
        return handle.read(offset).count(b"\n") + 1
