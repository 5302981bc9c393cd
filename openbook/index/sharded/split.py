"""``openbook kb shard``: split a knowledge base into S self-contained shards plus ``shards.json``.

Each shard is an ordinary knowledge base written by :meth:`KnowledgeBase.build` from the source's
passages and stored vectors (nothing is re-encoded): passage i of the source (visible passages in row
order) goes to shard i mod S (round-robin), so shards differ in size by at most one passage and the
global row ids (:mod:`openbook.index.sharded.layout`) equal the source's rows when it has no deleted
rows. The whole folder is written beside ``out`` and renamed into place once complete; an existing
``out`` is never overwritten.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from openbook.atomic import atomic_dir
from openbook.corpus import Passage, SourcePassage
from openbook.errors import InputError, positive_int
from openbook.index.kb import KnowledgeBase
from openbook.index.kb.layout import _now
from openbook.index.sharded.layout import FORMAT, FORMAT_VERSION, SPLIT, is_sharded, shard_name, write_shards_manifest

SHARD_BATCH = 8192  # passages per build batch (their vectors are copied, not encoded)
RESIZED_PARAMS = ("nlist",)  # index parameters sized for the whole corpus: each shard sizes its own


def shard_knowledge_base(source: str | os.PathLike, num_shards: int, out: str | os.PathLike,
                         progress: bool = False) -> Path:
    """Write ``num_shards`` shards of the knowledge base at ``source`` (at its current version) and
    ``out/shards.json``; return ``out``. InputError for S < 1, S > passages or an existing ``out``."""
    source, out = Path(source), Path(out)
    num_shards = positive_int(num_shards, "--shards (number of shards)")
    if is_sharded(source):
        raise InputError(f"{source} is already a sharded knowledge base")
    if out.exists() or out.is_symlink():
        raise InputError(f"{out} already exists; give a new folder to --out (openbook kb shard never overwrites)")
    if out.resolve().is_relative_to(source.resolve()):
        raise InputError(f"--out {out} must not be inside the knowledge base {source}")
    kb = KnowledgeBase.load(source)
    try:
        if num_shards > len(kb):
            raise InputError(f"--shards {num_shards} is more than the {len(kb)} passages of {source}")
        manifest = kb.manifest
        params = {k: v for k, v in manifest["index"]["params"].items() if k not in RESIZED_PARAMS}
        with atomic_dir(out, "sharding") as stage:
            versions, rows = [], []
            for shard in range(num_shards):
                built = _build_shard(kb, shard, num_shards, stage / shard_name(shard), params, progress)
                versions.append(built.version)
                rows.append(built.num_rows)
                built.close()
            write_shards_manifest(stage, _manifest(source, kb, manifest, versions, rows))
    finally:
        kb.close()
    return out


def _with_documents(kb: KnowledgeBase, chunk: list[tuple[int, Passage]]) -> list[SourcePassage]:
    documents = kb.store.row_documents([row for row, _ in chunk])
    return [SourcePassage(f"row {row}", passage, *documents.get(row, (None, None))) for row, passage in chunk]


def _build_shard(kb: KnowledgeBase, shard: int, num_shards: int, out: Path, params: dict[str, Any],
                 progress: bool) -> KnowledgeBase:
    rows_by_id: dict[str, int] = {}

    def passages():  # with their documents (looked up a chunk of rows at a time)
        chunk: list[tuple[int, Passage]] = []
        for position, (row, passage) in enumerate(kb.live_rows()):
            if position % num_shards == shard:
                rows_by_id[passage.id] = row
                chunk.append((row, passage))
            if len(chunk) == SHARD_BATCH:
                yield from _with_documents(kb, chunk)
                chunk = []
        yield from _with_documents(kb, chunk)

    def stored_vectors(batch) -> np.ndarray:
        return np.asarray(kb.embeddings[[rows_by_id[p.id] for p in batch]], dtype=np.float32)

    manifest = kb.manifest
    return KnowledgeBase.build(
        passages(), stored_vectors, manifest["encoder"], out, batch_size=SHARD_BATCH, progress=progress,
        index_type=manifest["index"]["type"], index_params=params, dtype=manifest["dtype"],
        description=f"shard {shard + 1} of {num_shards} of {kb.path} version {kb.version}",
        source_info={"sharded_from": str(kb.path.resolve()), "version": kb.version, "shard": shard,
                     "num_shards": num_shards, "split": SPLIT},
    )


def _manifest(source: Path, kb: KnowledgeBase, manifest: dict[str, Any], versions: list[int],
              rows: list[int]) -> dict[str, Any]:
    now = _now()
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "num_shards": len(versions),
        "shards": [shard_name(i) for i in range(len(versions))], "split": SPLIT,
        "row_ids": "global row = local row * num_shards + shard",
        "encoder": manifest["encoder"], "dim": manifest["dim"], "dtype": manifest["dtype"],
        "index_type": manifest["index"]["type"], "num_rows": sum(rows), "num_passages": len(kb),
        "shard_rows": rows, "source": {"path": str(source.resolve()), "version": kb.version},
        "current_version": 1, "latest_version": 1,
        "versions": [{"version": 1, "created_at": now, "description": f"{len(versions)} shards of {source}",
                      "shards": versions, "num_rows": sum(rows), "num_passages": len(kb)}],
        "created_at": now, "updated_at": now,
    }
