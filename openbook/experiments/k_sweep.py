"""Retrieving more documents at test time (paper Figure 3, left and center): exact match and retrieval
answer recall@k of each run for every test-time k, with a paired significance test of each k against the
next smaller one and against the smallest. The paper finds NQ exact match rising monotonically with k for
RAG-Sequence and peaking at k = 10 for RAG-Token, and recall rising with k.

Where exact match stops following recall, the report shows why: the exact match on the questions whose
top k holds an answer (can the generator use the extra passages?), and how spread the document prior
p(z|x) over the top k is -- its mean entropy (nats; log k if uniform) and mean largest probability. A
nearly one-hot p(z|x) (a large score scale) leaves RAG-Sequence with the top passage alone whatever k is;
``score_scale`` replaces the scale of the runs' p(z|x) at test time, to measure the sweep under a flatter or
a sharper prior than the one they were trained with.

Generation is run once per k (p(z|x) is a softmax over the top k, so it changes with k); retrieval runs
once per run at the largest k, and recall@k for smaller k reads the top of that ranking."""

from __future__ import annotations

import math
from pathlib import Path

from openbook.errors import InputError
from openbook.experiments.report import (
    EvalSettings,
    answer_hits,
    answer_recall,
    evaluate_model,
    finish,
    line_plot,
    paired_test,
    question_scores,
    read_examples,
    with_model,
)


def prior_spread(report: dict) -> tuple[float, float]:
    """Mean entropy (nats) and mean largest value of p(z|x) over the retrieved passages of an evaluation."""
    entropies, largest = [], []
    for row in report["predictions"]:
        probs = [p["prob"] for p in row["passages"]]
        entropies.append(-sum(p * math.log(p) for p in probs if p > 0))
        largest.append(max(probs))
    return sum(entropies) / len(entropies), sum(largest) / len(largest)


def _answered_where_found(exact: list[float], hits: list[list[bool]], k: int) -> float | None:
    """Exact match over the questions with an answer-bearing passage in the top k (None: there is none)."""
    found = [em for em, row in zip(exact, hits) if any(row[:k])]
    return sum(found) / len(found) if found else None


def _comparisons(ks: list[int]) -> list[tuple[int, int]]:
    """(k, smaller k) pairs: each k against the next smaller one, and against the smallest."""
    pairs = [(k, smaller) for smaller, k in zip(ks, ks[1:])]
    return pairs + [(k, ks[0]) for k in ks[2:]]


def run_k_sweep(runs: list[str], ks: list[int], settings: EvalSettings, out_dir: str | Path,
                as_json: bool = False, model: str = "rag-sequence", score_scale: float | None = None) -> int:
    """``runs``: run directories or ``"default"`` (the shipped default, else the untrained default
    ``model``); ``ks``: test-time k; ``score_scale``: the multiplier of the retrieval scores in p(z|x)
    (default: each run's own)."""
    if not runs or not ks:
        raise ValueError("give at least one run and one k")
    if score_scale is not None and not (math.isfinite(score_scale) and score_scale > 0):
        raise InputError(f"the score scale must be a positive number, got {score_scale}")
    ks = sorted(set(ks))
    task, examples = read_examples(settings)
    rows, exact, recall, largest, details, tests, scales = [], {}, {}, {}, {}, [], {}
    for i, run in enumerate(runs, 1):

        def sweep(rag, i=i, run=run):
            if not hasattr(rag, "retrieve"):
                raise InputError(f"{run} is a closed-book run: the k-sweep varies the retrieved passages")
            label = f"{i}:{rag.model_type}" if len(runs) > 1 else rag.model_type
            if score_scale is not None:
                import torch

                with torch.no_grad():
                    rag.log_scale.fill_(math.log(score_scale))
            hits = answer_hits(rag, examples, ks[-1], settings.batch_size)
            reports = {k: evaluate_model(rag, task, examples, settings, out_dir, f"{label}-k{k}", k=k) for k in ks}
            scales[label] = rag.score_scale.item() if rag.retriever.scaled else 1.0
            return label, hits, reports

        label, hits, reports = with_model(run, model, settings, sweep)
        recalls = answer_recall(hits, ks)
        em = {k: question_scores(reports[k], "exact_match") for k in ks}
        scores = {k: reports[k]["metrics"].get("exact_match") for k in ks}
        where_found = {k: _answered_where_found(em[k], hits, k) for k in ks}
        spread = {k: prior_spread(reports[k]) for k in ks}
        rows += [[label, run, k, 100.0 * scores[k], 100.0 * recalls[k],
                  "-" if where_found[k] is None else 100.0 * where_found[k], spread[k][0], spread[k][1]] for k in ks]
        exact[label], recall[label] = [scores[k] for k in ks], [recalls[k] for k in ks]
        largest[label] = [spread[k][1] for k in ks]
        details[label] = {"run": run, "score_scale": scales[label], "exact_match": {str(k): scores[k] for k in ks},
                          "answer_recall": {str(k): recalls[k] for k in ks},
                          "exact_match_where_answer_retrieved": {str(k): where_found[k] for k in ks},
                          "prior_entropy": {str(k): spread[k][0] for k in ks},
                          "prior_max": {str(k): spread[k][1] for k in ks}}
        found = {k: [float(any(row[:k])) for row in hits] for k in ks}
        for k, smaller in _comparisons(ks):
            a, b = f"{label} k={k}", f"{label} k={smaller}"
            if em[k] is not None and em[smaller] is not None:
                tests.append(paired_test(a, b, "exact_match", em[k], em[smaller]))
            tests.append(paired_test(a, b, "answer_recall@k", found[k], found[smaller]))
    line_plot(Path(out_dir) / "k_sweep.png", ks,
              {"exact match": exact, "answer recall@k": recall, "mean max p(z|x)": largest},
              f"Test-time k on {len(examples)} {task.name} questions")
    return finish(out_dir, "Retrieving more documents at test time (paper Figure 3)",
                  ["run", "path", "k", "exact match (%)", "answer recall@k (%)",
                   "exact match where an answer is in the top k (%)", "mean entropy of p(z|x) (nats)",
                   "mean max p(z|x)"], rows,
                  {"ks": ks, "runs": details, "n": len(examples)}, {}, as_json,
                  notes="Paper (NQ dev, Figure 3): RAG-Sequence exact match rises monotonically with k, RAG-Token "
                        "peaks at k = 10; answer recall rises with k. The entropy of p(z|x) is log k for a "
                        "uniform prior over the top k and 0 for a one-hot one. Score scale of p(z|x) (the "
                        "multiplier of the retrieval scores; 1 where the retriever's scores are used as they "
                        "are): " + ", ".join(f"{label} {scale:.4g}" for label, scale in scales.items())
                        + (" (set for this sweep)." if score_scale is not None else " (the runs' own)."),
                  settings=settings, tests=tests)
