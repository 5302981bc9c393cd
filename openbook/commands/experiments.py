"""`openbook experiments ...`: the paper's experiments as one command each, writing a report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(commands) -> None:
    p = commands.add_parser("experiments", help="run one of the paper's experiments and write a report")
    group = p.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    hs = group.add_parser(
        "hot-swap",
        help="swap a 2016 and a 2018 knowledge base of world leaders (paper 4.5)",
        description="Accuracy for the four index/era pairings on offices whose holder changed between "
        "2016-12-31 and 2018-12-31 (paper: 70%% and 68%% matched, 12%% and 4%% mismatched).",
    )
    hs.add_argument("--leaders", required=True, metavar="CSV", help="wikidata-leaders-history.csv")
    hs.add_argument("--out", required=True, metavar="DIR", help="report and knowledge bases go here")
    hs.add_argument("--model", choices=("rag-sequence", "rag-token"), default="rag-sequence")
    hs.add_argument("--generator", default="default", help="e.g. a checkpoint trained with openbook train")
    hs.add_argument("--encoder", default="default")
    hs.add_argument("--k", type=int, default=5)
    hs.add_argument("--beams", type=int, default=1)
    hs.add_argument("--max-new-tokens", type=int, default=24)
    hs.add_argument("--limit", type=int, help="first N changed offices only")
    hs.add_argument("--json", action="store_true", help="end with one JSON line of the four accuracies")
    hs.set_defaults(handler=run_hot_swap_command, subparser=hs)


def run_hot_swap_command(args: argparse.Namespace) -> int:
    from openbook.cli import quiet_libraries
    from openbook.experiments.hot_swap import ERAS, run_hot_swap
    from openbook.rag.assemble import build_knowledge_base, load_generator
    from openbook.models import load_encoder
    from openbook.rag.model import RAG

    quiet_libraries()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    encoder = load_encoder(args.encoder)
    build = lambda passages, path: build_knowledge_base(passages, encoder, path, progress=False)  # noqa: E731
    first = build(_probe_passage(), out / "kb-probe")
    rag = RAG(encoder, load_generator(args.generator), first, model=args.model, k=1)
    report = run_hot_swap(rag, args.leaders, out, build, limit=args.limit, k=args.k, num_beams=args.beams,
                          max_new_tokens=args.max_new_tokens)
    report.update(command=" ".join(sys.argv), model=args.model, generator=args.generator, eras=ERAS)
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    acc = report["accuracy"]
    table = [
        "| index \\ question era | 2016 holders | 2018 holders |",
        "|---|---|---|",
        f"| 2016 index | {acc['index2016_era2016']:.1%} | {acc['index2016_era2018']:.1%} |",
        f"| 2018 index | {acc['index2018_era2016']:.1%} | {acc['index2018_era2018']:.1%} |",
    ]
    (out / "report.md").write_text(
        f"# Index hot-swap ({report['offices']} offices whose holder changed)\n\n" + "\n".join(table) + "\n"
    )
    print("\n".join(table))
    if args.json:
        print(json.dumps(acc))
    return 0


def _probe_passage():
    from openbook.corpus import Passage

    return [Passage("probe", "openbook", "placeholder until the first era's knowledge base is swapped in")]
