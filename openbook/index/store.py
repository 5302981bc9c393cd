"""On-disk storage of a knowledge base: the passage store (SQLite) and the embeddings file (.npy).

**Passage store** (``passages.sqlite``): a table, so that millions of passages need not sit in RAM::

    passages(row INTEGER PRIMARY KEY,   -- = the vector id in embeddings.npy and in the index
             id TEXT NOT NULL,          -- the passage id, unique among live (not deleted) rows
             title TEXT NOT NULL, text TEXT NOT NULL,
             added_version INTEGER NOT NULL,
             deleted_version INTEGER,   -- NULL while the row is live
             meta TEXT)                 -- the passage's metadata as JSON, or NULL (store_meta)

beside ``passage_meta_values(field, kind, value, row)``, an index of the metadata values (one entry per
row and metadata field, created and filled at an older store's first write: store_meta), and
``passage_documents`` (store_documents).

A row is *visible* at version ``v`` when ``added_version <= v`` and it is not deleted as of ``v``
(``deleted_version IS NULL OR deleted_version > v``). Rows are only ever appended, in version order, so
the rows added after version ``v`` are exactly the rows from ``num_rows(v)`` on. Updating a passage marks
its row deleted and appends a new row with the same passage id, which is why ``id`` is unique among live
rows (a partial unique index) rather than over the whole table.

:meth:`PassageStore.get` fetches the k rows of a query by primary key (well under a millisecond).

**Embeddings file** (``embeddings.npy``): :mod:`openbook.index.embeddings_file` (its names are importable
from here too).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from openbook.atomic import fsync_path
from openbook.corpus import Passage
from openbook.errors import InputError, KnowledgeBaseError
from openbook.index.embeddings_file import (  # noqa: F401 (the embeddings file's names, importable from here)
    NPY_HEADER_BYTES,
    EmbeddingsWriter,
    check_dtype,
    embeddings_bytes,
    map_embeddings,
    npy_header,
    read_npy_header,
)
from openbook.index.store_documents import DOCUMENTS_SCHEMA, Document, DocumentsMixin
from openbook.index.store_meta import META_COLUMN, MetaMixin, decode_meta

# ---------------------------------------------------------------------------------------------------
# passage store

_SCHEMA = """
CREATE TABLE IF NOT EXISTS passages (
    row INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    added_version INTEGER NOT NULL,
    deleted_version INTEGER,
    meta TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS passages_live_id ON passages(id) WHERE deleted_version IS NULL;
CREATE INDEX IF NOT EXISTS passages_deleted ON passages(deleted_version, id)
    WHERE deleted_version IS NOT NULL;
""" + DOCUMENTS_SCHEMA
_SQL_VARIABLES = 900  # stay under SQLite's limit on bound parameters per statement


def _chunks(values: Sequence, size: int = _SQL_VARIABLES) -> Iterator[Sequence]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


class PassageStore(DocumentsMixin, MetaMixin):
    """The passages of a knowledge base in SQLite, addressed by row (= vector id) or by passage id.

    Open with :meth:`open` (read-only unless ``writable``) or :meth:`create`. One connection is shared
    by all threads, guarded by a lock.
    """

    def __init__(self, path: Path, connection: sqlite3.Connection, writable: bool):
        self.path = path
        self._db = connection
        self._writable = writable
        self._lock = threading.RLock()
        self._read_schema()  # has it the metadata column, the index of its values (older stores may not)

    # -- opening ------------------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike, bulk: bool = False) -> "PassageStore":
        """Create (or open) a writable store at ``path`` with the schema.

        ``bulk`` uses write-ahead logging with ``synchronous=NORMAL`` (fast appends that survive a
        killed process; used for the working copy during a build, which is compacted at the end).
        """
        path = Path(path)
        db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        if bulk:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        return cls(path, db, writable=True)

    @classmethod
    def open(cls, path: str | os.PathLike, writable: bool = False) -> "PassageStore":
        """Open an existing store; raise KnowledgeBaseError if it is missing or not a passage store."""
        path = Path(path)
        if not path.is_file():
            raise KnowledgeBaseError(f"passage store {path} is missing")
        try:
            try:
                db = cls._connect(path, writable)
                columns = [row[1] for row in db.execute("PRAGMA table_info(passages)")]
            except sqlite3.OperationalError:
                if writable or not path.with_name(path.name + "-journal").exists():
                    raise
                # A writer was killed mid-transaction: only a read-write connection can roll it back.
                db = cls._connect(path, True)
                columns = [row[1] for row in db.execute("PRAGMA table_info(passages)")]
        except sqlite3.DatabaseError as exc:
            raise KnowledgeBaseError(f"{path} is not a readable passage store ({exc})") from None
        expected = ["row", "id", "title", "text", "added_version", "deleted_version"]
        if columns not in (expected, [*expected, META_COLUMN]):
            db.close()
            raise KnowledgeBaseError(f"{path} is not a passage store (no passages table with {expected})")
        if writable:  # an older knowledge base gains the (empty) documents table at its first edit
            db.executescript(DOCUMENTS_SCHEMA)
        return cls(path, db, writable)

    @staticmethod
    def _connect(path: Path, writable: bool) -> sqlite3.Connection:
        if writable:
            return sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        uri = path.resolve().as_uri() + "?mode=ro"
        return sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "PassageStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _query(self, sql: str, params: Sequence = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                raise KnowledgeBaseError(f"passage store {self.path}: {exc}") from None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` if the body raises)."""
        if not self._writable:
            raise KnowledgeBaseError(f"passage store {self.path} is open read-only")
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._ensure_meta_values()  # an older store gains the index of metadata values
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                self._read_schema()  # a rolled-back edit may have added the column or the index
                raise
            self._db.execute("COMMIT")

    # -- reading ------------------------------------------------------------------------------------

    def num_rows(self) -> int:
        """``max(row) + 1`` (rows are numbered from 0 without gaps)."""
        return int(self._query("SELECT COALESCE(MAX(row) + 1, 0) FROM passages")[0][0])

    def get(self, rows: Iterable[int]) -> list[Passage]:
        """The passages at ``rows``, in that order (rows may repeat); KnowledgeBaseError if one is missing."""
        rows = [int(r) for r in rows]
        if not rows:
            return []
        found: dict[int, Passage] = {}
        unique = list(dict.fromkeys(rows))
        for part in _chunks(unique):
            marks = ",".join("?" * len(part))
            for row, pid, title, text, meta in self._query(
                f"SELECT row, id, title, text, {self._meta} FROM passages WHERE row IN ({marks})", part
            ):
                found[row] = Passage(id=pid, title=title, text=text, meta=decode_meta(meta))
        missing = [r for r in unique if r not in found]
        if missing:
            raise KnowledgeBaseError(f"passage store {self.path} has no row {missing[0]}; rebuild the knowledge base")
        return [found[r] for r in rows]

    def row_info(self, row: int) -> tuple[int, int | None] | None:
        """``(added_version, deleted_version)`` of ``row`` or None if there is no such row."""
        result = self._query("SELECT added_version, deleted_version FROM passages WHERE row = ?", (int(row),))
        return (result[0][0], result[0][1]) if result else None

    def find(self, passage_id: str, version: int) -> int | None:
        """Row of the passage ``passage_id`` as visible at ``version``, or None."""
        live = self._query(
            "SELECT row, added_version FROM passages WHERE id = ? AND deleted_version IS NULL", (passage_id,)
        )
        if live and live[0][1] <= version:
            return int(live[0][0])
        old = self._query(
            "SELECT row FROM passages WHERE deleted_version IS NOT NULL AND deleted_version > ? AND id = ? "
            "AND added_version <= ?",
            (version, passage_id, version),
        )
        return int(old[0][0]) if old else None

    def live_rows(self, passage_ids: Sequence[str]) -> dict[str, int]:
        """``{id: row}`` for those of ``passage_ids`` that have a live (not deleted) row."""
        found: dict[str, int] = {}
        ids = list(dict.fromkeys(passage_ids))
        for part in _chunks(ids):
            marks = ",".join("?" * len(part))
            for pid, row in self._query(
                f"SELECT id, row FROM passages WHERE deleted_version IS NULL AND id IN ({marks})", part
            ):
                found[pid] = int(row)
        return found

    def deleted_rows(self, version: int) -> np.ndarray:
        """Sorted int64 rows deleted as of ``version`` (``deleted_version <= version``)."""
        result = self._query(
            "SELECT row FROM passages WHERE deleted_version IS NOT NULL AND deleted_version <= ? ORDER BY row",
            (version,),
        )
        return np.fromiter((r[0] for r in result), dtype=np.int64, count=len(result))

    def deletions(self) -> dict[int, int]:
        """``{version: rows marked deleted as of it}`` over every version that deleted some."""
        counts = self._query("SELECT deleted_version, COUNT(*) FROM passages WHERE deleted_version IS NOT NULL "
                             "GROUP BY deleted_version")
        return {int(version): int(count) for version, count in counts}

    def iter_rows(self, start: int = 0, stop: int | None = None, batch: int = 2048) -> Iterator[tuple[int, Passage, int | None]]:
        """``(row, passage, deleted_version)`` for rows ``start <= row < stop`` in order, fetched in batches."""
        position = start
        while True:
            limit = batch if stop is None else min(batch, stop - position)
            if limit <= 0:
                return
            result = self._query(
                f"SELECT row, id, title, text, deleted_version, {self._meta} FROM passages WHERE row >= ? "
                "ORDER BY row LIMIT ?", (position, limit),
            )
            if not result:
                return
            for row, pid, title, text, deleted, meta in result:
                if stop is not None and row >= stop:
                    return
                yield row, Passage(id=pid, title=title, text=text, meta=decode_meta(meta)), deleted
            position = result[-1][0] + 1

    # -- writing ------------------------------------------------------------------------------------

    def insert(self, start_row: int, passages: Sequence[Passage], version: int,
               documents: Sequence[Document] | None = None) -> None:
        """Insert ``passages`` as rows ``start_row, start_row + 1, ...`` added in ``version``, with their
        ``(document, sha256)`` if given (:mod:`~openbook.index.store_documents`).

        Call inside :meth:`transaction`. A passage id that is already live raises InputError. The first
        metadata stored in an older store adds its column (in the same transaction).
        """
        try:
            self._insert_rows(start_row, passages, version)
        except sqlite3.IntegrityError as exc:
            raise InputError(f"duplicate passage id ({exc})") from None
        if documents is not None:
            self._insert_documents(start_row, documents)

    def mark_deleted(self, rows: Sequence[int], version: int) -> None:
        """Mark live ``rows`` deleted as of ``version`` (call inside :meth:`transaction`)."""
        for part in _chunks([int(r) for r in rows]):
            marks = ",".join("?" * len(part))
            self._db.execute(
                f"UPDATE passages SET deleted_version = ? WHERE deleted_version IS NULL AND row IN ({marks})",
                [version, *part],
            )

    def discard_after(self, num_rows: int, version: int) -> int:
        """Undo an unfinished edit: drop rows from ``num_rows`` on and deletions made after ``version``.

        Returns how many rows and deletion marks were undone.
        """
        with self.transaction():
            self._discard_meta_after(num_rows)
            dropped = self._db.execute("DELETE FROM passages WHERE row >= ?", (num_rows,)).rowcount
            self._discard_documents_after(num_rows)
            undeleted = self._db.execute(
                "UPDATE passages SET deleted_version = NULL WHERE deleted_version > ?", (version,)
            ).rowcount
        return dropped + undeleted

    def compact_into(self, destination: str | os.PathLike) -> None:
        """Write a compact copy of the store to ``destination`` (``VACUUM INTO``: deterministic bytes for
        the same rows, independent of the transactions that produced them)."""
        destination = Path(destination)
        destination.unlink(missing_ok=True)
        with self._lock:
            self._db.execute("VACUUM INTO ?", (str(destination),))
        fsync_path(destination)
