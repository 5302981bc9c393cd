"""``openbook serve``: load the model once and answer over HTTP (FastAPI + uvicorn, :mod:`openbook.serve`).

The model is built by :func:`openbook.commands.options.model_from_args` (as ``openbook ask`` builds it) in the
background while the server already answers ``/healthz``; ``/readyz`` turns 200 when it is loaded. SIGTERM
or Ctrl-C stops accepting connections, lets the requests in flight finish (at most ``--drain-s``) and exits.
With ``--ray [ADDRESS]`` the same app runs as a Ray Serve deployment of ``--replicas`` model replicas
(:mod:`openbook.serve.ray_serve`); SIGTERM or Ctrl-C then shuts Ray Serve down.

The model loads and computes in the process's main thread, where PyTorch ran faster than in another thread
(:mod:`openbook.serve.worker`); uvicorn serves HTTP from a second thread, and the main thread's signal handlers tell it
to shut down.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

from openbook.commands import options, positive_int
from openbook.errors import InputError
from openbook.presets import INTERACTIVE
from openbook.serve.config import ServeConfig

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def register(subparsers) -> None:
    """Add the ``serve`` command to the top-level ``subparsers``."""
    serve = subparsers.add_parser(
        "serve",
        help="answer questions over HTTP: a JSON API with streaming, a web page, live knowledge-base swaps",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Load the model once and serve it: POST /v1/ask (JSON, or server-sent events with\n"
            '"stream": true), /v1/retrieve, GET /v1/kb, admin edits and POST /v1/kb/swap (with a bearer\n'
            "token), /healthz, /readyz, /metrics, the API's description at /docs and a web page at /."
        ),
        epilog=(
            "examples:\n"
            "  openbook serve --port 8000\n"
            "  openbook serve --kb-root kbs --kb kbs/leaders-2016 --admin-token secret\n"
            "  openbook serve --ray --replicas 2 --kb wiki-kb-4      # 2 model replicas on a local Ray\n"
            "  curl -s localhost:8000/v1/ask -H 'Content-Type: application/json' \\\n"
            "       -d '{\"question\": \"Who wrote Hamlet?\"}'"
        ),
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s, this machine only)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port (default: %(default)s)")
    options.add_options(serve, "model", "run", "kb", "generator", "untrained", "encoder", "k", "dtype", "device",
                        preset=INTERACTIVE)
    serve.add_argument("--kb-root", metavar="DIR", default=None,
                       help="folder of knowledge bases that POST /v1/kb/swap may switch to (by folder name)")
    serve.add_argument("--admin-token", metavar="TOKEN", default=None,
                       help="bearer token for edits and swaps (default: $OPENBOOK_ADMIN_TOKEN; without one the "
                       "server is read-only)")
    serve.add_argument("--max-batch-size", type=positive_int, default=ServeConfig.max_batch_size, metavar="N",
                       help="most questions answered in one model batch (default: %(default)s; 1 turns batching off)")
    serve.add_argument("--max-wait-ms", type=float, default=ServeConfig.max_wait_ms, metavar="MS",
                       help="how long the first request of a batch waits for others (default: %(default)s)")
    serve.add_argument("--max-queue", type=positive_int, default=ServeConfig.max_queue, metavar="N",
                       help="requests waiting beyond this get 503 with Retry-After (default: %(default)s)")
    serve.add_argument("--timeout-s", type=_positive_float, default=ServeConfig.timeout_s, metavar="S",
                       help="a request not answered in this time gets 504 (default: %(default)s)")
    serve.add_argument("--max-question-chars", type=positive_int, default=ServeConfig.max_question_chars, metavar="N",
                       help="longest question accepted (default: %(default)s)")
    serve.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                       help="allow browser pages from ORIGIN to call the API (repeatable; default: none)")
    serve.add_argument("--drain-s", type=_positive_float, default=30.0, metavar="S",
                       help="on SIGTERM, how long requests in flight may take to finish (default: %(default)s)")
    serve.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="serve the same app as a Ray Serve deployment of --replicas model replicas, on the Ray "
                       "cluster at ADDRESS (e.g. auto or ray://head:10001), or without ADDRESS on a local Ray started "
                       "here; a sharded --kb is served by one Ray actor per shard that all replicas share")
    serve.add_argument("--replicas", type=int, default=None, metavar="N",
                       help="model replicas with --ray, each loading the model once and reserving 1 CPU (default: 1; "
                       "with more than 1, admin edits and swaps answer 409: each would reach only one replica)")
    serve.set_defaults(handler=_cmd_serve, subparser=serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise InputError(f"--port must be between 1 and 65535, got {args.port}")
    if args.max_wait_ms < 0:
        raise InputError(f"--max-wait-ms must not be negative, got {args.max_wait_ms}")
    if args.kb_root is not None and not Path(args.kb_root).is_dir():
        raise InputError(f"--kb-root {args.kb_root} is not a folder")
    if args.kb is not None and not Path(args.kb).is_dir():
        raise InputError(f"knowledge base not found: {args.kb}")
    if args.replicas is not None and args.ray is None:
        raise InputError("--replicas needs --ray (without it one process serves the model)")
    if args.replicas is not None and args.replicas < 1:
        raise InputError(f"--replicas must be at least 1, got {args.replicas}")
    token = args.admin_token or os.environ.get("OPENBOOK_ADMIN_TOKEN") or None
    if args.host not in LOOPBACK:
        warnings.warn(f"listening on {args.host}: anyone who can reach this address can ask questions"
                      + ("" if token else " (edits stay off: no admin token)"), stacklevel=2)

    if args.ray is not None:
        return _serve_on_ray(args, token)

    import signal
    import threading

    import uvicorn

    from openbook.serve import create_app
    from openbook.serve.worker import ModelThread

    failed: list[BaseException] = []

    def load():
        try:
            rag = options.model_from_args(args)
        except Exception as error:  # a model that cannot load ends the server with the loader's one-line error
            failed.append(error)
            server.should_exit = True
            raise
        print(f"openbook: model loaded; answering at http://{args.host}:{args.port}/ (API: /docs)", file=sys.stderr)
        return rag

    config = ServeConfig(kb_root=args.kb_root, admin_token=token, max_batch_size=args.max_batch_size,
                         max_wait_ms=args.max_wait_ms, max_queue=args.max_queue, timeout_s=args.timeout_s,
                         max_question_chars=args.max_question_chars, cors_origins=args.cors_origin, load=load,
                         host=(model_thread := ModelThread()))
    app = create_app(config)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, timeout_graceful_shutdown=args.drain_s,
                                           log_level="info", access_log=False))
    exits: list = []  # uvicorn's sys.exit in its thread (e.g. the port is taken): this process's exit

    def serve_http() -> None:
        try:
            server.run()
        except SystemExit as stop:
            exits.append(stop.code)

    http = threading.Thread(target=serve_http, name="openbook-http")

    def end_the_model_loop_with_http() -> None:  # however uvicorn's thread ends, the main thread is let go
        http.join()
        worker = app.state.server.worker
        if worker is not None:
            worker.stop(timeout=0)

    # uvicorn listens to signals only in the main thread, which here computes: its handler is installed here
    previous = {sig: signal.signal(sig, server.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        http.start()
        threading.Thread(target=end_the_model_loop_with_http, name="openbook-http-watch", daemon=True).start()
        model_thread.run(http.is_alive)
        http.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failed:
        raise failed[0]
    if exits and exits[0]:
        raise SystemExit(exits[0])
    return 0


MODEL_OPTIONS = ("model", "run", "kb", "generator", "untrained", "encoder", "k", "dtype", "device")  # model_from_args reads


def _serve_on_ray(args: argparse.Namespace, token: str | None) -> int:
    """``--ray``: deploy the app on Ray Serve, wait for SIGTERM or Ctrl-C, shut Ray Serve down."""
    import functools
    import signal
    import time

    from openbook.serve import ray_serve

    def interrupt(*_):
        raise KeyboardInterrupt

    started = ray_serve.connect(args.ray or None)
    previous = signal.signal(signal.SIGTERM, interrupt)  # after ray.init, which sets its own handler
    shared = None
    try:
        model_args = argparse.Namespace(**{name: getattr(args, name) for name in MODEL_OPTIONS})
        shared = ray_serve.shared_knowledge_base(args.kb, args.ray or None)
        if shared is not None:
            model_args.kb = shared  # the replicas get handles to these shard actors (pickled with the loader)
        config = ServeConfig(kb_root=args.kb_root, admin_token=token, max_batch_size=args.max_batch_size,
                             max_wait_ms=args.max_wait_ms, max_queue=args.max_queue, timeout_s=args.timeout_s,
                             max_question_chars=args.max_question_chars, cors_origins=args.cors_origin,
                             load=functools.partial(options.model_from_args, model_args))
        replicas = args.replicas or 1
        print(f"openbook: starting {replicas} Ray Serve replica(s); each loads the model", file=sys.stderr)
        ray_serve.start(config, replicas, args.host, args.port)
        print(f"openbook: {replicas} replica(s) answering at http://{args.host}:{args.port}/ (API: /docs)"
              + ("; admin writes are off with several replicas" if replicas > 1 and token else ""), file=sys.stderr)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("openbook: shutting Ray Serve down", file=sys.stderr)
    finally:
        ray_serve.stop(started, shared)
        signal.signal(signal.SIGTERM, previous)
    return 0
