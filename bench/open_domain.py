"""Open-domain quality of the shipped default over a knowledge base, side by side with the demo book and the paper.

For the held-out questions of each task (the held-out fifths written by ``scripts/split_qa_data.py``, the ones
the model card scores: NQ's fifth of ``nq-open-oracle.dev-split.jsonl.gz``, WebQuestions' and CuratedTrec's
fifths, FEVER's fifth of ``fever.paper_dev.dev-split.jsonl.gz``) it runs the existing commands, one step each:

* ``recall-dense``, ``recall-bm25``, ``recall-hybrid``: ``openbook eval retrieval --k 1,5,20,100
  --retrievers R`` (answer recall@k, DPR's has_answer; CuratedTrec's answers are patterns: ``--match regex``).
  BM25 needs the knowledge base's BM25 index: the first BM25 step builds it and caches it in ``KB/bm25/``;
* ``em``: ``openbook eval --task T`` with the model card's settings (``scripts/eval_default.sh``: greedy, at
  most 16 new tokens, Lazy decoding, float32), exact match (CuratedTrec: regex match);
* FEVER's ``fever``: ``openbook experiments fever --rag default --overlap-k 10``, 3-way and 2-way label
  accuracy of the shipped default and the gold-title overlap of its top 1 and top 10 passages (paper 4.4),
  also among the claims whose gold article is in the book at all.

TriviaQA is measured only if a question file is found (``--triviaqa FILE``, ``{question, answers}`` JSON Lines,
or a ``*trivia*`` file in ``--data-dir``); otherwise its rows say "no data offline".

Each step writes its result atomically to ``OUT/<task>/<step>.json`` (the eval reports beside it); a re-run
skips a step whose result exists for the same ``--limit``, so a long run over a large book resumes where it
was stopped. At the end: a table of this book's figures, the demo book's (this bench's own run over it, its step
records kept in docs/models/default/open-domain/, and the model card's exact match; "not measured" where there
is none) and the paper's, then one JSON line.

Usage:  OMP_NUM_THREADS=1 PYTHONPATH=. python bench/open_domain.py [--kb DIR] [--data-dir ../shared/data]
        [--out DIR] [--limit N] [--tasks nq,triviaqa,webquestions,curatedtrec,fever] [--only recall|model]

``--kb`` defaults to the shipped demo knowledge base and ``--out`` to ``$OPENBOOK_CACHE/bench/open_domain/<kb
name>``. It prints the CPU and ends with one JSON line of its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
from _common import print_header, quiet  # noqa: E402
from compare_reports import MODEL_CARD_ASK as ASK  # noqa: E402  (the model card's settings)

TASKS = ("nq", "triviaqa", "webquestions", "curatedtrec", "fever")
RETRIEVERS = ("dense", "bm25", "hybrid")
KS = (1, 5, 20, 100)
NO_DATA = "no data offline"
ANYWHERE = "answer in any passage"  # eval retrieval --anywhere: recall at k = every passage
NOT_MEASURED = "not measured"

# The held-out files scripts/split_qa_data.py writes: (retrieval questions, eval task, eval data, answer match)
QA_FILES = {
    "nq": ("nq-dev.jsonl", "nq", "nq-dev.jsonl", "dpr"),
    "webquestions": ("webquestions-heldout.jsonl", "webquestions", "webquestions-heldout.json", "dpr"),
    "curatedtrec": ("curatedtrec-heldout.jsonl", "curatedtrec", "curatedtrec-heldout.tsv", "regex"),
}
EM_METRIC = {"curatedtrec": "regex_match"}  # the others: exact_match

# Lewis et al. 2020, Table 1 (open-domain QA test scores), row RAG-Seq.: exact match; TQA's left column (the
# standard open-domain test set; TQA-Wiki: 68.0)
PAPER_EM = {"nq": 0.445, "triviaqa": 0.568, "webquestions": 0.452, "curatedtrec": 0.522}
# Lewis et al. 2020, Table 2 (FEVER-3 / FEVER-2 label accuracy; one RAG figure for both rows), and section 4.4's
# gold-title overlap: the top retrieved document from a gold article in 71% of claims, one of the top 10 in 90%
PAPER_FEVER = {"fever3": 0.725, "fever2": 0.895, "top1": 0.71, "top10": 0.90}
# The demo book's column: this bench's own run over it (its step records kept in DEMO_RUN/<task>/<step>.json) and
# the model card's exact-match reports (scripts/eval_default.sh steps nq-fp32, webquestions, curatedtrec: the em
# step's command, run there)
DOCS = REPO / "docs"
DEMO_RUN = DOCS / "models" / "default" / "open-domain"
DEMO_EM = {"nq": "nq-fp32", "webquestions": "webquestions", "curatedtrec": "curatedtrec"}
# Until DEMO_RUN holds the default's FEVER step: a FEVER-trained run's report (scripts/real_runs.sh fever), whose
# retrieval (the default's q(x) over the demo book) alone stands for the default's
DEMO_FEVER = DOCS / "experiments" / "fever" / "report.json"


# ---------------------------------------------------------------------------------------------------
# steps


def step_path(out: Path, task: str, step: str) -> Path:
    return out / task / f"{step}.json"


def finished(path: Path, limit: int | None) -> dict | None:
    """The stored result of a step run with the same ``limit``, or None (never run, unreadable or other limit)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("limit") == limit and "result" in record else None


def run_step(out: Path, task: str, step: str, command: list[str], limit: int | None, runner) -> tuple[dict, bool]:
    """``(record, ran)``: the step's stored record if finished, else ``runner(command)``'s result (a dict), timed
    and written atomically to ``OUT/<task>/<step>.json``."""
    from openbook.atomic import atomic_output

    path = step_path(out, task, step)
    done = finished(path, limit)
    if done is not None:
        print(f"  {task} {step}: done before ({done['seconds']:.0f} s), skipped", flush=True)
        return done, False
    print(f"  {task} {step}: {' '.join(command)}", flush=True)
    began = time.perf_counter()
    result = runner(command)
    record = {"task": task, "step": step, "limit": limit, "command": command,
              "seconds": round(time.perf_counter() - began, 1), "result": result}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"  {task} {step}: {record['seconds']:.0f} s", flush=True)
    return record, True


def openbook_json(command: list[str]) -> dict:
    """Run an ``openbook`` command line (this tree first on the path; its progress on stderr) and return the JSON
    it prints: the whole output (``eval --json``) or its last line (``experiments --json``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "openbook", *command], stdout=subprocess.PIPE, text=True,
                          env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"openbook {' '.join(command)}: exit status {done.returncode}")
    try:
        return json.loads(done.stdout)
    except ValueError:
        return json.loads(done.stdout.strip().splitlines()[-1])


def qa_steps(task: str, questions: Path, eval_task: str, eval_data: Path, match: str, out: Path,
             common: list[str]) -> dict[str, list[str]]:
    """step -> ``openbook`` arguments of one QA task."""
    # the dense step also finds the questions with the answer in any passage (--anywhere): every retriever's ceiling
    steps = {f"recall-{name}": ["eval", "retrieval", "--questions", str(questions), "--k", ",".join(map(str, KS)),
                                "--retrievers", name, "--match", match, *(["--anywhere"] if name == "dense" else []),
                                "--json", *common] for name in RETRIEVERS}
    steps["em"] = ["eval", "--task", eval_task, "--data", str(eval_data), *ASK, "--out", str(out / task / "em"),
                   "--json", *common]
    return steps


def fever_steps(heldout: Path, train: Path, out: Path, common: list[str]) -> dict[str, list[str]]:
    return {"fever": ["experiments", "fever", "--data", str(heldout), "--train", str(train), "--rag", "default",
                      "--overlap-k", "10", "--beams", "1", "--out", str(out / "fever" / "report"), "--json",
                      *common]}


def ordered(plan: dict[str, dict[str, list[str]]], only: str | None = None) -> list[tuple[str, str, list[str]]]:
    """``(task, step, command)``: every task's retrieval steps first (minutes), then the model's (hours); ``only``
    "recall" or "model" keeps one kind."""
    steps = [(task, step, command) for task, commands in plan.items() for step, command in commands.items()
             if only is None or step.startswith("recall-") == (only == "recall")]
    return sorted(steps, key=lambda item: not item[1].startswith("recall-"))


def questions_of(record: dict) -> int:
    """How many questions (or claims) a step's result covers."""
    result = record["result"]
    return int(result.get("num_questions") or result.get("n") or result.get("n3") or 0)


def triviaqa_file(data_dir: Path, given: str | None) -> Path | None:
    if given:
        return Path(given)
    found = sorted(p for p in data_dir.glob("*") if "trivia" in p.name.lower() and p.is_file())
    return found[0] if found else None


# ---------------------------------------------------------------------------------------------------
# figures


def figures_of(task: str, records: dict[str, dict]) -> dict[str, float | None]:
    """A task's figures (fractions) from its step records: ``recall@k <retriever>``, ``exact match`` or FEVER's."""
    figures: dict[str, float | None] = {}
    if "answer_anywhere" in records.get("recall-dense", {}).get("result", {}):
        figures[ANYWHERE] = records["recall-dense"]["result"]["answer_anywhere"]
    for name in RETRIEVERS:
        record = records.get(f"recall-{name}")
        if record is not None:
            recall = record["result"]["retrievers"][name]["answer_recall"]
            for k in KS:
                figures[f"recall@{k} {name}"] = recall.get(str(k), recall.get(k))
    if "em" in records:
        figures["exact match"] = records["em"]["result"]["metrics"][EM_METRIC.get(task, "exact_match")]
    if "fever" in records:
        figures.update(fever_figures(records["fever"]["result"], "rag"))
    return figures


def fever_figures(headline: dict, model: str | None) -> dict[str, float | None]:
    """3-way / 2-way accuracy of ``model`` (None: not this run's) and the gold-title overlap of an experiments-fever
    headline."""
    figures: dict[str, float | None] = {}
    if model is not None:
        figures["3-way accuracy"] = headline["fever3"].get(model)
        figures["2-way accuracy"] = headline["fever2"].get(model)
    overlap = headline.get("gold_title_overlap") or {}
    for key, name in (("top1", "gold title top 1"), ("top10", "gold title top 10"), ("in_kb", "gold article in book"),
                      ("top1_in_kb", "gold title top 1, in book"), ("top10_in_kb", "gold title top 10, in book")):
        if key in overlap:
            figures[name] = overlap[key]
    return figures


def demo_figures(docs: Path = DOCS) -> dict[str, dict[str, float | None]]:
    """The demo book's figures: this bench's step records over it (``DEMO_RUN``) and the model card's exact match
    (missing records and figures are left out)."""
    demo: dict[str, dict[str, float | None]] = {task: {} for task in TASKS}
    for path in sorted((docs / DEMO_RUN.relative_to(DOCS)).glob("*/*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if path.parent.name in demo and record.get("limit") is None:
            demo[path.parent.name].update(figures_of(path.parent.name, {record["step"]: record}))
    for task, name in DEMO_EM.items():
        path = docs / "models" / "default" / name / "report.json"
        if path.exists():
            demo[task]["exact match"] = json.loads(path.read_text(encoding="utf-8"))["metrics"][
                EM_METRIC.get(task, "exact_match")]
    fever = docs / DEMO_FEVER.relative_to(DOCS)
    if not demo["fever"] and fever.exists():  # no run of the default: a FEVER-trained run's retrieval figures
        demo["fever"].update(fever_figures(json.loads(fever.read_text(encoding="utf-8"))["headline"], None))
    return demo


def paper_figures() -> dict[str, dict[str, float]]:
    paper: dict[str, dict[str, float]] = {task: {"exact match": value} for task, value in PAPER_EM.items()}
    paper["fever"] = {"3-way accuracy": PAPER_FEVER["fever3"], "2-way accuracy": PAPER_FEVER["fever2"],
                      "gold title top 1": PAPER_FEVER["top1"], "gold title top 10": PAPER_FEVER["top10"]}
    return paper


def metric_names(task: str) -> list[str]:
    if task == "fever":
        return ["3-way accuracy", "2-way accuracy", "gold title top 1", "gold title top 10", "gold article in book",
                "gold title top 1, in book", "gold title top 10, in book"]
    return [ANYWHERE] + [f"recall@{k} {name}" for name in RETRIEVERS for k in KS] + ["exact match"]


def cell(figures: dict, metric: str, absent: str = NOT_MEASURED) -> str:
    """A figure as a percentage; ``absent`` if there is none, "n/a" if it is a fraction of nothing (JSON null)."""
    if metric not in figures:
        return absent
    value = figures[metric]
    return "n/a" if value is None else f"{100.0 * value:.1f}"


def table_rows(tasks, this: dict, demo: dict, paper: dict, missing: dict[str, str]) -> list[list[str]]:
    """``[task, metric, this book, demo book, paper]`` rows; a task that could not run (``missing[task]``, e.g.
    "no data offline") gets one row for all its recall figures and one for its exact match."""
    rows = []
    for task in tasks:
        if task in missing:
            names = metric_names(task)
            if task != "fever":
                rows.append([task, "recall@k, every retriever", missing[task], NOT_MEASURED, "not reported"])
                names = ["exact match"]
            rows += [[task, m, missing[task], cell(demo.get(task, {}), m), cell(paper.get(task, {}), m, "not reported")]
                     for m in names]
            continue
        for metric in metric_names(task):
            rows.append([task, metric, cell(this.get(task, {}), metric), cell(demo.get(task, {}), metric),
                         cell(paper.get(task, {}), metric, "not reported")])
    return rows


def format_table(rows: list[list[str]], headers=("task", "figure (%)", "this book", "demo book", "paper")) -> str:
    widths = [max(len(str(r[i])) for r in [list(headers), *rows]) for i in range(len(headers))]
    lines = ["  ".join(f"{h:<{w}}" for h, w in zip(headers, widths))]
    lines += ["  ".join(f"{c:<{w}}" if i < 2 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------


def task_list(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in names if t not in TASKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"tasks are a comma-separated subset of {','.join(TASKS)}, got {text!r}")
    return list(dict.fromkeys(names))


def main(argv=None, runner=openbook_json) -> dict:
    from openbook.commands import positive_int

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kb", default=None, help="the knowledge base (default: the shipped demo knowledge base)")
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"), help="../shared/data's files")
    p.add_argument("--out", default=None, help="results (default: $OPENBOOK_CACHE/bench/open_domain/<kb name>)")
    p.add_argument("--limit", type=positive_int, default=None, help="the first N questions of each task only")
    p.add_argument("--tasks", type=task_list, default=list(TASKS), help=f"default: {','.join(TASKS)}")
    p.add_argument("--only", choices=("recall", "model"), default=None,
                   help="only the retrieval steps, or only the model's (exact match, FEVER)")
    p.add_argument("--triviaqa", default=None, help="TriviaQA questions, {question, answers} JSON Lines")
    args = p.parse_args(argv)
    print_header()
    quiet()
    from split_qa_data import main as split_data

    from openbook.models.loading import cache_dir

    kb_name = Path(args.kb).resolve().name if args.kb else "demo"
    out = Path(args.out) if args.out else cache_dir() / "bench" / "open_domain" / kb_name
    data_dir = Path(args.data_dir)
    data = out / "data"
    if not (data / "fever-train.jsonl").exists():  # the held-out fifths, exactly as runs/data has them
        split_data(["--data-dir", str(data_dir), "--out", str(data)])
    common = [*(["--kb", args.kb] if args.kb else []), *(["--limit", str(args.limit)] if args.limit else [])]
    trivia = triviaqa_file(data_dir, args.triviaqa)
    plan: dict[str, dict[str, list[str]]] = {}
    missing: dict[str, str] = {}
    for task in args.tasks:
        if task == "fever":
            plan[task] = fever_steps(data / "fever-heldout.jsonl", data / "fever-train.jsonl", out, common)
        elif task == "triviaqa":
            if trivia is None:
                missing[task] = NO_DATA
            else:
                plan[task] = qa_steps(task, trivia, "qa", trivia, "dpr", out, common)
        else:
            questions, eval_task, eval_data, match = QA_FILES[task]
            plan[task] = qa_steps(task, data / questions, eval_task, data / eval_data, match, out, common)
    print(f"knowledge base: {args.kb or 'the demo knowledge base'}; results in {out}; limit {args.limit}"
          + "".join(f"; {task}: {why}" for task, why in missing.items()), flush=True)

    records: dict[str, dict[str, dict]] = {}
    ran = skipped = 0
    for task, step, command in ordered(plan, args.only):
        record, fresh = run_step(out, task, step, command, args.limit, runner)
        records.setdefault(task, {})[step] = record
        ran, skipped = ran + fresh, skipped + (not fresh)
    for task, step, _ in ordered(plan):  # steps left out by --only: their results of an earlier run, if any
        done = finished(step_path(out, task, step), args.limit)
        if step not in records.get(task, {}) and done is not None:
            records.setdefault(task, {})[step] = done
    records = {task: records[task] for task in plan if task in records}
    this = {task: figures_of(task, steps) for task, steps in records.items()}
    rows = table_rows(args.tasks, this, demo_figures(), paper_figures(), missing)
    print("\n" + format_table(rows))
    print(f"\ndemo book: this bench's run over it ({DEMO_RUN.relative_to(REPO)}) and the model card's exact match "
          "(float32, the em step's command); without the run's FEVER step, FEVER's figures are retrieval only "
          f"({DEMO_FEVER.relative_to(REPO)}: a FEVER-trained run, same retriever)")
    seconds = {task: {step: r["seconds"] for step, r in steps.items()} for task, steps in records.items()}
    print("seconds per step (per question, start-up included): " + "; ".join(
        f"{task} {step} {r['seconds']:.0f} ({r['seconds'] / max(1, questions_of(r)):.2f})"
        for task, steps in records.items() for step, r in steps.items()))
    summary = {"kb": args.kb or "demo", "limit": args.limit, "out": str(out), "steps_run": ran,
               "steps_skipped": skipped, "missing": missing, "figures": this, "seconds": seconds}
    print(json.dumps(summary, ensure_ascii=False))
    return summary


if __name__ == "__main__":
    main()
