"""Jeopardy question generation (paper section 3.3): generate the Jeopardy clue from its answer entity.

The input is the answer entity ("The World Cup"), the target the clue ("In 1986 Mexico scored as the
first country to host this international sports competition twice"). Metrics: the paper's
SQuAD-tuned Q-BLEU-1 (:func:`~openbook.eval.metrics.q_bleu_1`), ROUGE-L and sentence BLEU-1 per
example, and corpus BLEU-1 ("B-1").

Formats (JSON Lines, .gz ok):

* ``{context: "CATEGORY: clue", continuation: answer, category}`` (the llm-foundry / MosaicML form): an
  upper-case ``CATEGORY: `` prefix is taken off the clue and kept in ``meta["category"]``;
* ``{answer, question}`` (SearchQA style: the answer and the Jeopardy clue);
* ``{input, target}``: already the answer and the clue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openbook.errors import InputError
from openbook.eval.metrics import bleu_1, q_bleu_1, rouge_l, sentence_bleu_1
from openbook.eval.tasks.base import Example, Task, text

__all__ = ["JeopardyTask", "split_category"]


def split_category(context: str) -> tuple[str | None, str]:
    """``"WORLD HISTORY: This Portuguese admiral ..."`` -> ``("WORLD HISTORY", "This Portuguese admiral ...")``.

    Only an upper-case prefix (no lower-case letters) before the first ``": "`` is a category.
    """
    prefix, sep, rest = context.partition(": ")
    if sep and rest.strip() and prefix.strip() and prefix == prefix.upper() and any(ch.isalpha() for ch in prefix):
        return prefix.strip(), rest.strip()
    return None, context.strip()


class JeopardyTask(Task):
    name = "jeopardy"
    description = "Jeopardy question generation from the answer entity (Q-BLEU-1, BLEU-1, ROUGE-L)"
    formats = "JSON Lines {context: 'CATEGORY: clue', continuation: answer}, {answer, question} or {input, target}"
    metrics = ("q_bleu_1", "rouge_l", "sentence_bleu_1")
    corpus_metric_names = ("bleu_1",)
    primary_metric = "q_bleu_1"
    default_max_new_tokens = 48

    def parse_record(self, record: dict[str, Any]) -> Example:
        meta: dict[str, Any] = {}
        if "continuation" in record or "context" in record:
            answer = text(record, "continuation")
            category, clue = split_category(text(record, "context"))
            if not clue:
                raise InputError("'context' holds a category but no clue")
            if category is not None:
                meta["category"] = category
            elif isinstance(record.get("category"), str):
                meta["category"] = record["category"]
        elif "answer" in record or "question" in record:
            answer, clue = text(record, "answer"), text(record, "question")
        elif "input" in record or "target" in record:
            answer, clue = text(record, "input"), text(record, "target")
        else:
            raise InputError(
                "expected {context, continuation}, {answer, question} or {input, target}, got keys "
                f"{', '.join(sorted(record)) or 'none'}"
            )
        if "id" in record:
            meta["id"] = record["id"]
        return Example(answer, clue, [clue], meta)

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        reference = example.golds[0]
        return {
            "q_bleu_1": q_bleu_1(prediction, reference),
            "rouge_l": rouge_l(prediction, example.golds),
            "sentence_bleu_1": sentence_bleu_1(prediction, example.golds),
        }

    def corpus_metrics(self, predictions: Sequence[str], examples: Sequence[Example]) -> dict[str, float]:
        return {"bleu_1": bleu_1(list(predictions), [list(ex.golds) for ex in examples])}
