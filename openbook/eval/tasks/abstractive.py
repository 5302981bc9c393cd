"""Abstractive question answering (paper section 3.2, MS MARCO NLG as open-domain QA).

Format: JSON Lines ``{input, target}`` (``target`` a string or a list of reference answers) or
``{question, answers: [str]}``; the training target is the first reference. Metrics: ROUGE-L and
sentence BLEU-1 per example (their means over the set), and the paper's "B-1", corpus-level BLEU-1
(:func:`~openbook.eval.metrics.bleu_1`), which is not a mean of sentence scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openbook.errors import InputError
from openbook.eval.metrics import bleu_1, rouge_l, sentence_bleu_1
from openbook.eval.tasks.base import Example, Task, string_list, text

__all__ = ["AbstractiveTask"]


class AbstractiveTask(Task):
    name = "abstractive"
    description = "abstractive QA (corpus BLEU-1, ROUGE-L)"
    formats = "JSON Lines {input, target} or {question, answers: [str]}"
    metrics = ("rouge_l", "sentence_bleu_1")
    corpus_metric_names = ("bleu_1",)
    primary_metric = "rouge_l"
    default_max_new_tokens = 64

    def parse_record(self, record: dict[str, Any]) -> Example:
        if "input" in record or "target" in record:
            source, references = text(record, "input"), string_list(record.get("target"), "target")
        elif "question" in record or "answers" in record:
            source, references = text(record, "question"), string_list(record.get("answers"), "answers")
        else:
            raise InputError(
                f"expected {{input, target}} or {{question, answers}}, got keys {', '.join(sorted(record)) or 'none'}"
            )
        return Example(source, references[0], references, {"id": record["id"]} if "id" in record else {})

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return {"rouge_l": rouge_l(prediction, example.golds), "sentence_bleu_1": sentence_bleu_1(prediction, example.golds)}

    def corpus_metrics(self, predictions: Sequence[str], examples: Sequence[Example]) -> dict[str, float]:
        return {"bleu_1": bleu_1(list(predictions), [list(ex.golds) for ex in examples])}
