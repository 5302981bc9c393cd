"""Retriever ablation (paper Table 6): RAG with a fixed BM25 retriever, with the dense retriever frozen
during training, and with it learned end to end, compared by exact match and by the retriever's answer
recall@5 (the fraction of questions with a gold answer in one of the top 5 passages), with a paired
significance test for each pair of systems. Paper, NQ dev exact match, RAG-Token / RAG-Sequence: BM25
29.7 / 31.8, Frozen 37.8 / 41.2, Learned 43.5 / 44.0.

The paper trains one model per retriever. The systems here may also share one trained model decoded with
different retrievers (``--bm25 default --frozen default``: the shipped default, trained with a frozen
retriever, answering from BM25's and from the dense retriever's passages), so the report says of each
system whether it was trained with its retriever or only decoded with it."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

from openbook.errors import InputError
from openbook.experiments.report import (
    DEFAULT,
    EvalSettings,
    answer_hits,
    answer_recall,
    bar_plot,
    evaluate_model,
    finish,
    paired_test,
    question_scores,
    read_examples,
    run_path,
    with_model,
)

RETRIEVERS = ("bm25", "frozen", "learned")
DECODE_WITH = {"bm25": "bm25", "frozen": "dense", "learned": "dense"}  # the retriever each system answers with
RECALL_K = 5


def trained_with(run: str) -> str:
    """How ``run`` was trained: ``bm25``, ``frozen`` or ``learned`` (dense retriever fixed or updated),
    ``hybrid``, ``dense`` (a run.json that predates the record of freezing), or ``untrained``."""
    from openbook.rag.assemble import read_run_spec

    path = run_path(run)
    if path is None:
        return "untrained"
    if not path.is_dir():
        raise InputError(f"{run}: not a run directory (from `openbook train --out`) nor {DEFAULT!r}")
    spec = read_run_spec(path)
    if spec["model"] == "closed-book":
        raise InputError(f"{run} is a closed-book run: the ablation compares retrievers")
    retriever = spec.get("retriever", "dense")
    if retriever != "dense" or "freeze_retriever" not in spec:
        return retriever
    return "frozen" if spec["freeze_retriever"] else "learned"


def training_note(system: str, trained: str) -> str:
    """The report's word on how the model of ``system`` (bm25, frozen, learned) relates to its retriever."""
    if trained == "untrained":
        return "untrained generator"
    return "trained with it" if trained == system else f"decoded only (trained {trained})"


def run_ablation(runs: dict[str, str], settings: EvalSettings, out_dir: str | Path, as_json: bool = False,
                 model: str = "rag-sequence") -> int:
    """``runs``: ``bm25`` / ``frozen`` / ``learned`` -> run directory or ``"default"`` (the shipped default,
    else the untrained default ``model``). The ``bm25`` system retrieves with BM25 whatever its run was
    trained with, ``frozen`` and ``learned`` with the dense retriever; the same run may stand for several."""
    task, examples = read_examples(settings)
    rows, headline, details, scores = [], {}, {}, {}
    recall_name = f"answer_recall@{RECALL_K}"
    for name in (r for r in RETRIEVERS if runs.get(r)):
        trained = trained_with(runs[name])

        def measure(rag, name=name):
            report = evaluate_model(rag, task, examples, settings, out_dir, name)
            hits = answer_hits(rag, examples, RECALL_K, settings.batch_size)
            return report, hits, rag.model_type, rag.retriever.name

        report, hits, kind, retriever = with_model(runs[name], model, settings, measure,
                                                   retriever=DECODE_WITH[name])
        recall = answer_recall(hits, [RECALL_K])[RECALL_K]
        scores[name] = {"exact_match": question_scores(report, "exact_match"),
                        recall_name: [float(any(row[:RECALL_K])) for row in hits]}
        em = report["metrics"].get("exact_match")
        how = training_note(name, trained)
        headline[name] = {"exact_match": em, recall_name: recall}
        details[name] = {"run": runs[name], "model": kind, "retriever": retriever, "trained_with": trained,
                         "metrics": report["metrics"]}
        rows.append([name, kind, runs[name], how, 100.0 * em, 100.0 * recall])
    if not rows:
        raise ValueError("no run given")
    names = [r[0] for r in rows]
    tests = [paired_test(a, b, metric, scores[a][metric], scores[b][metric])
             for b, a in combinations(names, 2) for metric in ("exact_match", recall_name)
             if scores[a][metric] is not None and scores[b][metric] is not None]
    bar_plot(Path(out_dir) / "ablation.png", names,
             {"exact match": [headline[n]["exact_match"] for n in names],
              f"answer recall@{RECALL_K}": [headline[n][recall_name] for n in names]},
             f"Retriever ablation on {len(examples)} {task.name} questions")
    return finish(out_dir, "Retriever ablation: BM25 / frozen / learned (paper Table 6)",
                  ["retriever", "model", "run", "retriever in training", "exact match (%)",
                   f"answer recall@{RECALL_K} (%)"], rows,
                  {**headline, "n": len(examples)}, {"runs": details}, as_json,
                  notes="Each system answers with its retriever (bm25: BM25; frozen, learned: the dense retriever); "
                        "'trained with it' means its run was also trained with that retriever (and, for frozen "
                        "and learned, with q(x) fixed or updated), 'decoded only' that the run was trained "
                        "otherwise and only answers with it here. Paper (NQ dev exact match, RAG-Token / "
                        "RAG-Sequence): BM25 29.7 / 31.8, Frozen 37.8 / 41.2, Learned 43.5 / 44.0.",
                  settings=settings, tests=tests)
