"""Evaluation: question sets and retrieval metrics (recall@k of answers and of gold passages).

Nothing here imports torch at import time; the dense retriever uses an encoder it is given.
"""

from openbook.eval.datasets import qa_record, read_nq_open
from openbook.eval.metrics import recall_at_k
from openbook.eval.retrieval import (
    DEFAULT_KS,
    answer_in_passage,
    answer_tokens,
    evaluate_retrieval,
    gold_match,
    knowledge_base_bm25,
    standard_retrievers,
)

__all__ = [
    "DEFAULT_KS",
    "answer_in_passage",
    "answer_tokens",
    "evaluate_retrieval",
    "gold_match",
    "knowledge_base_bm25",
    "qa_record",
    "read_nq_open",
    "recall_at_k",
    "standard_retrievers",
]
