"""The HNSW index kinds: ``hnsw`` (exact vectors) and ``hnsw_sq8`` (8-bit scalar-quantized vectors)."""

from pathlib import Path
from typing import Any, Self

import faiss
import numpy as np

from openbook.index.dense.base import register_index
from openbook.index.dense.checks import _optional_phi, _positive_int
from openbook.index.dense.via_l2 import (
    ADD_CHUNK_ROWS,
    _InnerProductViaL2,
    _is_padding_transform,
    _owning_pretransform,
    _padding_transform,
    _recorded_phi,
    _round_up,
)


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
    of 8 dimensions (FAISS's SIMD scalar-quantizer code needs that; without it building is several times slower)
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
