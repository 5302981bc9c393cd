"""Documents read whole (text, Markdown, HTML, PDF, DOCX): what a reader returns, and why it may not.

A reader turns one file into a :class:`Document`: a title and its parts, each a page (PDF) or the whole
text. A file it cannot read raises :class:`FileProblem` with a reason (``"unsupported type"``,
``"unreadable"``, ``"empty"``, ``"encrypted"``, ``"too large"``, ``"corrupt"``, ``"binary"``,
``"no header"``, ``"missing library"``) and a one-line detail; a folder build names the file and goes on.
"""

from dataclasses import dataclass, field
from pathlib import Path

# Whole-file readers hold a document in memory: files above these sizes (bytes on disk) are "too large".
# A DOCX is also bounded once decompressed (openbook.corpus.readers.docx).
MAX_BYTES = {
    "text": 64 << 20, "markdown": 64 << 20, "html": 16 << 20, "pdf": 256 << 20, "docx": 64 << 20,
}

DOCS_EXTRA = "pip install 'openbook[docs]'"


class FileProblem(Exception):
    """Why a file was not read: a ``reason`` (one of a few words) and a one-line ``detail``."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Part:
    """Some text of a document, with the page it is on (1-based; ``None`` when the format has no pages)."""

    text: str
    page: int | None = None


@dataclass
class Document:
    """A document read whole: its title, its parts in order, and the text encoding used (if it was text)."""

    title: str
    parts: list[Part] = field(default_factory=list)
    encoding: str | None = None


def read_bytes(path: Path, kind: str) -> bytes:
    """The bytes of ``path``, refusing files larger than ``MAX_BYTES[kind]`` before reading them."""
    size = path.stat().st_size
    limit = MAX_BYTES[kind]
    if size > limit:
        raise FileProblem("too large", f"too large ({size} bytes; the limit for {kind} files is {limit})")
    return path.read_bytes()


def need(module: str, what: str):
    """Import ``module`` for reading ``what``, or say which extra installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise FileProblem("missing library", f"reading {what} needs {module}: {DOCS_EXTRA}") from None
