"""The embeddings file of a knowledge base (``embeddings.npy``), beside its passage store
(:mod:`openbook.index.store`).

A standard ``.npy`` array ``(num_rows, dim)`` of float16 or float32 with a fixed-size (128-byte) header, so
that rows can be appended in place and the header's shape rewritten without moving the data. Readers map
the first ``num_rows`` rows (the number the manifest records) read-only; rows past them are the leftovers
of an interrupted append and are ignored.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np

from openbook.errors import InputError, KnowledgeBaseError
from openbook.presets import EMBEDDING_DTYPES

NPY_HEADER_BYTES = 128  # magic (6) + version (2) + header length (2) + padded header dict
_NPY_MAGIC = b"\x93NUMPY\x01\x00"


def check_dtype(dtype: str) -> np.dtype:
    """The numpy dtype for ``"float32"`` or ``"float16"``; InputError otherwise."""
    if dtype not in EMBEDDING_DTYPES:
        raise InputError(f"embedding dtype must be one of {', '.join(EMBEDDING_DTYPES)}, got {dtype!r}")
    return np.dtype(dtype)


def npy_header(dtype: np.dtype, rows: int, dim: int) -> bytes:
    """A version 1.0 ``.npy`` header of exactly :data:`NPY_HEADER_BYTES` bytes for a C-order array."""
    text = f"{{'descr': '{np.dtype(dtype).str}', 'fortran_order': False, 'shape': ({rows}, {dim}), }}"
    room = NPY_HEADER_BYTES - len(_NPY_MAGIC) - 2
    if len(text) + 1 > room:
        raise InputError(f"embeddings of shape ({rows}, {dim}) are too large for the .npy header")
    text = text.ljust(room - 1) + "\n"
    return _NPY_MAGIC + room.to_bytes(2, "little") + text.encode("latin1")


def read_npy_header(path: Path) -> tuple[np.dtype, int, int]:
    """``(dtype, rows, dim)`` of an embeddings file written by :class:`EmbeddingsWriter`."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(NPY_HEADER_BYTES)
    except OSError as exc:
        raise KnowledgeBaseError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        if len(head) < NPY_HEADER_BYTES or not head.startswith(_NPY_MAGIC):
            raise ValueError("not a .npy file with openbook's fixed-size header")
        length = int.from_bytes(head[8:10], "little")
        if 10 + length != NPY_HEADER_BYTES:
            raise ValueError(f"header is {10 + length} bytes, expected {NPY_HEADER_BYTES}")
        fields = ast.literal_eval(head[10:].decode("latin1").strip())
        dtype = np.dtype(fields["descr"])
        rows, dim = fields["shape"]
        if fields["fortran_order"] or dtype.name not in EMBEDDING_DTYPES:
            raise ValueError(f"unsupported layout {fields}")
    except (ValueError, SyntaxError, KeyError, TypeError) as exc:
        raise KnowledgeBaseError(f"{path} is not a readable embeddings file ({exc}); rebuild the knowledge base") from None
    return dtype, int(rows), int(dim)


def map_embeddings(path: Path, dtype: np.dtype, rows: int, dim: int) -> np.ndarray:
    """Read-only memory map of the first ``rows`` rows (must be present in the file)."""
    return np.memmap(path, dtype=dtype, mode="r", offset=NPY_HEADER_BYTES, shape=(rows, dim))


def embeddings_bytes(dtype: np.dtype, rows: int, dim: int) -> int:
    """Size of an embeddings file holding exactly ``rows`` rows."""
    return NPY_HEADER_BYTES + rows * dim * np.dtype(dtype).itemsize


class EmbeddingsWriter:
    """Append rows to an embeddings ``.npy`` file in place; :meth:`publish` rewrites the header's shape.

    Every :meth:`append` is flushed to disk before it returns, so a row count recorded afterwards (in a
    progress file or manifest) is durable.
    """

    def __init__(self, path: Path, dtype: np.dtype, dim: int, rows: int):
        self.path, self.dtype, self.dim, self.rows = path, np.dtype(dtype), dim, rows

    @classmethod
    def create(cls, path: str | os.PathLike, dtype: str | np.dtype, dim: int) -> "EmbeddingsWriter":
        path = Path(path)
        dtype = np.dtype(dtype)
        with open(path, "wb") as handle:
            handle.write(npy_header(dtype, 0, dim))
            handle.flush()
            os.fsync(handle.fileno())
        return cls(path, dtype, dim, 0)

    @classmethod
    def reopen(cls, path: str | os.PathLike, rows: int) -> "EmbeddingsWriter":
        """Reopen for appending after row ``rows``, cutting off anything written after it."""
        path = Path(path)
        dtype, header_rows, dim = read_npy_header(path)
        size = embeddings_bytes(dtype, rows, dim)
        if path.stat().st_size < size:
            raise KnowledgeBaseError(f"{path} holds fewer than {rows} rows: the file is truncated")
        with open(path, "r+b") as handle:
            handle.truncate(size)
            handle.flush()
            os.fsync(handle.fileno())
        return cls(path, dtype, dim, rows)

    @property
    def complete_rows(self) -> int:
        return (self.path.stat().st_size - NPY_HEADER_BYTES) // (self.dim * self.dtype.itemsize)

    def append(self, vectors: np.ndarray) -> None:
        """Append float32 ``(n, dim)`` vectors, converted to the file's dtype."""
        with np.errstate(over="ignore"):
            data = np.ascontiguousarray(vectors, dtype=self.dtype)
        if not np.isfinite(data).all():
            raise InputError(
                f"document vectors overflow {self.dtype.name} (values up to {float(np.abs(vectors).max()):.3g}); "
                f"store them as float32"
            )
        with open(self.path, "r+b") as handle:
            handle.seek(embeddings_bytes(self.dtype, self.rows, self.dim))
            handle.write(data.tobytes())
            handle.flush()
            os.fsync(handle.fileno())
        self.rows += len(data)

    def publish(self) -> None:
        """Write the current row count into the header (the file is then a valid ``.npy`` of all rows)."""
        with open(self.path, "r+b") as handle:
            handle.write(npy_header(self.dtype, self.rows, self.dim))
            handle.flush()
            os.fsync(handle.fileno())
