"""Dense maximum-inner-product indexes over passage vectors d(z), as in DPR / RAG.

Every kind wraps one FAISS index behind the same small numpy API (DPR's ``DenseIndexer`` family) and
registers itself under a ``type_name`` that a knowledge base records in its manifest:

============  ====================================================================================
``flat``      exact inner-product search (``IndexFlatIP``); 4·dim bytes per vector. ``flat_ip`` is an
              alias: knowledge bases written before the other kinds existed record that name.
``hnsw``      HNSW graph over the exact vectors (``IndexHNSWFlat``) through DPR's inner-product-to-L2
              transform (below); params ``M=32, ef_construction=200, ef_search=128``. About
              4·(dim+1) + 8·M bytes per vector (3,350 for 768-d). Exact scores.
``ivfpq``     inverted file + product quantization with an OPQ rotation (``IndexIVFPQ``), on the same
              transform; params ``nlist`` (default 4·√n), ``m`` (default dim/12: 64 for 768-d), ``nbits=8``,
              ``nprobe`` (default nlist/16, at most 256), ``opq=True``. m·nbits/8 bytes of code + 8 of id per vector
              (72 for 768-d). Needs training (on ≤ 100,000 sampled vectors). Approximate scores.
``hnsw_sq8``  ``hnsw`` with the vectors stored as 8-bit scalar-quantized codes (``IndexHNSWSQ``, DPR's
              ``DenseHNSWSQIndexer``); about dim + 8·M bytes per vector. Needs training (value ranges).
              Approximate scores.
============  ====================================================================================

Usage: ``index = index_class(name).create(dim, **params)``; optionally ``index.train(vectors)`` (else an
index that :attr:`~DenseIndex.needs_training` is trained on its first :meth:`~DenseIndex.add`);
``index.add(vectors)`` as often as needed (ids are ``0 .. ntotal-1`` in add order);
``index.search(queries, k, exclude=ids)``; ``index.save(path)``; ``DenseIndex.load(path, mmap=...)``;
``index.params`` (JSON-serialisable, accepted back by ``create``) for the manifest.

**Scores** are always inner products d(z)·q, best first. ``k`` above ``ntotal`` is reduced to ``ntotal``.
Where fewer results exist (ids excluded, or an approximate search that found fewer), the missing
entries have id -1 and score -inf.

**Inner product through L2 (hnsw, hnsw_sq8, ivfpq).** Graphs and k-means are built for a metric, so, as
in DPR's ``DenseHNSWFlatIndexer``, each database vector x is stored as ``[x, sqrt(phi - |x|²)]`` with
``phi = max |x|²``, and each query q as ``[q, 0]``. All stored vectors then have squared norm phi,
``|q' - x'|² = |q|² + phi - 2·q·x``, so L2 order is inner-product order and the score is recovered as
``(|q|² + phi - dist) / 2``. phi is fixed by the first batch added (hnsw) or by all the vectors given
to :meth:`~DenseIndex.train` (hnsw_sq8, ivfpq), or up front by the ``phi`` parameter (e.g. ``phi=1``
for unit-length vectors). A later batch holding a vector with a larger norm is refused with an
:class:`~openbook.errors.InputError`: add (or train on) all vectors in one call, or pass a ``phi`` bound.

**Files.** :meth:`~DenseIndex.save` writes ONE plain FAISS file, atomically (a temporary file in the same
directory, then :func:`os.replace`); there is no sidecar. The kind is recognised from the FAISS
structure (each class's ``_wraps``) and every parameter lives in it: HNSW ``M``/``efConstruction``/
``efSearch``, IVF ``nlist``/``nprobe``, PQ ``m``/``nbits``, the OPQ matrix. phi is recovered from the
stored vectors (hnsw: each has squared norm phi) or from the bias of a padding
``LinearTransform`` in front of the index (hnsw_sq8, ivfpq; see :func:`_padding_transform`). So an
explicit ``phi`` is forgotten by saving an empty ``hnsw`` or untrained ``hnsw_sq8`` index, and an
untrained ``ivfpq`` index (whose FAISS index is built at training, when the default ``nlist`` is
known) cannot be saved.

**Memory mapping.** ``load(path, mmap=True)`` maps the file read-only (``IO_FLAG_MMAP_IFC |
IO_FLAG_READ_ONLY``, FAISS ≥ 1.11: the flat vectors, HNSW graph and storage, and IVF lists are mapped,
not read), so pages are read on demand. Such an index is read-only: :meth:`~DenseIndex.add` raises
(FAISS would abort the process on growing a mapped array).
"""

import math
import os
from pathlib import Path
from typing import Any, ClassVar, Self

import faiss
import numpy as np

from openbook.atomic import atomic_output
from openbook.errors import InputError, positive_int

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
        also = f" (aliases: {aliases})" if aliases else ""
        raise InputError(f"unknown index type {type_name!r}; known types: {known}{also}") from None


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
    return positive_int(k, "k (number of passages to retrieve)")


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
    return positive_int(value, f"{owner} index parameter {name}")


def _optional_positive_int(value, name: str, owner: str) -> int | None:
    return None if value is None else _positive_int(value, name, owner)


def _optional_phi(value, owner: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not value > 0:
        raise InputError(
            f"{owner} index parameter phi must be a positive number (a bound on |x|²), got {value!r}"
        )
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
    compressed: ClassVar[bool] = False
    """Stores lossy codes, so scores and rankings are approximations; a knowledge base re-ranks its
    candidates exactly from its float vectors (:meth:`rerank_with`)."""
    param_defaults: ClassVar[dict[str, Any]] = {}
    """Parameters :meth:`create` accepts, with their defaults (None: chosen from the data)."""
    needs_training = _NeedsTraining()

    def __init__(self, faiss_index: faiss.Index, *, read_only: bool = False):
        """Wrap an existing FAISS index (use :meth:`create` or :meth:`load` rather than calling this)."""
        self._index = faiss_index
        self._read_only = read_only
        self._rerank: tuple[np.ndarray, int] | None = None

    # -- construction -------------------------------------------------------------------------------

    @classmethod
    def create(cls, dim: int, **params) -> Self:
        """Return a new empty index of this kind for ``dim``-dimensional vectors.

        ``params`` are the kind's parameters (:attr:`param_defaults` lists them with their defaults).
        """
        if cls is DenseIndex or not cls.type_name:
            raise TypeError("DenseIndex is abstract: create a registered subclass, e.g. index_class('hnsw')")
        dim = positive_int(dim, "index dimension")
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
        -1 and score -inf. After :meth:`rerank_with`, candidates are re-scored exactly.
        """
        k = min(check_k(k), self.ntotal)
        queries = as_float32_matrix(queries, "query vectors", self.dim, allow_1d=True)
        if self.ntotal == 0:
            raise InputError("cannot search an empty index: add vectors first")
        fetch = k if self._rerank is None else min(self.ntotal, k * self._rerank[1])
        excluded = check_exclude(exclude)
        if excluded is None:
            scores, ids = self._search(queries, fetch, None)
        else:
            # both selector objects must stay referenced while FAISS uses them
            batch = faiss.IDSelectorBatch(excluded)
            selector = faiss.IDSelectorNot(batch)
            scores, ids = self._search(queries, fetch, selector)
            del selector, batch
        scores = np.asarray(scores, dtype=np.float32)
        ids = np.asarray(ids, dtype=np.int64)
        if self._rerank is not None:
            return self._rescore(queries, ids, k)
        scores[ids < 0] = -np.inf
        return scores, ids

    def rerank_with(self, vectors, factor: int = 10) -> None:
        """Re-score searches exactly from the original vectors (or stop, with ``vectors=None``).

        ``search(q, k)`` then fetches ``factor·k`` candidates from the index and returns the ``k`` with
        the largest exact inner products, computed from ``vectors[id]``: a float32 or float16
        ``(ntotal, dim)`` array such as a knowledge base's memory-mapped embeddings (only the candidates' rows are read).
        This lifts the recall and makes the scores exact for the compressed kinds (ivfpq, hnsw_sq8).
        It is a setting of this object, not saved with the index.
        """
        if vectors is None:
            self._rerank = None
            return
        factor = _positive_int(factor, "factor", "re-ranking")
        if not isinstance(vectors, np.ndarray) or vectors.dtype not in (np.float32, np.float16) or vectors.ndim != 2:
            raise InputError(
                "re-ranking vectors must be a float32 or float16 numpy array (n, dim), e.g. "
                "np.load(..., mmap_mode='r')"
            )
        if vectors.shape[1] != self.dim:
            raise InputError(
                f"re-ranking vectors have dimension {vectors.shape[1]} but the index has dimension {self.dim}"
            )
        self._rerank = (vectors, factor)

    def _rescore(self, queries: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best of the candidate ``ids`` by exact inner product with the re-ranking vectors."""
        vectors = self._rerank[0]
        if int(ids.max(initial=-1)) >= len(vectors):
            raise InputError(
                f"the index holds {self.ntotal} vectors but only {len(vectors)} re-ranking vectors were given"
            )
        out_scores = np.empty((len(ids), k), dtype=np.float32)
        out_ids = np.empty((len(ids), k), dtype=np.int64)
        rows = max(1, (1 << 24) // max(1, ids.shape[1] * self.dim))  # ~64 MB of gathered vectors at a time
        for start in range(0, len(ids), rows):
            chunk = ids[start : start + rows]
            found = chunk >= 0
            gathered = np.asarray(vectors[np.where(found, chunk, 0).ravel()], dtype=np.float32)
            gathered = gathered.reshape(*chunk.shape, self.dim)
            exact = np.einsum("qcd,qd->qc", gathered, queries[start : start + rows])
            exact[~found] = -np.inf
            order = np.argsort(-exact, axis=1, kind="stable")[:, :k]
            out_scores[start : start + rows] = np.take_along_axis(exact, order, axis=1)
            out_ids[start : start + rows] = np.where(
                np.take_along_axis(found, order, axis=1), np.take_along_axis(chunk, order, axis=1), -1
            )
        return out_scores, out_ids

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
        known = ", ".join(sorted(INDEX_TYPES))
        expected = f"a {cls.type_name}" if cls.type_name else f"an openbook ({known})"
        raise InputError(f"{path}: holds a FAISS {_describe(faiss_index)}, not {expected} index")

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
# inner product through L2 (DPR's transform), shared by hnsw, hnsw_sq8 and ivfpq


class _InnerProductViaL2(DenseIndex):
    """Kinds that store ``[x, sqrt(phi - |x|²)]`` in an L2 index and query it with ``[q, 0]`` (module docs).

    Subclasses set ``self._phi`` (None until fixed) and implement :meth:`_search_l2`.
    """

    _phi: float | None = None

    @property
    def dim(self) -> int:
        return self._index.d - 1

    @property
    def phi(self) -> float | None:
        """The bound on |x|² of the transform (None until fixed by data or the ``phi`` parameter)."""
        return self._phi

    def _fix_phi(self, vectors: np.ndarray) -> None:
        """Fix phi, unless already fixed, as the largest |x|² among ``vectors``."""
        if self._phi is None:
            self._phi = float(_squared_norms(vectors).max())

    def _augment(self, vectors: np.ndarray, what: str) -> np.ndarray:
        """``[x, sqrt(phi - |x|²)]`` for each row (float32 (n, dim+1)), refusing rows with |x|² > phi."""
        norms = _squared_norms(vectors)
        largest = float(norms.max(initial=0.0))
        if largest > self._phi * (1 + 1e-5) + 1e-12:
            raise InputError(
                f"{what} include a vector with squared norm {largest:.6g}, above phi = {self._phi:.6g} of this "
                f"{self.type_name} index (DPR's inner-product-to-L2 transform needs |x|² <= phi for every "
                "vector, and phi was fixed by the first vectors added or trained on); add all vectors in "
                "one call, or create the index with a larger phi bound (phi=1 for unit-length vectors)"
            )
        extra = np.sqrt(np.maximum(self._phi - norms, 0.0)).astype(np.float32)
        return np.hstack([vectors, extra[:, None]])

    def _add_augmented(self, vectors: np.ndarray) -> None:
        """Transform and add ``vectors`` in chunks (bounding the temporary copies)."""
        for start in range(0, len(vectors), ADD_CHUNK_ROWS):
            self._index.add(self._augment(vectors[start : start + ADD_CHUNK_ROWS], "vectors to add"))

    def _search(self, queries: np.ndarray, k: int, selector) -> tuple[np.ndarray, np.ndarray]:
        augmented = np.hstack([queries, np.zeros((len(queries), 1), dtype=np.float32)])
        distances, ids = self._search_l2(augmented, k, selector)
        # |q' - x'|² = |q|² + phi - 2 q·x
        scores = (_squared_norms(queries)[:, None] + self._phi - distances.astype(np.float64)) / 2
        return scores.astype(np.float32), ids

    def _search_l2(self, augmented: np.ndarray, k: int, selector) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


def _padding_transform(d_in: int, d_out: int, phi: float) -> faiss.LinearTransform:
    """The FAISS linear map that pads ``d_in`` coordinates to ``d_out > d_in`` and records phi.

    The input coordinates are spread evenly among the outputs (so that each product-quantizer
    sub-vector gets its share of zeros rather than the last ones getting only zeros). The bias is zero
    except for phi on the first padding coordinate: a constant on every database and query vector, it
    cancels in every L2 distance, and it makes the FAISS file carry phi (read back by
    :func:`_recorded_phi`).
    """
    positions = (np.arange(d_in) * d_out) // d_in
    matrix = np.zeros((d_out, d_in), dtype=np.float32)
    matrix[positions, np.arange(d_in)] = 1.0
    bias = np.zeros(d_out, dtype=np.float32)
    bias[np.setdiff1d(np.arange(d_out), positions)[0]] = phi
    transform = faiss.LinearTransform(d_in, d_out, True)
    faiss.copy_array_to_vector(matrix.ravel(), transform.A)
    faiss.copy_array_to_vector(bias, transform.b)
    transform.is_trained = True
    return transform


def _recorded_phi(transform: faiss.LinearTransform) -> float:
    """phi as recorded by :func:`_padding_transform` (the only non-zero bias)."""
    return float(faiss.vector_to_array(transform.b).astype(np.float64).sum())


def _is_padding_transform(transform: faiss.VectorTransform) -> bool:
    transform = faiss.downcast_VectorTransform(transform)
    return type(transform) is faiss.LinearTransform and transform.have_bias and transform.d_out > transform.d_in


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _owning_pretransform(transform: faiss.VectorTransform, index: faiss.Index) -> faiss.IndexPreTransform:
    """``IndexPreTransform(transform, index)`` that owns (and will free) both, like one read from a file."""
    combined = faiss.IndexPreTransform(transform, index)
    combined.own_fields = True
    transform.this.disown()
    index.this.disown()
    return combined


# ---------------------------------------------------------------------------------------------------
# HNSW


class _HNSWParams(_InnerProductViaL2):
    """Parameters shared by the two HNSW kinds."""

    param_defaults = {"M": 32, "ef_construction": 200, "ef_search": 128, "phi": None}

    @classmethod
    def _hnsw_settings(cls, params: dict[str, Any]) -> tuple[int, int, int, float | None]:
        owner = cls.type_name
        return (
            _positive_int(params["M"], "M", owner),
            _positive_int(params["ef_construction"], "ef_construction", owner),
            _positive_int(params["ef_search"], "ef_search", owner),
            _optional_phi(params["phi"], owner),
        )

    def _graph(self) -> faiss.IndexHNSW:
        raise NotImplementedError

    @property
    def ef_search(self) -> int:
        """Size of the HNSW candidate list at search time (larger: slower, higher recall); settable."""
        return int(self._graph().hnsw.efSearch)

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        self._graph().hnsw.efSearch = _positive_int(value, "ef_search", self.type_name)

    @property
    def params(self) -> dict[str, Any]:
        hnsw = self._graph().hnsw
        return {
            "M": int(hnsw.nb_neighbors(1)),
            "ef_construction": int(hnsw.efConstruction),
            "ef_search": int(hnsw.efSearch),
            "phi": self._phi,
        }

    def _search_l2(self, augmented: np.ndarray, k: int, selector) -> tuple[np.ndarray, np.ndarray]:
        if selector is None:
            return self._index.search(augmented, k)
        params = faiss.SearchParametersHNSW(efSearch=self.ef_search, sel=selector)
        return self._index.search(augmented, k, params=params)


@register_index
class HNSWIndex(_HNSWParams):
    """Approximate search on an HNSW graph over the exact vectors (``faiss.IndexHNSWFlat`` of dimension
    dim+1, DPR's ``DenseHNSWFlatIndexer``).

    Parameters: ``M`` (graph degree; 2·M links on the bottom layer, default 32), ``ef_construction``
    (candidate list while building, default 200), ``ef_search`` (candidate list while searching,
    default 128; also settable later), ``phi`` (bound on |x|²; default: the largest |x|² of the first
    batch added). No training. Scores are exact inner products of the returned vectors. phi is
    recovered on load from the stored vectors (all have squared norm phi).
    """

    type_name = "hnsw"

    @classmethod
    def _create(cls, dim: int, params: dict[str, Any]) -> Self:
        m, ef_construction, ef_search, phi = cls._hnsw_settings(params)
        faiss_index = faiss.IndexHNSWFlat(dim + 1, m)
        faiss_index.hnsw.efConstruction = ef_construction
        faiss_index.hnsw.efSearch = ef_search
        index = cls(faiss_index)
        index._phi = phi
        return index

    def _graph(self) -> faiss.IndexHNSW:
        return self._index

    def _add(self, vectors: np.ndarray) -> None:
        first_batch = self.ntotal == 0
        self._fix_phi(vectors)
        self._add_augmented(vectors)
        if first_batch:
            self._phi = self._stored_phi()  # exactly the value a reloaded index recovers

    def _stored_phi(self) -> float:
        """phi as stored: the squared norm of the first stored (transformed) vector."""
        first = faiss.downcast_index(self._index.storage).reconstruct(0).astype(np.float64)
        return float(first @ first)

    @classmethod
    def _from_faiss(cls, faiss_index: faiss.Index, read_only: bool, path: Path) -> Self:
        index = cls(faiss_index, read_only=read_only)
        index._phi = index._stored_phi() if faiss_index.ntotal else None
        return index

    @classmethod
    def _wraps(cls, faiss_index: faiss.Index) -> bool:
        return type(faiss_index) is faiss.IndexHNSWFlat and faiss_index.metric_type == faiss.METRIC_L2


@register_index
class HNSWSQ8Index(_HNSWParams):
    """HNSW over 8-bit scalar-quantized vectors (``faiss.IndexHNSWSQ``, DPR's ``DenseHNSWSQIndexer``).

    Same parameters as :class:`HNSWIndex`. The transformed vectors are padded with zeros to a multiple
    of 8 dimensions (FAISS's SIMD scalar-quantizer code needs that; without it building is ~7x slower)
    by a :func:`_padding_transform` in front of the graph, which also records phi. Needs training:
    :meth:`train` fixes phi (unless given) from all the vectors it is given and sets each dimension's
    quantization range to their exact min/max (computed in chunks, so all vectors can be passed).
    Vectors added later outside that range are clipped. Scores are inner products of the quantized
    vectors, so approximate.
    """

    type_name = "hnsw_sq8"
    compressed = True
    requires_training = True

    @classmethod
    def _create(cls, dim: int, params: dict[str, Any]) -> Self:
        m, ef_construction, ef_search, phi = cls._hnsw_settings(params)
        padded = _round_up(dim + 2, 8)  # dim + 1 transformed coordinates + at least one padding
        graph = faiss.IndexHNSWSQ(padded, faiss.ScalarQuantizer.QT_8bit, m)
        graph.hnsw.efConstruction = ef_construction
        graph.hnsw.efSearch = ef_search
        transform = _padding_transform(dim + 1, padded, 0.0)  # phi is recorded at training
        index = cls(_owning_pretransform(transform, graph))
        index._phi = phi
        return index

    def _graph(self) -> faiss.IndexHNSW:
        return faiss.downcast_index(self._index.index)

    def _transform(self) -> faiss.LinearTransform:
        return faiss.downcast_VectorTransform(self._index.chain.at(0))

    def _train(self, vectors: np.ndarray) -> None:
        self._fix_phi(vectors)
        transform = self._transform()
        recorded = _padding_transform(transform.d_in, transform.d_out, self._phi)  # same layout, phi set
        transform.b.swap(recorded.b)
        self._phi = _recorded_phi(transform)
        low = np.full(transform.d_out, np.inf, dtype=np.float32)
        high = np.full(transform.d_out, -np.inf, dtype=np.float32)
        for start in range(0, len(vectors), ADD_CHUNK_ROWS):
            chunk = transform.apply(self._augment(vectors[start : start + ADD_CHUNK_ROWS], "training vectors"))
            low = np.minimum(low, chunk.min(axis=0))
            high = np.maximum(high, chunk.max(axis=0))
        # min/max training on the two rows (low, high) gives exactly the per-dimension ranges of all rows
        graph = self._graph()
        sq = faiss.downcast_index(graph.storage).sq
        sq.rangestat = faiss.ScalarQuantizer.RS_minmax
        sq.rangestat_arg = 0.0
        graph.train(np.ascontiguousarray(np.stack([low, high])))
        self._index.is_trained = True

    def _add(self, vectors: np.ndarray) -> None:
        self._add_augmented(vectors)

    @classmethod
    def _from_faiss(cls, faiss_index: faiss.Index, read_only: bool, path: Path) -> Self:
        index = cls(faiss_index, read_only=read_only)
        index._phi = _recorded_phi(index._transform()) if faiss_index.is_trained else None
        return index

    @classmethod
    def _wraps(cls, faiss_index: faiss.Index) -> bool:
        if not isinstance(faiss_index, faiss.IndexPreTransform) or faiss_index.chain.size() != 1:
            return False
        graph = faiss.downcast_index(faiss_index.index)
        return (
            _is_padding_transform(faiss_index.chain.at(0))
            and type(graph) is faiss.IndexHNSWSQ
            and graph.metric_type == faiss.METRIC_L2
            and faiss.downcast_index(graph.storage).sq.qtype == faiss.ScalarQuantizer.QT_8bit
        )


# ---------------------------------------------------------------------------------------------------
# IVF-PQ


def default_nlist(n: int) -> int:
    """Inverted lists for ``n`` vectors: about 4·√n (FAISS's usual guideline is 4·√n to 16·√n)."""
    return max(1, int(round(4 * math.sqrt(n))))


def default_pq_m(dim: int) -> int:
    """Sub-quantizers for ``dim``-dimensional vectors: one per ~12 dimensions (64 for 768).

    With 8-bit codes that is 64 bytes of code (+ 8 bytes of id in the inverted list) per 768-d vector,
    under 100 bytes per vector; bench/index_scale.py measures the recall this gives.
    """
    return max(1, dim // 12)


def default_nprobe(nlist: int) -> int:
    """Lists visited per query: 1/16 of them, at least 1 and at most 256."""
    return max(1, min(256, nlist // 16))


OPQ_ITERATIONS = 20
"""OPQ rotation-learning iterations (FAISS's default, 50, costs 2.5x the time for little gain)."""


@register_index
class IVFPQIndex(_InnerProductViaL2):
    """Inverted file + product quantization (``faiss.IndexIVFPQ``, L2 on DPR's transform), optionally
    with an OPQ rotation; the compressed index kind.

    Parameters: ``nlist`` (inverted lists; default :func:`default_nlist` of the number of vectors given
    to :meth:`train`, so pass it when training on a sample: a knowledge base sets it from all its rows), ``m`` (sub-quantizers; default :func:`default_pq_m`), ``nbits`` (bits per
    sub-quantizer code, default 8), ``nprobe`` (lists visited per query; default
    :func:`default_nprobe`; settable later), ``opq`` (learn an OPQ rotation before quantizing, default
    True: a rotation that balances the variance among the sub-quantizers, for a slower training),
    ``phi`` (as for hnsw).

    The FAISS index is ``IndexPreTransform([padding, (OPQ)], IndexIVFPQ)``: the dim+1 transformed
    coordinates are padded with zeros to a multiple of ``m`` (so ``m`` need not divide dim) by a
    :func:`_padding_transform` that also records phi. Each vector costs m·nbits/8 bytes of code plus
    8 bytes of id; the coarse centroids add nlist·(padded dim)·4 bytes in all, and FAISS keeps a
    precomputed table of nlist·m·2**nbits floats in memory (not on disk) for speed.

    Needs training: phi (unless given) is fixed from all the vectors given to :meth:`train`; the
    quantizers are trained on a random sample of at most :attr:`max_train_vectors` of them, of which
    there must be at least nlist and 2**nbits. Scores are PQ approximations of the inner products.
    """

    type_name = "ivfpq"
    compressed = True
    requires_training = True
    param_defaults = {"nlist": None, "m": None, "nbits": 8, "nprobe": None, "opq": True, "phi": None}
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
        self._dim = faiss_index.d - 1 if faiss_index is not None else dim
        self._settings = settings or {}  # the create() parameters, until the FAISS index exists

    @classmethod
    def _create(cls, dim: int, params: dict[str, Any]) -> Self:
        owner = cls.type_name
        nlist = _optional_positive_int(params["nlist"], "nlist", owner)
        m = _positive_int(params["m"], "m", owner) if params["m"] is not None else default_pq_m(dim)
        nbits = _positive_int(params["nbits"], "nbits", owner)
        nprobe = _optional_positive_int(params["nprobe"], "nprobe", owner)
        opq, phi = params["opq"], _optional_phi(params["phi"], owner)
        if m > dim:
            raise InputError(f"{owner} index parameter m={m} is more than the vector dimension {dim}")
        if nbits > 16:
            raise InputError(f"{owner} index parameter nbits must be at most 16, got {nbits}")
        if not isinstance(opq, bool):
            raise InputError(f"{owner} index parameter opq must be true or false, got {opq!r}")
        settings = {"nlist": nlist, "m": m, "nbits": nbits, "nprobe": nprobe, "opq": opq}
        index = cls(None, dim=dim, settings=settings)
        index._phi = phi
        return index

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
            return {**self._settings, "phi": self._phi}
        ivf = self._ivf()
        return {
            "nlist": int(ivf.nlist),
            "m": int(ivf.pq.M),
            "nbits": int(ivf.pq.nbits),
            "nprobe": int(ivf.nprobe),
            "opq": self._index.chain.size() == 2,
            "phi": self._phi,
        }

    @property
    def bytes_per_code(self) -> int:
        """Bytes of PQ code stored per vector (the inverted lists also store an 8-byte id per vector)."""
        settings = self.params
        return (settings["m"] * settings["nbits"] + 7) // 8

    def _train(self, vectors: np.ndarray) -> None:
        settings = self._settings
        self._fix_phi(vectors)
        nlist, m, nbits = settings["nlist"] or default_nlist(len(vectors)), settings["m"], settings["nbits"]
        if len(vectors) > self.max_train_vectors:
            rng = np.random.default_rng(self.train_seed)
            sample = vectors[np.sort(rng.choice(len(vectors), self.max_train_vectors, replace=False))]
        else:
            sample = vectors
        needed = max(nlist, 2**nbits)
        if len(sample) < needed:
            raise InputError(
                f"an ivfpq index with nlist={nlist} and nbits={nbits} needs at least {needed} training "
                f"vectors, got {len(sample)}; use fewer lists or bits, or a flat or hnsw index"
            )
        padded = _round_up(self._dim + 2, m)  # dim + 1 transformed coordinates + at least one padding
        transform = _padding_transform(self._dim + 1, padded, self._phi)
        ivf = faiss.index_factory(padded, f"{f'OPQ{m},' if settings['opq'] else ''}IVF{nlist},PQ{m}x{nbits}")
        inner = faiss.downcast_index(faiss.extract_index_ivf(ivf))
        inner.do_polysemous_training = False  # only useful for polysemous search, and slow
        # FAISS warns below 39 training points per centroid; a small collection still clusters fine
        inner.cp.min_points_per_centroid = 1
        inner.pq.cp.min_points_per_centroid = 1
        rotation, rotation_pq = None, None
        if settings["opq"]:  # the factory made IndexPreTransform(OPQ, IVF-PQ), owning both
            rotation = faiss.downcast_VectorTransform(ivf.chain.at(0))
            rotation.niter = OPQ_ITERATIONS
            # learn the rotation for codes of our nbits (FAISS's OPQ otherwise assumes 8 bits, and then
            # needs 256 training vectors however small nbits is)
            rotation_pq = faiss.ProductQuantizer(padded, m, nbits)
            rotation_pq.cp.min_points_per_centroid = 1
            rotation.pq = rotation_pq
            transform.this.disown()
            ivf.prepend_transform(transform)
            faiss_index = ivf
        else:
            faiss_index = _owning_pretransform(transform, ivf)
        try:
            faiss_index.train(self._augment(sample, "training vectors"))
        finally:
            if rotation is not None:
                rotation.pq = None  # only used while training; not owned by the rotation
        inner.nprobe = min(nlist, settings["nprobe"] or default_nprobe(nlist))
        self._index = faiss_index
        self._phi = _recorded_phi(transform)

    def _add(self, vectors: np.ndarray) -> None:
        self._add_augmented(vectors)

    def _search_l2(self, augmented: np.ndarray, k: int, selector) -> tuple[np.ndarray, np.ndarray]:
        """Search ``nprobe`` lists; queries that found fewer than ``k`` (their lists are small, or hold
        mostly excluded ids) are searched again with 4x as many lists, up to all of them."""
        nprobe, nlist = self.nprobe, int(self._ivf().nlist)
        params = faiss.SearchParametersIVF(nprobe=nprobe, sel=selector)
        distances, ids = self._index.search(augmented, k, params=params)
        while nprobe < nlist:
            short = (ids < 0).any(axis=1)
            if not short.any():
                break
            nprobe = min(nlist, nprobe * 4)
            params = faiss.SearchParametersIVF(nprobe=nprobe, sel=selector)
            distances[short], ids[short] = self._index.search(augmented[short], k, params=params)
        return distances, ids

    def _faiss_index_to_save(self) -> faiss.Index:
        if self._index is None:
            raise InputError("cannot save an untrained ivfpq index: train it or add vectors first")
        return self._index

    @classmethod
    def _from_faiss(cls, faiss_index: faiss.Index, read_only: bool, path: Path) -> Self:
        index = cls(faiss_index, read_only=read_only)
        index._phi = _recorded_phi(faiss.downcast_VectorTransform(faiss_index.chain.at(0)))
        return index

    @classmethod
    def _wraps(cls, faiss_index: faiss.Index) -> bool:
        if not isinstance(faiss_index, faiss.IndexPreTransform):
            return False
        chain = faiss_index.chain
        if chain.size() not in (1, 2) or not _is_padding_transform(chain.at(0)):
            return False
        if chain.size() == 2:  # the OPQ rotation (saved by FAISS as a plain LinearTransform)
            rotation = faiss.downcast_VectorTransform(chain.at(1))
            if not isinstance(rotation, faiss.LinearTransform) or rotation.d_in != rotation.d_out:
                return False
        inner = faiss.downcast_index(faiss_index.index)
        return type(inner) is faiss.IndexIVFPQ and inner.metric_type == faiss.METRIC_L2
