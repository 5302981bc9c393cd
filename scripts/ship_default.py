#!/usr/bin/env python
"""Copy a trained LoRA run into the package as the shipped default model (``openbook/data/default``).

Only what answering needs is shipped: ``run.json`` (with machine-specific paths replaced by the recipe's
names) and ``checkpoint/model.safetensors`` (the adapters; the optimiser and RNG state stay behind). The passage
judge already in ``out`` (``judge.safetensors`` and ``judge.json``, ``scripts/train_judge.py``; it reads the
frozen retriever's passages, not the generator) is kept. The folder is replaced atomically, and a run that is not
LoRA, not on the offline default models, or whose weights exceed 25 MB is refused.

Usage: python scripts/ship_default.py runs/default openbook/data/default
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openbook.atomic import atomic_dir  # noqa: E402
from openbook.models.weights import WEIGHTS_FILE  # noqa: E402

MAX_BYTES = 25 * 1024 * 1024
JUDGE_FILES = ("judge.safetensors", "judge.json")


def main(run: str, out: str) -> None:
    run_dir = Path(run)
    spec = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    weights = run_dir / "checkpoint" / WEIGHTS_FILE
    if not spec.get("lora"):
        sys.exit(f"{run_dir} is not a LoRA run: its weights are the whole generator")
    if spec.get("generator") != "default" or spec.get("encoder") != "default" or spec.get("kb") is not None:
        sys.exit(f"{run_dir} is not trained on the offline default models over the demo knowledge base")
    if weights.stat().st_size > MAX_BYTES:
        sys.exit(f"{weights} has {weights.stat().st_size} bytes, over the 25 MB the repository takes")
    state = json.loads((run_dir / "checkpoint" / "state.json").read_text(encoding="utf-8"))
    spec["train"] = Path(spec.get("train", "")).name  # a name from scripts/split_qa_data.py, not this machine's path
    spec["steps"] = state["state"]["step"]
    spec["recipe"] = "scripts/train_default.sh"
    with atomic_dir(Path(out)) as tmp:
        (tmp / "checkpoint").mkdir()
        shutil.copyfile(weights, tmp / "checkpoint" / WEIGHTS_FILE)
        for name in JUDGE_FILES:
            if (Path(out) / name).is_file():
                shutil.copyfile(Path(out) / name, tmp / name)
        (tmp / "run.json").write_text(json.dumps(spec, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{out}: {spec['steps']} steps, {weights.stat().st_size / 1e6:.1f} MB of adapters")


if __name__ == "__main__":
    main(*sys.argv[1:3])
