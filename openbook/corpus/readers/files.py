"""Opening corpus files: plain, gzip- or bzip2-compressed (detected by magic bytes), read line by line.

Unreadable or corrupt files raise :class:`~openbook.errors.InputError` naming ``path:line``.
"""

import bz2
import gzip
import hashlib
import zlib
from collections.abc import Iterator
from pathlib import Path

from openbook.errors import InputError

_GZIP_MAGIC = b"\x1f\x8b"
_BZ2_MAGIC = b"BZh"
_HASH_BLOCK = 1 << 20


def _open_binary(path: Path, what: str = "a JSON Lines file"):
    """Open ``path`` for reading bytes, transparently decompressing gzip or bzip2 (detected by magic bytes)."""
    compression = _compression(path, what)
    if compression == "gzip":
        return gzip.open(path, "rb")
    if compression == "bz2":
        return bz2.open(path, "rb")
    return open(path, "rb")


def _compression(path: Path, what: str = "a JSON Lines file") -> str | None:
    """``"gzip"`` or ``"bz2"`` if the file starts with that format's magic bytes, else None."""
    try:
        with open(path, "rb") as raw:
            magic = raw.read(3)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected {what}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if magic.startswith(_GZIP_MAGIC):
        return "gzip"
    if magic == _BZ2_MAGIC:
        return "bz2"
    return None


def _numbered_lines(path: Path, what: str = "a JSON Lines file") -> Iterator[tuple[int, str | None]]:
    """Yield ``(line_number, text)`` for every line (1-based); ``text`` is None for a line that is not UTF-8.

    Unreadable or corrupt files raise InputError naming ``path:line``.
    """
    lineno = 0
    compression = _compression(path, what)
    try:
        with _open_binary(path, what) as lines:
            for lineno, raw in enumerate(lines, start=1):
                try:
                    yield lineno, raw.decode("utf-8")
                except UnicodeDecodeError:
                    yield lineno, None
    except (EOFError, zlib.error, OSError) as exc:
        # gzip and bz2 report bad data as an OSError without an errno (BadGzipFile, "Invalid data stream")
        if compression and (not isinstance(exc, OSError) or exc.errno is None):
            raise InputError(f"{path}:{lineno + 1}: corrupt or truncated {compression} data ({exc})") from None
        raise InputError(f"{path}:{lineno + 1}: cannot read: {exc.strerror or exc}") from None


def _strip_gz(name: str) -> str:
    return name[:-3] if name.lower().endswith(".gz") else name


def sha256_file(path: Path, start: int = 0, stop: int | None = None) -> str:
    """Hex sha256 of a file (or of its bytes ``start:stop``), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        handle.seek(start)
        remaining = None if stop is None else stop - start
        while remaining is None or remaining > 0:
            block = handle.read(_HASH_BLOCK if remaining is None else min(_HASH_BLOCK, remaining))
            if not block:
                break
            digest.update(block)
            if remaining is not None:
                remaining -= len(block)
    return digest.hexdigest()
