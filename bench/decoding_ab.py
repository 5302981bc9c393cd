"""``openbook ask``'s decoding, A/B: what Lazy decoding's first stage and greedy early stops each save.

``openbook ask`` decodes RAG-Sequence Lazily (``openbook/rag/decoding.py``): Fast decoding's answer, reading the
best documents first and the rest only if they could still change it. Two changes, each measured here against
the decoding before it, on one model loaded once, each of ``bench/ask_latency.py``'s questions asked with ask's
defaults under every variant, interleaved:

* ``before``: the first stage reads the fewest best documents whose p(z|x) passes 1/2 (``_first_reads``), and
  every greedy row runs until it ends;
* ``one_or_all``: the first stage reads the best document if it alone passes 1/2, every document otherwise
  (``_first_stage``): over a large book p(z|x) is flat, and two or three documents rarely settle an answer;
* ``now`` (ask's default): ``one_or_all``, and a greedy row stops once the finished answers lead everything it
  could still write (``_Pruner``);
* ``fast``: Fast decoding (every document in one pass), with the early stops: the peer.

Every variant must give the same answers (all are Fast decoding's answer).

Usage:  PYTHONPATH=. python bench/decoding_ab.py [--kb DIR] [--questions 30] [--k 5]

It prints the CPU and ends with one JSON line: per variant the p50 and mean seconds and mean documents read,
``speedup_p50`` (before / now), ``first_stage_speedup_p50`` (before / one_or_all), ``pruning_speedup_p50``
(one_or_all / now), ``now_vs_fast_p50`` (fast / now) and ``same_answers`` (the share of questions where all agree).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

from _common import print_header, quiet
from ask_latency import QUESTIONS, ask_settings, percentile

NAMES = ("before", "one_or_all", "now", "fast")


def variants(decoding) -> dict:
    """name -> (decoding, the first-stage rule, the pruner factory) patched into ``decoding`` for that variant."""
    off = lambda *args: None  # noqa: E731 -- no early stops
    new, old, prune = decoding._first_stage, decoding._first_reads, decoding._fast_pruner
    return {"before": ("lazy", old, off), "one_or_all": ("lazy", new, off), "now": ("lazy", new, prune),
            "fast": ("fast", new, prune)}


def summary(times: list[float], reads: list[float]) -> dict:
    return {"p50_s": round(percentile(times, 50), 3), "mean_s": round(statistics.fmean(times), 3),
            "mean_docs_read": round(statistics.fmean(reads), 2)}


def ratio(times: dict, slow: str, fast: str) -> float:
    return round(percentile(times[slow], 50) / percentile(times[fast], 50), 2)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kb", default=None, metavar="DIR", help="knowledge base (default: the demo one)")
    p.add_argument("--questions", type=int, default=len(QUESTIONS))
    p.add_argument("--k", type=int, default=5)
    args = p.parse_args(argv)
    if not 1 <= args.questions <= len(QUESTIONS):
        p.error(f"--questions must be 1..{len(QUESTIONS)}")
    print_header()
    quiet()
    from openbook.models.precision import resolve_dtype
    from openbook.rag import RAG, decoding

    settings, dtype_option = ask_settings(args.k)
    if settings["decoding"] != "lazy" or settings["num_beams"] != 1:
        raise SystemExit(f"openbook ask decodes {settings['decoding']!r} with {settings['num_beams']} beams: "
                         "this benchmark compares greedy Lazy decodings")
    rag = RAG.load(dtype=resolve_dtype(dtype_option), kb=args.kb)
    table = variants(decoding)
    shipped = decoding._first_stage, decoding._fast_pruner
    questions = QUESTIONS[: args.questions]
    rag.ask([questions[0]], **settings)  # untimed warm-up
    times = {name: [] for name in NAMES}
    reads = {name: [] for name in NAMES}
    same = 0
    print(f"{'question':44s} " + " ".join(f"{name:>10s}" for name in NAMES) + "  answer")
    try:
        for i, question in enumerate(questions):
            answers = {}
            for name in (NAMES if i % 2 == 0 else NAMES[::-1]):  # interleaved: a change of load hits all
                mode, decoding._first_stage, decoding._fast_pruner = table[name]
                gc.collect()
                start = time.perf_counter()
                (got,) = rag.ask([question], **{**settings, "decoding": mode})
                times[name].append(time.perf_counter() - start)
                answers[name] = got.answer
                reads[name].append(sum(passage.posterior is not None for passage in got.passages))  # unread: None
            same += len(set(answers.values())) == 1
            print(f"{question[:44]:44s} " + " ".join(f"{times[n][-1]:9.3f}s" for n in NAMES)
                  + f"  {answers['now']!r}", flush=True)
    finally:
        decoding._first_stage, decoding._fast_pruner = shipped
    result = {
        **{name: summary(times[name], reads[name]) for name in NAMES},
        "speedup_p50": ratio(times, "before", "now"), "first_stage_speedup_p50": ratio(times, "before", "one_or_all"),
        "pruning_speedup_p50": ratio(times, "one_or_all", "now"), "now_vs_fast_p50": ratio(times, "fast", "now"),
        "same_answers": round(same / len(questions), 3), "questions": len(questions), "kb": args.kb,
        "kb_passages": len(rag.kb), "settings": {**settings, "dtype_option": dtype_option},
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
