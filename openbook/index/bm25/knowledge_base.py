"""BM25 over a knowledge base: its rows in order, and the index cached in its directory."""

from __future__ import annotations

import hashlib
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from openbook.errors import InputError
from openbook.index.bm25.index import DEFAULT_B, DEFAULT_K1, METHOD, BM25Index
from openbook.index.bm25.terms import stopword_list


def _field(item: Any, name: str) -> str:
    value = item.get(name, "") if isinstance(item, dict) else getattr(item, name, "")
    return "" if value is None else str(value)

BM25_CACHE_DIR = "bm25"


def passages_fingerprint(passages: Iterable[Any]) -> tuple[str, int]:
    """``(sha256 hex, count)`` over the ids, titles and texts of ``passages`` in order."""
    digest = hashlib.sha256()
    count = 0
    for passage in passages:
        for part in (_field(passage, "id"), _field(passage, "title"), _field(passage, "text")):
            digest.update(part.encode("utf-8"))
            digest.update(b"\x00")
        digest.update(b"\x01")
        count += 1
    return digest.hexdigest(), count


def knowledge_base_rows(kb) -> tuple[list[Any], np.ndarray | None]:
    """Every row's passage of ``kb`` in row order, and the rows not visible at its version (or None).

    BM25 must share the dense index's row ids. Without deleted or not-yet-visible rows, ``iter(kb)``
    yields exactly one passage per row. Otherwise (a versioned knowledge base) the rows are read with
    ``kb.passages`` and the visible ones found with ``kb.lookup`` by passage id; the rest are excluded.
    """
    rows = int(np.shape(kb.embeddings)[0])
    if len(kb) == rows:
        passages = list(kb)
        if len(passages) != rows:
            raise InputError(f"knowledge base {kb.path} has {rows} rows but iterates over {len(passages)} passages")
        return passages, None
    passages = kb.passages(np.arange(rows, dtype=np.int64))
    visible = np.zeros(rows, dtype=bool)
    for passage in kb:
        found = kb.lookup(passage.id)
        if found is not None:
            visible[found[0]] = True
    return passages, np.flatnonzero(~visible)


def knowledge_base_bm25(kb, cache: bool = True, progress: bool = False) -> tuple[BM25Index, np.ndarray | None]:
    """A BM25 index over every row of ``kb`` (row i = passage of row i), and the rows to exclude.

    The index is cached in ``<kb dir>/bm25/`` and the cache is used only if it was built from exactly
    these rows with the default BM25 settings; otherwise it is rebuilt and the cache replaced. The cache
    records the checksum of the passage store that the knowledge base's manifest records (and its row
    count): while they are the same, the cache is used without reading a passage (a book's millions of
    rows are not read at every load). Otherwise the rows are read and compared by a sha256 over their
    ids, titles and texts, and a cache they match (the rows are the same, e.g. after a deletion marked
    some) records the new checksum. If the knowledge-base directory is not writable the index is kept
    in memory (with a warning). The excluded rows (deleted, or added after the knowledge base's current
    version; None if there are none) are to be passed as ``exclude`` to :meth:`BM25Index.search`.
    """
    directory = Path(kb.path) / BM25_CACHE_DIR
    store = getattr(kb, "rows_key", None)  # a KnowledgeBase's (None for other knowledge bases)
    cached = _cached_index(directory) if cache else None
    if cached is not None and store is not None and (cached.source or {}).get("store") == store:
        excluded = kb.excluded_rows
        return cached, (excluded if excluded.size else None)
    passages, exclude = knowledge_base_rows(kb)
    fingerprint, count = passages_fingerprint(passages)
    source = {"kb_passages_sha256": fingerprint, "num_passages": count, **({"store": store} if store else {})}
    if cached is not None and _same_rows(cached.source, source):
        if store is not None:
            cached.record_source(directory, source)  # the next load need not read the rows
        return cached, exclude
    if progress:
        where = f" and caching it in {directory}" if cache else ""
        print(f"openbook: building a BM25 index of {count} passages{where}", file=sys.stderr)
    index = BM25Index.build(passages, source=source)
    if cache:
        try:
            index.save(directory)
        except (OSError, InputError) as exc:
            warnings.warn(f"cannot cache the BM25 index in {directory} ({exc}); keeping it in memory", stacklevel=2)
    return index, exclude


def _cached_index(directory: Path) -> BM25Index | None:
    """The BM25 index cached in ``directory`` if there is a readable one with the default settings."""
    if not directory.is_dir():
        return None
    try:
        index = BM25Index.load(directory)
    except InputError:
        return None
    return index if _default_settings(index) else None


def _same_rows(cached: dict[str, Any] | None, source: dict[str, Any]) -> bool:
    keys = ("kb_passages_sha256", "num_passages")
    return cached is not None and all(cached.get(key) == source[key] for key in keys)


def _default_settings(index: BM25Index) -> bool:
    """Whether ``index`` was built with :meth:`BM25Index.build`'s default parameters."""
    settings = index.settings
    return (
        settings.get("k1") == DEFAULT_K1 and settings.get("b") == DEFAULT_B and settings.get("method") == METHOD
        and settings.get("stemmer") is None and settings.get("stopwords") == stopword_list("en")
    )
