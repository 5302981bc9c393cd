"""Short passages in a corpus file: how many article tails and whole short texts have few words.

Passages are grouped into articles by their id (``<article>#<chunk>``, as the demo corpus names them). A
passage of a multi-chunk article is a *tail* fragment when it has fewer than --under words; a one-chunk
text that short is a whole short text (kept as it is). Defaults to the shipped demo corpus; give an older
one to compare, e.g. ``git show REV:openbook/data/demo/passages.jsonl.gz > old.jsonl.gz``.

    .venv/bin/python bench/passage_lengths.py [CORPUS.jsonl.gz] [--under 10,50]

Ends with one JSON line of the counts.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections import Counter


def main() -> None:
    from openbook.corpus import read_passages
    from openbook.data import demo_passages_path

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("corpus", nargs="?", default=str(demo_passages_path()))
    p.add_argument("--under", default="10,50", help="word-count thresholds (default: %(default)s)")
    args = p.parse_args()
    print("command:", " ".join(map(shlex.quote, [sys.executable, *sys.argv])))
    thresholds = sorted({int(t) for t in args.under.split(",")})
    passages = list(read_passages(args.corpus))
    chunks = Counter(passage.id.rsplit("#", 1)[0] for passage in passages)
    figures: dict[str, int] = {"passages": len(passages)}
    for under in thresholds:
        short = [p for p in passages if len(p.text.split()) < under]
        tails = sum(chunks[p.id.rsplit("#", 1)[0]] > 1 for p in short)
        figures[f"multi_chunk_under_{under}_words"] = tails
        figures[f"single_chunk_under_{under}_words"] = len(short) - tails
        print(f"under {under:>3} words: {tails:5d} passages of multi-chunk articles, "
              f"{len(short) - tails:5d} one-chunk texts")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
