"""The counts a knowledge base's manifest records, checked against its passage store on load (and so by
``openbook kb info``): ``num_rows`` and ``num_passages``, and each version's ``num_rows``,
``num_passages``, ``added`` and ``deleted``. An edited count would otherwise be reported as it stands
(``kb info``) while searches count from the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from openbook.errors import KnowledgeBaseError
from openbook.index.kb.layout import MANIFEST_FILE, REBUILD_HINT, STORE_FILE
from openbook.index.store import PassageStore


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_counts(path: Path, manifest: dict[str, Any], store: PassageStore) -> None:
    """KnowledgeBaseError naming the first count in ``manifest`` that the store (``path/passages.sqlite``)
    contradicts. Rows are appended in version order and deletions carry their version, so each version's
    counts follow from its row count and the deletions up to it (one indexed query)."""
    if store.num_rows() < manifest["num_rows"]:
        raise KnowledgeBaseError(f"{path / STORE_FILE} holds fewer rows than {MANIFEST_FILE} records "
                                 f"({manifest['num_rows']}); {REBUILD_HINT}")
    deletions = store.deletions()
    rows_before = deleted_so_far = 0
    for entry in manifest["versions"]:
        version, rows = entry["version"], entry.get("num_rows")
        deleted_so_far += deletions.get(version, 0)
        if not _whole(rows) or not rows_before <= rows <= manifest["num_rows"]:
            _mismatch(path, f"version {version}'s num_rows", rows, f"from {rows_before} to {manifest['num_rows']}")
        expected = {"added": rows - rows_before, "deleted": deletions.get(version, 0),
                    "num_passages": rows - deleted_so_far}
        for key, value in expected.items():
            if entry.get(key) != value or isinstance(entry.get(key), bool):
                _mismatch(path, f"version {version}'s {key}", entry.get(key), value)
        rows_before = rows
    if rows_before != manifest["num_rows"]:
        _mismatch(path, f"version {manifest['latest_version']}'s num_rows", rows_before, manifest["num_rows"])
    current = manifest["versions"][manifest["current_version"] - 1]["num_passages"]
    if manifest["num_passages"] != current:
        _mismatch(path, "num_passages", manifest["num_passages"], current)


def _mismatch(path: Path, what: str, recorded, expected) -> None:
    raise KnowledgeBaseError(
        f"{path / MANIFEST_FILE} records {what} = {recorded!r} but the knowledge base holds {expected} (from "
        f"{STORE_FILE}); the manifest was modified or is corrupt; {REBUILD_HINT}"
    )
