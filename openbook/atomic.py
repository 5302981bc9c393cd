"""Atomic file and directory replacement, so an interrupted write never leaves a half-written result.

Everything is first written to a temporary name in the destination's own directory (same file system)
and then renamed into place with :func:`os.replace`, which is atomic on POSIX and Windows.
"""

import contextlib
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from openbook.errors import OpenbookError


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a written file (or, on POSIX, a directory entry) to disk; best effort for directories."""
    path = Path(path)
    if path.is_dir() and os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync directories; the rename is still atomic
    finally:
        os.close(fd)


_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?P<purpose>[a-z]+)-[0-9a-f]{12}")


def _sibling_name(path: Path, purpose: str) -> Path:
    """A fresh hidden name ``.<name>.<purpose>-<random>`` in the directory of ``path``."""
    return path.with_name(f".{path.name}.{purpose}-{uuid.uuid4().hex[:12]}")


def temp_name_of(name: str) -> str | None:
    """The name that a temporary name made here stands in for (``.x.tmp-1a2b3c4d5e6f`` -> ``x``), else None.

    A process killed at the wrong moment leaves such names behind (``.<name>.tmp-*`` files of
    :func:`atomic_output`, ``.<name>.building-*`` and ``.<name>.old-*`` directories); whoever owns
    ``<name>`` can recognise and remove them.
    """
    match = _TEMP_NAME.fullmatch(name)
    return match.group("name") if match else None


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a new empty temporary file next to ``path``; on success it is fsynced and renamed onto ``path``.

    If the body raises, the temporary file is deleted and ``path`` is left untouched. The file gets the
    usual permissions (0o666 minus the umask), not the private ones of :func:`tempfile.mkstemp`.
    """
    path = Path(path)
    tmp = _sibling_name(path, "tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def make_temp_dir_next_to(path: str | os.PathLike, purpose: str = "building") -> Path:
    """Create and return an empty hidden directory ``.<name>.<purpose>-<random>`` beside ``path``.

    It gets the usual permissions (0o777 minus the umask), so it can be renamed into place as is.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling_name(path, purpose)
    tmp.mkdir(mode=0o777)
    return tmp


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, purpose: str = "building") -> Iterator[Path]:
    """Yield a new empty folder beside ``path`` to fill; on success its files are fsynced and it replaces
    ``path`` (:func:`replace_dir`). If the body raises, the folder is removed and ``path`` is left as it was."""
    path = Path(path)
    tmp = make_temp_dir_next_to(path, purpose)
    try:
        yield tmp
        for entry in tmp.rglob("*"):
            if entry.is_file():
                fsync_path(entry)
        replace_dir(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replace_dir(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Move the complete directory ``src`` to ``dst``, replacing any existing ``dst``.

    An existing ``dst`` is first renamed aside and deleted only once ``src`` is in place; if moving
    ``src`` fails, the old ``dst`` is restored. (Between the two renames ``dst`` briefly does not
    exist, but it is never half-written.)
    """
    src, dst = Path(src), Path(dst)
    if not dst.exists():
        os.replace(src, dst)
    else:
        backup = _sibling_name(dst, "old")
        os.replace(dst, backup)
        try:
            os.replace(src, dst)
        except BaseException:
            os.replace(backup, dst)
            raise
        shutil.rmtree(backup, ignore_errors=True)
    fsync_path(dst.parent)


@contextlib.contextmanager
def exclusive_lock(lock_path: str | os.PathLike, what: str, error: type[OpenbookError] = OpenbookError) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``lock_path`` (POSIX ``flock``); ``error`` if another process holds it.

    Also refused: a lock file that was replaced while it was being taken (e.g. a build replacing the
    whole folder), since its lock no longer guards anything. The lock ends with the process, so a killed
    holder never leaves a stale lock behind.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no locking
        yield
        return
    lock_path = Path(lock_path)
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise error(f"{what} is busy: another openbook process is changing it") from None
        try:
            current = os.path.samestat(os.fstat(handle.fileno()), os.stat(lock_path))
        except OSError:
            current = False
        if not current:
            raise error(f"{what} was replaced by another openbook process; try again")
        yield


def remove_leftovers_beside(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary siblings of ``path`` that a killed process left (``.<name>.tmp-*``,
    ``.<name>.building-*``, ``.<name>.old-*``); return them. Call it only while holding the lock that
    guards ``path``, so that no live writer of ``path`` can own them."""
    path = Path(path)
    removed = []
    if path.parent.is_dir():
        for entry in path.parent.iterdir():
            if temp_name_of(entry.name) == path.name:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                removed.append(entry)
    return removed
