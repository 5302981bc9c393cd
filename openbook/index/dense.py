"""Dense maximum-inner-product indexes over passage vectors d(z), as in DPR / RAG.

Every kind wraps one FAISS index behind the same small numpy API (DPR's ``DenseIndexer`` family) and
registers itself under a ``type_name`` that a knowledge base records in its manifest:

===========  =====================================================================================
``flat``     exact inner-product search (``IndexFlatIP``); 4·dim bytes per vector. ``flat_ip`` is an
             alias kept because knowledge bases written before the other kinds existed record it.
``hnsw``     HNSW graph over the exact vectors (``IndexHNSWFlat``), searched through DPR's
             inner-product-to-L2 transform (below); params ``M=32, ef_construction=200,
             ef_search=128``. About 4·(dim+1) + 8·M bytes per vector.
``ivfpq``    inverted file with product quantization (``IndexIVFPQ``, optionally behind an OPQ
             rotation); params ``nlist`` (default ≈ 4·√n at training), ``m`` sub-quantizers of
             ``nbits=8`` bits (default ``m`` = 64 for dim 768: 64 + 8 bytes per vector, the 8 being
             the stored id), ``nprobe`` and ``opq``. Needs training; trains on a sample of at most
             :attr:`IVFPQIndex.max_train_vectors` (100,000) vectors. Scores are PQ approximations.
``hnsw_sq8`` like ``hnsw`` but the vectors are stored as 8-bit scalar-quantized codes
             (``IndexHNSWSQ``, DPR's ``DenseHNSWSQIndexer``); about dim+1 + 8·M bytes per vector.
             Needs training (per-dimension ranges). Scores are approximations.
===========  =====================================================================================

Usage: ``index = index_class(name).create(dim, **params)``; optionally ``index.train(vectors)`` (else
an index that :attr:`~DenseIndex.needs_training` is trained on its first :meth:`~DenseIndex.add`);
``index.add(vectors)`` as often as needed (ids are ``0 .. ntotal-1`` in add order);
``index.search(queries, k, exclude=ids)``; ``index.save(path)``; ``DenseIndex.load(path, mmap=...)``.

**Scores** are always inner products d(z)·q, best first. Where fewer than ``k`` results exist (ids
excluded, or an approximate search that found fewer), the missing entries have id -1 and score -inf.

**Inner product through L2 (HNSW kinds).** HNSW graphs are built for a metric, so, as in DPR's
``DenseHNSWFlatIndexer``, each database vector x is stored as ``[x, sqrt(phi - |x|²)]`` with
``phi = max |x|²``, and each query q as ``[q, 0]``. All stored vectors then have squared norm phi,
``|q' - x'|² = |q|² + phi - 2·q·x``, so L2 order equals inner-product order and the score is recovered
as ``(|q|² + phi - dist) / 2``. phi is fixed by the first batch added (hnsw) or by the vectors given to
:meth:`~DenseIndex.train` (hnsw_sq8), or up front by the ``phi`` parameter (e.g. ``phi=1`` for
unit-length vectors). A later batch holding a vector with a larger norm is rejected with an
:class:`InputError`: add all vectors in one call, or pass a ``phi`` bound at creation.

**Files.** :meth:`~DenseIndex.save` writes one plain FAISS file, atomically (temporary file in the same
directory, then rename). There is no sidecar: the kind is recognised from the FAISS index type (see each
class's ``_wraps``), and every parameter lives in the FAISS structures themselves (HNSW ``M``/``efs``,
IVF ``nlist``/``nprobe``, PQ ``m``/``nbits``, the OPQ transform). phi is recovered from the stored
vectors (hnsw: every stored vector has squared norm phi) or kept in the scalar quantizer's
``rangestat_arg`` field (hnsw_sq8; FAISS reads that field only while training). An empty ``hnsw``
index therefore forgets an explicit ``phi`` when saved, and an untrained ``ivfpq`` index (whose
FAISS index is only built at training, when the default ``nlist`` is known) cannot be saved.

**Memory mapping.** ``load(path, mmap=True)`` maps the file read-only (``IO_FLAG_MMAP_IFC |
IO_FLAG_READ_ONLY``; supported by FAISS 1.11+ for the flat storage, the HNSW graph and the IVF lists),
so the vectors are paged in on demand rather than read into memory. Such an index is read-only:
:meth:`~DenseIndex.add` raises (FAISS would abort the process when growing a mapped array).
"""

import math
import os
from pathlib import Path
from typing import Any, ClassVar, Self

import faiss
import numpy as np

from openbook.errors import InputError
from openbook.index.atomic import atomic_output

INDEX_TYPES: dict[str, type["DenseIndex"]] = {}
"""Registered index kinds by canonical ``type_name``."""

INDEX_ALIASES: dict[str, str] = {}
"""Other accepted names (e.g. ``flat_ip``) mapped to a canonical ``type_name``."""

ADD_CHUNK_ROWS = 65_536
"""Vectors transformed and handed to FAISS at a time, bounding the temporary copies made while adding."""


def register_index(cls: type["DenseIndex"]) -> type["DenseIndex"]:
    """Class decorator: make ``cls`` constructible and loadable by its ``type_name`` and ``aliases``."""
    INDEX_TYPES[cls.type_name] = cls
    for alias in cls.aliases:
        INDEX_ALIASES[alias] = cls.type_name
    return cls


def index_class(type_name: str) -> type["DenseIndex"]:
    """Return the registered index class for ``type_name`` (or an alias) or raise InputError listing them."""
    name = INDEX_ALIASES.get(type_name, type_name) if isinstance(type_name, str) else type_name
    try:
        return INDEX_TYPES[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(INDEX_TYPES))
        aliases = "; ".join(f"{alias} = {name}" for alias, name in sorted(INDEX_ALIASES.items()))
        raise InputError(
            f"unknown index type {type_name!r}; known types: {known}" + (f" (aliases: {aliases})" if aliases else "")
        ) from None


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


def check_exclude(exclude) -> np.ndarray | None:
    """Return the ids in ``exclude`` as a sorted unique int64 array (None when there are none)."""
    if exclude is None:
        return None
    array = np.asarray(exclude)
    if array.size == 0:
        return None
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise InputError(
            f"exclude must be a 1-D array of integer passage ids, got {array.dtype} array of shape {array.shape}"
        )
    return np.unique(array.astype(np.int64))


def _positive_int(value, name: str, owner: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{owner} index parameter {name} must be a positive integer, got {value!r}")
    return int(value)


def _optional_positive_int(value, name: str, owner: str) -> int | None:
    return None if value is None else _positive_int(value, name, owner)


def _optional_phi(value, owner: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not value > 0:
        raise InputError(f"{owner} index parameter phi must be a positive number (a bound on |x|²), got {value!r}")
    if not math.isfinite(value):
        raise InputError(f"{owner} index parameter phi must be finite, got {value!r}")
    return float(value)


def _squared_norms(vectors: np.ndarray) -> np.ndarray:
    """Row-wise squared norms in float64 (exact enough to compare against phi)."""
    out = np.empty(len(vectors), dtype=np.float64)
    for start in range(0, len(vectors), ADD_CHUNK_ROWS):
        chunk = vectors[start : start + ADD_CHUNK_ROWS].astype(np.float64)
        out[start : start + len(chunk)] = np.einsum("ij,ij->i", chunk, chunk)
    return out


class _NeedsTraining:
    """``needs_training``: on the class, whether a new index of that kind must be trained before vectors
    are added; on an instance, whether that index still must be (false once trained)."""

    def __get__(self, index: "DenseIndex | None", owner: type["DenseIndex"]) -> bool:
        if index is None:
            return owner.requires_training
        return owner.requires_training and not index._is_trained()


class DenseIndex:
    """Base class: a FAISS index of ``dim``-dimensional float32 vectors searched by inner product."""

    type_name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    requires_training: ClassVar[bool] = False
    param_defaults: ClassVar[dict[str, Any]] = {}
    """Parameters :meth:`create` accepts, with their defaults (None: chosen from the data)."""
    needs_training = _NeedsTraining()

    def __init__(self, faiss_index: faiss.Index, *, read_only: bool = False):
        """Wrap an existing FAISS index (use :meth:`create` or :meth:`load` rather than calling this)."""
        self._index = faiss_index
        self._read_only = read_only

    # -- construction -------------------------------------------------------------------------------

    @classmethod
    def create(cls, dim: int, **params) -> Self:
        """Return a new empty index of this kind for ``dim``-dimensional vectors.

        ``params`` are the kind's parameters (:attr:`param_defaults` lists them with their defaults).
        """
        if cls is DenseIndex or not cls.type_name:
            raise TypeError("DenseIndex is abstract: create a registered subclass, e.g. index_class('hnsw')")
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise InputError(f"index dimension must be a positive integer, got {dim!r}")
        unknown = sorted(set(params) - set(cls.param_defaults))
        if unknown:
            takes = ", ".join(cls.param_defaults) if cls.param_defaults else "no parameters"
            raise InputError(
                f"{cls.type_name} index: unknown parameter(s) {', '.join(unknown)}; it takes {takes}"
            )
        return cls._create(int(dim), {**cls.param_defaults, **params})

    @classmethod
    def _create(cls, dim: int, params: dict[str, Any]) -> Self:
        """Subclasses: validate ``params`` (all keys present) and return the new empty index."""
        raise NotImplementedError

    # -- properties ---------------------------------------------------------------------------------

    @property
    def dim(self) -> int:
        """Dimension of the indexed vectors."""
        return self._index.d

    @property
    def ntotal(self) -> int:
        """Number of vectors in the index."""
        return self._index.ntotal

    @property
    def params(self) -> dict[str, Any]:
        """The parameters of this index (JSON-serialisable; ``create(dim, **params)`` accepts them)."""
        return {}

    @property
    def read_only(self) -> bool:
        """Whether the index was loaded memory-mapped (then it cannot be added to)."""
        return self._read_only

    def _is_trained(self) -> bool:
        return self._index.is_trained

    def __len__(self) -> int:
        return self.ntotal

    def __repr__(self) -> str:
        params = "".join(f", {name}={value!r}" for name, value in self.params.items())
        return f"{type(self).__name__}(dim={self.dim}, ntotal={self.ntotal}{params})"

    # -- building -----------------------------------------------------------------------------------

    def train(self, vectors) -> None:
        """Train the index on float32 ``(n, dim)`` vectors, typically all of them; a no-op for kinds that
        need no training or once trained."""
        vectors = as_float32_matrix(vectors, "training vectors", self.dim)
        if self.needs_training:
            self._check_writable()
            if len(vectors) == 0:
                raise InputError(f"cannot train a {self.type_name} index on zero vectors")
            self._train(vectors)

    def _train(self, vectors: np.ndarray) -> None:
        """Subclasses that need training: train on the validated ``vectors``."""
        raise NotImplementedError

    def add(self, vectors) -> None:
        """Append float32 ``(n, dim)`` vectors; their ids are ``ntotal, ntotal+1, ...`` in order.

        An index that still :attr:`needs_training` is first trained on these vectors.
        """
        self._check_writable()
        vectors = as_float32_matrix(vectors, "vectors to add", self.dim)
        if len(vectors) == 0:
            return
        if self.needs_training:
            self._train(vectors)
        self._add(vectors)

    def _add(self, vectors: np.ndarray) -> None:
        self._index.add(vectors)

    def _check_writable(self) -> None:
        if self._read_only:
            raise InputError(
                f"this {self.type_name} index was loaded with mmap=True and is read-only; "
                "load it with mmap=False to change it"
            )

    # -- searching ----------------------------------------------------------------------------------

    def search(self, queries, k: int, exclude=None) -> tuple[np.ndarray, np.ndarray]:
        """Return the top-``k`` ``(scores float32 (m, k'), ids int64 (m, k'))`` for ``(m, dim)`` queries.

        Scores are inner products d·q, best first. A single 1-D query is accepted as ``m == 1``. ``k``
        larger than :attr:`ntotal` is reduced to ``k' = ntotal`` (callers that want to warn about it
        should do so themselves). ``exclude`` is an optional array of ids never to return (e.g. deleted
        passages). Missing results (too many excluded, or an approximate search that found fewer) have id
        -1 and score -inf.
        """
        k = check_k(k)
        queries = as_float32_matrix(queries, "query vectors", self.dim, allow_1d=True)
        if self.ntotal == 0:
            raise InputError("cannot search an empty index: add vectors first")
        excluded = check_exclude(exclude)
        if excluded is None:
            scores, ids = self._search(queries, min(k, self.ntotal), None)
        else:
            # both selector objects must stay referenced while FAISS uses them
            batch = faiss.IDSelectorBatch(excluded)
            selector = faiss.IDSelectorNot(batch)
            scores, ids = self._search(queries, min(k, self.ntotal), selector)
            del selector, batch
        scores = np.asarray(scores, dtype=np.float32)
        ids = np.asarray(ids, dtype=np.int64)
        scores[ids < 0] = -np.inf
        return scores, ids

    def _search(self, queries: np.ndarray, k: int, selector) -> tuple[np.ndarray, np.ndarray]:
        """Subclasses: FAISS search of validated queries, returning inner-product scores and ids."""
        params = None if selector is None else faiss.SearchParameters(sel=selector)
        return self._index.search(queries, k, params=params)

    # -- files --------------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Write the index to ``path`` atomically (a temporary file in the same directory, then rename).

        On any failure the temporary file is removed and an existing ``path`` is left untouched.
        """
        faiss_index = self._faiss_index_to_save()
        with atomic_output(path) as tmp:
            faiss.write_index(faiss_index, str(tmp))

    def _faiss_index_to_save(self) -> faiss.Index:
        return self._index

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = False) -> Self:
        """Read an index written by :meth:`save`; with ``mmap=True`` map it read-only instead of reading it.

        Called on :class:`DenseIndex` itself, the registered kind whose FAISS type matches is used;
        called on a kind, the file must hold that kind.
        """
        path = Path(path)
        if not path.is_file():
            raise InputError(f"{path}: no such index file")
        flags = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY if mmap else 0
        try:
            faiss_index = faiss.read_index(str(path), flags)
        except RuntimeError as exc:
            reason = str(exc).strip().splitlines()[-1]
            raise InputError(f"{path}: not a readable FAISS index ({reason})") from None
        kind = cls._subclass_for(faiss_index, path)
        return kind._from_faiss(faiss_index, read_only=bool(mmap), path=path)

    @classmethod
    def _from_faiss(cls, faiss_index: faiss.Index, read_only: bool, path: Path) -> Self:
        """Subclasses: wrap a FAISS index read from ``path`` (recovering any extra state)."""
        return cls(faiss_index, read_only=read_only)

    @classmethod
    def _subclass_for(cls, faiss_index: faiss.Index, path: Path) -> type["DenseIndex"]:
        """Pick the class that wraps ``faiss_index``: ``cls`` itself if concrete, else by FAISS type."""
        candidates = [cls] if cls is not DenseIndex else list(INDEX_TYPES.values())
        for candidate in candidates:
            if candidate._wraps(faiss_index):
                return candidate
        expected = cls.type_name or "any of " + ", ".join(sorted(INDEX_TYPES))
        raise InputError(f"{path}: holds a FAISS {_describe(faiss_index)}, not a {expected} index")

    @classmethod
    def _wraps(cls, faiss_index: faiss.Index) -> bool:
        """Subclasses: whether ``faiss_index`` is the kind of FAISS index this class manages."""
        raise NotImplementedError


def _describe(faiss_index: faiss.Index) -> str:
    metric = {faiss.METRIC_INNER_PRODUCT: "inner-product", faiss.METRIC_L2: "L2"}.get(faiss_index.metric_type, "")
    return f"{type(faiss_index).__name__} ({metric} metric)" if metric else type(faiss_index).__name__


# ---------------------------------------------------------------------------------------------------
# flat


@register_index
class FlatIPIndex(DenseIndex):
    """Exact maximum inner product search (``faiss.IndexFlatIP``): brute force, no approximation."""

    type_name = "flat"
    aliases = ("flat_ip",)

    @classmethod
    def _create(cls, dim: int, params: dict[str, Any]) -> Self:
        return cls(faiss.IndexFlatIP(dim))

    @classmethod
    def _wraps(cls, faiss_index: faiss.Index) -> bool:
        is_flat = isinstance(faiss_index, faiss.IndexFlat)
        return is_flat and faiss_index.metric_type == faiss.METRIC_INNER_PRODUCT


# ---------------------------------------------------------------------------------------------------
# HNSW (through DPR's inner-product-to-L2 transform)


class _TransformedHNSW(DenseIndex):
    """Shared code of the HNSW kinds: an L2 HNSW over ``[x, sqrt(phi - |x|²)]`` (see module docs)."""

    param_defaults = {"M": 32, "ef_construction": 200, "ef_search": 128, "phi": None}

    def __init__(self, faiss_index: faiss.Index, *, read_only: bool = False, phi: float | None = None):
        super().__init__(faiss_index, read_only=read_only)
        self._phi = phi

    @classmethod
    def _create(cls, dim: int, params: dict[str, Any]) -> Self:
        m = _positive_int(params["M"], "M", cls.type_name)
        ef_construction = _positive_int(params["ef_construction"], "ef_construction", cls.type_name)
        ef_search = _positive_int(params["ef_search"], "ef_search", cls.type_name)
        phi = _optional_phi(params["phi"], cls.type_name)
        faiss_index = cls._new_hnsw(dim + 1, m)
        faiss_index.hnsw.efConstruction = ef_construction
        faiss_index.hnsw.efSearch = ef_search
        return cls(faiss_index, phi=phi)

    @classmethod
    def _new_hnsw(cls, stored_dim: int, m: int) -> faiss.Index:
        raise NotImplementedError

    @property
    def dim(self) -> int:
        return self._index.d - 1

    @property
    def phi(self) -> float | None:
        """The bound on |x|² of the transform (None until fixed by data or the ``phi`` parameter)."""
        return self._phi

    @property
    def ef_search(self) -> int:
        """Size of the HNSW candidate list at search time (larger: slower, higher recall); settable."""
        return self._index.hnsw.efSearch

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        self._index.hnsw.efSearch = _positive_int(value, "ef_search", self.type_name)

    @property
    def params(self) -> dict[str, Any]:
        hnsw = self._index.hnsw
        return {
            "M": int(hnsw.nb_neighbors(1)),
            "ef_construction": int(hnsw.efConstruction),
            "ef_search": int(hnsw.efSearch),
            "phi": self._phi,
        }

    def _augment(self, vectors: np.ndarray, phi: float, what: str) -> np.ndarray:
        """``[x, sqrt(phi - |x|²)]`` for each row, refusing rows whose |x|² exceeds phi."""
        norms = _squared_norms(vectors)
        largest = float(norms.max(initial=0.0))
        if largest > phi * (1 + 1e-5) + 1e-12:
            raise InputError(
                f"{what} include a vector with squared norm {largest:.6g}, above phi = {phi:.6g} of this "
                f"{self.type_name} index (DPR's inner-product-to-L2 transform needs |x|² <= phi for every "
                "vector, and phi was fixed by the first vectors added or trained on); add all vectors in "
                "one call, or create the index with a larger phi bound (phi=1 for unit-length vectors)"
            )
        extra = np.sqrt(np.maximum(phi - norms, 0.0)).astype(np.float32)
        return np.hstack([vectors, extra[:, None]])

    def _add(self, vectors: np.ndarray) -> None:
        first_batch = self.ntotal == 0
        if self._phi is None:
            self._phi = float(_squared_norms(vectors).max())
        for start in range(0, len(vectors), ADD_CHUNK_ROWS):
            chunk = vectors[start : start + ADD_CHUNK_ROWS]
            self._index.add(self._augment(chunk, self._phi, "vectors to add"))
        if first_batch:
            self._phi = self._stored_phi()  # exactly the value a reloaded index will recover

    def _stored_phi(self) -> float:
        """phi as the saved file will carry it."""
        raise NotImplementedError

    def _search(self, queries: np.ndarray, k: int, selector) -> tuple[np.ndarray, np.ndarray]:
        augmented = np.hstack([queries, np.zeros((len(queries), 1), dtype=np.float32)])
        if selector is None:
            distances, ids = self._index.search(augmented, k)
        else:
            params = faiss.SearchParametersHNSW(efSearch=self.ef_search, sel=selector)
            distances, ids = self._index.search(augmented, k, params=params)
        query_norms = _squared_norms(queries)[:, None]
        scores = (query_norms + self._phi - distances.astype(np.float64)) / 2
        return scores.astype(np.float32), ids


@register_index
class HNSWIndex(_TransformedHNSW):
    """Approximate search on an HNSW graph over the exact vectors (``faiss.IndexHNSWFlat``, DPR's
    ``DenseHNSWFlatIndexer``).

    Parameters: ``M`` (graph degree; 2·M links on the bottom layer, default 32), ``ef_construction``
    (candidate list while building, default 200), ``ef_search`` (candidate list while searching,
    default 128; also settable later), ``phi`` (bound on |x|²; default: the largest |x|² of the first
    batch added). No training. Scores are exact inner products of the returned vectors.
    """

    type_name = "hnsw"

    @classmethod
    def _new_hnsw(cls, stored_dim: int, m: int) -> faiss.Index:
        return faiss.IndexHNSWFlat(stored_dim, m)

    @classmethod
    def _from_faiss(cls, faiss_index: faiss.Index, read_only: bool, path: Path) -> Self:
        index = cls(faiss_index, read_only=read_only)
        index._phi = index._stored_phi() if faiss_index.ntotal else None
        return index

    def _stored_phi(self) -> float:
        """phi as stored: the squared norm of the first stored (transformed) vector."""
        first = faiss.downcast_index(self._index.storage).reconstruct(0).astype(np.float64)
        return float(first @ first)

    @classmethod
    def _wraps(cls, faiss_index: faiss.Index) -> bool:
        return type(faiss_index) is faiss.IndexHNSWFlat and faiss_index.metric_type == faiss.METRIC_L2


@register_index
class HNSWSQ8Index(_TransformedHNSW):
    """HNSW over 8-bit scalar-quantized vectors (``faiss.IndexHNSWSQ``, DPR's ``DenseHNSWSQIndexer``).

    Same parameters as :class:`HNSWIndex`. Needs training: :meth:`train` fixes phi (unless given) from
    all the vectors it is given and sets each dimension's quantization range to their exact min/max
    (computed in chunks, so all vectors can be passed). Vectors later added outside that range are
    clipped. Scores are inner products of the quantized vectors, so approximate.
    """

    type_name = "hnsw_sq8"
    requires_training = True

    @classmethod
    def _new_hnsw(cls, stored_dim: int, m: int) -> faiss.Index:
        return faiss.IndexHNSWSQ(stored_dim, faiss.ScalarQuantizer.QT_8bit, m)

    def _quantizer(self) -> faiss.ScalarQuantizer:
        return faiss.downcast_index(self._index.storage).sq

    def _train(self, vectors: np.ndarray) -> None:
        if self._phi is None:
            self._phi = float(_squared_norms(vectors).max())
        low = np.full(self.dim + 1, np.inf, dtype=np.float32)
        high = np.full(self.dim + 1, -np.inf, dtype=np.float32)
        for start in range(0, len(vectors), ADD_CHUNK_ROWS):
            chunk = self._augment(vectors[start : start + ADD_CHUNK_ROWS], self._phi, "training vectors")
            low = np.minimum(low, chunk.min(axis=0))
            high = np.maximum(high, chunk.max(axis=0))
        sq = self._quantizer()
        sq.rangestat = faiss.ScalarQuantizer.RS_minmax
        sq.rangestat_arg = 0.0
        # min/max training on the two rows (low, high) gives exactly the per-dimension ranges of all rows
        self._index.train(np.ascontiguousarray(np.stack([low, high])))
        # rangestat_arg is only read by training: keep phi in it so that the saved file carries it
        sq.rangestat_arg = self._phi
        self._phi = self._stored_phi()

    def _stored_phi(self) -> float:
        return float(self._quantizer().rangestat_arg)

    @classmethod
    def _from_faiss(cls, faiss_index: faiss.Index, read_only: bool, path: Path) -> Self:
        index = cls(faiss_index, read_only=read_only)
        if faiss_index.is_trained:
            phi = index._stored_phi()
            if not phi > 0:
                raise InputError(f"{path}: HNSW-SQ8 index without the phi of its transform; rebuild it")
            index._phi = phi
        return index

    @classmethod
    def _wraps(cls, faiss_index: faiss.Index) -> bool:
        if type(faiss_index) is not faiss.IndexHNSWSQ or faiss_index.metric_type != faiss.METRIC_L2:
            return False
        storage = faiss.downcast_index(faiss_index.storage)
        return storage.sq.qtype == faiss.ScalarQuantizer.QT_8bit


# ---------------------------------------------------------------------------------------------------
# IVF-PQ


def default_nlist(n: int) -> int:
    """Inverted lists for ``n`` vectors: about 4·√n (FAISS's usual guideline is 4·√n to 16·√n)."""
    return max(1, int(round(4 * math.sqrt(n))))


def default_pq_m(dim: int) -> int:
    """Sub-quantizers for ``dim``: the largest divisor of ``dim`` that is at most dim/12 (64 for 768).

    About 12 dimensions per 8-bit sub-quantizer keeps 768-d vectors at 64 bytes of code (+ 8 bytes of
    id in the inverted list), well under 100 bytes per vector, with recall@10 above 0.8 at nprobe ~ 1/16
    of the lists on clustered data (see bench/index_scale.py).
    """
    limit = max(1, dim // 12)
    return max(m for m in range(1, limit + 1) if dim % m == 0)


def default_nprobe(nlist: int) -> int:
    """Lists visited per query: 1/16 of them, at least 1 and at most 256."""
    return max(1, min(256, nlist // 16))


@register_index
class IVFPQIndex(DenseIndex):
    """Inverted file + product quantization (``faiss.IndexIVFPQ``, inner-product metric), optionally
    behind an OPQ rotation (``IndexPreTransform(OPQMatrix, ...)``); the compressed index kind.

    Parameters: ``nlist`` (inverted lists; default :func:`default_nlist` of the number of vectors given
    to :meth:`train`), ``m`` (sub-quantizers, must divide dim; default :func:`default_pq_m`), ``nbits``
    (bits per sub-quantizer code, default 8), ``nprobe`` (lists visited per query; default
    :func:`default_nprobe`; settable later), ``opq`` (learn an OPQ rotation first, default False).
    Each vector costs m·nbits/8 bytes of code plus 8 bytes of id. Needs training: on a random sample of
    at most :attr:`max_train_vectors` of the vectors given, of which there must be at least nlist and
    2**nbits. Scores are PQ approximations of the inner products.
    """

    type_name = "ivfpq"
    requires_training = True
    param_defaults = {"nlist": None, "m": None, "nbits": 8, "nprobe": None, "opq": False}
    max_train_vectors: ClassVar[int] = 100_000
    train_seed: ClassVar[int] = 0

    def __init__(
        self,
        faiss_index: faiss.Index | None,
        *,
        read_only: bool = False,
        dim: int | None = None,
        settings: dict[str, Any] | None = None,
    ):
        super().__init__(faiss_index, read_only=read_only)
        self._dim = faiss_index.d if faiss_index is not None else dim
        self._settings = settings or {}  # the create() parameters, until the FAISS index exists

    @classmethod
    def _create(cls, dim: int, params: dict[str, Any]) -> Self:
        owner = cls.type_name
        nlist = _optional_positive_int(params["nlist"], "nlist", owner)
        m = _positive_int(params["m"], "m", owner) if params["m"] is not None else default_pq_m(dim)
        nbits = _positive_int(params["nbits"], "nbits", owner)
        nprobe = _optional_positive_int(params["nprobe"], "nprobe", owner)
        opq = params["opq"]
        if dim % m:
            raise InputError(f"{owner} index parameter m={m} must divide the vector dimension {dim}")
        if nbits > 16:
            raise InputError(f"{owner} index parameter nbits must be at most 16, got {nbits}")
        if not isinstance(opq, bool):
            raise InputError(f"{owner} index parameter opq must be true or false, got {opq!r}")
        settings = {"nlist": nlist, "m": m, "nbits": nbits, "nprobe": nprobe, "opq": opq}
        return cls(None, dim=dim, settings=settings)

    def _ivf(self) -> faiss.IndexIVFPQ:
        return faiss.downcast_index(faiss.extract_index_ivf(self._index))

    def _is_trained(self) -> bool:
        return self._index is not None and self._index.is_trained

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def ntotal(self) -> int:
        return 0 if self._index is None else self._index.ntotal

    @property
    def nprobe(self) -> int | None:
        """Inverted lists visited per query (larger: slower, higher recall); settable."""
        if self._index is None:
            return self._settings["nprobe"]
        return int(self._ivf().nprobe)

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        value = _positive_int(value, "nprobe", self.type_name)
        if self._index is None:
            self._settings["nprobe"] = value
        else:
            self._ivf().nprobe = value

    @property
    def params(self) -> dict[str, Any]:
        if self._index is None:
            return dict(self._settings)
        ivf = self._ivf()
        return {
            "nlist": int(ivf.nlist),
            "m": int(ivf.pq.M),
            "nbits": int(ivf.pq.nbits),
            "nprobe": int(ivf.nprobe),
            "opq": isinstance(self._index, faiss.IndexPreTransform),
        }

    @property
    def bytes_per_code(self) -> int:
        """Bytes of PQ code stored per vector (the inverted lists also store an 8-byte id per vector)."""
        settings = self.params
        return (settings["m"] * settings["nbits"] + 7) // 8

    def _train(self, vectors: np.ndarray) -> None:
        settings = self._settings
        nlist = settings["nlist"] or default_nlist(len(vectors))
        if len(vectors) > self.max_train_vectors:
            rng = np.random.default_rng(self.train_seed)
            rows = np.sort(rng.choice(len(vectors), self.max_train_vectors, replace=False))
            sample = vectors[rows]
        else:
            sample = vectors
        needed = max(nlist, 2 ** settings["nbits"])
        if len(sample) < needed:
            raise InputError(
                f"an ivfpq index with nlist={nlist} and nbits={settings['nbits']} needs at least {needed} "
                f"training vectors, got {len(sample)}; use fewer lists or bits, or a flat or hnsw index"
            )
        prefix = f"OPQ{settings['m']}," if settings["opq"] else ""
        factory = f"{prefix}IVF{nlist},PQ{settings['m']}x{settings['nbits']}"
        faiss_index = faiss.index_factory(self.dim, factory, faiss.METRIC_INNER_PRODUCT)
        ivf = faiss.downcast_index(faiss.extract_index_ivf(faiss_index))
        # FAISS warns below 39 points per centroid; a small collection is still clustered fine
        ivf.cp.min_points_per_centroid = 1
        ivf.pq.cp.min_points_per_centroid = 1
        faiss_index.train(sample)
        ivf.nprobe = min(nlist, settings["nprobe"] or default_nprobe(nlist))
        self._index = faiss_index

    def _search(self, queries: np.ndarray, k: int, selector) -> tuple[np.ndarray, np.ndarray]:
        if selector is None:
            return self._index.search(queries, k)
        params = faiss.SearchParametersIVF(nprobe=self.nprobe, sel=selector)
        return self._index.search(queries, k, params=params)

    def _faiss_index_to_save(self) -> faiss.Index:
        if self._index is None:
            raise InputError("cannot save an untrained ivfpq index: train it or add vectors first")
        return self._index

    @classmethod
    def _wraps(cls, faiss_index: faiss.Index) -> bool:
        inner = faiss_index
        if isinstance(faiss_index, faiss.IndexPreTransform):
            chain = faiss_index.chain
            if chain.size() != 1 or not isinstance(faiss.downcast_VectorTransform(chain.at(0)), faiss.OPQMatrix):
                return False
            inner = faiss.downcast_index(faiss_index.index)
        return type(inner) is faiss.IndexIVFPQ and inner.metric_type == faiss.METRIC_INNER_PRODUCT
