"""Fact verification (paper section 4.4, Table 2): FEVER label accuracy of RAG, of the closed-book generator
and of the majority class, 3-way (supports / refutes / not enough info) and 2-way (supports / refutes),
and the gold-title overlap of retrieval. Paper: RAG 72.5 (3-way) and 89.5 (2-way); the top retrieved
document is from a gold evidence article for 71% of claims, one of the top 10 for 90%.

Each model is evaluated once, on the 3-way task (:func:`openbook.eval.evaluate.evaluate`: the label with
the highest marginal likelihood). Its 2-way accuracy reads the same label likelihoods: on the claims whose
gold label is SUPPORTS or REFUTES, the likelier of those two (:func:`two_way_accuracy`), so a run trained
3-way (or 2-way, ``--task fever2``) serves both. The majority class is the most frequent label of the
*training* part (``--train``), never of the claims scored. The title overlap
(:func:`overlap_headline`, through :func:`openbook.eval.metrics.gold_title_overlap`) is measured on the RAG
run's top ``overlap_k`` passages, also restricted to the claims whose gold article is in the knowledge base
at all: the demo knowledge base lacks most FEVER evidence pages."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from openbook.errors import InputError
from openbook.experiments.report import (
    EvalSettings,
    bar_plot,
    evaluate_model,
    finish,
    percent,
    require_kind,
    with_model,
)
from openbook.presets import MODELS as RAG_MODELS

PAPER = {"fever3": 0.725, "fever2": 0.895, "top1": 0.71, "top10": 0.90}
TWO_WAY = ("SUPPORTS", "REFUTES")
MODELS = ("rag", "closed-book")


def majority_label(labels: Sequence[str], order: Sequence[str]) -> str:
    """The most frequent of ``labels`` (ties: the first in ``order``); an empty list is a ValueError."""
    counts = Counter(labels)
    if not counts:
        raise ValueError("no labels to take the majority of")
    return max(order, key=lambda name: (counts[name], -order.index(name)))


def accuracy(predictions: Sequence[str], golds: Sequence[str]) -> float | None:
    """The fraction of predictions equal to their gold label (None for none: JSON null)."""
    if len(predictions) != len(golds):
        raise ValueError(f"{len(predictions)} predictions for {len(golds)} labels")
    return sum(p == g for p, g in zip(predictions, golds)) / len(golds) if golds else None


def two_way_accuracy(rows: Sequence[dict]) -> tuple[float | None, int]:
    """``(accuracy, claims)`` of the 2-way task from 3-way evaluation rows (``golds``, ``label_logprobs``):
    the claims whose gold label is SUPPORTS or REFUTES, each predicted as the likelier of the two."""
    kept = [row for row in rows if row["golds"][0] in TWO_WAY]
    predictions = [max(TWO_WAY, key=lambda name, row=row: row["label_logprobs"][name]) for row in kept]
    return accuracy(predictions, [row["golds"][0] for row in kept]), len(kept)


def overlap_headline(retrieved: Sequence[Sequence[str]], gold: Sequence[Sequence[str]], k: int,
                     kb_titles: set[str] | None = None) -> dict[str, float | int | None]:
    """The headline's ``gold_title_overlap``: :func:`~openbook.eval.metrics.gold_title_overlap` at 1 and ``k``
    (titles compared by :func:`~openbook.eval.metrics.title_key`), over all verifiable claims and over those
    whose gold article is in the knowledge base.

    ``retrieved[i]``: the titles of claim i's passages, best first; ``gold[i]``: its evidence titles (claims
    without any, NOT ENOUGH INFO, are left out). Returns ``claims`` (verifiable ones), ``top1`` and
    ``top{k}`` (fractions of them whose top 1 / top k passages include a gold article); with ``kb_titles``
    (the knowledge base's titles) also ``in_kb`` (the fraction whose gold article is in the knowledge base
    at all), ``claims_in_kb`` and ``top1_in_kb`` / ``top{k}_in_kb`` (the same fractions among those claims).
    A fraction of no claims is None (JSON null)."""
    from openbook.eval.metrics import gold_title_overlap, title_key

    if len(retrieved) != len(gold):
        raise InputError(f"{len(retrieved)} retrievals for {len(gold)} claims")

    def fractions(golds: Sequence[Sequence[str]]) -> tuple[float | None, float | None]:
        if not any(golds):
            return None, None
        found = gold_title_overlap(retrieved, golds, (1, k))
        return found[1], found[k]

    claims = sum(bool(golds) for golds in gold)
    top1, topk = fractions(gold)
    out: dict[str, float | int | None] = {"claims": claims, "top1": top1, f"top{k}": topk}
    if kb_titles is not None:
        known = {title_key(t) for t in kb_titles}
        in_kb = [golds if any(title_key(t) in known for t in golds) else [] for golds in gold]
        inside = sum(bool(golds) for golds in in_kb)
        top1_in_kb, topk_in_kb = fractions(in_kb)
        out.update({"in_kb": inside / claims if claims else None, "claims_in_kb": inside,
                    "top1_in_kb": top1_in_kb, f"top{k}_in_kb": topk_in_kb})
    return out


def retrieved_titles(rag, inputs: list[str], k: int, batch_size: int) -> list[list[str]]:
    """The titles of each input's top-k passages, best first."""
    import torch

    titles: list[list[str]] = []
    for start in range(0, len(inputs), batch_size):
        with torch.no_grad():
            retrieval = rag.retrieve(inputs[start: start + batch_size], k)
        titles += [[p.title for p in row] for row in retrieval.passages]
    return titles


def run_fever(runs: dict[str, str], train: str, settings: EvalSettings, out_dir: str | Path,
              as_json: bool = False, overlap_k: int = 10) -> int:
    """``runs``: ``rag`` / ``closed-book`` -> run directory (``openbook train --task fever3``) or ``default``;
    ``train``: the training part (its label distribution gives the majority class); ``settings.data``: the
    held-out claims."""
    from openbook.eval.tasks import get_task
    from openbook.eval.tasks.fever import FEVER_LABELS

    task = get_task("fever3")
    examples = task.read(settings.data, limit=settings.limit)
    train_labels = [ex.golds[0] for ex in task.read(train)]
    golds = [ex.golds[0] for ex in examples]
    majority3 = majority_label(train_labels, FEVER_LABELS)
    majority2 = majority_label([n for n in train_labels if n in TWO_WAY], TWO_WAY)
    kept = [g for g in golds if g in TWO_WAY]
    scores = {"majority": (accuracy([majority3] * len(golds), golds), accuracy([majority2] * len(kept), kept))}
    rows = [["majority class", f"{majority3} / {majority2} (training part)", *map(_percent, scores["majority"])]]
    details, overlap = {"majority": {"fever3": majority3, "fever2": majority2,
                                     "training_labels": dict(Counter(train_labels))}}, None
    for name in (m for m in MODELS if runs.get(m)):

        def measure(model, name=name):
            kinds = ("closed-book",) if name == "closed-book" else RAG_MODELS
            require_kind(model, kinds, runs[name], f"--{name}")
            report = evaluate_model(model, task, examples, settings, out_dir, name)
            found = None
            if name == "rag":
                titles = retrieved_titles(model, [ex.input for ex in examples], overlap_k, settings.batch_size)
                kb_titles = {p.title for p in model.kb if p.title}
                found = overlap_headline(titles, [ex.meta.get("evidence_titles", []) for ex in examples],
                                         overlap_k, kb_titles)
            return report, found

        report, found = with_model(runs[name], "closed-book" if name == "closed-book" else "rag-sequence",
                                   settings, measure)
        overlap = found or overlap
        scores[name] = (report["metrics"]["accuracy"], two_way_accuracy(report["predictions"])[0])
        details[name] = {"run": runs[name], "metrics": report["metrics"], "settings": report["settings"]}
        rows.append([name, runs[name], *map(_percent, scores[name])])
    names = list(scores)
    bar_plot(Path(out_dir) / "fever_accuracy.png", names,
             {"3-way": [scores[n][0] for n in names], "2-way": [scores[n][1] for n in names]},
             f"FEVER label accuracy, {len(golds)} claims ({len(kept)} 2-way)")
    notes = [f"{len(golds)} held-out claims for 3-way, {len(kept)} (SUPPORTS / REFUTES) for 2-way; 2-way predicts "
             "the likelier of the two labels under the same model. Paper: RAG 72.5 (3-way), 89.5 (2-way)."]
    if overlap is not None:
        notes.append(_overlap_notes(overlap, overlap_k))
        bar_plot(Path(out_dir) / "gold_title_overlap.png", ["top 1", f"top {overlap_k}"],
                 {"all verifiable claims": [overlap["top1"], overlap[f"top{overlap_k}"]],
                  "gold article in the knowledge base": [overlap["top1_in_kb"], overlap[f"top{overlap_k}_in_kb"]]},
                 "Retrieved passages from a gold evidence article")
    headline = {"fever3": {n: scores[n][0] for n in names}, "fever2": {n: scores[n][1] for n in names},
                "n3": len(golds), "n2": len(kept), "gold_title_overlap": overlap}
    return finish(out_dir, "FEVER fact verification (paper Table 2, section 4.4)",
                  ["model", "run", "3-way accuracy (%)", "2-way accuracy (%)"], rows, headline,
                  {"models": details, "train": str(train), "paper": PAPER}, as_json, notes="\n\n".join(notes),
                  settings=settings)


def _percent(value: float | None) -> float | str:
    return "-" if value is None else 100.0 * value


def _overlap_notes(overlap: dict, k: int) -> str:
    return (f"Gold-title overlap of the RAG run's retrieval ({overlap['claims']} verifiable claims): top passage "
            f"from a gold evidence article {percent(overlap['top1'])}%, one of the top {k} "
            f"{percent(overlap[f'top{k}'])}% (paper: 71% / 90% at top 10). The gold article is in the knowledge "
            f"base for {percent(overlap['in_kb'])}% of the claims ({overlap['claims_in_kb']}); among those: top 1 "
            f"{percent(overlap['top1_in_kb'])}%, top {k} {percent(overlap[f'top{k}_in_kb'])}%.")
