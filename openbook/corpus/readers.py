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
"""

import gzip
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from openbook.corpus.chunking import DEFAULT_MAX_WORDS, check_max_words, chunk_article, split_words
from openbook.corpus.passages import Passage
from openbook.errors import InputError

_GZIP_MAGIC = b"\x1f\x8b"
CHUNK_SEPARATOR = "#"


def _open_text(path: Path):
    """Open ``path`` for reading UTF-8 text, transparently decompressing gzip (detected by magic bytes)."""
    try:
        with open(path, "rb") as raw:
            magic = raw.read(2)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a JSON Lines file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if magic == _GZIP_MAGIC:
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _numbered_records(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)`` for each non-blank line of a JSON Lines file (1-based lines)."""
    path = Path(path)
    lineno = 0
    try:
        with _open_text(path) as lines:
            for lineno, line in enumerate(lines, start=1):
                if line.strip():
                    yield lineno, _parse_line(line, path, lineno)
    except UnicodeDecodeError:
        raise InputError(f"{path}:{lineno + 1}: not UTF-8 text") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InputError(f"{path}:{lineno + 1}: corrupt or truncated gzip data ({exc})") from None
    except OSError as exc:
        raise InputError(f"{path}:{lineno + 1}: cannot read: {exc.strerror or exc}") from None


def _parse_line(line: str, path: Path, lineno: int) -> dict[str, Any]:
    """Parse one JSON Lines line into a dict, or raise InputError naming ``path:lineno``."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{lineno}: malformed JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(record, dict):
        raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
    return record


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
        key = record["id"] if "id" in record else record_no
        try:
            passages = passages_from_record(record, f"{id_prefix}{key}", max_words)
        except InputError as exc:
            raise InputError(f"{path}:{lineno}: {exc}") from None
        yield from passages
