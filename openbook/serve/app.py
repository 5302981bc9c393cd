"""The FastAPI application: ``create_app(ServeConfig(...), rag=None)``.

With ``rag`` given (tests, benchmarks) the app is ready at once; otherwise ``config.load()`` builds the
model in a background thread when the app starts, and ``/readyz`` answers 503 until it is done (``/healthz``
answers 200 throughout). Every model computation goes through the :class:`~openbook.serve.worker.Worker`
thread; the endpoints only validate, queue and wait (module :mod:`openbook.serve.routes`).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware

from openbook.serve.books import Books, passage_encoder
from openbook.serve.config import ServeConfig
from openbook.serve.errors import ApiError, ClientGone, as_api_error, install_handlers
from openbook.serve.guards import RETRY_AFTER_S, AnswerCancelled, BodyLimit
from openbook.serve.metrics import Metrics
from openbook.serve.worker import Job, QueueFull, Worker, WorkerStopped, on_host

log = logging.getLogger("openbook.serve")
STATIC = Path(__file__).resolve().parent / "static"
SHUTTING_DOWN = "the server is shutting down: try again shortly"


class Server:
    """What the endpoints share: the config, model, knowledge bases, worker and metrics."""

    def __init__(self, config: ServeConfig):
        self.config = config
        self.metrics = Metrics()
        self.rag = None
        self.default_model = "rag-sequence"
        self.default_k: int | None = None  # the model's k (openbook serve --k), set by attach
        self.books: Books | None = None
        self.worker: Worker | None = None
        self.load_error: str | None = None
        self.admin_lock = asyncio.Lock()
        self.drained: asyncio.Future | None = None  # done once a shutdown's drain time has run out (drain)
        self._encoder = config.passage_encoder
        self._encoder_lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self.worker is not None

    def attach(self, rag) -> None:
        """Serve ``rag``: its knowledge base becomes the current book and the worker starts."""
        self.rag = rag
        self.default_model = rag.model_type  # read here: the worker switches rag.model_type per batch
        self.default_k = rag.k
        self.books = Books(rag.kb, self.config.kb_name, self.config.kb_root)
        self.worker = Worker(rag, self.books, self.config.max_batch_size, self.config.max_wait_ms,
                             self.config.max_queue, self.metrics, self.config.host)
        self.worker.start()

    def load(self) -> None:
        try:
            self.attach(self.config.load())
        except Exception as error:  # shown by /readyz (`openbook serve` exits with the error)
            self.load_error = str(error)

    def k_for(self, requested: int | None) -> int:
        """A request's k: its own, else the served model's (``openbook serve --k``)."""
        self.check_ready()
        return self.default_k if requested is None else requested

    def drain(self, seconds: float) -> None:
        """A shutdown has begun (in the event loop): requests still waiting ``seconds`` from now are answered 503
        with Retry-After (an admin edit already committing is let finish and answered), and new ones at once."""
        drained = self._drained()
        asyncio.get_running_loop().call_later(seconds, lambda: drained.done() or drained.set_result(None))

    def _drained(self) -> asyncio.Future:
        if self.drained is None:
            self.drained = asyncio.get_running_loop().create_future()
        return self.drained

    @property
    def draining_over(self) -> bool:
        return self.drained is not None and self.drained.done()

    def check_ready(self) -> None:
        if not self.ready:
            why = f"the model failed to load: {self.load_error}" if self.load_error else "the model is still loading"
            raise ApiError(503, why, headers={"Retry-After": str(RETRY_AFTER_S)})

    def document_encoder(self):
        """d(z) for admin edits (worker thread only)."""
        with self._encoder_lock:
            if self._encoder is None:
                self._encoder = passage_encoder(self.books.current.kb)
            return self._encoder

    # -- jobs ---------------------------------------------------------------------------------------

    def submit(self, kind: str, questions: list[str] | None = None, options: dict | None = None,
               fn=None, on_token=None) -> Job:
        self.check_ready()
        if self.draining_over:
            raise ApiError(503, SHUTTING_DOWN, headers={"Retry-After": str(RETRY_AFTER_S)})
        loop = asyncio.get_running_loop()
        job = Job(kind, loop, loop.create_future(), list(questions or []), dict(options or {}), fn, on_token)
        try:
            return self.worker.submit(job)
        except QueueFull as error:
            raise ApiError(503, str(error), headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        except WorkerStopped as error:
            raise ApiError(503, str(error)) from None

    async def wait(self, job: Job, request: Request | None = None, timeout: float | None = None):
        """The job's result; 504 after the timeout; 503 once a shutdown's drain has run out; :class:`ClientGone` if
        the client disconnects first. A job given up on is dropped: the worker does not compute it if it has not
        started. An admin edit (``kind="call"``) that has started is waited for and answered, whatever happens
        meanwhile: it is committed and answered so, or not committed and answered so."""
        timeout = self.config.timeout_s if timeout is None else timeout
        watch = asyncio.ensure_future(_disconnect(request)) if request is not None else None
        try:
            waiting = {job.future, self._drained()} | ({watch} if watch is not None else set())
            done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            job.drop()
            raise
        finally:
            if watch is not None:
                watch.cancel()
        gone = watch is not None and watch in done
        if job.future not in done:
            started = not job.drop()
            if not (started and job.kind == "call" and not gone):
                job.future.cancel()
                if gone:
                    raise ClientGone()
                if self.drained in done:
                    raise ApiError(503, SHUTTING_DOWN, headers={"Retry-After": str(RETRY_AFTER_S)})
                raise ApiError(504, f"no answer within the server's timeout ({timeout:g} s)")
            await asyncio.wait({job.future})
        error = job.future.exception()
        if error is not None:
            raise as_api_error(error)
        return job.future.result()

    async def call(self, fn, timeout: float | None = None):
        """Run ``fn()`` in the worker thread (between batches) and return its result."""
        return (await self.wait(self.submit("call", fn=fn), timeout=timeout)).output

    def check_admin(self, authorization: str | None) -> None:
        if self.config.read_only:
            raise ApiError(409, self.config.read_only)
        token = self.config.admin_token
        if not token:
            raise ApiError(403, "read-only server: start it with OPENBOOK_ADMIN_TOKEN or --admin-token-file to allow edits")
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise ApiError(401, "a valid admin token is needed: Authorization: Bearer <token>",
                           headers={"WWW-Authenticate": "Bearer"})


async def _disconnect(request: Request) -> None:
    """Return when the client of ``request`` disconnects."""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return


class _Observe:
    """ASGI middleware recording each HTTP request in the metrics (by route template, not raw path)."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), [500]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            self.metrics.observe(endpoint, scope.get("method", ""), status[0], time.perf_counter() - start)


def create_app(config: ServeConfig | None = None, rag=None) -> FastAPI:
    """The server's FastAPI app (module docs)."""
    from openbook import __version__
    from openbook.serve.routes import install_routes

    config = config or ServeConfig()
    server = Server(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loading = None
        if rag is not None:
            server.attach(rag)
        elif config.load is not None:
            loading = on_host(config.host, server.load)
        else:
            server.load_error = "no model given"
        try:
            yield
        finally:
            if loading is not None:
                await loading
            if server.worker is not None:  # after the drain, a batch still computing is not waited for
                await asyncio.to_thread(server.worker.stop, 0 if server.draining_over else None)

    app = FastAPI(title="openbook", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Retrieval-Augmented Generation (Lewis et al., 2020) as a service: answers with "
                  "provenance, a swappable knowledge base, dynamic batching.")
    app.state.server = server
    install_handlers(app)
    install_routes(app, server, STATIC)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)
    app.add_middleware(_Observe, metrics=server.metrics)
    if config.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST", "PUT",
                           "DELETE"], allow_headers=["Authorization", "Content-Type", "Idempotency-Key"])
    app.add_middleware(AnswerCancelled)
    return app
