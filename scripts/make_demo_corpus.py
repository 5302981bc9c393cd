#!/usr/bin/env python
"""Derive the shipped demo corpus ``openbook/data/demo/passages.jsonl.gz`` from the shared data files.

Sources (in this order; see ``openbook/data/demo/README.md`` for provenance and licences):

* ``vital``  -- lead sections of Wikipedia level-4 vital articles, ``{title, text}``;
* ``nqgold`` -- the gold Wikipedia passages of the NQ-open oracle set, ``{title, text}``;
* ``wiki18`` -- a sample of DPR's December-2018 Wikipedia passages, ``{id, contents}``;
* ``boolq``  -- the Wikipedia passages of BoolQ dev, ``{text}`` (title ``""``).

Every text is split into disjoint chunks of at most 100 words (as in the RAG paper) that keep the
article title, by ``openbook.corpus.split_words``: a last chunk of under 50 words shares the last two
chunks' words evenly instead of becoming a tiny passage of its own. Ids name the source: ``<source>:<record>`` or, for a record split into several chunks,
``<source>:<record>#<chunk>`` (``<record>`` is the 0-based line, or the DPR id for wiki18). The DPR
sample's CSV-escaped doubled quotes (``""``) are undoubled. Exact duplicate (title, text) passages are
dropped, keeping the first. The output is gzip with mtime 0 and no file name, so it is byte-for-byte
reproducible, and it is written atomically.

Usage: python scripts/make_demo_corpus.py [--data-dir /work/shared/data] [--out PATH]
"""

import argparse
import dataclasses
import gzip
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openbook.atomic import atomic_output  # noqa: E402
from openbook.corpus import Passage, read_passages  # noqa: E402
from openbook.errors import OpenbookError  # noqa: E402

MAX_WORDS = 100
DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"
DEFAULT_OUT = REPO / "openbook" / "data" / "demo" / "passages.jsonl.gz"


def _undouble_quotes(passage: Passage) -> Passage:
    """Undo CSV quote escaping left in the DPR sample's text (``""word""`` -> ``"word"``)."""
    return dataclasses.replace(passage, text=passage.text.replace('""', '"'))


def _unchanged(passage: Passage) -> Passage:
    """Keep a passage as it is."""
    return passage


# (source prefix, file name in the data directory, per-passage cleanup)
SOURCES: list[tuple[str, str, Callable[[Passage], Passage]]] = [
    ("vital", "wikipedia-vital-articles.summaries.jsonl.gz", _unchanged),
    ("nqgold", "nq-gold-passages.jsonl.gz", _unchanged),
    ("wiki18", "wiki18-psgs-w100.sample1000.jsonl", _undouble_quotes),
    ("boolq", "boolq-passages.jsonl.gz", _unchanged),
]


def source_passages(data_dir: Path) -> Iterator[tuple[str, Passage]]:
    """Yield ``(source, passage)`` for all sources, chunked and cleaned, in a fixed order."""
    for source, file_name, cleanup in SOURCES:
        for passage in read_passages(data_dir / file_name, max_words=MAX_WORDS, id_prefix=f"{source}:"):
            yield source, cleanup(passage)


def deduplicate(
    items: Iterable[tuple[str, Passage]], dropped: dict[str, int]
) -> Iterator[tuple[str, Passage]]:
    """Drop passages whose exact (title, text) was already seen, counting drops per source."""
    seen: set[tuple[str, str]] = set()
    for source, passage in items:
        key = (passage.title, passage.text)
        if key in seen:
            dropped[source] = dropped.get(source, 0) + 1
            continue
        seen.add(key)
        yield source, passage


def write_corpus(items: Iterable[tuple[str, Passage]], out: Path) -> dict[str, int]:
    """Write passages as deterministic gzip JSON Lines, atomically; return the count per source."""
    counts: dict[str, int] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(out) as tmp, open(tmp, "wb") as raw, gzip.GzipFile(
        filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0
    ) as gz:
        for source, passage in items:
            record = {"id": passage.id, "title": passage.title, "text": passage.text}
            gz.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
            counts[source] = counts.get(source, 0) + 1
    return counts


def print_summary(counts: dict[str, int], dropped: dict[str, int], out: Path) -> None:
    """Print a Markdown table of passages per source, total, and the output size."""
    print("| source | passages | exact duplicates dropped |\n|---|---:|---:|")
    for source, _, _ in SOURCES:
        print(f"| {source} | {counts.get(source, 0):,} | {dropped.get(source, 0):,} |")
    print(f"| total | {sum(counts.values()):,} | {sum(dropped.values()):,} |")
    print(f"\nwrote {out} ({out.stat().st_size:,} bytes)")


def main(argv: list[str] | None = None) -> int:
    """Build the demo corpus; return a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="shared data directory")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output .jsonl.gz file")
    args = parser.parse_args(argv)
    dropped: dict[str, int] = {}
    try:
        counts = write_corpus(deduplicate(source_passages(args.data_dir), dropped), args.out)
    except OpenbookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print_summary(counts, dropped, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
