"""Inner product through L2 (DPR's transform), shared by hnsw, hnsw_sq8 and ivfpq.

**Inner product through L2 (hnsw, hnsw_sq8, ivfpq).** Graphs and k-means are built for a metric, so, as
in DPR's ``DenseHNSWFlatIndexer``, each database vector x is stored as ``[x, sqrt(phi - |x|²)]`` with
``phi = max |x|²``, and each query q as ``[q, 0]``. All stored vectors then have squared norm phi,
``|q' - x'|² = |q|² + phi - 2·q·x``, so L2 order is inner-product order and the score is recovered as
``(|q|² + phi - dist) / 2``. phi is fixed by the first batch added (hnsw) or by all the vectors given
to :meth:`~DenseIndex.train` (hnsw_sq8, ivfpq), or up front by the ``phi`` parameter (e.g. ``phi=1``
for unit-length vectors). A later batch holding a vector with a larger norm is refused with an
:class:`~openbook.errors.InputError`: add (or train on) all vectors in one call, or pass a ``phi`` bound.
"""

import faiss
import numpy as np

from openbook.errors import InputError
from openbook.index.dense.base import DenseIndex

ADD_CHUNK_ROWS = 65_536
"""Vectors transformed and handed to FAISS at a time, bounding the temporary copies made while adding."""


def _squared_norms(vectors: np.ndarray) -> np.ndarray:
    """Row-wise squared norms in float64 (exact enough to compare against phi)."""
    out = np.empty(len(vectors), dtype=np.float64)
    for start in range(0, len(vectors), ADD_CHUNK_ROWS):
        chunk = vectors[start : start + ADD_CHUNK_ROWS].astype(np.float64)
        out[start : start + len(chunk)] = np.einsum("ij,ij->i", chunk, chunk)
    return out


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
