"""Encoding a build's passages on a Ray cluster: a pool of Ray actors, one document encoder per actor.

:class:`RayEncodePassages` is an ``encode_passages`` function (a list of passages -> a float32 matrix,
rows in input order) like the one a local build is given, so the crash-safe resumable build
(:mod:`openbook.index.kb.build`) keeps its batches, progress file and resume unchanged: only "encode
this batch" runs elsewhere. Its ``workers`` actors start at the first batch and serve every later one, so
each loads (and with ``--compile`` compiles) its encoder once per build, not once per batch. Each batch is
sorted by length (so the rows an actor pads together are of similar length), cut into ``workers`` times a
few chunks, and handed out by Ray's ``ActorPool`` to whichever actor is free; the vectors come back tagged
with their row and are put back in input order.

The index layer does not import the models: the caller passes ``make_encode``, a picklable function
that builds the encoder in each actor and returns its ``encode_passages`` (see
``openbook.commands.kb``). As in transformers' ``RagRayDistributedRetriever``, Ray is imported only
when used.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from openbook.corpus import Passage
from openbook.errors import InputError
from openbook.index.kb.layout import EncodePassages

CHUNKS_PER_WORKER = 4  # chunks of a batch per actor: small enough to balance, big enough to batch well


def import_ray():
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        import ray
        import ray.util  # noqa: F401 (ActorPool)
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'openbook[scale]'") from None
    return ray


class _EncodeActor:
    """One Ray actor: builds its encoder once, then encodes every chunk it is given, batch after batch."""

    def __init__(self, make_encode: Callable[[], EncodePassages]):
        self.encode = make_encode()

    def run(self, chunk: list[tuple[int, str, str, str]]) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, vectors)`` of ``(row, id, title, text)`` items."""
        vectors = np.asarray(self.encode([Passage(str(i), t, x) for _, i, t, x in chunk]), dtype=np.float32)
        return np.asarray([row for row, *_ in chunk], dtype=np.int64), vectors


class RayEncodePassages:
    """``encode_passages`` on a Ray actor pool; ``close()`` (or ``with``) stops its actors and a Ray it started.

    Args:
        make_encode: picklable, no arguments; run once in each actor, returns ``encode_passages``.
        workers: actors (each takes 1 CPU); default the CPUs of the cluster.
        address: a Ray cluster to join (``ray.init(address=...)``, e.g. ``"auto"`` or
            ``"ray://head:10001"``); None: use the Ray already initialised in this process, or start a
            local one with this machine's CPUs.
        init_args: more ``ray.init`` keyword arguments for a Ray this object starts (tests: memory).
    """

    def __init__(self, make_encode: Callable[[], EncodePassages], workers: int | None = None,
                 address: str | None = None, init_args: dict[str, Any] | None = None):
        if not callable(make_encode):
            raise InputError("make_encode must be a function that returns an encode_passages function")
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise InputError(f"the number of Ray workers must be a positive integer, not {workers!r}")
        ray = import_ray()
        self.make_encode = make_encode
        self.started = False
        if not ray.is_initialized():
            options = {"include_dashboard": False, "configure_logging": False, "log_to_driver": False}
            if address:
                options["address"] = address
            else:
                options["num_cpus"] = os.cpu_count() or 1
            try:
                ray.init(**options, **(init_args or {}))
            except ConnectionError as exc:
                raise InputError(f"cannot connect to the Ray cluster at {address!r}: {exc}") from None
            self.started = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = workers or max(1, cpus)
        self._actors: list | None = None  # started at the first batch

    def _pool(self):
        ray = import_ray()
        if self._actors is None:
            actor = ray.remote(num_cpus=1)(_EncodeActor)
            self._actors = [actor.remote(self.make_encode) for _ in range(self.workers)]
        return ray.util.ActorPool(self._actors)

    def __call__(self, batch: list[Passage]) -> np.ndarray:
        if not batch:
            raise InputError("nothing to encode: the batch of passages is empty")
        # longest first (characters stand in for tokens here), so each chunk holds similar lengths
        order = sorted(range(len(batch)), key=lambda i: len(batch[i].title) + len(batch[i].text), reverse=True)
        items = [(i, str(batch[i].id), str(batch[i].title), str(batch[i].text)) for i in order]
        size = max(1, math.ceil(len(items) / (self.workers * CHUNKS_PER_WORKER)))
        chunks = [items[start:start + size] for start in range(0, len(items), size)]
        rows, vectors = [], []
        for part_rows, part_vectors in self._pool().map(lambda actor, chunk: actor.run.remote(chunk), chunks):
            rows.append(part_rows)
            vectors.append(part_vectors)
        rows, vectors = np.concatenate(rows), np.concatenate(vectors)
        if sorted(rows.tolist()) != list(range(len(batch))):
            raise RuntimeError(f"the Ray encoders returned rows {sorted(rows.tolist())[:10]}... for a batch of {len(batch)}")
        out = np.empty_like(vectors)
        out[rows] = vectors  # back in input order
        return out

    def close(self) -> None:
        """Stop the actors, and shut down the local Ray this object started (a cluster joined or already running
        stays up). Actors whose pool is dropped without ``close()`` stop too: Ray ends an actor when its last
        handle goes."""
        if self._actors is not None:
            ray = import_ray()
            for actor in self._actors:
                ray.kill(actor)
            self._actors = None
        if self.started:
            import_ray().shutdown()
            self.started = False

    def __enter__(self) -> "RayEncodePassages":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
