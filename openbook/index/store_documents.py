"""The documents of a passage store: which document (and which version of its content) each row came from.

A second table of ``passages.sqlite``, beside ``passages``::

    passage_documents(row INTEGER PRIMARY KEY,  -- a row of passages
                      document TEXT NOT NULL,   -- the document id (a path relative to the folder given)
                      sha256 TEXT NOT NULL)     -- the document's content hash when the row was added

Rows without a document (built from plain passages, or by an openbook that did not record documents) have
no entry; a store without the table (an older knowledge base) reads as one whose rows have no document.
"""

from __future__ import annotations

from collections.abc import Sequence

DOCUMENTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS passage_documents (
    row INTEGER PRIMARY KEY,
    document TEXT NOT NULL,
    sha256 TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS passage_documents_document ON passage_documents(document);
"""

Document = tuple[str | None, str | None]  # (document id, content sha256) of one new row


class DocumentsMixin:
    """Reading and writing ``passage_documents`` (mixed into :class:`~openbook.index.store.PassageStore`)."""

    def has_documents(self) -> bool:
        """Whether the store has the documents table (knowledge bases written before it existed do not)."""
        return bool(self._query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'passage_documents'"))

    def _insert_documents(self, start_row: int, documents: Sequence[Document]) -> None:
        rows = [(start_row + i, doc, sha or "") for i, (doc, sha) in enumerate(documents) if doc is not None]
        if rows:
            self._db.executemany("INSERT INTO passage_documents (row, document, sha256) VALUES (?, ?, ?)", rows)

    def _discard_documents_after(self, num_rows: int) -> None:
        if self.has_documents():
            self._db.execute("DELETE FROM passage_documents WHERE row >= ?", (num_rows,))

    def row_documents(self, rows: Sequence[int]) -> dict[int, Document]:
        """``{row: (document, sha256)}`` for those of ``rows`` that belong to a document."""
        if not self.has_documents():
            return {}
        found: dict[int, Document] = {}
        rows = [int(r) for r in rows]
        for start in range(0, len(rows), 900):
            part = rows[start:start + 900]
            marks = ",".join("?" * len(part))
            for row, doc, sha in self._query(
                f"SELECT row, document, sha256 FROM passage_documents WHERE row IN ({marks})", part
            ):
                found[int(row)] = (doc, sha)
        return found

    def live_documents(self) -> dict[str, tuple[set[str], list[int]]]:
        """``{document: (content hashes, live rows)}`` of the documents with live (not deleted) rows."""
        if not self.has_documents():
            return {}
        found: dict[str, tuple[set[str], list[int]]] = {}
        for row, doc, sha in self._query(
            "SELECT d.row, d.document, d.sha256 FROM passage_documents d JOIN passages p ON p.row = d.row "
            "WHERE p.deleted_version IS NULL ORDER BY d.row"
        ):
            hashes, rows = found.setdefault(doc, (set(), []))
            hashes.add(sha)
            rows.append(int(row))
        return found

    def documents(self, version: int, num_rows: int) -> list[dict]:
        """The documents visible at ``version`` (rows below ``num_rows``) in order of their first row:
        ``{"document", "sha256", "passages": [ids]}``; passages without a document come last, under
        ``"document": None``."""
        columns, join = (("d.document, d.sha256", "LEFT JOIN passage_documents d ON d.row = p.row")
                         if self.has_documents() else ("NULL, NULL", ""))
        result = self._query(
            f"SELECT p.id, {columns} FROM passages p {join} WHERE p.row < ? AND p.added_version <= ? "
            "AND (p.deleted_version IS NULL OR p.deleted_version > ?) ORDER BY p.row",
            (num_rows, version, version),
        )
        grouped: dict[str | None, dict] = {}
        for pid, doc, sha in result:
            entry = grouped.setdefault(doc, {"document": doc, "sha256": sha, "passages": []})
            entry["passages"].append(pid)
        loose = grouped.pop(None, None)
        return [*grouped.values(), *([loose] if loose else [])]
