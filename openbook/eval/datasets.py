"""Question-answering evaluation sets as plain records ``{"question", "answers", "gold"}``.

:func:`read_nq_open` reads JSON Lines (plain or gzip, detected by content) in either of two forms:

* the Natural Questions open "oracle" form (lost-in-the-middle / DPR style):
  ``{"question": str, "answers": [str, ...], "ctxs": [{"title", "text", ...}, ...], ...}`` where the gold
  passage is ``ctxs[0]``; if the contexts carry ``isgold`` flags, the first context flagged
  ``isgold: true`` is the gold one (and there is none if no context is flagged);
* plain question-answer lines ``{"question": str, "answers": [str, ...]}`` (``gold`` is then None).

Each record becomes ``{"question": str, "answers": [str, ...], "gold": {"title", "text"} | None}``.
Other keys are ignored. Malformed input raises :class:`~openbook.errors.InputError` naming
``file:line``.

:func:`read_jsonl` is the one JSON Lines reader of evaluation and task data (this module's questions,
every task's examples, ``openbook train``'s pairs): gzip-aware, each record checked by a parse
function, errors naming ``file:line``, an optional limit, and an empty result an error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from openbook.corpus.readers import read_numbered_records
from openbook.errors import InputError, positive_int

QARecord = dict[str, Any]
T = TypeVar("T")


def check_limit(limit: Any) -> int | None:
    """``limit`` if it is None or a positive integer, else an InputError."""
    return None if limit is None else positive_int(limit, "limit")


def nonempty(items: list[T], path: str | os.PathLike, what: str) -> list[T]:
    """``items``, or an InputError saying that ``path`` holds no ``what``."""
    if not items:
        raise InputError(f"{path}: no {what} (the file is empty or every record was skipped)")
    return items


def read_jsonl(
    path: str | os.PathLike, parse: Callable[[dict[str, Any]], T | None], limit: int | None = None,
    what: str = "records",
) -> list[tuple[int, T]]:
    """``(line number, parse(record))`` for the JSON objects of a JSON Lines file (plain or gzip).

    ``parse`` checks one record and raises InputError saying what is wrong (re-raised as
    ``path:line: ...``, as are malformed JSON and unreadable files); a None result skips the record.
    At most ``limit`` results; none at all is an InputError ("no ``what``").
    """
    limit = check_limit(limit)
    items: list[tuple[int, T]] = []
    for lineno, record in read_numbered_records(path):
        if limit is not None and len(items) >= limit:
            break
        try:
            item = parse(record)
        except InputError as exc:
            raise InputError(f"{path}:{lineno}: {exc}") from None
        if item is not None:
            items.append((lineno, item))
    return nonempty(items, path, what)


def read_nq_open(path: str | os.PathLike, limit: int | None = None) -> list[QARecord]:
    """Read an NQ-open oracle or plain ``{question, answers}`` JSON Lines file (see module docs).

    ``limit`` keeps only the first ``limit`` records. An empty file is an error.
    """
    return [record for _, record in read_jsonl(Path(path), qa_record, limit, what="questions")]


def qa_record(raw: dict[str, Any]) -> QARecord:
    """Validate one parsed line and turn it into ``{"question", "answers", "gold"}``."""
    question = raw.get("question")
    if not isinstance(question, str) or not question.strip():
        raise InputError("'question' must be a non-empty string")
    answers = raw.get("answers")
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        raise InputError("'answers' must be a non-empty list of strings")
    return {"question": question.strip(), "answers": list(answers), "gold": _gold(raw.get("ctxs"))}


def _gold(ctxs: Any) -> dict[str, str] | None:
    if ctxs is None:
        return None
    if not isinstance(ctxs, list) or not all(isinstance(c, dict) for c in ctxs):
        raise InputError("'ctxs' must be a list of {title, text} objects")
    if not ctxs:
        return None
    if any("isgold" in c for c in ctxs):
        flagged = [c for c in ctxs if c.get("isgold") is True]
        if not flagged:
            return None
        context = flagged[0]
    else:
        context = ctxs[0]
    title, text = context.get("title", ""), context.get("text")
    if title is None:
        title = ""
    if not isinstance(title, str) or not isinstance(text, str):
        raise InputError("the gold context must have a string 'text' (and 'title')")
    return {"title": title, "text": text}
