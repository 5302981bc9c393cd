"""Reading speed of WikiExtractor output: passages per second read from a few files, reading only (no encoder).

Reads the first --files files of a WikiExtractor folder (default: ../shared/data/wikipedia-2015-core) the
way `openbook kb build` does (iter_source_passages: recognising the files, decompressing, parsing the
records, hashing each article, splitting into 100-word passages), and, as the floor, only decompresses
the same files line by line. Prints per-run figures and ends with one JSON line.

    .venv/bin/python bench/wiki_read.py [FOLDER] [--files 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import sys
import time
from pathlib import Path

DATA = Path(os.environ.get("OPENBOOK_DATA", "/work/shared/data")) / "wikipedia-2015-core"


def main() -> None:
    from openbook.corpus import SourceReport, iter_source_passages
    from openbook.corpus.readers.files import _open_binary

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", nargs="?", default=str(DATA))
    p.add_argument("--files", type=int, default=20, help="how many files to read, in sorted order (0: all)")
    p.add_argument("--repeat", type=int, default=3, help="runs; the fastest is reported (default: %(default)s)")
    args = p.parse_args()
    print("command:", " ".join(map(shlex.quote, [sys.executable, *sys.argv])))
    files = sorted(f for f in Path(args.folder).rglob("wiki_*") if f.is_file())
    files = files[:args.files] if args.files else files
    if not files:
        sys.exit(f"{args.folder}: no wiki_* files")

    read_times, floor_times = [], []
    passages = words = articles = 0
    report = SourceReport()
    for _ in range(args.repeat):
        start = time.perf_counter()
        passages = words = 0
        documents = set()
        for item in iter_source_passages(files, report=report):
            passages += 1
            words += len(item.passage.text.split())
            documents.add(item.document)
        read_times.append(time.perf_counter() - start)
        articles = len(documents)
        start = time.perf_counter()
        for file in files:
            with _open_binary(file, "a file") as handle:
                for _line in handle:
                    pass
        floor_times.append(time.perf_counter() - start)
    best, floor = min(read_times), min(floor_times)
    size = sum(f.stat().st_size for f in files)
    figures = {
        "files": len(files), "compressed_bytes": size, "articles": articles, "passages": passages, "words": words,
        "empty_articles_skipped": report.empty_records,
        "seconds": round(best, 3), "passages_per_s": round(passages / best), "articles_per_s": round(articles / best),
        "decompress_only_seconds": round(floor, 3), "share_decompressing": round(floor / best, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    print(f"{len(files)} files, {articles} articles, {passages} passages ({report.empty_records} empty articles "
          f"skipped): {best:.2f} s, {passages / best:,.0f} passages/s; decompressing alone {floor:.2f} s")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
