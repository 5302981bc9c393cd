"""Generation diversity (paper Table 5): the ratio of distinct to total word trigrams over all the
generations of a model (:func:`~openbook.eval.metrics.distinct_ngram_ratio`), and of the gold targets.
Paper, Jeopardy question generation: gold 90.0%, BART 32.4%, RAG-Token 46.8%, RAG-Sequence 53.8%
(MS-MARCO: 89.6, 70.7, 77.8, 83.5). Use ``--task jeopardy`` for the paper's setting; short NQ answers
have few trigrams.

The same evaluation gives the task's own metrics, shown beside the ratios: for Jeopardy Q-BLEU-1 and
BLEU-1 (paper Table 2: BART 19.7 / 15.1, RAG-Token 22.2 / 17.3, RAG-Sequence 21.4 / 14.7). Runs are
directories of ``openbook train --task jeopardy`` (each checked to be of the kind its flag names) or
``default``."""

from __future__ import annotations

import math
from pathlib import Path

from openbook.experiments.closed_book_vs_rag import MODELS
from openbook.experiments.report import (
    EvalSettings,
    bar_plot,
    evaluate_model,
    finish,
    read_examples,
    require_kind,
    with_model,
)

PAPER_JEOPARDY = {"gold": 0.900, "closed-book": 0.324, "rag-token": 0.468, "rag-sequence": 0.538}


def trigram_diversity(texts: list[str]) -> tuple[float, int]:
    """(distinct / total trigrams, total trigrams); NaN when no text has three words."""
    from openbook.eval.metrics import distinct_ngram_ratio, word_tokens

    total = sum(max(0, len(word_tokens(t)) - 2) for t in texts)
    return (distinct_ngram_ratio(texts, 3) if total else math.nan), total


def run_diversity(runs: dict[str, str], settings: EvalSettings, out_dir: str | Path, as_json: bool = False) -> int:
    """``runs``: model kind (``closed-book``, ``rag-sequence``, ``rag-token``) -> run directory or ``default``."""
    task, examples = read_examples(settings)
    metrics = list(dict.fromkeys([task.primary_metric, *task.corpus_metric_names]))
    gold_ratio, gold_total = trigram_diversity([ex.target for ex in examples])
    rows = [["gold", "-", 100.0 * gold_ratio, gold_total, 100.0 * PAPER_JEOPARDY["gold"]] + ["-"] * len(metrics)]
    headline, details, scores = {"gold": gold_ratio}, {}, {}
    for kind in (m for m in MODELS if runs.get(m)):

        def measure(model, kind=kind):
            require_kind(model, (kind,), runs[kind], f"--{kind}")
            return evaluate_model(model, task, examples, settings, out_dir, kind)

        report = with_model(runs[kind], kind, settings, measure)
        ratio, total = trigram_diversity([row["prediction"] for row in report["predictions"]])
        headline[kind] = ratio
        scores[kind] = {name: report["metrics"].get(name) for name in metrics}
        details[kind] = {"run": runs[kind], "distinct_trigram_ratio": ratio, "trigrams": total,
                         "metrics": report["metrics"]}
        rows.append([kind, runs[kind], 100.0 * ratio, total, 100.0 * PAPER_JEOPARDY[kind]]
                    + [100.0 * scores[kind][name] for name in metrics])
    if len(rows) == 1:
        raise ValueError("no model given")
    names = [r[0] for r in rows]
    bar_plot(Path(out_dir) / "diversity.png", names, {"distinct trigrams": [headline[n] for n in names]},
             f"Distinct / total trigrams, {len(examples)} {task.name} inputs")
    return finish(out_dir, "Generation diversity (paper Table 5)",
                  ["model", "run", "distinct/total trigrams (%)", "trigrams", "paper Jeopardy (%)"]
                  + [f"{name} (%)" for name in metrics], rows,
                  {"distinct_trigram_ratio": headline, "metrics": scores, "n": len(examples)}, {"models": details},
                  as_json, notes="Paper (Jeopardy question generation), distinct trigrams: gold 90.0, BART 32.4, "
                  "RAG-Token 46.8, RAG-Sequence 53.8; Q-BLEU-1 / BLEU-1 (Table 2): BART 19.7 / 15.1, RAG-Token "
                  "22.2 / 17.3, RAG-Sequence 21.4 / 14.7.", settings=settings)
