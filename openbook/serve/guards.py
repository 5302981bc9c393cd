"""What guards the HTTP server against a client that sends too much, too slowly, or is cut off by a shutdown.

- :class:`BodyLimit` (ASGI middleware): a request body above ``max_bytes`` is answered 413 before it is read: at
  once when its ``Content-Length`` says so, otherwise (chunked) as soon as the bytes received pass the limit, so a
  huge body never sits in memory. The body is read before the app runs and handed to it whole.
- :class:`AnswerCancelled` (ASGI middleware): a request still running when uvicorn gives up on the graceful
  shutdown is answered a JSON 503 with ``Retry-After`` instead of uvicorn's plain-text 500.
- :func:`http_protocol`: uvicorn's HTTP protocol (httptools, else h11) with a deadline for a request's headers: a
  connection that opens, or starts a request, and has not finished its headers ``header_timeout_s`` later is closed
  (uvicorn's keep-alive timeout only covers the wait between requests).
- :class:`DrainingServer`: uvicorn's server telling the app (:meth:`~openbook.serve.app.Server.drain`) when a
  shutdown starts, so that requests still in flight after the drain get a JSON 503 and the process can exit.
- :func:`bind`: the listening socket, bound before anything is announced (a taken port is one error line).
"""

from __future__ import annotations

import asyncio
import socket

import uvicorn

from openbook.errors import InputError
from openbook.serve.errors import error_json

RETRY_AFTER_S = 1


async def _answer(send, status: int, message: str, headers: dict | None = None) -> None:
    body = error_json(message).encode()
    extra = [(name.lower().encode(), str(value).encode()) for name, value in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *extra]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class BodyLimit:
    """ASGI middleware: 413 for a request body above ``max_bytes`` (module docs)."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_bytes:
            return await self._too_large(send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away before its body was in
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await self._too_large(send)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, handed = b"".join(chunks), False
        del chunks

        async def replay():
            nonlocal handed
            if handed:
                return await receive()  # what comes next: the client's disconnect
            handed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, send) -> None:
        await _answer(send, 413, f"the request body is larger than the server's limit of {self.max_bytes} bytes "
                      "(--max-body-bytes)")


class AnswerCancelled:
    """ASGI middleware: a JSON 503 with ``Retry-After`` for a request cancelled by the server's shutdown."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def sending(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            if not started:
                await _answer(send, 503, "the server is shutting down: try again shortly",
                              {"Retry-After": RETRY_AFTER_S})
            raise


class _HeaderDeadline:
    """Mixin of uvicorn's HTTP protocols: close a connection whose request headers are not complete in time."""

    header_timeout_s: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = asyncio.get_running_loop().call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)


def http_protocol(header_timeout_s: float, implementation: str = "auto") -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class (``auto``: httptools if installed, else h11) with a ``header_timeout_s``
    deadline."""
    HttpToolsProtocol = None  # noqa: N806
    if implementation != "h11":
        try:
            from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
        except ImportError:
            pass
    if HttpToolsProtocol is not None:
        class Guarded(_HeaderDeadline, HttpToolsProtocol):
            def on_message_begin(self) -> None:
                super().on_message_begin()
                self._arm()

            def on_headers_complete(self) -> None:
                self._disarm()
                super().on_headers_complete()
    else:
        from uvicorn.protocols.http import h11_impl

        idle = h11_impl.h11.IDLE  # h11 as uvicorn imports it

        class Guarded(_HeaderDeadline, h11_impl.H11Protocol):
            def handle_events(self) -> None:
                super().handle_events()
                if self.conn.their_state is idle:  # waiting for a request's headers
                    if self.conn.trailing_data[0]:
                        self._arm()
                else:
                    self._disarm()

    Guarded.header_timeout_s = header_timeout_s
    return Guarded


class DrainingServer(uvicorn.Server):
    """uvicorn's server; when it starts shutting down, the app's requests get ``drain_s`` seconds to finish
    (:meth:`openbook.serve.app.Server.drain`), and uvicorn cancels what is left a little later."""

    def __init__(self, config: uvicorn.Config, app_server, drain_s: float):
        super().__init__(config)
        self.app_server, self.drain_s = app_server, drain_s

    async def shutdown(self, sockets=None) -> None:
        self.app_server.drain(self.drain_s)
        await super().shutdown(sockets)


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` (as uvicorn binds it), or :class:`InputError` if it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise InputError(f"--port {port}: cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.set_inheritable(True)
    return sock
