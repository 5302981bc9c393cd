"""`openbook experiments ...`: the paper's experiments as one command each, writing a report.

hot-swap (4.5) builds its own knowledge bases; the others evaluate trained runs (`openbook train --out`
directories), so one training budget serves several experiments: closed-book-vs-rag (Table 1), ablation
(Table 6), k-sweep (Figure 3), posterior (Figure 2), diversity (Table 5 with Table 2's Jeopardy scores), fever
(Table 2's FEVER accuracies and section 4.4's gold-title overlap)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from openbook.commands import finite_float, k_list, options, positive_int
from openbook.presets import MODELS, PAPER


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
    hs.add_argument("--run", metavar="RUN", help="a run trained with `openbook train --out` (its query encoder "
                    "and generator; the paper swaps the index under its NQ-trained model); default: the untrained "
                    "--generator and --encoder")
    options.add_options(hs, "model", "generator", "untrained", "encoder", "k", "beams", "device")
    hs.add_argument("--max-new-tokens", type=positive_int, metavar="N",
                    help=f"longest answer (default: {HOT_SWAP_MAX_NEW_TOKENS})")
    hs.add_argument("--limit", type=positive_int, help="first N changed offices only")
    hs.add_argument("--json", action="store_true", help="end with one JSON line of the four accuracies")
    hs.set_defaults(handler=run_hot_swap_command, subparser=hs)
    _register_paper_experiments(group)
    for experiment in group.choices.values():  # one check for all: each plots at its end, after hours of work
        experiment.set_defaults(handler=_with_extra(experiment.get_default("handler")))


def _with_extra(handler):
    """``handler``, refusing first (one line, exit 2) if the experiments extra is not installed."""
    def run(args: argparse.Namespace) -> int:
        from openbook.experiments import check_extra

        check_extra()
        return handler(args)

    return run


HOT_SWAP_MAX_NEW_TOKENS = 24
RUN_HELP = ("a run directory from `openbook train --out`, or 'default' (the shipped fine-tuned default; "
            "the untrained offline default models if none is shipped)")


def _experiment(group, name: str, help: str, description: str, handler, data: bool = True):
    """A subcommand with the options every evaluation experiment shares."""
    p = group.add_parser(name, help=help, description=description + " Runs are directories written by "
                         "`openbook train --out` (their run.json and checkpoint), or 'default'.")
    if data:
        p.add_argument("--data", required=True, metavar="FILE", help="dev examples (e.g. NQ-open dev JSONL)")
        p.add_argument("--task", default="nq", help="task reading --data and scoring (default: %(default)s)")
        p.add_argument("--limit", type=positive_int, metavar="N", help="first N dev examples only (default: all)")
        options.add_options(p, "batch-size", "max-new-tokens", "decoding")
    # The reports in docs/experiments decode greedily (--beams 1, fast on a CPU: scripts/real_runs.sh).
    options.add_options(p, "beams", "kb", "device")
    p.add_argument("--out", required=True, metavar="DIR", help="report.json, report.md and the plot go here")
    p.add_argument("--json", action="store_true", help="end with one JSON line of the headline figures")
    p.set_defaults(handler=handler, subparser=p)
    return p


def _register_paper_experiments(group) -> None:
    from openbook.experiments.posterior import MIN_MOVED

    p = _experiment(group, "closed-book-vs-rag", "exact match of closed-book, RAG-Sequence, RAG-Token (Table 1)",
                    "Exact match of the generator alone and of RAG on the same dev questions (paper Table 1).",
                    _closed_book_vs_rag)
    _model_runs(p)
    p.add_argument("--k", type=positive_int, help="passages per question (default: each run's own k)")
    p = _experiment(group, "ablation", "BM25 vs frozen vs learned retriever (Table 6)",
                    "Exact match and answer recall@5 of RAG with BM25, a frozen and a learned retriever (paper "
                    "Table 6), with paired significance tests. One trained model may stand for several systems "
                    "(--bm25 default --frozen default: the shipped default answering from BM25's and from the "
                    "dense retriever's passages); the report says which were trained with their retriever.",
                    _ablation)
    for name, what in (("bm25", "answering with BM25 (trained with --retriever bm25, or only decoded with it)"),
                       ("frozen", "answering with the dense retriever (trained with --freeze-retriever)"),
                       ("learned", "answering with the dense retriever (trained end to end)")):
        p.add_argument(f"--{name}", metavar="RUN", help=f"a run {what}; " + RUN_HELP)
    p.add_argument("--model", choices=MODELS, default="rag-sequence",
                   help="the kind of 'default' runs (default: %(default)s)")
    p.add_argument("--k", type=positive_int, help="passages per question (default: each run's own k)")
    p = _experiment(group, "k-sweep", "exact match and answer recall vs test-time k (Figure 3)",
                    "Exact match and answer recall@k for each test-time k (paper Figure 3), the spread of p(z|x), "
                    "and paired significance tests between the ks.", _k_sweep)
    p.add_argument("--run", action="append", metavar="RUN", help="repeatable; " + RUN_HELP + " (default: default)")
    p.add_argument("--ks", type=k_list, default="1,2,3,5,10", metavar="K,K,...",
                   help="comma-separated test-time k (default: %(default)s)")
    p.add_argument("--model", choices=MODELS, default="rag-sequence",
                   help="the kind of 'default' runs (default: %(default)s)")
    p.add_argument("--score-scale", type=finite_float, metavar="S", help="multiply the retrieval scores by S in p(z|x) "
                   "instead of each run's own scale (smaller: a flatter prior over the top k)")
    p = _experiment(group, "posterior", "RAG-Token per-token document posterior heat map (Figure 2)",
                    "Generate with RAG-Token and plot p(z_i|x, y_i, y_<i) per token and document (paper Figure 2).",
                    _posterior, data=False)
    p.add_argument("--run", required=True, metavar="RUN", help=RUN_HELP + " (decoded as RAG-Token)")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--question", help="the input x")
    given.add_argument("--inputs", metavar="FILE", help="find a hand-over: decode the inputs of FILE (read by "
                       "--task) and show the generation whose document posterior moves most between two tokens "
                       "with different most probable documents")
    p.add_argument("--task", default="jeopardy", help="task reading --inputs; its answer length is the default "
                   "--max-new-tokens (default: %(default)s)")
    p.add_argument("--min-moved", type=_fraction, default=MIN_MOVED, metavar="P",
                   help="with --inputs: the least posterior mass a hand-over moves (default: %(default)s)")
    p.add_argument("--limit", type=positive_int, metavar="N", help="first N inputs of --inputs only")
    options.add_options(p, "batch-size")
    p.add_argument("--k", type=positive_int, default=5, help="documents (default: %(default)s)")
    options.add_options(p, "max-new-tokens")  # the paper preset's: the --task's answer length
    p = _experiment(group, "diversity", "distinct/total trigrams of the generations (Table 5)",
                    "Ratio of distinct to total trigrams of each model's generations and of the gold targets "
                    "(paper Table 5; the paper's setting is --task jeopardy).", _diversity)
    _model_runs(p)
    p.add_argument("--k", type=positive_int, help="passages per question (default: each run's own k)")
    p = _experiment(group, "fever", "FEVER 3-way / 2-way label accuracy and gold-title overlap (Table 2)",
                    "Label accuracy of RAG, the closed-book generator and the training part's majority class on "
                    "held-out FEVER claims, 3-way and 2-way, and how often RAG's top passages come from a gold "
                    "evidence article (paper Table 2 and section 4.4).", _fever, data=False)
    p.add_argument("--data", required=True, metavar="FILE", help="held-out FEVER claims (official JSON Lines)")
    p.add_argument("--train", required=True, metavar="FILE", help="the training part (its majority class)")
    p.add_argument("--rag", metavar="RUN", help="a RAG run trained with --task fever3; " + RUN_HELP)
    p.add_argument("--closed-book", metavar="RUN", help="a closed-book run trained with --task fever3; " + RUN_HELP)
    p.add_argument("--limit", type=positive_int, metavar="N", help="first N held-out claims only")
    options.add_options(p, "batch-size")
    p.add_argument("--k", type=positive_int, help="passages per claim (default: each run's own k)")
    p.add_argument("--overlap-k", type=positive_int, default=10, metavar="K",
                   help="passages checked for a gold article (default: %(default)s, the paper's)")


def _fraction(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {value!r}")
    return number


def _model_runs(p) -> None:
    for name in ("closed-book", *MODELS):
        p.add_argument(f"--{name}", metavar="RUN", help=RUN_HELP)


def _settings(args: argparse.Namespace):
    from openbook.experiments.report import EvalSettings

    options.quiet_libraries()
    return EvalSettings(data=args.data, task=args.task, limit=args.limit, batch_size=args.batch_size,
                        beams=args.beams, max_new_tokens=args.max_new_tokens,
                        decoding=args.decoding or PAPER.decoding, kb=args.kb,
                        k=args.k, device=str(options.device(args)))


def _given(args: argparse.Namespace, names) -> dict[str, str]:
    runs = {name: getattr(args, name.replace("-", "_")) for name in names}
    runs = {name: run for name, run in runs.items() if run}
    if not runs:
        args.subparser.error(f"give at least one of {', '.join('--' + n for n in names)}")
    return runs


def _closed_book_vs_rag(args: argparse.Namespace) -> int:
    from openbook.experiments.closed_book_vs_rag import MODELS, run_closed_book_vs_rag

    runs = _given(args, MODELS)
    return run_closed_book_vs_rag(runs, _settings(args), args.out, args.json)


def _ablation(args: argparse.Namespace) -> int:
    from openbook.experiments.ablation import RETRIEVERS, run_ablation

    runs = _given(args, RETRIEVERS)
    return run_ablation(runs, _settings(args), args.out, args.json, model=args.model)


def _k_sweep(args: argparse.Namespace) -> int:
    from openbook.experiments.k_sweep import run_k_sweep

    args.k = None
    return run_k_sweep(args.run or ["default"], args.ks, _settings(args), args.out, args.json, model=args.model,
                       score_scale=args.score_scale)


def _posterior(args: argparse.Namespace) -> int:
    from openbook.experiments.posterior import run_posterior

    options.quiet_libraries()
    inputs = None
    if args.inputs:
        from openbook.experiments.report import EvalSettings, read_examples

        _, examples = read_examples(EvalSettings(data=args.inputs, task=args.task, limit=args.limit))
        inputs = [ex.input for ex in examples]
    return run_posterior(args.run, args.question, args.out, k=args.k, beams=args.beams,
                         max_new_tokens=args.max_new_tokens, kb=args.kb, as_json=args.json, inputs=inputs,
                         batch_size=args.batch_size, min_moved=args.min_moved, device=str(options.device(args)),
                         task=args.task)


def _fever(args: argparse.Namespace) -> int:
    from openbook.experiments.fever import MODELS, run_fever
    from openbook.experiments.report import EvalSettings

    runs = _given(args, MODELS)
    options.quiet_libraries()
    settings = EvalSettings(data=args.data, task="fever3", limit=args.limit, batch_size=args.batch_size,
                            beams=args.beams, kb=args.kb, k=args.k, device=str(options.device(args)))
    return run_fever(runs, args.train, settings, args.out, args.json, overlap_k=args.overlap_k)


def _diversity(args: argparse.Namespace) -> int:
    from openbook.experiments.closed_book_vs_rag import MODELS
    from openbook.experiments.diversity import run_diversity

    runs = _given(args, MODELS)
    return run_diversity(runs, _settings(args), args.out, args.json)


def run_hot_swap_command(args: argparse.Namespace) -> int:
    from openbook.experiments.hot_swap import ERAS, run_hot_swap
    from openbook.experiments.report import bar_plot
    from openbook.models import load_encoder
    from openbook.rag.assemble import build_knowledge_base, load_model, read_run_spec, shipped_default

    device = options.device(args)  # a missing GPU fails before anything is built
    options.quiet_libraries()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.run:  # the shipped fine-tuned default, as `openbook ask` uses it, unless asked otherwise
        shipped = shipped_default(generator=args.generator, encoder=args.encoder, untrained=args.untrained)
        args.run = str(shipped) if shipped is not None else None
    if args.run:
        for flag, value in (("--generator", args.generator), ("--encoder", args.encoder)):
            if value not in (None, "default"):
                args.subparser.error(f"{flag} and --run exclude each other: a run brings its own models")
        spec = read_run_spec(args.run)
        if spec["model"] == "closed-book":
            args.subparser.error(f"--run {args.run} is a closed-book run: the hot swap needs a retriever")
        # The era indexes are written with the frozen *document* encoder d(z), the run's untrained one;
        # the trained query encoder q(x) only reads them.
        encoder = load_encoder(spec["encoder"]).to(device)
    else:
        encoder = load_encoder(args.encoder or "default").to(device)
    build = lambda passages, path: build_knowledge_base(  # noqa: E731 - rerunning replaces the indexes of --out
        passages, encoder, path, progress=False, replace=True)
    probe = build(_probe_passage(), out / "kb-probe")  # the model starts on this; each era's index replaces it
    if args.run:  # the run's own knowledge base is never loaded
        rag = load_model(run=args.run, kb=probe, model=args.model, dtype=PAPER.dtype, device=device)
        model, generator = rag.model_type, str(Path(args.run).resolve())
    else:
        model, generator = args.model or "rag-sequence", args.generator
        rag = load_model(model=model, kb=probe, generator=args.generator, encoder=encoder, k=1, dtype=PAPER.dtype,
                         device=device)
    k = args.k or options.DEFAULT_K
    report = run_hot_swap(rag, args.leaders, out, build, limit=args.limit, k=k, num_beams=args.beams,
                          max_new_tokens=args.max_new_tokens or HOT_SWAP_MAX_NEW_TOKENS)
    report.update(command=" ".join(sys.argv), model=model, generator=generator, run=args.run, eras=ERAS)
    acc = report["accuracy"]
    bar_plot(out / "hot_swap.png", ["2016 index", "2018 index"],
             {"2016 holders": [acc["index2016_era2016"], acc["index2018_era2016"]],
              "2018 holders": [acc["index2016_era2018"], acc["index2018_era2018"]]},
             f"Index hot-swap: {report['offices']} offices whose holder changed", ylabel="accuracy (%)")
    report["plot"] = "hot_swap.png"
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    table = [
        "| index \\ question era | 2016 holders | 2018 holders |",
        "|---|---|---|",
        f"| 2016 index | {acc['index2016_era2016']:.1%} | {acc['index2016_era2018']:.1%} |",
        f"| 2018 index | {acc['index2018_era2016']:.1%} | {acc['index2018_era2018']:.1%} |",
    ]
    (out / "report.md").write_text(
        f"# Index hot-swap ({report['offices']} offices whose holder changed)\n\n" + "\n".join(table) + "\n\n"
        f"Model: {model}, {'run ' + args.run if args.run else 'generator ' + generator}; k={k}, "
        f"beams={args.beams}. Paper (NQ-trained RAG): 70% and 68% matched, 12% and 4% mismatched.\n\n"
        "![hot_swap.png](hot_swap.png)\n"
    )
    print("\n".join(table))
    if args.json:
        print(json.dumps(acc))
    return 0


def _probe_passage():
    from openbook.corpus import Passage

    return [Passage("probe", "openbook", "placeholder until the first era's knowledge base is swapped in")]
