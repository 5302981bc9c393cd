"""Documents read whole (text, Markdown, HTML, PDF, DOCX): what a reader returns, and why it may not.

A reader turns one file into a :class:`Document`: a title and its parts, each a page (PDF), a section
(Markdown, HTML and DOCX, split at their headings by :func:`sectioned`) or the whole text (plain text).
A file it cannot read raises :class:`FileProblem` with a reason (``"unsupported type"``,
``"unreadable"``, ``"empty"``, ``"encrypted"``, ``"too large"``, ``"corrupt"``, ``"binary"``,
``"no header"``, ``"missing library"``) and a one-line detail; a folder build names the file and goes on.
"""

from collections.abc import Iterable
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
    """Some text of a document, with the page it is on (1-based; ``None`` when the format has no pages) or
    the section it is in (its heading path, ``"Setup > Install"``; ``None`` before the first heading)."""

    text: str
    page: int | None = None
    section: str | None = None


@dataclass(frozen=True)
class Heading:
    """A heading met while reading a document: its level (1 for the top; 0 for a DOCX Title) and text."""

    level: int
    text: str


def sectioned(title: str, blocks: Iterable[str | Heading]) -> list[Part]:
    """The parts of a document split at its headings: blocks of text (joined by blank lines) up to the first
    heading, then one part per heading, however little text it has (so that section numbers are stable).

    A section's title is its heading path: the heading with the enclosing headings of lower levels before
    it (``"Setup > Install"`` for a level-3 "Install" under a level-2 "Setup"), so that a passage keeps the
    context its heading alone would lose. The first heading whose text is the document's title (a
    Markdown file's first heading, an HTML page's main heading) names the whole document instead: it is
    no section, and the text under it belongs to the document title alone, as the text before it does.
    Headings without text are ignored.
    """
    parts: list[tuple[str | None, list[str]]] = [(None, [])]
    path: list[Heading] = []
    title_seen = False
    for block in blocks:
        if not isinstance(block, Heading):
            if block.strip():
                parts[-1][1].append(block.strip())
            continue
        text = " ".join(block.text.split())
        if not text:
            continue
        if text == title and not title_seen and len(parts) == 1:
            title_seen = True
            continue
        while path and path[-1].level >= block.level:
            path.pop()
        path.append(Heading(block.level, text))
        parts.append((" > ".join(h.text for h in path), []))
    return [Part("\n\n".join(texts), section=section) for section, texts in parts]


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
