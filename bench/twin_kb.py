"""A latency twin of a knowledge base: the real passages, with random vectors instead of encoded ones.

ANSWERS FROM A TWIN ARE MEANINGLESS. Its vectors are seeded random unit vectors, not the encoder's: what
`openbook ask --kb TWIN` or `openbook serve --kb TWIN` retrieves from it has nothing to do with the question.
The twin exists only to time loading and searching (cold start, warm latency, peak memory:
``bench/ask_latency.py --kb TWIN``) at the real book's size, before the real book (whose encoding takes
hours) is built.

Everything but the vector values is what ``openbook kb build SOURCE --out DIR`` stores: the passages, ids,
titles and metadata, read by the same reader with the same ``--max-words``, written by the same build
(``KnowledgeBase.build``, resumable: run the same command again after an interrupt) into the same files, with
the default encoder's dimension and its description in the manifest (so ``ask --kb`` and ``serve --kb``
accept it with the default model), and the index ``--index`` (default: ``kb build``'s). Its description in
the manifest says it is a twin. The vectors of a batch are drawn from a generator seeded by ``--seed`` and the
batch's first passage id, so a resumed build writes the same ones.

Usage:  PYTHONPATH=. python bench/twin_kb.py [SOURCE ...] [--out DIR] [--index flat] [--seed 0]

SOURCE defaults to ../shared/data/wikipedia-2015-core, ``--out`` to ``$OPENBOOK_CACHE/kb/wiki2015-twin``
(``$OPENBOOK_CACHE`` defaults to ``~/.cache/openbook``); an existing twin there is replaced only with
``--force``. It ends with one JSON line: ``path``, ``rows``, ``seconds`` (the whole build), ``disk_bytes``
(the knowledge base's files) and the settings.
"""

from __future__ import annotations

import argparse
import json
import time
import zlib
from pathlib import Path

import numpy as np

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikipedia-2015-core"  # ../shared/data
TWIN_NAME = "wiki2015-twin"


def default_out() -> Path:
    """``$OPENBOOK_CACHE/kb/wiki2015-twin``, the cache directory as openbook resolves it."""
    from openbook.models.loading import cache_dir

    return cache_dir() / "kb" / TWIN_NAME


def default_encoder_info() -> dict:
    """What ``openbook kb build`` records for its default encoder (loading it: its weights are fingerprinted)."""
    from openbook.commands.kb import load_encoder

    return load_encoder("default").info()


def random_encode(dim: int, seed: int = 0):
    """An ``encode_passages`` returning seeded random unit float32 vectors of ``dim`` (the same ones for the same
    batch: the generator is seeded by ``seed`` and the batch's first passage id)."""

    def encode(passages) -> np.ndarray:
        first = passages[0].id if passages else ""
        rng = np.random.default_rng([seed, zlib.crc32(str(first).encode("utf-8")), len(passages)])
        vectors = rng.standard_normal((len(passages), dim), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors

    return encode


def build_twin(sources: list[Path], out: Path, *, encoder_info: dict, seed: int = 0, index: str | None = None,
               index_params: dict | None = None, dtype: str = "float32", max_words: int = 100,
               batch_size: int = 4096, force: bool = False, progress: bool = True):
    """Build the twin of ``sources`` at ``out`` through ``KnowledgeBase.build`` with :func:`random_encode`
    vectors of ``encoder_info["dim"]``; return the loaded knowledge base."""
    from openbook.corpus import RecordErrors, SourceReport, check_sources, iter_source_passages
    from openbook.index.kb import KnowledgeBase
    from openbook.index.kb.layout import DEFAULT_INDEX

    sources = check_sources(sources)
    errors, report = RecordErrors("stop"), SourceReport()
    names = ", ".join(str(s) for s in sources)
    return KnowledgeBase.build(
        lambda: iter_source_passages(sources, max_words, errors, report),
        random_encode(int(encoder_info["dim"]), seed),
        encoder_info,
        out,
        batch_size=batch_size,
        progress=progress,
        index_type=index or DEFAULT_INDEX,
        index_params=index_params,
        dtype=dtype,
        on_error=errors,
        resume=True,
        description=f"latency twin of {names}: random vectors (seed {seed}), its answers are meaningless",
        source_info={"sources": [str(s.resolve()) for s in sources], "max_words": max_words,
                     "twin_random_vectors_seed": seed},
        replace=force,
    )


def main(argv=None) -> None:
    from _common import print_header

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sources", nargs="*", type=Path, default=[DEFAULT_SOURCE], metavar="SOURCE",
                   help="corpus files or folders, as for `openbook kb build` (default: %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="the twin's directory (default: $OPENBOOK_CACHE/kb/"
                                                          f"{TWIN_NAME})")
    p.add_argument("--index", default=None, help="index type, as `kb build --index` (default: kb build's)")
    p.add_argument("--index-param", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--dtype", default="float32", help="how the vectors are stored (default: %(default)s)")
    p.add_argument("--max-words", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=4096, help="passages per batch (the unit of resuming)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="replace a twin already at --out")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    print_header()
    from openbook.corpus import check_sources
    from openbook.errors import InputError
    from openbook.index.kb import disk_usage, parse_index_params

    out = args.out or default_out()
    try:
        check_sources(args.sources)  # before the encoder loads: a wrong path fails at once
    except InputError as error:
        raise SystemExit(f"twin_kb.py: {error}") from None
    start = time.perf_counter()
    info = default_encoder_info()
    kb = build_twin(args.sources, out, encoder_info=info, seed=args.seed, index=args.index,
                    index_params=parse_index_params(args.index_param), dtype=args.dtype, max_words=args.max_words,
                    batch_size=args.batch_size, force=args.force, progress=not args.quiet)
    seconds = time.perf_counter() - start
    sizes = disk_usage(kb.path)
    rows, manifest = kb.num_rows, kb.manifest
    kb.close()
    print(f"twin {out}: {rows} passages (random vectors: answers from it are meaningless) in {seconds:.0f} s")
    print(json.dumps({"path": str(out), "rows": rows, "seconds": round(seconds, 1),
                      "disk_bytes": sizes.pop("total"), "files": sizes, "index": manifest["index_type"],
                      "dim": manifest["dim"], "dtype": manifest["dtype"], "seed": args.seed,
                      "encoder": manifest["encoder"]["name"], "sources": [str(s) for s in args.sources]}))


if __name__ == "__main__":
    main()
