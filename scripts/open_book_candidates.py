#!/usr/bin/env python
"""Issue 32 item 4's decision: does a default trained over the 2015 Wikipedia book beat the shipped one?

For each candidate run (``--runs``, default the three of ``scripts/train_default.sh``: ``runs/default-open-book``,
fresh adapters, ``runs/default-open-book-init``, the shipped default's adapters trained further, and
``runs/default-open-book-learned``, the same with q(x) trained too; those without a checkpoint are skipped) it scores the held-out NQ fifth (``runs/data/nq-dev.jsonl``, never trained on) with the
settings of the shipped default's reports (``bench/open_domain.py``'s ``em`` step: greedy, 16 new tokens, Lazy
decoding, float32) twice:

* over the book (``--kb``), against the shipped default over the same book (``--book-default``, the report of
  ``bench/open_domain.py --kb KB``, i.e. ``scripts/wiki_book.sh quality``);
* over the demo knowledge base, against the model card's report with the same settings (``--demo-default``,
  ``docs/models/default/nq-fp32``, which despite its name decoded Lazily, in float32).

Each pair is compared question by question (``scripts/compare_reports.py``: McNemar's exact test, a paired
bootstrap; A the default, B the candidate). A candidate qualifies to be shipped only if it is better over the book with
McNemar's p < 0.05 and loses at most 1 point of exact match over the demo knowledge base. Reports go to
``--out/<run name>/{book,demo}/`` and a finished one is not run again. Prints a table and ends with one JSON line.

Usage: PYTHONPATH=. python scripts/open_book_candidates.py --kb KB [--runs RUN ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
from compare_reports import MODEL_CARD_ASK as ASK  # noqa: E402
from compare_reports import compare_files  # noqa: E402

RUNS = ("runs/default-open-book", "runs/default-open-book-init", "runs/default-open-book-learned")
MAX_DEMO_LOSS = 0.01  # the "loses at most 1 point" over the demo book
ALPHA = 0.05


def evaluate(run: Path, kb: Path, questions: Path, out: Path, openbook: str) -> Path:
    report = out / "report.json"
    if not report.is_file():
        command = [openbook, "eval", "--task", "nq", "--data", str(questions), "--run", str(run), "--kb", str(kb),
                   *ASK, "--out", str(out), "--json"]
        print("$ " + " ".join(command), flush=True)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return report


def verdict(book: dict, demo: dict) -> tuple[bool, str]:
    better = book["b"] > book["a"] and book["mcnemar_p"] < ALPHA
    kept = demo["a"] - demo["b"] <= MAX_DEMO_LOSS + 1e-12
    why = (f"over the book {'better' if better else 'not better'} (p={book['mcnemar_p']:.3f}); over the demo book "
           f"{'within' if kept else 'more than'} 1 point of the default ({100 * (demo['b'] - demo['a']):+.1f})")
    return better and kept, why


def main(argv=None) -> dict:
    from openbook.models.loading import cache_dir

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kb", required=True, type=Path, help="the book the candidates were trained over")
    p.add_argument("--runs", nargs="+", type=Path, default=[REPO / r for r in RUNS])
    p.add_argument("--questions", type=Path, default=REPO / "runs" / "data" / "nq-dev.jsonl")
    p.add_argument("--book-default", type=Path, default=None,
                   help="the shipped default's report over --kb (default: bench/open_domain.py's em step of NQ)")
    p.add_argument("--demo-default", type=Path, default=REPO / "docs" / "models" / "default" / "nq-fp32" / "report.json")
    p.add_argument("--demo-kb", type=Path, default=None, help="the demo knowledge base (default: its cached build)")
    p.add_argument("--out", type=Path, default=None, help="default: $OPENBOOK_CACHE/bench/open_book_candidates")
    p.add_argument("--openbook", default=str(REPO / ".venv" / "bin" / "openbook"))
    args = p.parse_args(argv)
    out = args.out or cache_dir() / "bench" / "open_book_candidates"
    book_default = args.book_default or cache_dir() / "bench" / "open_domain" / args.kb.resolve().name / "nq" / "em" / "report.json"
    demo_kb = args.demo_kb or cache_dir() / "kb" / "demo-minilm"
    for needed in (book_default, args.demo_default, demo_kb):
        if not needed.exists():
            raise SystemExit(f"open_book_candidates: {needed} does not exist (run scripts/wiki_book.sh quality first)")
    results = {}
    for run in args.runs:
        if not (run / "checkpoint" / "model.safetensors").is_file():
            print(f"{run}: no checkpoint, skipped", flush=True)
            continue
        book = compare_files(book_default, evaluate(run, args.kb, args.questions, out / run.name / "book", args.openbook))
        demo = compare_files(args.demo_default, evaluate(run, demo_kb, args.questions, out / run.name / "demo", args.openbook))
        ship, why = verdict(book, demo)
        results[run.name] = {"book": book, "demo": demo, "ship": ship, "why": why}
    print("\n| candidate | over the book: default / candidate EM | McNemar p | over the demo book: default / candidate EM | ship |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        b, d = r["book"], r["demo"]
        print(f"| {name} | {100 * b['a']:.1f} / {100 * b['b']:.1f} | {b['mcnemar_p']:.3f} | "
              f"{100 * d['a']:.1f} / {100 * d['b']:.1f} | {'yes' if r['ship'] else 'no'}: {r['why']} |")
    summary = {"kb": str(args.kb), "candidates": results}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
