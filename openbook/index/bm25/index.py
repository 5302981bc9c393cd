"""The :class:`BM25Index` itself: building, saving, loading and searching.

Scoring is ``bm25s``' "lucene" variant of BM25, as in Lucene 8+ (and so Pyserini): a passage d scores
``sum over query terms t of idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl))`` with
``idf(t) = log(1 + (N - df + 0.5) / (df + 0.5))`` (always positive), ``tf`` the count of t in d and
``|d|`` its length in terms; a term repeated in the query counts once per repetition. A passage that shares no term with the query scores
0 and can still fill the top ``k``. Ties are broken by row id (smaller first), so results are
deterministic.

On disk an index is a directory: the ``bm25s`` files (sparse score matrix as ``.npy``, vocabulary,
parameters) plus ``openbook-bm25.json`` with the tokeniser settings. :meth:`BM25Index.save` writes it
into a temporary sibling directory and renames it into place; :meth:`BM25Index.load` memory-maps the
score matrix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from openbook.atomic import atomic_dir, atomic_output
from openbook.errors import InputError, positive_int
from openbook.index.bm25.terms import _Tokenizer, passage_string, stopword_list
from openbook.index.dense import check_exclude

FORMAT_VERSION = 1
META_FILE = "openbook-bm25.json"
METHOD = "lucene"
DEFAULT_K1 = 1.5
DEFAULT_B = 0.75
# Score of a missing result (id -1) when exclusions leave fewer than k passages, as for the dense indexes.
PAD_SCORE = float("-inf")


def _check_param(name: str, value, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise InputError(f"BM25 {name} must be a number, got {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InputError(f"BM25 {name} must be {bounds}, got {value}")
    return value


def _exclusion_mask(exclude, n: int) -> np.ndarray | None:
    """Boolean mask of the row ids in ``exclude`` (None if nothing is excluded)."""
    ids = check_exclude(exclude)
    if ids is None:
        return None
    bad = ids[(ids < 0) | (ids >= n)]
    if bad.size:
        raise InputError(f"excluded row id {int(bad[0])} is out of range for a BM25 index of {n} passages")
    mask = np.zeros(n, dtype=bool)
    mask[ids] = True
    return mask


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of a 1-D score vector, best first, ties broken by smaller index.

    Entries equal to ``-inf`` are never returned; missing places get id ``-1`` and score ``-inf``. Returns ``(scores float32 (k,), ids int64 (k,))``.
    """
    valid = np.flatnonzero(scores > -np.inf) if np.isneginf(scores).any() else None
    pool = scores if valid is None else scores[valid]
    take = min(k, pool.shape[0])
    out_ids = np.full(k, -1, dtype=np.int64)
    out_scores = np.full(k, PAD_SCORE, dtype=np.float32)
    if take == 0:
        return out_scores, out_ids
    if take < pool.shape[0]:
        kth = np.partition(pool, pool.shape[0] - take)[pool.shape[0] - take]  # take-th largest value
        above = np.flatnonzero(pool > kth)
        tied = np.flatnonzero(pool == kth)[: take - above.shape[0]]
        chosen = np.concatenate([above, tied])
    else:
        chosen = np.arange(pool.shape[0])
    order = np.lexsort((chosen, -pool[chosen]))  # by score descending, then index ascending
    chosen = chosen[order]
    out_ids[:take] = chosen if valid is None else valid[chosen]
    out_scores[:take] = pool[chosen]
    return out_scores, out_ids


class BM25Index:
    """BM25 over passages with row ids ``0 .. n-1`` in the order they were given (see module docs)."""

    def __init__(self, retriever, meta: dict[str, Any]):
        """Wrap a fitted ``bm25s.BM25``; use :meth:`build` or :meth:`load` instead."""
        self._bm25 = retriever
        self._meta = meta
        self._tokenize = _Tokenizer(meta["stopwords"], meta["stemmer"])

    # -- construction -------------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        passages: Iterable[Any],
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        stemmer: str | None = None,
        stopwords: str | Sequence[str] | None = "en",
        source: dict[str, Any] | None = None,
    ) -> "BM25Index":
        """Index ``passages`` (objects with ``.title`` and ``.text``; row i = i-th passage).

        ``stemmer``: a Snowball language (``"english"``; needs PyStemmer) or None. ``stopwords``: ``"en"``
        (bm25s' English list), an explicit list of words, or None. ``source`` is any JSON-serialisable dict
        kept with the index (for example what it was built from), returned by :attr:`source`.
        """
        import bm25s

        k1 = _check_param("k1", k1, 0.0)
        b = _check_param("b", b, 0.0, 1.0)
        words = stopword_list(stopwords)
        if source is not None:
            try:
                json.dumps(source)
            except (TypeError, ValueError) as exc:
                raise InputError(f"BM25 index source must be JSON-serialisable: {exc}") from None
        tokenizer = _Tokenizer(words, stemmer)
        corpus_tokens = []
        for position, passage in enumerate(passages):
            if not hasattr(passage, "text"):
                raise InputError(f"item {position} to index is a {type(passage).__name__}, not a passage")
            corpus_tokens.append(tokenizer(passage_string(passage)))
        if not corpus_tokens:
            raise InputError("no passages to index: the passage input is empty")
        retriever = bm25s.BM25(k1=k1, b=b, method=METHOD)
        retriever.index(corpus_tokens, show_progress=False)
        meta = {
            "format_version": FORMAT_VERSION,
            "k1": k1,
            "b": b,
            "method": METHOD,
            "stopwords": tokenizer.stopwords,
            "stemmer": stemmer,
            "num_passages": len(corpus_tokens),
            "indexed_text": "title + ' ' + text",
            "source": source,
        }
        return cls(retriever, meta)

    def save(self, directory: str | os.PathLike) -> None:
        """Write the index to ``directory`` atomically (a temporary sibling directory, then a rename).

        An existing directory is replaced only if it is empty or holds a BM25 index.
        """
        directory = Path(directory)
        if directory.exists():
            if not directory.is_dir():
                raise InputError(f"cannot save a BM25 index to {directory}: it exists and is not a directory")
            if any(directory.iterdir()) and not (directory / META_FILE).is_file():
                raise InputError(
                    f"refusing to replace {directory}: it exists and is not a BM25 index (no {META_FILE})"
                )
        with atomic_dir(directory) as tmp:
            self._bm25.save(tmp, show_progress=False)
            meta_path = tmp / META_FILE
            meta_path.write_text(json.dumps(self._meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    def record_source(self, directory: str | os.PathLike, source: dict[str, Any]) -> None:
        """Make ``source`` (what the index was built from) this index's, and that of its copy saved in
        ``directory`` (its settings file replaced atomically; left as it is where it cannot be written)."""
        self._meta = {**self._meta, "source": json.loads(json.dumps(source))}
        try:
            with atomic_output(Path(directory) / META_FILE) as tmp:
                tmp.write_text(json.dumps(self._meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        except OSError:
            pass  # a read-only knowledge base: its cache is still used, after reading its rows

    @classmethod
    def load(cls, directory: str | os.PathLike, mmap: bool = True) -> "BM25Index":
        """Open an index written by :meth:`save`; the score matrix is memory-mapped unless ``mmap=False``."""
        import bm25s

        directory = Path(directory)
        meta_path = directory / META_FILE
        if not meta_path.is_file():
            raise InputError(f"{directory} is not a BM25 index ({META_FILE} is missing)")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{meta_path} is corrupt ({exc}); rebuild the BM25 index") from None
        _check_meta(meta_path, meta)
        try:
            retriever = bm25s.BM25.load(directory, mmap=mmap, load_corpus=False, show_progress=False)
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
            raise InputError(f"{directory}: cannot read the BM25 index ({exc}); rebuild it") from None
        if retriever.scores.get("num_docs") != meta["num_passages"]:
            raise InputError(
                f"{directory}: the BM25 matrix holds {retriever.scores.get('num_docs')} passages but "
                f"{META_FILE} records {meta['num_passages']}; rebuild the BM25 index"
            )
        return cls(retriever, meta)

    # -- properties ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._meta["num_passages"])

    def __repr__(self) -> str:
        return f"BM25Index(passages={len(self)}, k1={self.k1}, b={self.b}, stemmer={self._meta['stemmer']!r})"

    @property
    def k1(self) -> float:
        return float(self._meta["k1"])

    @property
    def b(self) -> float:
        return float(self._meta["b"])

    @property
    def source(self) -> dict[str, Any] | None:
        """The ``source`` dict given to :meth:`build` (a copy), or None."""
        source = self._meta.get("source")
        return json.loads(json.dumps(source)) if source is not None else None

    @property
    def settings(self) -> dict[str, Any]:
        """k1, b, method, stopwords, stemmer and number of passages (a copy)."""
        return {key: value for key, value in json.loads(json.dumps(self._meta)).items() if key != "source"}

    def tokenize(self, text: str) -> list[str]:
        """The terms this index makes of ``text`` (as used for passages and queries)."""
        return self._tokenize(text)

    # -- search -------------------------------------------------------------------------------------

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for one query: float32 ``(n,)``."""
        terms = self._tokenize(query)
        if not terms:
            return np.zeros(len(self), dtype=np.float32)
        return np.asarray(self._bm25.get_scores(terms), dtype=np.float32)

    def search(self, queries: Sequence[str], k: int, exclude=None, rows: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` passages per query: ``(scores float32 (m, k), ids int64 (m, k))``, best first.

        ``k`` larger than the index is reduced to its size (as for the dense indexes). ``exclude``: row
        ids never to return (e.g. deleted passages); if fewer than ``k`` passages remain, the missing
        entries have id ``-1`` and score ``-inf``, as for the dense indexes. The scores are raw BM25 scores, usable as retrieval
        logits (p(z|x) = softmax over the k scores, the paper's BM25 ablation). ``rows`` (sorted row ids):
        the exact top k among these passages only (a metadata filter's matches; ``exclude`` is then ignored).
        """
        if isinstance(queries, str):
            raise InputError("queries must be a list of strings, not a single string")
        queries = list(queries)
        for i, query in enumerate(queries, 1):
            if not isinstance(query, str):
                raise InputError(f"query {i} is not text but {type(query).__name__}")
        k = min(positive_int(k, "k"), len(self) if rows is None else max(len(rows), 1))
        mask = _exclusion_mask(exclude, len(self))
        out_scores = np.empty((len(queries), k), dtype=np.float32)
        out_ids = np.empty((len(queries), k), dtype=np.int64)
        for row, query in enumerate(queries):
            scores = self.scores(query)
            if rows is not None:
                out_scores[row], chosen = top_k(scores[rows], k)
                out_ids[row] = np.where(chosen >= 0, rows[np.maximum(chosen, 0)], -1)
                continue
            if mask is not None:
                scores = scores.copy()
                scores[mask] = -np.inf
            out_scores[row], out_ids[row] = top_k(scores, k)
        return out_scores, out_ids


def _check_meta(meta_path: Path, meta: Any) -> None:
    if not isinstance(meta, dict):
        raise InputError(f"{meta_path} is corrupt (not a JSON object); rebuild the BM25 index")
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise InputError(
            f"{meta_path} has format_version {version!r}; this openbook reads version {FORMAT_VERSION} or "
            f"older: upgrade openbook or rebuild the BM25 index"
        )
    expected = {"k1": (int, float), "b": (int, float), "stopwords": list, "num_passages": int}
    for key, kind in expected.items():
        if not isinstance(meta.get(key), kind):
            raise InputError(f"{meta_path} is corrupt: field {key!r} is missing or mistyped; rebuild the BM25 index")
    if meta.get("stemmer") is not None and not isinstance(meta["stemmer"], str):
        raise InputError(f"{meta_path} is corrupt: field 'stemmer' is mistyped; rebuild the BM25 index")
