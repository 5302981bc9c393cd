"""The knowledge base a server answers from: one current version, swapped atomically, old ones released
when their last request finishes.

A :class:`Book` is one loaded :class:`~openbook.index.KnowledgeBase` at one version. The model worker
takes a lease on the current book for each batch (:meth:`Books.lease`), so a batch runs wholly on one
version however many swaps or edits happen meanwhile; :meth:`Books.install` makes a new book current,
and the previous one is closed as soon as no lease holds it (at once if none does). Edits never change a
loaded book: they write a new version on disk (the knowledge base's own crash-safe edits) and install it
as a new book. Swap targets are folders directly under the configured root (:meth:`Books.resolve`),
never a path outside it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from openbook.errors import InputError, KnowledgeBaseError
from openbook.index import KnowledgeBase, is_sharded, load_knowledge_base
from openbook.index.kb import MANIFEST_FILE


@dataclass(eq=False)
class Book:
    """One loaded knowledge-base version; ``refs`` counts the batches using it."""

    name: str
    kb: KnowledgeBase
    refs: int = 0
    retired: bool = False
    closed: bool = False
    _closed_event: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def version(self) -> int:
        return self.kb.version

    def ref(self) -> dict:
        return {"name": self.name, "version": self.kb.version}


class SwapTargetError(InputError):
    """A swap name that is not a knowledge base under the root (the API answers 404 or 422)."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


class Books:
    """The current :class:`Book` and the retired ones still in use (module docs)."""

    def __init__(self, kb: KnowledgeBase, name: str | None = None, root: str | Path | None = None):
        self._lock = threading.Lock()
        self._current = Book(name or Path(kb.path).name, kb)
        self._root = Path(root).resolve() if root is not None else None
        self.swaps = 0

    @property
    def current(self) -> Book:
        return self._current

    @property
    def root(self) -> Path | None:
        return self._root

    def acquire(self) -> Book:
        with self._lock:
            book = self._current
            book.refs += 1
            return book

    def release(self, book: Book) -> None:
        with self._lock:
            book.refs -= 1
            if book.refs < 0:
                raise RuntimeError(f"knowledge base {book.name} v{book.version} released more often than taken")
            close = book.retired and book.refs == 0 and not book.closed
            if close:
                book.closed = True
        if close:
            self._close(book)

    @contextmanager
    def lease(self) -> Iterator[Book]:
        """The current book, held (not closed by a swap) until the block ends."""
        book = self.acquire()
        try:
            yield book
        finally:
            self.release(book)

    def install(self, kb: KnowledgeBase, name: str) -> Book:
        """Make ``kb`` (named ``name``) current; the previous book closes when its last lease ends."""
        new = Book(name, kb)
        with self._lock:
            old, self._current = self._current, new
            old.retired = True
            close = old.refs == 0 and not old.closed and old.kb is not kb
            if close:
                old.closed = True
            self.swaps += 1
        if close:
            self._close(old)
        return new

    @staticmethod
    def _close(book: Book) -> None:
        book.kb.close()
        book._closed_event.set()

    # -- swap targets -------------------------------------------------------------------------------

    def resolve(self, name: str) -> Path:
        """The knowledge-base folder called ``name`` directly under the root, or :class:`SwapTargetError`."""
        if self._root is None:
            raise SwapTargetError("this server has no --kb-root: it cannot swap knowledge bases", status=403)
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
            raise SwapTargetError(f"name must be a folder name under the knowledge-base root, not {name!r}")
        path = (self._root / name).resolve()
        if path.parent != self._root:  # a symlink leading elsewhere
            raise SwapTargetError(f"{name!r} is not under the knowledge-base root")
        if not ((path / MANIFEST_FILE).is_file() or is_sharded(path)):
            raise SwapTargetError(f"no knowledge base called {name!r} under the knowledge-base root", status=404)
        return path

    def swappable(self) -> list[str]:
        """Names of the knowledge bases directly under the root (none without a root)."""
        if self._root is None or not self._root.is_dir():
            return []
        names = []
        for child in sorted(self._root.iterdir()):
            try:
                if ((child / MANIFEST_FILE).is_file() or is_sharded(child)) and child.resolve().parent == self._root:
                    names.append(child.name)
            except OSError:
                continue
        return names

    def load(self, name: str, version: int | None, expected_encoder: dict | None) -> KnowledgeBase:
        """Open knowledge base ``name`` under the root at ``version`` (default: its current one). Another version
        of the folder served now is opened through it (``at_version``: a sharded one shares its shards)."""
        path = self.resolve(name)
        current = self._current.kb
        try:
            if path == Path(current.path).resolve():
                return current.at_version(version)
            return load_knowledge_base(path, expected_encoder=expected_encoder, version=version)
        except KnowledgeBaseError as error:
            raise SwapTargetError(str(error)) from error


def passage_encoder(kb: KnowledgeBase):
    """The document encoder d(z) ``kb`` was built with (loaded by name, checked against the manifest), as
    ``openbook kb add`` uses it: a RAG trains q(x), never d(z), so edits must not encode with q(x)."""
    from openbook.index.kb import check_encoder_matches
    from openbook.models import load_encoder

    built_with = kb.encoder_info
    encoder = load_encoder(built_with.get("name") or "default")
    check_encoder_matches(kb.path, built_with, encoder.info())
    return encoder
