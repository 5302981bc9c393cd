"""The dense index base class :class:`DenseIndex` and the registry of index kinds by ``type_name``.

**Files.** :meth:`~DenseIndex.save` writes ONE plain FAISS file, atomically (a temporary file in the same
directory, then :func:`os.replace`); there is no sidecar. The kind is recognised from the FAISS
structure (each class's ``_wraps``) and every parameter lives in it: HNSW ``M``/``efConstruction``/
``efSearch``, IVF ``nlist``/``nprobe``, PQ ``m``/``nbits``, the OPQ matrix. phi is recovered from the
stored vectors (hnsw: each has squared norm phi) or from the bias of a padding
``LinearTransform`` in front of the index (hnsw_sq8, ivfpq; see
:func:`~openbook.index.dense.via_l2._padding_transform`). So an
explicit ``phi`` is forgotten by saving an empty ``hnsw`` or untrained ``hnsw_sq8`` index, and an
untrained ``ivfpq`` index (whose FAISS index is built at training, when the default ``nlist`` is
known) cannot be saved.

**Memory mapping.** ``load(path, mmap=True)`` maps the file read-only (``IO_FLAG_MMAP_IFC |
IO_FLAG_READ_ONLY``, FAISS ≥ 1.11: the flat vectors, HNSW graph and storage, and IVF lists are mapped,
not read), so pages are read on demand. Such an index is read-only: :meth:`~DenseIndex.add` raises
(FAISS would abort the process on growing a mapped array).
"""

import os
from pathlib import Path
from typing import Any, ClassVar, Self

import faiss
import numpy as np

from openbook.atomic import atomic_output
from openbook.errors import InputError, positive_int
from openbook.index.dense.checks import _positive_int, as_float32_matrix, check_exclude
from openbook.index.dense.gpu import on_gpus

INDEX_TYPES: dict[str, type["DenseIndex"]] = {}
"""Registered index kinds by canonical ``type_name``."""

INDEX_ALIASES: dict[str, str] = {}
"""Other accepted names (e.g. ``flat_ip``) mapped to a canonical ``type_name``."""


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
        k = min(positive_int(k, "k"), self.ntotal)
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
        """Subclasses: FAISS search of validated queries, returning inner-product scores and ids. Here (exact
        flat search) a search excluding nothing runs on the GPUs when faiss-gpu sees any (:func:`on_gpus`)."""
        gpu = self._gpu_copy() if selector is None else None
        if gpu is not None:
            return gpu.search(queries, k)
        params = None if selector is None else faiss.SearchParameters(sel=selector)
        return self._index.search(queries, k, params=params)

    def _gpu_copy(self):
        """The index copied to the GPUs (kept until vectors are added), or None without faiss-gpu."""
        cached = getattr(self, "_gpu", None)
        if cached is None or cached[0] != self.ntotal:
            cached = self._gpu = (self.ntotal, on_gpus(self._index))
        return cached[1]

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
