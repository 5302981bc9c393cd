"""``openbook kb shard KB --shards S --out DIR``: split a knowledge base into S shards (see
:mod:`openbook.index.sharded`). Every command taking ``--kb`` accepts the result."""

from __future__ import annotations

import argparse
import json

from openbook.commands import options, positive_int


def register(actions) -> None:
    """Add ``kb shard`` to the ``kb`` action subparsers."""
    shard = actions.add_parser(
        "shard",
        help="split a knowledge base into S self-contained shards (searched as one, in-process or on Ray actors)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Split the knowledge base KB (at its current version) into S shards written to DIR/shard-000 ...\n"
            "plus DIR/shards.json. Passage i (in row order) goes to shard i mod S (round-robin); each shard\n"
            "is an ordinary knowledge base with the same encoder, vectors and index type (nothing is\n"
            "re-encoded). Searching DIR fans out to the shards and merges their top k exactly. DIR must not\n"
            "exist; it appears only once complete."
        ),
        epilog="example:\n  openbook kb shard wiki-kb --shards 4 --out wiki-kb-4\n  openbook ask 'who wrote hamlet' --kb wiki-kb-4",
    )
    shard.add_argument("kb", metavar="KB", help="the knowledge base to split")
    shard.add_argument("--shards", type=positive_int, required=True, metavar="S", help="number of shards")
    shard.add_argument("--out", required=True, metavar="DIR", help="new folder for the shards")
    shard.add_argument("--json", action="store_true", help="print shards.json")
    options.add_options(shard, "quiet")
    shard.set_defaults(handler=_cmd_shard)


def _cmd_shard(args: argparse.Namespace) -> int:
    from openbook.index.sharded import read_shards_manifest, shard_knowledge_base

    out = shard_knowledge_base(args.kb, args.shards, args.out, progress=not args.quiet)
    manifest = read_shards_manifest(out)
    if args.json:
        print(json.dumps(manifest, indent=2, ensure_ascii=False))
    else:
        sizes = ", ".join(str(n) for n in manifest["shard_rows"])
        print(f"sharded knowledge base {out}: {manifest['num_passages']} passages of {args.kb} in "
              f"{manifest['num_shards']} shards ({sizes} passages, round-robin), {manifest['index_type']} index")
    return 0
