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
  top 1 and top 10; titles compared by :func:`title_key`).

Comparing two systems on the same questions (:mod:`~openbook.eval.metrics.significance`):
:func:`paired_bootstrap` (any per-question score) and :func:`mcnemar` (per-question correctness).

Scores are fractions in [0, 1], never percentages (the paper's tables print them x 100). Every function
checks its input and raises :class:`~openbook.errors.InputError` naming what is wrong; a metric over no
examples is undefined and raises rather than returning 0 (see :func:`aggregate`).

BLEU comes from ``sacrebleu`` and ROUGE-L from ``rouge-score``; both are imported when first used, so
importing this module costs nothing.

One module per family, all re-exported here: :mod:`~openbook.eval.metrics.base` (input checks,
:func:`aggregate`), :mod:`~openbook.eval.metrics.answers` (answer and label matching),
:mod:`~openbook.eval.metrics.generation` (word tokens, BLEU-1, ROUGE-L, distinct n-grams),
:mod:`~openbook.eval.metrics.qbleu` (Q-BLEU-1) and :mod:`~openbook.eval.metrics.retrieval`.
"""

from openbook.eval.metrics.answers import exact_match, label_accuracy, normalize_answer, regex_match, token_f1
from openbook.eval.metrics.base import aggregate
from openbook.eval.metrics.generation import bleu_1, distinct_ngram_ratio, rouge_l, sentence_bleu_1, word_tokens
from openbook.eval.metrics.qbleu import (
    DEFAULT_QBLEU_WEIGHTS,
    FUNCTION_WORDS,
    QUESTION_WORDS,
    q_bleu_1,
    qbleu_token_classes,
)
from openbook.eval.metrics.retrieval import gold_title_overlap, recall_at_k, title_key
from openbook.eval.metrics.significance import Bootstrap, McNemar, mcnemar, paired_bootstrap, significant

__all__ = [
    "Bootstrap",
    "McNemar",
    "DEFAULT_QBLEU_WEIGHTS",
    "FUNCTION_WORDS",
    "QUESTION_WORDS",
    "aggregate",
    "bleu_1",
    "distinct_ngram_ratio",
    "exact_match",
    "gold_title_overlap",
    "label_accuracy",
    "mcnemar",
    "normalize_answer",
    "paired_bootstrap",
    "q_bleu_1",
    "qbleu_token_classes",
    "recall_at_k",
    "regex_match",
    "rouge_l",
    "sentence_bleu_1",
    "significant",
    "title_key",
    "token_f1",
    "word_tokens",
]
