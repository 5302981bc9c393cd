"""Building a knowledge base: streaming passages into the store and ``embeddings.npy`` batch by batch,
resumable after a crash (``<DIR>.partial``), then indexing them and writing the manifest."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from openbook.atomic import fsync_path, make_temp_dir_next_to, replace_dir, temp_name_of
from openbook.corpus.readers import RecordErrors, SourcePassage
from openbook.errors import InputError, KnowledgeBaseError
from openbook.index.kb.append import _Appender, _check_declared_dim, _source_items
from openbook.index.kb.folder import _locked, check_replaceable, clean_leftovers, partial_dir
from openbook.index.kb.indexing import _create_index, _index_record, resolve_index
from openbook.index.kb.layout import (
    _PROGRESS_FILE,
    _STAGE_DIR,
    _STATE_FILE,
    _WORK_STORE,
    EMBEDDINGS_FILE,
    FORMAT_VERSION,
    INDEX_FILE,
    LOCK_FILE,
    MANIFEST_FILE,
    STORE_FILE,
    EncodePassages,
    _file_entry,
    _now,
    _read_json,
    _segment,
    _write_json,
)
from openbook.index.store import (
    NPY_HEADER_BYTES,
    EmbeddingsWriter,
    PassageStore,
    embeddings_bytes,
    map_embeddings,
    read_npy_header,
)
from openbook.progress import progress_bar

# ---------------------------------------------------------------------------------------------------
# building


class _Build:
    """One build into a work directory; with ``resume`` the directory survives and a rerun continues."""

    def __init__(self, work: Path, config: dict[str, Any], encode: EncodePassages, encoder_info: dict[str, Any],
                 errors: RecordErrors, progress: bool, description: str | None):
        self.work, self.config, self.encode, self.encoder_info = work, config, encode, encoder_info
        self.errors, self.progress, self.description = errors, progress, description
        self.stage = work / _STAGE_DIR
        self.rows = 0
        # seconds of each stage, summed over the runs of a resumed build (what ``kb build`` reports); the rows
        # encoded while timed give the rate even when an earlier run did not time its share
        self.timing: dict[str, float] = {}

    def note(self, message: str) -> None:
        if self.progress:
            print(f"openbook: {message}", file=sys.stderr)

    # -- state ---------------------------------------------------------------------------------------

    def prepare(self) -> dict[str, Any]:
        """Check or (re)start the saved state; return the progress record."""
        self.remove_temporaries()
        state = _read_json(self.work / _STATE_FILE)
        progress = _read_json(self.work / _PROGRESS_FILE)
        if state is not None and state != self.config:
            self.note(f"the build options differ from the interrupted build in {self.work}; starting over")
            self.reset()
            state = progress = None
        if state is None:
            self.reset()
            _write_json(self.work / _STATE_FILE, self.config)
            progress = None
        return progress if isinstance(progress, dict) else {"phase": "encoding", "rows": 0}

    def remove_temporaries(self) -> None:
        """Delete temporary files a killed build left in the work directory or the stage (never published)."""
        for folder in (self.work, self.stage):
            for entry in folder.iterdir() if folder.is_dir() else ():
                if temp_name_of(entry.name) is not None and entry.is_dir():
                    shutil.rmtree(entry)
                elif temp_name_of(entry.name) is not None:
                    entry.unlink()

    def reset(self) -> None:
        for entry in self.work.iterdir():
            if entry.name == LOCK_FILE:
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self.rows = 0

    def save_progress(self, **fields) -> None:
        _write_json(self.work / _PROGRESS_FILE, {"phase": "encoding", **fields})

    # -- phases ---------------------------------------------------------------------------------------

    def run(self, passages) -> None:
        """Encode (or resume encoding) all passages, then index them and write the manifest into the stage."""
        progress = self.prepare()
        moved = self.stage / EMBEDDINGS_FILE
        if progress.get("phase") != "encoded" and moved.is_file() and not (self.work / EMBEDDINGS_FILE).exists():
            os.replace(moved, self.work / EMBEDDINGS_FILE)  # killed between moving it and saving progress
        if progress.get("phase") == "encoded" and (self.stage / EMBEDDINGS_FILE).is_file():
            self.rows = progress["rows"]
            self.timing = _timing_of(progress)
            self.errors.skipped = progress.get("skipped", 0)
            self.errors.examples = progress.get("skipped_examples", [])
        else:
            self.encode_all(passages, progress)
        if not (self.stage / MANIFEST_FILE).is_file():
            self.finish()

    def encode_all(self, passages, progress: dict[str, Any]) -> None:
        store = PassageStore.create(self.work / _WORK_STORE, bulk=True)
        try:
            for attempt in range(2):
                items = _source_items(passages() if callable(passages) else passages)
                resumed = self.reconcile(store, progress)
                self.timing = _timing_of(progress) if resumed else {}
                if resumed:
                    items = self.fast_forward(store, items)
                    if items is None:  # the input changed since the interrupted build
                        if not callable(passages) or attempt:
                            raise KnowledgeBaseError(
                                f"the passages differ from those of the interrupted build in {self.work}; "
                                f"delete that directory to start over"
                            )
                        self.note(f"the input changed since the interrupted build in {self.work}; starting over")
                        store.close()
                        self.reset()
                        _write_json(self.work / _STATE_FILE, self.config)
                        store = PassageStore.create(self.work / _WORK_STORE, bulk=True)
                        progress = {"phase": "encoding", "rows": 0}
                        self.errors.reset()
                        continue
                    self.note(f"resuming the build in {self.work}: {self.rows} passages already encoded")
                self.encode_rest(store, items)
                break
        finally:
            store.close()

    def reconcile(self, store: PassageStore, progress: dict[str, Any]) -> bool:
        """Cut the store and embeddings back to the last batch recorded in the progress file.

        A killed process may have written rows after it; the count kept is the smallest of the progress
        file's, the store's and the embeddings file's, rounded down to whole batches.
        """
        rows = int(progress.get("rows", 0)) if progress.get("phase") == "encoding" else 0
        embeddings = self.work / EMBEDDINGS_FILE
        if embeddings.is_file():
            dtype, _, dim = read_npy_header(embeddings)
            rows = min(rows, (embeddings.stat().st_size - NPY_HEADER_BYTES) // (dim * dtype.itemsize))
        else:
            rows = 0
        rows = min(rows, store.num_rows())
        rows -= rows % self.config["batch_size"]
        store.discard_after(rows, 1)
        if embeddings.is_file():
            if rows:
                EmbeddingsWriter.reopen(embeddings, rows)
            else:
                embeddings.unlink()
        self.rows = rows
        return rows > 0

    def fast_forward(self, store: PassageStore, items: Iterator[SourcePassage]) -> Iterator[SourcePassage] | None:
        """Skip the passages already stored, checking they are the same; None if the input changed.

        A passage whose id, title and text are those stored but whose metadata is not (a file touched since,
        so its ``modified`` moved) keeps its vector, which depends on its title and text only: its stored
        metadata is replaced by the new one instead of the build starting over."""
        stored = store.iter_rows(0, self.rows)
        matched, new_meta = 0, []
        items = iter(items)
        for item in items:
            if matched == self.rows:
                self.update_meta(store, new_meta)
                return itertools.chain([item], items)
            row, expected, _ = next(stored)
            passage = item.passage
            if (passage.id, passage.title, passage.text) == (expected.id, expected.title, expected.text):
                if passage.meta != expected.meta:
                    new_meta.append((row, passage.meta))
                matched += 1
                continue
            row = store.live_rows([item.passage.id]).get(item.passage.id)
            if row is not None and row < matched:  # a duplicate id, skipped by the first run too
                self.errors(item.where, f"duplicate passage id {item.passage.id!r}")
                stored = store.iter_rows(matched, self.rows)  # re-align: this item took no row
                continue
            return None
        if matched != self.rows:
            return None
        self.update_meta(store, new_meta)
        return iter(())

    def update_meta(self, store: PassageStore, metas: list) -> None:
        if metas:
            with store.transaction():
                store.set_meta(metas)
            self.note(f"{len(metas)} already encoded passages have new metadata (e.g. their file's time): kept")

    def encode_rest(self, store: PassageStore, items: Iterator[SourcePassage]) -> None:
        dtype = self.config["dtype"]
        embeddings = self.work / EMBEDDINGS_FILE
        writer = EmbeddingsWriter.reopen(embeddings, self.rows) if embeddings.is_file() else None
        batch = self.config["batch_size"]

        def make_writer(dim: int) -> EmbeddingsWriter:
            _check_declared_dim(self.encoder_info, dim)
            return EmbeddingsWriter.create(embeddings, dtype, dim)

        start, start_rows = time.monotonic(), self.rows
        seconds, timed_rows = self.timing.get("encode_seconds", 0.0), self.timing.get("encode_rows_timed", 0)

        def after_batch(rows: int) -> None:
            self.rows = rows
            self.timing.update(encode_seconds=seconds + time.monotonic() - start,
                               encode_rows_timed=timed_rows + rows - start_rows)
            self.save_progress(rows=rows, **self.timing)

        with progress_bar(initial=self.rows, unit="passage", desc="encoding passages", enabled=self.progress) as bar:
            appender = _Appender(store, self.encode, self.errors, 1, batch, self.rows, writer, make_writer,
                                 after_batch, bar, input_start=0)
            appender.feed(items)
        if self.rows == 0:
            raise InputError("no passages to index: the passage input is empty"
                             + (f" ({self.errors.skipped} malformed records skipped)" if self.errors.skipped else ""))
        writer = appender.writer
        writer.publish()
        self.stage.mkdir(exist_ok=True)
        start = time.monotonic()
        store.compact_into(self.stage / STORE_FILE)
        os.replace(embeddings, self.stage / EMBEDDINGS_FILE)
        fsync_path(self.stage)
        self.timing["store_seconds"] = time.monotonic() - start
        _write_json(self.work / _PROGRESS_FILE, {
            "phase": "encoded", "rows": self.rows, "skipped": self.errors.skipped,
            "skipped_examples": self.errors.examples, **self.timing,
        })

    def finish(self) -> None:
        """Index the encoded vectors and write the manifest (the stage is then a complete knowledge base)."""
        dtype, rows, dim = read_npy_header(self.stage / EMBEDDINGS_FILE)
        embeddings = map_embeddings(self.stage / EMBEDDINGS_FILE, dtype, rows, dim)
        kind, params = resolve_index(self.config["index"]["type"], self.config["index"]["params"], rows, dim)
        start = time.monotonic()
        index = _create_index(kind, params, embeddings, self.progress)
        self.publish_into_stage(INDEX_FILE, index.save)
        self.timing["index_seconds"] = time.monotonic() - start
        del embeddings
        store = PassageStore.open(self.stage / STORE_FILE)
        try:
            if store.num_rows() != rows:
                raise KnowledgeBaseError(f"build in {self.work} is inconsistent; delete it and build again")
        finally:
            store.close()
        created = _now()
        description = self.description or f"build: {rows} passages"
        if self.errors.skipped:
            description += f" ({self.errors.skipped} malformed records skipped)"
        manifest = {
            "format_version": FORMAT_VERSION,
            "encoder": self.encoder_info,
            "dim": dim,
            "dtype": dtype.name,
            "index_type": index.type_name,
            "index": _index_record(index, params, INDEX_FILE),
            "num_rows": rows,
            "num_passages": rows,
            "current_version": 1,
            "latest_version": 1,
            "versions": [{
                "version": 1, "created_at": created, "description": description,
                "num_rows": rows, "num_passages": rows, "added": rows, "deleted": 0,
            }],
            "files": {
                STORE_FILE: _file_entry(self.stage / STORE_FILE),
                EMBEDDINGS_FILE: {
                    "bytes": embeddings_bytes(dtype, rows, dim),
                    "segments": [_segment(self.stage / EMBEDDINGS_FILE, dtype, dim, 0, rows)],
                },
                INDEX_FILE: _file_entry(self.stage / INDEX_FILE),
            },
            "created_at": created,
            "updated_at": created,
            "build": {
                **self.config.get("source", {}),
                "batch_size": self.config["batch_size"],
                "skipped": self.errors.skipped,
                "skipped_examples": self.errors.examples,
                "seconds": _stage_seconds(self.timing),
            },
        }
        self.publish_into_stage(MANIFEST_FILE, lambda path: _write_json(path, manifest))
        fsync_path(self.stage)

    def publish_into_stage(self, name: str, write: Callable[[Path], None]) -> None:
        """Write the file ``name`` in the work directory, then move it into the stage: the stage (which
        becomes the knowledge base) never holds a temporary file, even if the process is killed."""
        write(self.work / name)
        os.replace(self.work / name, self.stage / name)




def _timing_of(progress: dict[str, Any]) -> dict[str, float]:
    """The stage timings a progress record carries (none from a build that did not time itself)."""
    return {key: progress[key] for key in ("encode_seconds", "encode_rows_timed", "store_seconds") if key in progress}


def _stage_seconds(timing: dict[str, float]) -> dict[str, Any]:
    """The manifest's record of the build's stages: ``encode`` (reading and encoding, streamed together), ``store``
    (writing the passage store), ``index``, each in seconds summed over the runs of a resumed build, and the rate
    of the passages encoded while timed (``encode_rows_timed`` of them)."""
    record: dict[str, Any] = {name: round(timing[f"{name}_seconds"], 2) for name in ("encode", "store", "index")
                              if f"{name}_seconds" in timing}
    if timing.get("encode_seconds"):
        record["encode_rows_timed"] = int(timing["encode_rows_timed"])
        record["encode_passages_per_s"] = round(timing["encode_rows_timed"] / timing["encode_seconds"], 2)
    return record


def build_and_publish(out_dir: Path, build_args: tuple, passages, resume: bool, replace: bool) -> None:
    """Run a :class:`_Build` (``build_args`` after its work directory) and publish it at ``out_dir``.

    An existing knowledge base at ``out_dir`` is replaced only if ``replace`` (and holds nothing else);
    it stays locked, as for an edit, from the start of the build to its replacement. Leftovers of
    killed builds and edits are removed first. With ``resume`` the work directory is ``<out_dir>.partial``.
    """
    with contextlib.ExitStack() as held:
        out_locked = check_replaceable(out_dir, replace)

        def lock_out() -> None:
            held.enter_context(_locked(out_dir / LOCK_FILE, f"knowledge base {out_dir}"))
            check_replaceable(out_dir, replace)  # again, now that no other openbook process can change it

        if out_locked:
            lock_out()
        clean_leftovers(out_dir)
        work = partial_dir(out_dir) if resume else make_temp_dir_next_to(out_dir)
        work.mkdir(parents=True, exist_ok=True)
        build = _Build(work, *build_args)
        keep = resume  # a resumable build keeps its state unless it finishes (or had nothing worth keeping)
        try:
            with _locked(work / LOCK_FILE, f"build directory {work}"):
                try:
                    build.run(passages)
                except InputError as exc:
                    if resume and build.rows:
                        raise InputError(
                            f"{exc} ({build.rows} passages already encoded are kept in {work}: fix the input "
                            f"and run the same build again to continue)"
                        ) from None
                    keep = False
                    raise
                if not out_locked and check_replaceable(out_dir, replace):  # built by another process meanwhile
                    lock_out()
                replace_dir(work / _STAGE_DIR, out_dir)
                keep = False
        finally:
            if not keep:
                shutil.rmtree(work, ignore_errors=True)
