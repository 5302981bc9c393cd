"""Retriever ablation (paper Table 6): RAG with a fixed BM25 retriever, with the dense retriever frozen
during training, and with it learned end to end, compared by exact match and by the retriever's answer
recall@5 (the fraction of questions with a gold answer in one of the top 5 passages). Paper, NQ dev exact
match, RAG-Token / RAG-Sequence: BM25 29.7 / 31.8, Frozen 37.8 / 41.2, Learned 43.5 / 44.0."""

from __future__ import annotations

from pathlib import Path

from openbook.experiments.report import (
    EvalSettings,
    answer_hits,
    answer_recall,
    bar_plot,
    evaluate_model,
    finish,
    read_examples,
    with_model,
)

RETRIEVERS = ("bm25", "frozen", "learned")
RECALL_K = 5


def run_ablation(runs: dict[str, str], settings: EvalSettings, out_dir: str | Path, as_json: bool = False,
                 model: str = "rag-sequence") -> int:
    """``runs``: ``bm25`` / ``frozen`` / ``learned`` -> run directory (or ``"default"``: the untrained
    default ``model``). A BM25 run retrieves with BM25 (its run.json says so); ``default`` for ``bm25`` is
    the default model with BM25 retrieval."""
    task, examples = read_examples(settings)
    rows, headline, details = [], {}, {}
    for name in (r for r in RETRIEVERS if runs.get(r)):

        def measure(rag, name=name):
            report = evaluate_model(rag, task, examples, settings, out_dir, name)
            hits = answer_hits(rag, examples, RECALL_K, settings.batch_size)
            return report, answer_recall(hits, [RECALL_K])[RECALL_K], rag.model_type, rag.retriever.name

        report, recall, kind, retriever = with_model(runs[name], model, settings, measure,
                                                     retriever="bm25" if name == "bm25" else None)
        em = report["metrics"].get("exact_match")
        headline[name] = {"exact_match": em, f"answer_recall@{RECALL_K}": recall}
        details[name] = {"run": runs[name], "model": kind, "retriever": retriever, "metrics": report["metrics"]}
        rows.append([name, kind, runs[name], 100.0 * em, 100.0 * recall])
    if not rows:
        raise ValueError("no run given")
    names = [r[0] for r in rows]
    bar_plot(Path(out_dir) / "ablation.png", names,
             {"exact match": [headline[n]["exact_match"] for n in names],
              f"answer recall@{RECALL_K}": [headline[n][f"answer_recall@{RECALL_K}"] for n in names]},
             f"Retriever ablation on {len(examples)} {task.name} questions")
    return finish(out_dir, "Retriever ablation: BM25 / frozen / learned (paper Table 6)",
                  ["retriever", "model", "run", "exact match (%)", f"answer recall@{RECALL_K} (%)"], rows,
                  {**headline, "n": len(examples)}, {"runs": details}, as_json,
                  notes="Paper (NQ dev exact match, RAG-Token / RAG-Sequence): BM25 29.7 / 31.8, Frozen 37.8 / 41.2, "
                        "Learned 43.5 / 44.0.", settings=settings)
