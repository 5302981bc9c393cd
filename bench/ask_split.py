"""Where ``rag.ask``'s time goes, one question at a time against one batch: prefill vs decoding steps.

Why batching gains what it gains (issue 11's load benchmark, bench/serve_load.py): the generator's forward calls
are timed, split into prefill (more than one new token per row: the prompts, passage and question) and decoding
steps (one new token per row). The first ``--questions`` of bench/ask_latency.py's questions are answered with
``openbook ask``'s defaults, one at a time and then in one batch, ``--rounds`` times each (after one untimed batch).

Usage:  PYTHONPATH=. python bench/ask_split.py [--questions 16] [--rounds 2] [model options of openbook ask]

It ends with one JSON line: per mode (``single``, ``batched``) the best round's ``total_s``, ``prefill_s``,
``decode_s``, ``prefill_tokens`` (rows x new tokens, padding included) and forward ``calls``; and the ratios
``total_speedup``, ``prefill_speedup``, ``decode_speedup`` (single over batched) and ``prefill_share_batched``.
"""

from __future__ import annotations

import argparse
import json
import time

from _common import print_header, quiet
from ask_latency import QUESTIONS, ask_settings


class ForwardTimer:
    """Wraps ``model.forward``: seconds, calls and row-tokens of prefill and of decoding steps."""

    def __init__(self, model):
        self.inner = model.forward
        self.reset()
        model.forward = self

    def reset(self) -> None:
        self.stats = {kind: {"s": 0.0, "calls": 0, "tokens": 0} for kind in ("prefill", "decode")}

    def __call__(self, *args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs["inputs_embeds"]
        start = time.perf_counter()
        out = self.inner(*args, **kwargs)
        entry = self.stats["prefill" if ids.shape[1] > 1 else "decode"]
        entry["s"] += time.perf_counter() - start
        entry["calls"] += 1
        entry["tokens"] += ids.shape[0] * ids.shape[1]
        return out


def main() -> None:
    from openbook.commands import options

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    from openbook.presets import INTERACTIVE

    # openbook ask's (and openbook serve's) compute type, as bench/serve_load.py's: not load_model's float32
    options.add_options(p, "model", "run", "kb", "generator", "untrained", "encoder", "k", "dtype", "device",
                        preset=INTERACTIVE)
    p.add_argument("--questions", type=int, default=16, help="questions, and the batch size (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds of each mode (default: %(default)s)")
    args = p.parse_args()
    if not 1 <= args.questions <= len(QUESTIONS) or args.rounds < 1:
        p.error(f"--questions must be 1..{len(QUESTIONS)} and --rounds positive")
    quiet()
    print_header()
    rag = options.model_from_args(args)
    settings, _ = ask_settings(args.k or 5)
    questions = QUESTIONS[:args.questions]
    timer = ForwardTimer(rag.generator.model)
    rag.ask(questions[:4], **settings)  # untimed warm-up
    best = {}
    for mode, size in (("single", 1), ("batched", len(questions))):
        for _ in range(args.rounds):
            timer.reset()
            start = time.perf_counter()
            for i in range(0, len(questions), size):
                rag.ask(questions[i:i + size], **settings)
            total = time.perf_counter() - start
            row = {"total_s": round(total, 2)}
            for kind, entry in timer.stats.items():
                row.update({f"{kind}_s": round(entry["s"], 2), f"{kind}_calls": entry["calls"],
                            f"{kind}_tokens": entry["tokens"]})
            print(f"{mode:8s} {json.dumps(row)}", flush=True)
            if mode not in best or total < best[mode]["total_s"]:
                best[mode] = row
    single, batched = best["single"], best["batched"]
    print(json.dumps({
        **best, "questions": len(questions), "settings": settings, "dtype": args.dtype,
        "parameter_dtype": str(next(rag.generator.model.parameters()).dtype).removeprefix("torch."),
        "total_speedup": round(single["total_s"] / batched["total_s"], 2),
        "prefill_speedup": round(single["prefill_s"] / batched["prefill_s"], 2),
        "decode_speedup": round(single["decode_s"] / batched["decode_s"], 2),
        "prefill_share_batched": round(batched["prefill_s"] / batched["total_s"], 2),
    }))


if __name__ == "__main__":
    main()
