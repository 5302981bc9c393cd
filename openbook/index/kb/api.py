"""The :class:`KnowledgeBase` object: build or load one, read passages, search at a version, edit."""

from __future__ import annotations

import json
import operator
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from openbook.corpus import Passage
from openbook.corpus.readers import RecordErrors
from openbook.errors import InputError, KnowledgeBaseError, positive_int
from openbook.index.dense import DenseIndex
from openbook.index.exact import exact_search
from openbook.index.filters import Filter, no_match
from openbook.index.kb.build import build_and_publish
from openbook.index.kb.counts import check_counts
from openbook.index.kb.documents import delete_document, sync_documents
from openbook.index.kb.edit import add_passages, delete_passages, reindex, update_passages, use_version
from openbook.index.kb.folder import check_out_dir
from openbook.index.kb.indexing import (
    _check_index_params,
    _load_embeddings,
    _load_index,
    _search_excluding,
    check_index_type,
)
from openbook.index.kb.layout import (
    DEFAULT_DTYPE,
    DEFAULT_INDEX,
    FORMAT_VERSION,
    RERANK_FACTOR,
    STORE_FILE,
    EncodePassages,
    _check_batch_size,
    _check_encoder_info,
    _check_version,
    _version_entry,
    check_encoder_matches,
    read_manifest,
    verify_files,
)
from openbook.index.store import PassageStore, check_dtype

# ---------------------------------------------------------------------------------------------------


class KnowledgeBase:
    """Passages, their document vectors and a dense index in one directory, at one version (module docs)."""

    def __init__(self, path: Path, manifest: dict[str, Any], version: int, store: PassageStore,
                 embeddings: np.ndarray, index: DenseIndex):
        """Assemble a loaded knowledge base; use :meth:`build` or :meth:`load` instead."""
        self._set(path, manifest, version, store, embeddings, index)

    def _set(self, path, manifest, version, store, embeddings, index) -> None:
        self._path, self._manifest, self._version = path, manifest, version
        self._store, self._embeddings = store, embeddings
        self._use_index(index)
        visible_rows = _version_entry(manifest, version)["num_rows"]
        deleted = store.deleted_rows(version)
        later = np.arange(visible_rows, manifest["num_rows"], dtype=np.int64)
        self._excluded = np.concatenate([deleted, later]) if later.size else deleted
        self._visible_rows = visible_rows
        self._count = visible_rows - len(deleted)
        self._matches: dict[Filter, np.ndarray] = {}  # the rows of the last filters asked for, at this version
        self._block_norms: dict[int, float] = {}  # the filtered search's cache (openbook.index.exact)

    # -- construction -------------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        passages,
        encode_passages: EncodePassages,
        encoder_info: dict[str, Any],
        out_dir: str | os.PathLike,
        batch_size: int = 256,
        progress: bool = True,
        index_type: str = DEFAULT_INDEX,
        *,
        index_params: dict[str, Any] | None = None,
        dtype: str = DEFAULT_DTYPE,
        on_error: str | RecordErrors = "stop",
        resume: bool = False,
        description: str | None = None,
        source_info: dict[str, Any] | None = None,
        replace: bool = False,
    ) -> KnowledgeBase:
        """Encode ``passages`` in batches, index them and write a knowledge base to ``out_dir``.

        ``passages``: Passages or :class:`~openbook.corpus.SourcePassage` (which carry ``path:line`` for
        error messages), or a function returning a fresh iterable of them (then a resumed build whose
        input changed can start over by itself). ``encode_passages`` maps a list of passages to a float32
        ``(len(list), dim)`` array of document vectors d(z). ``encoder_info`` (JSON-serialisable) is
        stored in the manifest and checked against the query encoder on load. ``index_type`` and
        ``index_params`` choose the index (``flat``, ``hnsw``, ``ivfpq``, ``hnsw_sq8``, or ``auto``, the
        default: chosen by the number of vectors, :func:`~openbook.index.kb.indexing.resolve_index`); ``dtype`` how
        the vectors are stored (``float32`` or ``float16``). Duplicate passage ids are malformed records
        for ``on_error`` (``"stop"`` or ``"skip"``, or a RecordErrors shared with the reader).

        With ``resume`` the build state lives in ``<out_dir>.partial`` and survives a crash or an
        interrupt; building again with the same options and input continues after the last completed
        batch. ``source_info`` (JSON) describes the input: it is part of the options that must match and
        is kept in the manifest. The result appears at ``out_dir`` atomically. An existing knowledge base
        there is replaced (once the new one is complete) only with ``replace``, and never if the folder
        holds other files; it is locked against edits meanwhile. A progress bar goes to stderr unless
        ``progress`` is false.
        """
        out_dir = check_out_dir(out_dir)
        _check_encoder_info(encoder_info)
        _check_batch_size(batch_size)
        dtype = check_dtype(dtype).name
        index_params = _check_index_params(index_params)
        index_type = check_index_type(index_type, index_params)
        errors = on_error if isinstance(on_error, RecordErrors) else RecordErrors(on_error)
        source_info = _check_index_params(source_info)
        config = {
            "format_version": FORMAT_VERSION, "encoder": encoder_info, "batch_size": batch_size, "dtype": dtype,
            "index": {"type": index_type, "params": index_params}, "source": source_info,
        }
        build_args = (config, encode_passages, encoder_info, errors, progress, description)
        build_and_publish(out_dir, build_args, passages, resume, replace)
        return cls.load(out_dir)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        expected_encoder: dict[str, Any] | None = None,
        verify: str = "auto",
        version: int | None = None,
        mmap: bool = True,
    ) -> KnowledgeBase:
        """Open the knowledge base at ``path`` at ``version`` (default: its current version).

        If ``expected_encoder`` is given, its name, pooling, normalisation and dimension (those keys
        present on both sides) must match the encoder the knowledge base was built with. ``verify``
        chooses the integrity checks (module docs). ``mmap`` maps the index read-only where FAISS can.
        """
        path = Path(path)
        manifest = read_manifest(path)
        if expected_encoder is not None:
            check_encoder_matches(path, manifest["encoder"], expected_encoder)
        verify_files(path, manifest, verify)
        version = _check_version(path, manifest, version)
        embeddings = _load_embeddings(path, manifest)
        index = _load_index(path, manifest, mmap)
        store = PassageStore.open(path / STORE_FILE)
        try:
            check_counts(path, manifest, store)
        except KnowledgeBaseError:
            store.close()
            raise
        return cls(path, manifest, version, store, embeddings, index)

    def reload(self, version: int | None = None) -> None:
        """Re-read the knowledge base from disk in place (at ``version``, default the current one)."""
        fresh = type(self).load(self._path, verify="size", version=version)
        old = self._store
        self._set(fresh._path, fresh._manifest, fresh._version, fresh._store, fresh._embeddings, fresh._index)
        old.close()

    def at_version(self, version: int | None = None) -> KnowledgeBase:
        """This knowledge base at ``version`` (default: its current one) as a new object, opened from disk; this
        one is left as it is (as :meth:`ShardedKnowledgeBase.at_version`, which shares its shards instead)."""
        return type(self).load(self._path, verify="size", version=version)

    def verify(self) -> None:
        """Verify every file's sha256 checksum (slow for big indexes); raise KnowledgeBaseError if bad."""
        verify_files(self._path, self._manifest, "full")

    def close(self) -> None:
        """Close the passage store (the object is unusable afterwards)."""
        self._store.close()

    # -- editing (each creates a new version and shows it) ------------------------------------------

    def add(self, passages, encode_passages: EncodePassages, batch_size: int = 256, progress: bool = False,
            on_error: str | RecordErrors = "stop", description: str | None = None) -> int:
        """Add new passages (Passages or SourcePassages) as a new version; return its number."""
        version = add_passages(self._path, passages, encode_passages, batch_size, progress, on_error, description)
        self.reload()
        return version

    def update(self, updates, encode_passages: EncodePassages, description: str | None = None) -> int:
        """Change passages' text (and title): Passages or ``{"id", "text", "title"?}`` dicts; new version."""
        version = update_passages(self._path, updates, encode_passages, description=description)
        self.reload()
        return version

    def delete(self, passage_ids: Iterable[str], description: str | None = None) -> int:
        """Delete passages by id as a new version; return its number."""
        version = delete_passages(self._path, passage_ids, description)
        self.reload()
        return version

    def delete_document(self, document: str, description: str | None = None) -> int:
        """Delete every passage of ``document`` as a new version; return its number."""
        version = delete_document(self._path, document, description)
        self.reload()
        return version

    def sync(self, passages, encode_passages: EncodePassages, **options) -> dict[str, Any]:
        """Make the knowledge base's documents those of ``passages`` as one new version (see
        :func:`~openbook.index.kb.documents.sync_documents`, which takes the same ``options``)."""
        report = sync_documents(self._path, passages, encode_passages, **options)
        self.reload()
        return report

    def documents(self) -> list[dict[str, Any]]:
        """The documents visible at this version: ``{"document", "sha256", "passages": [ids]}`` in order of
        their first passage (passages of no document last, under ``"document": None``)."""
        return self._store.documents(self._version, self._visible_rows)

    def reindex(self, index_type: str = DEFAULT_INDEX, index_params: dict[str, Any] | None = None,
                progress: bool = False, description: str | None = None) -> int:
        """Index the same passages anew with another index kind (``"auto"``: by size), without encoding them
        again, as a new version; return its number."""
        version = reindex(self._path, index_type, index_params, progress, description)
        self.reload()
        return version

    def use_version(self, version: int) -> None:
        """Make ``version`` current (on disk, for every later load) and show it."""
        use_version(self._path, version)
        self.reload()

    # -- properties ---------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """Directory of the knowledge base."""
        return self._path

    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the parsed manifest.json."""
        return json.loads(json.dumps(self._manifest))

    @property
    def encoder_info(self) -> dict[str, Any]:
        """A copy of the encoder description the knowledge base was built with."""
        return dict(self._manifest["encoder"])

    @property
    def dim(self) -> int:
        """Dimension of the document vectors."""
        return int(self._manifest["dim"])

    @property
    def version(self) -> int:
        """The version this object shows."""
        return self._version

    @property
    def current_version(self) -> int:
        """The knowledge base's current version (what a plain :meth:`load` opens)."""
        return self._manifest["current_version"]

    @property
    def latest_version(self) -> int:
        return self._manifest["latest_version"]

    @property
    def versions(self) -> list[dict[str, Any]]:
        """The version history: number, created_at, description, num_rows, num_passages, added, deleted."""
        return [dict(v) for v in self._manifest["versions"]]

    @property
    def num_rows(self) -> int:
        """Rows in the store, embeddings and index (including deleted passages and later versions)."""
        return self._manifest["num_rows"]

    @property
    def embeddings(self) -> np.ndarray:
        """Read-only memory map ``(num_rows, dim)`` of the document vectors d(z), row i = store row i.

        float32 or float16 as stored (``manifest["dtype"]``); upcast before computing with them.
        """
        return self._embeddings

    @property
    def index(self) -> DenseIndex:
        """The dense index over :attr:`embeddings` (read again if :meth:`release_index` released it)."""
        if self._index is None:
            self._use_index(_load_index(self._path, self._manifest, mmap=True))
        return self._index

    def _use_index(self, index: DenseIndex) -> None:
        if index.compressed:  # IVF-PQ / HNSW-SQ8: exact re-ranking of 10·k candidates from d(z) on disk
            index.rerank_with(self._embeddings, factor=RERANK_FACTOR)
        self._index = index

    def release_index(self) -> None:
        """Drop the dense index (a mapped or loaded file: memory the size of the vectors for a flat index); the
        next search reads it again. Training with a frozen retriever does this once its passages are pinned."""
        self._index = None

    @property
    def store(self) -> PassageStore:
        """The passage store."""
        return self._store

    @property
    def excluded_rows(self) -> np.ndarray:
        """Sorted int64 rows not visible at this version (deleted as of it, or added after it)."""
        return self._excluded.copy()

    @property
    def rows_key(self) -> dict[str, Any] | None:
        """What identifies the store's rows without reading them (caches kept beside them, e.g. BM25's, compare
        it): the sha256 the manifest records for the passage store and the row count; None while an interrupted
        edit is pending (the store may hold rows the manifest does not record)."""
        if "pending_edit" in self._manifest:
            return None
        return {"sha256": self._manifest["files"][STORE_FILE]["sha256"], "num_rows": self._manifest["num_rows"]}

    def __len__(self) -> int:
        """Number of passages visible at this version."""
        return self._count

    def __repr__(self) -> str:
        return (f"KnowledgeBase({str(self._path)!r}, passages={len(self)}, dim={self.dim}, "
                f"version={self._version}/{self.latest_version})")

    # -- access -------------------------------------------------------------------------------------

    def __getitem__(self, i: int) -> Passage:
        """Passage at row ``i`` (negative indexes count from the last row, as for a list)."""
        row = operator.index(i)
        if row < 0:
            row += self.num_rows
        if not 0 <= row < self.num_rows:
            raise IndexError(f"row {i} is out of range for knowledge base {self._path} with {self.num_rows} rows")
        return self._store.get([row])[0]

    def __iter__(self) -> Iterator[Passage]:
        """The passages visible at this version, in row order (streamed from the store)."""
        for _, passage in self.live_rows():
            yield passage

    def live_rows(self, start: int = 0) -> Iterator[tuple[int, Passage]]:
        """``(row, passage)`` of the passages visible at this version from row ``start`` on, in row order
        (streamed)."""
        version = self._version
        for row, passage, deleted in self._store.iter_rows(start, self._visible_rows):
            if deleted is None or deleted > version:
                yield row, passage

    def lookup(self, passage_id: str) -> tuple[int, Passage] | None:
        """``(row, passage)`` of the passage with id ``passage_id`` at this version, or None."""
        row = self._store.find(str(passage_id), self._version)
        return None if row is None or row >= self.num_rows else (row, self._store.get([row])[0])

    def passages(self, indices) -> list[Passage] | list[list[Passage]]:
        """Passages for the row ``indices`` returned by :meth:`search`.

        A 1-D sequence gives a list of passages; a 2-D ``(m, k)`` array gives one list per query.
        Indexes must lie in ``0 .. num_rows - 1`` (FAISS uses ``-1`` for "no result").
        """
        rows = np.asarray(indices)
        if rows.ndim == 2:
            flat = self.passages(rows.reshape(-1))
            width = rows.shape[1]
            return [flat[i:i + width] for i in range(0, len(flat), width)] if width else [[] for _ in rows]
        rows = rows.reshape(-1)
        if rows.size and not np.issubdtype(rows.dtype, np.integer):
            raise InputError(f"passage indices must be integers, got {rows.dtype}")
        bad = rows[(rows < 0) | (rows >= self.num_rows)] if rows.size else rows
        if bad.size:
            raise InputError(
                f"passage index {int(bad[0])} is out of range for knowledge base {self._path} "
                f"with {len(self)} passages ({self.num_rows} rows)"
            )
        return self._store.get(rows.tolist())

    def matching_rows(self, where: Filter) -> np.ndarray:
        """The sorted rows visible at this version whose metadata matches ``where``."""
        rows = self._matches.get(where)
        if rows is None:
            rows = self._store.filter_rows(where, self._version, self._visible_rows)
            if len(self._matches) >= 4:  # a few filters' rows (a retrieval reads them twice: count, search)
                self._matches.clear()
            self._matches[where] = rows
        return rows

    def count_matching(self, where: Filter) -> int:
        """How many passages visible at this version match ``where``."""
        return len(self.matching_rows(where))

    def search(self, query_vectors, k: int, where: Filter | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` maximum-inner-product search at this version: ``(scores float32 (m, k), rows int64 (m, k))``.

        Rows deleted as of this version or added after it are never returned. ``k`` greater than the
        number of passages is clamped to it with a warning. With ``where``, the exact top k among the
        passages whose metadata matches it, from their stored vectors whatever the index
        (:mod:`openbook.index.filters`).
        """
        k = positive_int(k, "k")
        if where is not None:
            rows = self.matching_rows(where)
            if not len(rows):
                raise no_match(where, self._path)
            if k > len(rows):
                warnings.warn(f"asked for k={k} passages but only {len(rows)} match the filter; retrieving "
                              f"{len(rows)}", stacklevel=2)
            return exact_search(self._embeddings, rows, query_vectors, min(k, len(rows)), self._block_norms)
        if len(self) == 0:
            raise KnowledgeBaseError(f"knowledge base {self._path} has no passages at version {self._version}")
        if k > len(self):
            warnings.warn(
                f"asked for k={k} passages but knowledge base {self._path} has only {len(self)}; "
                f"retrieving {len(self)}",
                stacklevel=2,
            )
            k = len(self)
        return _search_excluding(self.index, query_vectors, k, self._excluded)
