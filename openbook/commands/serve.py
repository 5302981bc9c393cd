"""``openbook serve``: load the model once and answer over HTTP (FastAPI + uvicorn, :mod:`openbook.serve`).

The model is built by :func:`openbook.commands.options.model_from_args` (as ``openbook ask`` builds it) in the
background while the server already answers ``/healthz``; ``/readyz`` turns 200 when it is loaded. SIGTERM
or Ctrl-C stops accepting connections, lets the requests in flight finish (at most ``--drain-s``: those still
running then get 503 with Retry-After; an admin edit already committing is let finish) and exits.
With ``--ray [ADDRESS]`` the same app runs as a Ray Serve deployment of ``--replicas`` model replicas
(:mod:`openbook.serve.ray_serve`); SIGTERM or Ctrl-C then shuts Ray Serve down.

The model loads and computes in the process's main thread, where PyTorch ran faster than in another thread
(:mod:`openbook.serve.worker`); uvicorn serves HTTP from a second thread, and the main thread's signal handlers tell it
to shut down.
"""

from __future__ import annotations

import _thread
import argparse
import gc
import os
import sys
import warnings
from pathlib import Path

from openbook.commands import finite_float, nonnegative_float, options, positive_int
from openbook.errors import InputError
from openbook.presets import INTERACTIVE
from openbook.serve.config import ServeConfig

LOOPBACK = ("127.0.0.1", "localhost", "::1")
TOKEN_ENV = "OPENBOOK_ADMIN_TOKEN"
CANCEL_AFTER_DRAIN_S = 2.0  # uvicorn cancels what is left this long after the drain (an edit still committing)
ABANDON_AFTER_S = 1.0  # once HTTP has stopped, a model computation still running is interrupted after this long


def _positive_float(text: str) -> float:
    """argparse type: a finite number above 0 (``nan`` and ``inf`` refused by :func:`finite_float`)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text!r}")
    return value


def _port(text: str) -> int:
    """argparse type: a TCP port, 1 to 65535."""
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65535, got {value}")
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
            "  openbook serve --kb-root kbs --kb kbs/leaders-2016 --admin-token-file ~/.openbook-token\n"
            "  openbook serve --ray --replicas 2 --kb wiki-kb-4      # 2 model replicas on a local Ray\n"
            "  curl -s localhost:8000/v1/ask -H 'Content-Type: application/json' \\\n"
            "       -d '{\"question\": \"Who wrote Hamlet?\"}'"
        ),
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s, this machine only)")
    serve.add_argument("--port", type=_port, default=8000, help="TCP port (default: %(default)s)")
    options.add_options(serve, "model", "run", "kb", "generator", "untrained", "encoder", "k", "dtype", "device",
                        preset=INTERACTIVE)
    serve.add_argument("--kb-root", metavar="DIR", default=None,
                       help="folder of knowledge bases that POST /v1/kb/swap may switch to (by folder name)")
    serve.add_argument("--admin-token-file", metavar="FILE", default=None,
                       help=f"file holding the bearer token for edits and swaps (default: ${TOKEN_ENV}; without a "
                       "token the server is read-only)")
    serve.add_argument("--admin-token", metavar="TOKEN", default=None,
                       help=f"the token itself: visible to every user of this machine (ps), prefer ${TOKEN_ENV} or "
                       "--admin-token-file")
    serve.add_argument("--max-batch-size", type=positive_int, default=ServeConfig.max_batch_size, metavar="N",
                       help="most questions answered in one model batch (default: %(default)s; 1 turns batching off)")
    serve.add_argument("--max-wait-ms", type=nonnegative_float, default=ServeConfig.max_wait_ms, metavar="MS",
                       help="how long the first request of a batch waits for others (default: %(default)s)")
    serve.add_argument("--max-queue", type=positive_int, default=ServeConfig.max_queue, metavar="N",
                       help="requests waiting beyond this get 503 with Retry-After (default: %(default)s)")
    serve.add_argument("--timeout-s", type=_positive_float, default=ServeConfig.timeout_s, metavar="S",
                       help="a request not answered in this time gets 504 (default: %(default)s)")
    serve.add_argument("--max-question-chars", type=positive_int, default=ServeConfig.max_question_chars, metavar="N",
                       help="longest question accepted (default: %(default)s)")
    serve.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                       help="allow browser pages from ORIGIN to call the API (repeatable; default: none)")
    serve.add_argument("--max-body-bytes", type=positive_int, default=ServeConfig.max_body_bytes, metavar="N",
                       help="a request body larger than this is answered 413 without being read (default: %(default)s)")
    serve.add_argument("--drain-s", type=_positive_float, default=30.0, metavar="S",
                       help="on SIGTERM, how long requests in flight may take to finish; those still running then "
                       "get 503 with Retry-After (default: %(default)s)")
    serve.add_argument("--header-timeout-s", type=_positive_float, default=10.0, metavar="S",
                       help="a connection that has not sent a request's headers this long after opening or starting "
                       "the request is closed (default: %(default)s)")
    serve.add_argument("--keep-alive-s", type=_positive_float, default=5.0, metavar="S",
                       help="an idle connection is closed after this long between requests (default: %(default)s)")
    serve.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="serve the same app as a Ray Serve deployment of --replicas model replicas, on the Ray "
                       "cluster at ADDRESS (e.g. auto or ray://head:10001), or without ADDRESS on a local Ray started "
                       "here; a sharded --kb is served by one Ray actor per shard that all replicas share")
    serve.add_argument("--replicas", type=int, default=None, metavar="N",
                       help="model replicas with --ray, each loading the model once and reserving 1 CPU (default: 1; "
                       "with more than 1, admin edits and swaps answer 409: each would reach only one replica)")
    serve.set_defaults(handler=_cmd_serve, subparser=serve)


def admin_token(args: argparse.Namespace) -> str | None:
    """The admin token: from ``--admin-token-file``, else ``$OPENBOOK_ADMIN_TOKEN``, else ``--admin-token``."""
    if args.admin_token_file is not None and args.admin_token is not None:
        raise InputError("give the admin token once: --admin-token-file or --admin-token, not both")
    if args.admin_token_file is not None:
        path = Path(args.admin_token_file).expanduser()
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            raise InputError(f"--admin-token-file {args.admin_token_file}: cannot read it: "
                             f"{getattr(error, 'strerror', None) or error}") from None
        if not token or any(ch.isspace() for ch in token):
            raise InputError(f"--admin-token-file {args.admin_token_file}: must hold one token, without spaces")
        return token
    return os.environ.get(TOKEN_ENV) or args.admin_token or None


def _cmd_serve(args: argparse.Namespace) -> int:
    if args.kb_root is not None and not Path(args.kb_root).is_dir():
        raise InputError(f"--kb-root {args.kb_root} is not a folder")
    if args.kb is not None and not Path(args.kb).is_dir():
        raise InputError(f"knowledge base not found: {args.kb}")
    if args.replicas is not None and args.ray is None:
        raise InputError("--replicas needs --ray (without it one process serves the model)")
    if args.replicas is not None and args.replicas < 1:
        raise InputError(f"--replicas must be at least 1, got {args.replicas}")
    token = admin_token(args)
    if args.admin_token is not None:
        warnings.warn(f"--admin-token shows the token to every user of this machine (ps): prefer ${TOKEN_ENV} or "
                      "--admin-token-file", stacklevel=2)
    if args.host not in LOOPBACK:
        warnings.warn(f"listening on {args.host}: anyone who can reach this address can ask questions"
                      + ("" if token else " (edits stay off: no admin token)"), stacklevel=2)

    if args.ray is not None:
        return _serve_on_ray(args, token)

    import signal
    import threading

    import uvicorn

    from openbook.serve import create_app
    from openbook.serve.guards import DrainingServer, bind, http_protocol
    from openbook.serve.worker import ModelThread

    listening = bind(args.host, args.port)  # a taken port is one error line, before anything is announced
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
                         max_question_chars=args.max_question_chars, max_body_bytes=args.max_body_bytes,
                         cors_origins=args.cors_origin, load=load, host=(model_thread := ModelThread()))
    app = create_app(config)
    server = DrainingServer(uvicorn.Config(
        app, host=args.host, port=args.port, log_level="info", access_log=False,
        timeout_graceful_shutdown=args.drain_s + CANCEL_AFTER_DRAIN_S, timeout_keep_alive=args.keep_alive_s,
        http=http_protocol(args.header_timeout_s)), app.state.server, args.drain_s)
    exits: list = []  # uvicorn's sys.exit in its thread: this process's exit

    def serve_http() -> None:
        try:
            server.run(sockets=[listening])
        except SystemExit as stop:
            exits.append(stop.code)

    http = threading.Thread(target=serve_http, name="openbook-http")
    abandon = threading.Event()

    def end_the_model_loop_with_http() -> None:  # however uvicorn's thread ends, the main thread is let go
        http.join()
        worker = app.state.server.worker
        if worker is not None:
            worker.stop(timeout=ABANDON_AFTER_S)  # a batch still computing after the drain is abandoned
            if not worker.stopped:
                abandon.set()
                _thread.interrupt_main(signal.SIGTERM)

    def on_signal(sig, frame) -> None:
        if abandon.is_set():
            raise Abandoned()
        server.handle_exit(sig, frame)

    # uvicorn listens to signals only in the main thread, which here computes: its handler is installed here
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        http.start()
        threading.Thread(target=end_the_model_loop_with_http, name="openbook-http-watch", daemon=True).start()
        try:
            model_thread.run(http.is_alive)
        except Abandoned:
            pass
        http.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # the exit's last garbage collection walks every object torch and transformers made (seconds, on a busy machine);
    # the process is ending: its memory goes back to the system as a whole
    gc.freeze()
    if failed:
        raise failed[0]
    if exits and exits[0]:
        raise SystemExit(exits[0])
    return 0


class Abandoned(BaseException):
    """Raised in the main thread to end a model computation that outlived the drain (its request had a 503)."""


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
                             max_question_chars=args.max_question_chars, max_body_bytes=args.max_body_bytes,
                             cors_origins=args.cors_origin,
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
