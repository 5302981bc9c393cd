"""WikiExtractor output: how users turn a Wikipedia dump into a book.

WikiExtractor (github.com/attardi/wikiextractor) writes a dump's articles into folders ``AA``, ``AB``, ...
of files ``wiki_00``, ``wiki_01``, ... (plain, or ``.bz2`` with ``--compress``; often gzip-compressed
afterwards), each a run of records::

    <doc id="12" url="https://en.wikipedia.org/wiki?curid=12" title="Anarchism">
    Anarchism

    Anarchism is a political philosophy ...
    </doc>

With ``--json`` each line is instead ``{"id": ..., "revid": ..., "url": ..., "title": ..., "text": ...}``
(the text without the title line); both are read. The files carry no telling suffix, so they are
recognised by their content (:func:`sniff`: the first bytes, once decompressed, open such a record).

Each article is one document: its title (HTML entities decoded) is the passages' title, the title line
that repeats it is dropped, and the text is split into the paper's disjoint 100-word passages, never
across articles. An article is the natural
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
import json
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

_SNIFF_BYTES = 256
# The start of a <doc> record, or of a JSON record of WikiExtractor's --json output (keys in its order).
_START = re.compile(rb'<doc id="|\{"id": "[^"]*", (?:"revid": "[^"]*", )?"url": "')
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_ENTITY = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")


def sniff(path: Path) -> bool:
    """Whether ``path`` holds WikiExtractor records: its first bytes (decompressed if gzip or bzip2) open
    a ``<doc id="...">`` record or a JSON record of ``--json`` output. Reads at most a few bytes; only regular files are opened. A compressed file
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
    return _START.match(head.lstrip(b"\xef\xbb\xbf \t\r\n")) is not None


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

    def __init__(self, attributes: dict[str, str], where: str, header: str, titled: bool = True):
        self.attributes = attributes
        self.where = where
        self.titled = titled  # the text starts with the title line
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
        if self.titled and lines and lines[0].strip() in (raw_title, title):  # WikiExtractor repeats the title first
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
    """The well-formed records of ``path`` in order; malformed ones go to ``errors``."""
    parser = _Parser(path, errors)
    for lineno, line in _numbered_lines(path, "a WikiExtractor file"):
        if line is not None and line.startswith("</doc>") and line[6:].strip():
            # some WikiExtractor versions write no newline after </doc>: "</doc><doc id=...>"
            yield from parser.feed(lineno, "</doc>\n")
            line = line[6:]
        yield from parser.feed(lineno, line)
    parser.end()


class _Parser:
    """Reads the lines of one file into articles: ``<doc>`` records, or the JSON records of ``--json``."""

    def __init__(self, path: Path, errors: RecordErrors):
        self.path, self.errors = path, errors
        self.article: _Article | None = None
        self.stray = False  # inside a run of lines outside any record (reported once per run)

    def feed(self, lineno: int, line: str | None) -> Iterator[_Article]:
        article, where = self.article, f"{self.path}:{lineno}"
        if line is None:
            if article is not None:
                self.drop(f"not UTF-8 text (line {lineno})")
            elif not self.stray:
                self.errors(where, "not UTF-8 text")
                self.stray = True
        elif line.startswith("<doc ") or line.startswith("<doc>"):
            if article is not None:
                self.errors(article.where, f"record not closed by </doc> before the next <doc> (line {lineno})")
            self.article = _open_article(line, where, self.errors)
            self.stray = self.article is None  # a record without an id: its lines are not stray text
        elif line.rstrip() == "</doc>":
            if article is not None:
                yield article
            self.article = None
        elif article is not None:
            article.add(line)
            if article.size > MAX_ARTICLE_CHARS:
                self.drop(f"record longer than {MAX_ARTICLE_CHARS} characters without </doc>")
        elif line.startswith("{"):
            found = _json_article(line, where, self.errors)
            if found is not None:
                yield found
            self.stray = False
        elif line.strip() and not self.stray:
            self.errors(where, "text outside a <doc> record")
            self.stray = True

    def drop(self, problem: str) -> None:
        """Report the current record as malformed; its remaining lines are skipped up to the next record."""
        self.errors(self.article.where, problem)
        self.article, self.stray = None, True

    def end(self) -> None:
        if self.article is not None:
            self.errors(self.article.where, "record not closed by </doc> at the end of the file")


def _open_article(line: str, where: str, errors: RecordErrors) -> _Article | None:
    attributes = dict(_ATTRIBUTE.findall(line))
    if not attributes.get("id", "").strip():
        errors(where, "<doc> record without an id")
        return None
    attributes["id"] = attributes["id"].strip()
    return _Article(attributes, where, line)


def _json_article(line: str, where: str, errors: RecordErrors) -> _Article | None:
    """An article of WikiExtractor's ``--json`` output: ``{"id", "revid", "url", "title", "text"}`` (the text
    without the title line)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        errors(where, f"malformed JSON: {exc.msg} (column {exc.colno})")
        return None
    fields = record if isinstance(record, dict) else {}
    page_id, title, text = fields.get("id"), fields.get("title", ""), fields.get("text")
    url = fields.get("url")
    if not isinstance(page_id, (str, int)) or not str(page_id).strip() or not isinstance(title, str) \
            or not isinstance(text, str) or not isinstance(url, (str, type(None))):
        errors(where, "expected a WikiExtractor JSON record with a string id, title and text")
        return None
    attributes = {"id": str(page_id).strip(), "title": title, **({"url": url} if url is not None else {})}
    article = _Article(attributes, where, f"{attributes}\n", titled=False)
    article.add(text)
    return article
