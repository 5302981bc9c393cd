"""Jeopardy question generation: Q-BLEU-1 (Table 2, "SQuAD-tuned Q-BLEU-1") and its token classes."""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Mapping

from openbook.errors import InputError
from openbook.eval.metrics.base import _check_text
from openbook.eval.metrics.generation import _WORD, sentence_bleu_1, word_tokens

# ---------------------------------------------------------------------------------------------------
# Jeopardy question generation: Q-BLEU-1

# The question words of the released Answerability-Metric code (``question_words_global``).
QUESTION_WORDS = frozenset({"what", "which", "why", "who", "whom", "whose", "where", "when", "how"})
# "What"/"which" are followed by the answer type ("which river"), which counts as a question word too.
_TYPE_PREFIXES = frozenset({"what", "which"})

# Function (stop) words: NLTK's classic English stop-word list without the question words above, the
# list the released Answerability-Metric code uses (``stop_words``).
FUNCTION_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be been before being below between
    both but by can did do does doing don down during each few for from further had has have having he
    her here hers herself him himself his i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own s same she should so some
    such t than that the their theirs them themselves then there these they this those through to too
    under until up very was we were while will with you your yours yourself yourselves
    """.split()
)

# SQuAD-tuned Q-BLEU-1 weights (see q_bleu_1): relevant words, named entities, question words, function
# words (the remainder, as in the released code), and delta.
DEFAULT_QBLEU_WEIGHTS: Mapping[str, float] = {"w_r": 0.36, "w_ne": 0.41, "w_q": 0.20, "w_f": 0.03, "delta": 0.66}

_QBLEU_CLASSES = ("relevant", "named_entity", "question", "function")
_SENTENCE_END = frozenset(".!?")


def qbleu_token_classes(text: str) -> dict[str, list[str]]:
    """Split a question into Q-BLEU's four token classes; each token (lower-cased) goes to exactly one.

    Tokens are :func:`word_tokens` (Unicode NFC, runs of word characters), classified in this order:

    1. ``question``: a question word (:data:`QUESTION_WORDS`), and the word right after "what" or
       "which" (the answer type: "which *river*"), as in the released code's ``questiontype``;
    2. ``function``: a function word (:data:`FUNCTION_WORDS`, any case: "The", "This");
    3. ``named_entity``: a deterministic stand-in for a named-entity tagger (none is available
       offline): a token containing a digit ("1986", "3"), or a capitalised token that does not start a
       sentence (the first token, or one after ".", "!" or "?"), like the released code's ``NER_line``
       which takes capitalised words after the leading question word. So "Mexico" in "In 1986 Mexico
       scored" is an entity, but a sentence-initial "Mexico scored" is not (it is a relevant word);
    4. ``relevant``: every other (content) word.
    """
    text = unicodedata.normalize("NFC", _check_text(text, "text"))
    classes: dict[str, list[str]] = {name: [] for name in _QBLEU_CLASSES}
    previous_end = 0
    sentence_start = True
    after_type_prefix = False
    for match in _WORD.finditer(text):
        token, word = match.group(), match.group().lower()
        between = text[previous_end : match.start()]
        if any(ch in _SENTENCE_END for ch in between):
            sentence_start = True
        if word in QUESTION_WORDS or after_type_prefix:
            name = "question"
        elif word in FUNCTION_WORDS:
            name = "function"
        elif any(ch.isdigit() for ch in token) or (token[0].isupper() and not sentence_start):
            name = "named_entity"
        else:
            name = "relevant"
        classes[name].append(word)
        after_type_prefix = word in _TYPE_PREFIXES and not after_type_prefix
        sentence_start = False
        previous_end = match.end()
    return classes


def _check_weights(w_r: float, w_ne: float, w_q: float, w_f: float | None, delta: float) -> tuple[float, ...]:
    for name, value in (("w_r", w_r), ("w_ne", w_ne), ("w_q", w_q), ("delta", delta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise InputError(f"Q-BLEU {name} must be a number in [0, 1], got {value!r}")
    if w_f is None:
        w_f = 1.0 - w_r - w_ne - w_q
    if isinstance(w_f, bool) or not isinstance(w_f, (int, float)) or w_f < -1e-9:
        raise InputError(f"Q-BLEU weights w_r + w_ne + w_q must be at most 1 (w_f = {w_f!r})")
    if abs(w_r + w_ne + w_q + w_f - 1.0) > 1e-6:
        raise InputError(f"Q-BLEU weights must sum to 1, got w_r + w_ne + w_q + w_f = {w_r + w_ne + w_q + w_f:g}")
    return float(w_r), float(w_ne), float(w_q), max(0.0, float(w_f)), float(delta)


def q_bleu_1(
    prediction: str,
    reference: str,
    *,
    w_r: float = DEFAULT_QBLEU_WEIGHTS["w_r"],
    w_ne: float = DEFAULT_QBLEU_WEIGHTS["w_ne"],
    w_q: float = DEFAULT_QBLEU_WEIGHTS["w_q"],
    w_f: float | None = None,
    delta: float = DEFAULT_QBLEU_WEIGHTS["delta"],
) -> float:
    """Q-BLEU-1 of a generated question against its reference (Jeopardy question generation).

    Follows the definition of Nema & Khapra (2018), "Towards a Better Metric for Evaluating Question
    Generation Systems", EMNLP, section 4:

        Q-BLEU-1 = delta * Answerability + (1 - delta) * BLEU-1

    where, over the token classes E = {relevant content words, named entities, question words,
    function words} of :func:`qbleu_token_classes`, with h_i the number of class-i tokens of the
    prediction s that also occur in the reference r (clipped multiset counts) and l_i(x) the class-i
    tokens of x::

        P = sum_i w_i * h_i / |l_i(s)|      R = sum_i w_i * h_i / |l_i(r)|
        Answerability = 2 * P * R / (P + R)          (0 when P + R = 0)

    A class with no tokens in either question is left out and the weights of the others are rescaled
    to sum to 1 (neither free credit nor a penalty for, say, two questions without named entities);
    a class with tokens on one side only contributes 0 to P and R. BLEU-1 is :func:`sentence_bleu_1`
    (clipped unigram precision times brevity penalty, no smoothing) over the same lower-cased tokens,
    punctuation dropped (the released code uses coco-caption's BLEU-1 over PTB-tokenised, lower-cased
    text). A set's Q-BLEU-1 is the :func:`aggregate` (mean) of this, as in the released code.

    The defaults are the SQuAD-tuned constants the RAG paper refers to ("SQuAD-tuned Q-BLEU-1",
    following Zhang & Bansal, 2019): w_ne = 0.41, w_q = 0.20, w_r = 0.36, delta = 0.66, and w_f the
    remainder 1 - w_r - w_ne - w_q = 0.03 (the released code, github.com/PrekshaNema25/
    Answerability-Metric, takes the function-word weight as that remainder; its README's example
    values 0.6/0.2/0.1/0.7 are not the tuned ones). These are the values passed to the released
    ``answerability_score.py --data_type squad --ngram_metric Bleu_1`` to reproduce Zhang & Bansal's
    Q-BLEU1 (github.com/ZhangShiyue/QGforQA issue #2). They could not be checked against the paper's
    own table here, hence they are parameters. (A script of the metric's author uses the same
    w_ne = 0.41, w_q = 0.20, delta = 0.66 but w_r = 0.20 for Q-BLEU-4.)

    Differences from the released code, which adds up per-class F-scores of coco-caption BLEU-1 (with
    a brevity penalty inside each class) as sum_i w_i * F_i: this follows the paper's P/R formula,
    has no brevity penalty inside a class, and leaves out a class empty in both questions (the
    released code scores such a class 0, so there an identical question without named entities
    scores below 1.0). Named entities come from the heuristic of :func:`qbleu_token_classes`, not
    from a tagger.
    """
    w_r, w_ne, w_q, w_f, delta = _check_weights(w_r, w_ne, w_q, w_f, delta)
    weights = dict(zip(_QBLEU_CLASSES, (w_r, w_ne, w_q, w_f)))
    hyp, ref = qbleu_token_classes(prediction), qbleu_token_classes(reference)
    precision = recall = present = 0.0
    for name, weight in weights.items():
        h, r = hyp[name], ref[name]
        if h or r:
            present += weight
        if h and r:
            common = sum((Counter(h) & Counter(r)).values())
            precision += weight * common / len(h)
            recall += weight * common / len(r)
    if present == 0:  # no tokens of a weighted class on either side (two empty questions)
        answerability = 1.0 if not word_tokens(prediction) and not word_tokens(reference) else 0.0
    else:
        precision, recall = precision / present, recall / present
        answerability = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    hyp_tokens, ref_tokens = word_tokens(prediction), word_tokens(reference)
    if hyp_tokens and ref_tokens:
        bleu = sentence_bleu_1(" ".join(hyp_tokens), [" ".join(ref_tokens)], lowercase=False, tokenize="none")
    else:
        bleu = float(not hyp_tokens and not ref_tokens)
    return delta * answerability + (1.0 - delta) * bleu
