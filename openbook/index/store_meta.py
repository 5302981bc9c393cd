"""The metadata of a passage store: each row's ``Passage.meta`` kept as a JSON object.

A column of the ``passages`` table of ``passages.sqlite`` (:mod:`openbook.index.store`)::

    meta TEXT   -- a JSON object of scalars ({"source": "a.md", "page": 3, ...}), or NULL for none

A store written before the column existed (an older knowledge base) reads as one whose rows have no
metadata: it is opened read-only as it is, and gains the column (``ALTER TABLE``) inside the transaction
of the first edit that stores some. The JSON of one passage's metadata is bounded by
:data:`MAX_META_CHARS`, and its values must be JSON scalars (:data:`~openbook.corpus.passages.MetaValue`),
so that filters (:mod:`openbook.index.filters`) can compare them.
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


class MetaMixin:
    """Writing the metadata column (mixed into :class:`~openbook.index.store.PassageStore`, which reads it
    as ``self._meta``: the column's name, or ``"NULL"`` in a store without it)."""

    def _meta_column(self) -> str:
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(passages)")]
        return META_COLUMN if META_COLUMN in columns else "NULL"

    @property
    def has_meta(self) -> bool:
        """Whether the store has the metadata column (knowledge bases written before it existed do not)."""
        return self._meta != "NULL"

    def _add_column_for(self, encoded: Sequence[str | None]) -> None:
        """Add the metadata column (inside the caller's transaction) if the store lacks it and ``encoded`` holds some."""
        if not self.has_meta and any(m is not None for m in encoded):
            self._db.execute(f"ALTER TABLE passages ADD COLUMN {META_COLUMN} TEXT")
            self._meta = META_COLUMN

    def _insert_rows(self, start_row: int, passages: Sequence, version: int) -> None:
        """INSERT the passages (inside the caller's transaction), adding the column for the first metadata."""
        metas = [encode_meta(getattr(p, "meta", None)) for p in passages]
        self._add_column_for(metas)
        if self.has_meta:
            self._db.executemany(
                "INSERT INTO passages (row, id, title, text, added_version, meta) VALUES (?, ?, ?, ?, ?, ?)",
                [(start_row + i, p.id, p.title, p.text, version, m) for i, (p, m) in enumerate(zip(passages, metas))])
        else:
            self._db.executemany(
                "INSERT INTO passages (row, id, title, text, added_version) VALUES (?, ?, ?, ?, ?)",
                [(start_row + i, p.id, p.title, p.text, version) for i, p in enumerate(passages)])

    def set_meta(self, metas: Sequence[tuple[int, dict[str, Any] | None]]) -> None:
        """Replace the metadata of rows, given as ``(row, meta)`` pairs (inside the caller's transaction), adding
        the column for the first metadata."""
        encoded = [(encode_meta(meta), row) for row, meta in metas]
        self._add_column_for([m for m, _ in encoded])
        if self.has_meta:
            self._db.executemany("UPDATE passages SET meta = ? WHERE row = ?", encoded)

    def filter_rows(self, where, version: int, num_rows: int) -> np.ndarray:
        """Sorted int64 rows below ``num_rows`` visible at ``version`` whose metadata matches ``where`` (a
        :class:`~openbook.index.filters.Filter`); none in a store without metadata."""
        if not self.has_meta:
            return np.zeros(0, dtype=np.int64)
        condition, params = where.sql()
        result = self._query(
            "SELECT row FROM passages WHERE row < ? AND added_version <= ? AND (deleted_version IS NULL OR "
            f"deleted_version > ?) AND meta IS NOT NULL AND {condition} ORDER BY row",
            (num_rows, version, version, *params),
        )
        return np.fromiter((r[0] for r in result), dtype=np.int64, count=len(result))
