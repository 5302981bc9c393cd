"""Read passages from JSON Lines files (plain or gzip-compressed).

Three record forms are understood (extra keys are ignored):

* ``{"title": ..., "text": ...}`` -- an article or passage with its title (``"id"`` optional);
* ``{"text": ...}`` -- text without a title (the title becomes ``""``);
* ``{"id": ..., "contents": "\\"Title\\"\\ntext"}`` -- the DPR / FlashRAG / Pyserini form: the first line
  of ``contents`` is the title, optionally in double quotes (CSV style, ``""`` for a literal quote);
  the rest is the text. ``contents`` without a newline is all text, with title ``""``.

Passage ids: a record's base id is ``id_prefix`` followed by its ``"id"`` field if it has one, else by
its 0-based record number in the file (blank lines are not counted). A record that fits in one passage
gets the base id (``"wiki18:0"``); a longer one is split into chunks ``"<base>#0"``, ``"<base>#1"``, ...

Whole corpora for a knowledge base are read with :func:`iter_source_passages`, which streams passages
from any mix of sources (see :func:`source_kind`):

* JSON Lines (``.jsonl``, ``.json``, ``.ndjson``, optionally ``.gz``) in the three forms above;
* the DPR ``psgs_w100.tsv`` format (``.tsv``, optionally ``.gz``): ``id<TAB>text<TAB>title`` with a
  header row naming the columns (``title`` optional), CSV quoting as DPR writes it;
* Parquet (``.parquet``, ``.pq``; needs ``pyarrow``) with columns ``text`` (and ``title``) or
  ``contents``, and optionally ``id``, read one row group batch at a time;
* plain text or Markdown files (``.txt``, ``.md``, ``.markdown``), alone or as a folder searched
  recursively (hidden files skipped, in sorted path order): the title is the first Markdown heading
  (that line is then left out of the text) or else the file name without its suffix.

There, a record without an id gets the base id ``"<file name>:<record number>"`` (0-based), so that
records of different files do not collide; a text file's base id is ``"<folder name>/<relative path>"``
(or its file name when given alone). Malformed records go to a :class:`RecordErrors`, which either
raises (``on_error="stop"``) or counts and reports them (``"skip"``); each is named ``path:line``
(for Parquet, ``path:row``).
"""

import csv
import gzip
import json
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openbook.corpus.chunking import (
    DEFAULT_MAX_WORDS,
    check_max_words,
    chunk_article,
    split_words,
)
from openbook.corpus.passages import Passage
from openbook.errors import InputError

_GZIP_MAGIC = b"\x1f\x8b"
CHUNK_SEPARATOR = "#"


def _open_binary(path: Path, what: str = "a JSON Lines file"):
    """Open ``path`` for reading bytes, transparently decompressing gzip (detected by magic bytes)."""
    try:
        with open(path, "rb") as raw:
            magic = raw.read(2)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected {what}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if magic == _GZIP_MAGIC:
        return gzip.open(path, "rb")
    return open(path, "rb")


def _numbered_lines(path: Path, what: str = "a JSON Lines file") -> Iterator[tuple[int, str | None]]:
    """Yield ``(line_number, text)`` for every line (1-based); ``text`` is None for a line that is not UTF-8.

    Unreadable or corrupt files raise InputError naming ``path:line``.
    """
    lineno = 0
    try:
        with _open_binary(path, what) as lines:
            for lineno, raw in enumerate(lines, start=1):
                try:
                    yield lineno, raw.decode("utf-8")
                except UnicodeDecodeError:
                    yield lineno, None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InputError(f"{path}:{lineno + 1}: corrupt or truncated gzip data ({exc})") from None
    except OSError as exc:
        raise InputError(f"{path}:{lineno + 1}: cannot read: {exc.strerror or exc}") from None


def _jsonl_items(path: Path) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """``(line, record, None)`` for each well-formed non-blank line, ``(line, None, problem)`` otherwise."""
    for lineno, line in _numbered_lines(path):
        if line is None:
            yield lineno, None, "not UTF-8 text"
        elif line.strip():
            try:
                yield lineno, _parse_line(line), None
            except InputError as exc:
                yield lineno, None, str(exc)


def _numbered_records(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)`` for each non-blank line of a JSON Lines file (1-based lines)."""
    path = Path(path)
    for lineno, record, problem in _jsonl_items(path):
        if problem is not None:
            raise InputError(f"{path}:{lineno}: {problem}")
        yield lineno, record


def _parse_line(line: str) -> dict[str, Any]:
    """Parse one JSON Lines line into a dict, or raise InputError saying what is wrong."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(record, dict):
        raise InputError(f"expected a JSON object, got {type(record).__name__}")
    return record


def read_numbered_records(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Like :func:`read_records` but yields ``(line_number, record)`` (1-based line numbers)."""
    yield from _numbered_records(path)


def read_records(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Iterate over the JSON objects of a JSON Lines file (plain or ``.gz``), skipping blank lines.

    Malformed lines raise :class:`InputError` with a message starting ``"<path>:<line>: "``.
    """
    for _, record in _numbered_records(path):
        yield record


def _string_field(record: dict[str, Any], key: str) -> str:
    """Return ``record[key]`` (``""`` if absent or null), raising InputError if it is not a string."""
    value = record.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"field {key!r} must be a string, got {type(value).__name__}")
    return value


def _unquote_title(line: str) -> str:
    """Strip the CSV-style double quotes around a DPR title line: ``"\\"A \\"\\"B\\"\\"\\""`` -> ``A "B"``."""
    line = line.strip()
    if len(line) >= 2 and line.startswith('"') and line.endswith('"'):
        return line[1:-1].replace('""', '"')
    return line


def record_title_text(record: dict[str, Any]) -> tuple[str, str]:
    """Return ``(title, text)`` of a record in any of the three forms described in the module docstring."""
    if "text" in record:
        return _string_field(record, "title"), _string_field(record, "text")
    if "contents" in record:
        contents = _string_field(record, "contents")
        if "\n" not in contents:
            return "", contents
        title_line, text = contents.split("\n", 1)
        return _unquote_title(title_line), text
    keys = ", ".join(sorted(record)) or "none"
    raise InputError(f"record has neither a 'text' nor a 'contents' field (its keys: {keys})")


def passages_from_record(
    record: dict[str, Any], base_id: str | None = None, max_words: int = DEFAULT_MAX_WORDS
) -> list[Passage]:
    """Turn one record into passages of at most ``max_words`` words that keep its title.

    ``base_id`` defaults to the record's ``"id"`` field (or ``""``); see the module docstring for how
    chunk ids are derived from it. Empty text gives ``[]``.
    """
    title, text = record_title_text(record)
    if base_id is None:
        base_id = str(record.get("id", ""))
    chunks = split_words(text, max_words)
    if len(chunks) == 1:
        return [Passage(id=base_id, title=title, text=chunks[0])]
    return chunk_article(title, text, max_words, id_prefix=f"{base_id}{CHUNK_SEPARATOR}")


def read_passages(
    path: str | os.PathLike, max_words: int = DEFAULT_MAX_WORDS, id_prefix: str = ""
) -> Iterator[Passage]:
    """Stream the passages of a JSON Lines file, splitting long texts into ``max_words``-word chunks.

    Errors in a record raise :class:`InputError` naming ``path:line``.
    """
    check_max_words(max_words)
    for record_no, (lineno, record) in enumerate(_numbered_records(path)):
        key = record.get("id", record_no)
        try:
            passages = passages_from_record(record, f"{id_prefix}{key}", max_words)
        except InputError as exc:
            raise InputError(f"{path}:{lineno}: {exc}") from None
        yield from passages


# ---------------------------------------------------------------------------------------------------
# whole corpora: several sources and formats, with a policy for malformed records

ON_ERROR_CHOICES = ("stop", "skip")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
TSV_SUFFIXES = (".tsv",)
PARQUET_SUFFIXES = (".parquet", ".pq")
TEXT_SUFFIXES = (".txt", ".md", ".markdown")
_MARKDOWN_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")


class MalformedRecord(InputError):
    """A malformed record, raised by :class:`RecordErrors` when told to stop."""


class RecordErrors:
    """What happens to a malformed record: ``"stop"`` raises InputError, ``"skip"`` counts it.

    Skipped records are counted in :attr:`skipped`; the first ``keep`` messages are kept in
    :attr:`examples` and passed to ``report`` (e.g. to print a warning) as they happen.
    """

    def __init__(self, on_error: str = "stop", report: Callable[[str], None] | None = None, keep: int = 10):
        if on_error not in ON_ERROR_CHOICES:
            raise InputError(f"on_error must be one of {', '.join(ON_ERROR_CHOICES)}, got {on_error!r}")
        self.on_error = on_error
        self.report = report
        self.keep = keep
        self.reset()

    def reset(self) -> None:
        """Forget what was skipped (for a fresh pass over the same input)."""
        self.skipped = 0
        self.examples: list[str] = []

    @property
    def skip(self) -> bool:
        return self.on_error == "skip"

    def __call__(self, where: str, problem: str) -> None:
        """Deal with the malformed record at ``where`` (``path:line``)."""
        message = f"{where}: {problem}"
        if not self.skip:
            raise MalformedRecord(message)
        self.skipped += 1
        if len(self.examples) < self.keep:
            self.examples.append(message)
            if self.report is not None:
                self.report(message)


@dataclass(frozen=True)
class SourcePassage:
    """A passage and where it was read (``path:line``), for error messages about it."""

    where: str
    passage: Passage


def _strip_gz(name: str) -> str:
    return name[:-3] if name.lower().endswith(".gz") else name


def source_kind(path: str | os.PathLike) -> str:
    """``"folder"``, ``"jsonl"``, ``"tsv"``, ``"parquet"`` or ``"text"`` for ``path``; InputError if unknown.

    A missing path raises InputError too.
    """
    path = Path(path)
    if path.is_dir():
        return "folder"
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    name = _strip_gz(path.name).lower()
    for kind, suffixes in (
        ("jsonl", JSONL_SUFFIXES), ("tsv", TSV_SUFFIXES), ("parquet", PARQUET_SUFFIXES), ("text", TEXT_SUFFIXES)
    ):
        if name.endswith(suffixes):
            if kind in ("parquet", "text") and path.name.lower().endswith(".gz"):
                break
            return kind
    known = ", ".join(JSONL_SUFFIXES + TSV_SUFFIXES + PARQUET_SUFFIXES + TEXT_SUFFIXES)
    raise InputError(
        f"{path}: unknown corpus format; expected a folder of text files or a file ending in {known} "
        f"(JSON Lines and TSV may be gzip-compressed, .gz)"
    )


def check_sources(sources: Iterable[str | os.PathLike]) -> list[Path]:
    """Check that every source exists and has a known format (cheap: before any model is loaded)."""
    paths = [Path(s) for s in sources]
    if not paths:
        raise InputError("no corpus source given")
    for path in paths:
        if source_kind(path) == "parquet":
            _import_parquet()
    return paths


def iter_source_passages(
    sources: Iterable[str | os.PathLike],
    max_words: int = DEFAULT_MAX_WORDS,
    errors: RecordErrors | None = None,
) -> Iterator[SourcePassage]:
    """Stream the passages of ``sources`` in order, split into ``max_words``-word chunks that keep titles.

    Nothing is held in memory beyond the current record (Parquet: the current batch of rows).
    """
    check_max_words(max_words)
    errors = errors if errors is not None else RecordErrors()
    readers = {
        "folder": _folder_source, "text": _text_file_source, "jsonl": _jsonl_source,
        "tsv": _tsv_source, "parquet": _parquet_source,
    }
    for path in check_sources(sources):
        yield from readers[source_kind(path)](path, max_words, errors)


def _record_passages(
    record: dict[str, Any], default_id: str, where: str, max_words: int, errors: RecordErrors
) -> Iterator[SourcePassage]:
    """Passages of one record, or a report to ``errors`` if it is malformed."""
    record_id = record.get("id")
    base_id = default_id if record_id is None or str(record_id) == "" else str(record_id)
    try:
        passages = passages_from_record(record, base_id, max_words)
    except InputError as exc:
        errors(where, str(exc))
        return
    for passage in passages:
        yield SourcePassage(where, passage)


def _jsonl_source(path: Path, max_words: int, errors: RecordErrors) -> Iterator[SourcePassage]:
    record_no = 0
    try:
        for lineno, record, problem in _jsonl_items(path):
            where = f"{path}:{lineno}"
            if problem is not None:
                errors(where, problem)
                continue
            yield from _record_passages(record, f"{path.name}:{record_no}", where, max_words, errors)
            record_no += 1
    except InputError as exc:  # unreadable or corrupt file: the rest of it is lost
        _file_error(exc, errors)


def _file_error(exc: InputError, errors: RecordErrors) -> None:
    """A problem with a whole file (corrupt gzip, bad header): raise, or skip the rest of the file."""
    if isinstance(exc, MalformedRecord):
        raise exc
    where, _, problem = str(exc).partition(": ")
    errors(where, problem or str(exc))


def _tsv_source(path: Path, max_words: int, errors: RecordErrors) -> Iterator[SourcePassage]:
    """The DPR ``psgs_w100.tsv`` format: a header row, then ``id<TAB>text<TAB>title`` rows, one per line.

    Each line is parsed as DPR parses it (``csv.reader`` with a tab delimiter and the default quoting:
    ``"a ""quoted"" text"`` is ``a "quoted" text``, a quote inside an unquoted field is kept). A quoted
    field must end on its own line: an unbalanced ``"`` is a malformed row (``path:line``) instead of
    swallowing the rows after it.
    """
    csv.field_size_limit(2**31 - 1)
    columns = None
    try:
        for lineno, text in _numbered_lines(path, "a TSV file"):
            where = f"{path}:{lineno}"
            if text is None:
                errors(where, "not UTF-8 text")
                continue
            row, problem = _tsv_row(text.rstrip("\r\n"))
            if problem is not None:
                errors(where, problem)
                continue
            if not row or row == [""]:
                continue
            if columns is None:
                columns = _tsv_columns(path, lineno, row)
                continue
            if len(row) != len(columns):
                errors(where, f"expected {len(columns)} tab-separated fields ({', '.join(columns)}), got {len(row)}")
                continue
            record = dict(zip(columns, row))
            yield from _record_passages(record, f"{path.name}:{lineno}", where, max_words, errors)
    except InputError as exc:
        _file_error(exc, errors)


def _tsv_row(line: str) -> tuple[list[str], str | None]:
    """The fields of one TSV line, or a problem: a quoted field that does not end on the line."""
    reader = csv.reader([line, ""], delimiter="\t")  # a quoted field left open would read on into ""
    try:
        row = next(reader, [])
    except csv.Error as exc:
        return [], f"malformed TSV: {exc}"
    if reader.line_num > 1:
        return [], ('unbalanced double quote: a field that starts with " must end with " on the same line '
                    '(write a quote inside a quoted field as "")')
    return row, None


def _tsv_columns(path: Path, lineno: int, row: list[str]) -> list[str]:
    columns = [c.strip().lower() for c in row]
    if "id" not in columns or "text" not in columns or len(set(columns)) != len(columns):
        raise InputError(
            f"{path}:{lineno}: expected a header row naming the columns id, text and title "
            f"(DPR psgs_w100.tsv format), got {row[:5]!r}"
        )
    return columns


def _import_parquet():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("reading Parquet files needs pyarrow: pip install pyarrow") from None
    return pq


def _parquet_source(path: Path, max_words: int, errors: RecordErrors, batch_rows: int = 1024) -> Iterator[SourcePassage]:
    pq = _import_parquet()
    try:
        parquet = pq.ParquetFile(path)
        names = parquet.schema_arrow.names
        if "text" in names:
            columns = [c for c in ("id", "title", "text") if c in names]
        elif "contents" in names:
            columns = [c for c in ("id", "contents") if c in names]
        else:
            raise InputError(
                f"{path}: has neither a 'text' nor a 'contents' column (its columns: {', '.join(names) or 'none'})"
            )
        row_no = 0
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=columns):
            data = batch.to_pydict()
            for i in range(batch.num_rows):
                row_no += 1
                record = {name: data[name][i] for name in columns}
                yield from _record_passages(
                    record, f"{path.name}:{row_no - 1}", f"{path}:{row_no}", max_words, errors
                )
    except InputError as exc:
        _file_error(exc, errors)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid, OSError, ... for corrupt files
        if type(exc).__module__.split(".")[0] != "pyarrow" and not isinstance(exc, OSError):
            raise
        errors(str(path), f"not a readable Parquet file ({exc})")


def _text_file_title_text(path: Path, content: str) -> tuple[str, str]:
    """Title and text of a text file: the first Markdown heading (removed from the text) or the stem."""
    if _strip_gz(path.name).lower().endswith((".md", ".markdown")):
        lines = content.splitlines()
        for i, line in enumerate(lines):
            match = _MARKDOWN_HEADING.match(line)
            if match and match.group(1).strip():
                return match.group(1).strip(), "\n".join(lines[:i] + lines[i + 1:])
    return path.stem, content


def _text_passages(path: Path, base_id: str, max_words: int, errors: RecordErrors) -> Iterator[SourcePassage]:
    where = f"{path}:1"
    try:
        content = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        errors(f"{path}:{content_line(path, exc.start)}", "not UTF-8 text")
        return
    except OSError as exc:
        errors(where, f"cannot read: {exc.strerror or exc}")
        return
    title, text = _text_file_title_text(path, content.lstrip("\ufeff"))
    record = {"id": base_id, "title": title, "text": text}
    yield from _record_passages(record, base_id, where, max_words, errors)


def content_line(path: Path, offset: int) -> int:
    """1-based line number of byte ``offset`` of ``path``."""
    with open(path, "rb") as handle:
        return handle.read(offset).count(b"\n") + 1


def _text_file_source(path: Path, max_words: int, errors: RecordErrors) -> Iterator[SourcePassage]:
    yield from _text_passages(path, path.name, max_words, errors)


def _folder_source(folder: Path, max_words: int, errors: RecordErrors) -> Iterator[SourcePassage]:
    name = folder.resolve().name or "corpus"
    files = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for file_name in names:
            if not file_name.startswith(".") and file_name.lower().endswith(TEXT_SUFFIXES):
                path = Path(root, file_name)
                files.append((path.relative_to(folder).as_posix(), path))
    for relative, path in sorted(files):
        yield from _text_passages(path, f"{name}/{relative}", max_words, errors)
