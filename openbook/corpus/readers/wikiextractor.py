"""WikiExtractor output: how users turn a Wikipedia dump into a book.

WikiExtractor (github.com/attardi/wikiextractor) writes a dump's articles into folders ``AA``, ``AB``, ...
of files ``wiki_00``, ``wiki_01``, ... (plain, or ``.bz2`` with ``--compress``; often gzip-compressed
afterwards), each a run of records::

    <doc id="12" url="https://en.wikipedia.org/wiki?curid=12" title="Anarchism">
    Anarchism

    Anarchism is a political philosophy ...
    </doc>

The files carry no telling suffix, so they are recognised by their content (:func:`sniff`: the first
bytes, once decompressed, open a ``<doc id="...">`` record). Each article is one document: its title
(HTML entities decoded) is the passages' title, the title line that repeats it is dropped, and the text
is split into the paper's disjoint 100-word passages, never across articles. An article is the natural
document here, not a file: a file is an arbitrary bundle of about a hundred articles, and WikiExtractor
bundles them differently from one dump to the next, whereas a page id stays. So the document id is
``wiki:<page id>`` (``kb delete KB --document wiki:12`` removes an article, and a ``kb sync`` with a
newer extraction re-encodes only the articles whose text changed); the passage ids are
``wiki:<page id>`` for a one-passage article and ``wiki:<page id>#0``, ``#1``, ... otherwise; each
passage's metadata is ``{"source": "wiki:<page id>", "type": "wikiextractor", "page_id": "<id>",
"url": "<url>"}``. Articles with no text left (redirect stubs) are skipped and counted in the
:class:`~openbook.corpus.readers.report.SourceReport`; a record that is cut short or lacks its id is a
malformed record (:class:`~openbook.corpus.readers.records.RecordErrors`), named ``path:line``. Files are
streamed: nothing is held beyond the current article.
"""

from __future__ import annotations

import hashlib
import html
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

from openbook.corpus.chunking import split_words
from openbook.corpus.passages import Passage
from openbook.corpus.readers.document import FileProblem
from openbook.corpus.readers.files import _compression, _numbered_lines, _open_binary
from openbook.corpus.readers.records import CHUNK_SEPARATOR, RecordErrors, SourcePassage, _file_error
from openbook.corpus.readers.report import SourceReport
from openbook.errors import InputError

WIKIEXTRACTOR_TYPE = "wikiextractor"
ID_PREFIX = "wiki:"
# An article longer than this without its closing </doc> is taken for a malformed record (the longest
# Wikipedia articles have well under a megabyte of text), so that a file without </doc> is never held whole.
MAX_ARTICLE_CHARS = 32 << 20

_SNIFF_BYTES = 64
_OPEN = b'<doc id="'
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_ENTITY = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")


def sniff(path: Path) -> bool:
    """Whether ``path`` holds WikiExtractor records: its first bytes (decompressed if gzip or bzip2) open
    a ``<doc id="...">`` record. Reads at most a few bytes; only regular files are opened. A compressed file
    whose start cannot be decompressed raises :class:`FileProblem` ("corrupt")."""
    if not path.is_file():
        return False
    try:
        compression = _compression(path, "a file")
        with _open_binary(path, "a file") as handle:
            head = handle.read(_SNIFF_BYTES)
    except InputError:
        return False
    except (EOFError, zlib.error, OSError) as exc:
        if compression and not getattr(exc, "errno", None):
            raise FileProblem("corrupt", f"corrupt or truncated {compression} data ({exc})") from None
        return False
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(_OPEN)


def wikiextractor_passages(path: Path, max_words: int, errors: RecordErrors,
                           report: SourceReport) -> Iterator[SourcePassage]:
    """The passages of one WikiExtractor file, article by article (see the module docstring)."""
    try:
        for article in _articles(path, errors):
            passages = list(article.passages(max_words))
            if not passages:
                report.empty_records += 1
                continue
            for passage in passages:
                yield SourcePassage(article.where, passage, article.document, article.sha256)
    except InputError as exc:  # unreadable or corrupt file: the rest of it is lost
        _file_error(exc, errors)


class _Article:
    """One ``<doc>`` record as it is read: its attributes, the line it starts on, and its lines of text."""

    def __init__(self, attributes: dict[str, str], where: str, header: str):
        self.attributes = attributes
        self.where = where
        self.lines: list[str] = []
        self.size = 0
        self.digest = hashlib.sha256(header.encode("utf-8"))

    def add(self, line: str) -> None:
        self.lines.append(line)
        self.size += len(line)
        self.digest.update(line.encode("utf-8"))

    @property
    def page_id(self) -> str:
        return self.attributes["id"]

    @property
    def document(self) -> str:
        return f"{ID_PREFIX}{self.page_id}"

    @property
    def sha256(self) -> str:
        return self.digest.hexdigest()

    def passages(self, max_words: int) -> Iterator[Passage]:
        raw_title = self.attributes.get("title", "")
        title = html.unescape(raw_title)
        lines = self.lines
        if lines and lines[0].strip() in (raw_title, title):  # WikiExtractor repeats the title first
            lines = lines[1:]
        text = _ENTITY.sub(lambda m: html.unescape(m.group(0)), "".join(lines))
        chunks = split_words(text, max_words)
        meta = {"source": self.document, "type": WIKIEXTRACTOR_TYPE, "page_id": self.page_id}
        if "url" in self.attributes:
            meta["url"] = self.attributes["url"]
        for i, chunk in enumerate(chunks):
            pid = self.document if len(chunks) == 1 else f"{self.document}{CHUNK_SEPARATOR}{i}"
            yield Passage(pid, title, chunk, dict(meta))


def _articles(path: Path, errors: RecordErrors) -> Iterator[_Article]:
    """The well-formed ``<doc>`` records of ``path`` in order; malformed ones go to ``errors``."""
    article: _Article | None = None
    stray = False  # inside a run of text outside any record (reported once per run)
    for lineno, line in _numbered_lines(path, "a WikiExtractor file"):
        where = f"{path}:{lineno}"
        if line is None:
            if article is not None:
                errors(article.where, f"not UTF-8 text (line {lineno})")
                article, stray = None, True
            continue
        if line.startswith("<doc ") or line.startswith("<doc>"):
            if article is not None:
                errors(article.where, f"record not closed by </doc> before the next <doc> (line {lineno})")
            article = _open_article(line, where, errors)
            stray = article is None  # a record without an id: its lines are not stray text
        elif line.rstrip() == "</doc>":
            if article is not None:
                yield article
            article = None
        elif article is not None:
            article.add(line)
            if article.size > MAX_ARTICLE_CHARS:
                errors(article.where, f"record longer than {MAX_ARTICLE_CHARS} characters without </doc>")
                article, stray = None, True
        elif line.strip() and not stray:
            errors(where, "text outside a <doc> record")
            stray = True
    if article is not None:
        errors(article.where, "record not closed by </doc> at the end of the file")


def _open_article(line: str, where: str, errors: RecordErrors) -> _Article | None:
    attributes = dict(_ATTRIBUTE.findall(line))
    if not attributes.get("id", "").strip():
        errors(where, "<doc> record without an id")
        return None
    attributes["id"] = attributes["id"].strip()
    return _Article(attributes, where, line)
