"""A knowledge base: the passages z, their document vectors d(z) and a dense index, in one directory.

Layout of a knowledge-base directory (``FORMAT_VERSION`` 1)::

    passages.jsonl   one {"id", "title", "text"} object per line, line i = index row i
    embeddings.npy   float32 (n, dim) document vectors d(z), row i = passage i
    index.faiss      the FAISS index over those vectors (its type is manifest["index_type"])
    manifest.json    format_version, encoder, dim, index_type, num_passages, files, created_at

``manifest["files"]`` maps each data file to its ``bytes`` and ``sha256``. ``manifest["encoder"]`` is the
dict the builder passed (e.g. ``{"name": ..., "pooling": "mean", "normalize": true, "dim": 384}``) and is
compared with the query encoder on load.

Integrity checks on load (``verify``): ``"auto"`` (default) checks that every file is present with its
recorded size (which catches truncation) and verifies the sha256 of files up to
``CHECKSUM_AUTO_MAX_BYTES``; bigger files are only size-checked, to keep loading a large index fast.
``"full"`` verifies every checksum, ``"size"`` none. :meth:`KnowledgeBase.verify` runs the full check.

Building writes everything into a hidden temporary directory beside the destination and renames it
into place only when complete, so an interrupted build never leaves a half-written knowledge base
(a killed process may leave a ``.<name>.building-*`` directory behind, which is safe to delete).
"""

import hashlib
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
from openbook.errors import InputError, KnowledgeBaseError
from openbook.index.atomic import fsync_path, make_temp_dir_next_to, replace_dir
from openbook.index.dense import DenseIndex, FlatIPIndex, as_float32_matrix, check_k, index_class

FORMAT_VERSION = 1
PASSAGES_FILE = "passages.jsonl"
EMBEDDINGS_FILE = "embeddings.npy"
INDEX_FILE = "index.faiss"
MANIFEST_FILE = "manifest.json"
DATA_FILES = (PASSAGES_FILE, EMBEDDINGS_FILE, INDEX_FILE)
CHECKSUM_AUTO_MAX_BYTES = 256 * 1024 * 1024
VERIFY_MODES = ("auto", "full", "size")
# Encoder properties that must agree between the knowledge base and the query encoder.
ENCODER_IDENTITY_KEYS = ("name", "pooling", "normalize", "dim")
BUILD_HINT = "build one with `openbook build-kb` or openbook.index.KnowledgeBase.build()"
_HASH_BLOCK = 1 << 20

EncodePassages = Callable[[list[Passage]], np.ndarray]


# ---------------------------------------------------------------------------------------------------
# small helpers


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_HASH_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def _batches(items: Iterable[Passage], size: int) -> Iterator[list[Passage]]:
    """Yield consecutive lists of at most ``size`` items."""
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


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


# ---------------------------------------------------------------------------------------------------
# building


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


def _passage_line(passage: Passage, position: int) -> str:
    """JSON line for one passage; raise InputError if ``passage`` is not a Passage."""
    if not isinstance(passage, Passage):
        raise InputError(f"item {position} to index is a {type(passage).__name__}, not an openbook Passage")
    record = {"id": passage.id, "title": passage.title, "text": passage.text}
    return json.dumps(record, ensure_ascii=False) + "\n"


def _encode_batch(
    encode_passages: EncodePassages, batch: list[Passage], start: int, dim: int | None
) -> np.ndarray:
    """Encode one batch and check the result is a finite float32 (len(batch), dim) array."""
    vectors = encode_passages(batch)
    what = f"encode_passages output for passages {start}..{start + len(batch) - 1}"
    vectors = as_float32_matrix(vectors, what, dim)
    if vectors.shape[0] != len(batch):
        raise InputError(f"{what} has {vectors.shape[0]} rows for a batch of {len(batch)} passages")
    return vectors


def _write_passages_and_encode(
    passages: Iterable[Passage],
    encode_passages: EncodePassages,
    passages_path: Path,
    batch_size: int,
    progress: bool,
) -> np.ndarray:
    """Stream passages to ``passages_path`` while encoding them in batches; return the (n, d) matrix."""
    total = len(passages) if hasattr(passages, "__len__") else None
    blocks: list[np.ndarray] = []
    count = 0
    with open(passages_path, "w", encoding="utf-8") as out, tqdm(
        total=total, unit="passage", desc="encoding passages", disable=not progress, file=sys.stderr
    ) as bar:
        for batch in _batches(passages, batch_size):
            out.writelines(_passage_line(p, count + i) for i, p in enumerate(batch))
            dim = blocks[0].shape[1] if blocks else None
            blocks.append(_encode_batch(encode_passages, batch, count, dim))
            count += len(batch)
            bar.update(len(batch))
    if not blocks:
        raise InputError("no passages to index: the passage input is empty")
    return np.concatenate(blocks)


def _save_npy(path: Path, array: np.ndarray) -> None:
    """``np.save`` without pickles."""
    with open(path, "wb") as handle:
        np.save(handle, array, allow_pickle=False)


def _file_entries(directory: Path) -> dict[str, dict[str, Any]]:
    """Size and sha256 of each data file, after flushing it to disk."""
    entries = {}
    for name in DATA_FILES:
        path = directory / name
        fsync_path(path)
        entries[name] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    return entries


def _make_manifest(
    directory: Path, encoder_info: dict[str, Any], index: DenseIndex, count: int
) -> dict[str, Any]:
    """The manifest describing the files already written in ``directory``."""
    return {
        "format_version": FORMAT_VERSION,
        "encoder": encoder_info,
        "dim": index.dim,
        "index_type": index.type_name,
        "num_passages": count,
        "files": _file_entries(directory),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """Write manifest.json (last, so a directory with a manifest has all its parts)."""
    path = directory / MANIFEST_FILE
    path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    fsync_path(path)


# ---------------------------------------------------------------------------------------------------
# loading


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


def _read_manifest(path: Path) -> dict[str, Any]:
    """Read and sanity-check manifest.json of the knowledge base at ``path``."""
    manifest_path = path / MANIFEST_FILE
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise KnowledgeBaseError(f"{manifest_path} is corrupt ({exc}); rebuild the knowledge base") from None
    if not isinstance(manifest, dict):
        raise KnowledgeBaseError(
            f"{manifest_path} is corrupt (not a JSON object); rebuild the knowledge base"
        )
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise KnowledgeBaseError(
            f"{manifest_path} has format_version {version!r}; this openbook reads version {FORMAT_VERSION} "
            f"or older: upgrade openbook or rebuild the knowledge base"
        )
    _check_manifest_fields(manifest_path, manifest)
    return manifest


def _check_manifest_fields(manifest_path: Path, manifest: dict[str, Any]) -> None:
    """Raise KnowledgeBaseError naming the first missing or mistyped manifest field."""
    expected_types = {
        "encoder": dict, "dim": int, "index_type": str, "num_passages": int, "files": dict,
    }
    for key, kind in expected_types.items():
        if not isinstance(manifest.get(key), kind):
            raise KnowledgeBaseError(
                f"{manifest_path} is corrupt: field {key!r} is missing or not a {kind.__name__}; "
                f"rebuild the knowledge base"
            )
    for name in DATA_FILES:
        entry = manifest["files"].get(name)
        if not (isinstance(entry, dict) and isinstance(entry.get("bytes"), int)
                and isinstance(entry.get("sha256"), str)):
            raise KnowledgeBaseError(
                f"{manifest_path} is corrupt: no size and checksum for {name}; rebuild the knowledge base"
            )


def _verify_files(path: Path, manifest: dict[str, Any], verify: str) -> None:
    """Check presence, size and (depending on ``verify``) sha256 of every data file."""
    if verify not in VERIFY_MODES:
        raise InputError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}")
    for name in DATA_FILES:
        entry = manifest["files"][name]
        file_path = path / name
        if not file_path.is_file():
            raise KnowledgeBaseError(f"knowledge base {path} is incomplete: {name} is missing; rebuild it")
        size = file_path.stat().st_size
        if size != entry["bytes"]:
            raise KnowledgeBaseError(
                f"{file_path} has {size} bytes but {MANIFEST_FILE} records {entry['bytes']}: the file is "
                f"truncated or was modified; rebuild the knowledge base"
            )
        wants_checksum = verify == "full" or (verify == "auto" and size <= CHECKSUM_AUTO_MAX_BYTES)
        if wants_checksum and sha256_file(file_path) != entry["sha256"]:
            raise KnowledgeBaseError(
                f"{file_path} does not match its sha256 checksum in {MANIFEST_FILE}: the file is corrupt "
                f"or was modified; rebuild the knowledge base"
            )


def _load_passages(path: Path, count: int) -> list[Passage]:
    """Read passages.jsonl, checking it holds exactly ``count`` well-formed passages."""
    file_path = path / PASSAGES_FILE
    passages = []
    with open(file_path, encoding="utf-8") as lines:
        for lineno, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
                passages.append(Passage(id=record["id"], title=record["title"], text=record["text"]))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise KnowledgeBaseError(
                    f"{file_path}:{lineno}: not a passage record ({exc}); rebuild the knowledge base"
                ) from None
    if len(passages) != count:
        raise KnowledgeBaseError(
            f"{file_path} holds {len(passages)} passages but {MANIFEST_FILE} records {count}; "
            f"rebuild the knowledge base"
        )
    return passages


def _load_embeddings(path: Path, count: int, dim: int) -> np.ndarray:
    """Read embeddings.npy (read-only), checking it is float32 of shape (count, dim)."""
    file_path = path / EMBEDDINGS_FILE
    try:
        embeddings = np.load(file_path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise KnowledgeBaseError(
            f"{file_path} is not a readable .npy array ({exc}); rebuild the knowledge base"
        ) from None
    if embeddings.dtype != np.float32 or embeddings.shape != (count, dim):
        raise KnowledgeBaseError(
            f"{file_path} holds {embeddings.dtype} {embeddings.shape} but {MANIFEST_FILE} records float32 "
            f"({count}, {dim}); rebuild the knowledge base"
        )
    embeddings.flags.writeable = False
    return embeddings


def _load_index(path: Path, manifest: dict[str, Any]) -> DenseIndex:
    """Read the FAISS index and check it matches the manifest's type, size and dimension."""
    file_path = path / INDEX_FILE
    try:
        index = index_class(manifest["index_type"]).load(file_path)
    except InputError as exc:
        raise KnowledgeBaseError(f"knowledge base {path}: {exc}; rebuild the knowledge base") from None
    if index.ntotal != manifest["num_passages"] or index.dim != manifest["dim"]:
        raise KnowledgeBaseError(
            f"{file_path} holds {index.ntotal} vectors of dimension {index.dim} but {MANIFEST_FILE} records "
            f"{manifest['num_passages']} of dimension {manifest['dim']}; rebuild the knowledge base"
        )
    return index


# ---------------------------------------------------------------------------------------------------


class KnowledgeBase:
    """Passages, their document vectors and a dense index, stored in one directory (see module docs)."""

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        passages: list[Passage],
        embeddings: np.ndarray,
        index: DenseIndex,
    ):
        """Assemble a loaded knowledge base; use :meth:`build` or :meth:`load` instead."""
        self._path = path
        self._manifest = manifest
        self._passages = passages
        self._embeddings = embeddings
        self._index = index

    # -- construction -------------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        passages: Iterable[Passage],
        encode_passages: EncodePassages,
        encoder_info: dict[str, Any],
        out_dir: str | os.PathLike,
        batch_size: int = 256,
        progress: bool = True,
        index_type: str = FlatIPIndex.type_name,
    ) -> "KnowledgeBase":
        """Encode ``passages`` in batches, index them and write a knowledge base to ``out_dir``.

        ``encode_passages`` maps a list of passages to a float32 ``(len(list), dim)`` array of document
        vectors d(z). ``encoder_info`` (JSON-serialisable) is stored in the manifest and checked against
        the query encoder on load. A progress bar goes to stderr unless ``progress`` is false. The result
        appears at ``out_dir`` atomically, replacing an existing knowledge base only once complete.
        """
        out_dir = Path(out_dir)
        _check_encoder_info(encoder_info)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        index_kind = index_class(index_type)
        _check_replaceable(out_dir)
        tmp_dir = make_temp_dir_next_to(out_dir)
        try:
            cls._build_into(
                tmp_dir, passages, encode_passages, encoder_info, batch_size, progress, index_kind
            )
            replace_dir(tmp_dir, out_dir)
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
        return cls.load(out_dir)

    @staticmethod
    def _build_into(
        directory: Path,
        passages: Iterable[Passage],
        encode_passages: EncodePassages,
        encoder_info: dict[str, Any],
        batch_size: int,
        progress: bool,
        index_kind: type[DenseIndex],
    ) -> None:
        """Write all parts of a knowledge base into the (temporary) ``directory``."""
        embeddings = _write_passages_and_encode(
            passages, encode_passages, directory / PASSAGES_FILE, batch_size, progress
        )
        declared_dim = encoder_info.get("dim")
        if declared_dim is not None and declared_dim != embeddings.shape[1]:
            raise InputError(
                f"encoder_info says dim {declared_dim} but encode_passages returned vectors of "
                f"dimension {embeddings.shape[1]}"
            )
        _save_npy(directory / EMBEDDINGS_FILE, embeddings)
        index = index_kind.create(embeddings.shape[1])
        index.add(embeddings)
        index.save(directory / INDEX_FILE)
        _write_manifest(directory, _make_manifest(directory, encoder_info, index, len(embeddings)))

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        expected_encoder: dict[str, Any] | None = None,
        verify: str = "auto",
    ) -> "KnowledgeBase":
        """Open the knowledge base at ``path``, validating it (see module docs for ``verify``).

        If ``expected_encoder`` is given, its name, pooling, normalisation and dimension (those keys
        present on both sides) must match the encoder the knowledge base was built with.
        """
        path = Path(path)
        _check_directory(path)
        manifest = _read_manifest(path)
        if expected_encoder is not None:
            check_encoder_matches(path, manifest["encoder"], expected_encoder)
        _verify_files(path, manifest, verify)
        count, dim = manifest["num_passages"], manifest["dim"]
        passages = _load_passages(path, count)
        embeddings = _load_embeddings(path, count, dim)
        index = _load_index(path, manifest)
        return cls(path, manifest, passages, embeddings, index)

    def verify(self) -> None:
        """Verify every file's sha256 checksum (slow for big indexes); raise KnowledgeBaseError if bad."""
        _verify_files(self._path, self._manifest, "full")

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
    def embeddings(self) -> np.ndarray:
        """Read-only float32 ``(n, dim)`` document vectors d(z), row i = passage i."""
        return self._embeddings

    @property
    def index(self) -> DenseIndex:
        """The dense index over :attr:`embeddings`."""
        return self._index

    def __len__(self) -> int:
        return len(self._passages)

    def __repr__(self) -> str:
        return f"KnowledgeBase({str(self._path)!r}, passages={len(self)}, dim={self.dim})"

    # -- access -------------------------------------------------------------------------------------

    def __getitem__(self, i: int) -> Passage:
        """Passage at row ``i`` (negative indexes count from the end, as for a list)."""
        return self._passages[operator.index(i)]

    def __iter__(self) -> Iterator[Passage]:
        return iter(self._passages)

    def passages(self, indices) -> list[Passage] | list[list[Passage]]:
        """Passages for the row ``indices`` returned by :meth:`search`.

        A 1-D sequence gives a list of passages; a 2-D ``(m, k)`` array gives one list per query.
        Indexes must lie in ``0 .. len(self) - 1`` (FAISS uses ``-1`` for "no result").
        """
        rows = np.asarray(indices)
        if rows.ndim == 2:
            return [self.passages(row) for row in rows]
        rows = rows.reshape(-1)
        if rows.size and not np.issubdtype(rows.dtype, np.integer):
            raise InputError(f"passage indices must be integers, got {rows.dtype}")
        bad = rows[(rows < 0) | (rows >= len(self))] if rows.size else rows
        if bad.size:
            raise InputError(
                f"passage index {int(bad[0])} is out of range for knowledge base {self._path} "
                f"with {len(self)} passages"
            )
        return [self._passages[int(row)] for row in rows]

    def search(self, query_vectors, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` maximum-inner-product search: ``(scores float32 (m, k), indices int64 (m, k))``.

        ``k`` greater than the number of passages is clamped to it with a warning.
        """
        k = check_k(k)
        if k > len(self):
            warnings.warn(
                f"asked for k={k} passages but knowledge base {self._path} has only {len(self)}; "
                f"retrieving {len(self)}",
                stacklevel=2,
            )
            k = len(self)
        return self._index.search(query_vectors, k)
