"""The server's endpoints (the API contract): ``/v1/ask`` (JSON or server-sent events), ``/v1/retrieve``,
``/v1/kb`` and its admin writes, ``/healthz``, ``/readyz``, ``/metrics`` and the web page."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from sse_starlette.sse import EventSourceResponse

import openbook.serve.schemas as s
from openbook.serve.errors import ApiError, error_json

ERRORS = {code: {"model": s.ErrorResponse} for code in (400, 401, 403, 404, 409, 422, 503, 504)}
_bearer = HTTPBearer(auto_error=False, description="the server's --admin-token")


def _questions(value: str | list[str], limit: int) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    for i, q in enumerate(items):
        if len(q) > limit:
            field = "question" if isinstance(value, str) else f"question.{i}"
            raise ApiError(422, f"{field}: at most {limit} characters (--max-question-chars), got {len(q)}", field)
    return [q.strip() for q in items]


def _passages(passages, scores, probs) -> list[dict]:
    """Retrieved passages (no answer yet, so no posterior) with their scores and p(z|x)."""
    return [{"id": str(p.id), "title": str(p.title), "text": str(p.text), "score": float(score), "prob": float(prob)}
            for p, score, prob in zip(passages, scores, probs)]


def _ask_response(result, received: float) -> s.AskResponse:
    return s.AskResponse(
        answers=[a.to_dict(full=True) for a in result.output], kb=result.book, batch_size=result.batch_size,
        timings={"queue_ms": result.queue_ms, "compute_ms": result.compute_ms,
                 "total_ms": 1000.0 * (time.perf_counter() - received)})


def install_routes(app: FastAPI, server, static: Path) -> None:
    """Add the endpoints to ``app``; ``server`` is the app's :class:`~openbook.serve.app.Server`."""
    config = server.config

    async def admin(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]):
        server.check_admin(request.headers.get("authorization"))

    @app.post("/v1/ask", response_model=s.AskResponse, responses={
        **ERRORS, 200: {"content": {"text/event-stream": {}}, "description": "the answers (or, with stream, events)"}})
    async def ask(body: s.AskRequest, request: Request):
        """Answer one question or a list, with provenance; ``"stream": true`` sends server-sent events."""
        received = time.perf_counter()
        questions = _questions(body.question, config.max_question_chars)
        k = server.k_for(body.k)  # checks that the server is ready
        model = body.model or server.default_model
        try:
            s.check_sequences(len(questions), k, body.beams)
        except ValueError as error:
            field = "beams" if body.beams > 1 else "k"
            raise ApiError(422, f"{field}: {error}", field) from None
        options = {"k": k, "num_beams": body.beams, "max_new_tokens": body.max_new_tokens,
                   "retriever": body.retriever, "model": model,
                   "decoding": body.decoding if model == "rag-sequence" else "fast"}
        if not body.stream:
            job = server.submit("ask", questions, options)
            return _ask_response(await server.wait(job, request), received)
        tokens: asyncio.Queue = asyncio.Queue()
        job = server.submit("ask", questions, options, on_token=tokens.put_nowait)
        return EventSourceResponse(_events(server, job, tokens, received))

    @app.post("/v1/retrieve", response_model=s.RetrieveResponse, responses=ERRORS)
    async def retrieve(body: s.RetrieveRequest, request: Request):
        """The top-k passages of each question with their scores and p(z|x), from the current knowledge base."""
        questions = _questions(body.question, config.max_question_chars)
        job = server.submit("retrieve", questions, {"k": server.k_for(body.k), "retriever": body.retriever})
        result = await server.wait(job, request)
        results = [{"question": q, "passages": _passages(passages, scores, probs)}
                   for q, (passages, scores, probs) in zip(questions, result.output)]
        return s.RetrieveResponse(results=results, kb=result.book)

    @app.get("/v1/kb", response_model=s.KBInfo, responses=ERRORS)
    async def kb_info():
        """The current knowledge base: manifest facts, passage count, version history, swap targets."""
        server.check_ready()
        book = server.books.current
        kb = book.kb
        return s.KBInfo(name=book.name, path=str(kb.path), version=kb.version, latest_version=kb.latest_version,
                        num_passages=len(kb), encoder=kb.encoder_info, versions=kb.versions,
                        swappable=await asyncio.to_thread(server.books.swappable))

    async def edit(change) -> s.EditResponse:
        """Apply ``change(edits, path, encoder) -> (version, n)`` in the worker and serve the new version as a new
        knowledge-base object (requests in flight keep theirs). ``edits`` are the path-level edits of the served
        folder's kind, sharded or not (:func:`~openbook.index.sharded.edits_for`); a sharded one's new object
        shares its shards (and their Ray actors), opening only the shard versions the edit wrote (``at_version``)."""
        from openbook.index.sharded import edits_for

        server.check_ready()
        async with server.admin_lock:
            def run():
                book = server.books.current
                version, changed = change(edits_for(book.kb.path), book.kb.path, server.document_encoder)
                fresh = book.kb.at_version(version)
                server.books.install(fresh, book.name)
                server.metrics.swaps.inc()
                return {"kb": {"name": book.name, "version": version}, "changed": changed}

            return s.EditResponse(**await server.call(run))

    def encode(encoder):
        return lambda batch: encoder().encode_passages(batch)

    @app.post("/v1/kb/passages", response_model=s.EditResponse, responses=ERRORS, dependencies=[Depends(admin)])
    async def add_passages(body: s.AddRequest):
        """Add passages (admin) as a new knowledge-base version; a passage without an id gets one."""
        from openbook.corpus import Passage

        passages = [Passage(p.id or f"api-{uuid.uuid4().hex[:12]}", p.title, p.text) for p in body.passages]
        return await edit(lambda edits, path, enc: (
            edits.add(path, passages, encode(enc), description="openbook serve: add"), len(passages)))

    @app.put("/v1/kb/passages", response_model=s.EditResponse, responses=ERRORS, dependencies=[Depends(admin)])
    async def update_passages(body: s.UpdateRequest):
        """Change passages' text (and title) by id (admin), as a new version."""
        updates = [{k: v for k, v in p.model_dump().items() if v is not None} for p in body.passages]
        return await edit(lambda edits, path, enc: (
            edits.update(path, updates, encode(enc), description="openbook serve: update"), len(updates)))

    @app.delete("/v1/kb/passages", response_model=s.EditResponse, responses=ERRORS, dependencies=[Depends(admin)])
    async def delete_passages(body: s.DeleteRequest):
        """Delete passages by id (admin), as a new version."""
        return await edit(lambda edits, path, enc: (edits.delete(path, body.ids, "openbook serve: delete"),
                                                    len(body.ids)))

    @app.post("/v1/kb/swap", response_model=s.SwapResponse, responses=ERRORS, dependencies=[Depends(admin)])
    async def swap(body: s.SwapRequest):
        """Answer from another knowledge base under --kb-root, or another version (admin). Requests in flight
        finish on the version they started with; it is closed when the last of them ends."""
        server.check_ready()
        async with server.admin_lock:
            expected = server.rag.query_encoder.info() if hasattr(server.rag.query_encoder, "info") else None
            kb = await asyncio.to_thread(server.books.load, body.name, body.version, expected)
            try:
                server.rag._check_kb(kb)
            except Exception:
                kb.close()
                raise
            book = server.books.install(kb, body.name)
            server.metrics.swaps.inc()
        return s.SwapResponse(kb=book.ref())

    @app.get("/healthz", response_model=s.Health)
    async def healthz():
        """The process is up (200 always)."""
        return {"status": "ok"}

    @app.get("/readyz", response_model=s.Health, responses={503: {"model": s.ErrorResponse}})
    async def readyz():
        """200 once the model and the knowledge base are loaded, else 503."""
        server.check_ready()
        return {"status": "ready"}

    @app.get("/metrics", response_class=Response)
    async def metrics():
        """Prometheus metrics (text format)."""
        if server.worker is not None:
            server.metrics.queue_depth.set(server.worker.depth)
        return Response(server.metrics.render(), media_type=server.metrics.content_type)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        index = static / "index.html"
        if index.is_file():
            return FileResponse(index)
        return HTMLResponse("<!doctype html><title>openbook</title><p>openbook serve: see <a href=/docs>/docs</a>")

    if static.is_dir():
        app.mount("/static", StaticFiles(directory=static), name="static")


async def _events(server, job, tokens: asyncio.Queue, received: float):
    """``token`` events as the worker decodes, then ``done`` (or ``error``); a client that goes away drops
    the job (the worker skips it if it has not started)."""
    waiting = asyncio.ensure_future(server.wait(job))
    try:
        while True:
            getting = asyncio.ensure_future(tokens.get())
            done, _ = await asyncio.wait({getting, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if getting in done:
                yield {"event": "token", "data": json.dumps(getting.result(), ensure_ascii=False)}
                continue
            getting.cancel()
            while not tokens.empty():
                yield {"event": "token", "data": json.dumps(tokens.get_nowait(), ensure_ascii=False)}
            try:
                result = waiting.result()
            except ApiError as error:
                yield {"event": "error", "data": error_json(error.message, error.field)}
                return
            yield {"event": "done", "data": _ask_response(result, received).model_dump_json()}
            return
    finally:
        job.drop()
        waiting.cancel()

