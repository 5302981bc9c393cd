"""Generation diversity (paper Table 5): the ratio of distinct to total word trigrams over all the
generations of a model (:func:`~openbook.eval.metrics.distinct_ngram_ratio`), and of the gold targets.
Paper, Jeopardy question generation: gold 90.0%, BART 32.4%, RAG-Token 46.8%, RAG-Sequence 53.8%
(MS-MARCO: 89.6, 70.7, 77.8, 83.5). Use ``--task jeopardy`` for the paper's setting; short NQ answers
have few trigrams."""

from __future__ import annotations

import math
from pathlib import Path

from openbook.experiments.closed_book_vs_rag import MODELS
from openbook.experiments.report import EvalSettings, bar_plot, evaluate_model, finish, read_examples, with_model

PAPER_JEOPARDY = {"gold": 0.900, "closed-book": 0.324, "rag-token": 0.468, "rag-sequence": 0.538}


def trigram_diversity(texts: list[str]) -> tuple[float, int]:
    """(distinct / total trigrams, total trigrams); NaN when no text has three words."""
    from openbook.eval.metrics import distinct_ngram_ratio, word_tokens

    total = sum(max(0, len(word_tokens(t)) - 2) for t in texts)
    return (distinct_ngram_ratio(texts, 3) if total else math.nan), total


def run_diversity(runs: dict[str, str], settings: EvalSettings, out_dir: str | Path, as_json: bool = False) -> int:
    """``runs``: model kind (``closed-book``, ``rag-sequence``, ``rag-token``) -> run directory or ``default``."""
    task, examples = read_examples(settings)
    gold_ratio, gold_total = trigram_diversity([ex.target for ex in examples])
    rows = [["gold", "-", 100.0 * gold_ratio, gold_total, 100.0 * PAPER_JEOPARDY["gold"]]]
    headline, details = {"gold": gold_ratio}, {}
    for kind in (m for m in MODELS if runs.get(m)):
        report = with_model(runs[kind], kind, settings,
                            lambda model, kind=kind: evaluate_model(model, task, examples, settings, out_dir, kind))
        ratio, total = trigram_diversity([row["prediction"] for row in report["predictions"]])
        headline[kind] = ratio
        details[kind] = {"run": runs[kind], "distinct_trigram_ratio": ratio, "trigrams": total,
                         "metrics": report["metrics"]}
        rows.append([kind, runs[kind], 100.0 * ratio, total, 100.0 * PAPER_JEOPARDY[kind]])
    if len(rows) == 1:
        raise ValueError("no model given")
    names = [r[0] for r in rows]
    bar_plot(Path(out_dir) / "diversity.png", names, {"distinct trigrams": [headline[n] for n in names]},
             f"Distinct / total trigrams, {len(examples)} {task.name} inputs")
    return finish(out_dir, "Generation diversity (paper Table 5)",
                  ["model", "run", "distinct/total trigrams (%)", "trigrams", "paper Jeopardy (%)"], rows,
                  {"distinct_trigram_ratio": headline, "n": len(examples)}, {"models": details}, as_json,
                  notes="Paper (Jeopardy question generation): gold 90.0, BART 32.4, RAG-Token 46.8, "
                        "RAG-Sequence 53.8.", settings=settings)
