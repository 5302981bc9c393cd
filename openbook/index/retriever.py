"""The one retrieval seam: ``Retriever.retrieve(questions, k) -> Hits(scores, ids, passages)``.

Every caller that needs passages for questions goes through a :class:`Retriever`: the RAG model (and so
``openbook ask``, training and evaluation), ``openbook retrieve`` and ``openbook eval retrieval``. As in
ParlAI's one abstract retriever and DPR's small index classes, a retriever only answers "the top k rows of
the knowledge base for these questions, with their scores"; what the scores mean for p(z|x) is
:func:`retrieval_logprobs`, the one function computing the retriever's distribution.

* :class:`DenseRetriever` -- MIPS over the knowledge base's index with the query encoder q(x) it holds.
  When q(x) is a torch tensor that requires grad, the scores d(z)^T q(x) of the k rows found are
  recomputed in torch from the stored document vectors, so p(z|x) is differentiable with respect to the
  query encoder (the documents and the index stay frozen, paper section 2.4).
* :class:`BM25Retriever` -- the paper's Table-6 ablation: a fixed BM25 system whose scores are the
  logits of p(z|x) (``scaled = False``: the RAG score scale does not apply).
* :class:`HybridRetriever` -- reciprocal rank fusion of the dense and BM25 top ``depth``; the fused
  scores (sums of 1/(60 + rank)) are the logits.
* :class:`PinnedRetriever` -- another retriever's answers for a fixed set of questions, retrieved once and
  read from memory (training with a frozen retriever: the index can be released meanwhile).

``k`` is checked where it enters (:func:`openbook.errors.check_k`: the command line, the API, ``RAG``) and
only clamped here, to the number of live passages, with a warning (:func:`fit_k`). A sharded or remote retriever is a new subclass implementing
:meth:`Retriever.search` (and, if it holds no local knowledge base, ``num_passages`` and
:meth:`Retriever.passages`); callers do not change. A sharded knowledge base
(:class:`~openbook.index.sharded.ShardedKnowledgeBase`) needs no subclass: it offers the knowledge base's
``search``/``passages``/``embeddings``, fanning out to its shards, so :class:`DenseRetriever` runs over it
as is (BM25 and hybrid retrieval need an unsharded knowledge base).
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from openbook.errors import InputError, KnowledgeBaseError, positive_int
from openbook.index.filters import Filter, no_match
from openbook.index.protocol import KnowledgeBaseLike
from openbook.presets import RETRIEVERS

HYBRID_DEPTH = 100  # how deep each retriever's list is read for reciprocal rank fusion

QueryEncoder = Callable[[list[str]], Any]  # questions -> (B, d) numpy array or torch tensor


def fit_k(k: int, available: int, where: Filter | None = None) -> int:
    """``k`` (checked where it entered, :func:`openbook.errors.check_k`) clamped to ``available`` live
    passages (those matching ``where``, if given), with a warning."""
    if k > available:
        if available < 1:
            raise KnowledgeBaseError("the knowledge base has no passages to retrieve")
        what = (f"the knowledge base ({available} passages)" if where is None else
                f"the {available} passages matching the filter {where.describe()}")
        warnings.warn(f"k={k} is larger than {what}; using k={available}", stacklevel=3)
        k = available
    return k


def retrieval_logprobs(scores, scale=1.0):
    """log p(z|x) = log_softmax(scale * scores) over the top k (the last axis), as a torch tensor of at least
    float32: half-precision scores are computed in float32, float64 scores (a float64 query encoder) stay
    float64, as in :func:`openbook.rag.marginal.doc_log_prior`. Rounding them to float32 would make the
    gradient of a learned scale, a sum over the k documents that largely cancels, float32 noise.

    ``scores`` are a retriever's scores (a numpy array or a torch tensor; gradients flow through a tensor
    and through a tensor ``scale``, e.g. RAG's learned score scale)."""
    import torch

    if not isinstance(scores, torch.Tensor):
        scores = torch.from_numpy(np.ascontiguousarray(scores, dtype=np.float32))
    return torch.log_softmax(scores.to(torch.promote_types(scores.dtype, torch.float32)) * scale, dim=-1)


@dataclass
class Hits:
    """The top k of each question, best first: ``scores`` (B, K) (a torch tensor from a dense retriever
    given a torch query encoder, else a float32 numpy array), ``ids`` (B, K) knowledge-base rows and
    ``passages`` (B lists of K passages)."""

    scores: Any
    ids: np.ndarray
    passages: list[list[Any]]


class Retriever(ABC):
    """Top-k passages of a knowledge base for questions (see module docs)."""

    name = "retriever"
    #: whether the model's score scale multiplies the scores before the softmax (dense inner products)
    scaled = True

    def __init__(self, kb: KnowledgeBaseLike):
        self.kb = kb

    @property
    def num_passages(self) -> int:
        """Live passages that can be retrieved (k is clamped to it)."""
        return len(self.kb)

    def use_knowledge_base(self, kb: KnowledgeBaseLike) -> None:
        """Retrieve from ``kb`` from now on (drops anything built for the previous one)."""
        self.kb = kb

    def retrieve(self, questions: Sequence[str], k: int, where: Filter | None = None) -> Hits:
        """The top ``k`` passages of each question (``k`` clamped to the live passages by :func:`fit_k`); with
        ``where``, the exact top ``k`` among the passages whose metadata matches it (InputError if none does)."""
        if isinstance(questions, str):
            questions = [questions]
        questions = list(questions)
        if where is None:
            k = fit_k(k, self.num_passages)
        else:
            available = self.kb.count_matching(where)
            if available == 0:
                raise no_match(where, getattr(self.kb, "path", "the knowledge base"))
            k = fit_k(k, available, where)
        scores, ids = self.search(questions, k, where=where)
        ids = np.asarray(ids)
        if ids.shape != (len(questions), k) or (ids < 0).any():
            raise KnowledgeBaseError(f"the {self.name} retriever found fewer than k={k} passages in "
                                     f"{getattr(self.kb, 'path', 'the knowledge base')}; lower k")
        return Hits(scores, ids, self.passages(ids))

    def passages(self, ids: np.ndarray) -> list[list[Any]]:
        """The passages of the ``(B, k)`` row ids :meth:`search` returned."""
        return self.kb.passages(ids)

    @abstractmethod
    def search(self, questions: list[str], k: int, where: Filter | None = None) -> tuple[Any, np.ndarray]:
        """``(scores (B, k), row ids (B, k))`` for a ``k`` already checked against the live passages (those
        matching ``where``, if given: the exact top k among them)."""

    def search_ids(self, questions: list[str], k: int, where: Filter | None = None) -> np.ndarray:
        """Only the row ids of :meth:`search` (what rank fusion reads)."""
        return np.asarray(self.search(questions, k, where=where)[1])


class DenseRetriever(Retriever):
    """MIPS over ``kb``'s index with the query encoder ``encode`` (questions -> (B, d) vectors)."""

    name = "dense"

    def __init__(self, kb: KnowledgeBaseLike, encode: QueryEncoder):
        super().__init__(kb)
        self.encode = encode

    def search(self, questions: list[str], k: int, where: Filter | None = None):
        q = self.encode(questions)
        if not hasattr(q, "detach"):  # numpy vectors: the index's own scores
            return self.kb.search(np.asarray(q, dtype=np.float32), k, where=where)
        import torch

        _, ids = self.kb.search(q.detach().float().cpu().numpy(), k, where=where)
        doc_vectors = torch.from_numpy(np.ascontiguousarray(self.kb.embeddings[ids])).to(q)  # (B, K, d)
        return torch.einsum("bkd,bd->bk", doc_vectors, q), ids

    def search_ids(self, questions: list[str], k: int, where: Filter | None = None) -> np.ndarray:
        """The MIPS row ids alone: no graph through q(x) and no re-scoring from the stored vectors."""
        import torch

        with torch.no_grad():
            q = self.encode(questions)
        q = q.detach().float().cpu().numpy() if hasattr(q, "detach") else np.asarray(q, dtype=np.float32)
        return np.asarray(self.kb.search(q, k, where=where)[1])


class BM25Retriever(Retriever):
    """BM25 over ``kb``'s passages (built on first use, cached in the knowledge base's ``bm25/`` folder)."""

    name = "bm25"
    scaled = False

    def __init__(self, kb: KnowledgeBaseLike, progress: bool = True):
        super().__init__(kb)
        self.progress = progress
        self._index = None  # (BM25Index, excluded rows) of the current knowledge base

    def use_knowledge_base(self, kb: KnowledgeBaseLike) -> None:
        super().use_knowledge_base(kb)
        self._index = None

    def search(self, questions: list[str], k: int, where: Filter | None = None):
        if self._index is None:
            from openbook.index.bm25 import knowledge_base_bm25

            self._index = knowledge_base_bm25(self.kb, progress=self.progress)
        index, exclude = self._index
        if where is not None:  # score only the matching passages
            return index.search(questions, k, rows=self.kb.matching_rows(where))
        return index.search(questions, k, exclude=exclude)


class HybridRetriever(Retriever):
    """Reciprocal rank fusion of the top ``depth`` (at least k) of ``retrievers`` (default: dense, BM25)."""

    name = "hybrid"
    scaled = False

    def __init__(self, kb: KnowledgeBaseLike, retrievers: Sequence[Retriever], depth: int = HYBRID_DEPTH):
        super().__init__(kb)
        self.retrievers = list(retrievers)
        self.depth = positive_int(depth, "hybrid depth")

    def use_knowledge_base(self, kb: KnowledgeBaseLike) -> None:
        super().use_knowledge_base(kb)
        for retriever in self.retrievers:
            retriever.use_knowledge_base(kb)

    def search(self, questions: list[str], k: int, where: Filter | None = None):
        from openbook.index.hybrid import reciprocal_rank_fusion

        available = self.num_passages if where is None else self.kb.count_matching(where)  # the lists to fuse
        fetch = min(max(k, self.depth), available)
        lists = [retriever.search_ids(questions, fetch, where=where) for retriever in self.retrievers]
        return reciprocal_rank_fusion(lists, k)


class PinnedRetriever(Retriever):
    """The top k of a fixed set of questions, retrieved once by ``inner`` and then read from memory.

    Training with a frozen retriever (the paper's Table-6 "Frozen", openbook's default recipe) asks for the same
    questions' passages at every epoch, and their answer cannot change; reading them from memory lets the
    knowledge base's index be released while the generator trains (:meth:`release_index`). Any other question,
    another k or a filter goes to ``inner``, which loads its index again if it was released."""

    def __init__(self, inner: Retriever, questions: Sequence[str], k: int, batch_size: int = 64):
        import torch

        super().__init__(inner.kb)
        self.inner, self.k = inner, k
        self.name, self.scaled = inner.name, inner.scaled
        self._pinned: dict[str, tuple[np.ndarray, np.ndarray, list]] = {}
        unique = list(dict.fromkeys(questions))
        batch_size = positive_int(batch_size, "batch_size")
        with torch.no_grad():
            for start in range(0, len(unique), batch_size):
                batch = unique[start:start + batch_size]
                hits = inner.retrieve(batch, k)
                scores = hits.scores.detach().cpu().numpy() if hasattr(hits.scores, "detach") else hits.scores
                for i, question in enumerate(batch):
                    self._pinned[question] = (np.asarray(scores[i]), np.asarray(hits.ids[i]), hits.passages[i])

    def use_knowledge_base(self, kb: KnowledgeBaseLike) -> None:
        super().use_knowledge_base(kb)
        self.inner.use_knowledge_base(kb)
        self._pinned.clear()  # another book: nothing pinned holds

    def retrieve(self, questions: Sequence[str], k: int, where: Filter | None = None) -> Hits:
        questions = [questions] if isinstance(questions, str) else list(questions)
        if where is None and k == self.k and all(q in self._pinned for q in questions):
            rows = [self._pinned[q] for q in questions]
            return Hits(np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]), [list(r[2]) for r in rows])
        return self.inner.retrieve(questions, k, where=where)

    def search(self, questions: list[str], k: int, where: Filter | None = None) -> tuple[Any, np.ndarray]:
        return self.inner.search(questions, k, where=where)

    def release_index(self) -> None:
        """Release the knowledge base's dense index (its memory) until a question not pinned needs it."""
        release = getattr(self.kb, "release_index", None)
        if release is not None:
            release()


def make_retriever(name: str, kb: KnowledgeBaseLike, encode: QueryEncoder | None = None, progress: bool = True) -> Retriever:
    """The retriever called ``name`` (one of :data:`RETRIEVERS`) over ``kb``; dense and hybrid need the
    query encoder ``encode``."""
    if name not in RETRIEVERS:
        raise InputError(f"retriever must be one of {', '.join(RETRIEVERS)}, not {name!r}")
    if name != "dense" and getattr(kb, "sharded", False):
        raise InputError(f"the {name} retriever needs an unsharded knowledge base; over the sharded "
                         f"{kb.path} use the dense retriever")
    if name == "bm25":
        return BM25Retriever(kb, progress=progress)
    if encode is None:
        raise InputError(f"the {name} retriever needs a query encoder")
    dense = DenseRetriever(kb, encode)
    if name == "dense":
        return dense
    return HybridRetriever(kb, [dense, BM25Retriever(kb, progress=progress)])
