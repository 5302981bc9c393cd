"""Task metrics of the RAG paper (Lewis et al., 2020), KILT style: pure functions over strings and lists.

Per example (one prediction against its gold answers), each returning a float in [0, 1]:

* :func:`exact_match` -- open-domain QA (NQ, TriviaQA, WebQuestions; paper Table 1), after
  :func:`normalize_answer`;
* :func:`regex_match` -- CuratedTrec, whose answers are regular expressions;
* :func:`token_f1` -- SQuAD token F1;
* :func:`sentence_bleu_1`, :func:`rouge_l` -- abstractive QA (MS MARCO, Table 2);
* :func:`q_bleu_1` -- Jeopardy question generation (Table 2, "SQuAD-tuned Q-BLEU-1").

Over a whole set:

* :func:`aggregate` -- the mean of per-example values (a set's EM, F1, ROUGE-L, Q-BLEU-1 ...);
* :func:`bleu_1` -- corpus-level BLEU-1 (MS MARCO and Jeopardy "B-1" columns);
* :func:`label_accuracy` -- FEVER and BoolQ labels;
* :func:`distinct_ngram_ratio` -- generation diversity (Table 5);
* :func:`recall_at_k`, :func:`gold_title_overlap` -- retrieval (section 4.4: FEVER gold articles in the
  top 1 and top 10).

Scores are fractions in [0, 1], never percentages (the paper's tables print them x 100). Every function
checks its input and raises :class:`~openbook.errors.InputError` naming what is wrong; a metric over no
examples is undefined and raises rather than returning 0 (see :func:`aggregate`).

BLEU comes from ``sacrebleu`` and ROUGE-L from ``rouge-score``; both are imported when first used, so
importing this module costs nothing.
"""

from __future__ import annotations

import functools
import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from openbook.errors import InputError, positive_int

__all__ = [
    "DEFAULT_QBLEU_WEIGHTS",
    "FUNCTION_WORDS",
    "QUESTION_WORDS",
    "aggregate",
    "bleu_1",
    "distinct_ngram_ratio",
    "exact_match",
    "gold_title_overlap",
    "label_accuracy",
    "normalize_answer",
    "q_bleu_1",
    "qbleu_token_classes",
    "recall_at_k",
    "regex_match",
    "rouge_l",
    "sentence_bleu_1",
    "token_f1",
    "word_tokens",
]

# ---------------------------------------------------------------------------------------------------
# input checks


def _check_text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{name} must be a string, got {type(value).__name__}")
    return value


def _check_texts(values: Any, name: str, allow_empty: bool = False) -> list[str]:
    """A list of strings (a bare string is refused: it would be read as a list of characters)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InputError(f"{name} must be a list of strings, got {type(values).__name__}")
    values = list(values)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise InputError(f"{name}[{i}] must be a string, got {type(value).__name__}")
    if not values and not allow_empty:
        raise InputError(f"{name} is empty")
    return values


def _same_length(a: Sequence, b: Sequence, name_a: str, name_b: str) -> None:
    if len(a) != len(b):
        raise InputError(f"{name_a} and {name_b} differ in length ({len(a)} vs {len(b)})")


def _check_ks(ks: Any) -> list[int]:
    """Distinct positive integer ks, in the order given."""
    if isinstance(ks, int) and not isinstance(ks, bool):
        ks = [ks]
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Iterable):
        raise InputError(f"ks must be a list of positive integers, got {ks!r}")
    values: list[int] = []
    for k in ks:
        k = positive_int(k, "k")
        if k not in values:
            values.append(k)
    if not values:
        raise InputError("give at least one k")
    return values


# ---------------------------------------------------------------------------------------------------
# aggregation


def aggregate(values: Iterable[float]) -> float:
    """The mean of per-example scores: a set's EM, F1, ROUGE-L or Q-BLEU-1 (KILT's corpus averages).

    An empty list raises :class:`~openbook.errors.InputError` rather than returning 0.0: a score over
    no examples is undefined, and a silent 0.0 would hide an empty or wrongly filtered evaluation set.
    Values must be finite numbers (bools count as 0/1).
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InputError(f"values must be a list of numbers, got {type(values).__name__}")
    numbers = []
    for i, value in enumerate(values):
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"values[{i}] must be a finite number, got {value!r}")
        numbers.append(float(value))
    if not numbers:
        raise InputError("the mean of no values is undefined (no examples to aggregate)")
    return math.fsum(numbers) / len(numbers)


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
# tokens shared by ROUGE-L, Q-BLEU-1 and distinct n-grams

_WORD = re.compile(r"\w+", flags=re.UNICODE)


def word_tokens(text: str) -> list[str]:
    """Lower-cased word tokens: Unicode NFC, then maximal runs of letters, digits and underscores.

    Punctuation and whitespace separate tokens and are dropped ("Dante's" -> ``["dante", "s"]``).
    Unlike rouge-score's default tokenizer, which keeps only ``[a-z0-9]``, letters of any script survive.
    """
    text = unicodedata.normalize("NFC", _check_text(text, "text"))
    return [token.lower() for token in _WORD.findall(text)]


# ---------------------------------------------------------------------------------------------------
# abstractive QA: BLEU-1 and ROUGE-L


def _references(references: Any, n: int) -> list[list[str]]:
    """Per prediction, a non-empty list of reference strings (a bare string is one reference)."""
    if isinstance(references, (str, bytes)) or not isinstance(references, Iterable):
        raise InputError(f"references must be a list (one entry per prediction), got {type(references).__name__}")
    refs = [
        [item] if isinstance(item, str) else _check_texts(item, f"references[{i}]")
        for i, item in enumerate(references)
    ]
    if len(refs) != n:
        raise InputError(f"predictions and references differ in length ({n} vs {len(refs)})")
    return refs


@functools.lru_cache(maxsize=8)
def _bleu(order: int, lowercase: bool, tokenize: str, sentence: bool):
    from sacrebleu.metrics import BLEU

    if tokenize not in BLEU.TOKENIZERS:
        raise InputError(f"unknown BLEU tokenize {tokenize!r}; sacrebleu has {', '.join(BLEU.TOKENIZERS)}")
    # effective_order only matters for sentence scores of empty predictions; it silences a warning.
    return BLEU(max_ngram_order=order, lowercase=lowercase, tokenize=tokenize,
                smooth_method="none", effective_order=sentence)


def bleu_1(predictions: Sequence[str], references: Sequence[Sequence[str] | str],
           lowercase: bool = True, tokenize: str = "13a") -> float:
    """Corpus-level BLEU-1 (the paper's "B-1" for MS MARCO and Jeopardy), as a fraction.

    Computed with sacrebleu (Post, 2018) as ``BLEU(max_ngram_order=1).corpus_score``: clipped unigram
    counts are summed over the whole corpus before dividing (so this is *not* the mean of
    :func:`sentence_bleu_1`), times the corpus brevity penalty exp(1 - r/c) when the total prediction
    length c is below the total reference length r, where each example contributes its reference
    length closest to its prediction's. Tokenisation is sacrebleu's ``13a`` (the mteval-v13a rules:
    punctuation split off), lower-cased by default since the MS MARCO and coco-caption evaluations
    ignore case; no smoothing.

    ``references[i]`` is the list of reference strings of ``predictions[i]`` (any number, at least one)
    or a single string. Returns sacrebleu's score / 100.
    """
    predictions = _check_texts(predictions, "predictions")
    refs = _references(references, len(predictions))
    _check_text(tokenize, "tokenize")
    width = max(len(r) for r in refs)
    streams = [[r[j] if j < len(r) else None for r in refs] for j in range(width)]  # None: no such reference
    return _bleu(1, lowercase, tokenize, sentence=False).corpus_score(predictions, streams).score / 100.0


def sentence_bleu_1(prediction: str, references: Sequence[str] | str,
                    lowercase: bool = True, tokenize: str = "13a") -> float:
    """Sentence-level BLEU-1 of one prediction: sacrebleu's ``sentence_score`` with ``max_ngram_order=1``.

    Clipped unigram precision against the references (the maximum count of each word in any one
    reference) times the brevity penalty exp(1 - r/c) when the prediction (c tokens) is shorter than
    the reference closest in length (r); no smoothing, so no overlap gives 0.0. Same tokenisation and
    case handling as :func:`bleu_1`. Averaging this over a set is *not* the corpus :func:`bleu_1`.
    """
    prediction = _check_text(prediction, "prediction")
    refs = [references] if isinstance(references, str) else _check_texts(references, "references")
    _check_text(tokenize, "tokenize")
    return _bleu(1, lowercase, tokenize, sentence=True).sentence_score(prediction, refs).score / 100.0


class _WordTokenizer:
    """rouge-score tokenizer interface (``tokenize(text) -> list[str]``) over :func:`word_tokens`."""

    def tokenize(self, text: str) -> list[str]:
        return word_tokens(text)


@functools.lru_cache(maxsize=1)
def _rouge_l_scorer():
    from rouge_score.rouge_scorer import RougeScorer

    return RougeScorer(["rougeL"], tokenizer=_WordTokenizer())


def rouge_l(prediction: str, references: Sequence[str] | str) -> float:
    """Sentence-level ROUGE-L F-measure of one prediction, the best over its references.

    Computed with Google's rouge-score package (a re-implementation of ROUGE-1.5.5, Lin 2004):
    ``RougeScorer(["rougeL"]).score_multi(references, prediction).fmeasure`` -- with L the length of
    the longest common subsequence of tokens, P = L / |prediction|, R = L / |reference|, F = 2PR/(P+R)
    (beta = 1), taking the reference with the highest F. Tokens are :func:`word_tokens` (lower-cased,
    punctuation dropped, any script), passed as rouge-score's tokenizer, with no stemming. A set's
    ROUGE-L is the :func:`aggregate` (mean) of this. Note that the MS MARCO / coco-caption scorer
    differs: it takes the maximum P and R over references separately and weights recall with
    beta = 1.2, so its numbers are not directly comparable. An empty side scores 0.0.
    """
    prediction = _check_text(prediction, "prediction")
    refs = [references] if isinstance(references, str) else _check_texts(references, "references")
    return float(_rouge_l_scorer().score_multi(refs, prediction)["rougeL"].fmeasure)


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


# ---------------------------------------------------------------------------------------------------
# classification and diversity


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


def distinct_ngram_ratio(texts: Sequence[str], n: int = 3) -> float:
    """Distinct n-grams over total n-grams across all generations (paper Table 5, with n = 3).

    Each text is split into :func:`word_tokens` (lower-cased, punctuation dropped); its n-grams are the
    runs of n consecutive tokens (none cross from one text to the next). The ratio is the number of
    different n-grams in the whole set over the number of n-gram occurrences, so repeating a
    generation lowers it ("distinct-n", Li et al., 2016, over the corpus). The paper does not state its
    tokenisation. No n-grams at all (every text shorter than n tokens) raises
    :class:`~openbook.errors.InputError`: the ratio is undefined.
    """
    texts = _check_texts(texts, "texts")
    n = positive_int(n, "n")
    seen: set[tuple[str, ...]] = set()
    total = 0
    for text in texts:
        tokens = word_tokens(text)
        for start in range(len(tokens) - n + 1):
            seen.add(tuple(tokens[start : start + n]))
            total += 1
    if total == 0:
        raise InputError(f"no {n}-grams: every text is shorter than {n} tokens")
    return len(seen) / total


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


def _title_key(title: str) -> str:
    """A Wikipedia title as FEVER and the knowledge base may both spell it: NFC, "_" as a space, FEVER's
    bracket tokens (``-LRB-`` ...) as brackets, whitespace collapsed. Case is kept."""
    title = unicodedata.normalize("NFC", title).replace("_", " ")
    title = _FEVER_BRACKET.sub(lambda m: _FEVER_BRACKETS[m.group()], title)
    return " ".join(title.split())


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
    evidence titles. Titles compare after :func:`_title_key`, so FEVER's ``Nikolaj_Coster-Waldau`` and
    ``Ghost_-LRB-1990_film-RRB-`` equal "Nikolaj Coster-Waldau" and "Ghost (1990 film)"; case matters.

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
        gold_keys = {_title_key(t) for t in _check_texts(golds, f"gold_titles[{i}]", allow_empty=True)}
        if not gold_keys and skip_empty:
            continue
        titles = _check_texts(titles, f"retrieved_titles[{i}]", allow_empty=True)
        ranked_hits.append([_title_key(t) in gold_keys for t in titles])
    if not ranked_hits:
        raise InputError("no claims with gold evidence titles to evaluate")
    return recall_at_k(ranked_hits, ks)
