"""Corpus layer: passages, disjoint word chunking, and JSON Lines readers (no torch, no models)."""

from openbook.corpus.chunking import DEFAULT_MAX_WORDS, chunk_article, split_words
from openbook.corpus.passages import MetaValue, Passage
from openbook.corpus.readers import (
    ON_ERROR_CHOICES,
    RecordErrors,
    SourcePassage,
    SourceReport,
    check_meta_fields,
    check_sources,
    iter_source_passages,
    passages_from_record,
    read_passages,
    read_records,
    record_meta,
    record_title_text,
    source_kind,
)

__all__ = [
    "DEFAULT_MAX_WORDS",
    "ON_ERROR_CHOICES",
    "MetaValue",
    "Passage",
    "RecordErrors",
    "SourcePassage",
    "SourceReport",
    "check_meta_fields",
    "check_sources",
    "iter_source_passages",
    "source_kind",
    "chunk_article",
    "passages_from_record",
    "read_passages",
    "read_records",
    "record_meta",
    "record_title_text",
    "split_words",
]
