"""Answer and label matching: exact match, regex match and token F1 (open-domain QA), label accuracy.

* :func:`exact_match` -- open-domain QA (NQ, TriviaQA, WebQuestions; paper Table 1), after
  :func:`normalize_answer`;
* :func:`regex_match` -- CuratedTrec, whose answers are regular expressions;
* :func:`token_f1` -- SQuAD token F1;
* :func:`label_accuracy` -- FEVER and BoolQ labels, over a whole set.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence

from openbook.errors import InputError
from openbook.eval.metrics.base import _check_text, _check_texts, _same_length

# ---------------------------------------------------------------------------------------------------
# open-domain QA: exact match, regex match, token F1

_ARTICLES = re.compile(r"\b(a|an|the)\b", flags=re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """The standard open-domain QA answer normalisation.

    Follows ``normalize_answer`` of the official SQuAD v1.1 evaluation script (Rajpurkar et al., 2016),
    as used by DPR (``dpr/data/qa_validation.py``: ``_normalize_answer(_normalize(text))``) and KILT
    (``kilt/eval_downstream.py``): Unicode NFD first (DPR's ``_normalize``, so precomposed and
    decomposed accents compare equal), then lower-case, delete ASCII punctuation
    (``string.punctuation``; other punctuation such as curly quotes or dashes is kept, as in SQuAD),
    delete the articles "a", "an", "the" as whole words, and collapse runs of whitespace to one space.
    Accents are kept: "Röntgen" and "Rontgen" stay different.
    """
    text = unicodedata.normalize("NFD", _check_text(s, "answer")).lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0.

    Follows KILT's ``_exact_match_score`` under ``_metric_max_over_ground_truths`` (and DPR's
    ``exact_match_score``): :func:`normalize_answer` on both sides, maximum over the gold answers.
    ``golds`` must be a non-empty list of strings.
    """
    prediction = normalize_answer(prediction)
    return max(float(prediction == normalize_answer(gold)) for gold in _check_texts(golds, "golds"))


_REGEX_FLAGS = re.IGNORECASE | re.UNICODE | re.MULTILINE


def regex_match(prediction: str, patterns: Sequence[str]) -> float:
    """CuratedTrec: 1.0 if any gold regular expression matches anywhere in the prediction, else 0.0.

    Follows DPR's ``regex_match`` (``dpr/data/qa_validation.py``): each pattern is compiled with
    ``re.IGNORECASE | re.UNICODE | re.MULTILINE`` and searched for (``re.search``, not anchored at the
    start: the data's README says "a match anywhere in the prediction counts"). Prediction and patterns
    are both brought to Unicode NFC first, so an accented letter matches whether written precomposed or
    decomposed. The prediction is not otherwise normalised (the patterns are written against raw text).

    Unlike DPR, which silently treats a pattern that does not compile as a miss, an invalid pattern
    raises :class:`~openbook.errors.InputError` naming it (the CuratedTrec training file has one: it
    ends in a lone backslash).
    """
    prediction = unicodedata.normalize("NFC", _check_text(prediction, "prediction"))
    compiled = []
    for pattern in _check_texts(patterns, "patterns"):
        try:
            compiled.append(re.compile(unicodedata.normalize("NFC", pattern), _REGEX_FLAGS))
        except re.error as exc:
            raise InputError(f"invalid answer regular expression {pattern!r}: {exc}") from None
    return max(float(regex.search(prediction) is not None) for regex in compiled)


def _f1(prediction_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    if not prediction_tokens or not gold_tokens:
        return float(list(prediction_tokens) == list(gold_tokens))
    same = sum((Counter(prediction_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(prediction_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """SQuAD token F1 of the prediction against its best gold answer.

    Follows ``f1_score`` of the official SQuAD v1.1 evaluation script (KILT's ``_f1_score``): both sides
    go through :func:`normalize_answer` and are split on whitespace; with ``common`` the size of the
    multiset intersection, precision = common / |prediction|, recall = common / |gold|, F1 their
    harmonic mean; the maximum over the gold answers. One addition from the SQuAD v2.0 script
    (``compute_f1``): when either side normalises to nothing, F1 is 1.0 if both do and 0.0 otherwise
    (v1.1 would give 0.0 even where exact match gives 1.0).
    """
    prediction_tokens = normalize_answer(prediction).split()
    return max(_f1(prediction_tokens, normalize_answer(gold).split()) for gold in _check_texts(golds, "golds"))


# ---------------------------------------------------------------------------------------------------
# classification


def label_accuracy(predictions: Sequence[str], golds: Sequence[str]) -> float:
    """The fraction of predicted labels equal to the gold labels (FEVER 3-/2-way, BoolQ yes/no).

    The paper's "label accuracy" (section 3.4). Labels are compared after stripping surrounding
    whitespace, case-insensitively (``str.casefold``): "SUPPORTS", " supports " and "Supports" are the
    same label; nothing else is normalised ("not enough info" differs from "NOT ENOUGH INFO." by the
    full stop). Both lists must be non-empty and of equal length.
    """
    predictions = _check_texts(predictions, "predictions")
    golds = _check_texts(golds, "golds")
    _same_length(predictions, golds, "predictions", "golds")
    hits = sum(p.strip().casefold() == g.strip().casefold() for p, g in zip(predictions, golds))
    return hits / len(golds)
