""":class:`ShardedKnowledgeBase`: S shards searched as one knowledge base (the surface of
:class:`~openbook.index.kb.KnowledgeBase` that retrieval, the RAG model and the commands use).

It shows one sharded version at a time through an immutable :class:`Snapshot` (the sharded version and
the version of every shard it is made of). A search reads the snapshot once and asks every shard for that
shard's version, so replacing the snapshot (:meth:`ShardedKnowledgeBase.use_version`, an edit, ``reload``)
is one assignment: a reader sees every shard at the old versions or every shard at the new ones, never a
mix. Shards are served in this process or by Ray actors (:mod:`openbook.index.sharded.server`).

:meth:`ShardedKnowledgeBase.at_version` gives another object at another version over the *same* shard
servers (views, as a server keeps one per version: :class:`~openbook.serve.books.Books`): only the shard
versions not open yet are opened (after an edit, those of the shards it changed), and on Ray the views keep
using the same actors. Closing a view releases the shard versions no other view of this process has shown;
closing the last view closes the shards if this process started them. A copy sent to another process (a Ray
Serve replica gets one) shares the actors but does not own them: its last view releases, never stops them.
"""

from __future__ import annotations

import json
import operator
import os
import threading
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from openbook.corpus import Passage
from openbook.corpus.readers import RecordErrors
from openbook.errors import InputError, KnowledgeBaseError, positive_int
from openbook.index.filters import Filter, no_match
from openbook.index.kb import check_encoder_matches
from openbook.index.kb.layout import EncodePassages
from openbook.index.sharded.edit import add_sharded, delete_sharded, update_sharded, use_sharded_version
from openbook.index.sharded.layout import (
    SHARDS_FILE,
    global_rows,
    read_shards_manifest,
    shard_paths,
    split_rows,
    version_entry,
)
from openbook.index.sharded.merge import merge_topk
from openbook.index.sharded.server import start_shards


@dataclass(frozen=True)
class Snapshot:
    """One sharded version: its number, the manifest it was read from, each shard's version and passages."""

    version: int
    manifest: dict[str, Any]
    shard_versions: tuple[int, ...]
    counts: tuple[int, ...]
    shard_rows: tuple[int, ...]


class ShardedVectors:
    """The document vectors d(z) of a sharded knowledge base addressed by global row (``vectors[rows]``), as
    :attr:`KnowledgeBase.embeddings` is: what a dense retriever re-scores in torch during training."""

    def __init__(self, kb: ShardedKnowledgeBase, snapshot: Snapshot):
        self._kb, self._snapshot = kb, snapshot
        self.dtype = np.dtype(snapshot.manifest["dtype"])
        self.shape = (sum(snapshot.shard_rows), snapshot.manifest["dim"])

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        out = np.zeros((*rows.shape, self.shape[1]), dtype=self.dtype)
        flat = rows.reshape(-1)
        shards, local = split_rows(flat, self._kb.num_shards)
        snap, handles = self._snapshot, self._kb._handles
        pending = {s: handles[s].submit("vectors", snap.shard_versions[s], local[shards == s].tolist())
                   for s in np.unique(shards).tolist()}
        view = out.reshape(-1, self.shape[1])
        for s, ref in pending.items():
            view[shards == s] = handles[s].gather([ref])[0]
        return out


class _Shards:
    """The shard handles the views of one sharded knowledge base share in this process (module docs): how many
    views are open, how many of them have shown each ``(shard, version)``, and whether this process owns the
    shards (started them, so the last view closes them)."""

    def __init__(self, handles: list, owner: bool = True):
        self.handles, self.owner = handles, owner
        self.views = 0
        self.shown: Counter = Counter()
        self.lock = threading.Lock()

    def __reduce__(self):  # a copy for another process: the same shards (Ray actors), not their owner
        return _Shards, (self.handles, False)

    def join(self) -> None:
        with self.lock:
            self.views += 1

    def show(self, keys: set) -> None:
        with self.lock:
            self.shown.update(keys)

    def leave(self, keys: set) -> None:
        """A view closed: release the shard versions only it showed, or close the shards with the owner's last."""
        with self.lock:
            self.views -= 1
            self.shown.subtract(keys)
            free = sorted(key for key in keys if self.shown[key] <= 0)
            for key in free:
                del self.shown[key]
            last = self.views == 0
        if last and self.owner:
            for handle in self.handles:
                handle.close()
            return
        pending = [(self.handles[shard], self.handles[shard].submit("release", version)) for shard, version in free]
        for handle, ref in pending:
            handle.gather([ref])


class ShardedKnowledgeBase:
    """S shards at one sharded version, searched and read as one knowledge base (module docs)."""

    sharded = True

    def __init__(self, path: Path, shards: _Shards):
        """Use :meth:`load` (or :meth:`at_version`); the view shows nothing until :meth:`_show`."""
        self._path, self._shards, self._snapshot = path, shards, None
        self._shown: set[tuple[int, int]] = set()  # (shard, version) this view has shown
        self._closed = False
        shards.join()

    def __setstate__(self, state: dict) -> None:  # a copy in another process is one more view of its shards
        self.__dict__.update(state)
        self._shards.join()
        self._shards.show(self._shown)

    @property
    def _handles(self) -> list:
        return self._shards.handles

    def _show(self, snapshot: Snapshot) -> None:
        """Make ``snapshot`` the version shown (one assignment), counting the shard versions it uses."""
        new = set(enumerate(snapshot.shard_versions)) - self._shown
        self._shards.show(new)
        self._shown |= new
        self._snapshot = snapshot

    @classmethod
    def load(cls, path: str | os.PathLike, ray_address: str | None = None, *,
             expected_encoder: dict[str, Any] | None = None, verify: str = "auto", version: int | None = None,
             num_cpus: float = 0.0) -> ShardedKnowledgeBase:
        """Open the sharded knowledge base at ``path`` at ``version`` (default: its current one). Shards are
        served in this process, or with ``ray_address`` by one Ray actor each (``num_cpus`` reserved per
        actor) on that cluster (:func:`~openbook.index.sharded.server.start_shards`)."""
        path = Path(path)
        manifest = read_shards_manifest(path)
        if expected_encoder is not None:
            check_encoder_matches(path, manifest["encoder"], expected_encoder)
        handles = start_shards(shard_paths(path, manifest), expected_encoder, verify, ray_address, num_cpus)
        return cls(path, _Shards(handles))._open_at(manifest, version)

    def at_version(self, version: int | None = None) -> ShardedKnowledgeBase:
        """Another view of these shards at ``version`` (default: the current one in ``shards.json``): their
        servers or Ray actors are shared, and only shard versions not open yet are opened (module docs)."""
        if self._closed:
            raise KnowledgeBaseError(f"sharded knowledge base {self._path} is closed")
        return type(self)(self._path, self._shards)._open_at(read_shards_manifest(self._path), version)

    def _open_at(self, manifest: dict[str, Any], version: int | None) -> ShardedKnowledgeBase:
        try:
            self._show(self._read_snapshot(manifest, version))
        except BaseException:
            self.close()
            raise
        return self

    def _read_snapshot(self, manifest: dict[str, Any], version: int | None) -> Snapshot:
        entry = version_entry(self._path, manifest, version)
        versions = tuple(entry["shards"])
        infos = self._gather("info", [(v,) for v in versions])
        dims = {info["dim"] for info in infos}
        if dims != {manifest["dim"]}:
            raise KnowledgeBaseError(f"the shards of {self._path} hold vectors of dimension {sorted(dims)} but "
                                     f"{SHARDS_FILE} records {manifest['dim']}")
        return Snapshot(entry["version"], manifest, versions, tuple(i["passages"] for i in infos),
                        tuple(i["num_rows"] for i in infos))

    def _gather(self, method: str, args: list[tuple]) -> list:
        pending = [h.submit(method, *a) for h, a in zip(self._handles, args)]
        return [h.gather([p])[0] for h, p in zip(self._handles, pending)]

    def reload(self, version: int | None = None) -> None:
        """Re-read ``shards.json`` and show ``version`` (default: the current one): one atomic swap. The shard
        versions shown before stay open (a search may still read them) until this view closes."""
        self._show(self._read_snapshot(read_shards_manifest(self._path), version))

    def close(self) -> None:
        """Close this view: release the shard versions no other view shows; the last view of the process that
        started the shards closes every shard (and stops its Ray actor). Closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        self._shards.leave(self._shown)

    # -- editing (each creates a new sharded version and shows it) ------------------------------------

    def add(self, passages, encode_passages: EncodePassages, batch_size: int = 256, progress: bool = False,
            on_error: str | RecordErrors = "stop", description: str | None = None) -> int:
        """Add new passages (to the shard with the fewest rows) as a new version; return its number."""
        version = add_sharded(self._path, passages, encode_passages, batch_size, progress, on_error, description)
        self.reload()
        return version

    def update(self, updates, encode_passages: EncodePassages, description: str | None = None) -> int:
        """Change passages' text (and title) by id, in the shards holding them; a new version."""
        version = update_sharded(self._path, updates, encode_passages, description)
        self.reload()
        return version

    def delete(self, passage_ids: Iterable[str], description: str | None = None) -> int:
        """Delete passages by id as a new version; return its number."""
        version = delete_sharded(self._path, passage_ids, description)
        self.reload()
        return version

    def use_version(self, version: int) -> None:
        """Make ``version`` current (in ``shards.json``, for every later load) and show it."""
        use_sharded_version(self._path, version)
        self.reload()

    # -- properties ---------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def num_shards(self) -> int:
        return len(self._handles)

    @property
    def snapshot(self) -> Snapshot:
        """The sharded version shown (replaced as a whole by a swap)."""
        return self._snapshot

    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of ``shards.json`` as read for the version shown."""
        return json.loads(json.dumps(self._snapshot.manifest))

    @property
    def encoder_info(self) -> dict[str, Any]:
        return dict(self._snapshot.manifest["encoder"])

    @property
    def dim(self) -> int:
        return self._snapshot.manifest["dim"]

    @property
    def version(self) -> int:
        return self._snapshot.version

    @property
    def shard_versions(self) -> tuple[int, ...]:
        return self._snapshot.shard_versions

    @property
    def current_version(self) -> int:
        return self._snapshot.manifest["current_version"]

    @property
    def latest_version(self) -> int:
        return self._snapshot.manifest["latest_version"]

    @property
    def versions(self) -> list[dict[str, Any]]:
        return [dict(v) for v in self._snapshot.manifest["versions"]]

    @property
    def num_rows(self) -> int:
        """Rows of all shards (including deleted passages and later versions)."""
        return sum(self._snapshot.shard_rows)

    @property
    def embeddings(self) -> ShardedVectors:
        """The document vectors by global row (:class:`ShardedVectors`)."""
        return ShardedVectors(self, self._snapshot)

    def __len__(self) -> int:
        """Passages visible at this version."""
        return sum(self._snapshot.counts)

    def __repr__(self) -> str:
        return (f"ShardedKnowledgeBase({str(self._path)!r}, shards={self.num_shards}, passages={len(self)}, "
                f"dim={self.dim}, version={self.version}/{self.latest_version})")

    # -- access -------------------------------------------------------------------------------------

    def __getitem__(self, i: int) -> Passage:
        """Passage at global row ``i``."""
        row = operator.index(i)
        shard, local = int(row % self.num_shards), int(row // self.num_shards)
        if row < 0 or local >= self._snapshot.shard_rows[shard]:
            raise IndexError(f"row {i} is not a row of sharded knowledge base {self._path}")
        return self.passages([row])[0]

    def __iter__(self) -> Iterator[Passage]:
        """The passages visible at this version, shard by shard, each in row order."""
        for _, passage in self.live_rows():
            yield passage

    def live_rows(self) -> Iterator[tuple[int, Passage]]:
        """``(global row, passage)`` visible at this version, shard by shard."""
        snap = self._snapshot
        for shard, handle in enumerate(self._handles):
            start = 0
            while start is not None:
                batch, start = handle.gather([handle.submit("live_batch", snap.shard_versions[shard], start)])[0]
                for row, passage in batch:
                    yield row * self.num_shards + shard, passage

    def lookup(self, passage_id: str) -> tuple[int, Passage] | None:
        """``(global row, passage)`` of the passage with id ``passage_id`` at this version, or None."""
        snap = self._snapshot
        found = self._gather("lookup", [(v, str(passage_id)) for v in snap.shard_versions])
        for shard, hit in enumerate(found):
            if hit is not None:
                return int(hit[0]) * self.num_shards + shard, hit[1]
        return None

    def passages(self, indices) -> list[Passage] | list[list[Passage]]:
        """Passages of the global rows :meth:`search` returned (1-D: a list; 2-D: one list per query)."""
        rows = np.asarray(indices)
        if rows.ndim == 2:
            flat = self.passages(rows.reshape(-1))
            width = rows.shape[1]
            return [flat[i:i + width] for i in range(0, len(flat), width)] if width else [[] for _ in rows]
        rows = rows.reshape(-1)
        if rows.size and not np.issubdtype(rows.dtype, np.integer):
            raise InputError(f"passage indices must be integers, got {rows.dtype}")
        shards, local = split_rows(rows, self.num_shards)
        limits = np.asarray(self._snapshot.shard_rows, dtype=np.int64)
        bad = rows[(rows < 0) | (local >= limits[shards])] if rows.size else rows
        if bad.size:
            raise InputError(f"passage index {int(bad[0])} is out of range for sharded knowledge base {self._path}")
        snap, out = self._snapshot, [None] * len(rows)
        wanted = np.unique(shards).tolist()
        pending = {s: self._handles[s].submit("passages", snap.shard_versions[s], local[shards == s].tolist())
                   for s in wanted}
        for s in wanted:
            for position, passage in zip(np.flatnonzero(shards == s), self._handles[s].gather([pending[s]])[0]):
                out[position] = passage
        return out

    def count_matching(self, where: Filter) -> int:
        """How many passages visible at this version match ``where`` (summed over the shards)."""
        return sum(self._gather("count_matching", [(v, where) for v in self._snapshot.shard_versions]))

    def search(self, query_vectors, k: int, where: Filter | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` MIPS over all shards at this version, merged exactly (:func:`merge_topk`):
        ``(scores float32 (m, k), global rows int64 (m, k))``; ``k`` above the passages is clamped with a
        warning, as :meth:`KnowledgeBase.search` does. With ``where`` every shard returns its exact top k
        among its matching passages, so the merge is the exact filtered top k."""
        k = positive_int(k, "k")
        snap = self._snapshot  # read once: the whole search sees one sharded version
        if where is None:
            counts = snap.counts
        else:
            counts = tuple(self._gather("count_matching", [(v, where) for v in snap.shard_versions]))
        total = sum(counts)
        if total == 0 and where is not None:
            raise no_match(where, self._path)
        if total == 0:
            raise KnowledgeBaseError(f"knowledge base {self._path} has no passages at version {snap.version}")
        if k > total:
            what = f"knowledge base {self._path} has only" if where is None else "only"
            warnings.warn(f"asked for k={k} passages but {what} {total}"
                          f"{'' if where is None else ' match the filter'}; retrieving {total}", stacklevel=2)
            k = total
        queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
        live = [s for s, count in enumerate(counts) if count]
        pending = [self._handles[s].submit("search", snap.shard_versions[s], queries, k, where) for s in live]
        results = [self._handles[s].gather([p])[0] for s, p in zip(live, pending)]
        scores, rows = merge_topk([(s, sc, r) for s, (sc, r) in zip(live, results)], self.num_shards, k)
        if scores.shape[1] < k:
            warnings.warn(f"the shards found only {scores.shape[1]} of the {k} passages asked for", stacklevel=2)
        return scores, rows


__all__ = ["ShardedKnowledgeBase", "ShardedVectors", "Snapshot", "global_rows"]
