"""The knowledge-base folder as a whole: who may change it (a lock), what a build may replace, and the
leftovers of a killed build or edit (the temporary names of :mod:`openbook.atomic`), removed by the next
one that takes the lock."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from openbook.atomic import exclusive_lock, temp_name_of
from openbook.errors import InputError, KnowledgeBaseError
from openbook.index.bm25 import BM25_CACHE_DIR
from openbook.index.kb.layout import (
    EMBEDDINGS_FILE,
    INDEX_FILE_PATTERN,
    LOCK_FILE,
    MANIFEST_FILE,
    PARTIAL_SUFFIX,
    STORE_FILE,
)

_STORE_SIDE_FILES = tuple(STORE_FILE + suffix for suffix in ("-journal", "-wal", "-shm"))
_SHOWN_NAMES = 5
FRESH_SECONDS = 60  # a leftover beside a knowledge base younger than this may be a build starting up


def partial_dir(out_dir: str | os.PathLike) -> Path:
    """Where a resumable build of ``out_dir`` keeps its state: ``<out_dir>.partial``."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + PARTIAL_SUFFIX)


def _locked(lock_path: Path, what: str):
    """:func:`openbook.atomic.exclusive_lock` with the knowledge base's error (KnowledgeBaseError)."""
    return exclusive_lock(lock_path, what, KnowledgeBaseError)


def _in_use(entry: Path) -> bool:
    """Whether ``entry`` (a leftover beside a knowledge base) may belong to a live openbook process: its
    lock is held or, without a lock, it changed within the last :data:`FRESH_SECONDS`."""
    lock = entry / LOCK_FILE
    if entry.is_dir() and lock.is_file():
        try:
            with _locked(lock, str(entry)):
                return False
        except (KnowledgeBaseError, OSError):
            return True
    try:
        return time.time() - entry.lstat().st_mtime < FRESH_SECONDS
    except OSError:
        return False


def is_own_entry(name: str) -> bool:
    """Whether ``name`` in a knowledge-base folder is one of its own files (or a temporary copy of one)."""
    base = temp_name_of(name) or name
    return (base in (MANIFEST_FILE, STORE_FILE, EMBEDDINGS_FILE, LOCK_FILE, BM25_CACHE_DIR, *_STORE_SIDE_FILES)
            or INDEX_FILE_PATTERN.fullmatch(base) is not None)


def _shown(names: list[str]) -> str:
    extra = len(names) - _SHOWN_NAMES
    return ", ".join(names[:_SHOWN_NAMES]) + (f" and {extra} more" if extra > 0 else "")


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """``out_dir`` as a Path, or InputError if a build cannot publish there: the current directory or one
    containing it (a build writes beside the folder and renames its result into place), a symbolic link
    (the rename would replace the link, not fill what it points to) or a path through a file or a dangling link."""
    out = Path(out_dir)
    if out.is_symlink():
        state = "to a missing target" if not out.exists() else "to an existing folder"
        raise InputError(f"cannot build a knowledge base at {str(out_dir)!r}: it is a symbolic link {state} "
                         f"({os.readlink(out)}); give the real folder's path")
    parent = next((p for p in out.parents if os.path.lexists(p)), None)
    if parent is not None and not parent.is_dir():
        raise InputError(f"cannot build a knowledge base at {str(out_dir)!r}: {parent} is not a directory"
                         + (" (a dangling symbolic link)" if parent.is_symlink() else ""))
    cwd = Path.cwd().resolve()
    resolved = out.resolve()
    if out.name in ("", ".", "..") or resolved == cwd or resolved in cwd.parents:
        raise InputError(
            f"cannot build a knowledge base at {str(out_dir)!r}: it is the current directory or contains it "
            f"(a build is written beside its folder and renamed into place); give a new folder, e.g. --out kb"
        )
    return out


def check_replaceable(out_dir: Path, replace: bool) -> bool:
    """Whether ``out_dir`` holds a knowledge base that a build will replace (False: nothing there yet).

    KnowledgeBaseError if a build must not write there: not a directory; a non-empty folder that is not
    a knowledge base; a knowledge base that also holds other files (named); a knowledge base without
    ``replace`` (its version history would be lost).
    """
    if not out_dir.exists():
        return False
    if not out_dir.is_dir():
        raise KnowledgeBaseError(f"cannot build knowledge base {out_dir}: it exists and is not a directory")
    names = sorted(entry.name for entry in out_dir.iterdir())
    if not names:
        return False
    if MANIFEST_FILE not in names:
        raise KnowledgeBaseError(
            f"refusing to replace {out_dir}: it exists and is not a knowledge base (no {MANIFEST_FILE}; it "
            f"holds {_shown(names)}); choose another output directory or remove it"
        )
    foreign = [name for name in names if not is_own_entry(name)]
    if foreign:
        raise KnowledgeBaseError(
            f"refusing to replace knowledge base {out_dir}: it also holds files that are not the knowledge "
            f"base's ({_shown(foreign)}); move them out first or choose another output directory"
        )
    if not replace:
        raise KnowledgeBaseError(
            f"{out_dir} already holds a knowledge base: replace it (losing its versions) with "
            f"`openbook kb build --force` (KnowledgeBase.build(..., replace=True)), or change it with "
            f"`openbook kb add`, `update` or `delete`"
        )
    return True


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        entry.unlink(missing_ok=True)


def clean_leftovers(path: Path) -> list[Path]:
    """Remove what killed builds and edits of the knowledge base at ``path`` left behind; return it.

    Call it holding the knowledge base's lock (or, before it exists, the build's). Removed: temporary
    copies of the knowledge base's own files inside it (``.manifest.json.tmp-*``, ``.index.v3.faiss.tmp-*``)
    and, beside it, ``.<name>.tmp-*``, ``.<name>.building-*`` and ``.<name>.old-*`` unless a live
    process may own them (see :func:`_in_use`). (The BM25 cache's own temporary folders are left to it: readers write it.)
    """
    removed = []
    if path.is_dir():
        for entry in path.iterdir():
            base = temp_name_of(entry.name)
            if base is not None and base != BM25_CACHE_DIR and is_own_entry(base):
                removed.append(entry)
    parent = path.parent
    if path.name and parent.is_dir():
        for entry in parent.iterdir():
            if temp_name_of(entry.name) == path.name and not _in_use(entry):
                removed.append(entry)
    for entry in removed:
        _remove(entry)
    return removed
