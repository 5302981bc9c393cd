"""Retrieving more documents at test time (paper Figure 3, left and center): exact match and retrieval
answer recall@k of each run for every test-time k. The paper finds NQ exact match rising monotonically
with k for RAG-Sequence and peaking at k = 10 for RAG-Token, and recall rising with k.

Generation is run once per k (p(z|x) is a softmax over the top k, so it changes with k); retrieval runs
once per run at the largest k, and recall@k for smaller k reads the top of that ranking."""

from __future__ import annotations

from pathlib import Path

from openbook.experiments.report import (
    EvalSettings,
    answer_hits,
    answer_recall,
    evaluate_model,
    finish,
    line_plot,
    read_examples,
    with_model,
)


def run_k_sweep(runs: list[str], ks: list[int], settings: EvalSettings, out_dir: str | Path,
                as_json: bool = False, model: str = "rag-sequence") -> int:
    """``runs``: run directories (or ``"default"``, the untrained default ``model``); ``ks``: test-time k."""
    if not runs or not ks:
        raise ValueError("give at least one run and one k")
    ks = sorted(set(ks))
    task, examples = read_examples(settings)
    rows, exact, recall, details = [], {}, {}, {}
    for i, run in enumerate(runs, 1):

        def sweep(rag, i=i):
            label = f"{i}:{rag.model_type}" if len(runs) > 1 else rag.model_type
            recalls = answer_recall(answer_hits(rag, examples, ks[-1], settings.batch_size), ks)
            scores = {k: evaluate_model(rag, task, examples, settings, out_dir, f"{label}-k{k}", k=k)["metrics"]
                      .get("exact_match") for k in ks}
            return label, scores, recalls

        label, scores, recalls = with_model(run, model, settings, sweep)
        rows += [[label, run, k, 100.0 * scores[k], 100.0 * recalls[k]] for k in ks]
        exact[label], recall[label] = [scores[k] for k in ks], [recalls[k] for k in ks]
        details[label] = {"run": run, "exact_match": {str(k): scores[k] for k in ks},
                          "answer_recall": {str(k): recalls[k] for k in ks}}
    line_plot(Path(out_dir) / "k_sweep.png", ks, {"exact match": exact, "answer recall@k": recall},
              f"Test-time k on {len(examples)} {task.name} questions")
    return finish(out_dir, "Retrieving more documents at test time (paper Figure 3)",
                  ["run", "path", "k", "exact match (%)", "answer recall@k (%)"], rows,
                  {"ks": ks, "runs": details, "n": len(examples)}, {}, as_json, settings=settings)
