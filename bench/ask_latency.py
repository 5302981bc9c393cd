"""Latency of the default `openbook ask` on this machine: cold start, warm time per question, peak memory.

* cold start: wall time from process start to the answer printed, of ``python -m openbook ask QUESTION
  --json`` run as a subprocess (after one untimed warm-up process, so the demo knowledge base is built
  and the files are in the page cache), median of ``--cold-runs``; the peak RSS of those processes
  (``getrusage(RUSAGE_CHILDREN).ru_maxrss``);
* cold retrieve: the same for ``python -m openbook retrieve QUESTION --json`` (the retriever alone: query
  encoder and knowledge base, no generator), its runs interleaved with the cold asks;
* warm latency: in this process, ``RAG.load()`` once with ask's ``--dtype`` default, then
  ``rag.ask([q])`` with ask's default settings (batch 1, k=5) for each of ``--questions`` fixed
  general-knowledge questions written below (none from ../shared/data): p50 and p95 of the per-question
  wall time; the same questions with the paper's settings (4 beams, Thorough decoding, 32 new tokens,
  float32: ``openbook eval``'s defaults, a second model) as the peer, and ask's settings on that float32
  model (what ``--dtype`` buys), and ask's settings with Fast decoding on ask's model (what Lazy decoding
  buys; its answers must be the same), all timed interleaved in the same run.

Targets (issue 10): warm p50 <= 1.0 s, cold start <= 10 s. With ``--kb DIR`` every process and model answers
from that knowledge base instead of the demo one (``openbook ask --kb DIR``, ``RAG.load(kb=DIR)``); the targets
are then issue 32's for a 650k-passage book: warm p50 <= 1.0 s, cold start <= 15 s.

Usage:  PYTHONPATH=. python bench/ask_latency.py [--kb DIR] [--questions 30] [--cold-runs 3] [--k 5]

It ends with one JSON line: ``warm_p50_s``, ``warm_p95_s``, ``cold_start_s``, ``cold_retrieve_s``, ``peak_rss_mb``,
``paper_p50_s``, ``paper_p95_s``, ``speedup_p50`` (paper p50 / warm p50), ``float32_p50_s`` and
``dtype_speedup_p50`` (ask's settings in float32 / in ask's dtype), ``fast_p50_s``, ``lazy_speedup_p50`` (Fast
decoding / ask's decoding) and ``same_as_fast_fraction``, ``dtype``, ``kb`` and the settings.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from _common import print_header, quiet

COLD_QUESTION = "Who got the first Nobel Prize in Physics?"
QUESTIONS = [
    "Who wrote Hamlet?",
    "Who painted the Mona Lisa?",
    "What is the capital of Australia?",
    "Who was the first president of the United States?",
    "What is the largest ocean on Earth?",
    "Who developed the theory of general relativity?",
    "What is the chemical symbol for gold?",
    "Who wrote Pride and Prejudice?",
    "In which country is the city of Kyoto?",
    "What is the tallest mountain in the world?",
    "Who composed the Fifth Symphony?",
    "What is the longest river in Africa?",
    "Who discovered penicillin?",
    "What language is spoken in Brazil?",
    "Who was the first person to walk on the Moon?",
    "What is the capital of Canada?",
    "Who wrote One Hundred Years of Solitude?",
    "Which planet is known as the Red Planet?",
    "Who invented the telephone?",
    "What is the currency of Japan?",
    "Who sculpted David?",
    "In which year did the Berlin Wall fall?",
    "What is the largest desert in Asia?",
    "Who wrote the Odyssey?",
    "What is the capital of Kenya?",
    "Who proposed the theory of evolution by natural selection?",
    "Which element has the atomic number 1?",
    "Who directed the film Psycho?",
    "What is the official language of Iran?",
    "Who founded the Mongol Empire?",
]
PAPER = {"num_beams": 4, "decoding": "thorough", "max_new_tokens": 32}  # with dtype float32
PAPER_DTYPE = "float32"


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between order statistics (numpy's default)."""
    if not values:
        raise ValueError("no values")
    if len(values) == 1:
        return float(values[0])
    if q == 50:
        return float(statistics.median(values))
    cuts = statistics.quantiles(values, n=100, method="inclusive")  # cuts[i] is the (i+1)-th percentile
    return float(cuts[int(q) - 1]) if 0 < q < 100 else float(min(values) if q <= 0 else max(values))


def ask_settings(k: int) -> tuple[dict, str]:
    """The keyword arguments of ``rag.ask`` that ``openbook ask`` uses by default, and its ``--dtype``."""
    from openbook.presets import INTERACTIVE

    settings = {"k": k, "num_beams": INTERACTIVE.num_beams, "decoding": INTERACTIVE.decoding,
                "max_new_tokens": INTERACTIVE.max_new_tokens}
    return settings, INTERACTIVE.dtype


COLD_TARGET_S = 10.0  # issue 10, the demo knowledge base
KB_COLD_TARGET_S = 15.0  # issue 32, a 650k-passage book (--kb)


def kb_flags(kb: str | None) -> list[str]:
    return [] if kb is None else ["--kb", str(kb)]


def cold_start(question: str, k: int, kb: str | None = None) -> tuple[float, dict]:
    """Seconds from starting ``openbook ask QUESTION --json`` (over ``kb``, default the demo one) to its answer on
    stdout, and the answer."""
    return time_to_output([sys.executable, "-m", "openbook", "ask", question, "--json", "--k", str(k), *kb_flags(kb)])


def cold_retrieve(question: str, k: int, kb: str | None = None) -> tuple[float, dict]:
    """Seconds from starting ``openbook retrieve QUESTION --json`` (over ``kb``) to its passages on stdout, and its
    record."""
    return time_to_output([sys.executable, "-m", "openbook", "retrieve", question, "--json", "--k", str(k),
                           *kb_flags(kb)])


def time_to_output(command: list[str], env: dict | None = None) -> tuple[float, dict]:
    """Seconds from starting ``command`` (a fresh process) to its first byte on stdout, and the JSON it prints."""
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")  # the output reaches the pipe when printed
    # stderr to a file (a progress bar must not fill a pipe nobody reads while we wait on stdout); stdout
    # unbuffered, as communicate() reads its file descriptor and no byte may wait in a Python buffer
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, env=env, bufsize=0)
        first = process.stdout.read(1)  # blocks until the answer (or the passages) is printed
        printed = time.perf_counter() - start
        rest, _ = process.communicate()
        if process.returncode != 0 or not first:
            err.seek(0)
            message = err.read().decode(errors="replace")
            raise SystemExit(f"`{' '.join(command)}` failed ({process.returncode}): {message}")
    return printed, json.loads(first + rest)


def summary(times: list[float]) -> dict:
    return {"p50_s": round(percentile(times, 50), 3), "p95_s": round(percentile(times, 95), 3),
            "mean_s": round(statistics.fmean(times), 3)}


def result_line(*, warm: list[float], paper: list[float], fp32: list[float], cold: list[float], peak_rss_kb: int,
                dtype: str, settings: dict, extra: dict, fast: list[float] | None = None,
                cold_retrieve: list[float] | None = None, cold_target_s: float = COLD_TARGET_S) -> dict:
    """The figures of the final JSON line."""
    w, p, f = summary(warm), summary(paper), summary(fp32)
    peer = {}
    if fast:
        peer = {"fast_p50_s": summary(fast)["p50_s"], "fast_p95_s": summary(fast)["p95_s"],
                "lazy_speedup_p50": round(percentile(fast, 50) / percentile(warm, 50), 2)}
    cold_s = round(statistics.median(cold), 3)
    retrieve = {} if not cold_retrieve else {"cold_retrieve_s": round(statistics.median(cold_retrieve), 3),
                                             "cold_retrieve_runs_s": [round(t, 3) for t in cold_retrieve]}
    return {
        "warm_p50_s": w["p50_s"], "warm_p95_s": w["p95_s"], "warm_mean_s": w["mean_s"],
        "cold_start_s": cold_s, "cold_start_runs_s": [round(t, 3) for t in cold], **retrieve,
        "peak_rss_mb": round(peak_rss_kb / 1024, 1),
        "paper_p50_s": p["p50_s"], "paper_p95_s": p["p95_s"], "paper_mean_s": p["mean_s"],
        "speedup_p50": round(percentile(paper, 50) / percentile(warm, 50), 2),
        "float32_p50_s": f["p50_s"], "float32_p95_s": f["p95_s"],
        "dtype_speedup_p50": round(percentile(fp32, 50) / percentile(warm, 50), 2),
        **peer,
        "dtype": dtype, "settings": settings, "paper_settings": {**PAPER, "k": settings["k"], "dtype": PAPER_DTYPE},
        "targets": {"warm_p50_s": 1.0, "cold_start_s": cold_target_s},
        "meets_targets": bool(percentile(warm, 50) <= 1.0 and cold_s <= cold_target_s),
        **extra,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--questions", type=int, default=len(QUESTIONS), help="warm questions (default: all %(default)s)")
    p.add_argument("--cold-runs", type=int, default=3)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--kb", default=None, metavar="DIR",
                   help="answer from this knowledge base (default: the demo one); the cold-start target is then 15 s")
    args = p.parse_args(argv)
    if not 1 <= args.questions <= len(QUESTIONS) or args.cold_runs < 1:
        p.error(f"--questions must be 1..{len(QUESTIONS)} and --cold-runs at least 1")
    print_header()
    quiet()
    from openbook.models.precision import bf16_hardware, resolve_dtype
    from openbook.rag import RAG

    settings, dtype_option = ask_settings(args.k)
    dtype = resolve_dtype(dtype_option)

    # Cold start first, before this process holds models: each run is the whole `openbook ask` (or `retrieve`).
    cold_start(COLD_QUESTION, args.k, args.kb)  # untimed: builds the demo knowledge base if needed, warms the page cache
    cold_retrieve(COLD_QUESTION, args.k, args.kb)
    cold, retrieved, answer = [], [], None
    for r in range(args.cold_runs):  # interleaved: a change in the machine's load hits both
        seconds, answer = cold_start(COLD_QUESTION, args.k, args.kb)
        cold.append(seconds)
        retrieved.append(cold_retrieve(COLD_QUESTION, args.k, args.kb)[0])
        print(f"cold run {r + 1}/{args.cold_runs}: {seconds:.2f} s to the answer, {retrieved[-1]:.2f} s to the "
              "passages of `openbook retrieve`", flush=True)
    peak_rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux: the largest child
    print(f"cold answer:   {answer['answer']!r} (truncated: {answer.get('truncated')})")

    load_start = time.perf_counter()
    rag = RAG.load(dtype=dtype, kb=args.kb)
    load_s = time.perf_counter() - load_start
    paper_rag = RAG.load(dtype=PAPER_DTYPE, kb=args.kb)
    questions = QUESTIONS[: args.questions]
    rag.ask([questions[0]], **settings)  # untimed warm-up of both
    paper_rag.ask([questions[0]], k=args.k, **PAPER)

    warm, paper, fp32, fast, same, same_fast = [], [], [], [], 0, 0
    print(f"{'question':44s} {'default':>8s} {'fast':>8s} {'float32':>8s} {'paper':>8s}  answers (default | paper)")
    for i, question in enumerate(questions):
        timed = {}
        order = (("default", rag, settings), ("fast", rag, {**settings, "decoding": "fast"}),
                 ("float32", paper_rag, settings), ("paper", paper_rag, {"k": args.k, **PAPER}))
        for name, model, options in (order if i % 2 == 0 else order[::-1]):  # interleaved: load hits all
            gc.collect()
            start = time.perf_counter()
            (got,) = model.ask([question], **options)
            timed[name] = (time.perf_counter() - start, got.answer)
        warm.append(timed["default"][0])
        fp32.append(timed["float32"][0])
        paper.append(timed["paper"][0])
        fast.append(timed["fast"][0])
        same += timed["default"][1] == timed["paper"][1]
        same_fast += timed["default"][1] == timed["fast"][1]
        print(f"{question[:44]:44s} {timed['default'][0]:7.2f}s {timed['fast'][0]:7.2f}s {timed['float32'][0]:7.2f}s "
              f"{timed['paper'][0]:7.2f}s  "
              f"{timed['default'][1]!r} | {timed['paper'][1]!r}", flush=True)

    result = result_line(
        warm=warm, paper=paper, fp32=fp32, fast=fast, cold=cold, cold_retrieve=retrieved, peak_rss_kb=peak_rss_kb,
        dtype=dtype, cold_target_s=COLD_TARGET_S if args.kb is None else KB_COLD_TARGET_S,
        settings={**settings, "dtype_option": dtype_option, "batch_size": 1},
        extra={"kb": args.kb, "kb_passages": len(rag.kb), "questions": len(questions), "same_answer_fraction": round(same / len(questions), 3),
               "same_as_fast_fraction": round(same_fast / len(questions), 3),
               "in_process_load_s": round(load_s, 2), "bf16_hardware": bf16_hardware(),
               "threads": torch.get_num_threads(), "load_average_1min": round(os.getloadavg()[0], 2)},
    )
    print(f"warm p50 {result['warm_p50_s']} s, p95 {result['warm_p95_s']} s; paper p50 {result['paper_p50_s']} s "
          f"({result['speedup_p50']}x); float32 p50 {result['float32_p50_s']} s; cold start {result['cold_start_s']} s; "
          f"cold retrieve {result['cold_retrieve_s']} s; peak RSS {result['peak_rss_mb']} MB")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
