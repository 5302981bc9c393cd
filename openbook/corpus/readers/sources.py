"""Whole corpora: the format of each source, and the passages of any mix of sources in order."""

import dataclasses
import hashlib
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
        kind = source_kind(path)
        yield from _with_documents(path, kind == "folder", readers[kind](path, max_words, errors))


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes (a document's content hash)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_file(folder: Path, where: str) -> Path | None:
    """The file of ``folder`` that ``where`` (``path:line``, ``path:row``, ...) names, or None."""
    candidate = where
    while True:
        path = Path(candidate)
        if path.is_file():
            try:
                path.relative_to(folder)
            except ValueError:
                return None
            return path
        if ":" not in candidate:
            return None
        candidate = candidate.rsplit(":", 1)[0]


def _with_documents(source: Path, is_folder: bool, items: Iterator[SourcePassage]) -> Iterator[SourcePassage]:
    """Fill in each passage's document: in a folder, the file's path relative to the folder (``a/b.md``,
    the same however the folder is named: relative, absolute, through a symlink); for a file source, an
    explicit ``document`` field of the record or else the file's name. The content hash is the file's sha256."""
    hashes: dict[Path, str] = {}

    def sha(path: Path) -> str:
        if path not in hashes:
            hashes[path] = file_sha256(path)
        return hashes[path]

    for item in items:
        if item.document is not None and item.document_sha256 is not None:
            yield item
            continue
        file = _read_file(source, item.where) if is_folder else source
        if file is None:  # not traceable to a file: leave it without a document
            yield item
            continue
        document = item.document or (file.relative_to(source).as_posix() if is_folder else source.name)
        yield dataclasses.replace(item, document=document, document_sha256=sha(file))
