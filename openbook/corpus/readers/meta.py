"""The metadata of passages read from files, and the record fields a user asks to keep (``--meta-fields``).

Every passage read from a file gets ``source`` (its document id), ``type`` (the file type: ``markdown``,
``html``, ``pdf``, ``docx``, ``csv``, ``text``, ``jsonl``, ``tsv``, ``parquet``, ``wikiextractor``),
``modified`` (the file's modification time, ISO 8601 UTC, ``2026-11-27T12:00:00Z``) and, where the
document has them, ``page`` (PDF, from 1), ``section`` (the heading path of a Markdown, HTML or DOCX
section) or a WikiExtractor article's ``page_id`` and ``url``.

The fields a user names are kept too: from JSON Lines and Parquet records, from the columns of CSV and TSV
files (matched ignoring case; their values stay text), and from the dicts given to
:func:`openbook.rag.build_kb`. A record without a named field (or with ``null``, or an empty CSV cell)
just lacks it. A value must be a JSON scalar (text, a number or true/false; a Parquet date or timestamp
becomes its ISO 8601 text) of at most ``MAX_META_CHARS`` characters: a list, an object, a non-finite number
or a longer text makes the record malformed (named ``path:line``, and stopped or skipped as
``--on-error`` says), never stringified or cut, so that a filter never matches a value the user did not write.
The names openbook sets itself (``RESERVED_META``) cannot be named.
"""

import datetime
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from openbook.corpus.passages import MetaValue
from openbook.errors import InputError, check_text

RESERVED_META = ("source", "type", "page", "section", "modified")
MAX_META_CHARS = 4096
MAX_META_FIELDS = 64
_MAX_INT = 2**63


def check_meta_fields(fields: Iterable[str] | None) -> tuple[str, ...]:
    """The field names to keep, checked: non-empty text, not a name openbook sets, at most ``MAX_META_FIELDS``;
    otherwise InputError naming the field."""
    if isinstance(fields, str):
        raise InputError(f"meta_fields must be a list of field names, got the text {fields!r}")
    names: list[str] = []
    for name in fields or ():
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"a metadata field name must be non-empty text, got {name!r}")
        check_text(name, f"metadata field name {name!r}")
        if name.strip().lower() in RESERVED_META:
            raise InputError(f"metadata field {name!r} is set by openbook itself ({', '.join(RESERVED_META)}); "
                             "name another field")
        if name.strip() not in names:
            names.append(name.strip())
    if len(names) > MAX_META_FIELDS:
        raise InputError(f"at most {MAX_META_FIELDS} metadata fields can be kept, got {len(names)}")
    return tuple(names)


def record_meta(values: Mapping[str, Any], fields: Iterable[str], fold_case: bool = False) -> dict[str, MetaValue]:
    """The named ``fields`` of a record (``fold_case``: its keys matched ignoring case, as CSV and TSV columns
    are); InputError naming the first field whose value cannot be kept (see the module docstring)."""
    if fold_case:
        values = {str(key).lower(): value for key, value in values.items()}
    meta: dict[str, MetaValue] = {}
    for name in fields:
        value = values.get(name.lower() if fold_case else name)
        if value is None or (fold_case and isinstance(value, str) and not value.strip()):
            continue
        meta[name] = meta_value(value.strip() if fold_case and isinstance(value, str) else value, name)
    return meta


def meta_value(value: Any, name: str) -> MetaValue:
    """``value`` as a metadata value, or InputError naming field ``name`` and what is wrong with it."""
    if isinstance(value, (datetime.date, datetime.time)):
        value = value.isoformat()
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -_MAX_INT <= value < _MAX_INT:
            raise InputError(f"metadata field {name!r}: the integer {value} is out of range (64 bits)")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"metadata field {name!r}: {value} is not a finite number")
        return value
    if isinstance(value, str):
        check_text(value, f"metadata field {name!r}")
        if len(value) > MAX_META_CHARS:
            raise InputError(f"metadata field {name!r}: {len(value)} characters, more than the {MAX_META_CHARS} "
                             "a metadata value may have")
        return value
    kind = {list: "a list", dict: "an object"}.get(type(value), f"a {type(value).__name__}")
    raise InputError(f"metadata field {name!r} must be text, a number or true/false, got {kind}")


def file_meta(path: Path, kind: str, document: str) -> dict[str, MetaValue]:
    """``source``, ``type`` and ``modified`` of the passages of file ``path``."""
    modified = datetime.datetime.fromtimestamp(os.stat(path).st_mtime, datetime.timezone.utc)
    return {"source": document, "type": kind, "modified": modified.strftime("%Y-%m-%dT%H:%M:%SZ")}
