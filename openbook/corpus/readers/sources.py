"""Whole corpora: the type of each source, and the passages of any mix of sources and folders in order.

A folder is searched recursively (symbolic links followed, loops refused; hidden files and folders
ignored, and counted) and every file of a supported type is read, in sorted path order. A file that
cannot be read as a whole (unsupported type, unreadable, empty, encrypted, too large, corrupt, binary, a
CSV without a header) is named with its reason in a :class:`SourceReport` and the rest goes on; a
malformed record inside a file goes to the :class:`RecordErrors` as before.

Every passage read from a file carries its metadata (:mod:`~openbook.corpus.readers.meta`): its document
id, file type and modification time, its page or section, and the record fields named in ``meta_fields``.
"""

import dataclasses
import errno
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from openbook.corpus.chunking import DEFAULT_MAX_WORDS, check_max_words
from openbook.corpus.readers.csvfile import CSV_SUFFIXES, csv_passages
from openbook.corpus.readers.document import FileProblem, need
from openbook.corpus.readers.docx import DOCX_SUFFIXES, read_docx
from openbook.corpus.readers.files import _strip_gz, sha256_file
from openbook.corpus.readers.html import HTML_SUFFIXES, read_html
from openbook.corpus.readers.jsonl import JSONL_SUFFIXES, _jsonl_source
from openbook.corpus.readers.meta import check_meta_fields, file_meta
from openbook.corpus.readers.parquet import PARQUET_SUFFIXES, _import_parquet, _parquet_source
from openbook.corpus.readers.pdf import PDF_SUFFIXES, read_pdf
from openbook.corpus.readers.records import RecordErrors, SourcePassage, _record_passages
from openbook.corpus.readers.report import SourceReport
from openbook.corpus.readers.text import MARKDOWN_SUFFIXES, TEXT_SUFFIXES, read_markdown, read_text
from openbook.corpus.readers.tsv import TSV_SUFFIXES, _tsv_source
from openbook.corpus.readers.wikiextractor import WIKIEXTRACTOR_TYPE, sniff, wikiextractor_passages
from openbook.errors import InputError

# File types by suffix, in the order they are tried. JSON Lines and TSV may also be gzip-compressed (.gz).
FILE_TYPES: dict[str, tuple[str, ...]] = {
    "jsonl": JSONL_SUFFIXES, "tsv": TSV_SUFFIXES, "parquet": PARQUET_SUFFIXES, "csv": CSV_SUFFIXES,
    "text": TEXT_SUFFIXES, "markdown": MARKDOWN_SUFFIXES, "html": HTML_SUFFIXES, "pdf": PDF_SUFFIXES,
    "docx": DOCX_SUFFIXES,
}
_GZIP_TYPES = ("jsonl", "tsv")
_DOCUMENT_READERS = {"text": read_text, "markdown": read_markdown, "html": read_html, "pdf": read_pdf,
                     "docx": read_docx}
# The libraries of the optional openbook[docs] extra, checked before any model loads.
_LIBRARIES = {"html": ("trafilatura", "lxml_html_clean"), "pdf": ("pypdf",), "docx": ("docx",)}


def file_type(path: str | os.PathLike) -> str | None:
    """The type of a corpus file by its suffix (a key of ``FILE_TYPES``), else ``"wikiextractor"`` for
    WikiExtractor output (``wiki_00``, plain or compressed: recognised by its first bytes), or None."""
    name = Path(path).name.lower()
    for kind, suffixes in FILE_TYPES.items():
        if _strip_gz(name).endswith(suffixes) and (kind in _GZIP_TYPES or not name.endswith(".gz")):
            return kind
    try:
        return WIKIEXTRACTOR_TYPE if sniff(Path(path)) else None
    except FileProblem:
        return None


def _known() -> str:
    return ", ".join(s for suffixes in FILE_TYPES.values() for s in suffixes)


def source_kind(path: str | os.PathLike) -> str:
    """``"folder"`` or the file type of ``path`` (see ``FILE_TYPES``); InputError if missing or unknown."""
    path = Path(path)
    if path.is_dir():
        return "folder"
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    kind = file_type(path)
    if kind is None:
        try:
            sniff(path)  # a compressed file that cannot be decompressed says so
        except FileProblem as problem:
            raise InputError(f"{path}: {problem.detail}") from None
        raise InputError(
            f"{path}: unknown corpus format; expected a folder or a file ending in {_known()} "
            f"(JSON Lines and TSV may be gzip-compressed, .gz), or WikiExtractor output"
        )
    return kind


def check_sources(sources: Iterable[str | os.PathLike]) -> list[Path]:
    """Check that every source exists, has a known type and that its readers are installed (cheap: before
    any model is loaded; a folder is listed, not read)."""
    paths = [Path(s) for s in sources]
    if not paths:
        raise InputError("no corpus source given")
    for path in paths:
        kinds = _folder_types(path) if path.is_dir() else {source_kind(path)}
        if "parquet" in kinds:
            _import_parquet()
        for kind in sorted(k for k in kinds if k in _LIBRARIES):
            for module in _LIBRARIES[kind]:
                try:
                    need(module, f"{kind.upper()} files")
                except FileProblem as exc:
                    raise InputError(f"{path}: {exc.detail}") from None
    return paths


def _folder_types(folder: Path) -> set[str]:
    """The types of the files a folder build would read; InputError if there are none."""
    report = SourceReport()
    kinds = {file_type(f) for f, _ in _folder_files(folder, report)}
    if not kinds:
        first = f": {report.skipped[0]}" if report.skipped else ""
        raise InputError(f"{folder}: no file openbook reads in this folder ({len(report.skipped)} not read{first})")
    return kinds


def count_files(sources: Iterable[str | os.PathLike]) -> int:
    """How many files a read of ``sources`` goes through, each of them read or named as not read (the total of
    a progress bar): every file source, and every file of a folder but hidden ones (a folder is listed, not read)."""
    total = 0
    for path in map(Path, sources):
        if path.is_dir():
            report = SourceReport()
            total += len(_folder_files(path, report)) + len(report.skipped)
        else:
            total += 1
    return total


def iter_source_passages(
    sources: Iterable[str | os.PathLike],
    max_words: int = DEFAULT_MAX_WORDS,
    errors: RecordErrors | None = None,
    report: SourceReport | None = None,
    text_columns: Sequence[str] | None = None,
    meta_fields: Sequence[str] | None = None,
) -> Iterator[SourcePassage]:
    """Stream the passages of ``sources`` in order, split into ``max_words``-word chunks that keep titles.

    Nothing is held in memory beyond the current record or document (Parquet: the current batch of
    rows). Files not read go to ``report`` (which starts afresh at each pass); malformed records to ``errors``.
    ``text_columns`` picks the text columns of CSV files; ``meta_fields`` names the record fields (JSON Lines,
    Parquet) and columns (CSV, TSV) each passage keeps in its ``meta``, with its document's metadata.
    """
    check_max_words(max_words)
    fields = check_meta_fields(meta_fields)
    errors = errors if errors is not None else RecordErrors()
    report = report if report is not None else SourceReport()
    report.reset()
    for path in check_sources(sources):
        if path.is_dir():
            name = path.resolve().name or "corpus"
            for file, relative in _folder_files(path, report):
                yield from _with_document(file, relative, _file_passages(
                    file, f"{name}/{relative}", max_words, errors, report, (text_columns, fields)))
        else:
            yield from _with_document(path, path.name, _file_passages(
                path, path.name, max_words, errors, report, (text_columns, fields), in_folder=False))


def _with_document(file: Path, document: str, items: Iterator[SourcePassage]) -> Iterator[SourcePassage]:
    """Fill in each passage's document: in a folder, the file's path relative to the folder (``a/b.md``, the
    same however the folder is named: relative, absolute, through a symlink); for a file source, an explicit
    ``document`` field of the record or else the file's name. The content hash is the file's sha256. Each
    passage's ``meta`` gets the document's ``source``, ``type`` and ``modified`` around its own fields."""
    digest = known = None
    for item in items:
        if item.document_sha256 is None:  # (a WikiExtractor article has its own)
            digest = digest or sha256_file(file)
        known = known or file_meta(file, file_type(file), document)
        source = item.document or document
        meta = {"source": source, "type": known["type"], **(item.passage.meta or {}), "modified": known["modified"]}
        yield dataclasses.replace(item, passage=dataclasses.replace(item.passage, meta=meta), document=source,
                                  document_sha256=item.document_sha256 or digest)


def _file_passages(path: Path, base_id: str, max_words: int, errors: RecordErrors, report: SourceReport,
                   columns: tuple[Sequence[str] | None, Sequence[str]], in_folder: bool = True) -> Iterator[SourcePassage]:
    """The passages of one file; a file that cannot be read is named in ``report`` instead (in a folder,
    also a JSON Lines, TSV or Parquet file found corrupt or without a header: see ``_file_error``)."""
    kind = file_type(path)
    count = 0
    try:
        errors.whole_files = in_folder
        for item in _reader(kind, *columns)(path, base_id, max_words, errors, report):
            count += 1
            yield item
    except FileProblem as problem:
        kept = f"; the {count} passage(s) before it were kept" if count else ""
        report.skip(path, problem.reason, problem.detail + kept)
        return
    except OSError as exc:
        report.skip(path, "unreadable", f"cannot read: {exc.strerror or exc}")
        return
    finally:
        errors.whole_files = False
    if count:
        report.add_read(kind)
    else:
        report.skip(path, "empty", "no passages in it")


def _reader(kind: str, text_columns, fields) -> Callable[..., Iterator[SourcePassage]]:
    if kind in _DOCUMENT_READERS:
        return lambda path, base_id, max_words, errors, report: _document_passages(
            kind, path, base_id, max_words, errors, report)
    if kind == "csv":
        return lambda path, base_id, max_words, errors, report: csv_passages(
            path, base_id, max_words, errors, text_columns, fields)
    if kind == WIKIEXTRACTOR_TYPE:
        return lambda path, base_id, max_words, errors, report: wikiextractor_passages(
            path, max_words, errors, report)
    stream = {"jsonl": _jsonl_source, "tsv": _tsv_source, "parquet": _parquet_source}[kind]
    return lambda path, base_id, max_words, errors, report: stream(path, max_words, errors, fields)


def _document_passages(kind: str, path: Path, base_id: str, max_words: int, errors: RecordErrors,
                       report: SourceReport) -> Iterator[SourcePassage]:
    """A document read whole, one record per part: a page (ids ``<base>:page<n>``, titles ``"Doc > page
    n"``), a section (ids ``<base>:s<n>``, numbered from 1 in order, titles ``"Doc > Section"``) or the text
    before the first heading (id ``<base>``, the document's title alone). Passages never cross parts."""
    document = _DOCUMENT_READERS[kind](path)
    if document.encoding not in (None, "utf_8", "ascii"):
        report.encoding(path, document.encoding)
    sections = 0
    for part in document.parts:
        meta: dict = {}
        if part.page is not None:
            part_id, title, meta["page"] = f"{base_id}:page{part.page}", f"{document.title} > page {part.page}", part.page
        elif part.section is not None:
            sections += 1
            part_id, title, meta["section"] = f"{base_id}:s{sections}", f"{document.title} > {part.section}", part.section
        else:
            part_id, title = base_id, document.title
        record = {"id": part_id, "title": title, "text": part.text}
        yield from _record_passages(record, part_id, f"{path}:{part.page or 1}", max_words, errors, meta or None)


def _folder_files(folder: Path, report: SourceReport) -> list[tuple[Path, str]]:
    """The files of ``folder`` to read, as ``(path, relative path)`` in sorted order; the others go to ``report``."""
    files = []
    seen = {os.path.realpath(folder)}
    for root, dirs, names in os.walk(folder, followlinks=True):
        kept = []
        for d in sorted(dirs):
            real = os.path.realpath(os.path.join(root, d))
            if d.startswith("."):
                report.hidden += 1
            elif real in seen or not os.path.isdir(real):
                report.skip(Path(root, d), "unreadable", "symbolic link loop (a folder already read)")
            else:
                seen.add(real)
                kept.append(d)
        dirs[:] = kept
        for file_name in names:
            path = Path(root, file_name)
            if file_name.startswith("."):
                report.hidden += 1
                continue
            problem = _file_problem(path)
            if problem is not None:
                report.skip(path, *problem)
            else:
                files.append((path.relative_to(folder).as_posix(), path))
    return [(path, relative) for relative, path in sorted(files)]


def _file_problem(path: Path) -> tuple[str, str] | None:
    """Why ``path`` (in a folder) will not be read, judged from its name and metadata; None if it will be."""
    try:
        info = path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "unreadable", "symbolic link loop"
        if path.is_symlink():
            return "unreadable", "broken symbolic link"
        return "unreadable", f"cannot read: {exc.strerror or exc}"
    if file_type(path) is None:
        try:
            sniff(path)  # a compressed file that cannot be decompressed is "corrupt"
        except FileProblem as problem:
            return problem.reason, problem.detail
        return "unsupported type", f"unsupported type ({path.suffix or 'no suffix'}; openbook reads {_known()} and WikiExtractor output)"
    if not path.is_file():
        return "unreadable", "not a regular file"
    if not os.access(path, os.R_OK):
        return "unreadable", "cannot read: permission denied"
    if info.st_size == 0:
        return "empty", "empty file"
    return None
