"""Abstention: say the knowledge base does not seem to hold the answer instead of answering.

The decision is one comparison (:func:`abstains`): a question is abstained on when its score is below the
threshold. The score (:func:`abstain_score`) is the signal named by :data:`openbook.presets.ABSTAIN_SIGNAL`,
chosen and calibrated on data by ``bench/abstention.py`` (docs/results.md, "Abstention").

A threshold only means something for the models it was calibrated on, so it travels with the model: the shipped
default's ``run.json`` holds it (``"abstain": {"signal": ..., "logprob_weight": ..., "threshold": ...}``), :func:`run_threshold` reads it,
and :func:`openbook.rag.assemble.load_run` hands it to the model only when the run is loaded as it was calibrated
(same model kind and dense retrieval). Any other model has no threshold and never abstains unless it is given one
(``RAG.ask(abstain_threshold=...)``, ``openbook ask --abstain-threshold``); its answers still carry their score.
"""

from __future__ import annotations

import math

from openbook.errors import InputError
from openbook.presets import ABSTAIN_LOGPROB_WEIGHT, ABSTAIN_SIGNAL


def combined_score(top_score: float, logprob: float, weight: float) -> float:
    """The ``"combined"`` signal: a linear rule on the top retrieval score and the answer's log-likelihood per
    token (the direction of a logistic regression on the two, fitted by ``bench/abstention.py``)."""
    return top_score + weight * logprob


def abstain_score(passage_scores: list[float], logprob: float | None) -> float:
    """The abstention signal of one answer (:data:`~openbook.presets.ABSTAIN_SIGNAL`): the top retrieval score
    d(z)^T q(x) of its passages (``"top_score"``), its length-normalised log-likelihood log p(y|x) per token
    (``"logprob"``), or both (``"combined"``, :func:`combined_score`)."""
    top = max(passage_scores) if passage_scores else -math.inf
    if ABSTAIN_SIGNAL == "top_score":
        return float(top)
    lp = float(logprob) if logprob is not None else -math.inf
    return lp if ABSTAIN_SIGNAL == "logprob" else combined_score(float(top), lp, ABSTAIN_LOGPROB_WEIGHT)


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
    signal or (``"combined"``) another logprob weight."""
    block = spec.get("abstain")
    if block is None:
        return None
    if not isinstance(block, dict) or "threshold" not in block:
        raise InputError(f"{where}: 'abstain' must be {{\"signal\": ..., \"threshold\": ...}}")
    if block.get("signal") != ABSTAIN_SIGNAL or (
            ABSTAIN_SIGNAL == "combined" and block.get("logprob_weight") != ABSTAIN_LOGPROB_WEIGHT):
        return None  # calibrated for a score this code no longer computes
    return check_threshold(block["threshold"], f"{where}: abstain threshold")
