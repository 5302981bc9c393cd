"""A knowledge base: passages z, their document vectors d(z) and a dense index, in one directory.

Layout of a knowledge-base directory (``FORMAT_VERSION`` 2)::

    passages.sqlite   the passage store: row (= vector id), id, title, text, added/deleted version
    embeddings.npy    (num_rows, dim) float32 or float16 document vectors, row i = store row i
    index.faiss       the dense index over all rows (after edits: index.v<N>.faiss, named in the manifest)
    manifest.json     what is there, checksums, and the version history (written last, atomically)

Nothing is held in memory in full: the store answers ``get(rows)`` from disk, the embeddings are a
read-only memory map, and the index is memory-mapped where FAISS allows (``load(mmap=True)``).

**Manifest.** ``format_version``; ``encoder`` (the dict the builder passed, e.g. name, pooling, normalize,
dim; compared with the query encoder on load); ``dim`` and ``dtype`` of the vectors; ``index`` (``type``,
``params``, ``file``) and ``index_type``; ``num_rows`` (rows in the store, embeddings and index);
``num_passages`` (passages visible at the current version); ``files`` (size and sha256 of each data
file; for ``embeddings.npy`` one sha256 per appended segment of rows, so an edit hashes only what it
wrote); ``current_version``, ``latest_version`` and ``versions`` (number, timestamp, description, row
and passage counts of each); ``created_at``/``updated_at``; ``build`` (options and skipped records).

**Versions and edits.** The build is version 1. Every edit (:meth:`KnowledgeBase.add`, ``update``,
``delete``) creates version latest + 1 without re-encoding anything else: new passages are appended to
the store, the embeddings and the index; deleted (and updated) passages keep their rows, marked
``deleted_version`` in the store. A row is visible at version v if it was added at or before v and not
deleted as of v; searching at version v passes the invisible rows to the index as ``exclude``. So
:meth:`KnowledgeBase.use_version` (``openbook kb use``) can go back to any earlier version and forward
again, and ``KnowledgeBase.load(path, version=v)`` opens one without changing the current version.
Edits apply on top of the latest version (and make it current).

**Crash safety.** An edit first records ``pending_edit`` in the manifest, then changes the store (SQLite
transactions), appends embeddings, writes the new index to a new file, and finally writes the manifest
(atomic rename): until then the previous manifest, index file and every row it knows are untouched,
and rows and deletion marks from the unfinished edit are invisible because they carry a version the
manifest does not have. The next edit (or a failed one, at once) undoes them first.

**Building** streams: passages go to the store and vectors to ``embeddings.npy`` in batches, so memory
does not grow with the corpus (except the index itself, as FAISS holds it). With ``resume=True`` (the
``openbook kb build`` command) the build state is kept in ``<DIR>.partial/``, with a progress file
written atomically after each batch; running the same build again continues after the last completed
batch and produces the same bytes as an uninterrupted build. Only the final rename publishes the
knowledge base, so an interrupted build never leaves a half-written one at ``DIR``.

Integrity checks on load (``verify``): ``"auto"`` (default) checks that every file is present with its
recorded size (which catches truncation) and verifies the sha256 of files (and embedding segments) up
to ``CHECKSUM_AUTO_MAX_BYTES``; ``"full"`` verifies every checksum, ``"size"`` none.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import itertools
import json
import operator
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from openbook.corpus import Passage
from openbook.corpus.readers import RecordErrors, SourcePassage
from openbook.errors import InputError, KnowledgeBaseError
from openbook.atomic import atomic_output, fsync_path, make_temp_dir_next_to, replace_dir
from openbook.index.dense import DenseIndex, as_float32_matrix, check_k, default_nlist, index_class
from openbook.index.store import (
    NPY_HEADER_BYTES,
    EmbeddingsWriter,
    PassageStore,
    check_dtype,
    embeddings_bytes,
    map_embeddings,
    read_npy_header,
)

FORMAT_VERSION = 2
STORE_FILE = "passages.sqlite"
EMBEDDINGS_FILE = "embeddings.npy"
INDEX_FILE = "index.faiss"
MANIFEST_FILE = "manifest.json"
LOCK_FILE = ".lock"
PARTIAL_SUFFIX = ".partial"
CHECKSUM_AUTO_MAX_BYTES = 256 * 1024 * 1024
VERIFY_MODES = ("auto", "full", "size")
DEFAULT_INDEX = "flat"
DEFAULT_DTYPE = "float32"
# Encoder properties that must agree between the knowledge base and the query encoder.
ENCODER_IDENTITY_KEYS = ("name", "pooling", "normalize", "dim")
BUILD_HINT = "build one with `openbook kb build SOURCE --out DIR` or openbook.index.KnowledgeBase.build()"
REBUILD_HINT = "rebuild it with `openbook kb build SOURCE --out DIR`"
ADD_CHUNK_ROWS = 65_536  # rows read from embeddings.npy at a time while filling an index
RERANK_FACTOR = 10  # compressed indexes: candidates fetched per result, re-scored exactly
TRAIN_SAMPLE_ROWS = 100_000  # training sample for indexes that need one (unless the kind says otherwise)
PHI_HEADROOM = 1.1  # HNSW kinds: bound on |x|^2 = this x the largest seen, leaving room for later adds
_HASH_BLOCK = 1 << 20

# build work directory (inside <DIR>.partial/ or a temporary directory)
_WORK_STORE = "work.sqlite"
_STATE_FILE = "build-state.json"
_PROGRESS_FILE = "build-progress.json"
_STAGE_DIR = "kb"

EncodePassages = Callable[[list[Passage]], np.ndarray]


# ---------------------------------------------------------------------------------------------------
# small helpers


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def sha256_file(path: Path, start: int = 0, stop: int | None = None) -> str:
    """Hex sha256 of a file (or of its bytes ``start:stop``), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        handle.seek(start)
        remaining = None if stop is None else stop - start
        while remaining is None or remaining > 0:
            block = handle.read(_HASH_BLOCK if remaining is None else min(_HASH_BLOCK, remaining))
            if not block:
                break
            digest.update(block)
            if remaining is not None:
                remaining -= len(block)
    return digest.hexdigest()


def _batches(items: Iterable, size: int) -> Iterator[list]:
    """Yield consecutive lists of at most ``size`` items."""
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temporary file, fsync, rename)."""
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def describe_encoder(encoder: dict[str, Any]) -> str:
    """One-line description of an encoder dict, e.g. ``'A' (mean pooling, normalized, dim 384)``."""
    details = []
    if "pooling" in encoder:
        details.append(f"{encoder['pooling']} pooling")
    if "normalize" in encoder:
        details.append("normalized" if encoder["normalize"] else "not normalized")
    if "dim" in encoder:
        details.append(f"dim {encoder['dim']}")
    name = repr(encoder.get("name", "<unnamed>"))
    return f"{name} ({', '.join(details)})" if details else name


def check_encoder_matches(kb_path: Path, built_with: dict[str, Any], expected: dict[str, Any]) -> None:
    """Raise KnowledgeBaseError naming both encoders if any identity key present in both differs."""
    differs = [
        key for key in ENCODER_IDENTITY_KEYS
        if key in built_with and key in expected and built_with[key] != expected[key]
    ]
    if differs:
        raise KnowledgeBaseError(
            f"knowledge base {kb_path} was built with encoder {describe_encoder(built_with)} but the "
            f"query encoder is {describe_encoder(expected)} (they differ in {', '.join(differs)}); "
            f"rebuild the knowledge base with the query encoder or load the matching encoder"
        )


def partial_dir(out_dir: str | os.PathLike) -> Path:
    """Where a resumable build of ``out_dir`` keeps its state: ``<out_dir>.partial``."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + PARTIAL_SUFFIX)


@contextlib.contextmanager
def _locked(lock_path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``lock_path`` (POSIX); KnowledgeBaseError if another holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no locking
        yield
        return
    handle = open(lock_path, "a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise KnowledgeBaseError(f"{what} is busy: another openbook process is changing it") from None
        yield
    finally:
        handle.close()


# ---------------------------------------------------------------------------------------------------
# indexes


def parse_index_params(pairs: Iterable[str]) -> dict[str, Any]:
    """``["M=32", "opq=true"]`` -> ``{"M": 32, "opq": True}`` (ints, floats, true/false/none, else text)."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"index parameter {pair!r} must look like KEY=VALUE")
        params[key.strip()] = _parse_value(text.strip())
    return params


def _parse_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _check_index_params(params: dict[str, Any] | None) -> dict[str, Any]:
    params = dict(params or {})
    try:
        json.dumps(params)
    except (TypeError, ValueError) as exc:
        raise InputError(f"index parameters must be JSON-serialisable: {exc}") from None
    return params


def _create_index(
    kind: type[DenseIndex], params: dict[str, Any], embeddings: np.ndarray, progress: bool
) -> DenseIndex:
    """A new index of ``kind`` over all rows of ``embeddings`` (read in chunks, trained on a sample)."""
    params = dict(params)
    defaults = getattr(kind, "param_defaults", {})
    if "phi" in defaults and params.get("phi") is None:
        # HNSW kinds need a bound on |x|^2 before the first add; leave room for later edits.
        params["phi"] = float(_max_squared_norm(embeddings)) * PHI_HEADROOM or 1.0
    if "nlist" in defaults and params.get("nlist") is None:
        # IVF kinds: size the lists for all rows, not for the training sample below
        params["nlist"] = default_nlist(len(embeddings))
    index = kind.create(embeddings.shape[1], **params)
    if getattr(index, "needs_training", False):
        limit = int(getattr(kind, "max_train_vectors", TRAIN_SAMPLE_ROWS))
        n = len(embeddings)
        rows = np.unique(np.linspace(0, n - 1, num=min(n, limit)).astype(np.int64))
        index.train(np.asarray(embeddings[rows], dtype=np.float32))
    with tqdm(total=len(embeddings), unit="vector", desc="indexing", disable=not progress, file=sys.stderr) as bar:
        for start in range(0, len(embeddings), ADD_CHUNK_ROWS):
            chunk = np.asarray(embeddings[start:start + ADD_CHUNK_ROWS], dtype=np.float32)
            index.add(chunk)
            bar.update(len(chunk))
    return index


def _max_squared_norm(embeddings: np.ndarray) -> float:
    best = 0.0
    for start in range(0, len(embeddings), ADD_CHUNK_ROWS):
        chunk = np.asarray(embeddings[start:start + ADD_CHUNK_ROWS], dtype=np.float64)
        if len(chunk):
            best = max(best, float(np.einsum("ij,ij->i", chunk, chunk).max()))
    return best


def _index_record(index: DenseIndex, params: dict[str, Any], file_name: str) -> dict[str, Any]:
    recorded = getattr(index, "params", None)
    return {"type": index.type_name, "params": _check_index_params(recorded if recorded is not None else params),
            "file": file_name}


def _load_index_file(path: Path, mmap: bool) -> DenseIndex:
    if mmap and "mmap" in inspect.signature(DenseIndex.load).parameters:
        return DenseIndex.load(path, mmap=True)
    return DenseIndex.load(path)


def _search_excluding(index: DenseIndex, queries, k: int, exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-k search that never returns ``exclude`` and (where the index finds enough) no -1 entries."""
    want = k
    while True:
        scores, ids = index.search(queries, want, exclude=exclude if exclude.size else None)
        found = (ids[:, :k] >= 0).all() if ids.shape[1] >= k else False
        if found or want >= index.ntotal:
            break
        want = min(index.ntotal, want * 4)  # an approximate search may return fewer: ask for more
    valid = (ids >= 0).sum(axis=1)
    if ids.shape[1] < k or (valid < k).any():
        usable = int(valid.min())
        if usable == 0:
            raise KnowledgeBaseError(f"the {index.type_name} index found no passages for a query")
        warnings.warn(f"the {index.type_name} index found only {usable} of the {k} passages asked for", stacklevel=3)
        k = usable
    order = np.argsort(ids < 0, axis=1, kind="stable")  # valid results first, in score order
    ids = np.take_along_axis(ids, order, axis=1)[:, :k]
    scores = np.take_along_axis(scores, order, axis=1)[:, :k]
    return scores, ids


# ---------------------------------------------------------------------------------------------------
# manifest and files


def _check_replaceable(out_dir: Path) -> None:
    """Refuse to build over anything that is not a directory that is empty or holds a knowledge base."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise KnowledgeBaseError(f"cannot build knowledge base {out_dir}: it exists and is not a directory")
    if any(out_dir.iterdir()) and not (out_dir / MANIFEST_FILE).is_file():
        raise KnowledgeBaseError(
            f"refusing to replace {out_dir}: it exists and is not a knowledge base (no {MANIFEST_FILE}); "
            f"choose another output directory or remove it"
        )


def _check_encoder_info(encoder_info: dict[str, Any]) -> None:
    """Raise InputError unless ``encoder_info`` is a JSON-serialisable dict."""
    if not isinstance(encoder_info, dict):
        raise InputError(f"encoder_info must be a dict, got {type(encoder_info).__name__}")
    try:
        json.dumps(encoder_info)
    except (TypeError, ValueError) as exc:
        raise InputError(f"encoder_info must be JSON-serialisable: {exc}") from None


def _check_batch_size(batch_size) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def _file_entry(path: Path) -> dict[str, Any]:
    fsync_path(path)
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}


def _segment(path: Path, dtype: np.dtype, dim: int, start: int, stop: int) -> dict[str, Any]:
    """Checksum of rows ``start:stop`` of an embeddings file."""
    begin, end = embeddings_bytes(dtype, start, dim), embeddings_bytes(dtype, stop, dim)
    return {"start": start, "stop": stop, "sha256": sha256_file(path, begin, end)}


def _check_directory(path: Path) -> None:
    """Raise KnowledgeBaseError if ``path`` is not an existing knowledge-base directory."""
    if not path.exists():
        raise KnowledgeBaseError(f"knowledge base {path} does not exist; {BUILD_HINT}")
    if not path.is_dir():
        raise KnowledgeBaseError(f"knowledge base {path} is not a directory; {BUILD_HINT}")
    if not (path / MANIFEST_FILE).is_file():
        raise KnowledgeBaseError(
            f"{path} is not a knowledge base or its build did not finish ({MANIFEST_FILE} is missing); "
            f"{BUILD_HINT}"
        )


def stored_format_version(path: str | os.PathLike) -> int | None:
    """The ``format_version`` in the manifest at ``path``, or None if there is no readable manifest."""
    manifest = _read_json(Path(path) / MANIFEST_FILE)
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    return version if isinstance(version, int) else None


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check manifest.json of the knowledge base at ``path`` (KnowledgeBaseError if unusable)."""
    path = Path(path)
    _check_directory(path)
    manifest_path = path / MANIFEST_FILE
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise KnowledgeBaseError(f"{manifest_path} is corrupt ({exc}); rebuild the knowledge base") from None
    if not isinstance(manifest, dict):
        raise KnowledgeBaseError(f"{manifest_path} is corrupt (not a JSON object); rebuild the knowledge base")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise KnowledgeBaseError(
            f"{manifest_path} has format_version {version!r}; this openbook reads version {FORMAT_VERSION}: "
            f"upgrade openbook or rebuild the knowledge base"
        )
    if version < FORMAT_VERSION:
        raise KnowledgeBaseError(
            f"knowledge base {path} has format_version {version}, written by an older openbook; this "
            f"openbook reads version {FORMAT_VERSION} (SQLite passage store, versions): {REBUILD_HINT}"
        )
    _check_manifest_fields(manifest_path, manifest)
    return manifest


def _check_manifest_fields(manifest_path: Path, manifest: dict[str, Any]) -> None:
    """Raise KnowledgeBaseError naming the first missing or mistyped manifest field."""
    expected_types = {
        "encoder": dict, "dim": int, "dtype": str, "index": dict, "num_rows": int, "num_passages": int,
        "files": dict, "versions": list, "current_version": int, "latest_version": int,
    }
    for key, kind in expected_types.items():
        if not isinstance(manifest.get(key), kind) or isinstance(manifest.get(key), bool):
            raise KnowledgeBaseError(
                f"{manifest_path} is corrupt: field {key!r} is missing or not a {kind.__name__}; "
                f"rebuild the knowledge base"
            )
    index = manifest["index"]
    if not (isinstance(index.get("type"), str) and isinstance(index.get("file"), str)
            and isinstance(index.get("params"), dict)):
        raise KnowledgeBaseError(f"{manifest_path} is corrupt: bad 'index' entry; rebuild the knowledge base")
    for name in (STORE_FILE, index["file"]):
        entry = manifest["files"].get(name)
        if not (isinstance(entry, dict) and isinstance(entry.get("bytes"), int)
                and isinstance(entry.get("sha256"), str)):
            raise KnowledgeBaseError(
                f"{manifest_path} is corrupt: no size and checksum for {name}; rebuild the knowledge base"
            )
    entry = manifest["files"].get(EMBEDDINGS_FILE)
    if not (isinstance(entry, dict) and isinstance(entry.get("bytes"), int) and isinstance(entry.get("segments"), list)):
        raise KnowledgeBaseError(
            f"{manifest_path} is corrupt: no size and checksums for {EMBEDDINGS_FILE}; rebuild the knowledge base"
        )
    numbers = [v.get("version") for v in manifest["versions"] if isinstance(v, dict)]
    if numbers != list(range(1, len(manifest["versions"]) + 1)) or manifest["latest_version"] != len(numbers):
        raise KnowledgeBaseError(f"{manifest_path} is corrupt: bad version history; rebuild the knowledge base")
    if not 1 <= manifest["current_version"] <= manifest["latest_version"]:
        raise KnowledgeBaseError(f"{manifest_path} is corrupt: bad current_version; rebuild the knowledge base")


def _data_files(manifest: dict[str, Any]) -> list[str]:
    return [STORE_FILE, EMBEDDINGS_FILE, manifest["index"]["file"]]


def _verify_files(path: Path, manifest: dict[str, Any], verify: str) -> None:
    """Check presence, size and (depending on ``verify``) sha256 of every data file."""
    if verify not in VERIFY_MODES:
        raise InputError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}")
    pending = "pending_edit" in manifest  # an edit was interrupted: the store and embeddings may have grown
    for name in _data_files(manifest):
        entry = manifest["files"][name]
        file_path = path / name
        if not file_path.is_file():
            raise KnowledgeBaseError(f"knowledge base {path} is incomplete: {name} is missing; {REBUILD_HINT}")
        if pending and name == STORE_FILE:
            continue
        size = file_path.stat().st_size
        if size < entry["bytes"] or (size > entry["bytes"] and not (pending and name == EMBEDDINGS_FILE)):
            raise KnowledgeBaseError(
                f"{file_path} has {size} bytes but {MANIFEST_FILE} records {entry['bytes']}: the file is "
                f"truncated or was modified; {REBUILD_HINT}"
            )
        if name == EMBEDDINGS_FILE:
            _verify_segments(file_path, manifest, verify)
            continue
        wants_checksum = verify == "full" or (verify == "auto" and size <= CHECKSUM_AUTO_MAX_BYTES)
        if wants_checksum and sha256_file(file_path) != entry["sha256"]:
            raise KnowledgeBaseError(
                f"{file_path} does not match its sha256 checksum in {MANIFEST_FILE}: the file is corrupt "
                f"or was modified; {REBUILD_HINT}"
            )


def _verify_segments(file_path: Path, manifest: dict[str, Any], verify: str) -> None:
    dtype, dim = np.dtype(manifest["dtype"]), manifest["dim"]
    for segment in manifest["files"][EMBEDDINGS_FILE]["segments"]:
        start, stop = segment["start"], segment["stop"]
        size = (stop - start) * dim * dtype.itemsize
        if verify == "full" or (verify == "auto" and size <= CHECKSUM_AUTO_MAX_BYTES):
            if _segment(file_path, dtype, dim, start, stop)["sha256"] != segment["sha256"]:
                raise KnowledgeBaseError(
                    f"{file_path} rows {start}..{stop - 1} do not match their sha256 checksum in "
                    f"{MANIFEST_FILE}: the file is corrupt or was modified; {REBUILD_HINT}"
                )


def _load_embeddings(path: Path, manifest: dict[str, Any]) -> np.ndarray:
    """Memory-map embeddings.npy read-only, checking its header against the manifest."""
    file_path = path / EMBEDDINGS_FILE
    dtype, rows, dim = read_npy_header(file_path)
    count, expected_dim = manifest["num_rows"], manifest["dim"]
    if dtype.name != manifest["dtype"] or dim != expected_dim or rows < count:
        raise KnowledgeBaseError(
            f"{file_path} holds {dtype.name} ({rows}, {dim}) but {MANIFEST_FILE} records {manifest['dtype']} "
            f"({count}, {expected_dim}); {REBUILD_HINT}"
        )
    return map_embeddings(file_path, dtype, count, dim)


def _load_index(path: Path, manifest: dict[str, Any], mmap: bool) -> DenseIndex:
    """Read the index and check it matches the manifest's type, size and dimension."""
    file_path = path / manifest["index"]["file"]
    try:
        expected = index_class(manifest["index"]["type"])
        index = _load_index_file(file_path, mmap)
    except InputError as exc:
        raise KnowledgeBaseError(f"knowledge base {path}: {exc}; {REBUILD_HINT}") from None
    if not isinstance(index, expected) or index.ntotal != manifest["num_rows"] or index.dim != manifest["dim"]:
        raise KnowledgeBaseError(
            f"{file_path} holds a {index.type_name} index of {index.ntotal} vectors of dimension {index.dim} but "
            f"{MANIFEST_FILE} records {manifest['index']['type']} with {manifest['num_rows']} of dimension "
            f"{manifest['dim']}; {REBUILD_HINT}"
        )
    return index


def _version_entry(manifest: dict[str, Any], version: int) -> dict[str, Any]:
    return manifest["versions"][version - 1]


def _check_version(path: Path, manifest: dict[str, Any], version) -> int:
    latest = manifest["latest_version"]
    if version is None:
        return manifest["current_version"]
    if isinstance(version, bool) or not isinstance(version, (int, np.integer)) or not 1 <= version <= latest:
        raise InputError(f"knowledge base {path} has versions 1..{latest}, not {version!r}")
    return int(version)


# ---------------------------------------------------------------------------------------------------
# passage streams


def _source_items(passages: Iterable) -> Iterator[SourcePassage]:
    """Normalise an iterable of Passage or SourcePassage into SourcePassages (checking the types)."""
    for position, item in enumerate(passages, start=1):
        if isinstance(item, SourcePassage):
            yield item
        elif isinstance(item, Passage):
            yield SourcePassage(f"passage {position}", item)
        else:
            raise InputError(f"item {position} to index is a {type(item).__name__}, not an openbook Passage")


def _encode_batch(encode_passages: EncodePassages, batch: list[Passage], start: int, dim: int | None) -> np.ndarray:
    """Encode one batch and check the result is a finite float32 (len(batch), dim) array."""
    vectors = encode_passages(batch)
    what = f"encode_passages output for passages {start}..{start + len(batch) - 1}"
    vectors = as_float32_matrix(vectors, what, dim)
    if vectors.shape[0] != len(batch):
        raise InputError(f"{what} has {vectors.shape[0]} rows for a batch of {len(batch)} passages")
    return vectors


def _check_declared_dim(encoder_info: dict[str, Any], dim: int) -> None:
    declared = encoder_info.get("dim")
    if declared is not None and declared != dim:
        raise InputError(
            f"encoder_info says dim {declared} but encode_passages returned vectors of dimension {dim}"
        )


class _Appender:
    """Append batches of new passages to a store + embeddings file: dedupe ids, encode, write, commit."""

    def __init__(self, store: PassageStore, encode: EncodePassages, errors: RecordErrors, version: int,
                 batch_size: int, rows: int, writer: EmbeddingsWriter | None, make_writer: Callable[[int], EmbeddingsWriter],
                 after_batch: Callable[[int], None] = lambda rows: None, bar=None):
        self.store, self.encode, self.errors, self.version = store, encode, errors, version
        self.batch_size, self.rows, self.writer, self.make_writer = batch_size, rows, writer, make_writer
        self.after_batch, self.bar = after_batch, bar
        self.pending: list[Passage] = []
        self.pending_ids: set[str] = set()

    def feed(self, items: Iterable[SourcePassage]) -> None:
        for item in items:
            pid = item.passage.id
            if pid in self.pending_ids or self.store.live_rows([pid]):
                self.errors(item.where, f"duplicate passage id {pid!r}: the knowledge base already has a passage "
                                        f"with this id (use `openbook kb update` to change it)")
                continue
            self.pending.append(item.passage)
            self.pending_ids.add(pid)
            if len(self.pending) == self.batch_size:
                self.flush()
        self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        batch = self.pending
        dim = self.writer.dim if self.writer is not None else None
        vectors = _encode_batch(self.encode, batch, self.rows, dim)
        if self.writer is None:
            self.writer = self.make_writer(vectors.shape[1])
        self.writer.append(vectors)
        with self.store.transaction():
            self.store.insert(self.rows, batch, self.version)
        self.rows += len(batch)
        self.pending, self.pending_ids = [], set()
        self.after_batch(self.rows)
        if self.bar is not None:
            self.bar.update(len(batch))


# ---------------------------------------------------------------------------------------------------
# building


class _Build:
    """One build into a work directory; with ``resume`` the directory survives and a rerun continues."""

    def __init__(self, work: Path, config: dict[str, Any], encode: EncodePassages, encoder_info: dict[str, Any],
                 errors: RecordErrors, progress: bool, description: str | None):
        self.work, self.config, self.encode, self.encoder_info = work, config, encode, encoder_info
        self.errors, self.progress, self.description = errors, progress, description
        self.stage = work / _STAGE_DIR
        self.rows = 0

    def note(self, message: str) -> None:
        if self.progress:
            print(f"openbook: {message}", file=sys.stderr)

    # -- state ---------------------------------------------------------------------------------------

    def prepare(self) -> dict[str, Any]:
        """Check or (re)start the saved state; return the progress record."""
        state = _read_json(self.work / _STATE_FILE)
        progress = _read_json(self.work / _PROGRESS_FILE)
        if state is not None and state != self.config:
            self.note(f"the build options differ from the interrupted build in {self.work}; starting over")
            self.reset()
            state = progress = None
        if state is None:
            self.reset()
            _write_json(self.work / _STATE_FILE, self.config)
            progress = None
        return progress if isinstance(progress, dict) else {"phase": "encoding", "rows": 0}

    def reset(self) -> None:
        for entry in self.work.iterdir():
            if entry.name == LOCK_FILE:
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self.rows = 0

    def save_progress(self, **fields) -> None:
        _write_json(self.work / _PROGRESS_FILE, {"phase": "encoding", **fields})

    # -- phases ---------------------------------------------------------------------------------------

    def run(self, passages) -> None:
        """Encode (or resume encoding) all passages, then index them and write the manifest into the stage."""
        progress = self.prepare()
        moved = self.stage / EMBEDDINGS_FILE
        if progress.get("phase") != "encoded" and moved.is_file() and not (self.work / EMBEDDINGS_FILE).exists():
            os.replace(moved, self.work / EMBEDDINGS_FILE)  # killed between moving it and saving progress
        if progress.get("phase") == "encoded" and (self.stage / EMBEDDINGS_FILE).is_file():
            self.rows = progress["rows"]
            self.errors.skipped = progress.get("skipped", 0)
            self.errors.examples = progress.get("skipped_examples", [])
        else:
            self.encode_all(passages, progress)
        if not (self.stage / MANIFEST_FILE).is_file():
            self.finish()

    def encode_all(self, passages, progress: dict[str, Any]) -> None:
        store = PassageStore.create(self.work / _WORK_STORE, bulk=True)
        try:
            for attempt in range(2):
                items = _source_items(passages() if callable(passages) else passages)
                resumed = self.reconcile(store, progress)
                if resumed:
                    items = self.fast_forward(store, items)
                    if items is None:  # the input changed since the interrupted build
                        if not callable(passages) or attempt:
                            raise KnowledgeBaseError(
                                f"the passages differ from those of the interrupted build in {self.work}; "
                                f"delete that directory to start over"
                            )
                        self.note(f"the input changed since the interrupted build in {self.work}; starting over")
                        store.close()
                        self.reset()
                        _write_json(self.work / _STATE_FILE, self.config)
                        store = PassageStore.create(self.work / _WORK_STORE, bulk=True)
                        progress = {"phase": "encoding", "rows": 0}
                        self.errors.reset()
                        continue
                    self.note(f"resuming the build in {self.work}: {self.rows} passages already encoded")
                self.encode_rest(store, items)
                break
        finally:
            store.close()

    def reconcile(self, store: PassageStore, progress: dict[str, Any]) -> bool:
        """Cut the store and embeddings back to the last batch recorded in the progress file.

        A killed process may have written rows after it; the count kept is the smallest of the progress
        file's, the store's and the embeddings file's, rounded down to whole batches.
        """
        rows = int(progress.get("rows", 0)) if progress.get("phase") == "encoding" else 0
        embeddings = self.work / EMBEDDINGS_FILE
        if embeddings.is_file():
            dtype, _, dim = read_npy_header(embeddings)
            rows = min(rows, (embeddings.stat().st_size - NPY_HEADER_BYTES) // (dim * dtype.itemsize))
        else:
            rows = 0
        rows = min(rows, store.num_rows())
        rows -= rows % self.config["batch_size"]
        store.discard_after(rows, 1)
        if embeddings.is_file():
            if rows:
                EmbeddingsWriter.reopen(embeddings, rows)
            else:
                embeddings.unlink()
        self.rows = rows
        return rows > 0

    def fast_forward(self, store: PassageStore, items: Iterator[SourcePassage]) -> Iterator[SourcePassage] | None:
        """Skip the passages already stored, checking they are the same; None if the input changed."""
        stored = store.iter_rows(0, self.rows)
        matched = 0
        items = iter(items)
        for item in items:
            if matched == self.rows:
                return itertools.chain([item], items)
            _, expected, _ = next(stored)
            if item.passage == expected:
                matched += 1
                continue
            row = store.live_rows([item.passage.id]).get(item.passage.id)
            if row is not None and row < matched:  # a duplicate id, skipped by the first run too
                self.errors(item.where, f"duplicate passage id {item.passage.id!r}")
                stored = store.iter_rows(matched, self.rows)  # re-align: this item took no row
                continue
            return None
        return iter(()) if matched == self.rows else None

    def encode_rest(self, store: PassageStore, items: Iterator[SourcePassage]) -> None:
        dtype = self.config["dtype"]
        embeddings = self.work / EMBEDDINGS_FILE
        writer = EmbeddingsWriter.reopen(embeddings, self.rows) if embeddings.is_file() else None
        batch = self.config["batch_size"]

        def make_writer(dim: int) -> EmbeddingsWriter:
            _check_declared_dim(self.encoder_info, dim)
            return EmbeddingsWriter.create(embeddings, dtype, dim)

        def after_batch(rows: int) -> None:
            self.rows = rows
            self.save_progress(rows=rows)

        with tqdm(initial=self.rows, unit="passage", desc="encoding passages", disable=not self.progress,
                  file=sys.stderr) as bar:
            appender = _Appender(store, self.encode, self.errors, 1, batch, self.rows, writer, make_writer,
                                 after_batch, bar)
            appender.feed(items)
        if self.rows == 0:
            raise InputError("no passages to index: the passage input is empty"
                             + (f" ({self.errors.skipped} malformed records skipped)" if self.errors.skipped else ""))
        writer = appender.writer
        writer.publish()
        self.stage.mkdir(exist_ok=True)
        store.compact_into(self.stage / STORE_FILE)
        os.replace(embeddings, self.stage / EMBEDDINGS_FILE)
        fsync_path(self.stage)
        _write_json(self.work / _PROGRESS_FILE, {
            "phase": "encoded", "rows": self.rows, "skipped": self.errors.skipped,
            "skipped_examples": self.errors.examples,
        })

    def finish(self) -> None:
        """Index the encoded vectors and write the manifest (the stage is then a complete knowledge base)."""
        dtype, rows, dim = read_npy_header(self.stage / EMBEDDINGS_FILE)
        embeddings = map_embeddings(self.stage / EMBEDDINGS_FILE, dtype, rows, dim)
        kind = index_class(self.config["index"]["type"])
        index = _create_index(kind, self.config["index"]["params"], embeddings, self.progress)
        index.save(self.stage / INDEX_FILE)
        del embeddings
        store = PassageStore.open(self.stage / STORE_FILE)
        try:
            if store.num_rows() != rows:
                raise KnowledgeBaseError(f"build in {self.work} is inconsistent; delete it and build again")
        finally:
            store.close()
        created = _now()
        description = self.description or f"build: {rows} passages"
        if self.errors.skipped:
            description += f" ({self.errors.skipped} malformed records skipped)"
        manifest = {
            "format_version": FORMAT_VERSION,
            "encoder": self.encoder_info,
            "dim": dim,
            "dtype": dtype.name,
            "index_type": index.type_name,
            "index": _index_record(index, self.config["index"]["params"], INDEX_FILE),
            "num_rows": rows,
            "num_passages": rows,
            "current_version": 1,
            "latest_version": 1,
            "versions": [{
                "version": 1, "created_at": created, "description": description,
                "num_rows": rows, "num_passages": rows, "added": rows, "deleted": 0,
            }],
            "files": {
                STORE_FILE: _file_entry(self.stage / STORE_FILE),
                EMBEDDINGS_FILE: {
                    "bytes": embeddings_bytes(dtype, rows, dim),
                    "segments": [_segment(self.stage / EMBEDDINGS_FILE, dtype, dim, 0, rows)],
                },
                INDEX_FILE: _file_entry(self.stage / INDEX_FILE),
            },
            "created_at": created,
            "updated_at": created,
            "build": {
                **self.config.get("source", {}),
                "batch_size": self.config["batch_size"],
                "skipped": self.errors.skipped,
                "skipped_examples": self.errors.examples,
            },
        }
        _write_json(self.stage / MANIFEST_FILE, manifest)


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
        with tqdm(unit="passage", desc="encoding passages", disable=not progress, file=sys.stderr) as bar:
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


def _normalise_update(item, position: int) -> tuple[str, str, str | None, str]:
    """``(where, id, title or None, text)`` of one update (Passage, SourcePassage or dict)."""
    where = f"update {position}"
    if isinstance(item, SourcePassage):
        where, item = item.where, item.passage
    if isinstance(item, Passage):
        return where, item.id, item.title, item.text
    if isinstance(item, dict):
        where = str(item.get("where", where))
        pid, title, text = item.get("id"), item.get("title"), item.get("text")
        if not isinstance(pid, str) or not pid:
            raise InputError(f"{where}: an update needs the passage 'id' (a non-empty string)")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{where}: an update needs the new 'text' (a non-empty string)")
        if title is not None and not isinstance(title, str):
            raise InputError(f"{where}: 'title' must be a string")
        return where, pid, title, text
    raise InputError(f"{where}: expected a Passage or a dict with id, text and optionally title, "
                     f"got {type(item).__name__}")


def update_passages(path, updates, encode_passages: EncodePassages, progress: bool = False,
                    description: str | None = None) -> int:
    """Replace the text (and optionally the title) of existing passages, as a new version.

    ``updates``: Passages, or dicts ``{"id", "text", "title" (optional: keep the old title)}``. Each old
    row is marked deleted in the new version and a new row with the same passage id is added.
    """
    path = Path(path)
    items = [_normalise_update(item, n) for n, item in enumerate(updates, start=1)]
    if not items:
        raise InputError("no updates given")
    seen: dict[str, str] = {}
    for where, pid, _, _ in items:
        if pid in seen:
            raise InputError(f"{where}: passage id {pid!r} is updated twice (also at {seen[pid]})")
        seen[pid] = where
    with _edit(path, "update") as (manifest, store, version):
        rows = store.live_rows([pid for _, pid, _, _ in items])
        unknown = [pid for _, pid, _, _ in items if pid not in rows]
        if unknown:
            raise InputError(f"knowledge base {path} has no passage {_describe_ids(unknown)}; "
                             f"use `openbook kb add` for new passages")
        old = dict(zip([pid for _, pid, _, _ in items], store.get([rows[pid] for _, pid, _, _ in items])))
        new = [SourcePassage(where, Passage(pid, old[pid].title if title is None else title, text))
               for where, pid, title, text in items]
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


# ---------------------------------------------------------------------------------------------------


class KnowledgeBase:
    """Passages, their document vectors and a dense index in one directory, at one version (module docs)."""

    def __init__(self, path: Path, manifest: dict[str, Any], version: int, store: PassageStore,
                 embeddings: np.ndarray, index: DenseIndex):
        """Assemble a loaded knowledge base; use :meth:`build` or :meth:`load` instead."""
        self._set(path, manifest, version, store, embeddings, index)

    def _set(self, path, manifest, version, store, embeddings, index) -> None:
        self._path, self._manifest, self._version = path, manifest, version
        self._store, self._embeddings, self._index = store, embeddings, index
        if index.compressed:  # IVF-PQ / HNSW-SQ8: exact re-ranking of 10·k candidates from d(z) on disk
            index.rerank_with(embeddings, factor=RERANK_FACTOR)
        visible_rows = _version_entry(manifest, version)["num_rows"]
        deleted = store.deleted_rows(version)
        later = np.arange(visible_rows, manifest["num_rows"], dtype=np.int64)
        self._excluded = np.concatenate([deleted, later]) if later.size else deleted
        self._visible_rows = visible_rows
        self._count = visible_rows - len(deleted)

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
    ) -> "KnowledgeBase":
        """Encode ``passages`` in batches, index them and write a knowledge base to ``out_dir``.

        ``passages``: Passages or :class:`~openbook.corpus.SourcePassage` (which carry ``path:line`` for
        error messages), or a function returning a fresh iterable of them (then a resumed build whose
        input changed can start over by itself). ``encode_passages`` maps a list of passages to a float32
        ``(len(list), dim)`` array of document vectors d(z). ``encoder_info`` (JSON-serialisable) is
        stored in the manifest and checked against the query encoder on load. ``index_type`` and
        ``index_params`` choose the index (``flat``, ``hnsw``, ``ivfpq``, ``hnsw_sq8``); ``dtype`` how
        the vectors are stored (``float32`` or ``float16``). Duplicate passage ids are malformed records
        for ``on_error`` (``"stop"`` or ``"skip"``, or a RecordErrors shared with the reader).

        With ``resume`` the build state lives in ``<out_dir>.partial`` and survives a crash or an
        interrupt; building again with the same options and input continues after the last completed
        batch. ``source_info`` (JSON) describes the input: it is part of the options that must match and
        is kept in the manifest. The result appears at ``out_dir`` atomically, replacing an existing
        knowledge base only once complete. A progress bar goes to stderr unless ``progress`` is false.
        """
        out_dir = Path(out_dir)
        _check_encoder_info(encoder_info)
        _check_batch_size(batch_size)
        dtype = check_dtype(dtype).name
        kind = index_class(index_type)
        index_params = _check_index_params(index_params)
        errors = on_error if isinstance(on_error, RecordErrors) else RecordErrors(on_error)
        source_info = _check_index_params(source_info)
        _check_replaceable(out_dir)
        config = {
            "format_version": FORMAT_VERSION, "encoder": encoder_info, "batch_size": batch_size, "dtype": dtype,
            "index": {"type": kind.type_name, "params": index_params}, "source": source_info,
        }
        work = partial_dir(out_dir) if resume else make_temp_dir_next_to(out_dir)
        work.mkdir(parents=True, exist_ok=True)
        build = _Build(work, config, encode_passages, encoder_info, errors, progress, description)
        keep = resume  # a resumable build keeps its state unless it finishes (or had nothing worth keeping)
        try:
            with _locked(work / LOCK_FILE, f"build directory {work}"):
                try:
                    build.run(passages)
                except InputError as exc:
                    if resume and build.rows:
                        raise InputError(
                            f"{exc} ({build.rows} passages already encoded are kept in {work}: fix the input "
                            f"and run the same build again to continue)"
                        ) from None
                    keep = False
                    raise
                replace_dir(work / _STAGE_DIR, out_dir)
                keep = False
        finally:
            if not keep:
                shutil.rmtree(work, ignore_errors=True)
        return cls.load(out_dir)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        expected_encoder: dict[str, Any] | None = None,
        verify: str = "auto",
        version: int | None = None,
        mmap: bool = True,
    ) -> "KnowledgeBase":
        """Open the knowledge base at ``path`` at ``version`` (default: its current version).

        If ``expected_encoder`` is given, its name, pooling, normalisation and dimension (those keys
        present on both sides) must match the encoder the knowledge base was built with. ``verify``
        chooses the integrity checks (module docs). ``mmap`` maps the index read-only where FAISS can.
        """
        path = Path(path)
        manifest = read_manifest(path)
        if expected_encoder is not None:
            check_encoder_matches(path, manifest["encoder"], expected_encoder)
        _verify_files(path, manifest, verify)
        version = _check_version(path, manifest, version)
        embeddings = _load_embeddings(path, manifest)
        index = _load_index(path, manifest, mmap)
        store = PassageStore.open(path / STORE_FILE)
        if store.num_rows() < manifest["num_rows"]:
            store.close()
            raise KnowledgeBaseError(
                f"{path / STORE_FILE} holds fewer rows than {MANIFEST_FILE} records ({manifest['num_rows']}); "
                f"{REBUILD_HINT}"
            )
        return cls(path, manifest, version, store, embeddings, index)

    def reload(self, version: int | None = None) -> None:
        """Re-read the knowledge base from disk in place (at ``version``, default the current one)."""
        fresh = type(self).load(self._path, verify="size", version=version)
        old = self._store
        self._set(fresh._path, fresh._manifest, fresh._version, fresh._store, fresh._embeddings, fresh._index)
        old.close()

    def verify(self) -> None:
        """Verify every file's sha256 checksum (slow for big indexes); raise KnowledgeBaseError if bad."""
        _verify_files(self._path, self._manifest, "full")

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
        return self._index.dim

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
        """The dense index over :attr:`embeddings`."""
        return self._index

    @property
    def store(self) -> PassageStore:
        """The passage store."""
        return self._store

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
        version = self._version
        for _, passage, deleted in self._store.iter_rows(0, self._visible_rows):
            if deleted is None or deleted > version:
                yield passage

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

    def search(self, query_vectors, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` maximum-inner-product search at this version: ``(scores float32 (m, k), rows int64 (m, k))``.

        Rows deleted as of this version or added after it are never returned. ``k`` greater than the
        number of passages is clamped to it with a warning.
        """
        k = check_k(k)
        if len(self) == 0:
            raise KnowledgeBaseError(f"knowledge base {self._path} has no passages at version {self._version}")
        if k > len(self):
            warnings.warn(
                f"asked for k={k} passages but knowledge base {self._path} has only {len(self)}; "
                f"retrieving {len(self)}",
                stacklevel=2,
            )
            k = len(self)
        return _search_excluding(self._index, query_vectors, k, self._excluded)
