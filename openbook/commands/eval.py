"""``openbook eval``: evaluation commands. ``openbook eval retrieval`` measures retrieval recall@k.

``eval`` is a command group (``openbook eval TASK ...``) so that more evaluations can be added beside
``retrieval``. Nothing heavy is imported until a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO
from openbook.commands import positive_int

DEFAULT_K_TEXT = "1,5,20,100"
RETRIEVERS = ("dense", "bm25", "hybrid")
MATCH_MODES = ("dpr", "lenient")


def _k_list(text: str) -> list[int]:
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"every k must be at least 1, got {value}")
        values.append(value)
    return sorted(set(values))


def _name_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in RETRIEVERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"retrievers are a comma-separated subset of {','.join(RETRIEVERS)}, got {text!r}"
        )
    return list(dict.fromkeys(names))




def register(subparsers) -> None:
    """Add the ``eval`` command group to the top-level ``subparsers``."""
    group = subparsers.add_parser(
        "eval",
        help="evaluate openbook on a question set (eval retrieval: retrieval recall@k)",
        description="Evaluation commands. Run `openbook eval TASK --help` for one of them.",
    )
    tasks = group.add_subparsers(dest="eval_task", metavar="TASK", required=True)
    retrieval = tasks.add_parser(
        "retrieval",
        help="recall@k of the dense, BM25 and hybrid retrievers: answer string and gold passage in the top k",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "For every question, retrieve the top k passages with the dense retriever (the RAG query\n"
            "encoder over the knowledge base's index), BM25 (over the same passages; cached in the\n"
            "knowledge base's bm25/ folder) and their reciprocal rank fusion (hybrid, top 100 of each),\n"
            "and report the fraction of questions whose top k holds an answer string (DPR's has_answer\n"
            "matching) and, where the question set names one, the gold passage."
        ),
        epilog=(
            "question files: JSON Lines (plain or .gz) in the NQ-open oracle form\n"
            "  {question, answers: [str], ctxs: [{title, text}, ...]}  (ctxs[0] = gold passage)\n"
            "or plain {question, answers} lines (no gold-passage recall then).\n\n"
            "example:\n"
            "  openbook eval retrieval --questions nq-open-oracle.dev-split.jsonl.gz --limit 200"
        ),
    )
    retrieval.add_argument("--questions", metavar="FILE", required=True, help="the question set (JSON Lines, .gz ok)")
    retrieval.add_argument(
        "--kb", metavar="DIR", default=None, help="knowledge-base directory (default: the shipped demo knowledge base)"
    )
    retrieval.add_argument(
        "--encoder",
        metavar="NAME_OR_PATH",
        default="default",
        help="query encoder q(x); must match the knowledge base's (default: the offline all-MiniLM-L6-v2)",
    )
    retrieval.add_argument(
        "--k", type=_k_list, default=_k_list(DEFAULT_K_TEXT), metavar="K,K,...",
        help=f"cut-offs for recall@k (default: {DEFAULT_K_TEXT})",
    )
    retrieval.add_argument("--limit", type=positive_int, metavar="N", default=None, help="evaluate the first N questions")
    retrieval.add_argument(
        "--retrievers", type=_name_list, default=list(RETRIEVERS), metavar="NAMES",
        help=f"comma-separated retrievers to evaluate (default: {','.join(RETRIEVERS)})",
    )
    retrieval.add_argument(
        "--match", choices=MATCH_MODES, default="dpr",
        help="answer matching: DPR's tokenised has_answer, or 'lenient' (also ignore accents and punctuation) "
        "(default: %(default)s)",
    )
    retrieval.add_argument(
        "--batch-size", type=positive_int, metavar="N", default=64, help="questions per batch (default: %(default)s)"
    )
    retrieval.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    retrieval.set_defaults(handler=_cmd_retrieval, subparser=retrieval)


def _cmd_retrieval(args: argparse.Namespace) -> int:
    from openbook.eval.datasets import read_nq_open

    # Read the questions before loading any model, so a wrong path fails in milliseconds.
    questions = read_nq_open(args.questions, limit=args.limit)

    from openbook.eval.retrieval import evaluate_retrieval, standard_retrievers
    from openbook.models import load_encoder

    encoder = load_encoder(args.encoder)
    if args.kb is None:
        from openbook.rag.assemble import demo_knowledge_base

        kb = demo_knowledge_base(encoder)
    else:
        from openbook.index import KnowledgeBase

        kb = KnowledgeBase.load(args.kb, expected_encoder=encoder.info())
    retrievers = standard_retrievers(encoder, kb, args.retrievers, progress=True)
    report = evaluate_retrieval(
        questions, retrievers, ks=args.k, batch_size=args.batch_size, mode=args.match, progress=sys.stderr.isatty()
    )
    result = {
        "questions": str(args.questions),
        "knowledge_base": str(kb.path),
        "num_passages": len(kb),
        "encoder": encoder.name,
        **report,
    }
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        print_table(result, sys.stdout)
    return 0


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f}"


def print_table(result: dict[str, Any], out: TextIO) -> None:
    """The report as a table: one row per retriever, recall@k (%) of answers, then of gold passages."""
    ks = result["ks"]
    print(
        f"{result['num_questions']} questions ({result['num_with_gold']} with a gold passage); knowledge base "
        f"{result['knowledge_base']} ({result['num_passages']:,} passages); encoder {result['encoder']}; "
        f"answer match: {result['match']}",
        file=out,
    )
    width = 7
    block = width * len(ks)
    name_width = max([9] + [len(name) for name in result["retrievers"]])
    print(file=out)
    print(f"{'':<{name_width}}  {'answer recall@k (%)':>{block}}  {'gold recall@k (%)':>{block}}", file=out)
    cells = "".join(f"{'@' + str(k):>{width}}" for k in ks)
    print(f"{'retriever':<{name_width}}  {cells}  {cells}  {'time (s)':>9}", file=out)
    for name, row in result["retrievers"].items():
        answer = "".join(f"{_percent(row['answer_recall'][k]):>{width}}" for k in ks)
        gold_recall = row["gold_recall"] or {}
        gold = "".join(f"{_percent(gold_recall.get(k)):>{width}}" for k in ks)
        print(f"{name:<{name_width}}  {answer}  {gold}  {row['seconds']:>9.1f}", file=out)
