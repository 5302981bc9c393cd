"""Crash-safe edits of a knowledge base: add, update and delete passages as new versions, switch the
current version; an unfinished edit is undone by the next one (see :mod:`openbook.index.kb`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from openbook.corpus import Passage
from openbook.corpus.readers import RecordErrors, SourcePassage
from openbook.errors import InputError, KnowledgeBaseError
from openbook.index.dense import DenseIndex
from openbook.index.kb.append import _Appender, _source_items
from openbook.index.kb.folder import _locked, clean_leftovers
from openbook.index.kb.indexing import (
    _check_index_params,
    _create_index,
    _index_record,
    _load_index,
    check_index_type,
    resolve_index,
)
from openbook.index.kb.layout import (
    ADD_CHUNK_ROWS,
    EMBEDDINGS_FILE,
    LOCK_FILE,
    MANIFEST_FILE,
    STORE_FILE,
    EncodePassages,
    _check_batch_size,
    _check_version,
    _file_entry,
    _now,
    _segment,
    _version_entry,
    _write_json,
    read_manifest,
)
from openbook.index.store import EmbeddingsWriter, PassageStore, embeddings_bytes, map_embeddings
from openbook.index.store_meta import meta_problem
from openbook.presets import AUTO_INDEX
from openbook.progress import progress_bar

# ---------------------------------------------------------------------------------------------------
# editing


def _embeddings_writer_for(path: Path, manifest: dict[str, Any]) -> EmbeddingsWriter:
    return EmbeddingsWriter.reopen(path / EMBEDDINGS_FILE, manifest["num_rows"])


def _stray_index_files(path: Path, manifest: dict[str, Any]) -> list[Path]:
    keep = manifest["index"]["file"]
    return [p for p in path.glob("index*.faiss") if p.name != keep]


def _recover(path: Path, manifest: dict[str, Any], store: PassageStore) -> dict[str, Any]:
    """Undo the leftovers of an unfinished edit and write the manifest without ``pending_edit``."""
    store.discard_after(manifest["num_rows"], manifest["latest_version"])
    _embeddings_writer_for(path, manifest).publish()
    for stray in _stray_index_files(path, manifest):
        stray.unlink(missing_ok=True)
    manifest = dict(manifest)
    manifest.pop("pending_edit", None)
    manifest["files"] = dict(manifest["files"])
    manifest["files"][STORE_FILE] = _file_entry(path / STORE_FILE)
    _write_json(path / MANIFEST_FILE, manifest)
    return manifest


@contextlib.contextmanager
def _edit(path: Path, action: str) -> Iterator[tuple[dict[str, Any], PassageStore, int]]:
    """Lock the knowledge base, recover from an unfinished edit, mark this one pending; yield
    ``(manifest, writable store, new version)``. On failure the knowledge base is put back as it was."""
    path = Path(path)
    manifest = read_manifest(path)
    with _locked(path / LOCK_FILE, f"knowledge base {path}"):
        clean_leftovers(path)
        manifest = read_manifest(path)
        if manifest["current_version"] != manifest["latest_version"]:
            raise KnowledgeBaseError(
                f"knowledge base {path} is at version {manifest['current_version']} but the latest is "
                f"{manifest['latest_version']}; edits apply to the latest version: run "
                f"`openbook kb use {path} {manifest['latest_version']}` first"
            )
        store = PassageStore.open(path / STORE_FILE, writable=True)
        try:
            if "pending_edit" in manifest:
                manifest = _recover(path, manifest, store)
            version = manifest["latest_version"] + 1
            pending = {**manifest, "pending_edit": {"version": version, "action": action, "started_at": _now()}}
            _write_json(path / MANIFEST_FILE, pending)
            try:
                yield manifest, store, version
            except BaseException:
                with contextlib.suppress(Exception):
                    on_disk = read_manifest(path)
                    if "pending_edit" in on_disk:  # not committed: put the previous version back
                        _recover(path, on_disk, store)
                raise
        finally:
            store.close()


def _commit_edit(path: Path, manifest: dict[str, Any], store: PassageStore, version: int, description: str,
                 added: int, deleted: int, index: DenseIndex | None) -> dict[str, Any]:
    """Write the files' new checksums and the new version into the manifest (the commit point)."""
    num_rows = manifest["num_rows"] + added
    files = dict(manifest["files"])
    old_index_file = manifest["index"]["file"]
    index_record = dict(manifest["index"])
    if index is not None:
        new_file = f"index.v{version}.faiss"
        index.save(path / new_file)
        files.pop(old_index_file, None)
        files[new_file] = _file_entry(path / new_file)
        index_record = _index_record(index, manifest["index"]["params"], new_file)
    if added:
        dtype, dim = np.dtype(manifest["dtype"]), manifest["dim"]
        embeddings = dict(files[EMBEDDINGS_FILE])
        embeddings["bytes"] = embeddings_bytes(dtype, num_rows, dim)
        embeddings["segments"] = [*embeddings["segments"],
                                  _segment(path / EMBEDDINGS_FILE, dtype, dim, manifest["num_rows"], num_rows)]
        files[EMBEDDINGS_FILE] = embeddings
    files[STORE_FILE] = _file_entry(path / STORE_FILE)
    num_passages = num_rows - len(store.deleted_rows(version))
    now = _now()
    new = {
        **manifest,
        "index": index_record,
        "index_type": index_record["type"],
        "num_rows": num_rows,
        "num_passages": num_passages,
        "current_version": version,
        "latest_version": version,
        "versions": [*manifest["versions"], {
            "version": version, "created_at": now, "description": description,
            "num_rows": num_rows, "num_passages": num_passages, "added": added, "deleted": deleted,
        }],
        "files": files,
        "updated_at": now,
    }
    new.pop("pending_edit", None)
    _write_json(path / MANIFEST_FILE, new)
    if index is not None and old_index_file != index_record["file"]:
        with contextlib.suppress(OSError):
            (path / old_index_file).unlink(missing_ok=True)
    return new


def _append_to_index(path: Path, manifest: dict[str, Any], added: int) -> DenseIndex:
    """The knowledge base's index (read into memory) with the ``added`` new rows of embeddings.npy."""
    index = _load_index(path, manifest, mmap=False)
    dtype, dim, start = np.dtype(manifest["dtype"]), manifest["dim"], manifest["num_rows"]
    embeddings = map_embeddings(path / EMBEDDINGS_FILE, dtype, start + added, dim)
    for begin in range(start, start + added, ADD_CHUNK_ROWS):
        chunk = np.asarray(embeddings[begin:min(begin + ADD_CHUNK_ROWS, start + added)], dtype=np.float32)
        try:
            index.add(chunk)
        except InputError as exc:
            raise InputError(f"cannot add the new passages to the {index.type_name} index: {exc}") from None
    return index


def reindex(path, index_type: str = AUTO_INDEX, index_params: dict[str, Any] | None = None, progress: bool = False,
            description: str | None = None) -> int:
    """Index the knowledge base anew, as a new version of the same passages; return its number. The vectors are
    not encoded again: the new index (``index_type`` and ``index_params`` as for a build; ``"auto"`` chooses by
    size) is built from embeddings.npy over every row, as edits keep it, and replaces the old one at the commit."""
    path = Path(path)
    params = _check_index_params(index_params)
    index_type = check_index_type(index_type, params)
    with _edit(path, "reindex") as (manifest, store, version):
        rows, dim = manifest["num_rows"], manifest["dim"]
        kind, params = resolve_index(index_type, params, rows, dim)
        embeddings = map_embeddings(path / EMBEDDINGS_FILE, np.dtype(manifest["dtype"]), rows, dim)
        index = _create_index(kind, params, embeddings, progress)
        del embeddings
        text = description or f"reindex: {manifest['index']['type']} index replaced by {index.type_name}"
        with_params = {**manifest, "index": {**manifest["index"], "params": params}}  # recorded with the new index
        _commit_edit(path, with_params, store, version, text, 0, 0, index)
    return version


def _describe_ids(ids: list[str], limit: int = 5) -> str:
    shown = ", ".join(repr(i) for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def add_passages(path, passages, encode_passages: EncodePassages, batch_size: int = 256, progress: bool = False,
                 on_error: str | RecordErrors = "stop", description: str | None = None,
                 source_label: str | None = None) -> int:
    """Append new passages (encoded with ``encode_passages``) as a new version; return its number.

    The version is described by ``description``, by default ``"add N passages[ from SOURCE_LABEL]"``.
    """
    path = Path(path)
    errors = on_error if isinstance(on_error, RecordErrors) else RecordErrors(on_error)
    _check_batch_size(batch_size)
    with _edit(path, "add") as (manifest, store, version):
        writer = _embeddings_writer_for(path, manifest)
        with progress_bar(unit="passage", desc="encoding passages", enabled=progress) as bar:
            appender = _Appender(store, encode_passages, errors, version, batch_size, manifest["num_rows"],
                                 writer, lambda dim: writer, bar=bar)
            appender.feed(_source_items(passages))
        added = appender.rows - manifest["num_rows"]
        if added == 0:
            raise InputError("no passages to add" + (f" ({errors.skipped} records skipped)" if errors.skipped else ""))
        writer.publish()
        index = _append_to_index(path, manifest, added)
        text = description or f"add {added} passage{'s' * (added != 1)}" + (f" from {source_label}" if source_label else "")
        if errors.skipped:
            text += f" ({errors.skipped} records skipped)"
        _commit_edit(path, manifest, store, version, text, added, 0, index)
    return version


def _normalise_update(item, position: int) -> tuple[str, str, str | None, str, dict | None, dict | None]:
    """``(where, id, title or None, text, meta or None, set_meta or None)`` of one update (Passage, SourcePassage
    or dict)."""
    where = f"update {position}"
    if isinstance(item, SourcePassage):
        where, item = item.where, item.passage
    if isinstance(item, Passage):
        return where, item.id, item.title, item.text, item.meta, None
    if isinstance(item, dict):
        where = str(item.get("where", where))
        pid, title, text = item.get("id"), item.get("title"), item.get("text")
        if not isinstance(pid, str) or not pid:
            raise InputError(f"{where}: an update needs the passage 'id' (a non-empty string)")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{where}: an update needs the new 'text' (a non-empty string)")
        if title is not None and not isinstance(title, str):
            raise InputError(f"{where}: 'title' must be a string")
        meta, set_meta = item.get("meta"), item.get("set_meta")
        if meta is not None and set_meta is not None:
            raise InputError(f"{where}: give 'meta' (all of the metadata) or 'set_meta' (some fields), not both")
        for value in (meta, set_meta):
            if meta_problem(value) is not None:
                raise InputError(f"{where}: {meta_problem(value)}")
        return where, pid, title, text, meta, set_meta
    raise InputError(f"{where}: expected a Passage or a dict with id, text and optionally title, "
                     f"got {type(item).__name__}")


def _new_meta(old: dict | None, meta: dict | None, set_meta: dict | None) -> dict | None:
    """An updated passage's metadata: ``meta`` if given, else the old with ``set_meta``'s fields set."""
    if meta is not None:
        return meta
    return {**(old or {}), **set_meta} if set_meta else old  # metadata is kept


def update_passages(path, updates, encode_passages: EncodePassages, progress: bool = False,
                    description: str | None = None) -> int:
    """Replace the text (and optionally the title) of existing passages, as a new version.

    ``updates``: Passages, or dicts ``{"id", "text", "title" (optional: keep the old title)}`` with optionally
    ``"meta"`` (the new metadata, all of it) or ``"set_meta"`` (fields set in the old metadata, the others kept;
    what ``kb update --meta-fields`` gives); without either the old metadata is kept. Each old row is marked
    deleted in the new version and a new row with the same passage id is added.
    """
    path = Path(path)
    items = [_normalise_update(item, n) for n, item in enumerate(updates, start=1)]
    if not items:
        raise InputError("no updates given")
    seen: dict[str, str] = {}
    for where, pid, *_ in items:
        if pid in seen:
            raise InputError(f"{where}: passage id {pid!r} is updated twice (also at {seen[pid]})")
        seen[pid] = where
    with _edit(path, "update") as (manifest, store, version):
        rows = store.live_rows([pid for _, pid, *_ in items])
        unknown = [pid for _, pid, *_ in items if pid not in rows]
        if unknown:
            raise InputError(f"knowledge base {path} has no passage {_describe_ids(unknown)}; "
                             f"use `openbook kb add` for new passages")
        old = dict(zip([pid for _, pid, *_ in items], store.get([rows[pid] for _, pid, *_ in items])))
        documents = store.row_documents(list(rows.values()))  # an updated passage stays in its document
        new = [SourcePassage(where, Passage(pid, old[pid].title if title is None else title, text,
                                            _new_meta(old[pid].meta, meta, set_meta)),
                             *documents.get(rows[pid], (None, None)))
               for where, pid, title, text, meta, set_meta in items]
        with store.transaction():
            store.mark_deleted(list(rows.values()), version)
        writer = _embeddings_writer_for(path, manifest)
        appender = _Appender(store, encode_passages, RecordErrors("stop"), version, 256, manifest["num_rows"],
                             writer, lambda dim: writer)
        appender.feed(new)
        writer.publish()
        index = _append_to_index(path, manifest, len(new))
        text = description or f"update {len(new)} passage{'s' * (len(new) != 1)}: {_describe_ids(list(seen), 3)}"
        _commit_edit(path, manifest, store, version, text, len(new), len(new), index)
    return version


def delete_passages(path, passage_ids: Iterable[str], description: str | None = None) -> int:
    """Delete passages by id, as a new version (their rows stay, hidden from search from that version on)."""
    path = Path(path)
    ids = list(dict.fromkeys(str(i) for i in passage_ids))
    if not ids:
        raise InputError("no passage ids to delete")
    with _edit(path, "delete") as (manifest, store, version):
        rows = store.live_rows(ids)
        unknown = [pid for pid in ids if pid not in rows]
        if unknown:
            raise InputError(f"knowledge base {path} has no passage {_describe_ids(unknown)}; nothing was deleted")
        with store.transaction():
            store.mark_deleted(list(rows.values()), version)
        text = description or f"delete {len(ids)} passage{'s' * (len(ids) != 1)}: {_describe_ids(ids, 3)}"
        _commit_edit(path, manifest, store, version, text, 0, len(ids), None)
    return version


def use_version(path, version: int) -> dict[str, Any]:
    """Make ``version`` the current version of the knowledge base at ``path``; return the manifest."""
    path = Path(path)
    read_manifest(path)
    with _locked(path / LOCK_FILE, f"knowledge base {path}"):
        clean_leftovers(path)
        manifest = read_manifest(path)
        version = _check_version(path, manifest, version)
        manifest = {**manifest, "current_version": version,
                    "num_passages": _version_entry(manifest, version)["num_passages"], "updated_at": _now()}
        _write_json(path / MANIFEST_FILE, manifest)
    return manifest


def disk_usage(path: str | os.PathLike) -> dict[str, int]:
    """Bytes on disk of each file in the knowledge-base directory (and ``"total"``)."""
    path = Path(path)
    sizes = {}
    for entry in sorted(path.iterdir()):
        if entry.is_file() and entry.name != LOCK_FILE:
            sizes[entry.name] = entry.stat().st_size
        elif entry.is_dir():  # e.g. a BM25 cache kept beside the index
            sizes[entry.name + "/"] = sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
    sizes["total"] = sum(sizes.values())
    return sizes


