"""Dynamic batching in the model worker: concurrent requests share batches and get exactly the answers
they would get alone; a full queue is 503 with Retry-After; a request past its timeout is 504; requests
whose client has gone are dropped before any compute; the event loop never blocks on the model."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
import torch

from serve_helpers import QUESTIONS, client, config, create_app, run, tiny_rag
from tolerance import model_tolerance


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("batching")
    rag, encoder = tiny_rag(root)
    return root, rag, encoder


def _assert_same(got: dict, want, config, length: int) -> None:
    """An answer of the API equals ``rag.ask`` alone: text, tokens and passages exactly, probabilities
    within the rounding of a batched (padded) computation."""
    assert got["answer"] == want.answer and got["tokens"] == want.tokens and got["truncated"] == want.truncated
    assert [p["id"] for p in got["passages"]] == [p.id for p in want.passages]
    for name in ("score", "prob", "posterior"):
        expected = torch.tensor([getattr(p, name) for p in want.passages])
        actual = torch.tensor([p[name] for p in got["passages"]])
        torch.testing.assert_close(actual, expected, **model_tolerance(expected, config, length, scale=20.0))
    if want.token_posteriors is not None:
        expected = torch.tensor(want.token_posteriors)
        torch.testing.assert_close(torch.tensor(got["token_posteriors"]), expected,
                                   **model_tolerance(expected, config, length))


@pytest.mark.parametrize("model", ["rag-token", "rag-sequence"])
def test_concurrent_requests_are_batched_and_answer_as_alone(tiny, model):
    root, rag, encoder = tiny
    settings = {"k": 3, "max_new_tokens": 5, "model": model}
    alone = {}
    for q in QUESTIONS:  # the worker switches the model kind per batch; the reference must use the same kind
        previous, rag.model_type = rag.model_type, model
        try:
            alone[q] = rag.ask([q], k=3, num_beams=1, decoding="fast", max_new_tokens=5)[0]
        finally:
            rag.model_type = previous

    async def go():
        app = create_app(config(root, encoder, max_batch_size=4, max_wait_ms=300.0), rag=rag)
        async with client(app) as http:
            responses = await asyncio.gather(*[http.post("/v1/ask", json={"question": q, **settings})
                                               for q in QUESTIONS])
        return [r.json() for r in responses]

    bodies = run(go())
    sizes = [body["batch_size"] for body in bodies]
    assert max(sizes) > 1 and max(sizes) <= 4  # batched, never beyond --max-batch-size
    gen_config = rag.generator.model.config
    for q, body in zip(QUESTIONS, bodies):
        (answer,) = body["answers"]
        assert answer["question"] == q and answer["model"] == model
        _assert_same(answer, alone[q], gen_config, length=64)


def test_different_options_never_share_a_batch(tiny):
    root, rag, encoder = tiny

    async def go():
        app = create_app(config(root, encoder, max_batch_size=8, max_wait_ms=200.0), rag=rag)
        async with client(app) as http:
            requests = [{"question": q, "model": m, "max_new_tokens": 3}
                        for q in QUESTIONS[:3] for m in ("rag-token", "rag-sequence")]
            responses = await asyncio.gather(*[http.post("/v1/ask", json=body) for body in requests])
        return requests, [r.json() for r in responses]

    requests, bodies = run(go())
    for request, body in zip(requests, bodies):
        assert body["answers"][0]["model"] == request["model"]
        assert body["batch_size"] <= 3  # only the three requests of the same model can share


def _blocked_worker(app):
    """Occupy the model worker until the returned event is set."""
    release, started = threading.Event(), threading.Event()

    def block():
        started.set()
        release.wait(30)

    server = app.state.server
    job = server.submit("call", fn=block)
    assert started.wait(10)
    return release, job


def test_full_queue_is_503_with_retry_after_and_timeouts_are_504(tiny):
    root, rag, encoder = tiny

    async def go():
        app = create_app(config(root, encoder, max_queue=2, timeout_s=0.5, max_wait_ms=1.0), rag=rag)
        async with client(app) as http:
            release, _ = _blocked_worker(app)
            try:
                waiting = [asyncio.ensure_future(http.post("/v1/ask", json={"question": q})) for q in QUESTIONS[:2]]
                await asyncio.sleep(0.1)
                r = await http.post("/v1/ask", json={"question": "one too many"})
                assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
                assert "queue" in r.json()["error"]["message"]
                # the event loop is free while the worker is busy
                assert (await http.get("/healthz")).status_code == 200
                timed_out = await asyncio.gather(*waiting)
                assert [r.status_code for r in timed_out] == [504, 504]
                assert "timeout" in timed_out[0].json()["error"]["message"]
            finally:
                release.set()
            await asyncio.sleep(0.3)
            metrics = (await http.get("/metrics")).text
        return app, metrics

    app, metrics = run(go())
    assert "openbook_dropped_total 2.0" in metrics  # the timed-out requests were never computed
    assert app.state.server.worker.batches == 1  # only the blocking call ran


def _ask_scope(body: bytes) -> dict:
    """The ASGI scope of ``POST /v1/ask`` with a JSON ``body``."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": "/v1/ask", "raw_path": b"/v1/ask", "query_string": b"", "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 1234), "server": ("test", 80), "state": {}}


async def _ask_and_disconnect(app, question: str) -> list[dict]:
    """Call the ASGI app directly as a client that sends its request and hangs up at once."""
    body = json.dumps({"question": question}).encode()
    scope = _ask_scope(body)
    sent, messages = [], [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        if messages:
            return messages.pop(0)
        await asyncio.sleep(0.05)
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent


def test_a_client_that_disconnects_before_its_batch_costs_no_compute(tiny):
    root, rag, encoder = tiny

    async def go():
        app = create_app(config(root, encoder, max_wait_ms=1.0), rag=rag)
        async with client(app) as http:
            release, _ = _blocked_worker(app)
            try:
                await asyncio.wait_for(_ask_and_disconnect(app, "capital of france"), 10)
            finally:
                release.set()
            start = time.perf_counter()
            while "openbook_dropped_total 1.0" not in (await http.get("/metrics")).text:
                assert time.perf_counter() - start < 10
                await asyncio.sleep(0.05)
        return app

    app = run(go())
    assert app.state.server.worker.batches == 1  # the blocking call only: the gone client's question never ran


def test_token_events_leave_while_the_model_is_still_decoding(tiny, monkeypatch):
    """Streaming is real: each token event is sent as its step is decoded, not all at the end."""
    import openbook.serve.worker as worker

    root, rag, encoder = tiny
    steps: list[float] = []
    step = worker._Streamer.step

    def slow_step(self, position, tokens):
        step(self, position, tokens)
        steps.append(time.perf_counter())
        time.sleep(0.2)  # a slow model: the next step comes 0.2 s later

    monkeypatch.setattr(worker._Streamer, "step", slow_step)

    async def go():
        app = create_app(config(root, encoder), rag=rag)
        async with client(app):
            sent = await asyncio.wait_for(_ask_and_listen(app, {"question": "who wrote the sun rises", "stream": True,
                                                                "max_new_tokens": 6}), 60)
        return sent

    sent = run(go())
    tokens = [t for t, chunk in sent if b"event: token" in chunk]
    done = [t for t, chunk in sent if b"event: done" in chunk]
    assert tokens and done and len(steps) >= 2
    assert tokens[0] < steps[-1]  # the first token was on the wire before the last step was decoded


async def _ask_and_listen(app, body: dict) -> list[tuple[float, bytes]]:
    """Call the ASGI app directly; ``(time, body chunk)`` of each part of the response as it is sent."""
    data = json.dumps(body).encode()
    scope = _ask_scope(data)
    messages, sent, finished = [{"type": "http.request", "body": data, "more_body": False}], [], asyncio.Event()

    async def receive():
        if messages:
            return messages.pop(0)
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.body":
            sent.append((time.perf_counter(), message.get("body", b"")))
            if not message.get("more_body", False):
                finished.set()

    await app(scope, receive, send)
    return sent


def test_a_batch_is_bounded_by_its_sequences_as_well_as_its_questions():
    """Questions x k x beams (what decoding's memory grows with) stays within MAX_ROWS in every batch: the
    question cap alone let a batch of 16 questions decode 16 x 20 x 8 = 2,560 sequences at once."""
    from types import SimpleNamespace

    from openbook.serve.schemas import MAX_ROWS
    from openbook.serve.worker import Job, Worker

    loop = asyncio.new_event_loop()
    try:
        stub = SimpleNamespace(retriever=SimpleNamespace(name="dense"))
        worker = Worker(stub, books=None, max_batch_size=16, max_wait_ms=0.0)

        def job(k, beams, n=1):
            return Job("ask", loop, loop.create_future(), [f"q{i}" for i in range(n)], {"k": k, "num_beams": beams})

        heavy = [job(20, 8) for _ in range(3)]  # 160 sequences each
        light = [job(5, 1) for _ in range(20)]  # 5 each: 16 fit by questions, 51 by sequences
        worker._pending.extend(heavy + light)
        sizes = []
        while worker._pending:
            batch = worker._take()
            assert sum(j.rows for j in batch) <= MAX_ROWS and sum(len(j.questions) for j in batch) <= 16
            sizes.append(len(batch))
        assert sizes == [1, 1, 1, 16, 4]  # two heavy jobs would be 320 sequences
        assert heavy[0].rows == 160
    finally:
        loop.close()
