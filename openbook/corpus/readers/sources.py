"""Whole corpora: the format of each source, and the passages of any mix of sources in order."""

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from openbook.corpus.chunking import DEFAULT_MAX_WORDS, check_max_words
from openbook.corpus.readers.files import _strip_gz
from openbook.corpus.readers.jsonl import JSONL_SUFFIXES, _jsonl_source
from openbook.corpus.readers.parquet import PARQUET_SUFFIXES, _import_parquet, _parquet_source
from openbook.corpus.readers.records import RecordErrors, SourcePassage
from openbook.corpus.readers.text import TEXT_SUFFIXES, _folder_source, _text_file_source
from openbook.corpus.readers.tsv import TSV_SUFFIXES, _tsv_source
from openbook.errors import InputError


def source_kind(path: str | os.PathLike) -> str:
    """``"folder"``, ``"jsonl"``, ``"tsv"``, ``"parquet"`` or ``"text"`` for ``path``; InputError if unknown.

    A missing path raises InputError too.
    """
    path = Path(path)
    if path.is_dir():
        return "folder"
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    name = _strip_gz(path.name).lower()
    for kind, suffixes in (
        ("jsonl", JSONL_SUFFIXES), ("tsv", TSV_SUFFIXES), ("parquet", PARQUET_SUFFIXES), ("text", TEXT_SUFFIXES)
    ):
        if name.endswith(suffixes):
            if kind in ("parquet", "text") and path.name.lower().endswith(".gz"):
                break
            return kind
    known = ", ".join(JSONL_SUFFIXES + TSV_SUFFIXES + PARQUET_SUFFIXES + TEXT_SUFFIXES)
    raise InputError(
        f"{path}: unknown corpus format; expected a folder of text files or a file ending in {known} "
        f"(JSON Lines and TSV may be gzip-compressed, .gz)"
    )


def check_sources(sources: Iterable[str | os.PathLike]) -> list[Path]:
    """Check that every source exists and has a known format (cheap: before any model is loaded)."""
    paths = [Path(s) for s in sources]
    if not paths:
        raise InputError("no corpus source given")
    for path in paths:
        if source_kind(path) == "parquet":
            _import_parquet()
    return paths


def iter_source_passages(
    sources: Iterable[str | os.PathLike],
    max_words: int = DEFAULT_MAX_WORDS,
    errors: RecordErrors | None = None,
) -> Iterator[SourcePassage]:
    """Stream the passages of ``sources`` in order, split into ``max_words``-word chunks that keep titles.

    Nothing is held in memory beyond the current record (Parquet: the current batch of rows).
    """
    check_max_words(max_words)
    errors = errors if errors is not None else RecordErrors()
    readers = {
        "folder": _folder_source, "text": _text_file_source, "jsonl": _jsonl_source,
        "tsv": _tsv_source, "parquet": _parquet_source,
    }
    for path in check_sources(sources):
        yield from readers[source_kind(path)](path, max_words, errors)
