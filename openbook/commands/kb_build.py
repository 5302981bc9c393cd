"""What ``kb build``, ``kb add`` and ``kb sync`` say about their sources: the files read per type and every file
not read with its reason (``--json`` carries the same), ``--strict``, ``--text-columns`` for CSV files,
``--meta-fields`` (the record fields and columns each passage keeps as metadata), and a progress bar over the
files as they are read (its total known from a listing, so it shows the time left).

A file that cannot be read is named and skipped, so a bad file never stops a folder build after the
encoder has loaded; with ``--strict`` every source is read once before the encoder loads, and any file
that would not be read stops the command there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import warnings
from collections.abc import Iterator

from openbook.corpus import SourceReport


def add_source_options(parser: argparse.ArgumentParser) -> None:
    """``--strict``, ``--text-columns`` and ``--meta-fields`` (and ``--json`` where the command has none yet)."""
    parser.add_argument("--strict", action="store_true",
                        help="read every source before loading the encoder and stop if any file cannot be read "
                             "(default: name each such file with its reason, skip it and go on)")
    parser.add_argument("--text-columns", type=_column_list, default=None, metavar="NAME,...",
                        help="the columns of CSV files that make up the text, written 'name: value' "
                             "(default: all but id and title)")
    add_meta_fields_option(parser)
    if not any("--json" in action.option_strings for action in parser._actions):
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")


def add_meta_fields_option(parser: argparse.ArgumentParser) -> None:
    """``--meta-fields``: the fields of JSON Lines and Parquet records and the columns of CSV and TSV files
    that each passage keeps in its metadata."""
    parser.add_argument("--meta-fields", type=_meta_fields, default=(), metavar="NAME,...",
                        help="record fields (JSON Lines, Parquet) or columns (CSV, TSV) each passage keeps as "
                             "metadata, besides source, type, page, section and modified; values must be text, "
                             "numbers or true/false (default: none)")


def _meta_fields(text: str) -> tuple[str, ...]:
    from openbook.corpus import check_meta_fields
    from openbook.errors import InputError

    try:
        return check_meta_fields(_column_list(text))
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _column_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated column names, got {text!r}")
    return names


def source_report(args: argparse.Namespace, sources, max_words: int, errors):
    """The report a read of ``sources`` fills in; with ``--strict``, after a first read that raises
    InputError if any file would not be read (call it before the encoder loads)."""
    from openbook.corpus import RecordErrors, iter_source_passages
    from openbook.errors import InputError

    report = FilesRead(report=None if args.json else lambda message: warnings.warn(message, stacklevel=2))
    if args.strict:
        check = SourceReport()
        for _ in iter_source_passages(sources, max_words, RecordErrors(errors.on_error), check, args.text_columns,
                                      args.meta_fields):
            pass  # malformed records follow --on-error, in this pass as in the build's (warned about once, there)
        if check.skipped:
            more = f" (and {len(check.skipped) - 1} more file(s) not read)" if len(check.skipped) > 1 else ""
            raise InputError(f"{check.skipped[0]}{more}; without --strict such files are named and skipped")
    return report


class FilesRead(SourceReport):
    """A :class:`SourceReport` that also moves :attr:`bar` (when set) on by one for each file read or not read."""

    bar = None

    def reset(self) -> None:
        super().reset()
        if self.bar is not None and self.bar.n:  # a second pass over the same sources (a resumed build's)
            self.bar.reset(total=self.bar.total)

    def add_read(self, file_type: str) -> None:
        super().add_read(file_type)
        self._advance()

    def skip(self, path, reason: str, detail: str) -> None:
        super().skip(path, reason, detail)
        self._advance()

    def _advance(self) -> None:
        if self.bar is not None:
            self.bar.update()


@contextlib.contextmanager
def reading_files(args: argparse.Namespace, sources, report: FilesRead) -> Iterator[FilesRead]:
    """A bar over the files of ``sources`` while they are read into ``report`` (none with ``--quiet``)."""
    from openbook.corpus.readers.sources import count_files
    from openbook.progress import progress_bar

    with progress_bar(total=count_files(sources), desc="reading files", unit="file", enabled=not args.quiet) as bar:
        report.bar = bar
        try:
            yield report
        finally:
            report.bar = None


def print_built(args, kb, num_sources: int, errors, report, print_summary) -> None:
    """What ``kb build`` made: one JSON object with ``--json``, else lines ending in ``print_summary()``."""
    if args.json:
        from openbook.index.kb import disk_usage

        return _print_json({"path": str(kb.path), "num_passages": len(kb), "num_sources": num_sources,
                            "index": {k: kb.manifest["index"][k] for k in ("type", "params")},
                            "seconds": kb.manifest.get("build", {}).get("seconds", {}),
                            "disk_bytes": disk_usage(kb.path)["total"]}, errors, report)
    print(f"built knowledge base {kb.path}: {len(kb)} passages from {num_sources} source(s)")
    if errors.skipped:
        print(f"  skipped {errors.skipped} malformed record(s); first: {errors.examples[0]}")
    _print_report(report)
    print_summary()


def print_added(args, path, version: int, errors, report, print_edited) -> int:
    """What ``kb add`` did: one JSON object with ``--json``, else ``print_edited(path, version)`` and the report."""
    if args.json:
        _print_json({"path": str(path), "version": version}, errors, report)
        return 0
    print_edited(path, version)
    _print_report(report)
    return 0


def _print_report(report) -> None:
    for line in report.lines():
        print(f"  {line}")


def _print_json(record: dict, errors, report) -> None:
    record = {**record, **report.as_dict(), "records_skipped": errors.skipped,
              "records_skipped_examples": errors.examples}
    print(json.dumps(record, ensure_ascii=False, indent=2))
