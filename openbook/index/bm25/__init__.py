"""A BM25 sparse index over passages, in the row-id space of a knowledge base (built on ``bm25s``).

The paper's Table 6 ablation replaces RAG's dense retriever with "a fixed BM25 system" and uses "BM25
retrieval scores as logits when calculating p(z|x)". :class:`BM25Index` gives those scores: row ``i`` is
the ``i``-th passage it was built from (for a knowledge base, the ``i``-th passage of ``iter(kb)``), so
its ids can be handed to ``kb.passages(ids)`` and fused with dense results. Turning scores into
p(z|x) = softmax(scores / temperature) is left to the caller (this layer does not import torch).

**Modules.** :mod:`~openbook.index.bm25.terms` (what is indexed and how it is tokenised),
:mod:`~openbook.index.bm25.index` (scoring, the files on disk, :class:`BM25Index`) and
:mod:`~openbook.index.bm25.knowledge_base` (an index over a knowledge base's rows, cached beside them).
"""

from openbook.index.bm25.index import (
    DEFAULT_B,
    DEFAULT_K1,
    FORMAT_VERSION,
    META_FILE,
    METHOD,
    PAD_SCORE,
    BM25Index,
    top_k,
)
from openbook.index.bm25.knowledge_base import (
    BM25_CACHE_DIR,
    knowledge_base_bm25,
    knowledge_base_rows,
    passages_fingerprint,
)
from openbook.index.bm25.terms import passage_string, stopword_list

__all__ = [
    "BM25_CACHE_DIR",
    "DEFAULT_B",
    "DEFAULT_K1",
    "FORMAT_VERSION",
    "META_FILE",
    "METHOD",
    "PAD_SCORE",
    "BM25Index",
    "knowledge_base_bm25",
    "knowledge_base_rows",
    "passage_string",
    "passages_fingerprint",
    "stopword_list",
    "top_k",
]
