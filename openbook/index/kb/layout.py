"""Knowledge-base layout: file names and constants, the manifest (reading and checking it), the data
files (sizes and checksums), locking and encoder identity. The format is described in :mod:`openbook.index.kb`."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from openbook.atomic import atomic_output, fsync_path
from openbook.corpus import Passage
from openbook.corpus.readers.files import sha256_file
from openbook.errors import InputError, KnowledgeBaseError, positive_int
from openbook.index.store import embeddings_bytes
from openbook.presets import AUTO_INDEX

FORMAT_VERSION = 2
STORE_FILE = "passages.sqlite"
EMBEDDINGS_FILE = "embeddings.npy"
INDEX_FILE = "index.faiss"
INDEX_FILE_PATTERN = re.compile(r"index(\.v[0-9]+)?\.faiss")  # index.faiss, after edits index.v<N>.faiss
MANIFEST_FILE = "manifest.json"
LOCK_FILE = ".lock"
PARTIAL_SUFFIX = ".partial"
CHECKSUM_AUTO_MAX_BYTES = 256 * 1024 * 1024
VERIFY_MODES = ("auto", "full", "size")
DEFAULT_INDEX = AUTO_INDEX  # chosen by the number of vectors when the build is indexed (indexing.resolve_index)
DEFAULT_DTYPE = "float32"
# Encoder properties that must agree between the knowledge base and the query encoder (those recorded on
# both sides: knowledge bases built before the weights' fingerprint existed are checked by name only).
ENCODER_IDENTITY_KEYS = ("name", "pooling", "normalize", "dim", "weights_sha256")
BUILD_HINT = "build one with `openbook kb build SOURCE --out DIR` or openbook.index.KnowledgeBase.build()"
REBUILD_HINT = "rebuild it with `openbook kb build SOURCE --out DIR`"
ADD_CHUNK_ROWS = 65_536  # rows read from embeddings.npy at a time while filling an index
RERANK_FACTOR = 10  # compressed indexes: candidates fetched per result, re-scored exactly
TRAIN_SAMPLE_ROWS = 100_000  # training sample for indexes that need one (unless the kind says otherwise)
PHI_HEADROOM = 1.1  # HNSW kinds: bound on |x|^2 = this x the largest seen, leaving room for later adds

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
    """One-line description of an encoder dict, e.g. ``'A' (mean pooling, normalized, dim 384, weights sha256 ...)``."""
    details = []
    if "pooling" in encoder:
        details.append(f"{encoder['pooling']} pooling")
    if "normalize" in encoder:
        details.append("normalized" if encoder["normalize"] else "not normalized")
    if "dim" in encoder:
        details.append(f"dim {encoder['dim']}")
    if isinstance(encoder.get("weights_sha256"), str):
        details.append(f"weights sha256 {encoder['weights_sha256'][:12]}")
    name = repr(encoder.get("name", "<unnamed>"))
    return f"{name} ({', '.join(details)})" if details else name


def check_encoder_matches(kb_path: Path, built_with: dict[str, Any], expected: dict[str, Any]) -> None:
    """Raise KnowledgeBaseError naming both encoders if any identity key present in both differs. Where both
    record the weights' fingerprint, it identifies the weights and the name is not compared: the same
    folder named ``./enc`` in one place and by its absolute path in another is the same encoder."""
    fingerprinted = all(isinstance(info.get("weights_sha256"), str) for info in (built_with, expected))
    differs = [
        key for key in ENCODER_IDENTITY_KEYS
        if key in built_with and key in expected and built_with[key] != expected[key]
        and not (key == "name" and fingerprinted)
    ]
    if differs:
        raise KnowledgeBaseError(
            f"knowledge base {kb_path} was built with encoder {describe_encoder(built_with)} but the "
            f"query encoder is {describe_encoder(expected)} (they differ in {', '.join(differs)}); "
            f"rebuild the knowledge base with the query encoder or load the matching encoder"
        )


# ---------------------------------------------------------------------------------------------------
# manifest and files


def _check_encoder_info(encoder_info: dict[str, Any]) -> None:
    """Raise InputError unless ``encoder_info`` is a JSON-serialisable dict."""
    if not isinstance(encoder_info, dict):
        raise InputError(f"encoder_info must be a dict, got {type(encoder_info).__name__}")
    try:
        json.dumps(encoder_info)
    except (TypeError, ValueError) as exc:
        raise InputError(f"encoder_info must be JSON-serialisable: {exc}") from None


def _check_batch_size(batch_size) -> int:
    return positive_int(batch_size, "batch_size")


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
    if not INDEX_FILE_PATTERN.fullmatch(index["file"]):
        _bad_file_name(manifest_path, index["file"])
    for name in manifest["files"]:
        if name not in (STORE_FILE, EMBEDDINGS_FILE) and not INDEX_FILE_PATTERN.fullmatch(name):
            _bad_file_name(manifest_path, name)
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


def _bad_file_name(manifest_path: Path, name: str) -> None:
    """A file name in the manifest that is not one of the knowledge base's own (``../victim.faiss``)."""
    raise KnowledgeBaseError(
        f"{manifest_path} is corrupt: it names the file {name!r}, which is not a knowledge-base file "
        f"({STORE_FILE}, {EMBEDDINGS_FILE}, index.faiss or index.v<N>.faiss inside the folder); rebuild the "
        f"knowledge base"
    )


def _data_files(manifest: dict[str, Any]) -> list[str]:
    return [STORE_FILE, EMBEDDINGS_FILE, manifest["index"]["file"]]


def verify_files(path: Path, manifest: dict[str, Any], verify: str) -> None:
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
        wants_checksum = verify == "full" or (verify == "auto" and size <= CHECKSUM_AUTO_MAX_BYTES)
        if wants_checksum and _segment(file_path, dtype, dim, start, stop)["sha256"] != segment["sha256"]:
            raise KnowledgeBaseError(
                f"{file_path} rows {start}..{stop - 1} do not match their sha256 checksum in "
                f"{MANIFEST_FILE}: the file is corrupt or was modified; {REBUILD_HINT}"
            )


def _version_entry(manifest: dict[str, Any], version: int) -> dict[str, Any]:
    return manifest["versions"][version - 1]


def _check_version(path: Path, manifest: dict[str, Any], version) -> int:
    latest = manifest["latest_version"]
    if version is None:
        return manifest["current_version"]
    if isinstance(version, bool) or not isinstance(version, (int, np.integer)) or not 1 <= version <= latest:
        raise InputError(f"knowledge base {path} has versions 1..{latest}, not {version!r}")
    return int(version)


