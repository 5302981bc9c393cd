"""scripts/ship_default.py: shipping newly trained adapters keeps the passage judge already shipped."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def test_shipping_new_adapters_keeps_the_judge(tmp_path):
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    ship = importlib.import_module("ship_default")
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"model": "rag-sequence", "lora": {"r": 16}, "generator": "default",
                                              "encoder": "default", "kb": None, "train": "/x/default-train.jsonl"}))
    (run / "checkpoint" / "model.safetensors").write_bytes(b"adapters")
    (run / "checkpoint" / "state.json").write_text(json.dumps({"state": {"step": 7}}))
    out = tmp_path / "default"
    out.mkdir()
    (out / "judge.safetensors").write_bytes(b"judge")
    (out / "judge.json").write_text("{}")
    (out / "stale.txt").write_text("old")
    ship.main(str(run), str(out))
    assert (out / "judge.safetensors").read_bytes() == b"judge" and (out / "judge.json").read_text() == "{}"
    assert (out / "checkpoint" / "model.safetensors").read_bytes() == b"adapters" and not (out / "stale.txt").exists()
    spec = json.loads((out / "run.json").read_text())
    assert spec["steps"] == 7 and spec["train"] == "default-train.jsonl"
