"""Sharded knowledge bases: S ordinary knowledge bases searched as one, in this process or on Ray actors.

* :mod:`~openbook.index.sharded.layout` -- ``shards.json`` and the global row ids (local row x S + shard).
* :mod:`~openbook.index.sharded.split` -- ``openbook kb shard``: split a knowledge base round-robin.
* :mod:`~openbook.index.sharded.server` -- one shard served in-process or by a Ray actor.
* :mod:`~openbook.index.sharded.merge` -- the exact merge of the shards' top k.
* :mod:`~openbook.index.sharded.edit` -- edits per shard, one sharded version per edit.
* :mod:`~openbook.index.sharded.kb` -- :class:`ShardedKnowledgeBase`, with an atomic swap across shards.

:func:`load_knowledge_base` is the one function commands and the model loader open a ``--kb`` with: it
returns a :class:`~openbook.index.kb.KnowledgeBase` or a :class:`ShardedKnowledgeBase`, whichever the
folder holds.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

from openbook.index.kb import KnowledgeBase, add_passages, delete_passages, read_manifest, update_passages, use_version
from openbook.index.protocol import KnowledgeBaseLike
from openbook.index.sharded.edit import add_sharded, delete_sharded, update_sharded, use_sharded_version
from openbook.index.sharded.kb import ShardedKnowledgeBase, ShardedVectors, Snapshot
from openbook.index.sharded.layout import SHARDS_FILE, is_sharded, read_shards_manifest
from openbook.index.sharded.merge import merge_topk
from openbook.index.sharded.split import shard_knowledge_base


def load_knowledge_base(path: str | os.PathLike, expected_encoder: dict[str, Any] | None = None,
                        version: int | None = None, verify: str = "auto",
                        ray_address: str | None = None) -> KnowledgeBaseLike:
    """Open the knowledge base at ``path``, sharded (``shards.json``: its shards served in this process,
    or by Ray actors on the cluster at ``ray_address``) or not."""
    if is_sharded(path):
        return ShardedKnowledgeBase.load(path, ray_address, expected_encoder=expected_encoder, verify=verify,
                                         version=version)
    return KnowledgeBase.load(path, expected_encoder=expected_encoder, verify=verify, version=version)


def stored_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a knowledge-base folder: ``shards.json`` if sharded, else ``manifest.json`` (both
    hold ``encoder``, ``current_version``, ``latest_version``, ``num_passages`` and ``versions``)."""
    return read_shards_manifest(path) if is_sharded(path) else read_manifest(path)


def stored_encoder_info(path: str | os.PathLike) -> dict[str, Any]:
    """The encoder a knowledge-base folder (sharded or not) was built with, read from its manifest."""
    return stored_manifest(path)["encoder"]


_EDITS = SimpleNamespace(add=add_passages, update=update_passages, delete=delete_passages, use=use_version)
_SHARDED_EDITS = SimpleNamespace(add=add_sharded, update=update_sharded, delete=delete_sharded,
                                 use=use_sharded_version)


def edits_for(path: str | os.PathLike) -> SimpleNamespace:
    """The path-level edits (``add``, ``update``, ``delete``, ``use``) of the folder's kind: those of
    :mod:`openbook.index.kb` or of :mod:`openbook.index.sharded.edit` (same arguments)."""
    return _SHARDED_EDITS if is_sharded(path) else _EDITS


__all__ = [
    "SHARDS_FILE",
    "ShardedKnowledgeBase",
    "ShardedVectors",
    "Snapshot",
    "edits_for",
    "is_sharded",
    "load_knowledge_base",
    "merge_topk",
    "read_shards_manifest",
    "shard_knowledge_base",
    "stored_encoder_info",
    "stored_manifest",
]
