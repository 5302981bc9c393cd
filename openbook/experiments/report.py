"""Shared plumbing of the paper's experiments (`openbook experiments ...`): models from trained runs,
exact-match evaluation through :mod:`openbook.eval.evaluate`, retrieval answer recall, the Markdown table,
the PNG plots (matplotlib, Agg backend) and the report files.

Every experiment writes ``OUT/report.json`` (settings, the table rows, the headline figures, the paired
significance tests of the differences it shows and whatever the experiment adds), ``OUT/report.md`` (the
tables), ``OUT/*.png`` (a plot) and, per evaluated model, ``OUT/eval-LABEL.json`` / ``.md``
(:func:`openbook.eval.evaluate.write_report`: every prediction with its scores, which the tests pair up).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from openbook.errors import InputError
from openbook.experiments import missing_extra
from openbook.presets import PAPER

DEFAULT = "default"  # instead of a run directory: the shipped fine-tuned default (untrained if none is shipped)
ALPHA = 0.05  # the level at which a report calls a difference significant


@dataclass
class EvalSettings:
    """What every experiment evaluates on, and how it decodes (by default the paper's decoding,
    :data:`~openbook.presets.PAPER`)."""

    data: str | None = None  # dev data file of the task
    task: str = "nq"
    limit: int | None = None  # first N dev examples
    batch_size: int = 8
    beams: int = PAPER.num_beams
    max_new_tokens: int | None = PAPER.max_new_tokens  # None: the task's default (NQ 16, Jeopardy 48)
    decoding: str = PAPER.decoding  # RAG-Sequence: thorough, fast or lazy decoding
    kb: str | None = None  # knowledge base replacing the runs' own
    k: int | None = None  # passages per question at test time (None: each run's own k)
    device: str = "auto"  # where the models run (openbook.models.device: auto, cpu, cuda)


# ------------------------------------------------------------------------------------------ models


def model_of_run(run: str, model: str = "rag-sequence", kb: str | None = None, *, decode_as: str | None = None,
               retriever: str | None = None, device: str = "auto"):
    """The model of a training run directory (:func:`~openbook.rag.assemble.load_run`), or for ``"default"``
    the offline default models as ``model`` (``closed-book``, ``rag-sequence``, ``rag-token``): the shipped
    fine-tuned run (:func:`openbook.data.default_run_path`) where it applies, else untrained.
    ``decode_as`` uses a run's weights as another RAG kind (``rag-token`` for the Figure 2 posteriors);
    ``retriever`` replaces its retriever (``bm25``); ``kb`` its knowledge base; ``device`` is where it runs. The
    generator computes in :data:`~openbook.presets.PAPER`'s number type."""
    from openbook.rag.assemble import load_model

    if run != DEFAULT:
        if not Path(run).is_dir():
            raise InputError(f"{run}: not a run directory (from `openbook train --out`) nor {DEFAULT!r}")
        return load_model(run=run, kb=kb, model=decode_as, retriever=retriever, dtype=PAPER.dtype, device=device)
    return load_model(model=decode_as or model, kb=kb, retriever=retriever, dtype=PAPER.dtype, device=device)


def run_path(run: str) -> Path | None:
    """The training run directory ``run`` stands for (``"default"``: the shipped run), None if untrained."""
    from openbook.data import default_run_path

    return default_run_path() if run == DEFAULT else Path(run)


def read_examples(settings: EvalSettings):
    """``(task, examples)``: the first ``settings.limit`` examples of ``settings.data``."""
    from openbook.eval.tasks import get_task

    if not settings.data:
        raise InputError("no dev data given (--data FILE)")
    task = get_task(settings.task)
    return task, task.read(settings.data, limit=settings.limit)


def evaluate_model(model, task, examples, settings: EvalSettings, out_dir: str | Path, label: str,
                   k: int | None = None) -> dict:
    """Predict and score every example (:func:`openbook.eval.evaluate.evaluate`, batched greedy/beam
    decoding) and write ``OUT/eval-LABEL.json`` / ``.md``; returns the evaluation report."""
    from openbook.eval.evaluate import evaluate, write_report

    report = evaluate(model, task, examples, k=k if k is not None else settings.k, batch_size=settings.batch_size,
                      num_beams=settings.beams, max_new_tokens=settings.max_new_tokens, decoding=settings.decoding,
                      progress=True)
    write_report(report, out_dir, name=f"eval-{slug(label)}")
    return report


def answer_hits(model, examples, k: int, batch_size: int = 8) -> list[list[bool]]:
    """Per example, whether each of the model's top-k passages contains a gold answer (DPR's has_answer)."""
    import torch

    from openbook.eval.retrieval import answer_in_passage

    hits: list[list[bool]] = []
    for start in range(0, len(examples), batch_size):
        batch = examples[start: start + batch_size]
        with torch.no_grad():
            retrieval = model.retrieve([ex.input for ex in batch], k)
        hits += [[answer_in_passage(p.text, ex.golds) for p in row] for row, ex in zip(retrieval.passages, batch)]
    return hits


def answer_recall(hits: list[list[bool]], ks: Sequence[int]) -> dict[int, float]:
    """``{k: fraction of examples with an answer-bearing passage in the top k}``."""
    from openbook.eval.metrics import recall_at_k

    return recall_at_k(hits, ks)


def with_model(run: str, model: str, settings: EvalSettings, use, **load_options):
    """``use(model)`` on the model of ``run`` (:func:`model_of_run`), which is freed before returning, so that
    an experiment over several runs holds one generator in memory at a time."""
    import gc

    loaded = model_of_run(run, model, kb=settings.kb, device=settings.device, **load_options)
    try:
        return use(loaded)
    finally:
        del loaded
        gc.collect()


def require_kind(model, kinds: Sequence[str], run: str, flag: str) -> None:
    """An InputError unless the loaded ``model`` (of ``run``, given as ``flag``) is of one of ``kinds``: a
    run trained as RAG-Sequence must not be reported as RAG-Token or closed-book."""
    if model.model_type not in kinds:
        raise InputError(f"{flag} {run}: a {model.model_type} run; {flag} takes a {' or '.join(kinds)} run")


def slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in label).strip("-") or "model"


# ------------------------------------------------------------------------------------------ significance


def question_scores(report: dict, metric: str) -> list[float] | None:
    """Per-question ``metric`` of an evaluation report (:func:`evaluate_model`), None if it has none."""
    rows = report["predictions"]
    if not rows or any(metric not in row["scores"] for row in rows):
        return None
    return [row["scores"][metric] for row in rows]


def paired_test(a: str, b: str, metric: str, a_scores: Sequence[float], b_scores: Sequence[float]) -> dict:
    """System ``a`` against ``b`` on per-question ``metric`` scores of the same questions: the paired
    bootstrap, and McNemar's exact test where the scores are 0/1 (:mod:`openbook.eval.metrics.significance`)."""
    from openbook.eval.metrics import mcnemar, paired_bootstrap, significant

    boot = paired_bootstrap(a_scores, b_scores)
    binary = all(v in (0, 1) for v in (*a_scores, *b_scores))
    exact = mcnemar(a_scores, b_scores) if binary else None
    p_mcnemar = exact.p_value if exact else None
    return {"a": a, "b": b, "metric": metric, "n": boot.n, "a_mean": sum(a_scores) / boot.n,
            "b_mean": sum(b_scores) / boot.n, "diff": boot.diff, "ci95": list(boot.ci95),
            "p_bootstrap": boot.p_value, "bootstrap_samples": boot.samples, "p_mcnemar": p_mcnemar,
            "a_only": exact.a_only if exact else None, "b_only": exact.b_only if exact else None,
            "significant": significant([boot.p_value, p_mcnemar], ALPHA)}


def compare_evaluations(a: str, b: str, reports: dict[str, dict], metric: str) -> dict | None:
    """:func:`paired_test` of the evaluations ``reports[a]`` and ``reports[b]`` (:func:`evaluate_model`, the
    same questions) on ``metric``; None if either has no per-question ``metric``."""
    a_scores, b_scores = question_scores(reports[a], metric), question_scores(reports[b], metric)
    return None if a_scores is None or b_scores is None else paired_test(a, b, metric, a_scores, b_scores)


def _p(value: float | None, samples: int | None = None) -> str:
    if value is None:
        return "-"
    if value == 0 and samples:  # no resample as extreme: below the bootstrap's resolution
        return f"< {1 / samples:.0e}"
    return f"{value:.4f}" if value >= 1e-4 else f"{value:.1e}"


def tests_markdown(tests: Sequence[dict]) -> str:
    """The paired tests as a table, and which differences are significant at :data:`ALPHA`."""
    headers = ["A", "B", "metric", "A (%)", "B (%)", "A - B (points)", "95% CI (points)", "p (bootstrap)",
               "p (McNemar)", "only A / only B right", f"significant at {ALPHA}"]
    rows = [[t["a"], t["b"], t["metric"], f"{100 * t['a_mean']:.1f}", f"{100 * t['b_mean']:.1f}",
             f"{100 * t['diff']:+.1f}", f"[{100 * t['ci95'][0]:+.1f}, {100 * t['ci95'][1]:+.1f}]",
             _p(t["p_bootstrap"], t["bootstrap_samples"]), _p(t["p_mcnemar"]),
             "-" if t["a_only"] is None else f"{t['a_only']} / {t['b_only']}", "yes" if t["significant"] else "no"]
            for t in tests]
    said = lambda t: f"{t['a']} vs {t['b']} ({t['metric']}, {100 * t['diff']:+.1f} points)"  # noqa: E731
    yes = [said(t) for t in tests if t["significant"]]
    no = [said(t) for t in tests if not t["significant"] and t["diff"] != 0]
    same = [f"{t['a']} vs {t['b']} ({t['metric']})" for t in tests if t["diff"] == 0]
    text = (f"Paired tests on the same {tests[0]['n']} questions: the paired bootstrap (Koehn 2004; "
            f"Berg-Kirkpatrick et al. 2012; {tests[0]['bootstrap_samples']:,} resamples, seed 0; 95% percentile "
            "interval of A - B, two-sided p) and, for 0/1 scores, McNemar's exact test on the questions exactly "
            f"one system gets right. A difference is called significant when every applicable test gives "
            f"p < {ALPHA}. Significant: {'; '.join(yes) or 'none'}. Not significant: {'; '.join(no) or 'none'}."
            + (f" Equal means: {'; '.join(same)}." if same else ""))
    return "## Paired significance tests\n\n" + markdown_table(headers, rows) + "\n\n" + text


# ------------------------------------------------------------------------------------------ tables


def percent(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100.0 * value:.1f}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; floats are printed with 4 significant digits, pipes escaped."""

    def cell(value: Any) -> str:
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        return " ".join(text.split()).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ plots


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # before pyplot: files, no display
        import matplotlib.pyplot as plt
    except ImportError:
        raise missing_extra("matplotlib") from None
    return plt


def bar_plot(path: str | Path, categories: Sequence[str], series: dict[str, Sequence[float]], title: str,
             ylabel: str = "%") -> Path:
    """Grouped bars: one group per category, one bar per series (values in [0, 1], shown as %)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(categories) * max(1, len(series)) ** 0.5, 3.6))
    width, top = 0.8 / max(1, len(series)), 5.0
    for i, (name, values) in enumerate(series.items()):
        xs = [c + (i - (len(series) - 1) / 2) * width for c in range(len(categories))]
        heights = [0.0 if v is None or math.isnan(v) else 100.0 * v for v in values]
        bars = ax.bar(xs, heights, width, label=name)
        top = max([top] + [1.15 * h for h in heights])
        ax.bar_label(bars, labels=[percent(v) for v in values], fontsize=8)
    ax.set_xticks(range(len(categories)), categories)
    ax.set_ylim(0, top)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return _save(fig, path)


def line_plot(path: str | Path, xs: Sequence[int], panels: dict[str, dict[str, Sequence[float]]], title: str,
              xlabel: str = "k") -> Path:
    """One panel per metric (name -> {series -> values at xs}), values in [0, 1] shown as %."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (metric, series) in zip(axes[0], panels.items()):
        for name, values in series.items():
            ax.plot(list(xs), [100.0 * v for v in values], marker="o", label=name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{metric} (%)")
        ax.set_xticks(list(xs))
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    return _save(fig, path)


def heatmap(path: str | Path, matrix: Sequence[Sequence[float]], xlabels: Sequence[str], ylabels: Sequence[str],
            title: str) -> Path:
    """``matrix[row][col]`` as a heat map (rows: ``ylabels``, columns: ``xlabels``), values in [0, 1]."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.5 + 0.55 * len(xlabels), 1.2 + 0.45 * len(ylabels)))
    image = ax.imshow(matrix, aspect="auto", cmap="Blues", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(xlabels)), [x if x.strip() else repr(x) for x in xlabels], rotation=60, ha="right",
                  fontsize=8)
    ax.set_yticks(range(len(ylabels)), [y[:40] for y in ylabels], fontsize=8)
    fig.colorbar(image, ax=ax, fraction=0.04)
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path


# ------------------------------------------------------------------------------------------ reports


def finish(out_dir: str | Path, title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]],
           headline: dict, report: dict, as_json: bool = False, notes: str = "",
           settings: EvalSettings | None = None, tests: Sequence[dict] = ()) -> int:
    """Write ``OUT/report.json`` and ``OUT/report.md``, print the table (and the paired ``tests``,
    :func:`paired_test`), and with ``as_json`` one last JSON line of the headline figures. Returns the
    command's exit status (0)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown_table(headers, rows)
    full = {"title": title, "command": " ".join(sys.argv), **({"settings": asdict(settings)} if settings else {}),
            "table": {"headers": list(headers), "rows": [list(r) for r in rows]}, "headline": headline,
            **({"tests": list(tests)} if tests else {}), **report}
    (out / "report.json").write_text(json.dumps(full, indent=1, ensure_ascii=False) + "\n")
    plots = sorted(p.name for p in out.glob("*.png"))
    md = [f"# {title}", "", table, ""]
    if notes:
        md += [notes, ""]
    if tests:
        md += [tests_markdown(tests), ""]
    md += [f"![{name}]({name})" for name in plots]
    (out / "report.md").write_text("\n".join(md) + "\n")
    print(table)
    if tests:
        print("\n" + tests_markdown(tests))
    if as_json:
        print(json.dumps(headline, ensure_ascii=False))
    return 0
