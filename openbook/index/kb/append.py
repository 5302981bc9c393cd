"""Streams of new passages: checking them, encoding them in batches and appending them to the store and
the embeddings file, skipping or refusing duplicate ids (for builds and for edits)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from openbook.corpus import Passage
from openbook.corpus.readers import RecordErrors, SourcePassage
from openbook.errors import InputError
from openbook.index.dense import as_float32_matrix
from openbook.index.kb.layout import EncodePassages
from openbook.index.store import EmbeddingsWriter, PassageStore
from openbook.index.store_meta import meta_problem


def _source_items(passages: Iterable) -> Iterator[SourcePassage]:
    """Normalise an iterable of Passage or SourcePassage into SourcePassages (checking the types)."""
    for position, item in enumerate(passages, start=1):
        if isinstance(item, SourcePassage):
            yield item
        elif isinstance(item, Passage):
            yield SourcePassage(f"passage {position}", item)
        else:
            raise InputError(f"item {position} to index is a {type(item).__name__}, not an openbook Passage")


def _encode_batch(encode_passages: EncodePassages, batch: list[Passage], start: int, dim: int | None) -> np.ndarray:
    """Encode one batch and check the result is a finite float32 (len(batch), dim) array."""
    vectors = encode_passages(batch)
    what = f"encode_passages output for passages {start}..{start + len(batch) - 1}"
    vectors = as_float32_matrix(vectors, what, dim)
    if vectors.shape[0] != len(batch):
        raise InputError(f"{what} has {vectors.shape[0]} rows for a batch of {len(batch)} passages")
    return vectors


def _check_declared_dim(encoder_info: dict[str, Any], dim: int) -> None:
    declared = encoder_info.get("dim")
    if declared is not None and declared != dim:
        raise InputError(
            f"encoder_info says dim {declared} but encode_passages returned vectors of dimension {dim}"
        )


class _Appender:
    """Append batches of new passages to a store + embeddings file: dedupe ids, encode, write, commit.

    Rows from ``input_start`` on (default: ``rows``, the first new row) hold passages of this input, so a
    duplicate id there is the input's fault, and one below it the knowledge base's.
    """

    def __init__(self, store: PassageStore, encode: EncodePassages, errors: RecordErrors, version: int,
                 batch_size: int, rows: int, writer: EmbeddingsWriter | None, make_writer: Callable[[int], EmbeddingsWriter],
                 after_batch: Callable[[int], None] = lambda rows: None, bar=None, input_start: int | None = None):
        self.store, self.encode, self.errors, self.version = store, encode, errors, version
        self.batch_size, self.rows, self.writer, self.make_writer = batch_size, rows, writer, make_writer
        self.after_batch, self.bar = after_batch, bar
        self.input_start = rows if input_start is None else input_start
        self.pending: list[Passage] = []
        self.pending_documents: list[tuple[str | None, str | None]] = []
        self.pending_ids: dict[str, str] = {}  # id -> where it was read, for the current batch

    def feed(self, items: Iterable[SourcePassage]) -> None:
        for item in items:
            pid = item.passage.id
            problem = self.duplicate(pid)
            if problem is None and item.passage.meta is not None:
                problem = meta_problem(item.passage.meta)
                problem = problem and f"passage {pid!r}: {problem}"
            if problem is not None:
                self.errors(item.where, problem)
                continue
            self.pending.append(item.passage)
            self.pending_documents.append((item.document, item.document_sha256))
            self.pending_ids[pid] = item.where
            if len(self.pending) == self.batch_size:
                self.flush()
        self.flush()

    def duplicate(self, pid: str) -> str | None:
        """Why ``pid`` cannot be added (an earlier passage of the input or of the knowledge base has it), or None."""
        if pid in self.pending_ids:
            return f"duplicate passage id {pid!r}: the input already has a passage with this id (at {self.pending_ids[pid]})"
        row = self.store.live_rows([pid]).get(pid)
        if row is None:
            return None
        if row >= self.input_start:
            return f"duplicate passage id {pid!r}: an earlier passage of the input has this id (passage ids must be unique)"
        return (f"duplicate passage id {pid!r}: the knowledge base already has a passage with this id "
                f"(use `openbook kb update` to change it, or `openbook kb sync KB DIR` to bring in a folder's "
                f"changed files)")

    def flush(self) -> None:
        if not self.pending:
            return
        batch = self.pending
        dim = self.writer.dim if self.writer is not None else None
        vectors = _encode_batch(self.encode, batch, self.rows, dim)
        if self.writer is None:
            self.writer = self.make_writer(vectors.shape[1])
        self.writer.append(vectors)
        with self.store.transaction():
            self.store.insert(self.rows, batch, self.version, self.pending_documents)
        self.rows += len(batch)
        self.pending, self.pending_ids, self.pending_documents = [], {}, []
        self.after_batch(self.rows)
        if self.bar is not None:
            self.bar.update(len(batch))


