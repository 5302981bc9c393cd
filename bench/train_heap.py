"""``openbook train``'s heap setting, A/B: step time, CPU time and peak RSS with and without it.

``openbook train`` fixes glibc's mmap threshold (``openbook/train/heap.py``) so that freed activations leave
the process at once and its peak RSS stays what one step holds. Mapping every block of a megabyte or more on
its own costs page faults (system time). This runs the same short training command several times, the
variants interleaved (A B C, then C B A, ...), each in its own process:

* ``glibc``: glibc's own dynamic threshold (``map_large_blocks`` made a no-op);
* ``mmap``: what ``openbook train`` does (a fixed threshold of ``--threshold-mib``, default 1 MiB); ``mmapN``, e.g.
  ``mmap4``: the same with a threshold of N MiB;
* ``trim``: glibc's dynamic threshold, and ``malloc_trim(0)`` after every optimiser step, which hands the heap's
  free pages back to the system once a step instead of mapping each block.

Each run records its steps' wall seconds (around ``_optimiser_step``), its user and system CPU seconds and its
peak RSS (``ru_maxrss``) from inside the process, and its losses: the variants must train the same model.

Usage:  PYTHONPATH=. python bench/train_heap.py --kb $OPENBOOK_CACHE/kb/wiki2015 \\
            --train runs/data/open-book-train-answerable.jsonl [--steps 12] [--repeats 2] [--variants glibc,mmap,mmap4,trim]

It prints the CPU and ends with one JSON line: per variant the median step seconds (after the first step), the
median run's CPU seconds and peak RSS, and ``mmap_vs_glibc_step`` / ``trim_vs_glibc_step`` (ratios of median step
seconds; above 1 is slower; likewise for any ``mmapN``) and ``same_losses``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import print_header

VARIANTS = ("glibc", "mmap", "trim")

# Runs inside the training process: patch the variant in, time the steps, report at exit.
_WRAPPER = r"""
import atexit, json, resource, sys, time
import openbook.train.heap as heap
import openbook.train.trainer as trainer
variant, threshold, report = sys.argv[1], int(sys.argv[2]), sys.argv[3]
libc = heap._libc()
if variant.startswith("mmap"):
    real = heap.map_large_blocks
    heap.map_large_blocks = lambda *a, **k: real(threshold)
else:
    heap.map_large_blocks = lambda *a, **k: False
steps, losses = [], []
step = trainer._optimiser_step
def timed(*args, **kwargs):
    start = time.perf_counter()
    loss = step(*args, **kwargs)
    if variant == "trim":
        libc.malloc_trim(0)
    steps.append(time.perf_counter() - start)
    losses.append(float(loss))
    return loss
trainer._optimiser_step = timed
def done():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(report, "w") as f:
        json.dump({"steps": steps, "losses": losses, "user_s": usage.ru_utime, "sys_s": usage.ru_stime,
                   "peak_rss_kb": usage.ru_maxrss}, f)
atexit.register(done)
from openbook.cli import main
sys.argv = ["openbook"] + sys.argv[4:]
sys.exit(main())
"""


def train_command(args, out: str) -> list[str]:
    command = ["train", "--model", "rag-sequence", "--train", args.train, "--lr-schedule", "linear",
               "--warmup-steps", "10", "--learn-scale", "--batch-size", "1", "--grad-accumulation", "4",
               "--k", "5", "--max-steps", str(args.steps), "--seed", "0", "--lora-dropout", "0",
               "--lr-generator", "3e-4", "--freeze-retriever", "--init", "default", "--out", out]
    return command + (["--kb", args.kb] if args.kb else [])


def threshold_bytes(variant: str, default_mib: float) -> int | None:
    """The mmap threshold a variant sets (``mmap``: ``default_mib``; ``mmapN``: N MiB), None for the others;
    ValueError for a name that is no variant."""
    if variant in ("glibc", "trim"):
        return None
    if variant == "mmap":
        return int(default_mib * (1 << 20))
    if variant.startswith("mmap"):
        try:
            return int(float(variant[4:]) * (1 << 20))
        except ValueError:
            pass
    raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)} or mmapN (N MiB)")


def run_once(args, variant: str, wrapper: Path, work: Path, index: int) -> dict:
    out = work / f"{variant}-{index}"
    report = work / f"{variant}-{index}.json"
    threshold = threshold_bytes(variant, args.threshold_mib) or 0
    command = [sys.executable, str(wrapper), variant, str(threshold), str(report), *train_command(args, str(out))]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{variant} run {index} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(report.read_text())
    steps = result["steps"][1:] or result["steps"]  # the first step also pays the first allocations
    result["median_step_s"] = statistics.median(steps)
    print(f"  {variant:6s} run {index}: median step {result['median_step_s']:.2f} s, user {result['user_s']:.0f} s, "
          f"sys {result['sys_s']:.0f} s, peak RSS {result['peak_rss_kb'] / 1e6:.2f} GB", flush=True)
    return result


def summarise(results: dict[str, list[dict]]) -> dict:
    """Per variant the medians over its runs (step seconds, CPU seconds, peak RSS); each variant's step time
    against ``glibc``'s; and whether every run trained the same losses."""
    summary = {}
    for name, runs in results.items():
        summary[name] = {
            "median_step_s": round(statistics.median(r["median_step_s"] for r in runs), 3),
            "user_s": round(statistics.median(r["user_s"] for r in runs), 1),
            "sys_s": round(statistics.median(r["sys_s"] for r in runs), 1),
            "peak_rss_kb": int(statistics.median(r["peak_rss_kb"] for r in runs)),
        }
    losses = [r["losses"] for runs in results.values() for r in runs]
    figures = {"variants": summary, "same_losses": all(x == losses[0] for x in losses)}
    if "glibc" in summary:
        for name in summary:
            if name != "glibc":
                figures[f"{name}_vs_glibc_step"] = round(summary[name]["median_step_s"] / summary["glibc"]["median_step_s"], 3)
    return figures


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kb", default=None, metavar="DIR", help="knowledge base (default: the default model's)")
    p.add_argument("--train", required=True, metavar="FILE", help="training questions (openbook train --train)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threshold-mib", type=float, default=1.0, help="the mmap variant's threshold")
    p.add_argument("--variants", default=",".join(VARIANTS))
    args = p.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    for name in names:
        try:
            threshold_bytes(name, args.threshold_mib)
        except ValueError as error:
            p.error(str(error))
    print_header()
    print(f"training:      {args.steps} steps of {' '.join(train_command(args, 'OUT'))}")
    results: dict[str, list[dict]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="train_heap-") as tmp:
        work = Path(tmp)
        wrapper = work / "wrapper.py"
        wrapper.write_text(_WRAPPER)
        for repeat in range(args.repeats):
            for name in names if repeat % 2 == 0 else names[::-1]:
                results[name].append(run_once(args, name, wrapper, work, repeat))
    figures = summarise(results)
    figures = {"steps": args.steps, "repeats": args.repeats, "threshold_mib": args.threshold_mib, **figures}
    summary = figures["variants"]
    print()
    for name, s in summary.items():
        print(f"{name:6s} median step {s['median_step_s']:.2f} s   user {s['user_s']:.0f} s   sys {s['sys_s']:.0f} s   "
              f"peak RSS {s['peak_rss_kb']:,} kB")
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
