"""Closed-book versus RAG (paper Table 1): exact match of the generator alone and of RAG-Sequence and
RAG-Token on the same dev questions, with a paired significance test of each RAG model against the
closed-book one. The paper's NQ test exact match: closed-book T5-11B 34.5 (its Table 1 has no closed-book
BART row for NQ), RAG-Token 44.1, RAG-Sequence 44.5."""

from __future__ import annotations

from pathlib import Path

from openbook.experiments.report import (
    EvalSettings,
    bar_plot,
    compare_evaluations,
    evaluate_model,
    finish,
    read_examples,
    with_model,
)
from openbook.presets import MODELS as RAG_MODELS

MODELS = ("closed-book", *RAG_MODELS)  # in the order of the paper's Table 1
PAPER_NQ = {"closed-book": 0.345, "rag-sequence": 0.445, "rag-token": 0.441}
METRIC = "exact_match"


def run_closed_book_vs_rag(runs: dict[str, str], settings: EvalSettings, out_dir: str | Path,
                           as_json: bool = False) -> int:
    """``runs``: model kind (:data:`MODELS`) -> run directory or ``"default"``; any subset."""
    task, examples = read_examples(settings)
    rows, headline, evaluations, reports = [], {}, {}, {}
    for kind in (m for m in MODELS if runs.get(m)):
        report = with_model(runs[kind], kind, settings,
                            lambda model, kind=kind: evaluate_model(model, task, examples, settings, out_dir, kind))
        metric = report["metrics"].get(METRIC)
        headline[kind] = metric
        reports[kind] = report
        evaluations[kind] = {"run": runs[kind], "metrics": report["metrics"], "settings": report["settings"]}
        rows.append([kind, runs[kind], 100.0 * metric, 100.0 * PAPER_NQ[kind], report["n"]])
    if not rows:
        raise ValueError("no model given")
    tests = [compare_evaluations(kind, "closed-book", reports, METRIC) for kind in MODELS[1:]
             if kind in reports and "closed-book" in reports]
    tests = [t for t in tests if t is not None]
    bar_plot(Path(out_dir) / "exact_match.png", [r[0] for r in rows], {"exact match": [headline[r[0]] for r in rows]},
             f"Closed-book vs RAG: exact match on {len(examples)} {task.name} questions")
    return finish(out_dir, "Closed-book vs RAG (paper Table 1)",
                  ["model", "run", "exact match (%)", "paper NQ test (%)", "n"], rows,
                  {"exact_match": headline, "n": len(examples)}, {"models": evaluations}, as_json,
                  notes="Paper (NQ test): closed-book T5-11B 34.5, RAG-Sequence 44.5, RAG-Token 44.1 (BART-large "
                        "generator, DPR retriever, 21M Wikipedia passages).",
                  settings=settings, tests=tests)
