"""The HTTP server's guards (openbook/serve/guards.py): a body above --max-body-bytes is a 413 before it is read,
a socket that never finishes its headers is closed, /docs works offline; and the drain: requests still waiting when
it runs out get a JSON 503 with Retry-After, an admin edit already committing is answered 200, and an edit retried
with the same Idempotency-Key is not applied twice."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time

import pytest
import uvicorn

from openbook.serve.guards import BodyLimit, http_protocol
from serve_helpers import ADMIN, PASSAGES, client, config, create_app, free_port, run, tiny_rag


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-guards")
    rag, encoder = tiny_rag(root)
    return root, rag, encoder


# -- request bodies ---------------------------------------------------------------------------------


def _drive(middleware, headers: list, chunks: int, chunk_bytes: int):
    """Run ``middleware`` on a request whose body comes in ``chunks`` pieces; returns (status, body, pieces read,
    whether the app ran)."""
    read, sent, ran = [0], [], []

    async def receive():
        read[0] += 1
        more = read[0] < chunks
        return {"type": "http.request", "body": b"x" * chunk_bytes, "more_body": more}

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        ran.append(True)

    asyncio.run(middleware.__class__(app, middleware.max_bytes)({"type": "http", "headers": headers}, receive, send))
    status = sent[0]["status"] if sent else None
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return status, body, read[0], bool(ran)


def test_a_body_above_the_limit_is_refused_before_it_is_read():
    limit = BodyLimit(None, max_bytes=1 << 20)
    # declared: 200 MB in Content-Length is refused without reading a byte
    status, body, read, ran = _drive(limit, [(b"content-length", str(200 << 20).encode())], 3200, 64 << 10)
    assert (status, read, ran) == (413, 0, False) and b"--max-body-bytes" in body
    # chunked (no Content-Length): reading stops at the first piece past the limit, not at the end of 200 MB
    status, body, read, ran = _drive(limit, [], 3200, 64 << 10)
    assert (status, ran) == (413, False) and read == (1 << 20) // (64 << 10) + 1
    # within the limit the app runs
    status, body, read, ran = _drive(limit, [], 4, 1000)
    assert ran and read == 4


def test_the_app_answers_413_json_and_takes_bodies_within_the_limit(tiny):
    root, rag, encoder = tiny

    async def go():
        async with client(create_app(config(root, encoder, max_body_bytes=2000), rag=rag)) as http:
            big = await http.post("/v1/retrieve", content=b'{"question": "' + b"a" * 5000 + b'"}',
                                  headers={"Content-Type": "application/json"})
            small = await http.post("/v1/retrieve", json={"question": "capital of france", "k": 2})
            return big, small

    big, small = run(go())
    assert big.status_code == 413 and big.json()["error"]["message"].startswith("the request body is larger")
    assert small.status_code == 200, small.text


# -- a real socket ----------------------------------------------------------------------------------


class _Uvicorn:
    """A real uvicorn server of ``app`` in a thread, with the header deadline and keep-alive timeout of serve."""

    def __init__(self, app, header_timeout_s: float, keep_alive_s: float, implementation: str = "auto"):
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, port=self.port, log_config=None, log_level="warning",
                                                    timeout_keep_alive=keep_alive_s, lifespan="off",
                                                    http=http_protocol(header_timeout_s, implementation)))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(30)

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server closes ``sock`` (read gives b"" or a reset); False if 30 s pass without it."""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("implementation", ["auto", "h11"])
def test_sockets_that_never_finish_their_headers_are_closed(implementation):
    app = create_app()  # no model: /healthz answers all the same
    with _Uvicorn(app, header_timeout_s=0.5, keep_alive_s=0.5, implementation=implementation) as server:
        with server.connect() as half:  # half a header, then nothing
            half.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            assert _closed_by_server(half)
        with server.connect() as silent:  # connects and never sends a byte
            assert _closed_by_server(silent)
        with server.connect() as kept:  # a full request, then half of the next one on the same connection
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert kept.recv(65536).startswith(b"HTTP/1.1 200")
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHo")
            assert _closed_by_server(kept)
        with server.connect() as idle:  # a full request, then idle: the keep-alive timeout
            idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _closed_by_server(idle)


def test_a_huge_declared_body_gets_413_on_a_real_socket_without_being_sent():
    app = create_app()  # no model: the 413 comes first
    with _Uvicorn(app, header_timeout_s=5, keep_alive_s=5) as server, server.connect() as sock:
        sock.sendall(b"POST /v1/retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 209715200\r\n\r\n{\"question\": \"")
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 413")


# -- /docs offline ----------------------------------------------------------------------------------


def test_docs_load_swagger_ui_from_the_server_not_a_cdn():
    async def go():
        async with client(create_app()) as http:
            pages = {path: await http.get(path) for path in ("/docs", "/redoc")}
            urls = {path: re.findall(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""", r.text)
                    for path, r in pages.items()}
            assets = {url: (await http.get(url)).status_code for found in urls.values() for url in found
                      if url.startswith("/docs-assets/")}
            return pages, urls, assets

    pages, urls, assets = run(go())
    for path, r in pages.items():
        assert r.status_code == 200
        assert not re.search(r"https?://", r.text), f"{path} refers to an outside address"
    assert "/docs-assets/swagger-ui-bundle.js" in urls["/docs"] and "/docs-assets/swagger-ui.css" in urls["/docs"]
    assert "/docs-assets/redoc.standalone.js" in urls["/redoc"]
    assert assets and set(assets.values()) == {200}, assets


# -- the drain and admin edits ----------------------------------------------------------------------


class _SlowEncoder:
    """d(z) for admin edits that holds its first call until ``release`` is set (``started`` says it began)."""

    def __init__(self, encoder):
        self.encoder, self.started, self.release = encoder, threading.Event(), threading.Event()

    def encode_passages(self, batch):
        self.started.set()
        assert self.release.wait(60)
        return self.encoder.encode_passages(batch)

    def info(self):
        return self.encoder.info()

    def __getattr__(self, name):
        return getattr(self.encoder, name)


def test_after_the_drain_waiting_requests_get_503_and_a_committing_edit_gets_200(tmp_path):
    rag, encoder = tiny_rag(tmp_path)
    slow = _SlowEncoder(encoder)
    app = create_app(config(tmp_path, slow, max_wait_ms=1.0), rag=rag)

    async def go():
        async with client(app) as http:
            add = {"passages": [{"id": "n1", "title": "Music", "text": "music of the ocean"}]}
            committing = asyncio.ensure_future(http.post("/v1/kb/passages", json=add, headers=ADMIN))
            while not slow.started.is_set():
                await asyncio.sleep(0.01)
            # the worker is committing the edit: an ask waits behind it, a second edit for the admin lock
            asking = asyncio.ensure_future(http.post("/v1/ask", json={"question": "capital of france", "k": 2}))
            later = {"passages": [{"id": "n2", "title": "War", "text": "the war of the year"}]}
            queued = asyncio.ensure_future(http.post("/v1/kb/passages", json=later, headers=ADMIN))
            await asyncio.sleep(0.2)
            app.state.server.drain(0.1)
            asked = await asking  # the drain ran out while it waited
            slow.release.set()
            added, refused = await committing, await queued
            kb = (await http.get("/v1/kb")).json()
            return asked, added, refused, kb

    asked, added, refused, kb = run(go())
    assert asked.status_code == 503 and asked.headers["retry-after"] == "1", asked.text
    assert asked.json()["error"]["message"].startswith("the server is shutting down")
    assert added.status_code == 200 and added.json()["kb"]["version"] == 2, added.text
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1", refused.text
    assert kb["version"] == kb["latest_version"] == 2  # the refused edit was not committed


def test_an_edit_retried_with_its_idempotency_key_is_not_applied_twice(tmp_path):
    from openbook.index import load_knowledge_base

    rag, encoder = tiny_rag(tmp_path)
    add = {"passages": [{"title": "Music", "text": "music of the ocean"}]}  # no id: the server makes one

    async def go(headers):
        async with client(create_app(config(tmp_path, encoder), rag=rag)) as http:
            answers = [await http.post("/v1/kb/passages", json=add, headers={**ADMIN, **headers})]
            answers.append(await http.post("/v1/kb/passages", json=add, headers={**ADMIN, **headers}))
            other = {"passages": [{"title": "War", "text": "the war"}]}
            answers.append(await http.post("/v1/kb/passages", json=other, headers={**ADMIN, **headers}))
            answers.append(await http.post("/v1/kb/passages", json=add, headers={**ADMIN, "Idempotency-Key": "a b"}))
            return answers, (await http.get("/v1/kb")).json()

    (first, retry, misused, bad), kb = run(go({"Idempotency-Key": "edit-1"}))
    assert first.json() == {"kb": {"name": "main", "version": 2}, "changed": 1, "replayed": False}, first.text
    assert retry.json() == {"kb": {"name": "main", "version": 2}, "changed": 1, "replayed": True}, retry.text
    assert misused.status_code == 422 and misused.json()["error"]["field"] == "Idempotency-Key"
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "Idempotency-Key"
    assert kb["latest_version"] == 2 and kb["num_passages"] == len(PASSAGES) + 1
    # a restarted server knows the key: it is written with the commit
    rag.kb = load_knowledge_base(tmp_path / "kbs" / "main")
    (again, *_), kb = run(go({"Idempotency-Key": "edit-1"}))
    assert again.json()["replayed"] is True and kb["latest_version"] == 2
