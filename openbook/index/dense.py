"""Dense maximum-inner-product indexes over passage vectors d(z), as in DPR / RAG.

:class:`DenseIndex` wraps a FAISS index behind a small numpy API. Concrete kinds register themselves
under a type string (``FlatIPIndex.type_name == "flat_ip"``) that a knowledge base stores in its
manifest, so that approximate kinds (HNSW, IVF-PQ as in the paper's 21M-passage index) can be added
later as subclasses without changing the file format: implement :meth:`DenseIndex._new_faiss_index`
and decorate the class with :func:`register_index`. Indexes that need training (IVF) are trained
automatically on the first :meth:`DenseIndex.add`.
"""

import os
from pathlib import Path
from typing import ClassVar, Self

import faiss
import numpy as np

from openbook.errors import InputError
from openbook.index.atomic import atomic_output

INDEX_TYPES: dict[str, type["DenseIndex"]] = {}


def register_index(cls: type["DenseIndex"]) -> type["DenseIndex"]:
    """Class decorator: make ``cls`` constructible and loadable by its ``type_name``."""
    INDEX_TYPES[cls.type_name] = cls
    return cls


def index_class(type_name: str) -> type["DenseIndex"]:
    """Return the registered index class for ``type_name`` or raise InputError listing the known ones."""
    try:
        return INDEX_TYPES[type_name]
    except KeyError:
        known = ", ".join(sorted(INDEX_TYPES))
        raise InputError(f"unknown index type {type_name!r}; known types: {known}") from None


def as_float32_matrix(vectors, what: str, dim: int | None = None, allow_1d: bool = False) -> np.ndarray:
    """Return ``vectors`` as a C-contiguous float32 ``(n, dim)`` array, or raise InputError naming ``what``.

    A 1-D array is read as a single row when ``allow_1d`` is true. Non-finite values are rejected.
    """
    try:
        array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{what} must be a numeric array: {exc}") from None
    if allow_1d and array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2:
        raise InputError(f"{what} must be a 2-D array (n, dim), got shape {array.shape}")
    if dim is not None and array.shape[1] != dim:
        raise InputError(f"{what} have dimension {array.shape[1]} but the index has dimension {dim}")
    if not np.isfinite(array).all():
        raise InputError(f"{what} contain NaN or infinite values")
    return np.ascontiguousarray(array)


def check_k(k) -> int:
    """Return ``k`` as an int if it is a positive integer, else raise InputError."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k (number of passages to retrieve) must be a positive integer, got {k!r}")
    return int(k)


class DenseIndex:
    """Base class: a FAISS index of ``dim``-dimensional float32 vectors searched by score, best first."""

    type_name: ClassVar[str] = ""

    def __init__(self, faiss_index: faiss.Index):
        """Wrap an existing FAISS index (use :meth:`create` or :meth:`load` rather than calling this)."""
        self._index = faiss_index

    @classmethod
    def create(cls, dim: int, **params) -> Self:
        """Return a new empty index of this kind for ``dim``-dimensional vectors."""
        if cls is DenseIndex:
            raise TypeError("DenseIndex is abstract: create a registered subclass such as FlatIPIndex")
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise InputError(f"index dimension must be a positive integer, got {dim!r}")
        return cls(cls._new_faiss_index(int(dim), **params))

    @classmethod
    def _new_faiss_index(cls, dim: int, **params) -> faiss.Index:
        """Subclasses: build the empty FAISS index."""
        raise NotImplementedError

    @property
    def dim(self) -> int:
        """Dimension of the indexed vectors."""
        return self._index.d

    @property
    def ntotal(self) -> int:
        """Number of vectors in the index."""
        return self._index.ntotal

    def __len__(self) -> int:
        return self.ntotal

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim}, ntotal={self.ntotal})"

    def add(self, vectors) -> None:
        """Append float32 ``(n, dim)`` vectors; their ids are ``ntotal, ntotal+1, ...`` in order."""
        vectors = as_float32_matrix(vectors, "vectors to add", self.dim)
        if not self._index.is_trained:
            self._index.train(vectors)
        self._index.add(vectors)

    def search(self, queries, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return the top-``k`` ``(scores float32 (m, k), ids int64 (m, k))`` for ``(m, dim)`` queries.

        A single 1-D query is accepted as ``m == 1``. ``k`` larger than :attr:`ntotal` is reduced to
        ``ntotal`` (callers that want to warn about it should do so themselves).
        """
        k = check_k(k)
        queries = as_float32_matrix(queries, "query vectors", self.dim, allow_1d=True)
        if self.ntotal == 0:
            raise InputError("cannot search an empty index: add vectors first")
        scores, ids = self._index.search(queries, min(k, self.ntotal))
        return scores.astype(np.float32, copy=False), ids.astype(np.int64, copy=False)

    def save(self, path: str | os.PathLike) -> None:
        """Write the index to ``path`` atomically (a temporary file in the same directory, then rename)."""
        with atomic_output(path) as tmp:
            faiss.write_index(self._index, str(tmp))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Self:
        """Read an index written by :meth:`save`.

        Called on :class:`DenseIndex` itself, the registered subclass whose FAISS type matches is used.
        """
        path = Path(path)
        if not path.is_file():
            raise InputError(f"{path}: no such index file")
        try:
            faiss_index = faiss.read_index(str(path))
        except RuntimeError as exc:
            reason = str(exc).strip().splitlines()[-1]
            raise InputError(f"{path}: not a readable FAISS index ({reason})") from None
        return cls._subclass_for(faiss_index, path)(faiss_index)

    @classmethod
    def _subclass_for(cls, faiss_index: faiss.Index, path: Path) -> type["DenseIndex"]:
        """Pick the class that wraps ``faiss_index``: ``cls`` itself if concrete, else by FAISS type."""
        candidates = [cls] if cls is not DenseIndex else list(INDEX_TYPES.values())
        for candidate in candidates:
            if candidate._wraps(faiss_index):
                return candidate
        expected = cls.type_name or "any of " + ", ".join(sorted(INDEX_TYPES))
        raise InputError(f"{path}: holds a FAISS {type(faiss_index).__name__}, not a {expected} index")

    @classmethod
    def _wraps(cls, faiss_index: faiss.Index) -> bool:
        """Subclasses: whether ``faiss_index`` is the kind of FAISS index this class manages."""
        raise NotImplementedError


@register_index
class FlatIPIndex(DenseIndex):
    """Exact maximum inner product search (``faiss.IndexFlatIP``): brute force, no approximation."""

    type_name = "flat_ip"

    @classmethod
    def _new_faiss_index(cls, dim: int, **params) -> faiss.Index:
        if params:
            raise InputError(f"flat_ip index takes no parameters, got {', '.join(sorted(params))}")
        return faiss.IndexFlatIP(dim)

    @classmethod
    def _wraps(cls, faiss_index: faiss.Index) -> bool:
        is_flat = isinstance(faiss_index, faiss.IndexFlat)
        return is_flat and faiss_index.metric_type == faiss.METRIC_INNER_PRODUCT
