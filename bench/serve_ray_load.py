"""`openbook serve --ray` under load, against `openbook serve` on the same machine: what Ray Serve replicas gain or cost.

Two servers start as subprocesses on free loopback ports, each loading the model with the same options and batch
cap: ``openbook serve`` (one process; its torch uses every core) and ``openbook serve --ray --replicas N`` (a local
Ray started by that process: N replicas of 1 CPU each, so one torch thread each, behind Ray Serve's HTTP proxy).
After one untimed question each, ``--concurrency`` clients (bench/serve_load.py's: one question at a time, its 30
questions in turn, ``openbook ask``'s defaults) drive one server for ``--seconds`` while the other sits idle, in
alternating rounds (A B, then B A; ``--rounds``), because this VM's speed drifts by 5-15% over minutes. Answers per
second are serve_load's steady rate, pooled over the rounds.

Usage:  PYTHONPATH=. python bench/serve_ray_load.py [--replicas 2] [--concurrency 32] [--seconds 60] [--rounds 2]
        [model options of openbook ask]

It ends with one JSON line: ``qps_single``, ``qps_ray``, ``ray_vs_single`` (their ratio), ``per_round`` ratios,
each server's pooled figures (``levels``: latencies, batch sizes, errors), ``errors`` and ``replicas``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

from _common import print_header, quiet
from ask_latency import QUESTIONS, ask_settings
from serve_load import (
    Server,
    _ratio,
    add_load_options,
    ask_body,
    drive,
    phase_figures,
    pooled_figures,
    serve_flags,
    warm_up,
)
from serve_load import schedule as alternating

ARMS = ("single", "ray")


def schedule(rounds: int) -> list[tuple[str, ...]]:
    """The order of the two servers in each round: A B, then B A, and so on (serve_load's schedule)."""
    return alternating(rounds, ARMS)


def result_line(levels: dict, replicas: int, extra: dict) -> dict:
    """The final JSON line from the pooled figures of each server (``levels``: keys ``single`` and ``ray``)."""
    single, ray = levels["single"], levels["ray"]
    per_round = [_ratio(r, s) for r, s in zip(ray.get("rounds_qps", []), single.get("rounds_qps", []))]
    return {"qps_single": single["qps"], "qps_ray": ray["qps"], "ray_vs_single": _ratio(ray["qps"], single["qps"]),
            "per_round": per_round or None, "errors": single["errors"] + ray["errors"], "replicas": replicas,
            "levels": levels, **extra}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_options(p, "rounds of the comparison", startup_timeout=900.0)
    p.add_argument("--replicas", type=int, default=2, help="Ray Serve replicas, 1 CPU each (default: %(default)s)")
    p.add_argument("--concurrency", type=int, default=32, help="concurrent clients (default: %(default)s)")
    args = p.parse_args(argv)
    if min(args.replicas, args.concurrency, args.seconds, args.rounds, args.max_batch_size, args.request_timeout) <= 0:
        p.error("--replicas, --concurrency, --seconds, --rounds, --max-batch-size and --request-timeout must be "
                "positive")
    if args.replicas > (os.cpu_count() or 1):
        p.error(f"--replicas {args.replicas} needs {args.replicas} CPUs (1 each); this machine has {os.cpu_count()}")
    return args


def main(argv=None) -> None:
    from openbook.commands.options import DEFAULT_K

    args = parse_args(argv)
    print_header()
    quiet()
    settings, _ = ask_settings(args.k or DEFAULT_K)
    body = ask_body(settings)
    flags = serve_flags(args, args.max_batch_size)
    windows = {arm: [] for arm in ARMS}

    with tempfile.TemporaryDirectory(prefix="serve-ray-load-") as tmp:
        log = Path(tmp) / "server.log"
        with Server(flags, log, args.startup_timeout) as single, \
                Server([*flags, "--ray", "--replicas", str(args.replicas)], log, args.startup_timeout) as ray:
            servers = {"single": single, "ray": ray}
            for server in servers.values():
                warm_up(server, QUESTIONS[0], body, args.request_timeout)
            for r, arms in enumerate(schedule(args.rounds)):
                for arm in arms:
                    phase = asyncio.run(drive(servers[arm].url, args.concurrency, args.seconds, QUESTIONS, body,
                                              args.request_timeout))
                    windows[arm].append(phase)
                    print(f"round {r + 1} {arm:6s} {phase_figures(phase, args.concurrency)['qps']} answers/s",
                          flush=True)
    levels = {arm: pooled_figures(windows[arm], args.concurrency) for arm in ARMS}
    for arm, figures in levels.items():
        print(f"{arm:6s} {json.dumps(figures)}", flush=True)
    print(json.dumps(result_line(levels, args.replicas, extra={
        "settings": {**settings, "dtype": args.dtype, "max_batch_size": args.max_batch_size,
                     "max_wait_ms": args.max_wait_ms, "seconds": args.seconds, "rounds": args.rounds,
                     "concurrency": args.concurrency},
        "questions": len(QUESTIONS), "cpu_count": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2),
        "python": sys.version.split()[0]})))


if __name__ == "__main__":
    main()
