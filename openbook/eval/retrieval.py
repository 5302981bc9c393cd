"""Retrieval evaluation: does the top-k hold an answer string, or the gold passage?

Metrics (pure functions):

* :func:`answer_in_passage` -- DPR's ``has_answer`` with ``match_type="string"`` (Karpukhin et al.,
  2020, ``dpr/data/qa_validation.py``): passage and answer are Unicode-NFD normalised and split by
  DPR's ``SimpleTokenizer`` regex into tokens that are either runs of letters, digits and combining
  marks (``[\\p{L}\\p{N}\\p{M}]+``) or single other non-space characters (so punctuation is kept, one
  character per token); tokens are lower-cased, and a passage has the answer if the answer's token
  sequence occurs contiguously in the passage's. So case never matters, ``"Röntgen"`` matches itself
  whether written precomposed or decomposed but not ``"Rontgen"``, and ``"18, 2018"`` matches
  ``"18 , 2018"`` but not ``"18 2018"``. One deliberate difference from DPR: an answer with no tokens
  never matches (DPR's loop counts it as found in every passage). ``mode="lenient"`` additionally drops
  accents (combining marks) and punctuation tokens on both sides, so ``"Rontgen"`` matches
  ``"Röntgen"`` and ``"18 2018"`` matches ``"18, 2018"``; the reported numbers use ``"dpr"``.
* :func:`gold_match` -- a retrieved passage *is* the gold passage if its title equals the gold title
  and one text contains the other, both after collapsing runs of whitespace (titles and texts compared
  exactly otherwise, case included). Containment rather than equality because a knowledge base cuts
  articles into <= 100-word chunks: every chunk of the gold passage counts (the demo knowledge base
  holds the NQ gold passages as ``nqgold:*`` chunks), and so does a longer passage that contains the
  whole gold text.
* :func:`~openbook.eval.metrics.recall_at_k` -- the fraction of questions with at least one hit in the
  top k (the one definition, shared with the task metrics).

:func:`evaluate_retrieval` runs retrievers -- :class:`openbook.index.retriever.Retriever` objects, the
one retrieval seam that the RAG model also uses -- over questions in batches and reports recall@k of
answers and of gold passages for each. The standard retrievers over a knowledge base (dense, BM25,
hybrid) come from :func:`standard_retrievers`.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import regex

from openbook.errors import InputError, check_k, positive_int
from openbook.eval.metrics import recall_at_k
from openbook.index.bm25 import knowledge_base_bm25
from openbook.index.retriever import HYBRID_DEPTH, RETRIEVERS, Retriever, make_retriever

DEFAULT_KS = (1, 5, 20, 100)
MATCH_MODES = ("dpr", "lenient", "regex")  # regex: answers are patterns (CuratedTrec), as in DPR
RETRIEVER_NAMES = RETRIEVERS
__all__ = ["HYBRID_DEPTH", "answer_in_passage", "answers_anywhere", "evaluate_retrieval", "gold_match",
           "knowledge_base_bm25", "recall_at_k", "standard_retrievers"]

# DPR's SimpleTokenizer: alphanumeric runs (with combining marks), or any single non-space character.
_DPR_TOKEN = regex.compile(
    r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])", flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE
)
_WHITESPACE = regex.compile(r"\s+")



# ---------------------------------------------------------------------------------------------------
# metrics


def _check_mode(mode: str) -> str:
    if mode not in MATCH_MODES:
        raise InputError(f"answer match mode must be one of {', '.join(MATCH_MODES)}, got {mode!r}")
    return mode


def answer_tokens(text: str, mode: str = "dpr") -> tuple[str, ...]:
    """The lower-cased DPR tokens of ``text`` (``mode="lenient"``: without accents and punctuation)."""
    text = unicodedata.normalize("NFD", text)
    if mode == "lenient":
        text = "".join(ch for ch in text if not unicodedata.combining(ch))
        return tuple(m.group().lower() for m in _DPR_TOKEN.finditer(text) if m.group(1) is not None)
    _check_mode(mode)
    return tuple(m.group().lower() for m in _DPR_TOKEN.finditer(text))


def _contains(tokens: Sequence[str], answer: Sequence[str]) -> bool:
    """Whether ``answer`` (non-empty) occurs as a contiguous run in ``tokens``."""
    length = len(answer)
    if length == 0 or length > len(tokens):
        return False
    first = answer[0]
    for start in range(len(tokens) - length + 1):
        if tokens[start] == first and tuple(tokens[start : start + length]) == tuple(answer):
            return True
    return False


def answer_in_passage(passage_text: str, answers: Iterable[str], mode: str = "dpr") -> bool:
    """DPR's ``has_answer``: whether any answer's token sequence occurs in the passage (module docs); in
    ``regex`` mode, whether any answer pattern matches anywhere in it (case ignored)."""
    if _check_mode(mode) == "regex":
        matcher = _Matcher(mode)
        return matcher.has_answer(passage_text, [matcher.answer(a) for a in answers])
    tokens = answer_tokens(passage_text, mode)
    return any(_contains(tokens, answer_tokens(answer, mode)) for answer in answers)


def _collapse(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()


def _field(item: Any, name: str) -> str:
    value = item.get(name, "") if isinstance(item, Mapping) else getattr(item, name, "")
    return "" if value is None else str(value)


def gold_match(passage: Any, gold: Any) -> bool:
    """Whether ``passage`` is (a chunk of) the ``gold`` passage: same title, one text inside the other.

    Both are objects with ``title`` and ``text`` attributes or dicts with those keys; see module docs.
    """
    if gold is None:
        return False
    if _collapse(_field(passage, "title")) != _collapse(_field(gold, "title")):
        return False
    text, gold_text = _collapse(_field(passage, "text")), _collapse(_field(gold, "text"))
    return bool(text) and bool(gold_text) and (text in gold_text or gold_text in text)


def check_ks(ks: Iterable[int]) -> list[int]:
    """Sorted distinct ks, each checked by :func:`openbook.errors.check_k`."""
    values = sorted({check_k(k) for k in ks})
    if not values:
        raise InputError("give at least one k")
    return values


# ---------------------------------------------------------------------------------------------------
# evaluation


class _Matcher:
    """Answer and gold matching with per-text caches (the same passages come back for many questions)."""

    def __init__(self, mode: str):
        self.mode = _check_mode(mode)
        self._tokens: dict[str, tuple[str, ...]] = {}

    def answer(self, answer: str):
        """An answer as the matcher compares it: DPR tokens, or a compiled pattern in ``regex`` mode."""
        if self.mode != "regex":
            return self.tokens(answer)
        try:
            return re.compile(answer, re.IGNORECASE)
        except re.error as exc:
            raise InputError(f"answer {answer!r} is not a regular expression: {exc}") from None

    def tokens(self, text: str) -> tuple[str, ...]:
        cached = self._tokens.get(text)
        if cached is None:
            cached = self._tokens[text] = answer_tokens(text, self.mode)
        return cached

    def has_answer(self, text: str, answers: list) -> bool:
        if self.mode == "regex":  # DPR's regex match: the pattern anywhere in the passage
            return any(pattern.search(text) for pattern in answers)
        tokens = self.tokens(text)
        return any(_contains(tokens, answer) for answer in answers)


def answers_anywhere(texts: Iterable[str], answers: Sequence[Sequence[str]], mode: str = "dpr",
                     chunk: int = 1000) -> np.ndarray:
    """For each question's ``answers``, whether any of ``texts`` holds one (:func:`answer_in_passage`): recall at
    k = every passage, the ceiling of any retriever over these texts. ``(len(answers),)`` bools.

    One pass over ``texts``, ``chunk`` at a time. A chunk, joined by newlines, is searched for each open question's
    cues: in ``regex`` mode its patterns (multi-line, so that ``^`` and ``$`` match at a passage's ends), else each
    answer's longest token, case-folded, in the case-folded NFD text (case folding has no context, so a token of a
    passage is a substring of the folded text; ``lenient`` drops the accents of both). Only the passages holding a
    cue are matched exactly."""
    mode = _check_mode(mode)
    chunk = positive_int(chunk, "chunk")
    matcher = _Matcher(mode)
    wanted = [[matcher.answer(a) for a in row] for row in answers]
    if mode == "regex":  # in a chunk, ^ and $ are a passage's ends; with \A or \Z, only its passages are searched
        cues = [[None if "\\A" in a or "\\Z" in a else re.compile(a, re.IGNORECASE | re.MULTILINE) for a in row]
                for row in answers]
    else:
        cues = [[max(t, key=len).casefold() for t in row if t] for row in wanted]
    found = np.zeros(len(wanted), dtype=bool)
    block: list[str] = []

    def fold(text: str) -> str:
        folded = unicodedata.normalize("NFD", text).casefold()
        if mode == "lenient":  # its tokens have no accents
            folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
        return folded

    def search() -> None:
        if mode == "regex":  # a pattern found in the chunk is looked for in its passages
            joined = "\n".join(block)
            for q in np.flatnonzero(~found):
                found[q] = any(cue is None or cue.search(joined) for cue in cues[q]) and any(
                    matcher.has_answer(text, wanted[q]) for text in block)
            return
        texts_folded = [fold(text) for text in block]
        folded = "\n".join(texts_folded)  # = fold(joined): folding goes character by character
        starts = np.cumsum([0] + [len(text) + 1 for text in texts_folded])
        local = _Matcher(mode)  # this chunk's tokens
        for q in np.flatnonzero(~found):
            cued = set()  # the passages holding a cue
            for cue in cues[q]:
                at = folded.find(cue)
                while at >= 0:
                    i = int(np.searchsorted(starts, at, side="right")) - 1
                    cued.add(i)
                    at = folded.find(cue, int(starts[i + 1]))
            found[q] = any(local.has_answer(block[i], wanted[q]) for i in sorted(cued))

    for text in texts:
        block.append(text)
        if len(block) == chunk:
            search()
            block.clear()
    if block:
        search()
    return found


def _check_questions(questions: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    questions = list(questions)
    if not questions:
        raise InputError("no questions to evaluate")
    for i, record in enumerate(questions, 1):
        if not isinstance(record, Mapping):
            raise InputError(f"question {i} is a {type(record).__name__}, not a {{question, answers}} record")
        if not isinstance(record.get("question"), str) or not record["question"].strip():
            raise InputError(f"question {i} has no question text")
        answers = record.get("answers")
        if isinstance(answers, str) or not isinstance(answers, Sequence) or not all(isinstance(a, str) for a in answers):
            raise InputError(f"question {i}: 'answers' must be a list of strings")
    return questions


def evaluate_retrieval(
    questions: Sequence[Mapping[str, Any]],
    retrievers: Mapping[str, Retriever],
    ks: Iterable[int] = DEFAULT_KS,
    batch_size: int = 64,
    mode: str = "dpr",
    progress: bool = False,
) -> dict[str, Any]:
    """Recall@k of answers and of gold passages for each retriever.

    ``questions``: records ``{"question", "answers", "gold"}`` (see :mod:`openbook.eval.datasets`; ``gold``
    may be missing or None). Each retriever's ``retrieve`` is called on batches of ``batch_size`` question
    strings with ``k = max(ks)`` (at most its ``num_passages``: recall@k for a larger k counts every
    passage) and must return one list of passages (``.title``, ``.text``) per question, best first.

    Returns ``{"num_questions", "num_with_gold", "ks", "match", "retrievers": {name: {"answer_recall":
    {k: fraction}, "gold_recall": {k: fraction} | None, "seconds"}}}``; gold recall is over the
    questions that have a gold passage (None if none has), ``seconds`` is the time spent retrieving.
    """
    questions = _check_questions(questions)
    ks = check_ks(ks)
    if not retrievers:
        raise InputError("no retrievers to evaluate")
    positive_int(batch_size, "batch_size")
    matcher = _Matcher(mode)
    depth = ks[-1]
    texts = [record["question"].strip() for record in questions]
    answers = [[matcher.answer(a) for a in record["answers"]] for record in questions]
    answers = [[a for a in tokens if a] for tokens in answers]
    golds = [record.get("gold") for record in questions]
    with_gold = np.array([gold is not None for gold in golds])

    report: dict[str, Any] = {
        "num_questions": len(questions),
        "num_with_gold": int(with_gold.sum()),
        "ks": ks,
        "match": mode,
        "retrievers": {},
    }
    for name, retriever in retrievers.items():
        answer_hits = np.zeros((len(questions), depth), dtype=bool)
        gold_hits = np.zeros((len(questions), depth), dtype=bool)
        seconds = 0.0
        fetch = min(depth, getattr(retriever, "num_passages", depth))
        for start in _progress(range(0, len(questions), batch_size), name, len(questions), batch_size, progress):
            batch = texts[start : start + batch_size]
            began = time.perf_counter()
            results = list(retriever.retrieve(batch, fetch).passages)
            seconds += time.perf_counter() - began
            if len(results) != len(batch):
                raise InputError(f"retriever {name!r} returned {len(results)} results for {len(batch)} questions")
            for offset, passages in enumerate(results):
                row = start + offset
                for rank, passage in enumerate(list(passages)[:depth]):
                    answer_hits[row, rank] = matcher.has_answer(_field(passage, "text"), answers[row])
                    gold_hits[row, rank] = gold_match(passage, golds[row])
        report["retrievers"][name] = {
            "answer_recall": recall_at_k(answer_hits, ks),
            "gold_recall": recall_at_k(gold_hits[with_gold], ks) if with_gold.any() else None,
            "seconds": round(seconds, 3),
        }
    return report


def _progress(batches: range, name: str, total: int, batch_size: int, enabled: bool):
    if not enabled:
        yield from batches
        return
    from openbook.progress import progress_bar

    with progress_bar(total=total, unit="question", desc=f"retrieving ({name})", leave=False) as bar:
        for start in batches:
            yield start
            bar.update(min(batch_size, total - start))


# ---------------------------------------------------------------------------------------------------
# retrievers over a knowledge base


def standard_retrievers(
    encoder, kb, names: Sequence[str] = RETRIEVER_NAMES, depth: int = HYBRID_DEPTH, progress: bool = False
) -> dict[str, Retriever]:
    """``{"dense", "bm25", "hybrid"}`` retrievers over ``kb`` (any subset, in the order of ``names``).

    dense: the query encoder ``encoder`` + ``kb.search``; bm25: :func:`knowledge_base_bm25`; hybrid:
    reciprocal rank fusion of the dense and BM25 top-``depth`` (one BM25 index shared by both).
    """
    from openbook.index.retriever import BM25Retriever, HybridRetriever

    unknown = [n for n in names if n not in RETRIEVER_NAMES]
    if unknown or not names:
        raise InputError(f"retrievers must be among {', '.join(RETRIEVER_NAMES)}, got {', '.join(names) or 'none'}")
    dense = make_retriever("dense", kb, encode=encoder.encode_queries)
    bm25 = BM25Retriever(kb, progress=progress)
    built = {"dense": dense, "bm25": bm25, "hybrid": HybridRetriever(kb, [dense, bm25], depth=depth)}
    return {name: built[name] for name in names}
