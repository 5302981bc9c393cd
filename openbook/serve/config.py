"""The server's settings, :class:`ServeConfig`: ``openbook serve``'s flags take their defaults from here.

A module of its own, light to import (no FastAPI, no torch), so that the command line can build its parser from
these defaults without loading the server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openbook.serve.worker import Host


@dataclass
class ServeConfig:
    """The server's settings (``openbook serve``'s flags). ``load`` builds the model when no ``rag`` is
    given to :func:`create_app`; ``passage_encoder`` (d(z), for admin edits) defaults to the encoder the
    knowledge base was built with, loaded on the first edit. ``read_only``, if set, is why every admin write
    answers 409 (several Ray Serve replicas, :mod:`openbook.serve.ray_serve`)."""

    kb_root: str | None = None
    admin_token: str | None = None
    max_batch_size: int = 8  # serve_load runs 13-14 (rounds): 16 gained 1.42x to 8's 1.40x; runs 10, 12: 16 and 32 no more
    max_wait_ms: float = 10.0
    max_queue: int = 64
    timeout_s: float = 60.0
    max_question_chars: int = 1000
    max_body_bytes: int = 1 << 20  # a request body above this is answered 413 before it is read
    cors_origins: list[str] = field(default_factory=list)
    kb_name: str | None = None
    load: Callable[[], Any] | None = field(default=None, repr=False)
    passage_encoder: Any = field(default=None, repr=False)
    read_only: str | None = None
    host: Host | None = field(default=None, repr=False)  # where the model loads and computes (worker.ModelThread)
