"""Index layer: dense inner-product indexes and on-disk knowledge bases (numpy + faiss, no torch)."""

from openbook.index.dense import INDEX_TYPES, DenseIndex, FlatIPIndex, index_class, register_index
from openbook.index.kb import FORMAT_VERSION, KnowledgeBase, describe_encoder

__all__ = [
    "FORMAT_VERSION",
    "INDEX_TYPES",
    "DenseIndex",
    "FlatIPIndex",
    "KnowledgeBase",
    "describe_encoder",
    "index_class",
    "register_index",
]
