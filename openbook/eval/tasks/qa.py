"""Open-domain question answering (paper section 3.1): NQ, WebQuestions, CuratedTrec, generic QA files.

Questions and answers are input-output text pairs; the training target is the first gold answer.
Metrics: Exact Match (the paper's) and token F1 against any gold answer; CuratedTrec, whose answers
are regular expressions, scores a prediction by a regular-expression match anywhere in it.

Formats:

* ``nq`` -- JSON Lines ``{question, answers: [str], ctxs: [{title, text}, ...]}`` (the NQ-open oracle
  form; ``ctxs`` optional, its gold passage kept in ``meta["gold"]``);
* ``webquestions`` -- a JSON array ``[{qId, qText, answers: [str]}, ...]`` (``.gz`` ok), or JSON Lines
  of such records; the original WebQuestions ``{url, utterance, targetValue: "(list (description X)
  ...)"}`` records are read too;
* ``curatedtrec`` -- TSV ``id<TAB>type<TAB>question<TAB>regex`` (the DPR / brmson form, no header;
  a tab inside the last column belongs to the regex);
* ``qa`` -- JSON Lines ``{question, answers}`` or ``{input, target}`` (``target`` a string or list).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from openbook.errors import InputError
from openbook.eval.metrics import exact_match, regex_match, token_f1
from openbook.eval.tasks.base import Example, Task, check_limit, nonempty, numbered_lines, string_list, text

__all__ = ["CuratedTrecTask", "NQTask", "QATask", "WebQuestionsTask", "regex_target"]


class QATask(Task):
    """Generic open-domain QA: ``{question, answers}`` or ``{input, target}`` JSON Lines."""

    name = "qa"
    description = "open-domain QA from a generic JSON Lines file (exact match, F1)"
    formats = "JSON Lines {question, answers: [str]} or {input, target}"
    metrics = ("exact_match", "f1")
    primary_metric = "exact_match"
    default_max_new_tokens = 16

    def parse_record(self, record: dict[str, Any]) -> Example:
        if "question" in record or "answers" in record:
            question = text(record, "question")
            answers = string_list(record.get("answers"), "answers")
        elif "input" in record or "target" in record:
            question = text(record, "input")
            answers = string_list(record.get("target"), "target")
        else:
            raise InputError(
                f"expected {{question, answers}} or {{input, target}}, got keys {', '.join(sorted(record)) or 'none'}"
            )
        meta = {"id": record["id"]} if "id" in record else {}
        return Example(question, answers[0], answers, meta)

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return {"exact_match": exact_match(prediction, example.golds), "f1": token_f1(prediction, example.golds)}


class NQTask(QATask):
    """Natural Questions (open): the NQ-open oracle JSON Lines form, or plain ``{question, answers}``."""

    name = "nq"
    description = "Natural Questions open (exact match, F1)"
    formats = "JSON Lines {question, answers: [str], ctxs?: [{title, text}]}"

    def parse_record(self, record: dict[str, Any]) -> Example:
        from openbook.eval.datasets import qa_record

        qa = qa_record(record)
        meta: dict[str, Any] = {}
        if qa["gold"] is not None:
            meta["gold"] = qa["gold"]
        answers = [a.strip() for a in qa["answers"] if a.strip()]
        if not answers:
            raise InputError("'answers' holds only empty strings")
        return Example(qa["question"], answers[0], answers, meta)


# ---------------------------------------------------------------------------------------------------
# WebQuestions

_DESCRIPTION = re.compile(r'\(description\s+(?:"((?:[^"\\]|\\.)*)"|([^()]*?))\)')


def _target_values(value: str) -> list[str]:
    """The answers of an original WebQuestions ``targetValue``: ``(list (description "A") (description B))``."""
    answers = [(quoted if quoted is not None else bare).replace('\\"', '"').strip()
               for quoted, bare in _DESCRIPTION.findall(value)]
    return [a for a in answers if a]


class WebQuestionsTask(QATask):
    name = "webquestions"
    description = "WebQuestions (exact match, F1)"
    formats = "JSON array (or JSON Lines) of {qId, qText, answers: [str]} or {utterance, targetValue}"

    def parse_record(self, record: dict[str, Any]) -> Example:
        if not isinstance(record, dict):
            raise InputError(f"expected a JSON object, got {type(record).__name__}")
        question = text(record, "qText", "question", "utterance")
        if "answers" in record:
            answers = string_list(record["answers"], "answers")
        elif "targetValue" in record:
            if not isinstance(record["targetValue"], str):
                raise InputError("'targetValue' must be a string")
            answers = _target_values(record["targetValue"])
            if not answers:
                raise InputError(f"no (description ...) answer in targetValue {record['targetValue']!r}")
        else:
            raise InputError(f"no 'answers' (or 'targetValue') field (the record's keys: {', '.join(sorted(record))})")
        meta = {}
        for key in ("qId", "id", "url"):
            if key in record:
                meta["id" if key != "url" else "url"] = record[key]
        return Example(question, answers[0], answers, meta)

    def read(self, path: str | os.PathLike, limit: int | None = None) -> list[Example]:
        from openbook.corpus.readers import _open_binary

        limit = check_limit(limit)
        path = Path(path)
        with _open_binary(path, "a JSON file") as f:
            try:
                raw = f.read().decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
            except (OSError, EOFError) as exc:
                raise InputError(f"{path}: cannot read: {exc}") from None
        if not raw.lstrip().startswith("["):
            return super().read(path, limit)
        examples = []
        for lineno, record in _json_array_items(raw, path):
            if limit is not None and len(examples) >= limit:
                break
            try:
                example = self.parse_record(record)
            except InputError as exc:
                raise InputError(f"{path}:{lineno}: {exc}") from None
            example.meta.setdefault("line", lineno)
            examples.append(example)
        return nonempty(examples, path)


def _json_array_items(raw: str, path: Path):
    """``(line, item)`` for each item of the JSON array in ``raw``, parsed one item at a time so that an
    error names the line where the bad item starts."""
    decoder = json.JSONDecoder()
    ws = re.compile(r"\s*")
    pos = ws.match(raw, raw.index("[") + 1).end()

    def line_of(at: int) -> int:
        return raw.count("\n", 0, at) + 1

    if raw.startswith("]", pos):
        return
    while True:
        try:
            item, end = decoder.raw_decode(raw, pos)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg} (column {exc.colno})") from None
        yield line_of(pos), item
        pos = ws.match(raw, end).end()
        if raw.startswith(",", pos):
            pos = ws.match(raw, pos + 1).end()
        elif raw.startswith("]", pos):
            rest = raw[pos + 1 :].strip()
            if rest:
                raise InputError(f"{path}:{line_of(pos + 1)}: unexpected text after the JSON array")
            return
        else:
            raise InputError(f"{path}:{line_of(pos)}: malformed JSON array: expected ',' or ']'")


# ---------------------------------------------------------------------------------------------------
# CuratedTrec


def regex_target(pattern: str) -> str:
    """A plain answer string that ``pattern`` matches, to train on (CuratedTrec answers are regexes).

    One string is generated from the regex's parse tree: the first branch of each alternation, optional
    parts (``?``) included, other repetitions written their minimum number of times (``*`` none, ``+``
    once; ``.*`` as a space), a character class by its first member (``\\s`` as a space), ``.`` as a
    full stop, anchors and lookarounds dropped.
    So ``"Sept?(ember)?|Feb(ruary)?"`` gives ``"September"`` and ``"New\\s?York"`` gives ``"New York"``.
    If that string is empty, or the pattern cannot be parsed, the pattern with its regex syntax removed
    is used instead.
    """
    try:
        generated = _generate(_parse(pattern)).strip()
    except Exception:  # an exotic construct: fall back to stripping the syntax
        generated = ""
    for candidate in (" ".join(generated.split()), generated):
        if candidate and re.search(pattern, candidate, re.IGNORECASE):
            return candidate
    first = pattern.split("|")[0]
    plain = re.sub(r"\\[sS]", " ", first)
    plain = re.sub(r"\\(.)", r"\1", plain)
    plain = re.sub(r"[\^$()\[\]?*+{}]", "", plain)
    return " ".join(plain.split()) or pattern


def _parse(pattern: str):
    try:
        from re import _parser as sre_parse  # Python >= 3.11
    except ImportError:  # pragma: no cover
        import sre_parse  # type: ignore[no-redef]
    return sre_parse.parse(pattern)


def _generate(items) -> str:
    from re import _constants as c  # Python >= 3.11

    out = []
    for op, arg in items:
        if op is c.LITERAL:
            out.append(chr(arg))
        elif op is c.SUBPATTERN:
            out.append(_generate(arg[-1]))
        elif op is c.BRANCH:
            out.append(_generate(arg[1][0]))
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)):
            low, high, sub = arg
            if low == 0 and high != 1 and len(sub) == 1 and sub[0][0] is c.ANY:
                out.append(" ")  # "A.*B": some text between A and B
                continue
            times = 1 if (low, high) == (0, 1) else low  # "x?" -> x, "x*" -> nothing, "x+" -> x, "x{2,}" -> xx
            out.append(_generate(sub) * times)
        elif op is c.IN:
            out.append(_class_member(arg, c))
        elif op is c.ANY:
            out.append(".")  # an unescaped dot in an answer is most often a full stop ("St. Louis")
        elif op is c.CATEGORY:
            out.append(" " if arg in (c.CATEGORY_SPACE,) else "")
        elif op in (c.AT, c.ASSERT, c.ASSERT_NOT, c.GROUPREF):
            continue
        else:
            raise ValueError(f"unsupported regex construct {op}")
    return "".join(out)


def _class_member(items, c) -> str:
    for op, arg in items:
        if op is c.NEGATE:
            return " "
        if op is c.LITERAL:
            return chr(arg)
        if op is c.RANGE:
            return chr(arg[0])
        if op is c.CATEGORY:
            return {c.CATEGORY_SPACE: " ", c.CATEGORY_DIGIT: "0"}.get(arg, "a")
    return ""


class CuratedTrecTask(QATask):
    name = "curatedtrec"
    description = "CuratedTrec: answers are regular expressions, a match anywhere counts (regex match)"
    formats = "TSV id<TAB>type<TAB>question<TAB>regex (no header)"
    metrics = ("regex_match",)
    primary_metric = "regex_match"

    def read(self, path: str | os.PathLike, limit: int | None = None) -> list[Example]:
        limit = check_limit(limit)
        path = Path(path)
        examples = []
        for lineno, line in numbered_lines(path):
            if limit is not None and len(examples) >= limit:
                break
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            try:
                examples.append(self.parse_line(line, lineno))
            except InputError as exc:
                raise InputError(f"{path}:{lineno}: {exc}") from None
        return nonempty(examples, path)

    def parse_line(self, line: str, lineno: int) -> Example:
        columns = line.split("\t", 3)  # a tab inside the regex (the last column) belongs to it
        if len(columns) != 4:
            raise InputError(f"expected 4 tab-separated columns (id, type, question, regex), got {len(columns)}")
        record_id, kind, question, pattern = (col.strip() for col in columns)
        if not question:
            raise InputError("the question is empty")
        if not pattern:
            raise InputError("the answer regular expression is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InputError(f"invalid answer regular expression {pattern!r}: {exc}") from None
        return Example(question, regex_target(pattern), [pattern],
                       {"id": record_id, "type": kind, "line": lineno})

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return {"regex_match": regex_match(prediction, example.golds)}
