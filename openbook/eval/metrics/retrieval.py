"""Retrieval metrics: :func:`recall_at_k` and :func:`gold_title_overlap` (section 4.4: FEVER gold articles
in the top 1 and top 10), comparing titles by :func:`title_key`."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

import numpy as np

from openbook.errors import InputError
from openbook.eval.metrics.base import _check_ks, _check_texts, _same_length

# ---------------------------------------------------------------------------------------------------
# retrieval


def recall_at_k(ranked_hits: Sequence[Sequence[bool]], ks: Iterable[int]) -> dict[int, float]:
    """``{k: fraction of queries with a hit among their first k results}``.

    ``ranked_hits`` holds one list per query, in rank order, True where that result is relevant (an
    answer-bearing passage, a gold article ...): a list of lists, or a boolean ``(queries, ranks)``
    array. Lists may differ in length; a k beyond a query's list uses the whole list (fewer results were
    retrieved). No queries raises :class:`~openbook.errors.InputError`.
    """
    ks = _check_ks(ks)
    if isinstance(ranked_hits, np.ndarray) and ranked_hits.ndim == 2:  # the evaluators' (queries, ranks) hits
        if not len(ranked_hits):
            raise InputError("recall@k of no queries is undefined")
        hits = ranked_hits.astype(bool)
        found = hits.any(axis=1)
        first = hits.argmax(axis=1)  # rank of the first hit, where there is one
        return {k: float((found & (first < k)).mean()) for k in ks}
    if isinstance(ranked_hits, (str, bytes)) or not isinstance(ranked_hits, Iterable):
        raise InputError("ranked_hits must be a list of per-query lists of booleans")
    first_hits = []
    for i, hits in enumerate(ranked_hits):
        if isinstance(hits, (str, bytes)) or not isinstance(hits, Iterable):
            raise InputError(f"ranked_hits[{i}] must be a list of booleans, got {type(hits).__name__}")
        first_hits.append(next((rank for rank, hit in enumerate(hits) if hit), None))
    if not first_hits:
        raise InputError("recall@k of no queries is undefined")
    return {k: sum(r is not None and r < k for r in first_hits) / len(first_hits) for k in ks}


_FEVER_BRACKETS = {
    "-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}", "-COLON-": ":",
}
_FEVER_BRACKET = re.compile("|".join(re.escape(token) for token in _FEVER_BRACKETS))


def title_key(title: str) -> str:
    """A Wikipedia title in the one form :func:`gold_title_overlap` compares, so FEVER's page ids and a
    knowledge base's titles meet: ``Nikolaj_Coster-Waldau`` and ``Ghost_-LRB-1990_film-RRB-`` give
    "Nikolaj Coster-Waldau" and "Ghost (1990 film)" -- Unicode NFC, ``_`` as a space, FEVER's bracket and
    colon tokens (``-LRB-``, ``-COLON-`` ...) as the characters, whitespace collapsed.

    Case is kept, except that the first character is upper-cased, because that is how Wikipedia titles
    work: they are case-sensitive after the first letter ("Red Dwarf", the sitcom, and "Red dwarf", the
    star, are different articles, so casefolding would count a passage from one as a hit for the other),
    while the first letter is always stored upper-case (the page id ``IPod`` of the article shown as
    "iPod"), so a knowledge base that writes the displayed form still matches FEVER's id."""
    title = unicodedata.normalize("NFC", title).replace("_", " ")
    title = _FEVER_BRACKET.sub(lambda m: _FEVER_BRACKETS[m.group()], title)
    title = " ".join(title.split())
    return title[:1].upper() + title[1:]


def gold_title_overlap(
    retrieved_titles: Sequence[Sequence[str]],
    gold_titles: Sequence[Iterable[str]],
    ks: Iterable[int] = (1, 10),
    skip_empty: bool = True,
) -> dict[int, float]:
    """``{k: fraction of claims with a gold evidence article among the titles of the top k documents}``.

    The paper's section 4.4 analysis for FEVER ("the top retrieved document is from a gold article in
    71% of cases, and a gold article is present in the top 10 retrieved articles in 90% of cases"):
    :func:`recall_at_k` where a retrieved document is a hit if its title is one of the claim's gold
    evidence titles. Titles compare after :func:`title_key`, so FEVER's ``Nikolaj_Coster-Waldau`` and
    ``Ghost_-LRB-1990_film-RRB-`` equal "Nikolaj Coster-Waldau" and "Ghost (1990 film)"; case matters
    after the first letter.

    ``retrieved_titles[i]`` lists the titles of claim i's retrieved documents in rank order;
    ``gold_titles[i]`` is its set of gold evidence titles. Claims with no gold title (FEVER's NOT ENOUGH
    INFO) are left out when ``skip_empty`` (the default), since they cannot have a gold article; with
    ``skip_empty=False`` they count as misses. No claim left raises
    :class:`~openbook.errors.InputError`.
    """
    if isinstance(retrieved_titles, (str, bytes)) or not isinstance(retrieved_titles, Iterable):
        raise InputError("retrieved_titles must be a list of per-claim title lists")
    if isinstance(gold_titles, (str, bytes)) or not isinstance(gold_titles, Iterable):
        raise InputError("gold_titles must be a list of per-claim title sets")
    retrieved_titles, gold_titles = list(retrieved_titles), list(gold_titles)
    _same_length(retrieved_titles, gold_titles, "retrieved_titles", "gold_titles")
    ranked_hits = []
    for i, (titles, golds) in enumerate(zip(retrieved_titles, gold_titles)):
        gold_keys = {title_key(t) for t in _check_texts(golds, f"gold_titles[{i}]", allow_empty=True)}
        if not gold_keys and skip_empty:
            continue
        titles = _check_texts(titles, f"retrieved_titles[{i}]", allow_empty=True)
        ranked_hits.append([title_key(t) in gold_keys for t in titles])
    if not ranked_hits:
        raise InputError("no claims with gold evidence titles to evaluate")
    return recall_at_k(ranked_hits, ks)
