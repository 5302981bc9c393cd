"""Read passages from JSON Lines files (plain or gzip-compressed).

Three record forms are understood (extra keys are ignored):

* ``{"title": ..., "text": ...}`` -- an article or passage with its title (``"id"`` optional);
* ``{"text": ...}`` -- text without a title (the title becomes ``""``);
* ``{"id": ..., "contents": "\\"Title\\"\\ntext"}`` -- the DPR / FlashRAG / Pyserini form: the first line
  of ``contents`` is the title, optionally in double quotes (CSV style, ``""`` for a literal quote);
  the rest is the text. ``contents`` without a newline is all text, with title ``""``.

Passage ids: a record's base id is ``id_prefix`` followed by its ``"id"`` field if it has one, else by
its 0-based record number in the file (blank lines are not counted). A record that fits in one passage
gets the base id (``"wiki18:0"``); a longer one is split into chunks ``"<base>#0"``, ``"<base>#1"``, ...

Whole corpora for a knowledge base are read with :func:`iter_source_passages`, which streams passages
from any mix of sources (see :func:`source_kind`):

* JSON Lines (``.jsonl``, ``.json``, ``.ndjson``, optionally ``.gz``) in the three forms above;
* the DPR ``psgs_w100.tsv`` format (``.tsv``, optionally ``.gz``): ``id<TAB>text<TAB>title`` with a
  header row naming the columns (``title`` optional), CSV quoting as DPR writes it;
* Parquet (``.parquet``, ``.pq``; needs ``pyarrow``) with columns ``text`` (and ``title``) or
  ``contents``, and optionally ``id``, read one row group batch at a time;
* CSV (``.csv``): each row a record, its columns ``name: value`` (a header row required);
* documents read whole: plain text (``.txt``, any common encoding), Markdown (``.md``, ``.markdown``,
  rendered to text), HTML (main content only), PDF (page by page) and DOCX -- the last three need the
  ``openbook[docs]`` extra. The title is the document's own (first Markdown heading, HTML title, PDF or
  DOCX metadata) or else the file name without its suffix. Markdown, HTML and DOCX are split at their
  headings and PDF at its pages: no passage spans two, and each is titled ``"Document > Section"``;
* WikiExtractor output (``wiki_00``, plain, ``.gz`` or ``.bz2``, recognised by its content): each
  article a document ``wiki:<page id>`` with its title, page id and url
  (:mod:`~openbook.corpus.readers.wikiextractor`);
* folders of any of these, searched recursively (hidden files skipped, in sorted path order); a file
  not read is named with its reason in a :class:`SourceReport`.

There, a record without an id gets the base id ``"<file name>:<record number>"`` (0-based), so that
records of different files do not collide; a text file's base id is ``"<folder name>/<relative path>"``
(or its file name when given alone). Malformed records go to a :class:`RecordErrors`, which either
raises (``on_error="stop"``) or counts and reports them (``"skip"``); each is named ``path:line``
(for Parquet, ``path:row``).

One module per format, all re-exported here: :mod:`~openbook.corpus.readers.files` (plain or gzip
files, line by line), :mod:`~openbook.corpus.readers.records` (record forms, passages of a record,
:class:`RecordErrors`), :mod:`~openbook.corpus.readers.jsonl`, :mod:`~openbook.corpus.readers.tsv`,
:mod:`~openbook.corpus.readers.parquet`, :mod:`~openbook.corpus.readers.csvfile`,
:mod:`~openbook.corpus.readers.text` (text and Markdown, via :mod:`~openbook.corpus.readers.decode` and
:mod:`~openbook.corpus.readers.markdown`), :mod:`~openbook.corpus.readers.html`,
:mod:`~openbook.corpus.readers.pdf`, :mod:`~openbook.corpus.readers.docx` (each returning a
:mod:`~openbook.corpus.readers.document`, split into pages or sections), :mod:`~openbook.corpus.readers.meta`
(each passage's metadata), :mod:`~openbook.corpus.readers.report` (files read and not read) and :mod:`~openbook.corpus.readers.sources` (a corpus of several sources and folders).
"""

# The task readers (openbook.eval.tasks) open their files with these two.
from openbook.corpus.readers.files import _numbered_lines as _numbered_lines
from openbook.corpus.readers.files import _open_binary as _open_binary
from openbook.corpus.readers.jsonl import JSONL_SUFFIXES, read_numbered_records, read_passages, read_records
from openbook.corpus.readers.meta import MAX_META_CHARS, RESERVED_META, check_meta_fields, record_meta
from openbook.corpus.readers.parquet import PARQUET_SUFFIXES
from openbook.corpus.readers.records import (
    CHUNK_SEPARATOR,
    ON_ERROR_CHOICES,
    MalformedRecord,
    RecordErrors,
    SourcePassage,
    passages_from_record,
    record_title_text,
)
from openbook.corpus.readers.report import SkippedFile, SourceReport
from openbook.corpus.readers.sources import FILE_TYPES, check_sources, file_type, iter_source_passages, source_kind
from openbook.corpus.readers.text import MARKDOWN_SUFFIXES, TEXT_SUFFIXES, content_line
from openbook.corpus.readers.tsv import TSV_SUFFIXES

__all__ = [
    "CHUNK_SEPARATOR",
    "FILE_TYPES",
    "MARKDOWN_SUFFIXES",
    "JSONL_SUFFIXES",
    "MAX_META_CHARS",
    "ON_ERROR_CHOICES",
    "PARQUET_SUFFIXES",
    "RESERVED_META",
    "TEXT_SUFFIXES",
    "TSV_SUFFIXES",
    "MalformedRecord",
    "RecordErrors",
    "SkippedFile",
    "SourceReport",
    "SourcePassage",
    "check_meta_fields",
    "check_sources",
    "content_line",
    "file_type",
    "iter_source_passages",
    "passages_from_record",
    "read_numbered_records",
    "read_passages",
    "read_records",
    "record_meta",
    "record_title_text",
    "source_kind",
]
