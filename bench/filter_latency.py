"""Filtered dense search on a knowledge base: what a metadata filter (`--where`, the API's "filter") costs.

For each filter, the time of ``KnowledgeBase.search(q, k, where=...)`` for one question: the first time (the
passage store finds the matching rows: a search of its index of metadata values, or in a store written before
that index a SQL scan of every row's metadata) and again (the knowledge base
keeps the rows of its last few filters), beside the unfiltered search, each the median of ``--repeats`` (a new
knowledge base object for every first time, so its cache is empty; the files stay in the page cache), and the
number of matching passages. The search among the matching rows is exact (``openbook.index.filters``), so its
cost also grows with that number.

The filters, unless given with ``--where`` (repeatable, ``FIELD=VALUE``, ``FIELD^=PREFIX``, ``FIELD>=X``): the
first passage's ``source`` (one document), the prefix of it without its last character (some documents), and
``modified>=`` its ``modified`` (every passage of a book built at once: the worst case).

Usage:  PYTHONPATH=. python bench/filter_latency.py --kb DIR [--where F ...] [--repeats 5] [--k 5]

It prints the CPU and ends with one JSON line of its figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _common import print_header, quiet

QUESTION = "Who wrote the Declaration of Independence?"


def default_filters(kb) -> list[list[str]]:
    meta = kb[0].meta or {}
    filters = []
    if isinstance(meta.get("source"), str) and meta["source"]:
        filters += [[f"source={meta['source']}"], [f"source^={meta['source'][:-1]}"]]
    if isinstance(meta.get("modified"), str):
        filters.append([f"modified>={meta['modified']}"])
    return filters


def median_seconds(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kb", required=True, type=Path, metavar="DIR", help="a built knowledge base")
    p.add_argument("--where", action="append", default=None, metavar="FILTER",
                   help="one filter's condition (repeatable; each one filter); default: see the docstring")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--k", type=int, default=5)
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    print_header()
    quiet()
    from openbook.index import KnowledgeBase
    from openbook.index.filters import as_filter
    from openbook.models.loading import load_encoder

    kb = KnowledgeBase.load(args.kb, verify="size")
    query = load_encoder(kb.encoder_info["name"]).encode_queries([QUESTION])
    filters = [[w] for w in args.where] if args.where else default_filters(kb)
    kb.search(query, args.k)  # the index into the page cache
    plain = median_seconds(lambda: kb.search(query, args.k), args.repeats)
    print(f"{args.kb}: {len(kb):,} passages; k={args.k}; median of {args.repeats}")
    print(f"  no filter: {plain * 1e3:.1f} ms")
    rows = []
    for conditions in filters:
        where = as_filter(conditions)
        matching = len(kb.matching_rows(where))
        if not matching:  # nothing to search among: a one-line error for `retrieve --where`, no time here
            print(f"  {' '.join(conditions)}: no passage matches")
            rows.append({"filter": conditions, "matching": 0, "first_ms": None, "again_ms": None})
            continue

        def first(where=where):
            fresh = KnowledgeBase.load(args.kb, verify="size")
            start = time.perf_counter()
            fresh.search(query, args.k, where=where)
            elapsed = time.perf_counter() - start
            fresh.close()
            return elapsed

        first_s = statistics.median(first() for _ in range(args.repeats))
        again_s = median_seconds(lambda where=where: kb.search(query, args.k, where=where), args.repeats)
        print(f"  {' '.join(conditions)}: {matching:,} passages match; first {first_s * 1e3:.0f} ms, "
              f"again {again_s * 1e3:.1f} ms")
        rows.append({"filter": conditions, "matching": matching, "first_ms": round(first_s * 1e3, 1),
                     "again_ms": round(again_s * 1e3, 2)})
    print(json.dumps({"kb": str(args.kb), "passages": len(kb), "k": args.k, "repeats": args.repeats,
                      "no_filter_ms": round(plain * 1e3, 2), "filters": rows}))


if __name__ == "__main__":
    main()
