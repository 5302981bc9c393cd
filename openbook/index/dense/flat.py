"""The ``flat`` index kind: exact inner-product search."""

from typing import Any, Self

import faiss

from openbook.index.dense.base import DenseIndex, register_index


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
