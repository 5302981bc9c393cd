"""Index layer: dense inner-product indexes and on-disk knowledge bases (numpy + faiss, no torch)."""

from openbook.index.dense import INDEX_TYPES, DenseIndex, FlatIPIndex, index_class, register_index
from openbook.index.kb import FORMAT_VERSION, KnowledgeBase, describe_encoder
from openbook.index.protocol import KnowledgeBaseLike
from openbook.index.sharded import ShardedKnowledgeBase, is_sharded, load_knowledge_base

__all__ = [
    "FORMAT_VERSION",
    "INDEX_TYPES",
    "DenseIndex",
    "FlatIPIndex",
    "KnowledgeBase",
    "KnowledgeBaseLike",
    "ShardedKnowledgeBase",
    "describe_encoder",
    "index_class",
    "is_sharded",
    "load_knowledge_base",
    "register_index",
]
