"""The ``ivfpq`` index kind: inverted file + product quantization, the compressed kind."""

import math
from pathlib import Path
from typing import Any, ClassVar, Self

import faiss
import numpy as np

from openbook.errors import InputError
from openbook.index.dense.base import register_index
from openbook.index.dense.checks import _optional_phi, _optional_positive_int, _positive_int
from openbook.index.dense.via_l2 import (
    _InnerProductViaL2,
    _is_padding_transform,
    _owning_pretransform,
    _padding_transform,
    _recorded_phi,
    _round_up,
)


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
