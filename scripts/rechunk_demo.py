#!/usr/bin/env python
"""Re-chunk the shipped demo corpus with the current chunking rule and update its precomputed vectors.

Needs neither the shared source data nor a full re-encoding. The corpus step groups consecutive
passages by article (the id before ``#``), joins each article's words again and splits them with
:func:`openbook.corpus.split_words` (so an article whose last 100-word chunk was a short tail now ends
in two chunks of about equal size), keeping the ids ``<article>#<i>``. Articles kept whole, and the few
articles missing a chunk (dropped as an exact duplicate when the corpus was made), are left as they
are; exact duplicate (title, text) passages are dropped, keeping the first. Running it again changes
nothing.

``--from PATH`` takes the new passages from PATH instead (e.g. the output of
``scripts/make_demo_corpus.py``, which re-creates dropped duplicates that no longer collide) and copies
it over the shipped corpus.

The vector step keeps the stored float16 vector of every passage whose (title, text) is unchanged and
encodes only the others with the default encoder, then writes ``embeddings-minilm.f16.npy`` (rows in
passage order) and its ``.json`` (the format of ``scripts/make_demo_embeddings.py``).

Usage: python scripts/rechunk_demo.py [--from PATH] [--dry-run]
"""

import argparse
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from make_demo_corpus import deduplicate, write_corpus  # noqa: E402

from openbook.atomic import atomic_output  # noqa: E402
from openbook.corpus import Passage, read_records, split_words  # noqa: E402
from openbook.corpus.readers import CHUNK_SEPARATOR  # noqa: E402
from openbook.data import demo_passages_path  # noqa: E402

MAX_WORDS = 100
VECTORS = demo_passages_path().parent / "embeddings-minilm.f16.npy"


def read_demo(path: Path) -> list[Passage]:
    """The passages of a demo corpus file, in order, with their ids as stored (no re-chunking)."""
    return [Passage(r["id"], r["title"], r["text"]) for r in read_records(path)]


def articles(passages: Iterable[Passage]) -> Iterator[tuple[str, list[Passage]]]:
    """Group consecutive passages by article id (the part of the id before ``#``)."""
    group: list[Passage] = []
    article = None
    for passage in passages:
        name = passage.id.rpartition(CHUNK_SEPARATOR)[0] or passage.id
        if group and name != article:
            yield article, group
            group = []
        article = name
        group.append(passage)
    if group:
        yield article, group


def rechunk(passages: Iterable[Passage], max_words: int = MAX_WORDS) -> Iterator[tuple[str, Passage]]:
    """Yield ``(source, passage)`` with every complete multi-chunk article split again by ``split_words``."""
    for article, group in articles(passages):
        source = article.split(":")[0]
        expected = [f"{article}{CHUNK_SEPARATOR}{i}" for i in range(len(group))]
        if [p.id for p in group] != expected:  # kept whole, or a chunk is missing: leave it as it is
            yield from ((source, p) for p in group)
            continue
        words = " ".join(p.text for p in group)
        for i, text in enumerate(split_words(words, max_words)):
            yield source, Passage(f"{article}{CHUNK_SEPARATOR}{i}", group[0].title, text)


def reuse_vectors(old: list[Passage], old_vectors: np.ndarray, new: list[Passage], encode) -> tuple[np.ndarray, int]:
    """Vectors for ``new``: the old row of each passage whose (title, text) is unchanged, ``encode`` for
    the rest (a list of passages to a float array). Returns the float16 matrix and how many were encoded."""
    row_of = {(p.title, p.text): row for row, p in enumerate(old)}
    out = np.empty((len(new), old_vectors.shape[1]), dtype=np.float16)
    todo = []
    for row, passage in enumerate(new):
        old_row = row_of.get((passage.title, passage.text))
        if old_row is None:
            todo.append(row)
        else:
            out[row] = old_vectors[old_row]
    if todo:
        out[todo] = np.asarray(encode([new[row] for row in todo]), dtype=np.float32).astype(np.float16)
    return out, len(todo)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="source", type=Path, help="take the new corpus from this file")
    parser.add_argument("--dry-run", action="store_true", help="count what would change, write nothing")
    args = parser.parse_args(argv)
    corpus = demo_passages_path()
    old = read_demo(corpus)
    if args.source is not None:
        new = read_demo(args.source)
    else:
        new = [p for _, p in deduplicate(rechunk(old), {})]
    changed = len({(p.title, p.text) for p in new} - {(p.title, p.text) for p in old})
    print(f"{len(old):,} passages -> {len(new):,}; {changed:,} new texts to encode", file=sys.stderr)
    if args.dry_run:
        return 0
    if new == old:
        print("nothing to do", file=sys.stderr)
        return 0
    from openbook.models import load_encoder

    encoder = load_encoder("default")
    start = time.perf_counter()
    vectors, encoded = reuse_vectors(old, np.load(VECTORS), new,
                                     lambda batch: encoder.encode_passages(batch, batch_size=64, progress=True))
    seconds = time.perf_counter() - start
    if args.source is not None:
        with atomic_output(corpus) as tmp:
            shutil.copyfile(args.source, tmp)
    else:
        write_corpus(((p.id.split(":")[0], p) for p in new), corpus)
    with atomic_output(VECTORS) as tmp, open(tmp, "wb") as handle:
        np.save(handle, vectors)
    digest = hashlib.sha256(corpus.read_bytes()).hexdigest()
    meta = {"encoder": encoder.info(), "passages": len(new), "corpus_sha256": digest}
    with atomic_output(VECTORS.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps({"passages": len(new), "encoded": encoded, "seconds": round(seconds, 1)}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
