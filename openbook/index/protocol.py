"""What every loaded knowledge base offers: :class:`KnowledgeBaseLike`, the one interface of the single
(:class:`~openbook.index.kb.KnowledgeBase`) and the sharded
(:class:`~openbook.index.sharded.ShardedKnowledgeBase`) knowledge base.

Code that takes a loaded knowledge base (the retrievers, the RAG model, the loader) is typed with it and
tells one from a path with ``isinstance(kb, KnowledgeBaseLike)``. The protocol is structural: a class has
it by having these members, not by inheriting from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from openbook.corpus import Passage
from openbook.index.filters import Filter


@runtime_checkable
class KnowledgeBaseLike(Protocol):
    """A knowledge base at one version: its passages, their vectors d(z), top-k search, and its versions."""

    @property
    def path(self) -> Path: ...

    @property
    def manifest(self) -> dict[str, Any]: ...

    @property
    def encoder_info(self) -> dict[str, Any]: ...

    @property
    def dim(self) -> int: ...

    @property
    def version(self) -> int: ...

    @property
    def current_version(self) -> int: ...

    @property
    def latest_version(self) -> int: ...

    @property
    def versions(self) -> list[dict[str, Any]]: ...

    @property
    def num_rows(self) -> int: ...

    @property
    def embeddings(self) -> Any: ...  # indexable by rows: a numpy memory map, or the shards' vectors

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> Passage: ...

    def __iter__(self) -> Iterator[Passage]: ...

    def live_rows(self) -> Iterator[tuple[int, Passage]]: ...

    def lookup(self, passage_id: str) -> tuple[int, Passage] | None: ...

    def passages(self, indices) -> list[Passage] | list[list[Passage]]: ...

    def search(self, query_vectors, k: int, where: Filter | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    def count_matching(self, where: Filter) -> int: ...

    def at_version(self, version: int | None = None) -> KnowledgeBaseLike: ...

    def reload(self, version: int | None = None) -> None: ...

    def use_version(self, version: int) -> None: ...

    def add(self, passages, encode_passages, batch_size: int = 256, progress: bool = False, on_error="stop",
            description: str | None = None) -> int: ...

    def update(self, updates, encode_passages, description: str | None = None) -> int: ...

    def delete(self, passage_ids: Iterable[str], description: str | None = None) -> int: ...

    def close(self) -> None: ...


__all__ = ["KnowledgeBaseLike"]
