"""Documents of a knowledge base: list them, delete one, and sync the knowledge base with a folder.

Each passage added from a file source records its document (:mod:`openbook.index.store_documents`).
:func:`sync_documents` makes the knowledge base match a fresh reading of the source as one new version,
with the machinery (and crash safety) of :func:`~openbook.index.kb.edit.add_passages`: documents that
are new are added, those whose content hash changed are replaced, those no longer there are deleted, and
unchanged ones are neither re-read into the store nor re-encoded. A failed sync changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from openbook.corpus.readers import RecordErrors, SourcePassage
from openbook.errors import InputError
from openbook.index.kb.append import _Appender, _source_items
from openbook.index.kb.edit import _append_to_index, _commit_edit, _edit, _embeddings_writer_for
from openbook.index.kb.layout import STORE_FILE, EncodePassages, _check_batch_size, _check_version, read_manifest
from openbook.index.store import PassageStore
from openbook.progress import progress_bar


class _NothingToDo(Exception):
    """Raised inside an edit that would change nothing: the edit is undone and no version is made."""


def list_documents(path, version: int | None = None) -> list[dict[str, Any]]:
    """The documents of the knowledge base at ``path`` at ``version`` (default: current), in order of
    their first passage: ``{"document", "sha256", "passages": [passage ids]}``; passages that belong to
    no document come last under ``"document": None``."""
    path = Path(path)
    manifest = read_manifest(path)
    version = _check_version(path, manifest, version)
    rows = manifest["versions"][version - 1]["num_rows"]
    with PassageStore.open(path / STORE_FILE) as store:
        return store.documents(version, rows)


def delete_document(path, document: str, description: str | None = None) -> int:
    """Delete every passage of ``document`` as a new version; return its number."""
    path = Path(path)
    with _edit(path, "delete") as (manifest, store, version):
        found = store.live_documents().get(document)
        if found is None:
            raise InputError(f"knowledge base {path} has no document {document!r}; nothing was deleted "
                             f"(`openbook kb list {path}` lists its documents)")
        rows = found[1]
        with store.transaction():
            store.mark_deleted(rows, version)
        text = description or f"delete document {document} ({len(rows)} passage{'s' * (len(rows) != 1)})"
        _commit_edit(path, manifest, store, version, text, 0, len(rows), None)
    return version


def sync_documents(path, passages: Iterable, encode_passages: EncodePassages, batch_size: int = 256,
                   progress: bool = False, on_error: str | RecordErrors = "stop", description: str | None = None,
                   source_label: str | None = None, root=None, source_report=None) -> dict[str, Any]:
    """Make the documents of the knowledge base at ``path`` those of ``passages`` (SourcePassages with
    their document, e.g. :func:`~openbook.corpus.iter_source_passages` of a folder), as one new version.

    Returns ``{"version", "added", "replaced", "deleted", "unchanged", "kept", "passages_added",
    "passages_deleted"}`` (document ids; ``version`` is None if nothing changed, and then no version is made).
    With ``root`` (the folder read), a document that gave no passages but whose file is still there (its
    records were skipped as malformed, say) is kept as it was, under ``"kept"``, rather than deleted.
    With a ``source_report`` (:class:`~openbook.corpus.SourceReport`) that names a file not read (corrupt,
    unreadable, ...), no document is deleted: the ones not seen may be in that file (a WikiExtractor file
    holds many articles), so they are all kept until a sync reads every file.
    """
    path = Path(path)
    errors = on_error if isinstance(on_error, RecordErrors) else RecordErrors(on_error)
    _check_batch_size(batch_size)
    report: dict[str, Any] = {}
    try:
        with _edit(path, "sync") as (manifest, store, version):
            plan = _SyncPlan(store, version, manifest["num_rows"], None if root is None else Path(root))
            writer = _embeddings_writer_for(path, manifest)
            with progress_bar(unit="passage", desc="encoding passages", enabled=progress) as bar:
                appender = _Appender(store, encode_passages, errors, version, batch_size, manifest["num_rows"],
                                     writer, lambda dim: writer, bar=bar)
                appender.feed(plan.filter(_source_items(passages)))
            if plan.live and not plan.seen:
                raise InputError(f"{source_label or 'the input'} has no documents: a sync would delete all of "
                                 f"knowledge base {path}; nothing was changed (delete documents with "
                                 f"`openbook kb delete {path} --document ID`)")
            deleted_rows = plan.delete_missing(keep_all=source_report is not None and source_report.incomplete)
            report = plan.report()
            added = appender.rows - manifest["num_rows"]
            if added == 0 and deleted_rows == 0:
                raise _NothingToDo
            writer.publish()
            index = _append_to_index(path, manifest, added) if added else None
            text = description or _describe_sync(report, source_label)
            if errors.skipped:
                text += f" ({errors.skipped} records skipped)"
            _commit_edit(path, manifest, store, version, text, added, deleted_rows, index)
            report.update(version=version, passages_added=added, passages_deleted=deleted_rows)
    except _NothingToDo:
        report.update(version=None, passages_added=0, passages_deleted=0)
    return report


def _describe_sync(report: dict[str, Any], source_label: str | None) -> str:
    counts = ", ".join(f"{len(report[key])} {key}" for key in ("added", "replaced", "deleted") if report[key])
    return f"sync documents{f' with {source_label}' if source_label else ''}: {counts}"


class _SyncPlan:
    """Decides, document by document as the input streams, what a sync does with the knowledge base's
    live documents: keep (same content hash), replace (its old rows are deleted before its new passages
    are added, so they may reuse their ids), add, or (at the end) delete."""

    def __init__(self, store: PassageStore, version: int, num_rows: int, root: Path | None):
        self.store, self.version, self.num_rows, self.root = store, version, num_rows, root
        self.live = store.live_documents()
        self.seen: dict[str, str] = {}  # document -> what happened to it
        self.deleted_rows = 0

    def filter(self, items: Iterator[SourcePassage]) -> Iterator[SourcePassage]:
        for item in items:
            document = item.document
            if document is None:
                raise InputError(f"{item.where}: the passage {item.passage.id!r} belongs to no document; a sync "
                                 f"reads folders or files whose passages name their document")
            action = self.seen.get(document)
            if action is None:
                action = self.start(document, item.document_sha256)
            if action == "unchanged":
                continue
            self.adopt(item)
            yield item

    def start(self, document: str, sha256: str | None) -> str:
        """What to do with ``document``, seen for the first time in the input (its old rows go now)."""
        old = self.live.get(document)
        if old is None:
            action = "added"
        elif old[0] == {sha256}:
            action = "unchanged"
        else:
            action = "replaced"
            self.delete(old[1])
        self.seen[document] = action
        return action

    def adopt(self, item: SourcePassage) -> None:
        """A new passage whose id a live passage of no document has (a knowledge base built before documents
        were recorded) replaces that passage."""
        row = self.store.live_rows([item.passage.id]).get(item.passage.id)
        if row is not None and row < self.num_rows and row not in self.store.row_documents([row]):
            self.delete([row])

    def delete(self, rows: list[int]) -> None:
        with self.store.transaction():
            self.store.mark_deleted(rows, self.version)
        self.deleted_rows += len(rows)

    def delete_missing(self, keep_all: bool = False) -> int:
        for document, (_, rows) in self.live.items():
            if document in self.seen:
                continue
            if keep_all or (self.root is not None and (self.root / document).is_file()):
                self.seen[document] = "kept"
            else:
                self.seen[document] = "deleted"
                self.delete(rows)
        return self.deleted_rows

    def report(self) -> dict[str, Any]:
        by_action: dict[str, list[str]] = {"added": [], "replaced": [], "deleted": [], "unchanged": [], "kept": []}
        for document, action in self.seen.items():
            by_action[action].append(document)
        return {key: sorted(value) for key, value in by_action.items()}

