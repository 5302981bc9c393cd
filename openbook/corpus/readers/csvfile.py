"""CSV (``.csv``): each row a record, its columns written ``name: value``, one per line.

A header row naming the columns is required (names non-empty, distinct and not numbers). The delimiter
(``,``, ``;``, tab or ``|``) is sniffed, the encoding detected as for text files. ``text_columns`` picks
the columns that make up the text (default: all but ``id`` and ``title``); a ``title`` column becomes the
passage title (default: the file name), an ``id`` column the base id (default ``"<base>:<row>"``, 0-based).
``meta_fields`` names the columns kept as metadata too (their text; see :mod:`~openbook.corpus.readers.meta`).
A malformed row is named ``path:line``.
"""

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path

from openbook.corpus.readers.decode import decode_text
from openbook.corpus.readers.document import FileProblem
from openbook.corpus.readers.records import RecordErrors, SourcePassage, _record_passages

CSV_SUFFIXES = (".csv",)
_SAMPLE_BYTES = 1 << 16
_MAX_HEADER_WORDS = 8


def csv_passages(
    path: Path, base_id: str, max_words: int, errors: RecordErrors, text_columns: Sequence[str] | None = None,
    meta_fields: Sequence[str] = (),
) -> Iterator[SourcePassage]:
    """The passages of a CSV file's rows; :class:`FileProblem` if it has no usable header."""
    csv.field_size_limit(2**31 - 1)
    with open(path, "rb") as raw:
        sample = raw.read(_SAMPLE_BYTES)
    if not sample.strip():
        raise FileProblem("empty", "empty file")
    try:
        _, encoding = decode_text(sample)
    except FileProblem:
        _, encoding = decode_text(sample[: sample.rfind(b"\n") + 1] or sample)  # a cut multi-byte character
    try:
        dialect = csv.Sniffer().sniff(sample.decode(encoding, errors="replace"), delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    with open(path, encoding=encoding, newline="", errors="strict") as handle:
        rows = csv.reader(handle, dialect)
        try:
            header = next((r for r in rows if any(c.strip() for c in r)), None)
        except (csv.Error, UnicodeDecodeError) as exc:
            raise FileProblem("corrupt", f"malformed CSV header ({exc})") from None
        if header is None:
            raise FileProblem("empty", "no rows")
        columns = _columns(header)
        picked = _text_columns(columns, text_columns)
        title_at = columns.index("title") if "title" in columns and "title" not in picked else None
        id_at = columns.index("id") if "id" in columns and "id" not in picked else None
        yield from _rows(path, rows, columns, picked, title_at, id_at, base_id, max_words, errors, meta_fields)


def _rows(path, rows, columns, picked, title_at, id_at, base_id, max_words, errors, fields) -> Iterator[SourcePassage]:
    record_no = 0
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            errors(f"{path}:{rows.line_num + 1}", f"not {exc.encoding} text as the rest of the file; the rest is lost")
            return
        except csv.Error as exc:
            errors(f"{path}:{rows.line_num}", f"malformed CSV: {exc}")
            continue
        where = f"{path}:{rows.line_num}"
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(columns):
            errors(where, f"expected {len(columns)} fields ({', '.join(columns)}), got {len(row)}")
            continue
        text = "\n".join(f"{columns[i]}: {row[i].strip()}" for i in picked if row[i].strip())
        record = {"title": row[title_at].strip() if title_at is not None else path.stem, "text": text}
        if id_at is not None:
            record["id"] = row[id_at].strip()
        yield from _record_passages(record, f"{base_id}:{record_no}", where, max_words, errors, fields=fields,
                                    values=dict(zip(columns, row)) if fields else None)
        record_no += 1


def _columns(header: list[str]) -> list[str]:
    names = [c.strip() for c in header]
    for name in names:
        if not name or _is_number(name) or len(name.split()) > _MAX_HEADER_WORDS or names.count(name) > 1:
            raise FileProblem(
                "no header",
                f"no header row: the first row must name the columns (non-empty, distinct names), got {header[:5]!r}",
            )
    return names


def _text_columns(columns: list[str], wanted: Sequence[str] | None) -> list[int]:
    if not wanted:
        return [i for i, name in enumerate(columns) if name.lower() not in ("id", "title")]
    lowered = [c.lower() for c in columns]
    missing = [w for w in wanted if w.lower() not in lowered]
    if missing:
        raise FileProblem("no column", f"no column {', '.join(map(repr, missing))} for --text-columns "
                                       f"(its columns: {', '.join(columns)})")
    return [lowered.index(w.lower()) for w in wanted]


def _is_number(value: str) -> bool:
    try:
        float(value.replace(",", ""))
    except ValueError:
        return False
    return True

