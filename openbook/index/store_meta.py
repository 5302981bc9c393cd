"""The metadata of a passage store: each row's ``Passage.meta`` kept as a JSON object.

A column of the ``passages`` table of ``passages.sqlite`` (:mod:`openbook.index.store`)::

    meta TEXT   -- a JSON object of scalars ({"source": "a.md", "page": 3, ...}), or NULL for none

A store written before the column existed (an older knowledge base) reads as one whose rows have no
metadata: it is opened read-only as it is, and gains the column (``ALTER TABLE``) inside the transaction
of the first edit that stores some. The JSON of one passage's metadata is bounded by
:data:`MAX_META_CHARS`, and its values must be JSON scalars (:data:`~openbook.corpus.passages.MetaValue`),
so that filters (:mod:`openbook.index.filters`) can compare them.

**An index of the metadata values**, so that a filter reads only its matching entries instead of every row's
JSON (as Chroma's ``embedding_metadata`` does), a table beside ``passages``::

    passage_meta_values(field TEXT NOT NULL,    -- a key of a row's metadata
                        kind INTEGER NOT NULL,  -- 0 text, 1 number (integer or real), 2 boolean
                        value NOT NULL,         -- the value (a boolean as 0/1); no declared type, so that
                                                -- SQLite keeps text as text and numbers as numbers
                        row INTEGER NOT NULL,   -- a row of passages
                        PRIMARY KEY (field, kind, value, row)) WITHOUT ROWID

It holds one entry per (row, metadata field) of every row, deleted ones too (a row's visibility at a
version is decided from ``passages``), filled from the JSON with SQL (``json_each``): its content is a
function of the rows' metadata alone, so a compacted store's bytes do not depend on how it was written.
Every write keeps it (:meth:`MetaMixin._insert_rows`, :meth:`MetaMixin.set_meta`,
:meth:`MetaMixin._discard_meta_after`). A store written before the table existed gains it, filled from all
its rows, in its first write transaction (:meth:`MetaMixin._ensure_meta_values`, so a crash rolls it back
with the rest); opened read-only, it is filtered by scanning the JSON (``Filter.sql()``), with the same
results.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from openbook.errors import InputError

META_COLUMN = "meta"
MAX_META_CHARS = 8192  # characters of one passage's metadata as JSON
MAX_META_KEY_CHARS = 200
VALUES_TABLE = "passage_meta_values"
VALUES_SCHEMA = f"""CREATE TABLE {VALUES_TABLE} (
    field TEXT NOT NULL,
    kind INTEGER NOT NULL,
    value NOT NULL,
    row INTEGER NOT NULL,
    PRIMARY KEY (field, kind, value, row)
) WITHOUT ROWID"""
TEXT, NUMBER, BOOLEAN = 0, 1, 2  # the kinds of passage_meta_values
_ENTRIES = f"""SELECT j.key,
    CASE j.type WHEN 'text' THEN {TEXT} WHEN 'true' THEN {BOOLEAN} WHEN 'false' THEN {BOOLEAN} ELSE {NUMBER} END,
    CASE j.type WHEN 'true' THEN 1 WHEN 'false' THEN 0 ELSE j.value END, p.row
FROM passages p, json_each(p.meta) j
WHERE {{rows}} AND p.meta IS NOT NULL AND j.type IN ('text', 'integer', 'real', 'true', 'false')"""
_ROWS_PER_STATEMENT = 900  # under SQLite's limit on bound parameters


def meta_problem(meta: Any) -> str | None:
    """Why ``meta`` cannot be stored as a passage's metadata, or None if it can (None is no metadata)."""
    if meta is None:
        return None
    if not isinstance(meta, dict):
        return f"metadata must be a JSON object (a dict), not {type(meta).__name__}"
    for key, value in meta.items():
        if not isinstance(key, str) or not key or len(key) > MAX_META_KEY_CHARS:
            return f"metadata key {key!r} must be a non-empty string of at most {MAX_META_KEY_CHARS} characters"
        if isinstance(value, float) and not math.isfinite(value):
            return f"metadata field {key!r} must be a finite number, got {value!r}"
        if not isinstance(value, (str, int, float, bool)):
            return f"metadata field {key!r} must be a string, number or boolean, not {type(value).__name__}"
    size = len(encode_meta(meta, checked=True))
    if size > MAX_META_CHARS:
        return f"metadata is {size} characters of JSON, above the limit of {MAX_META_CHARS}"
    return None


def encode_meta(meta: dict[str, Any] | None, checked: bool = False) -> str | None:
    """The JSON text stored for ``meta`` (None stays NULL); InputError if it cannot be stored."""
    if meta is None:
        return None
    if not checked:
        problem = meta_problem(meta)
        if problem is not None:
            raise InputError(problem)
    return json.dumps(meta, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def decode_meta(text: str | None) -> dict[str, Any] | None:
    """The metadata stored as ``text`` (None for NULL)."""
    return None if text is None else json.loads(text)


def entries_sql(rows: str) -> str:
    """SELECT of the ``passage_meta_values`` entries ``(field, kind, value, row)`` of the rows of ``passages p``
    that the SQL condition ``rows`` selects."""
    return _ENTRIES.format(rows=rows)


def bindable(value: Any) -> Any:
    """``value`` as SQLite can take it: an integer beyond 64 bits as a float (as SQLite reads one from JSON)."""
    return float(value) if isinstance(value, int) and not -2 ** 63 <= value < 2 ** 63 else value


def entry(value: Any) -> tuple[int, Any]:
    """``(kind, value)`` of a metadata or filter value as ``passage_meta_values`` holds it."""
    if isinstance(value, bool):
        return BOOLEAN, int(value)
    return (TEXT, value) if isinstance(value, str) else (NUMBER, bindable(value))


def after_prefix(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix`` in code point order (= SQLite's order
    of UTF-8 text), or None if there is none (``prefix`` is empty or all U+10FFFF): the prefix with its last
    character that has a successor replaced by it (past the surrogates, which text cannot hold)."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            following = 0xE000 if 0xD7FF <= last < 0xE000 else last + 1
            return "".join(chars) + chr(following)
    return None


def condition_queries(condition, num_rows: int) -> list[tuple[str, list]]:
    """``(SELECT of rows below num_rows, parameters)`` over ``passage_meta_values`` whose union is the rows
    whose metadata passes ``condition`` (a :class:`~openbook.index.filters.Condition`), visible or not."""
    select = f"SELECT row FROM {VALUES_TABLE} WHERE field = ? AND kind = ? AND "
    if condition.op == "eq":
        queries = []
        for value in dict.fromkeys(entry(v) for v in condition.values):
            queries.append((select + "value = ? AND row < ?", [condition.field, *value, num_rows]))
        return queries
    kind, bound = entry(condition.values[0])
    if condition.op in ("gte", "lte"):
        test = ">=" if condition.op == "gte" else "<="
        return [(select + f"value {test} ? AND row < ?", [condition.field, kind, bound, num_rows])]
    upper = after_prefix(bound)
    sql, params = select + "value >= ?", [condition.field, TEXT, bound]
    if upper is not None:
        sql, params = sql + " AND value < ?", params + [upper]
    return [(sql + " AND substr(value, 1, ?) = ? AND row < ?", params + [len(bound), bound, num_rows])]


def _sorted_union(parts: list[np.ndarray]) -> np.ndarray:
    """The sorted distinct rows of sorted ``parts`` (``np.unique`` hashes: many times slower on 666k rows)."""
    rows = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
    return rows[np.r_[True, rows[1:] != rows[:-1]]] if len(rows) else rows


class MetaMixin:
    """The metadata column and its index of values (mixed into :class:`~openbook.index.store.PassageStore`,
    which calls :meth:`_read_schema` on opening and after a rolled-back transaction,
    :meth:`_ensure_meta_values` at the start of every write transaction and :meth:`_discard_meta_after`
    from ``discard_after``). It reads the column as ``self._meta``: its name, or ``"NULL"`` in a store without
    it; ``self._values`` says whether the store has ``passage_meta_values``."""

    def _read_schema(self) -> None:
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(passages)")]
        self._meta = META_COLUMN if META_COLUMN in columns else "NULL"
        self._values = bool(self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (VALUES_TABLE,)).fetchall())

    @property
    def has_meta(self) -> bool:
        """Whether the store has the metadata column (knowledge bases written before it existed do not)."""
        return self._meta != "NULL"

    def _ensure_meta_values(self) -> None:
        """Create ``passage_meta_values`` filled from every row, inside the caller's write transaction, if the
        store (an older one) lacks it."""
        if self._values:
            return
        self._read_schema()  # as of this transaction
        if not self._values:
            self._db.execute(VALUES_SCHEMA)
            if self.has_meta:  # sorted, so that the index is written in order
                self._db.execute(f"INSERT INTO {VALUES_TABLE} {entries_sql('1')} ORDER BY 1, 2, 3, 4")
            self._values = True

    def _add_column_for(self, encoded: Sequence[str | None]) -> None:
        """Add the metadata column (inside the caller's transaction) if the store lacks it and ``encoded`` holds some."""
        if not self.has_meta and any(m is not None for m in encoded):
            self._db.execute(f"ALTER TABLE passages ADD COLUMN {META_COLUMN} TEXT")
            self._meta = META_COLUMN

    def _insert_rows(self, start_row: int, passages: Sequence, version: int) -> None:
        """INSERT the passages and their index entries (inside the caller's transaction), adding the column
        for the first metadata."""
        metas = [encode_meta(getattr(p, "meta", None)) for p in passages]
        self._add_column_for(metas)
        if self.has_meta:
            self._db.executemany(
                "INSERT INTO passages (row, id, title, text, added_version, meta) VALUES (?, ?, ?, ?, ?, ?)",
                [(start_row + i, p.id, p.title, p.text, version, m) for i, (p, m) in enumerate(zip(passages, metas))])
            if self._values and any(m is not None for m in metas):
                self._db.execute(f"INSERT INTO {VALUES_TABLE} {entries_sql('p.row >= ? AND p.row < ?')}",
                                 (start_row, start_row + len(passages)))
        else:
            self._db.executemany(
                "INSERT INTO passages (row, id, title, text, added_version) VALUES (?, ?, ?, ?, ?)",
                [(start_row + i, p.id, p.title, p.text, version) for i, p in enumerate(passages)])

    def set_meta(self, metas: Sequence[tuple[int, dict[str, Any] | None]]) -> None:
        """Replace the metadata of rows, given as ``(row, meta)`` pairs (the last one of a row counts), and their
        index entries (inside the caller's transaction), adding the column for the first metadata."""
        encoded = {int(row): encode_meta(meta) for row, meta in metas}
        self._add_column_for(list(encoded.values()))
        if not self.has_meta:
            return
        rows = list(encoded)
        for start in range(0, len(rows), _ROWS_PER_STATEMENT):
            part = rows[start:start + _ROWS_PER_STATEMENT]
            chosen = entries_sql(f"p.row IN ({','.join('?' * len(part))})")
            if self._values:  # the old entries, by primary key
                self._db.execute(f"DELETE FROM {VALUES_TABLE} WHERE (field, kind, value, row) IN ({chosen})", part)
            self._db.executemany("UPDATE passages SET meta = ? WHERE row = ?", [(encoded[r], r) for r in part])
            if self._values:
                self._db.execute(f"INSERT INTO {VALUES_TABLE} {chosen}", part)

    def _discard_meta_after(self, num_rows: int) -> None:
        """Drop the index entries of rows from ``num_rows`` on (before the rows, inside the caller's transaction)."""
        if self._values and self.has_meta:
            self._db.execute(f"DELETE FROM {VALUES_TABLE} WHERE (field, kind, value, row) IN "
                             f"({entries_sql('p.row >= ?')})", (num_rows,))

    def filter_rows(self, where, version: int, num_rows: int) -> np.ndarray:
        """Sorted int64 rows below ``num_rows`` visible at ``version`` whose metadata matches ``where`` (a
        :class:`~openbook.index.filters.Filter`); none in a store without metadata.

        With ``passage_meta_values``, each condition's rows come from its entries (a search of the table's
        primary key), the conditions' rows are intersected, and the rows deleted as of ``version`` removed;
        without it (an older store opened read-only), every row's JSON is scanned."""
        if not self.has_meta:
            return np.zeros(0, dtype=np.int64)
        if not self._values:
            condition, params = where.sql()
            return self._rows(
                "SELECT row FROM passages WHERE row < ? AND added_version <= ? AND (deleted_version IS NULL OR "
                f"deleted_version > ?) AND meta IS NOT NULL AND {condition}",
                (num_rows, version, version, *params))
        rows = None
        for condition in where.conditions:
            found = _sorted_union([self._rows(sql, params) for sql, params in condition_queries(condition, num_rows)])
            rows = found if rows is None else np.intersect1d(rows, found, assume_unique=True)
            if len(rows) == 0:
                return rows
        if rows is None:  # no condition
            rows = np.arange(num_rows, dtype=np.int64)
        deleted = self.deleted_rows(version)
        return np.setdiff1d(rows, deleted, assume_unique=True) if len(deleted) else rows

    def _rows(self, sql: str, params: Sequence) -> np.ndarray:
        """The sorted rows that ``sql`` (a ``SELECT row``) selects, read as one text (not a tuple per row)."""
        text = self._query(f"SELECT group_concat(row) FROM ({sql})", params)[0][0]
        return np.sort(np.fromstring(text, dtype=np.int64, sep=",")) if text else np.zeros(0, dtype=np.int64)
