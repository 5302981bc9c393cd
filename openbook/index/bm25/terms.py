"""How a BM25 index (:mod:`openbook.index.bm25`) turns passages and queries into terms.

What is indexed: each passage as the string ``title + " " + text`` (just ``text`` when the title is
empty), so the article title counts as part of the passage, as in DPR's BM25 baseline.

Tokenisation (the same for passages and queries, and stored with the index): Unicode NFKD with
combining marks removed (``"Röntgen"`` -> ``"rontgen"``), case folding, tokens = runs of Unicode word
characters (``\\w+``: letters, digits and ``_``; single characters and numbers are kept), then
optional stopword removal (default: the English list of ``bm25s``, which is Lucene's) and optional
Snowball stemming (``stemmer="english"``, needs the ``PyStemmer`` package).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from openbook.errors import InputError

_WORD = re.compile(r"\w+")


def _english_stopwords() -> list[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return list(STOPWORDS_EN)


def stopword_list(stopwords: str | Sequence[str] | None = "en") -> list[str]:
    """The sorted, case-folded stopwords an index built with ``stopwords`` uses (as in its settings)."""
    if stopwords == "en":
        words = _english_stopwords()
    elif stopwords is None:
        words = []
    elif isinstance(stopwords, str):
        raise InputError(f"stopwords must be 'en', a list of words or None, got {stopwords!r}")
    else:
        words = [str(w) for w in stopwords]
    return sorted({_fold(w) for w in words})


def passage_string(passage: Any) -> str:
    """The string indexed for a passage: ``title + " " + text``, or just ``text`` without a title."""
    title = str(getattr(passage, "title", "") or "").strip()
    text = str(getattr(passage, "text", "") or "")
    return f"{title} {text}" if title else text


def _fold(text: str) -> str:
    """NFKD, drop combining marks, case-fold."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


class _Tokenizer:
    """Folding + ``\\w+`` words, minus stopwords, optionally stemmed (see the module docstring)."""

    def __init__(self, stopwords: Sequence[str], stemmer: str | None):
        self.stopwords = sorted({_fold(w) for w in stopwords})
        self._stop = frozenset(self.stopwords)
        self.stemmer = stemmer
        self._stem = _load_stemmer(stemmer) if stemmer else None

    def __call__(self, text: str) -> list[str]:
        words = [w for w in _WORD.findall(_fold(text)) if w not in self._stop]
        if self._stem is not None and words:
            words = self._stem(words)
        return words


def _load_stemmer(language: str):
    if not isinstance(language, str) or not language:
        raise InputError(f"stemmer must be a Snowball language name such as 'english', got {language!r}")
    try:
        import Stemmer  # PyStemmer
    except ImportError:
        raise InputError(
            f"stemmer {language!r} needs the PyStemmer package (pip install PyStemmer), or build without a stemmer"
        ) from None
    try:
        stemmer = Stemmer.Stemmer(language)
    except KeyError:
        raise InputError(f"unknown Snowball stemmer language {language!r}") from None
    return stemmer.stemWords
