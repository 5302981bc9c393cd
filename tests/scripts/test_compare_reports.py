"""scripts/compare_reports.py: paired significance of two eval reports, McNemar for right/wrong metrics and the
paired bootstrap for every metric (Q-BLEU-1, BLEU-1 ... have no McNemar)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compare_reports.py"


def compare(tmp_path, capsys, a: list, b: list, metric: str, predictions: tuple[list, list] | None = None) -> dict:
    spec = importlib.util.spec_from_file_location("compare_reports", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = []
    predictions = predictions or ([f"p{i}" for i in range(len(a))], [f"p{i}" for i in range(len(b))])
    for name, values, said in (("a", a, predictions[0]), ("b", b, predictions[1])):
        rows = [{"input": f"q{i}", "prediction": p, "scores": {metric: v}}
                for i, (v, p) in enumerate(zip(values, said))]
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps({"predictions": rows}))
    module.main([str(files[0]), str(files[1]), "--metric", metric])
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_right_wrong_metrics_get_mcnemar_and_the_bootstrap(tmp_path, capsys):
    result = compare(tmp_path, capsys, [1, 0, 0, 1, 0, 0], [1, 1, 1, 1, 0, 1], "exact_match")
    assert result["a"] == pytest.approx(2 / 6) and result["b"] == pytest.approx(5 / 6)
    assert result["mcnemar_p"] == pytest.approx(0.25)  # 3 discordant pairs, all for B: 2 * 0.5**3
    assert result["diff"] == pytest.approx(0.5)


def test_continuous_metrics_get_the_bootstrap_only(tmp_path, capsys):
    result = compare(tmp_path, capsys, [0.1, 0.2, 0.3, 0.4], [0.2, 0.3, 0.4, 0.5], "q_bleu_1")
    assert result["mcnemar_p"] is None
    assert result["diff"] == pytest.approx(0.1)
    assert result["ci95"][0] == pytest.approx(0.1) and result["ci95"][1] == pytest.approx(0.1)  # every pair +0.1


def test_same_predictions_are_counted(tmp_path, capsys):
    result = compare(tmp_path, capsys, [1, 0, 1], [1, 0, 1], "exact_match", (["x", "y", "z"], ["x", "w", "z"]))
    assert result["same_predictions"] == 2 and result["diff"] == 0
