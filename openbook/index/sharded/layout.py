"""The manifest of a sharded knowledge base, ``DIR/shards.json``, and how global row ids map to shards.

A sharded knowledge base is a folder holding S ordinary knowledge bases (``shard-000/`` ...) and
``shards.json``: ``format`` and ``format_version``; ``num_shards``; ``shards`` (the shard folders,
relative to DIR and confined to it); ``split`` (``"round-robin"``: passage i of the source, in row
order, went to shard i mod S); ``encoder``, ``dim``, ``dtype``, ``index_type``; ``num_rows`` (rows of all
shards) and ``num_passages`` (visible at the current version); ``source`` (the knowledge base it was
split from); ``current_version``, ``latest_version`` and ``versions``, each version naming the version
of every shard it is made of (``shards``: one number per shard). Readers open each shard at the version
the sharded version names, so a half-finished edit (shards already at a newer version, ``shards.json``
not yet) is never seen. ``shards.json`` is written atomically after every edit.

**Row ids.** Global row = local row x S + shard. With the round-robin split, the global rows of a
knowledge base without deleted rows are exactly its rows before sharding, so a sharded search returns
the same ids as the unsharded one; rows appended to a shard by later edits get ids of their own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from openbook.errors import KnowledgeBaseError
from openbook.index.kb.layout import _now, _write_json

SHARDS_FILE = "shards.json"
FORMAT = "openbook-sharded-knowledge-base"
FORMAT_VERSION = 1
SPLIT = "round-robin"
LOCK_FILE = ".lock"


def shard_name(i: int) -> str:
    """Folder of shard ``i`` inside the sharded knowledge base."""
    return f"shard-{i:03d}"


def is_sharded(path) -> bool:
    """Whether ``path`` is a sharded knowledge base (a folder with ``shards.json``)."""
    try:
        return (Path(path) / SHARDS_FILE).is_file()
    except (OSError, TypeError, ValueError):
        return False


def global_rows(local_rows: np.ndarray, shard: int, num_shards: int) -> np.ndarray:
    """Global row ids of a shard's local rows (negative rows, FAISS's "none", stay -1)."""
    local = np.asarray(local_rows, dtype=np.int64)
    return np.where(local >= 0, local * num_shards + shard, -1)


def split_rows(rows: np.ndarray, num_shards: int) -> tuple[np.ndarray, np.ndarray]:
    """``(shard, local row)`` of global rows."""
    rows = np.asarray(rows, dtype=np.int64)
    return rows % num_shards, rows // num_shards


def read_shards_manifest(path) -> dict[str, Any]:
    """Parse and check ``DIR/shards.json``: KnowledgeBaseError (one line) if missing or malformed."""
    path = Path(path)
    file = path / SHARDS_FILE
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KnowledgeBaseError(f"{path} is not a sharded knowledge base (no {SHARDS_FILE}); "
                                 f"make one with `openbook kb shard KB --shards S --out {path}`") from None
    except (OSError, ValueError) as exc:
        raise KnowledgeBaseError(f"cannot read {file}: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise KnowledgeBaseError(f"{file} is not an openbook sharded knowledge-base manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise KnowledgeBaseError(f"{file} has format version {manifest.get('format_version')!r}; this openbook "
                                 f"reads version {FORMAT_VERSION}")
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not shards or len(shards) != manifest.get("num_shards"):
        raise KnowledgeBaseError(f"{file}: 'shards' must list num_shards shard folders")
    root = path.resolve()
    for name in shards:
        where = (root / str(name)).resolve()
        if not isinstance(name, str) or Path(name).is_absolute() or where.parent != root:
            raise KnowledgeBaseError(f"{file}: shard {name!r} is not a folder directly inside {path}")
        if not where.is_dir():
            raise KnowledgeBaseError(f"shard {name} of sharded knowledge base {path} is missing ({where})")
    versions = manifest.get("versions")
    if not isinstance(versions, list) or not versions or any(
            not isinstance(v.get("shards"), list) or len(v["shards"]) != len(shards) for v in versions):
        raise KnowledgeBaseError(f"{file}: every version must name one version per shard")
    return manifest


def shard_paths(path, manifest: dict[str, Any]) -> list[Path]:
    return [Path(path) / name for name in manifest["shards"]]


def version_entry(path, manifest: dict[str, Any], version: int | None) -> dict[str, Any]:
    """The ``versions`` entry of ``version`` (default: the current one); KnowledgeBaseError if unknown."""
    version = manifest["current_version"] if version is None else version
    for entry in manifest["versions"]:
        if entry["version"] == version:
            return entry
    raise KnowledgeBaseError(f"sharded knowledge base {path} has no version {version!r} "
                             f"(versions 1 to {manifest['latest_version']})")


def write_shards_manifest(path, manifest: dict[str, Any]) -> None:
    """Write ``DIR/shards.json`` atomically."""
    _write_json(Path(path) / SHARDS_FILE, manifest)


def new_version(manifest: dict[str, Any], shard_versions: list[int], description: str, num_rows: int,
                num_passages: int) -> dict[str, Any]:
    """``manifest`` with a new latest (and current) version made of ``shard_versions``."""
    version, now = manifest["latest_version"] + 1, _now()
    entry = {"version": version, "created_at": now, "description": description, "shards": list(shard_versions),
             "num_rows": num_rows, "num_passages": num_passages}
    new = {**manifest, "current_version": version, "latest_version": version, "num_rows": num_rows,
           "num_passages": num_passages, "versions": [*manifest["versions"], entry], "updated_at": now}
    new.pop("pending_edit", None)
    return new
