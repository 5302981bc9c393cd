"""What a task is: a reader of one data format, a training target format, and per-example metrics.

A :class:`Task` turns a data file into :class:`Example` records -- ``input`` (what the model reads),
``target`` (the string it is trained to write: ``openbook train`` takes ``(input, target)`` pairs),
``golds`` (every gold string, regular expression or label the prediction is scored against) and
``meta`` (anything else worth keeping, e.g. a record id) -- and scores one prediction against one
example. The evaluation (:mod:`openbook.eval.evaluate`) averages the per-example scores over the set
and adds the task's corpus-level metrics (:meth:`Task.corpus_metrics`, e.g. corpus BLEU-1).

A *classification* task (:class:`ClassificationTask`: FEVER, BoolQ) has ``labels``: the one-token
target strings of its classes (paper section 3.4: "we map class labels to single output tokens"), and
``label_names``, the class names as the data writes them. It is evaluated by the label with the highest
likelihood under the model instead of free generation.

Readers check every record and raise :class:`~openbook.errors.InputError` naming ``file:line`` and
what is wrong; an empty file is an error too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openbook.errors import InputError
from openbook.eval.datasets import check_limit, read_jsonl
from openbook.eval.datasets import nonempty as _nonempty
from openbook.eval.metrics import label_accuracy

__all__ = ["ClassificationTask", "Example", "Task", "check_limit", "read_jsonl_examples", "string_list", "text"]


@dataclass
class Example:
    """One evaluation (and training) example of a task."""

    input: str  # what the model reads (the question, claim, answer entity ...)
    target: str  # the training target string (for classification: the label's one-token target)
    golds: list[str]  # what a prediction is scored against: answers, regexes, or the gold label name
    meta: dict[str, Any] = field(default_factory=dict)  # id, gold passage, category, source line ...

    def to_pair(self) -> tuple[str, str]:
        """The ``(input, target)`` training pair."""
        return self.input, self.target


class Task:
    """Base class of the tasks; see the module docstring. Subclasses set the class attributes and
    implement :meth:`parse_record` (JSON Lines tasks) or override :meth:`read`."""

    name: str = ""
    description: str = ""
    metrics: tuple[str, ...] = ()  # the per-example score names
    corpus_metric_names: tuple[str, ...] = ()  # metrics computed over the whole set
    primary_metric: str = ""
    default_max_new_tokens: int = 16
    labels: tuple[str, ...] | None = None  # one-token targets of the classes (classification tasks)
    label_names: tuple[str, ...] | None = None  # the class names as the data writes them
    formats: str = ""  # the accepted data formats, for help texts

    def read(self, path: str | os.PathLike, limit: int | None = None) -> list[Example]:
        """The examples of a JSON Lines file (plain or .gz), at most ``limit`` of them."""
        return read_jsonl_examples(path, self.parse_record, limit)

    def parse_record(self, record: dict[str, Any]) -> Example | None:
        """One parsed JSON object -> an Example (None: skip it); raise InputError saying what is wrong."""
        raise NotImplementedError

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        """Per-example scores of ``prediction``, each a fraction in [0, 1]."""
        raise NotImplementedError

    def corpus_metrics(self, predictions: Sequence[str], examples: Sequence[Example]) -> dict[str, float]:
        """Metrics over the whole set that are not a mean of per-example scores (default: none)."""
        return {}

    def __repr__(self) -> str:
        return f"<task {self.name}>"


class ClassificationTask(Task):
    """A task whose targets are the one-token ``labels``; scored by label accuracy (paper section 3.4).

    ``golds`` of an example is ``[label name]`` and its ``target`` the matching one-token label.
    """

    metrics = ("accuracy",)
    primary_metric = "accuracy"
    default_max_new_tokens = 1

    def __init__(self, labels: Sequence[str] | None = None):
        if labels is not None:
            labels = tuple(labels)
            if len(labels) != len(self.label_names) or len(set(labels)) != len(labels):
                raise InputError(
                    f"task {self.name}: give {len(self.label_names)} distinct labels "
                    f"(for {', '.join(self.label_names)}), got {list(labels)}"
                )
            if not all(isinstance(x, str) and x.strip() for x in labels):
                raise InputError(f"task {self.name}: labels must be non-empty strings, got {list(labels)}")
            self.labels = labels

    def target_of(self, label_name: str) -> str:
        """The one-token target of a class name."""
        return self.labels[self.label_names.index(label_name)]

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return {"accuracy": label_accuracy([prediction], example.golds[:1])}


# ---------------------------------------------------------------------------------------------------
# reading helpers


def text(record: dict[str, Any], *keys: str) -> str:
    """The first of ``keys`` present in ``record``, which must be a non-empty string (returned stripped)."""
    for key in keys:
        if key in record:
            value = record[key]
            if not isinstance(value, str) or not value.strip():
                raise InputError(f"{key!r} must be a non-empty string, got {_show(value)}")
            return value.strip()
    raise InputError(f"no {' or '.join(repr(k) for k in keys)} field (the record's keys: {_keys(record)})")


def string_list(value: Any, key: str) -> list[str]:
    """A non-empty list of non-empty strings (a bare string is a list of one)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise InputError(f"{key!r} must be a non-empty list of strings, got {_show(value)}")
    out = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise InputError(f"{key!r} must hold non-empty strings, got {_show(item)}")
        out.append(item.strip())
    return out


def _show(value: Any) -> str:
    text_ = repr(value)
    return text_ if len(text_) <= 60 else text_[:57] + "..."


def _keys(record: dict[str, Any]) -> str:
    return ", ".join(sorted(map(str, record))) or "none"


def read_jsonl_examples(
    path: str | os.PathLike, parse: Callable[[dict[str, Any]], Example | None], limit: int | None = None
) -> list[Example]:
    """Examples of a JSON Lines file (:func:`~openbook.eval.datasets.read_jsonl`: ``parse`` each record;
    errors name ``path:line``); each example's ``meta["line"]`` is its line."""
    examples = []
    for lineno, example in read_jsonl(Path(path), parse, limit, what="examples"):
        example.meta.setdefault("line", lineno)
        examples.append(example)
    return examples


def nonempty(examples: list[Example], path: Path) -> list[Example]:
    return _nonempty(examples, path, "examples")


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a text file (plain or gzip); a line that is not UTF-8 is an error."""
    from openbook.corpus.readers import _numbered_lines

    for lineno, line in _numbered_lines(path, "a text file"):
        if line is None:
            raise InputError(f"{path}:{lineno}: not UTF-8 text")
        yield lineno, line
