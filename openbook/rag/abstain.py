"""Abstention: say the knowledge base does not seem to hold the answer instead of answering.

The decision is one comparison (:func:`abstains`): a question is abstained on when its score is below the
threshold. The score (:func:`abstain_score`) is the signal named by :data:`openbook.presets.ABSTAIN_SIGNAL`,
chosen and calibrated on data by ``bench/abstention.py`` (docs/results.md, "Abstention"). Its features
(:func:`abstain_features`) are what one answer already carries: the top retrieval score d(z)^T q(x), the answer's
log-likelihood per token, how much of p(z|x) lies on passages that contain the answer's words (an answer read
from the book is in it; a guess mostly is not), the answer's length in words, how many of the question's
content words the passages mention (a book that holds the answer usually names what the question asks about), how
many of them the passage the answer was found in mentions (an answer copied from a passage about something else is a
guess), and, for a model with a passage judge (:mod:`openbook.models.judge`, shipped with the default), the judge's
best logit that a passage read holds the answer, and its best logit among the passages the answer was found in (an
answer copied from a passage the judge doubts is a weak one).

A threshold only means something for the models it was calibrated on, so it travels with the model: the shipped
default's ``run.json`` holds it (``"abstain": {"signal": ..., "weights": ..., "threshold": ...}``),
:func:`run_threshold` reads it, and :func:`openbook.rag.assemble.load_run` hands it to the model only when the run
is loaded as it was calibrated (same model kind and dense retrieval). Any other model has no threshold and never
abstains unless it is given one (``RAG.ask(abstain_threshold=...)``, ``openbook ask --abstain-threshold``); its
answers still carry their score.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence

from openbook.errors import InputError
from openbook.presets import ABSTAIN_SIGNAL, ABSTAIN_WEIGHTS

# what abstain_features returns, in this order
FEATURES = ("top_score", "logprob", "support", "words", "coverage", "judge", "judge_answer", "answer_coverage")
# the features that need the passage judge's logits
JUDGED = ("judge", "judge_answer")
_WORD = re.compile(r"\w+")

#: One retrieved passage as the features read it: ``(d(z)^T q(x), p(z|x), title, text)``, and optionally the
#: passage judge's logit that it holds the answer as a fifth item.
Seen = tuple[float, float, str, str] | tuple[float, float, str, str, float]


def words(text: str) -> list[str]:
    """Lower-cased words of ``text`` with accents dropped (as DPR's ``has_answer`` compares answers)."""
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return _WORD.findall(text.lower())


def _contains(haystack: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return n > 0 and any(haystack[i: i + n] == needle for i in range(len(haystack) - n + 1))


@functools.cache
def _stopwords() -> frozenset[str]:
    """NLTK's English stop words (with what/who/when/...), as bm25s ships them (imported when first needed)."""
    from bm25s.stopwords import STOPWORDS_EN_PLUS

    return frozenset(STOPWORDS_EN_PLUS)


def content_words(text: str) -> list[str]:
    """The distinct :func:`words` of ``text`` that are not English stop words, in order."""
    stop = _stopwords()
    return list(dict.fromkeys(w for w in words(text) if w not in stop))


def abstain_features(question: str, answer: str, passages: Sequence[Seen], logprob: float | None) -> dict:
    """The features of one answer from its ``(score, p(z|x), title, text)`` passages: ``top_score``, the largest
    d(z)^T q(x); ``logprob``, log p(y|x) per token (-inf when unknown); ``support``, the p(z|x) of the passages
    whose words contain the answer's words in order; ``words``, the answer's length in words; ``coverage``, the
    share of the question's content words found in a passage's title and text, averaged under p(z|x) (0 for a
    question of stop words only); ``answer_coverage``, the largest such share among the passages that contain the
    answer's words (0 if none does); ``judge``, the largest passage-judge logit; ``judge_answer``, the largest
    passage-judge logit of the passages that contain the answer's words, the smallest of all if none does (both
    -inf when the passages were not judged)."""
    said, asked = words(answer), content_words(question)
    support = coverage = answer_coverage = 0.0
    judged = [seen[4] for seen in passages if len(seen) > 4 and seen[4] is not None]
    found: list[float] = []  # the judge's logits of the passages that contain the answer
    for _, p, title, text, *rest in passages:  # each passage's words read once, for every feature
        body = words(text)
        named = set(body).union(words(title))
        mentioned = sum(w in named for w in asked) / len(asked) if asked else 0.0
        coverage += p * mentioned
        if _contains(body, said):
            support += p
            answer_coverage = max(answer_coverage, mentioned)
            found += [rest[0]] if rest and rest[0] is not None else []
    return {"top_score": float(max((seen[0] for seen in passages), default=-math.inf)),
            "logprob": float(logprob) if logprob is not None else -math.inf,
            "support": float(support), "words": float(len(said)), "coverage": float(coverage),
            "judge": float(max(judged, default=-math.inf)),
            "judge_answer": float(max(found) if found else min(judged, default=-math.inf)),
            "answer_coverage": float(answer_coverage)}


def combined_score(features: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """The ``"combined"`` signal: a weighted sum of the features (the direction of a class-balanced logistic
    regression on them, fitted by ``bench/abstention.py``). A zero weight leaves its feature out, and so does an
    unknown feature (-inf: passages never judged, a log-likelihood not computed), so a model without a judge still
    gets a finite score to compare with a threshold it is given."""
    return float(sum(w * features[name] for name, w in weights.items() if w and math.isfinite(features[name])))


def abstain_score(question: str, answer: str, passages: Sequence[Seen], logprob: float | None) -> float:
    """The abstention signal of one answer (:data:`~openbook.presets.ABSTAIN_SIGNAL`): the top retrieval score
    (``"top_score"``), the log-likelihood per token (``"logprob"``), or the weighted features (``"combined"``)."""
    features = abstain_features(question, answer, passages, logprob)
    if ABSTAIN_SIGNAL in ("top_score", "logprob"):
        return features[ABSTAIN_SIGNAL]
    return combined_score(features, ABSTAIN_WEIGHTS)


def abstains(score: float, threshold: float | None) -> bool:
    """Abstain when the score is below the threshold; never without a threshold (an uncalibrated model)."""
    return threshold is not None and score < threshold


def check_threshold(value, where: str) -> float:
    """A threshold must be a finite number; ``where`` names it in the error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def run_threshold(spec: dict, where: str, judged: bool = False) -> float | None:
    """The calibrated threshold of a run's ``run.json`` (``spec``), or None if it holds none or one of another
    signal or (``"combined"``) other weights, or if its weights read the judge's logit and the model has no
    judge (``judged``)."""
    block = spec.get("abstain")
    if block is None:
        return None
    if not isinstance(block, dict) or "threshold" not in block:
        raise InputError(f"{where}: 'abstain' must be {{\"signal\": ..., \"threshold\": ...}}")
    if block.get("signal") != ABSTAIN_SIGNAL or (
            ABSTAIN_SIGNAL == "combined" and block.get("weights") != ABSTAIN_WEIGHTS):
        return None  # calibrated for a score this code no longer computes
    threshold = check_threshold(block["threshold"], f"{where}: abstain threshold")
    if ABSTAIN_SIGNAL == "combined" and any(ABSTAIN_WEIGHTS.get(name) for name in JUDGED) and not judged:
        return None  # calibrated with the judge's logits, which this model cannot give
    return threshold
