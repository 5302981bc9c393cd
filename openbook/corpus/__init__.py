"""Corpus layer: passages, disjoint word chunking, and JSON Lines readers (no torch, no models)."""

from openbook.corpus.chunking import DEFAULT_MAX_WORDS, chunk_article, split_words
from openbook.corpus.passages import Passage
from openbook.corpus.readers import (
    passages_from_record,
    read_passages,
    read_records,
    record_title_text,
)

__all__ = [
    "DEFAULT_MAX_WORDS",
    "Passage",
    "chunk_article",
    "passages_from_record",
    "read_passages",
    "read_records",
    "record_title_text",
    "split_words",
]
