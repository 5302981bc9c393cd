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

**Modules.** :mod:`~openbook.index.dense.base` (the :class:`DenseIndex` base, the registry, saving and
loading), :mod:`~openbook.index.dense.checks` (argument and parameter validation),
:mod:`~openbook.index.dense.flat`, :mod:`~openbook.index.dense.via_l2` (the inner-product-to-L2
transform shared by the other kinds), :mod:`~openbook.index.dense.hnsw` (hnsw and hnsw_sq8) and
:mod:`~openbook.index.dense.ivfpq`. Importing the package registers every kind.
"""

from openbook.index.dense.base import INDEX_ALIASES, INDEX_TYPES, DenseIndex, index_class, register_index
from openbook.index.dense.checks import as_float32_matrix, check_exclude
from openbook.index.dense.flat import FlatIPIndex
from openbook.index.dense.hnsw import HNSWIndex, HNSWSQ8Index
from openbook.index.dense.ivfpq import OPQ_ITERATIONS, IVFPQIndex, default_nlist, default_nprobe, default_pq_m
from openbook.index.dense.via_l2 import ADD_CHUNK_ROWS

__all__ = [
    "ADD_CHUNK_ROWS",
    "INDEX_ALIASES",
    "INDEX_TYPES",
    "OPQ_ITERATIONS",
    "DenseIndex",
    "FlatIPIndex",
    "HNSWIndex",
    "HNSWSQ8Index",
    "IVFPQIndex",
    "as_float32_matrix",
    "check_exclude",
    "default_nlist",
    "default_nprobe",
    "default_pq_m",
    "index_class",
    "register_index",
]
