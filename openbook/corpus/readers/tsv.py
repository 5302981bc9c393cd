"""The DPR ``psgs_w100.tsv`` format (``.tsv``, optionally ``.gz``): ``id<TAB>text<TAB>title`` with a header
row naming the columns (``title`` optional), CSV quoting as DPR writes it."""

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path

from openbook.corpus.readers.files import _numbered_lines
from openbook.corpus.readers.records import RecordErrors, SourcePassage, _file_error, _record_passages
from openbook.errors import InputError

TSV_SUFFIXES = (".tsv",)


def _tsv_source(path: Path, max_words: int, errors: RecordErrors, fields: Sequence[str] = ()) -> Iterator[SourcePassage]:
    """The DPR ``psgs_w100.tsv`` format: a header row, then ``id<TAB>text<TAB>title`` rows, one per line.

    Each line is parsed as DPR parses it (``csv.reader`` with a tab delimiter and the default quoting:
    ``"a ""quoted"" text"`` is ``a "quoted" text``, a quote inside an unquoted field is kept). A quoted
    field must end on its own line: an unbalanced ``"`` is a malformed row (``path:line``) instead of
    swallowing the rows after it. ``fields`` names the columns kept as metadata too (see
    :mod:`~openbook.corpus.readers.meta`).
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
            yield from _record_passages(record, f"{path.name}:{lineno}", where, max_words, errors, fields=fields,
                                        values=record)
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
