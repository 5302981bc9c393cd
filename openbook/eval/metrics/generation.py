"""Generation metrics: word tokens, BLEU-1 and ROUGE-L (abstractive QA), distinct n-grams (diversity).

* :func:`sentence_bleu_1`, :func:`rouge_l` -- abstractive QA (MS MARCO, Table 2), per example;
* :func:`bleu_1` -- corpus-level BLEU-1 (MS MARCO and Jeopardy "B-1" columns);
* :func:`distinct_ngram_ratio` -- generation diversity (Table 5).

BLEU comes from ``sacrebleu`` and ROUGE-L from ``rouge-score``; both are imported when first used, so
importing this module costs nothing.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from openbook.errors import InputError, positive_int
from openbook.eval.metrics.base import _check_text, _check_texts

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
# diversity


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
