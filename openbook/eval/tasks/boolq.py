"""BoolQ: yes/no questions as one-token classification (``no`` / ``yes``), scored by label accuracy.

As with FEVER (paper section 3.4) the answer is a single target token, and the model is evaluated by
the label it finds more likely. By default the input is the *question alone*: the passage it was asked
about is left for the retriever to find in the knowledge base (open-book; the BoolQ passages can be
indexed), and kept in ``meta["passage"]``. ``BoolQTask(with_passage=True)`` (task ``boolq-passage``)
gives the model the passage in the input too (reading comprehension).

Formats (JSON Lines, .gz ok):

* ``{query: "Passage: ...\\nQuestion: ...?", choices: ["no", "yes"], gold: 0|1}`` (the llm-foundry form);
* the original BoolQ ``{question, passage, answer: true|false}`` (``title`` optional);
* ``{input, target: "yes"|"no"}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openbook.errors import InputError
from openbook.eval.tasks.base import ClassificationTask, Example, text

__all__ = ["BoolQTask", "split_query"]

BOOLQ_LABELS = ("no", "yes")


def split_query(query: str) -> tuple[str, str]:
    """``"Passage: P\\nQuestion: Q?"`` -> ``(P, Q?)``; a query without the markers is all question."""
    head, sep, question = query.rpartition("Question:")
    if not sep or not question.strip():
        return "", query.strip()
    passage = head.strip()
    if passage.startswith("Passage:"):
        passage = passage[len("Passage:") :].strip()
    return passage, question.strip()


class BoolQTask(ClassificationTask):
    label_names = BOOLQ_LABELS
    labels = BOOLQ_LABELS
    formats = "JSON Lines {query: 'Passage: ...\\nQuestion: ...', choices: [no, yes], gold: 0|1}, {question, passage, answer: bool} or {input, target}"

    def __init__(self, with_passage: bool = False, labels: Sequence[str] | None = None):
        self.with_passage = with_passage
        self.name = "boolq-passage" if with_passage else "boolq"
        self.description = (
            "BoolQ yes/no questions with their passage in the input (label accuracy)" if with_passage
            else "BoolQ yes/no questions, the passage left to retrieval (label accuracy)"
        )
        super().__init__(labels)

    def _name(self, value: Any, what: str) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, str):
            key = value.strip().casefold()
            if key in ("yes", "true"):
                return "yes"
            if key in ("no", "false"):
                return "no"
            for name, target in zip(self.label_names, self.labels):
                if key == target.casefold():
                    return name
        raise InputError(f"{what} must be yes or no (or true/false), got {value!r}")

    def parse_record(self, record: dict[str, Any]) -> Example:
        meta: dict[str, Any] = {}
        if "query" in record:
            passage, question = split_query(text(record, "query"))
            choices, gold = record.get("choices"), record.get("gold")
            if not isinstance(choices, list) or not choices:
                raise InputError(f"'choices' must be a list like ['no', 'yes'], got {choices!r}")
            if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
                raise InputError(f"'gold' must be an index into choices (0..{len(choices) - 1}), got {gold!r}")
            name = self._name(choices[gold], f"choices[{gold}]")
        elif "question" in record:
            question = text(record, "question")
            passage = record.get("passage", "")
            if not isinstance(passage, str):
                raise InputError("'passage' must be a string")
            if "answer" not in record:
                raise InputError("no 'answer' (true/false) field")
            name = self._name(record["answer"], "'answer'")
            if isinstance(record.get("title"), str):
                meta["title"] = record["title"]
        elif "input" in record:
            passage, question = "", text(record, "input")
            name = self._name(record.get("target"), "'target'")
        else:
            raise InputError(
                f"expected {{query, choices, gold}}, {{question, passage, answer}} or {{input, target}}, got keys "
                f"{', '.join(sorted(record)) or 'none'}"
            )
        question = question.strip()
        if question and question[-1].isalnum():
            question += "?"  # the original BoolQ questions have no question mark
        if passage:
            meta["passage"] = passage.strip()
        source = f"{passage.strip()}\n{question}" if self.with_passage and passage.strip() else question
        if "id" in record:
            meta["id"] = record["id"]
        return Example(source, self.target_of(name), [name], meta)
