"""``openbook eval``: evaluation commands.

* ``openbook eval --task T --data FILE [--kb DIR] [--model ...]`` evaluates a model on a task of
  :mod:`openbook.eval.tasks` (NQ, WebQuestions, CuratedTrec, abstractive QA, Jeopardy, FEVER, BoolQ
  ...) and writes a JSON report and a Markdown summary that keep every prediction;
* ``openbook eval retrieval ...`` measures retrieval recall@k.

``eval`` is a command group whose subcommand is optional: without one, ``--task`` says what to run.
Nothing heavy is imported until a command runs (not even the task registry, which imports numpy).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from openbook.commands import k_list, options, positive_int
from openbook.presets import PAPER, RETRIEVERS

DEFAULT_K_TEXT = "1,5,20,100"
MATCH_MODES = ("dpr", "lenient", "regex")
# The names of openbook.eval.tasks.TASKS, spelled out so that building the parser imports nothing
# (a test checks that the two agree).
TASK_NAMES = (
    "nq", "webquestions", "curatedtrec", "qa", "abstractive", "jeopardy", "fever3", "fever2", "boolq", "boolq-passage",
    "kilt",
)


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
        help="evaluate a model on a task (eval --task T --data FILE), or retrieval recall@k (eval retrieval)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Evaluate a RAG model on a task: predict every example of --data, score each prediction with\n"
            "the task's metrics, and write OUT/report.json (settings, metrics, every prediction with its\n"
            "scores and retrieved passages) and OUT/report.md (a summary table, then every prediction).\n"
            "Classification tasks (fever3, fever2, boolq) pick the one-token label the model finds most\n"
            "likely instead of generating freely. Or run `openbook eval retrieval --help` for recall@k."
        ),
        epilog=(
            "tasks and their data formats:\n"
            "  nq            JSON Lines {question, answers: [str], ctxs?}        exact match, F1\n"
            "  webquestions  JSON array [{qId, qText, answers: [str]}]           exact match, F1\n"
            "  curatedtrec   TSV id<TAB>type<TAB>question<TAB>regex              regex match\n"
            "  qa            JSON Lines {question, answers} or {input, target}   exact match, F1\n"
            "  abstractive   JSON Lines {input, target} or {question, answers}   BLEU-1, ROUGE-L\n"
            "  jeopardy      JSON Lines {context: 'CATEGORY: clue', continuation: answer}\n"
            "                (generate the clue from the answer)                 Q-BLEU-1, BLEU-1, ROUGE-L\n"
            "  fever3/fever2 official FEVER JSON Lines {id, label, claim, evidence} label accuracy\n"
            "  boolq         JSON Lines {query: 'Passage: ...\\nQuestion: ...', choices, gold}\n"
            "                (question only; boolq-passage: with the passage)   label accuracy\n"
            "  kilt          KILT JSON Lines {id, input, output: [{answer, provenance}]}\n"
            "                (any KILT task; answers = the non-empty answers)    exact match, F1\n\n"
            "example:\n"
            "  openbook eval --task nq --data nq-open.jsonl.gz --kb my-kb --limit 200 --out eval-nq"
        ),
    )
    group.add_argument("--task", choices=TASK_NAMES, metavar="T", default=None,
                       help=f"the task: {', '.join(TASK_NAMES)}")
    group.add_argument("--data", metavar="FILE", help="the task's data file (its format: see below)")
    options.add_options(group, "kb", "model", "generator", "untrained", "encoder", "run", "retriever", "k", "beams", "decoding",
                        "max-new-tokens", "dtype", "device", "batch-size", "quiet", closed_book=True)
    group.add_argument("--limit", type=positive_int, metavar="N", default=None, help="evaluate the first N examples")
    group.add_argument("--out", metavar="DIR", default=None,
                       help="where report.json and report.md go (default: ./eval-TASK)")
    group.add_argument("--json", action="store_true",
                       help="print the metrics and settings as one JSON object instead of a table")
    group.set_defaults(handler=_cmd_task, subparser=group)
    tasks = group.add_subparsers(dest="eval_task", metavar="SUBCOMMAND", required=False)
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
    options.add_options(retrieval, "kb", "encoder", "device", "quiet")
    retrieval.add_argument(
        "--k", type=k_list, default=k_list(DEFAULT_K_TEXT), metavar="K,K,...",
        help=f"cut-offs for recall@k (default: {DEFAULT_K_TEXT})",
    )
    retrieval.add_argument("--limit", type=positive_int, metavar="N", default=None, help="evaluate the first N questions")
    retrieval.add_argument(
        "--retrievers", type=_name_list, default=list(RETRIEVERS), metavar="NAMES",
        help=f"comma-separated retrievers to evaluate (default: {','.join(RETRIEVERS)})",
    )
    retrieval.add_argument(
        "--match", choices=MATCH_MODES, default="dpr",
        help="answer matching: DPR's tokenised has_answer, 'lenient' (also ignore accents and punctuation) or "
        "'regex' (answers are regular expressions matched anywhere in the passage, as CuratedTrec's) "
        "(default: %(default)s)",
    )
    retrieval.add_argument(
        "--batch-size", type=positive_int, metavar="N", default=64, help="questions per batch (default: %(default)s)"
    )
    retrieval.add_argument(
        "--anywhere", action="store_true",
        help="also the share of questions whose answer is in any passage of the knowledge base: the ceiling of "
        "every retriever's recall over it (one pass over its passages)",
    )
    retrieval.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    retrieval.set_defaults(handler=_cmd_retrieval, subparser=retrieval)


def _cmd_task(args: argparse.Namespace) -> int:
    """``openbook eval --task T --data FILE ...``: evaluate, write the reports, print the metrics."""
    if args.task is None:
        args.subparser.error(f"give --task T (one of {', '.join(TASK_NAMES)}) and --data FILE, or a subcommand "
                             "(retrieval)")
    if args.data is None:
        args.subparser.error(f"--task {args.task} needs --data FILE")
    from openbook.eval.tasks import get_task

    # Read the data before loading any model, so a wrong path or a malformed record fails in milliseconds.
    task = get_task(args.task)
    examples = task.read(args.data, limit=args.limit)
    out = Path(args.out if args.out is not None else f"eval-{task.name}")
    if out.exists() and not out.is_dir():
        from openbook.errors import InputError

        raise InputError(f"--out {out}: exists and is not a directory")

    model = options.model_from_args(args)
    from openbook.eval.evaluate import evaluate, write_report

    report = evaluate(
        model, task, examples, k=args.k, batch_size=args.batch_size, num_beams=args.beams,
        max_new_tokens=args.max_new_tokens, decoding=args.decoding or PAPER.decoding,
        progress=not args.quiet,
    )
    report["settings"] = {
        "data": str(args.data),
        "limit": args.limit,
        **({"run": str(args.run)} if args.run else {"generator": args.generator}),  # encoder: the model's, below
        "dtype": args.dtype,
        "device": str(options.device(args)),
        **report["settings"],
    }
    json_path, md_path = write_report(report, out)
    summary = {
        "task": report["task"], "model": report["model"], "n": report["n"], "metrics": report["metrics"],
        "settings": report["settings"], "report": {"json": str(json_path), "markdown": str(md_path)},
    }
    if args.json:
        print(json.dumps(summary, ensure_ascii=False, indent=2))
    else:
        print_metrics(summary, sys.stdout)
    return 0


def print_metrics(summary: dict[str, Any], out: TextIO) -> None:
    """The metrics of an ``eval --task`` run as a small table (scores x 100), then where the reports are."""
    print(f"{summary['task']}: {summary['n']} examples, model {summary['model']}", file=out)
    width = max([6] + [len(name) for name in summary["metrics"]])
    for name, value in summary["metrics"].items():
        print(f"  {name:<{width}}  {100.0 * value:6.2f}", file=out)
    print(f"report: {summary['report']['json']}", file=out)
    print(f"summary: {summary['report']['markdown']}", file=out)


def _cmd_retrieval(args: argparse.Namespace) -> int:
    if getattr(args, "task", None) is not None or getattr(args, "data", None) is not None:
        args.subparser.error("--task and --data belong to `openbook eval --task T`, not to `eval retrieval`")
    from openbook.eval.datasets import read_nq_open

    # Read the questions before loading any model, so a wrong path fails in milliseconds.
    questions = read_nq_open(args.questions, limit=args.limit)

    from openbook.commands import kb as kb_commands
    from openbook.eval.retrieval import evaluate_retrieval, standard_retrievers
    from openbook.index import load_knowledge_base
    from openbook.rag.assemble import demo_knowledge_base, encoder_name

    device = options.device(args)  # a missing GPU fails before the encoder loads
    encoder = kb_commands.load_encoder(encoder_name(args.encoder, args.kb)).to(device)
    if args.kb is None:
        kb = demo_knowledge_base(encoder)
    else:
        kb = load_knowledge_base(args.kb, expected_encoder=encoder.info())
    retrievers = standard_retrievers(encoder, kb, args.retrievers, progress=not args.quiet)
    report = evaluate_retrieval(
        questions, retrievers, ks=args.k, batch_size=args.batch_size, mode=args.match, progress=not args.quiet
    )
    result = {
        "questions": str(args.questions),
        "knowledge_base": str(kb.path),
        "num_passages": len(kb),
        "encoder": encoder.name,
        **report,
    }
    if args.anywhere:
        result.update(_anywhere(questions, kb, args.match, not args.quiet))
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        print_table(result, sys.stdout)
    return 0


def _anywhere(questions, kb, match: str, progress: bool) -> dict[str, Any]:
    """``answer_anywhere``: the share of ``questions`` whose answer is in some passage of ``kb``, and its seconds."""
    import time

    from openbook.eval.retrieval import answers_anywhere
    from openbook.progress import progress_bar

    began = time.perf_counter()
    texts = progress_bar((passage.text for passage in kb), total=len(kb), desc="answers anywhere", unit="passage",
                         enabled=progress)
    found = answers_anywhere(texts, [q["answers"] for q in questions], match)
    return {"answer_anywhere": float(found.mean()), "answer_anywhere_seconds": round(time.perf_counter() - began, 1)}


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
    if "answer_anywhere" in result:
        print(f"\nanswer in any passage of the knowledge base: {_percent(result['answer_anywhere'])}% "
              f"({result['answer_anywhere_seconds']:.1f} s)", file=out)
