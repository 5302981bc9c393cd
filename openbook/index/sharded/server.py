"""Serving one shard: :class:`ShardServer` holds a shard's knowledge base, opened at the versions asked for,
in this process or inside a Ray actor (one per shard, :func:`start_shards`).

Every call names the shard version it reads, so a reader pinned to one sharded version reads every shard
at the version that sharded version names, whichever versions other readers use meanwhile (the atomic
hot swap of :class:`~openbook.index.sharded.kb.ShardedKnowledgeBase`). A version, once opened, stays open
(versions are immutable on disk; a new one is opened after an edit) until :meth:`ShardServer.release`, which
the knowledge base calls when no view of it shows that version any more (a later call opens it again).

Ray actors follow transformers' ``RagRayDistributedRetriever``: the driver holds actor handles and fans
each batch of queries out to them; the actors read the shard folders themselves, so on a multi-node
cluster the sharded knowledge base must be on storage every node sees (the same path).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from openbook.corpus import Passage
from openbook.errors import InputError
from openbook.index.filters import Filter
from openbook.index.kb import KnowledgeBase

ITER_BATCH = 4096  # passages per call when iterating a shard


class ShardServer:
    """One shard of a sharded knowledge base (the object a Ray shard actor holds)."""

    def __init__(self, path: str, expected_encoder: dict[str, Any] | None = None, verify: str = "auto"):
        self.path = Path(path)
        self._expected, self._verify = expected_encoder, verify
        self._open: dict[int, KnowledgeBase] = {}
        self._verified = False
        self._lock = threading.Lock()

    def kb(self, version: int) -> KnowledgeBase:
        """The shard at ``version`` (opened once; the first open runs the integrity checks)."""
        with self._lock:
            kb = self._open.get(version)
            if kb is None:
                verify = "size" if self._verified else self._verify
                kb = KnowledgeBase.load(self.path, expected_encoder=self._expected, verify=verify, version=version)
                self._open[version] = kb
                self._verified = True
            return kb

    def open_versions(self) -> list[int]:
        """The versions of this shard open now."""
        with self._lock:
            return sorted(self._open)

    def release(self, version: int) -> None:
        """Close the shard at ``version`` if it is open (no reader uses it any more)."""
        with self._lock:
            kb = self._open.pop(version, None)
        if kb is not None:
            kb.close()

    def info(self, version: int) -> dict[str, Any]:
        kb = self.kb(version)
        return {"passages": len(kb), "num_rows": kb.num_rows, "dim": kb.dim, "manifest": kb.manifest}

    def search(self, version: int, queries: np.ndarray, k: int, where: Filter | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """The shard's top ``min(k, passages)`` (scores, local rows), among those matching ``where`` if given;
        empty if it has none."""
        kb = self.kb(version)
        k = min(k, len(kb) if where is None else kb.count_matching(where))
        if k == 0:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        return kb.search(queries, k, where=where)

    def count_matching(self, version: int, where: Filter) -> int:
        return self.kb(version).count_matching(where)

    def passages(self, version: int, rows: list[int]) -> list[Passage]:
        return self.kb(version).passages(np.asarray(rows, dtype=np.int64)) if len(rows) else []

    def vectors(self, version: int, rows: list[int]) -> np.ndarray:
        kb = self.kb(version)
        return np.asarray(kb.embeddings[np.asarray(rows, dtype=np.int64)], dtype=kb.embeddings.dtype)

    def lookup(self, version: int, passage_id: str) -> tuple[int, Passage] | None:
        return self.kb(version).lookup(passage_id)

    def live_batch(self, version: int, start: int) -> tuple[list[tuple[int, Passage]], int | None]:
        """Up to ITER_BATCH ``(local row, passage)`` visible at ``version`` from local row ``start`` on, and
        the row to continue from (None at the end)."""
        out = []
        for row, passage in self.kb(version).live_rows(start):
            out.append((row, passage))
            if len(out) == ITER_BATCH:
                return out, row + 1
        return out, None

    @staticmethod
    def memory() -> dict[str, int | None]:
        """The process serving this shard (a Ray actor's own): ``pid``, ``rss_bytes`` (resident now) and
        ``peak_rss_bytes``, from ``/proc/self/status`` (None where there is none): what a shard's worker needs."""
        sizes: dict[str, int | None] = {"rss_bytes": None, "peak_rss_bytes": None}
        try:
            with open("/proc/self/status", encoding="ascii") as status:
                for line in status:
                    key, _, value = line.partition(":")
                    name = {"VmRSS": "rss_bytes", "VmHWM": "peak_rss_bytes"}.get(key)
                    if name:
                        sizes[name] = int(value.split()[0]) * 1024  # reported in kB
        except OSError:
            pass
        return {"pid": os.getpid(), **sizes}

    def close(self) -> None:
        with self._lock:
            for kb in self._open.values():
                kb.close()
            self._open.clear()


class LocalShard:
    """A shard served in this process: ``call(method, *args)`` runs it now."""

    def __init__(self, server: ShardServer):
        self.server = server

    def submit(self, method: str, *args):
        return getattr(self.server, method)(*args)

    @staticmethod
    def gather(pending: list) -> list:
        return pending

    def close(self) -> None:
        self.server.close()


class RayShard:
    """A shard served by a Ray actor: ``submit`` returns an ObjectRef, ``gather`` waits for several."""

    def __init__(self, actor, ray):
        self.actor, self.ray = actor, ray  # the ray module, imported (optional dependency) by start_shards

    def submit(self, method: str, *args):
        return getattr(self.actor, method).remote(*args)

    def gather(self, pending: list) -> list:
        return self.ray.get(pending)

    def close(self) -> None:
        self.ray.kill(self.actor)


def start_shards(paths: list[Path], expected_encoder: dict[str, Any] | None, verify: str,
                 ray_address: str | None = None, num_cpus: float = 0.0) -> list:
    """One shard handle per path: in this process (``ray_address`` None), or one Ray actor per shard on
    the cluster at ``ray_address`` (``"auto"``, ``"ray://host:10001"``, or ``"local"`` for the Ray
    already initialised in this process, or a new local one), spread over its nodes."""
    if ray_address is None:
        return [LocalShard(ShardServer(str(p), expected_encoder, verify)) for p in paths]
    try:
        import ray
    except ImportError:
        raise InputError("serving shards on Ray needs ray: pip install 'openbook[scale]'") from None
    if not ray.is_initialized():
        ray.init(address=None if ray_address == "local" else ray_address, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    actor_class = ray.remote(ShardServer).options(num_cpus=num_cpus, scheduling_strategy="SPREAD")
    return [RayShard(actor_class.remote(str(Path(p).resolve()), expected_encoder, verify), ray) for p in paths]
