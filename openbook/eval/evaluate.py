"""Evaluate a model on a task: predictions for every example, per-example scores, set metrics, reports.

* :func:`predict` -- free generation: batched ``model.ask`` calls, one ``Answer`` per input.
* :func:`evaluate` -- run a task (:mod:`openbook.eval.tasks`) over its examples and build a report
  dict. Generation tasks decode with ``model.ask``; classification tasks (a task with ``labels``,
  e.g. FEVER and BoolQ, whose labels are one-token targets, paper section 3.4) predict the label with
  the highest marginal likelihood ``model.label_logprobs(inputs, labels, k)`` instead of decoding
  freely, and the report keeps every label's probability.
* :func:`write_report` -- the report as ``NAME.json`` and a Markdown summary ``NAME.md`` (the metrics
  table, then every prediction), each written atomically.

``model`` is anything with ``ask(questions, k=..., num_beams=..., decoding=..., max_new_tokens=...)``
returning Answer-like objects (``.answer``, ``.passages`` with ``.title`` and ``.prob``): a
:class:`~openbook.rag.model.RAG` or a closed-book generator. Classification also needs
``label_logprobs(questions, labels, k=None) -> Tensor (B, L)``.

Set metrics are the mean (:func:`~openbook.eval.metrics.aggregate`) of the per-example scores,
plus whatever corpus-level metrics the task defines (``corpus_metrics``, e.g. corpus BLEU-1, which is
not a mean of sentence scores and therefore has its own name).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openbook.errors import InputError, check_k, positive_int
from openbook.eval.metrics import aggregate
from openbook.presets import PAPER
from openbook.progress import progress_bar

__all__ = ["evaluate", "predict", "report_markdown", "write_report"]

REPORT_VERSION = 1


def _check_inputs(inputs: Sequence[str]) -> list[str]:
    if isinstance(inputs, str):
        raise InputError("inputs must be a list of strings, not one string")
    inputs = list(inputs)
    if not inputs:
        raise InputError("no inputs to predict")
    for i, text in enumerate(inputs, 1):
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"input {i} is not a non-empty string: {text!r}")
    return inputs


def _batches(items: list, batch_size: int, progress: bool, what: str):
    with progress_bar(total=len(items), desc=what, unit="example", enabled=progress) as bar:
        for start in range(0, len(items), batch_size):
            batch = items[start : start + batch_size]
            yield batch
            bar.update(len(batch))


def predict(
    model,
    inputs: Sequence[str],
    *,
    k: int | None = None,
    batch_size: int = 8,
    num_beams: int = PAPER.num_beams,
    max_new_tokens: int | None = PAPER.max_new_tokens,
    decoding: str = PAPER.decoding,
    progress: bool = False,
) -> list:
    """Free generation for every input: ``model.ask`` in batches of ``batch_size``; one Answer per input.

    The decoding defaults are the paper's (:data:`~openbook.presets.PAPER`); ``max_new_tokens=None`` (there is
    no task here) and ``k=None`` leave the answer length and the number of retrieved passages to the model
    (RAG: its ``k``); a closed-book model ignores ``k``.
    """
    inputs = _check_inputs(inputs)
    positive_int(batch_size, "batch_size")
    positive_int(num_beams, "num_beams")
    options: dict[str, Any] = {"num_beams": num_beams, "decoding": decoding, "abstain": PAPER.abstain}
    if max_new_tokens is not None:
        options["max_new_tokens"] = positive_int(max_new_tokens, "max_new_tokens")
    if k is not None:
        options["k"] = check_k(k)
    answers: list = []
    for batch in _batches(inputs, batch_size, progress, "predicting"):
        got = model.ask(batch, **options)
        if len(got) != len(batch):
            raise RuntimeError(f"model.ask returned {len(got)} answers for {len(batch)} inputs")
        answers.extend(got)
    return answers


def _model_name(model) -> str:
    name = getattr(model, "model_type", None) or getattr(model, "name", None)
    return str(name) if name else type(model).__name__


def _passages(answer) -> list[dict[str, Any]]:
    out = []
    for p in getattr(answer, "passages", None) or []:
        entry = {"title": getattr(p, "title", ""), "prob": float(getattr(p, "prob", float("nan")))}
        posterior = getattr(p, "posterior", None)
        if posterior is not None:
            entry["posterior"] = float(posterior)
        out.append(entry)
    return out


def _retrieved_passages(model, inputs: list[str], k: int | None) -> list[list[dict[str, Any]]]:
    """Provenance for classification: the retriever's top k and p(z|x) (none for closed-book models)."""
    retrieve = getattr(model, "retrieve", None)
    if retrieve is None:
        return [[] for _ in inputs]
    import torch

    with torch.no_grad():
        retrieval = retrieve(inputs, k)
    probs = retrieval.doc_logprobs.exp().tolist()
    return [
        [{"title": p.title, "prob": float(probs[b][j])} for j, p in enumerate(row)]
        for b, row in enumerate(retrieval.passages)
    ]


def _classify(model, task, inputs: list[str], k, batch_size: int, progress: bool):
    """Argmax over the task's one-token labels of log p(label|x); returns (names, per-example label info)."""
    import torch

    labels = list(task.labels)
    names = list(getattr(task, "label_names", None) or labels)
    if len(names) != len(labels):
        raise InputError(f"task {task.name}: {len(labels)} labels but {len(names)} label names")
    if not hasattr(model, "label_logprobs"):
        raise InputError(
            f"task {task.name} is a classification task, but a {type(model).__name__} cannot score labels "
            "(it has no label_logprobs)"
        )
    predictions, details = [], []
    for batch in _batches(inputs, batch_size, progress, "classifying"):
        with torch.no_grad():
            logprobs = model.label_logprobs(batch, labels, k=k)
        logprobs = torch.as_tensor(logprobs).detach().float().cpu()
        if tuple(logprobs.shape) != (len(batch), len(labels)):
            raise RuntimeError(
                f"label_logprobs returned shape {tuple(logprobs.shape)}, expected {(len(batch), len(labels))}"
            )
        normalised = torch.softmax(logprobs, dim=-1)
        best = logprobs.argmax(dim=-1).tolist()
        passages = _retrieved_passages(model, batch, k)
        for b, choice in enumerate(best):
            predictions.append(names[choice])
            details.append({
                "label_probs": {names[j]: float(normalised[b, j]) for j in range(len(labels))},
                "label_logprobs": {names[j]: float(logprobs[b, j]) for j in range(len(labels))},
                "passages": passages[b],
            })
    return predictions, details


def evaluate(
    model,
    task,
    examples,
    *,
    k: int | None = None,
    batch_size: int = 8,
    num_beams: int = PAPER.num_beams,
    max_new_tokens: int | None = PAPER.max_new_tokens,
    decoding: str = PAPER.decoding,
    progress: bool = False,
) -> dict:
    """Predict and score every example of ``task`` (a name or a Task); returns the report dict.

    ``{"task", "model", "n", "metrics": {name: float}, "settings": {...}, "predictions": [{"input",
    "prediction", "golds", "scores", "passages": [{"title", "prob"}, ...]}, ...]}``; classification
    predictions also carry ``label_probs`` (normalised over the labels) and ``label_logprobs``.
    The decoding defaults are the paper's (:data:`~openbook.presets.PAPER`); ``max_new_tokens=None`` uses the
    task's ``default_max_new_tokens``.
    """
    from openbook.eval.tasks import get_task

    if isinstance(task, str):
        task = get_task(task)
    examples = list(examples)
    if not examples:
        raise InputError(f"task {task.name}: no examples to evaluate")
    positive_int(batch_size, "batch_size")
    if k is not None:
        check_k(k)
    inputs = _check_inputs([ex.input for ex in examples])
    labels = getattr(task, "labels", None)
    settings: dict[str, Any] = {"k": k if k is not None else getattr(model, "k", None), "batch_size": batch_size}
    kb = getattr(model, "kb", None)
    if kb is not None and getattr(kb, "path", None) is not None:
        settings["knowledge_base"] = str(kb.path)
    retriever = getattr(getattr(model, "retriever", None), "name", None)
    if retriever is not None:  # dense, bm25 or hybrid: a BM25 report must not read as a dense one
        settings["retriever"] = retriever
    encoder = getattr(getattr(model, "query_encoder", None), "name", None)
    if encoder is not None:
        settings["encoder"] = encoder

    if labels:
        predictions, details = _classify(model, task, inputs, k, batch_size, progress)
        settings.update({"mode": "classification", "labels": list(labels),
                         "label_names": list(getattr(task, "label_names", None) or labels)})
    else:
        max_new_tokens = max_new_tokens if max_new_tokens is not None else task.default_max_new_tokens
        answers = predict(model, inputs, k=k, batch_size=batch_size, num_beams=num_beams,
                          max_new_tokens=max_new_tokens, decoding=decoding, progress=progress)
        predictions = [a.answer for a in answers]
        details = [{"passages": _passages(a)} for a in answers]
        settings.update({"mode": "generation", "num_beams": num_beams, "max_new_tokens": max_new_tokens,
                         "decoding": decoding})

    rows = []
    for example, prediction, detail in zip(examples, predictions, details):
        scores = {name: float(value) for name, value in task.score(prediction, example).items()}
        row = {"input": example.input, "prediction": prediction, "golds": list(example.golds), "scores": scores}
        if example.meta.get("id") is not None:
            row["id"] = example.meta["id"]
        row.update(detail)
        rows.append(row)

    names = list(dict.fromkeys(name for row in rows for name in row["scores"]))
    metrics = {}
    for name in names:
        values = [row["scores"][name] for row in rows if name in row["scores"]]
        metrics[name] = aggregate(values)
    corpus_metrics = getattr(task, "corpus_metrics", None)
    if corpus_metrics is not None:
        for name, value in (corpus_metrics(predictions, examples) or {}).items():
            metrics[name] = float(value)
    return {
        "version": REPORT_VERSION,
        "task": task.name,
        "model": _model_name(model),
        "n": len(rows),
        "metrics": metrics,
        "settings": settings,
        "predictions": rows,
    }


# ---------------------------------------------------------------------------------------------------
# reports


def _cell(value: Any, limit: int | None = None) -> str:
    """One Markdown table cell: no newlines, pipes escaped, optionally shortened."""
    if isinstance(value, float):
        text = "-" if math.isnan(value) else f"{value:.4g}"
    elif isinstance(value, (list, tuple)):
        text = " ‖ ".join(str(v) for v in value)
    else:
        text = str(value)
    text = " ".join(text.split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("\\", "\\\\").replace("|", "\\|")


def _percent(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{100.0 * value:.2f}"


def report_markdown(report: dict) -> str:
    """The Markdown summary: settings, the metrics table (x 100), then every prediction with its scores."""
    lines = [f"# {report['task']}: {report['model']}", ""]
    settings = report.get("settings", {})
    if settings:
        lines.append(", ".join(f"{key}: {_cell(value, 200)}" for key, value in settings.items() if value is not None))
        lines.append("")
    lines += [f"{report['n']} examples.", "", "| metric | score (x100) |", "|---|---:|"]
    for name, value in report["metrics"].items():
        lines.append(f"| {_cell(name)} | {_percent(value)} |")
    lines.append("")
    lines.append("## Predictions")
    lines.append("")
    score_names = list(dict.fromkeys(name for row in report["predictions"] for name in row["scores"]))
    classification = any("label_probs" in row for row in report["predictions"])
    header = ["#", "input", "prediction", "gold"] + score_names
    header += ["label probabilities"] if classification else []
    header += ["top passage (p)"]
    lines.append("| " + " | ".join(_cell(h) for h in header) + " |")
    lines.append("|" + "|".join("---:" if h in score_names or h == "#" else "---" for h in header) + "|")
    for i, row in enumerate(report["predictions"], 1):
        cells = [str(i), _cell(row["input"], 300), _cell(row["prediction"], 200), _cell(row["golds"], 200)]
        cells += [_cell(row["scores"].get(name, float("nan"))) for name in score_names]
        if classification:
            probs = row.get("label_probs", {})
            cells.append(_cell(", ".join(f"{name} {p:.3f}" for name, p in probs.items())))
        passages = row.get("passages") or []
        if passages:
            top = max(passages, key=lambda p: p.get("prob", 0.0))
            cells.append(_cell(f"{top['title']} ({top['prob']:.3f})", 120))
        else:
            cells.append("")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def _write_atomic(path: Path, text: str) -> None:
    from openbook.atomic import atomic_output

    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


def write_report(report: dict, out_dir, name: str = "report") -> tuple[Path, Path]:
    """Write ``out_dir/NAME.json`` (the whole report) and ``out_dir/NAME.md`` (summary + every prediction).

    Each file is written to a temporary name and renamed into place, so an interrupted run never leaves
    a half-written report. Returns ``(json_path, markdown_path)``.
    """
    if not isinstance(name, str) or not name or os.sep in name or name in (".", ".."):
        raise InputError(f"report name must be a plain file name, got {name!r}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    _write_atomic(json_path, json.dumps(report, ensure_ascii=False, indent=2) + "\n")
    _write_atomic(md_path, report_markdown(report))
    return json_path, md_path
