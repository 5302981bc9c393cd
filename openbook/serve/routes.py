"""The server's endpoints (the API contract): ``/v1/ask`` (JSON or server-sent events), ``/v1/retrieve``,
``/v1/kb`` and its admin writes, ``/healthz``, ``/readyz``, ``/metrics`` and the web page."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
import uuid
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from sse_starlette.sse import EventSourceResponse

import openbook.serve.schemas as s
from openbook.index.filters import Filter, FilterError, parse_filter
from openbook.serve.errors import ApiError, error_json

ERRORS = {code: {"model": s.ErrorResponse} for code in (400, 401, 403, 404, 409, 422, 503, 504)}
_bearer = HTTPBearer(auto_error=False, description="the server's admin token")
IDEMPOTENCY = "Idempotency-Key"
_KEY_DOC = ("a key of the client's choosing (1-200 letters, digits, '.', '_', ':', '-'): a retried edit with the same "
            "key is answered with the version the first one wrote instead of being applied twice")
_KEY = re.compile(r"[A-Za-z0-9._:-]{1,200}")
_KIND = {"POST": "add", "PUT": "update", "DELETE": "delete"}


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get(IDEMPOTENCY)
    if key is not None and not _KEY.fullmatch(key):
        raise ApiError(422, f"{IDEMPOTENCY}: 1-200 letters, digits, '.', '_', ':' or '-'", IDEMPOTENCY)
    return key


def _replay(book, key: str, tag: str, count: int | None) -> dict | None:
    """The answer of the edit that ``key`` already made (its version's description holds ``tag``), if any
    (``count`` None: the passages that version deleted)."""
    for version in reversed(book.kb.versions):
        description = str(version.get("description") or "")
        if f"[request {key} " in description:
            if tag not in description:
                raise ApiError(422, f"{IDEMPOTENCY} {key} was used for another edit", IDEMPOTENCY)
            changed = count if count is not None else version.get("deleted", 0)
            return {"kb": {"name": book.name, "version": version["version"]}, "changed": changed, "replayed": True}
    return None


def _questions(value: str | list[str], limit: int) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    for i, q in enumerate(items):
        if len(q) > limit:
            field = "question" if isinstance(value, str) else f"question.{i}"
            raise ApiError(422, f"{field}: at most {limit} characters (--max-question-chars), got {len(q)}", field)
    return [q.strip() for q in items]


def _passages(passages, scores, probs) -> list[dict]:
    """Retrieved passages (no answer yet, so no posterior) with their scores and p(z|x)."""
    return [{"id": str(p.id), "title": str(p.title), "text": str(p.text), "score": float(score), "prob": float(prob),
             "meta": dict(getattr(p, "meta", None) or {})} for p, score, prob in zip(passages, scores, probs)]


def _where(spec: dict | None) -> Filter | None:
    """The ``where`` job option of a request's ``"filter"`` (None without one; requests with equal filters share
    a batch); a malformed filter is a 422 naming its part (``filter.modified.gte``)."""
    try:
        return parse_filter(spec)
    except FilterError as error:
        raise ApiError(422, str(error), error.field) from None


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
                   "decoding": body.decoding if model == "rag-sequence" else "fast", "where": _where(body.filter),
                   "abstain": body.abstain, "abstain_threshold": body.abstain_threshold}
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
        job = server.submit("retrieve", questions, {"k": server.k_for(body.k), "retriever": body.retriever,
                                                    "where": _where(body.filter)})
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

    async def edit(request: Request, body, count: int | None, apply) -> s.EditResponse:
        """Apply ``apply(edits, path, encoder, description) -> version`` in the worker and serve the new version as a
        new knowledge-base object (requests in flight keep theirs). ``edits`` are the path-level edits of the served
        folder's kind, sharded or not (:func:`~openbook.index.sharded.edits_for`); a sharded one's new object shares
        its shards (and their Ray actors), opening only the shard versions the edit wrote (``at_version``).
        ``changed`` in the answer is ``count``, or where that is None the passages the new version deleted.

        With an ``Idempotency-Key`` header the key (and a fingerprint of the edit) is written into the new version's
        description, in the same commit: a retry with the key finds that version and is answered with it
        (``replayed``) instead of editing again, even after a restart; the key with another edit is refused."""
        from openbook.index.sharded import edits_for

        server.check_ready()
        key = _idempotency_key(request)
        what = f"{request.method} {body.model_dump_json()}"
        tag = f"[request {key} {hashlib.sha256(what.encode()).hexdigest()[:16]}]" if key else ""
        async with server.admin_lock:
            def run():
                book = server.books.current
                if key:
                    done = _replay(book, key, tag, count)
                    if done is not None:
                        return done
                description = " ".join(part for part in (f"openbook serve: {_KIND[request.method]}", tag) if part)
                version = apply(edits_for(book.kb.path), book.kb.path, server.document_encoder, description)
                fresh = book.kb.at_version(version)
                server.books.install(fresh, book.name)
                server.metrics.swaps.inc()
                changed = count if count is not None else fresh.versions[version - 1].get("deleted", 0)
                return {"kb": {"name": book.name, "version": version}, "changed": changed}

            return s.EditResponse(**await server.call(run))

    def encode(encoder):
        return lambda batch: encoder().encode_passages(batch)

    @app.post("/v1/kb/passages", response_model=s.EditResponse, responses=ERRORS, dependencies=[Depends(admin)])
    async def add_passages(body: s.AddRequest, request: Request,
                           key: Annotated[str | None, Header(alias=IDEMPOTENCY, description=_KEY_DOC)] = None):
        """Add passages (admin) as a new knowledge-base version; a passage without an id gets one."""
        from openbook.corpus import Passage

        passages = [Passage(p.id or f"api-{uuid.uuid4().hex[:12]}", p.title, p.text) for p in body.passages]
        return await edit(request, body, len(passages), lambda edits, path, enc, description: edits.add(
            path, passages, encode(enc), description=description))

    @app.put("/v1/kb/passages", response_model=s.EditResponse, responses=ERRORS, dependencies=[Depends(admin)])
    async def update_passages(body: s.UpdateRequest, request: Request,
                              key: Annotated[str | None, Header(alias=IDEMPOTENCY, description=_KEY_DOC)] = None):
        """Change passages' text (and title) by id (admin), as a new version."""
        updates = [{k: v for k, v in p.model_dump().items() if v is not None} for p in body.passages]
        return await edit(request, body, len(updates), lambda edits, path, enc, description: edits.update(
            path, updates, encode(enc), description=description))

    @app.delete("/v1/kb/passages", response_model=s.EditResponse, responses=ERRORS, dependencies=[Depends(admin)])
    async def delete_passages(body: s.DeleteRequest, request: Request,
                              key: Annotated[str | None, Header(alias=IDEMPOTENCY, description=_KEY_DOC)] = None):
        """Delete passages by id (admin), as a new version."""
        return await edit(request, body, len(body.ids), lambda edits, path, enc, description: edits.delete(
            path, body.ids, description))

    @app.get("/v1/kb/documents", response_model=s.DocumentsResponse, responses=ERRORS, dependencies=[Depends(admin)])
    async def list_documents():
        """The served knowledge base's documents and their passage ids, at the served version (admin)."""
        server.check_ready()

        def run():
            book = server.books.current
            if not hasattr(book.kb, "documents"):
                raise ApiError(409, "the served knowledge base is sharded: its documents are not listed")
            return {"kb": {"name": book.name, "version": book.kb.version}, "documents": book.kb.documents()}

        return s.DocumentsResponse(**await server.call(run))

    @app.delete("/v1/kb/documents", response_model=s.EditResponse, responses=ERRORS, dependencies=[Depends(admin)])
    async def delete_document(body: s.DeleteDocumentRequest, request: Request,
                              key: Annotated[str | None, Header(alias=IDEMPOTENCY, description=_KEY_DOC)] = None):
        """Delete every passage of a document (admin), as a new version; ``changed`` counts the passages."""
        from openbook.index.kb import delete_document
        from openbook.index.sharded import is_sharded

        def apply(edits, path, enc, description):
            if is_sharded(path):
                raise ApiError(409, "the served knowledge base is sharded: delete its passages by id")
            return delete_document(path, body.document, description)

        return await edit(request, body, None, apply)

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
    _install_docs(app)


def _install_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) and ``/redoc`` from files installed with the package (fastapi-offline's copies of
    Swagger UI and ReDoc), never a CDN: the pages work offline."""
    import fastapi_offline
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html

    assets = Path(fastapi_offline.__file__).resolve().parent / "static"
    app.mount("/docs-assets", StaticFiles(directory=assets), name="docs-assets")
    title = f"{app.title} API"

    @app.get("/docs", include_in_schema=False)
    async def docs():
        return get_swagger_ui_html(openapi_url=app.openapi_url, title=title,
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/docs-assets/favicon.png",
                                   swagger_ui_parameters={"validatorUrl": None})  # no badge from validator.swagger.io

    @app.get("/redoc", include_in_schema=False)
    async def redoc():
        return get_redoc_html(openapi_url=app.openapi_url, title=title, redoc_js_url="/docs-assets/redoc.standalone.js",
                              redoc_favicon_url="/docs-assets/favicon.png", with_google_fonts=False)


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

