"""Records and what becomes of them: a record's title and text, its passages, and malformed records.

Three record forms are understood (extra keys are ignored):

* ``{"title": ..., "text": ...}`` -- an article or passage with its title (``"id"`` optional);
* ``{"text": ...}`` -- text without a title (the title becomes ``""``);
* ``{"id": ..., "contents": "\\"Title\\"\\ntext"}`` -- the DPR / FlashRAG / Pyserini form: the first line
  of ``contents`` is the title, optionally in double quotes (CSV style, ``""`` for a literal quote);
  the rest is the text. ``contents`` without a newline is all text, with title ``""``.

A record that fits in one passage gets its base id; a longer one is split into chunks ``"<base>#0"``,
``"<base>#1"``, ... Malformed records of a whole corpus go to a :class:`RecordErrors`, which either
raises (``on_error="stop"``) or counts and reports them (``"skip"``); each is named ``path:line``.
"""

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openbook.corpus.chunking import DEFAULT_MAX_WORDS, chunk_article, split_words
from openbook.corpus.passages import MetaValue, Passage
from openbook.corpus.readers.document import FileProblem
from openbook.corpus.readers.meta import record_meta
from openbook.errors import InputError
from openbook.presets import ON_ERROR

CHUNK_SEPARATOR = "#"


def _string_field(record: dict[str, Any], key: str) -> str:
    """Return ``record[key]`` (``""`` if absent or null), raising InputError if it is not a string."""
    value = record.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"field {key!r} must be a string, got {type(value).__name__}")
    return value


def _unquote_title(line: str) -> str:
    """Strip the CSV-style double quotes around a DPR title line: ``"\\"A \\"\\"B\\"\\"\\""`` -> ``A "B"``."""
    line = line.strip()
    if len(line) >= 2 and line.startswith('"') and line.endswith('"'):
        return line[1:-1].replace('""', '"')
    return line


def record_title_text(record: dict[str, Any]) -> tuple[str, str]:
    """Return ``(title, text)`` of a record in any of the three forms described in the module docstring."""
    if "text" in record:
        return _string_field(record, "title"), _string_field(record, "text")
    if "contents" in record:
        contents = _string_field(record, "contents")
        if "\n" not in contents:
            return "", contents
        title_line, text = contents.split("\n", 1)
        return _unquote_title(title_line), text
    keys = ", ".join(sorted(record)) or "none"
    raise InputError(f"record has neither a 'text' nor a 'contents' field (its keys: {keys})")


def passages_from_record(
    record: dict[str, Any], base_id: str | None = None, max_words: int = DEFAULT_MAX_WORDS
) -> list[Passage]:
    """Turn one record into passages of at most ``max_words`` words that keep its title.

    ``base_id`` defaults to the record's ``"id"`` field (or ``""``); see the module docstring for how
    chunk ids are derived from it. Empty text gives ``[]``.
    """
    title, text = record_title_text(record)
    if base_id is None:
        base_id = str(record.get("id", ""))
    chunks = split_words(text, max_words)
    if len(chunks) == 1:
        return [Passage(id=base_id, title=title, text=chunks[0])]
    return chunk_article(title, text, max_words, id_prefix=f"{base_id}{CHUNK_SEPARATOR}")


# ---------------------------------------------------------------------------------------------------
# whole corpora: a policy for malformed records


ON_ERROR_CHOICES = ON_ERROR


class MalformedRecord(InputError):
    """A malformed record, raised by :class:`RecordErrors` when told to stop."""


class RecordErrors:
    """What happens to a malformed record: ``"stop"`` raises InputError, ``"skip"`` counts it.

    Skipped records are counted in :attr:`skipped`; the first ``keep`` messages are kept in
    :attr:`examples` and passed to ``report`` (e.g. to print a warning) as they happen.
    """

    def __init__(self, on_error: str = "stop", report: Callable[[str], None] | None = None, keep: int = 10):
        if on_error not in ON_ERROR_CHOICES:
            raise InputError(f"on_error must be one of {', '.join(ON_ERROR_CHOICES)}, got {on_error!r}")
        self.on_error = on_error
        self.report = report
        self.keep = keep
        self.whole_files = False  # set while a folder's file is read: whole-file problems become FileProblem
        self.reset()

    def reset(self) -> None:
        """Forget what was skipped (for a fresh pass over the same input)."""
        self.skipped = 0
        self.examples: list[str] = []

    @property
    def skip(self) -> bool:
        return self.on_error == "skip"

    def __call__(self, where: str, problem: str) -> None:
        """Deal with the malformed record at ``where`` (``path:line``)."""
        message = f"{where}: {problem}"
        if not self.skip:
            raise MalformedRecord(message)
        self.skipped += 1
        if len(self.examples) < self.keep:
            self.examples.append(message)
            if self.report is not None:
                self.report(message)


@dataclass(frozen=True)
class SourcePassage:
    """A passage and where it was read (``path:line``), for error messages about it; ``document`` is the id
    of the document it belongs to and ``document_sha256`` that document's content hash (None if unknown:
    :func:`~openbook.corpus.readers.iter_source_passages` fills both in)."""

    where: str
    passage: Passage
    document: str | None = None
    document_sha256: str | None = None


def _record_passages(
    record: dict[str, Any], default_id: str, where: str, max_words: int, errors: RecordErrors,
    meta: dict[str, MetaValue] | None = None, fields: Sequence[str] = (), values: Mapping[str, Any] | None = None,
) -> Iterator[SourcePassage]:
    """Passages of one record, or a report to ``errors`` if it is malformed. Each passage's ``meta`` is
    ``meta`` (a document part's page or section) with the named ``fields`` of ``values`` (CSV and TSV
    columns, matched ignoring case) or else of the record (JSON Lines, Parquet)."""
    record_id = record.get("id")
    base_id = default_id if record_id is None or str(record_id) == "" else str(record_id)
    try:
        passages = passages_from_record(record, base_id, max_words)
        if fields:
            meta = {**(meta or {}), **record_meta(record if values is None else values, fields, values is not None)}
    except InputError as exc:
        errors(where, str(exc))
        return
    document = record.get("document")  # an explicit document id (JSON Lines), else the file's
    document = document if isinstance(document, str) and document else None
    for passage in passages:
        yield SourcePassage(where, dataclasses.replace(passage, meta=meta) if meta else passage, document)


def _file_error(exc: InputError, errors: RecordErrors) -> None:
    """A problem with a whole file (corrupt gzip, bad header): raise, or skip the rest of the file.

    For a file found in a folder (``errors.whole_files`` set), it is a :class:`FileProblem` instead: the
    folder's report names the file and the build goes on, whatever ``on_error`` says.
    """
    if isinstance(exc, MalformedRecord):
        raise exc
    where, _, problem = str(exc).partition(": ")
    if errors.whole_files:
        reason = "no header" if "header" in problem else "unreadable" if "cannot read" in problem else "corrupt"
        line = where.rpartition(":")[2]
        raise FileProblem(reason, f"line {line}: {problem}" if line.isdigit() else problem or str(exc))
    errors(where, problem or str(exc))
