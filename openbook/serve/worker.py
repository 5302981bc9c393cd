"""The model worker: one thread owns the RAG model and answers requests in dynamic batches.

That thread is a new one, or with a ``host`` the thread that runs :meth:`ModelThread.run`: ``openbook serve`` hands the
model's loading and the worker's loop to its main thread (and serves HTTP from another), because PyTorch computed the
same answers faster in the main thread than in another thread of the same process
(``bench/thread_speed.py``, docs/logs/thread_speed.txt).

The event loop never computes: an endpoint puts a :class:`Job` on the worker's bounded queue (:meth:`Worker.submit`,
:class:`QueueFull` when full) and awaits its asyncio future, which the worker resolves from its thread with
``loop.call_soon_threadsafe``. The worker takes the oldest job and gathers every queued job with the same options
(:attr:`Job.key`) until the batch holds ``max_batch_size`` questions (or ``max_batch_rows`` sequences, questions x k
x beams: :attr:`Job.rows`) or ``max_wait_ms`` have passed since the oldest job arrived; then it answers them in one
``rag.ask`` (or ``rag.retrieve``) call, under one lease of the current knowledge base
(:class:`~openbook.serve.books.Books`), so every answer of a batch comes from the same version. Jobs whose client
has gone (disconnected or timed out: :meth:`Job.drop`) are left out before computing. Admin edits run here too
(``kind="call"``), one at a time between batches, so the model and its encoders are only ever used from this thread.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from openbook.serve.books import Book, Books
from openbook.serve.schemas import MAX_ROWS


class QueueFull(Exception):
    """The worker's queue holds ``max_queue`` jobs already (the API answers 503 with Retry-After)."""


class WorkerStopped(Exception):
    """The worker is shutting down and takes no new jobs."""


@dataclass(eq=False)
class Job:
    """One request's work: ``kind`` ``"ask"``, ``"retrieve"`` or ``"call"`` (``fn()`` in the worker)."""

    kind: str
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    questions: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)
    fn: Callable[[], Any] | None = None
    on_token: Callable[[dict], None] | None = None  # called in the event loop with {"index", "token", "text"}
    enqueued: float = field(default_factory=time.perf_counter)
    dropped: bool = False
    started: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def key(self) -> tuple:
        """Jobs with equal keys can share a batch."""
        if self.kind == "call":
            return ("call", id(self))
        return (self.kind, *sorted(self.options.items()))

    @property
    def rows(self) -> int:
        """Sequences this job adds to a batch: questions x k x beams (what a batch's memory grows with)."""
        return len(self.questions) * (self.options.get("k") or 1) * (self.options.get("num_beams") or 1)

    def drop(self) -> bool:
        """The client has gone: do not compute this job. True if it had not started (it never will)."""
        with self._lock:
            self.dropped = True
            return not self.started

    def claim(self) -> bool:
        """The worker is about to compute this job: True unless it was dropped first (then it never runs)."""
        with self._lock:
            if self.dropped or self.future.done():
                return False
            self.started = True
            return True


@dataclass
class BatchResult:
    """What one job gets back: its part of the batch's output and the batch's facts."""

    output: Any
    book: dict  # {"name", "version"} the batch ran on
    queue_ms: float
    compute_ms: float
    batch_size: int


Host = Callable[[Callable[[], None]], None]  # runs a function in the model's thread


class ModelThread:
    """A host (``ServeConfig.host``) that runs the functions handed to it, in order, in the thread that calls
    :meth:`run`, typically the main thread: the model's loading, then the worker's loop."""

    def __init__(self):
        self._work: queue.SimpleQueue = queue.SimpleQueue()

    def __call__(self, fn: Callable[[], None]) -> None:
        self._work.put(fn)

    def run(self, alive: Callable[[], bool], poll_s: float = 0.1) -> None:
        """Run what is handed over until ``alive()`` turns false (checked between functions and every ``poll_s``)."""
        while alive():
            try:
                fn = self._work.get(timeout=poll_s)
            except queue.Empty:
                continue
            fn()


def on_host(host: Host | None, fn: Callable[[], Any]) -> asyncio.Future:
    """``fn()`` run by ``host`` (or in a new thread), as an awaitable of the running event loop."""
    if host is None:
        return asyncio.ensure_future(asyncio.to_thread(fn))
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def call() -> None:
        try:
            result = fn()
        except BaseException as error:  # delivered to the awaiting coroutine
            loop.call_soon_threadsafe(lambda error=error: future.done() or future.set_exception(error))
        else:
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(result))

    host(call)
    return future


class Worker:
    """The thread that owns ``rag`` (module docs)."""

    def __init__(self, rag, books: Books, max_batch_size: int = 8, max_wait_ms: float = 10.0, max_queue: int = 64,
                 metrics=None, host: Host | None = None, max_batch_rows: int = MAX_ROWS):
        self.rag, self.books = rag, books
        self.max_batch_size, self.max_wait = max_batch_size, max_wait_ms / 1000.0
        self.max_batch_rows = max_batch_rows
        self.max_queue, self.metrics = max_queue, metrics
        self._pending: deque[Job] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._host, self._started, self._ended = host, False, threading.Event()
        self._retrievers = {rag.retriever.name: rag.retriever}
        self._default_retriever = rag.retriever.name
        self.batches = 0

    # -- life cycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Run the worker's loop on the host, or in a new thread without one."""
        self._started = True
        if self._host is not None:
            self._host(self._serve)
        else:
            threading.Thread(target=self._serve, name="openbook-model-worker", daemon=True).start()

    def stop(self, timeout: float | None = None) -> None:
        """Finish the queued jobs, then end the loop (and wait, at most ``timeout`` s, until it has)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._started:
            self._ended.wait(timeout)

    @property
    def stopped(self) -> bool:
        """The loop has ended (or never started)."""
        return self._ended.is_set() or not self._started

    @property
    def depth(self) -> int:
        return len(self._pending)

    def submit(self, job: Job) -> Job:
        with self._cond:
            if self._stopping:
                raise WorkerStopped("the server is shutting down")
            if len(self._pending) >= self.max_queue:
                raise QueueFull(f"the server's queue is full ({self.max_queue} requests waiting)")
            self._pending.append(job)
            self._gauge()
            self._cond.notify_all()
        return job

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_depth.set(len(self._pending))

    # -- the thread ---------------------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            self._run()
        finally:
            self._ended.set()

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            live = [job for job in batch if job.claim()]
            if self.metrics is not None and len(live) < len(batch):
                self.metrics.dropped.inc(len(batch) - len(live))
            if live:
                self._execute(live)

    def _take(self) -> list[Job] | None:
        """The next batch: the oldest job and the queued jobs sharing its key (module docs)."""
        with self._cond:
            while not self._pending:
                if self._stopping:
                    return None
                self._cond.wait()
            first = self._pending[0]
            deadline = first.enqueued + self.max_wait
            per_question = first.rows // max(1, len(first.questions))
            while True:
                batch, size, rows = [], 0, 0
                for job in self._pending:
                    if job.key == first.key and (not batch or (size + len(job.questions) <= self.max_batch_size
                                                               and rows + job.rows <= self.max_batch_rows)):
                        batch.append(job)
                        size, rows = size + len(job.questions), rows + job.rows
                now = time.perf_counter()
                full = size >= self.max_batch_size or rows + per_question > self.max_batch_rows
                if first.kind == "call" or full or now >= deadline or self._stopping:
                    break
                self._cond.wait(deadline - now)
            for job in batch:
                self._pending.remove(job)
            self._gauge()
            return batch

    def _execute(self, batch: list[Job]) -> None:
        start = time.perf_counter()
        size = sum(len(job.questions) for job in batch)
        try:
            with self.books.lease() as book:
                if batch[0].kind == "call":
                    outputs = [batch[0].fn()]
                else:
                    outputs = self._compute(batch, book)
        except BaseException as error:  # delivered to every waiting request; the worker carries on
            for job in batch:
                self._settle(job, None, error)
            return
        compute_ms = 1000.0 * (time.perf_counter() - start)
        self.batches += 1
        if self.metrics is not None and batch[0].kind != "call":
            self.metrics.batch_size.observe(size)
        for job, output in zip(batch, outputs):
            result = BatchResult(output, book.ref(), 1000.0 * (start - job.enqueued), compute_ms, size)
            self._settle(job, result, None)

    @staticmethod
    def _settle(job: Job, result, error) -> None:
        def settle() -> None:
            if job.future.done():
                return
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(result)

        try:
            job.loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop has closed: nobody is waiting any more
            pass

    # -- computing ----------------------------------------------------------------------------------

    def _use(self, book: Book, retriever: str | None) -> None:
        """Point the model at ``book``'s knowledge base and the retriever called ``retriever``."""
        rag = self.rag
        name = retriever or self._default_retriever
        if name not in self._retrievers:
            from openbook.index.retriever import make_retriever

            self._retrievers[name] = make_retriever(name, book.kb, encode=rag._encode_questions, progress=False)
        chosen = self._retrievers[name]
        if chosen.kb is not book.kb:
            chosen.use_knowledge_base(book.kb)
        rag.retriever, rag.kb = chosen, book.kb

    def _compute(self, batch: list[Job], book: Book) -> list:
        options = dict(batch[0].options)
        retriever = options.pop("retriever", None)
        self._use(book, retriever)
        questions = [q for job in batch for q in job.questions]
        if batch[0].kind == "retrieve":
            with torch.no_grad():
                retrieval = self.rag.retrieve(questions, options.get("k"), where=options.get("where"))
            rows = [(passages, retrieval.scores[b].tolist(), retrieval.doc_logprobs[b].exp().tolist())
                    for b, passages in enumerate(retrieval.passages)]
            return _split(batch, rows)
        model = options.pop("model", None) or self.rag.model_type
        streaming = [job.on_token is not None for job in batch]
        on_step = None
        if any(streaming) and model == "rag-token" and options.get("num_beams", 1) == 1:
            # token events for a request's first question (a stream carries one answer's tokens)
            rows = [job if i == 0 and job.on_token is not None else None for job in batch for i in range(len(job.questions))]
            on_step = _Streamer(self.rag.generator, rows).step
        previous = self.rag.model_type
        if options.get("abstain_threshold") is None and (model != previous or retriever not in (
                None, self._default_retriever) or options.get("k") not in (None, self.rag.k)):
            options["abstain"] = False  # the model's threshold holds for its own settings only (rag.abstain)
        self.rag.model_type = model
        try:
            answers = self.rag.ask(questions, on_step=on_step, **options)
        finally:
            self.rag.model_type = previous
        return _split(batch, answers)


def _split(batch: list[Job], rows: list) -> list[list]:
    out, start = [], 0
    for job in batch:
        out.append(rows[start:start + len(job.questions)])
        start += len(job.questions)
    return out


class _Streamer:
    """Turns each greedy step's tokens into ``token`` events of the streaming jobs (one per answer row)."""

    def __init__(self, generator, row_jobs: list[Job | None]):
        self.generator = generator
        self.row_jobs = row_jobs
        tokenizer = generator.tokenizer
        self.special = set(getattr(tokenizer, "all_special_ids", []) or [])
        self.ids: list[list[int]] = [[] for _ in row_jobs]
        self.texts = ["" for _ in row_jobs]
        self.done = [job is None for job in row_jobs]

    def step(self, position: int, tokens: torch.Tensor) -> None:
        for row, token in enumerate(tokens.tolist()):
            if self.done[row]:
                continue
            job = self.row_jobs[row]
            if token == self.generator.eos_token_id or job.dropped:
                self.done[row] = True
                continue
            if token in self.special:
                continue
            self.ids[row].append(token)
            piece = self.generator.tokenizer.convert_ids_to_tokens(token)
            text = self.generator.decode_tokens(torch.tensor([self.ids[row]]))[0]
            # "token" is the tokenizer's piece ("ĠBard"), "piece" the text it added (" Bard"), "text" the answer so far
            added = text[len(self.texts[row]):] if text.startswith(self.texts[row]) else ""
            self.texts[row] = text
            event = {"index": position, "token": str(piece), "piece": added, "text": text}
            try:
                job.loop.call_soon_threadsafe(job.on_token, event)
            except RuntimeError:
                self.done[row] = True
