"""How fast this CPU multiplies the generator's matrices as the number of rows grows: why batching prefill gains little.

A prefill multiplies every prompt token's hidden state by each linear layer's weights, so one question's prompts
(~130 tokens a passage) already give a product of a few hundred rows; a batch of questions stacks more rows into
the same products. If the rate (GFLOP/s) with 256 rows is already that with 2048, stacking gains nothing, and what
batching saves is the decoding steps (one row per answer) and per-call overhead (bench/ask_split.py).

The shapes are SmolLM2-135M's (the shipped generator): hidden 576, MLP 1536, 3 key/value heads of 64 (192), in
``--dtype`` (default bfloat16, what ``openbook ask`` and ``openbook serve`` compute in on AVX-512 BF16 or AMX CPUs).
Each (shape, rows) is timed ``--repeats`` times after a warm-up, for at least ~4 GFLOP, best of ``--rounds``.

Usage:  PYTHONPATH=. python bench/gemm_rows.py [--rows 64,256,1024,2048] [--dtype bfloat16]

It ends with one JSON line: ``gflops`` per shape and row count, and ``ratio_2048_vs_256`` per shape (rate with the
largest row count over that with 256 rows).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from _common import print_header

# (in, out) of the linear layers of one SmolLM2-135M block: q/o projections, k/v projections, MLP up/gate, MLP down
SHAPES = {"q_o": (576, 576), "k_v": (576, 192), "up_gate": (576, 1536), "down": (1536, 576)}


def rate(rows: int, fan_in: int, fan_out: int, dtype: torch.dtype, rounds: int) -> float:
    """GFLOP/s of ``linear(x (rows, fan_in), w (fan_out, fan_in))``: the best of ``rounds`` timed loops."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, fan_in, generator=generator).to(dtype)
    w = torch.randn(fan_out, fan_in, generator=generator).to(dtype)
    flop = 2 * rows * fan_in * fan_out
    repeats = max(3, int(4e9 / flop))
    for _ in range(3):
        torch.nn.functional.linear(x, w)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            torch.nn.functional.linear(x, w)
        best = min(best, (time.perf_counter() - start) / repeats)
    return flop / best / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="64,256,1024,2048", help="row counts, comma-separated (default: %(default)s)")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    p.add_argument("--rounds", type=int, default=3, help="timed loops per point, best kept (default: %(default)s)")
    args = p.parse_args()
    try:
        rows = [int(r) for r in args.rows.split(",")]
    except ValueError:
        p.error(f"--rows must be comma-separated integers, not {args.rows!r}")
    if not rows or min(rows) < 1 or args.rounds < 1 or 256 not in rows:
        p.error("--rows must be positive and include 256; --rounds positive")
    print_header()
    dtype = getattr(torch, args.dtype)
    gflops = {}
    for name, (fan_in, fan_out) in SHAPES.items():
        gflops[name] = {n: round(rate(n, fan_in, fan_out, dtype, args.rounds), 1) for n in rows}
        print(f"{name:8s} {fan_in:5d} -> {fan_out:5d}  " + "  ".join(f"{n:5d} rows {g:6.1f}" for n, g in
                                                               gflops[name].items()) + "  GFLOP/s", flush=True)
    top = max(rows)
    print(json.dumps({"dtype": args.dtype, "gflops": gflops,
                      f"ratio_{top}_vs_256": {name: round(g[top] / g[256], 3) for name, g in gflops.items()}}))


if __name__ == "__main__":
    main()
