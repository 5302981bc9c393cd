"""Abstention: say the knowledge base does not seem to hold the answer instead of answering.

The decision is one comparison (:func:`abstains`): a question is abstained on when its score is below the
threshold. The score (:func:`abstain_score`) is the signal named by :data:`openbook.presets.ABSTAIN_SIGNAL`,
chosen and calibrated on data by ``bench/abstention.py`` (docs/results.md, "Abstention"). Its features
(:func:`abstain_features`) are what one answer already carries: the top retrieval score d(z)^T q(x), the answer's
log-likelihood per token, how much of p(z|x) lies on passages that contain the answer's words (an answer read
from the book is in it; a guess mostly is not), and the answer's length in words.

A threshold only means something for the models it was calibrated on, so it travels with the model: the shipped
default's ``run.json`` holds it (``"abstain": {"signal": ..., "weights": ..., "threshold": ...}``),
:func:`run_threshold` reads it, and :func:`openbook.rag.assemble.load_run` hands it to the model only when the run
is loaded as it was calibrated (same model kind and dense retrieval). Any other model has no threshold and never
abstains unless it is given one (``RAG.ask(abstain_threshold=...)``, ``openbook ask --abstain-threshold``); its
answers still carry their score.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence

from openbook.errors import InputError
from openbook.presets import ABSTAIN_SIGNAL, ABSTAIN_WEIGHTS

FEATURES = ("top_score", "logprob", "support", "words")  # what abstain_features returns, in this order
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """Lower-cased words of ``text`` with accents dropped (as DPR's ``has_answer`` compares answers)."""
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return _WORD.findall(text.lower())


def _contains(haystack: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return n > 0 and any(haystack[i: i + n] == needle for i in range(len(haystack) - n + 1))


def abstain_features(answer: str, passages: Sequence[tuple[float, float, str]], logprob: float | None) -> dict:
    """The features of one answer from its ``(score, p(z|x), text)`` passages: ``top_score``, the largest
    d(z)^T q(x); ``logprob``, log p(y|x) per token (-inf when unknown); ``support``, the p(z|x) of the passages
    whose words contain the answer's words in order; ``words``, the answer's length in words."""
    said = words(answer)
    return {"top_score": float(max((s for s, _, _ in passages), default=-math.inf)),
            "logprob": float(logprob) if logprob is not None else -math.inf,
            "support": float(sum(p for _, p, text in passages if _contains(words(text), said))),
            "words": float(len(said))}


def combined_score(features: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """The ``"combined"`` signal: a weighted sum of the features (the direction of a class-balanced logistic
    regression on them, fitted by ``bench/abstention.py``; a zero weight leaves its feature out, even -inf)."""
    return float(sum(w * features[name] for name, w in weights.items() if w))


def abstain_score(answer: str, passages: Sequence[tuple[float, float, str]], logprob: float | None) -> float:
    """The abstention signal of one answer (:data:`~openbook.presets.ABSTAIN_SIGNAL`): the top retrieval score
    (``"top_score"``), the log-likelihood per token (``"logprob"``), or all features (``"combined"``)."""
    features = abstain_features(answer, passages, logprob)
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


def run_threshold(spec: dict, where: str) -> float | None:
    """The calibrated threshold of a run's ``run.json`` (``spec``), or None if it holds none or one of another
    signal or (``"combined"``) other weights."""
    block = spec.get("abstain")
    if block is None:
        return None
    if not isinstance(block, dict) or "threshold" not in block:
        raise InputError(f"{where}: 'abstain' must be {{\"signal\": ..., \"threshold\": ...}}")
    if block.get("signal") != ABSTAIN_SIGNAL or (
            ABSTAIN_SIGNAL == "combined" and block.get("weights") != ABSTAIN_WEIGHTS):
        return None  # calibrated for a score this code no longer computes
    return check_threshold(block["threshold"], f"{where}: abstain threshold")
