"""Parquet (``.parquet``, ``.pq``; needs ``pyarrow``) with columns ``text`` (and ``title``) or ``contents``,
and optionally ``id``, read one row group batch at a time; malformed rows are named ``path:row``. The columns
named to be kept as metadata are read too (a missing one is simply absent)."""

from collections.abc import Iterator, Sequence
from pathlib import Path

from openbook.corpus.readers.records import RecordErrors, SourcePassage, _file_error, _record_passages
from openbook.errors import InputError

PARQUET_SUFFIXES = (".parquet", ".pq")


def _import_parquet():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("reading Parquet files needs pyarrow: pip install pyarrow") from None
    return pq


def _parquet_source(path: Path, max_words: int, errors: RecordErrors, fields: Sequence[str] = (),
                    batch_rows: int = 1024) -> Iterator[SourcePassage]:
    pq = _import_parquet()
    try:
        parquet = pq.ParquetFile(path)
        names = parquet.schema_arrow.names
        if "text" in names:
            columns = [c for c in ("id", "title", "text") if c in names]
        elif "contents" in names:
            columns = [c for c in ("id", "contents") if c in names]
        else:
            raise InputError(
                f"{path}: has neither a 'text' nor a 'contents' column (its columns: {', '.join(names) or 'none'})"
            )
        columns += [name for name in fields if name in names and name not in columns]
        row_no = 0
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=columns):
            data = batch.to_pydict()
            for i in range(batch.num_rows):
                row_no += 1
                record = {name: data[name][i] for name in columns}
                yield from _record_passages(
                    record, f"{path.name}:{row_no - 1}", f"{path}:{row_no}", max_words, errors, fields=fields
                )
    except InputError as exc:
        _file_error(exc, errors)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid, OSError, ... for corrupt files
        if type(exc).__module__.split(".")[0] != "pyarrow" and not isinstance(exc, OSError):
            raise
        _file_error(InputError(f"{path}: not a readable Parquet file ({exc})"), errors)
