"""Peak memory of one ``rag.ask`` batch, against the sequences it decodes at once (questions x k x beams).

Why the server caps a request and a model batch at ``MAX_ROWS`` sequences (openbook/serve/schemas.py): with only
the per-field caps, one request could ask for 32 questions x k 20 x beams 8 = 5,120 sequences at once. This loads
the model (``openbook ask``'s options; default: the shipped default in ``--dtype auto``), asks the first
``--questions`` of bench/ask_latency.py's questions in one batch with the given k, beams, decoding and
``--max-new-tokens``, and reports the process's peak resident memory (``ru_maxrss``) after loading and after the
batch, and the batch's seconds. Run one configuration per process: the peak is the process's own.

Usage:  PYTHONPATH=. python bench/ask_memory.py [--questions 2 --k 16 --beams 8 --decoding fast --max-new-tokens 64]

The defaults are the cap's heaviest case (256 sequences at the longest answers, Fast decoding, which rescores
every hypothesis against every passage). It ends with one JSON line: ``sequences``, ``loaded_rss_mb``,
``peak_rss_mb``, ``batch_rss_mb`` (peak minus loaded) and ``seconds``.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

from _common import print_header, quiet
from ask_latency import QUESTIONS


def rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: kilobytes


def main() -> None:
    from openbook.commands import options

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    from openbook.presets import DECODINGS, INTERACTIVE

    # openbook serve's compute type (its default is openbook ask's), not load_model's float32
    options.add_options(p, "model", "run", "kb", "generator", "untrained", "encoder", "dtype", "device",
                        preset=INTERACTIVE)
    p.add_argument("--questions", type=int, default=2, help="questions in the batch (default: %(default)s)")
    p.add_argument("--k", type=int, default=16, help="passages per question (default: %(default)s)")
    p.add_argument("--beams", type=int, default=8, help="beam size (default: %(default)s)")
    p.add_argument("--decoding", default="fast", choices=DECODINGS)
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args()
    if not 1 <= args.questions <= len(QUESTIONS):
        p.error(f"--questions must be 1..{len(QUESTIONS)}")
    quiet()
    print_header()
    rag = options.model_from_args(args)
    loaded = rss_mb()
    start = time.perf_counter()
    answers = rag.ask(QUESTIONS[:args.questions], k=args.k, num_beams=args.beams, decoding=args.decoding,
                      max_new_tokens=args.max_new_tokens)
    seconds = time.perf_counter() - start
    peak = rss_mb()
    for question, answer in zip(QUESTIONS, answers):
        print(f"{question!r} -> {answer.answer!r}")
    print(json.dumps({"sequences": args.questions * args.k * args.beams, "questions": args.questions, "k": args.k,
                      "beams": args.beams, "decoding": args.decoding, "max_new_tokens": args.max_new_tokens,
                      "dtype": args.dtype, "loaded_rss_mb": loaded, "peak_rss_mb": peak, "batch_rss_mb": round(peak - loaded, 1),
                      "seconds": round(seconds, 1)}))


if __name__ == "__main__":
    main()
