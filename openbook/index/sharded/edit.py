"""Edits of a sharded knowledge base: each is an ordinary edit of the shards it touches, then one new
version in ``shards.json`` naming every shard's version (the commit point).

New passages go to the shard with the fewest rows (the lowest-numbered of equals), so shards stay even
as after the round-robin split; an update or a deletion goes to the shard holding each id. Until
``shards.json`` is written, readers keep reading every shard at the versions the previous sharded version
names. An edit interrupted between a shard's commit and ``shards.json`` leaves that shard one version
ahead: the next edit refuses with a clear error naming it (reads are unaffected).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from openbook.atomic import exclusive_lock
from openbook.corpus.readers import RecordErrors, SourcePassage
from openbook.errors import InputError, KnowledgeBaseError
from openbook.index.kb import add_passages, delete_passages, read_manifest, update_passages
from openbook.index.kb.edit import _describe_ids, _normalise_update
from openbook.index.kb.layout import STORE_FILE, EncodePassages, _now
from openbook.index.sharded.layout import (
    LOCK_FILE,
    new_version,
    read_shards_manifest,
    shard_paths,
    version_entry,
    write_shards_manifest,
)
from openbook.index.store import PassageStore


@contextlib.contextmanager
def _sharded_edit(path: Path, action: str) -> Iterator[tuple[dict[str, Any], list[Path], list[int]]]:
    """Lock, check that edits may apply, mark the edit pending; yield (manifest, shard paths, shard versions)."""
    read_shards_manifest(path)
    with exclusive_lock(path / LOCK_FILE, f"sharded knowledge base {path}", KnowledgeBaseError):
        manifest = read_shards_manifest(path)
        if manifest["current_version"] != manifest["latest_version"]:
            raise KnowledgeBaseError(
                f"sharded knowledge base {path} is at version {manifest['current_version']} but the latest is "
                f"{manifest['latest_version']}; edits apply to the latest version: run "
                f"`openbook kb use {path} {manifest['latest_version']}` first")
        paths = shard_paths(path, manifest)
        recorded = version_entry(path, manifest, manifest["latest_version"])["shards"]
        for shard_path, version in zip(paths, recorded):
            latest = read_manifest(shard_path)["latest_version"]
            if latest != version:
                raise KnowledgeBaseError(
                    f"shard {shard_path.name} of {path} is at version {latest} but shards.json records {version} "
                    f"(an interrupted edit{_pending(manifest)}); reads still see version {manifest['latest_version']}, "
                    f"but edits need the shards re-made: `openbook kb shard` the source again")
        write_shards_manifest(path, {**manifest, "pending_edit": {"action": action, "started_at": _now()}})
        try:
            yield manifest, paths, list(recorded)
        except BaseException:
            if [read_manifest(p)["latest_version"] for p in paths] == list(recorded):  # nothing committed
                write_shards_manifest(path, manifest)
            raise


def _pending(manifest: dict[str, Any]) -> str:
    pending = manifest.get("pending_edit")
    return f": {pending['action']} started at {pending['started_at']}" if isinstance(pending, dict) else ""


def _commit(path: Path, manifest: dict[str, Any], paths: list[Path], versions: list[int], description: str) -> int:
    shard_manifests = [read_manifest(p) for p in paths]
    rows = sum(m["num_rows"] for m in shard_manifests)
    passages = sum(_passages_at(m, v) for m, v in zip(shard_manifests, versions))
    new = new_version(manifest, versions, description, rows, passages)
    new["shard_rows"] = [m["num_rows"] for m in shard_manifests]
    write_shards_manifest(path, new)
    return new["latest_version"]


def _passages_at(manifest: dict[str, Any], version: int) -> int:
    return next(v["num_passages"] for v in manifest["versions"] if v["version"] == version)


def _holders(paths: list[Path], ids: list[str]) -> dict[str, int]:
    """The shard holding each live passage id of ``ids`` (at the shards' latest versions) that exists."""
    holders: dict[str, int] = {}
    for shard, shard_path in enumerate(paths):
        with contextlib.closing(PassageStore.open(shard_path / STORE_FILE)) as store:
            for pid in store.live_rows(ids):
                holders.setdefault(pid, shard)
    return holders


def _owners(paths: list[Path], ids: list[str]) -> dict[int, list[str]]:
    """{shard: [ids it holds]} for passage ids that must all exist (else InputError, nothing changed)."""
    holders = _holders(paths, ids)
    unknown = [pid for pid in ids if pid not in holders]
    if unknown:
        raise InputError(f"the sharded knowledge base has no passage {_describe_ids(unknown)}; nothing was changed")
    owners: dict[int, list[str]] = {}
    for pid in ids:
        owners.setdefault(holders[pid], []).append(pid)
    return owners


def add_sharded(path, passages, encode_passages: EncodePassages, batch_size: int = 256, progress: bool = False,
                on_error: str | RecordErrors = "stop", description: str | None = None,
                source_label: str | None = None) -> int:
    """Add passages to the shard with the fewest rows as a new sharded version; return its number.
    An id already in another shard is a malformed record for ``on_error`` (stop, or skip it)."""
    path = Path(path)
    errors = on_error if isinstance(on_error, RecordErrors) else RecordErrors(on_error)
    items = list(passages)
    with _sharded_edit(path, "add") as (manifest, paths, versions):
        ids = [(item.passage if isinstance(item, SourcePassage) else item).id for item in items]
        taken = _holders(paths, ids)
        for item, pid in zip(items, ids):
            if pid in taken:
                where = item.where if isinstance(item, SourcePassage) else f"passage {pid!r}"
                errors(where, f"duplicate passage id {pid!r} (already in shard {taken[pid]})")
        items = [item for item, pid in zip(items, ids) if pid not in taken]
        rows = [read_manifest(p)["num_rows"] for p in paths]
        shard = rows.index(min(rows))
        versions[shard] = add_passages(paths[shard], items, encode_passages, batch_size, progress, errors, description,
                                       source_label)
        text = description or read_manifest(paths[shard])["versions"][-1]["description"] + f" (shard {shard})"
        return _commit(path, manifest, paths, versions, text)


def update_sharded(path, updates, encode_passages: EncodePassages, description: str | None = None) -> int:
    """Change passages' text (and title) in the shards holding them, as one new sharded version."""
    path = Path(path)
    items = list(updates)
    if not items:
        raise InputError("no updates given")
    ids = [_normalise_update(item, n)[1] for n, item in enumerate(items, start=1)]
    with _sharded_edit(path, "update") as (manifest, paths, versions):
        owners = _owners(paths, ids)
        for shard, owned in sorted(owners.items()):
            mine = [item for item, pid in zip(items, ids) if pid in set(owned)]
            versions[shard] = update_passages(paths[shard], mine, encode_passages, description=description)
        text = description or f"update {len(ids)} passage{'s' * (len(ids) != 1)}: {_describe_ids(ids, 3)}"
        return _commit(path, manifest, paths, versions, text)


def delete_sharded(path, passage_ids: Iterable[str], description: str | None = None) -> int:
    """Delete passages by id in the shards holding them, as one new sharded version."""
    path = Path(path)
    ids = list(dict.fromkeys(str(i) for i in passage_ids))
    if not ids:
        raise InputError("no passage ids to delete")
    with _sharded_edit(path, "delete") as (manifest, paths, versions):
        for shard, owned in sorted(_owners(paths, ids).items()):
            versions[shard] = delete_passages(paths[shard], owned, description)
        text = description or f"delete {len(ids)} passage{'s' * (len(ids) != 1)}: {_describe_ids(ids, 3)}"
        return _commit(path, manifest, paths, versions, text)


def use_sharded_version(path, version: int) -> dict[str, Any]:
    """Make ``version`` current in ``shards.json`` (the shards' own current versions are not changed:
    readers open each shard at the version the sharded version names)."""
    path = Path(path)
    read_shards_manifest(path)
    with exclusive_lock(path / LOCK_FILE, f"sharded knowledge base {path}", KnowledgeBaseError):
        manifest = read_shards_manifest(path)
        entry = version_entry(path, manifest, version)
        manifest = {**manifest, "current_version": entry["version"], "num_passages": entry["num_passages"],
                    "updated_at": _now()}
        write_shards_manifest(path, manifest)
    return manifest

