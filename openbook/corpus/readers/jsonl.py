"""JSON Lines (plain or gzip-compressed): records, and the passages of one file or of a corpus source.

A record's base id is ``id_prefix`` followed by its ``"id"`` field if it has one, else by its 0-based
record number in the file (blank lines are not counted). As a corpus source (``.jsonl``, ``.json``,
``.ndjson``, optionally ``.gz``), a record without an id gets the base id ``"<file name>:<record number>"``.
"""

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from openbook.corpus.chunking import DEFAULT_MAX_WORDS, check_max_words
from openbook.corpus.passages import Passage
from openbook.corpus.readers.files import _numbered_lines
from openbook.corpus.readers.records import (
    RecordErrors,
    SourcePassage,
    _file_error,
    _record_passages,
    passages_from_record,
)
from openbook.errors import InputError

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")


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


def _jsonl_source(path: Path, max_words: int, errors: RecordErrors, fields: Sequence[str] = ()) -> Iterator[SourcePassage]:
    record_no = 0
    try:
        for lineno, record, problem in _jsonl_items(path):
            where = f"{path}:{lineno}"
            if problem is not None:
                errors(where, problem)
                continue
            yield from _record_passages(record, f"{path.name}:{record_no}", where, max_words, errors, fields=fields)
            record_no += 1
    except InputError as exc:  # unreadable or corrupt file: the rest of it is lost
        _file_error(exc, errors)
