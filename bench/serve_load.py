"""Load benchmark of `openbook serve` (issue 11): latency and answers per second under concurrent clients.

1. ``openbook serve`` starts as a subprocess on a free loopback port (the model options below passed through,
   ``--max-batch-size`` its batch cap); once ``/readyz`` answers (then one untimed question), C = 1 and 8
   concurrent httpx clients each send one question at a time to ``POST /v1/ask`` for ``--seconds``: those of
   ``--questions FILE`` (one a line) or bench/ask_latency.py's 30 questions in turn, with ``openbook ask``'s
   defaults (greedy, Lazy decoding, 16 new tokens).
2. Concurrency 32, compared in alternating rounds. Three processes each load the model once: that server, a
   second one with batching off (``--max-batch-size 1``), and the offline bound (a fresh process of this script,
   as the server runs in one), which answers the same questions with ``rag.ask`` in batches of the server's max
   batch size, or one at a time, in the clients' turn order for at least ``--seconds`` and whole passes over the
   questions (after one untimed batch). Each round measures the four arms (batched, unbatched, offline batched,
   offline one at a time) one after another for ``--seconds`` each while the other processes sit idle, in the
   order A B C D, then D C B A in the next round (``--rounds``, default 2): this VM's speed drifts by 5-15%
   over minutes, as much as the gain being measured, and measured minutes apart (as runs 1-12 did) the ratios
   took that drift with them. Each arm's rate pools its rounds; ``per_round`` gives each round's ratios.
3. Hot swap, last (it leaves the server on a swap book): concurrency 32 while ``POST /v1/kb/swap`` alternates
   every ``--swap-every`` s between two knowledge bases under a temporary ``--kb-root``: the hot-swap
   experiment's 2016 and 2018 office holders (openbook/experiments/hot_swap.py, from ``--leaders``; its
   changed-office questions are asked), else two slices of the demo book. An answer is *mixed-version* when a
   passage it returns is not in the knowledge-base version the answer names.

Answers per second (``qps``) are the steady rate: the answers completed inside the window after its first
batch, over the time from that batch's end to the last of them (:func:`steady_qps`; ``qps_window``, the
answers inside the window over its length, rounds to whole batches). Latencies (client side) are those of
every answered request. Every phase is bounded (a request in flight gets ``--request-timeout`` s, also the
server's ``--timeout-s``) and the server is always stopped. Targets (issue 11): batching speedup >= 1.5x
at concurrency 32, server efficiency (qps_c32_batched / offline_batch_qps) >= 0.9, 0 errors, 0 mixed.

Usage:  PYTHONPATH=. python bench/serve_load.py [--seconds 60] [--rounds 2] [--swap-every 5] [model options of
        openbook ask]

It ends with one JSON line: ``qps_c32_batched``, ``qps_c32_unbatched``, ``batching_speedup``,
``offline_batch_qps``, ``server_efficiency``, ``p99_ms_c8``, ``errors``, ``swaps``,
``mixed_version_answers``, ``levels`` (each phase's answers, qps, p50/p95/p99/mean ms, errors; pooled over the
rounds at concurrency 32, with ``rounds_qps``) and ``per_round``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from _common import print_header, quiet
from _offline_bound import OfflineBound, offline_worker
from ask_latency import QUESTIONS, ask_settings, percentile

REPO = Path(__file__).resolve().parents[1]
LEVELS = (1, 8, 32)
TOP = LEVELS[-1]
DEFAULT_LEADERS = "../shared/data/wikidata-leaders-history.csv"
ADMIN_TOKEN_ENV = "OPENBOOK_ADMIN_TOKEN"
TARGETS = {"batching_speedup": 1.5, "server_efficiency": 0.9, "errors": 0, "mixed_version_answers": 0}


# --------------------------------------------------------------------------------------------------
# The figures (pure)


@dataclass
class Phase:
    """What the clients of one phase saw."""
    seconds: float  # the window length
    latencies: list[float] = field(default_factory=list)  # seconds, every answered request
    in_window: int = 0  # answers completed inside the window
    ends: list[float] = field(default_factory=list)  # seconds from the window's start to each answer (as latencies)
    errors: Counter = field(default_factory=Counter)  # kind -> count
    batch_sizes: list[int] = field(default_factory=list)  # the server's batch of each answer
    answers: list[tuple] = field(default_factory=list)  # (kb name, kb version, passage ids) of each answer
    compute_s: list[float] = field(default_factory=list)  # the server's compute time of each answer's batch


def latency_ms(latencies: list[float]) -> dict:
    """p50/p95/p99/mean of ``latencies`` (seconds) in milliseconds; None without any."""
    if not latencies:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "mean_ms": None}
    return {f"p{q}_ms": round(1000 * percentile(latencies, q), 1) for q in (50, 95, 99)} | {
        "mean_ms": round(1000 * statistics.fmean(latencies), 1)}


def steady_counts(ends: list[float], batch_sizes: list[int], seconds: float) -> tuple[int, float] | None:
    """``(answers, seconds)`` while the server was busy: the answers that completed inside the window after the
    first batch, and the time from that batch's end to the last of them (None without two batches).

    A batch's answers complete together, so counting the answers inside a fixed window rounds to whole
    batches: with batches of 8 that take 10 s, a 30 s window holds 2 or 3 of them, +-1 batch being +-25% of
    the count. Timing from one batch's end to another's measures the rate at which batches are served,
    without the window's edges (nor the first batch's wait for its clients to arrive)."""
    inside = sorted((end, size) for end, size in zip(ends, batch_sizes) if end <= seconds)
    if not inside:
        return None
    first = min(inside[0][1], len(inside))  # the first answers completed are those of one batch of this size
    later = len(inside) - first
    span = inside[-1][0] - inside[first - 1][0]
    return (later, span) if later > 0 and span > 0 else None


def steady_qps(ends: list[float], batch_sizes: list[int], seconds: float) -> float | None:
    """Answers per second while the server was busy (:func:`steady_counts`), None without two batches."""
    counts = steady_counts(ends, batch_sizes, seconds)
    return counts[0] / counts[1] if counts else None


def compute_qps(compute_s: list[float], batch_sizes: list[int]) -> float | None:
    """Answers per second of the server's model while it computed: the answers over the compute time of their
    batches, as the server reports it (``timings.compute_ms``), each batch's time shared by its answers. Against
    the offline bound this separates a slower model (threads or questions) from time the model sat idle."""
    busy = sum(seconds / size for seconds, size in zip(compute_s, batch_sizes))
    return round(len(compute_s) / busy, 3) if busy > 0 else None


def phase_figures(phase: Phase, concurrency: int) -> dict:
    return pooled_figures([phase], concurrency)


def pooled_figures(phases: list[Phase], concurrency: int) -> dict:
    """The figures of one or more windows of the same server and concurrency (rounds), pooled: answers per second
    is every window's steady answers over their summed steady time (:func:`steady_counts`; a window without two
    batches counts its answers over its length), latencies and batch sizes are those of all the answers; with
    several windows, ``rounds_qps`` is each window's own rate."""
    answers = spans = 0.0
    rates = []
    for phase in phases:
        counts = steady_counts(phase.ends, phase.batch_sizes, phase.seconds) or (phase.in_window, phase.seconds)
        answers, spans = answers + counts[0], spans + counts[1]
        rates.append(round(counts[0] / counts[1], 3))
    seconds = sum(phase.seconds for phase in phases)
    merged = Phase(seconds)
    for phase in phases:
        merged.latencies += phase.latencies
        merged.batch_sizes += phase.batch_sizes
        merged.compute_s += phase.compute_s
        merged.errors += phase.errors
        merged.in_window += phase.in_window
    figures = {"concurrency": concurrency, "seconds": seconds, "answers": len(merged.latencies),
               "qps": round(answers / spans, 3), "qps_window": round(merged.in_window / seconds, 3),
               "compute_qps": compute_qps(merged.compute_s, merged.batch_sizes),
               **latency_ms(merged.latencies),
               "mean_batch_size": round(statistics.fmean(merged.batch_sizes), 2) if merged.batch_sizes else None,
               "errors": sum(merged.errors.values()), "error_kinds": dict(merged.errors)}
    return figures | ({"rounds_qps": rates} if len(phases) > 1 else {})


def mixed_version_answers(answers, passage_ids) -> int:
    """How many ``(kb name, version, passage ids)`` answers hold a passage that the knowledge base ``name`` does
    not have at ``version``; ``passage_ids(name, version)`` is that set, or None if unknown (counted as mixed:
    nothing shows the answer came from one version)."""
    mixed = 0
    for name, version, ids in answers:
        known = passage_ids(name, version)
        mixed += known is None or any(str(i) not in known for i in ids)
    return mixed


def _ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def result_line(levels: dict, *, offline_qps: float | None, swaps: int, swap_errors: int, mixed: int,
                extra: dict) -> dict:
    """The final JSON line from the per-phase figures ``levels`` (keys ``c1 c8 c32 c32_swap c32_unbatched``)."""
    batched, unbatched = levels[f"c{TOP}"]["qps"], levels.get(f"c{TOP}_unbatched", {}).get("qps")
    errors = sum(level["errors"] for level in levels.values()) + swap_errors
    line = {
        f"qps_c{TOP}_batched": batched, f"qps_c{TOP}_unbatched": unbatched,
        "batching_speedup": _ratio(batched, unbatched), "offline_batch_qps": offline_qps,
        "server_efficiency": _ratio(batched, offline_qps), "p99_ms_c8": levels["c8"]["p99_ms"],
        "compute_efficiency": _ratio(levels[f"c{TOP}"].get("compute_qps"), offline_qps),
        "errors": errors, "swaps": swaps, "swap_errors": swap_errors, "mixed_version_answers": mixed,
    }
    line["meets_targets"] = bool(
        (line["batching_speedup"] or 0) >= TARGETS["batching_speedup"]
        and (line["server_efficiency"] or 0) >= TARGETS["server_efficiency"]
        and errors == TARGETS["errors"] and mixed == TARGETS["mixed_version_answers"])
    return {**line, "targets": TARGETS, "levels": levels, **extra}


# --------------------------------------------------------------------------------------------------
# The server


def model_flags(args) -> list[str]:
    """The model options of ``args`` as `openbook serve`/`openbook ask` flags (those that differ from the defaults)."""
    flags = []
    for flag, value in (("--run", args.run), ("--model", args.model), ("--kb", args.kb), ("--encoder", args.encoder),
                        ("--generator", None if args.generator == "default" else args.generator), ("--k", args.k),
                        ("--dtype", args.dtype)):
        flags += [flag, str(value)] if value is not None else []
    return flags + (["--untrained"] if args.untrained else [])


class Server:
    """``openbook serve`` as a subprocess on a free loopback port, ready when entered, stopped on exit."""

    def __init__(self, flags: list[str], log: Path, startup_timeout: float, env: dict | None = None):
        with socket.socket() as s:  # a free port
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "openbook", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                        *flags]
        self.log, self.startup_timeout, self.env = log, startup_timeout, env
        self.process = None

    def __enter__(self) -> Server:
        import httpx

        print(f"server:        {' '.join(self.command)}", flush=True)
        start = time.perf_counter()
        with open(self.log, "ab") as log:  # a file, not a pipe nobody reads
            path = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))  # this checkout's openbook
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            env={**os.environ, "PYTHONPATH": path, **(self.env or {})})
        try:
            while time.perf_counter() - start < self.startup_timeout:
                if self.process.poll() is not None:
                    raise SystemExit(f"openbook serve exited with status {self.process.returncode}:\n{self.tail()}")
                try:
                    if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                        print(f"ready after:   {time.perf_counter() - start:.1f} s", flush=True)
                        return self
                except httpx.TransportError:
                    pass
                time.sleep(0.25)
            raise SystemExit(f"openbook serve not ready after {self.startup_timeout:.0f} s:\n{self.tail()}")
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)  # drains in-flight requests, then exits
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


# --------------------------------------------------------------------------------------------------
# The clients


def warm_up(server: Server, question: str, body: dict, timeout: float) -> None:
    """One untimed question (the first answer pays one-off costs); exits naming the failure if it is not a 200."""
    import httpx

    response = httpx.post(f"{server.url}/v1/ask", json={"question": question, **body}, timeout=timeout)
    if response.status_code != 200:
        raise SystemExit(f"the warm-up question failed: HTTP {response.status_code} {response.text[:300]}")


def ask_body(settings: dict) -> dict:
    """The fields of a ``POST /v1/ask`` body that ask ``rag.ask(**settings)`` (apart from the question)."""
    return {"k": settings["k"], "beams": settings["num_beams"], "decoding": settings["decoding"],
            "max_new_tokens": settings["max_new_tokens"]}


def parse_answer(response) -> tuple[int, str, int, list, float]:
    """``(batch size, kb name, kb version, passage ids, the batch's compute seconds)`` of a ``POST /v1/ask``
    response to one question; ValueError naming what is wrong if it is not a 200 with one answer."""
    if response.status_code != 200:
        raise ValueError(f"http {response.status_code}")
    try:
        data = response.json()
        (answer,) = data["answers"]
        return (int(data["batch_size"]), data["kb"]["name"], data["kb"]["version"], [p["id"] for p in answer["passages"]],
                float(data["timings"]["compute_ms"]) / 1000.0)
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError("malformed response") from error


class Swapper:
    """Swaps the served knowledge base: to ``names[0]`` before a phase starts (:meth:`first`), then to the next of
    ``names`` every ``every`` seconds while it runs (:meth:`during`), counting ``swaps`` and ``swap_errors``."""

    def __init__(self, names: list[str], every: float, token: str):
        self.names, self.every, self.token, self.counts = names, every, token, Counter()

    async def to(self, client, name: str) -> None:
        import httpx

        try:
            response = await client.post("/v1/kb/swap", json={"name": name, "version": None},
                                         headers={"Authorization": f"Bearer {self.token}"})
            ok = response.status_code == 200
        except httpx.HTTPError:
            ok = False
        self.counts["swaps" if ok else "swap_errors"] += 1

    async def first(self, client) -> None:
        await self.to(client, self.names[0])

    async def during(self, client, start: float, deadline: float) -> None:
        """Swap at ``start + every``, ``start + 2 every``, ... before ``deadline`` (clock times)."""
        turn = 1
        while start + turn * self.every < deadline:
            await asyncio.sleep(max(0.0, start + turn * self.every - time.perf_counter()))
            await self.to(client, self.names[turn % len(self.names)])
            turn += 1


async def drive(url: str, concurrency: int, seconds: float, questions: list[str], body: dict, request_timeout: float,
                swapper: Swapper | None = None) -> Phase:
    """``concurrency`` clients, each asking one question at a time until ``seconds`` have passed; with ``swapper``
    swapping the knowledge base first and then alongside. Bounded: requests in flight at the end get
    ``request_timeout`` s; anything still running after that is cancelled and counted as an error."""
    import httpx

    phase, turn = Phase(seconds), iter(range(10**12))
    limits = httpx.Limits(max_connections=concurrency + 1, max_keepalive_connections=concurrency + 1)
    async with httpx.AsyncClient(base_url=url, timeout=request_timeout, limits=limits) as client:
        if swapper is not None:
            await swapper.first(client)
        start = time.perf_counter()
        deadline = start + seconds

        async def one_client():
            while time.perf_counter() < deadline:
                question = questions[next(turn) % len(questions)]
                sent = time.perf_counter()
                try:
                    response = await client.post("/v1/ask", json={"question": question, **body})
                    end = time.perf_counter()
                    answer = parse_answer(response)
                except (httpx.HTTPError, ValueError) as error:
                    phase.errors[str(error) if isinstance(error, ValueError) else type(error).__name__] += 1
                    await asyncio.sleep(0.05)  # a failing server is not hammered in a tight loop
                    continue
                phase.latencies.append(end - sent)
                phase.in_window += end <= deadline
                phase.ends.append(end - start)
                phase.batch_sizes.append(answer[0])
                phase.answers.append(answer[1:4])
                phase.compute_s.append(answer[4])

        tasks = [asyncio.ensure_future(one_client()) for _ in range(concurrency)]
        if swapper is not None:
            tasks.append(asyncio.ensure_future(swapper.during(client, start, deadline)))
        done, pending = await asyncio.wait(tasks, timeout=seconds + request_timeout + 10)
        for task in pending:
            task.cancel()
            phase.errors["cancelled at the phase's bound"] += 1
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            if task.exception() is not None:
                phase.errors[type(task.exception()).__name__] += 1
    return phase


# --------------------------------------------------------------------------------------------------
# The two knowledge bases of the swap phase, and the offline bound


def document_encoder(args) -> str:
    """The encoder the served model's knowledge bases are built with: a run's (``--run``, or the shipped
    default these options mean) untrained document encoder, else ``--encoder`` or that of ``--kb``."""
    from openbook.rag.assemble import encoder_name, read_run_spec, shipped_default

    run = args.run or shipped_default(model=args.model, generator=args.generator, encoder=args.encoder,
                                      untrained=args.untrained)
    return read_run_spec(run)["encoder"] if run else encoder_name(args.encoder, args.kb)


def swap_books(args, root: Path) -> tuple[list[str], list[str]]:
    """Build two knowledge bases under ``root``; return their names and the questions to ask."""
    from openbook.models import load_encoder
    from openbook.rag.assemble import build_knowledge_base

    if Path(args.leaders).is_file():
        from openbook.experiments import hot_swap as hs

        rows = hs.read_leaders(args.leaders)
        old, new = (hs.holders_on(rows, date) for date in hs.ERAS)
        books = {"leaders-2016": hs.passages_for(old, "2016"), "leaders-2018": hs.passages_for(new, "2018")}
        questions = [hs.question(o) for o in hs.changed_offices(old, new)]
    else:
        from openbook.corpus import read_passages
        from openbook.data import demo_passages_path

        print(f"no {args.leaders}: the swap phase alternates two slices of the demo book", flush=True)
        passages, n = read_passages(demo_passages_path()), args.swap_passages
        first = [p for _, p in zip(range(2 * n), passages)]
        books = {"demo-a": first[:n], "demo-b": first[n:]}
        questions = []
    encoder = load_encoder(document_encoder(args))
    for name, passages in books.items():
        build_knowledge_base(passages, encoder, root / name, progress=False)
    return list(books), questions


def passage_ids_under(root: Path):
    """``passage_ids(name, version)`` for :func:`mixed_version_answers`: the passage ids of the knowledge
    base ``root/name`` at ``version`` (cached), or None if there is no such knowledge base."""
    from openbook.index import KnowledgeBase

    cache = {}

    def passage_ids(name, version):
        if (name, version) not in cache:
            path = root / Path(str(name)).name
            try:
                kb = KnowledgeBase.load(path, version=version)
            except Exception:  # noqa: BLE001 - an unknown name or version: the answer cannot be verified
                cache[name, version] = None
            else:
                cache[name, version] = {str(p.id) for p in kb}
                kb.store.close()
        return cache[name, version]

    return passage_ids


ARMS = ("batched", "unbatched", "offline_batched", "offline_single")


def schedule(rounds: int, arms: tuple[str, ...] = ARMS) -> list[tuple[str, ...]]:
    """The order of the compared measurements in each round: ``arms``, reversed every other round (A B B A),
    so that a drift of the machine's speed that is linear in time weighs on every arm alike."""
    return [arms if r % 2 == 0 else arms[::-1] for r in range(rounds)]


def pooled_rate(counts: list[tuple[int, float]]) -> float:
    """Answers per second over several ``(answers, seconds)`` turns."""
    return round(sum(n for n, _ in counts) / sum(s for _, s in counts), 3)


# --------------------------------------------------------------------------------------------------


def add_load_options(p: argparse.ArgumentParser, rounds_help: str, startup_timeout: float) -> None:
    """The model options and the flags this benchmark shares with bench/serve_ray_load.py."""
    from openbook.commands import options
    from openbook.presets import INTERACTIVE
    from openbook.serve import ServeConfig

    options.add_options(p, "run", "model", "kb", "generator", "untrained", "encoder", "k", "dtype",
                        preset=INTERACTIVE)
    p.add_argument("--seconds", type=float, default=60.0, help="length of each phase or turn (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=2, help=f"{rounds_help} (default: %(default)s)")
    p.add_argument("--max-batch-size", type=int, default=ServeConfig.max_batch_size,
                   help="each server's (and Ray replica's) batch cap; serve_load.py's offline batch too (default: the "
                        "server's, %(default)s)")
    p.add_argument("--max-wait-ms", type=float, default=None,
                   help=f"the server's batching wait (default: its own, {ServeConfig.max_wait_ms})")
    p.add_argument("--request-timeout", type=float, default=120.0,
                   help="seconds a request may take, client and server side (default: %(default)s)")
    p.add_argument("--startup-timeout", type=float, default=startup_timeout, help="seconds to wait for /readyz")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_options(p, "rounds of the concurrency-32 comparison (batched, unbatched, offline), each arm --seconds",
                     startup_timeout=600.0)
    p.add_argument("--swap-every", type=float, default=5.0, help="seconds between swaps (default: %(default)s)")
    p.add_argument("--questions", metavar="FILE", default=None, help="questions, one per line (default: built in)")
    p.add_argument("--leaders", metavar="CSV", default=DEFAULT_LEADERS,
                   help="office holders for the swap phase (default: %(default)s; without it: demo book slices)")
    p.add_argument("--swap-passages", type=int, default=500, help="passages per demo slice (without --leaders)")
    p.add_argument("--offline-only", action="store_true", help=argparse.SUPPRESS)  # step 4, in its own process
    args = p.parse_args(argv)
    if min(args.seconds, args.swap_every, args.max_batch_size, args.request_timeout, args.swap_passages,
           args.rounds) <= 0:
        p.error("--seconds, --swap-every, --max-batch-size, --request-timeout, --swap-passages and --rounds must be "
                "positive")
    return args


def serve_flags(args, max_batch_size: int) -> list[str]:
    """The flags of one `openbook serve` run: the model options, the batch cap, the timeout, the wait."""
    wait = ["--max-wait-ms", str(args.max_wait_ms)] if args.max_wait_ms is not None else []
    return [*model_flags(args), "--max-batch-size", str(max_batch_size), "--timeout-s", str(args.request_timeout),
            *wait]


def main(argv=None) -> None:
    from openbook.commands.options import DEFAULT_K

    args = parse_args(argv)
    print_header()
    quiet()
    questions = QUESTIONS if args.questions is None else [
        line.strip() for line in Path(args.questions).read_text(encoding="utf-8").splitlines() if line.strip()]
    if not questions:
        raise SystemExit(f"{args.questions}: no questions")
    settings, _ = ask_settings(args.k or DEFAULT_K)
    if args.offline_only:
        offline_worker(args, questions, (args.max_batch_size, 1), settings, sys.stdin, sys.stdout)
        return
    body, levels = ask_body(settings), {}
    token = f"bench-{random.getrandbits(64):016x}"

    def warm(server):  # one untimed question, as the offline bound has one untimed batch
        warm_up(server, questions[0], body, args.request_timeout)

    def drive_phase(server, concurrency, qs, swapper=None):
        return asyncio.run(drive(server.url, concurrency, args.seconds, qs, body, args.request_timeout, swapper))

    def report(name, figures):
        levels[name] = figures
        print(f"{name:14s} {json.dumps(figures)}", flush=True)

    windows = {"batched": [], "unbatched": []}
    turns = {"offline_batched": [], "offline_single": []}
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        root, log = Path(tmp) / "kb-root", Path(tmp) / "server.log"
        names, swap_questions = swap_books(args, root)
        batched = [*serve_flags(args, args.max_batch_size), "--kb-root", str(root)]
        with Server(batched, log, args.startup_timeout, env={ADMIN_TOKEN_ENV: token}) as server:
            warm(server)
            for concurrency in LEVELS[:-1]:
                report(f"c{concurrency}", phase_figures(drive_phase(server, concurrency, questions), concurrency))
            # Concurrency 32: the batched server, a server with batching off and rag.ask offline, each loaded once
            # in its own process and idle while another is measured, in alternating rounds (schedule)
            with Server(serve_flags(args, 1), log, args.startup_timeout) as unbatched, \
                    OfflineBound(argv if argv is not None else sys.argv[1:], log,
                                 max(args.startup_timeout, 20 * args.seconds)) as offline:
                warm(unbatched)
                for r, arms in enumerate(schedule(args.rounds)):
                    for arm in arms:
                        if arm in windows:
                            phase = drive_phase(server if arm == "batched" else unbatched, TOP, questions)
                            windows[arm].append(phase)
                            done = f"{phase_figures(phase, TOP)['qps']} answers/s"
                        else:
                            size = args.max_batch_size if arm == "offline_batched" else 1
                            turns[arm].append(offline.turn(size))
                            done = f"{turns[arm][-1][0] / turns[arm][-1][1]:.3f} answers/s"
                        print(f"round {r + 1} {arm:16s} {done}", flush=True)
            report(f"c{TOP}", pooled_figures(windows["batched"], TOP))
            report(f"c{TOP}_unbatched", pooled_figures(windows["unbatched"], TOP))
            # Hot swap, last: it leaves the server on one of the two swap books
            swapper = Swapper(names, args.swap_every, token)
            swap_phase = drive_phase(server, TOP, swap_questions or questions, swapper)
            report(f"c{TOP}_swap", phase_figures(swap_phase, TOP))
        swaps = swapper.counts
        mixed = mixed_version_answers(swap_phase.answers, passage_ids_under(root))
        print(f"swaps {swaps['swaps']} (failed {swaps['swap_errors']}), mixed-version answers {mixed}", flush=True)
    bound, single = pooled_rate(turns["offline_batched"]), pooled_rate(turns["offline_single"])
    print(f"offline rag.ask in batches of {args.max_batch_size}: {bound} answers/s; one at a time: {single}", flush=True)
    per_round = {  # each round's own ratios: how far the machine's drift moves them
        "batching_speedup": [_ratio(b, u) for b, u in zip(levels[f"c{TOP}"].get("rounds_qps", []),
                                                          levels[f"c{TOP}_unbatched"].get("rounds_qps", []))],
        "server_efficiency": [_ratio(b, n / t) for b, (n, t) in zip(levels[f"c{TOP}"].get("rounds_qps", []),
                                                                    turns["offline_batched"])],
        "offline_batching_speedup": [_ratio(nb / tb, ns / ts) for (nb, tb), (ns, ts) in
                                     zip(turns["offline_batched"], turns["offline_single"])]}
    result = result_line(levels, offline_qps=bound, swaps=swaps["swaps"], swap_errors=swaps["swap_errors"],
                         mixed=mixed, extra={
                             # the most batching can gain here, whatever the server does
                             "offline_single_qps": single, "offline_batching_speedup": _ratio(bound, single),
                             "rounds": args.rounds, "per_round": per_round if args.rounds > 1 else None,
                             "settings": {**settings, "dtype": args.dtype, "max_batch_size": args.max_batch_size,
                                          "max_wait_ms": args.max_wait_ms, "seconds": args.seconds,
                                          "swap_every": args.swap_every, "model_flags": model_flags(args)},
                             "questions": len(questions), "swap_books": names, "swap_questions": len(swap_questions),
                             "cpu_count": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2)})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
