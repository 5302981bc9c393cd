"""KILT: the format in which knowledge-intensive tasks are exchanged (Petroni et al., 2021).

Every KILT task (Natural Questions, TriviaQA, HotpotQA, ELI5, FEVER, T-REx, zsRE, Wizard of Wikipedia
...) ships as JSON Lines of the same shape::

    {"id": "...", "input": "...",
     "output": [{"answer": "...", "provenance": [{"wikipedia_id": "...", "title": "...", ...}]},
                {"provenance": [...]}, ...],
     "meta": {...}}

The ``kilt`` task reads that file: the input is ``input``, the gold answers are the non-empty
``answer`` strings of ``output`` (in order, duplicates once; the training target is the first), and the
gold Wikipedia pages of the provenance are kept per example in ``meta["gold_titles"]`` and
``meta["gold_wikipedia_ids"]`` for page-level retrieval scoring. Scored like open-domain QA by exact
match and token F1 (KILT's own downstream metrics for its QA, slot-filling and fact-checking tasks).
A record without any answer (a KILT *test* file, whose outputs are hidden) is an error naming the line.
"""

from __future__ import annotations

from typing import Any

from openbook.errors import InputError
from openbook.eval.tasks.base import Example, text
from openbook.eval.tasks.qa import QATask

__all__ = ["KiltTask"]


class KiltTask(QATask):
    name = "kilt"
    description = "any KILT task file: answers from output[].answer, gold pages from provenance (exact match, F1)"
    formats = "KILT JSON Lines {id, input, output: [{answer, provenance: [{wikipedia_id, title}]}]}"

    def parse_record(self, record: dict[str, Any]) -> Example:
        question = text(record, "input")
        outputs = record.get("output")
        if not isinstance(outputs, list) or not all(isinstance(output, dict) for output in outputs):
            raise InputError("'output' must be a list of objects {answer, provenance}")
        answers, titles, page_ids = [], [], []
        for output in outputs:
            answer = output.get("answer")
            if answer is not None and not isinstance(answer, str):
                raise InputError(f"an 'answer' must be a string, got {type(answer).__name__}")
            if answer and answer.strip() and answer.strip() not in answers:
                answers.append(answer.strip())
            for page in _provenance(output):
                if page.get("title") and page["title"] not in titles:
                    titles.append(page["title"])
                if page.get("wikipedia_id") is not None and str(page["wikipedia_id"]) not in page_ids:
                    page_ids.append(str(page["wikipedia_id"]))
        if not answers:
            raise InputError("no non-empty 'answer' in 'output' (a KILT test file hides its answers)")
        meta: dict[str, Any] = {"gold_titles": titles, "gold_wikipedia_ids": page_ids}
        if "id" in record:
            meta["id"] = record["id"]
        return Example(question, answers[0], answers, meta)


def _provenance(output: dict[str, Any]) -> list[dict[str, Any]]:
    """The provenance pages of one output (none if it has no provenance)."""
    pages = output.get("provenance", [])
    if not isinstance(pages, list) or not all(isinstance(page, dict) for page in pages):
        raise InputError("'provenance' must be a list of objects {wikipedia_id, title, ...}")
    for page in pages:
        if "title" in page and not isinstance(page["title"], str):
            raise InputError(f"a provenance 'title' must be a string, got {type(page['title']).__name__}")
    return pages
