"""Does PyTorch compute as fast in another thread as in the main thread? The question behind where `openbook serve`
runs its model (openbook/serve/worker.py).

The shipped default (``openbook ask``'s settings: greedy, Lazy decoding, 16 new tokens, ``--dtype auto``) answers the
same questions one at a time, alternately in the main thread and in a new thread of the same process (the main
thread waits in ``join``), ``--rounds`` times each, after one untimed warm-up in the main thread. Answers per second
of each round; the medians' ratio is ``main_over_thread``.

    PYTHONPATH=. .venv/bin/python bench/thread_speed.py [--questions 20] [--rounds 3]

Ends with one JSON line: ``main_qps``, ``thread_qps`` (medians), every round's rate, ``main_over_thread`` and
``same_answers`` (both threads gave the same answers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

from ask_latency import QUESTIONS


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--questions", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    import torch

    from openbook.rag.assemble import load_model

    rag = load_model(dtype="auto")
    settings = dict(num_beams=1, decoding="lazy", max_new_tokens=16)
    questions = QUESTIONS[: args.questions]
    rag.ask(questions[:2], **settings)  # warm-up
    answers: dict[str, list[str]] = {}

    def answer_all(where: str) -> float:
        start = time.perf_counter()
        answers[where] = [rag.ask([q], **settings)[0].answer for q in questions]
        return len(questions) / (time.perf_counter() - start)

    def in_thread() -> float:
        out: list[float] = []
        worker = threading.Thread(target=lambda: out.append(answer_all("thread")))
        worker.start()
        worker.join()
        return out[0]

    rates: dict[str, list[float]] = {"main": [], "thread": []}
    runs = {"main": lambda: answer_all("main"), "thread": in_thread}
    for r in range(args.rounds):
        for where in (("main", "thread") if r % 2 == 0 else ("thread", "main")):
            rates[where].append(round(runs[where](), 3))
            print(f"round {r + 1} {where:<7} {rates[where][-1]:.3f} answers/s", flush=True)
    result = {
        "main_qps": statistics.median(rates["main"]), "thread_qps": statistics.median(rates["thread"]),
        "main_rounds": rates["main"], "thread_rounds": rates["thread"],
        "same_answers": answers["main"] == answers["thread"], "questions": len(questions),
        "threads": torch.get_num_threads(), "load_average_1min": round(os.getloadavg()[0], 2),
    }
    result["main_over_thread"] = round(result["main_qps"] / result["thread_qps"], 3)
    print("command:", " ".join([sys.executable, *sys.argv]))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
