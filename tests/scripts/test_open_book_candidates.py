"""scripts/open_book_candidates.py: issue 32 item 4's rule, applied to the reports of each candidate run."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _module():
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return importlib.import_module("open_book_candidates")


def _report(path: Path, right: list[int]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"input": f"q{i}", "prediction": f"p{i}-{v}", "scores": {"exact_match": v}} for i, v in enumerate(right)]
    path.write_text(json.dumps({"predictions": rows}))
    return path


def test_a_candidate_ships_only_if_better_over_the_book_and_within_a_point_on_the_demo(tmp_path, capsys, monkeypatch):
    module = _module()
    n = 100
    default_book = _report(tmp_path / "default-book.json", [1] * 20 + [0] * 80)
    default_demo = _report(tmp_path / "default-demo.json", [1] * 50 + [0] * 50)
    # candidate "good": 12 more right over the book (McNemar p = 2 * 0.5**12), one fewer over the demo book
    # candidate "forgets": the same over the book, two fewer over the demo book; "untrained": no checkpoint
    answers = {("good", "book"): [1] * 32 + [0] * 68, ("good", "demo"): [1] * 49 + [0] * 51,
               ("forgets", "book"): [1] * 32 + [0] * 68, ("forgets", "demo"): [1] * 48 + [0] * 52}
    runs = []
    for name in ("good", "forgets", "untrained"):
        runs.append(tmp_path / "runs" / name)
        runs[-1].mkdir(parents=True)
        if name != "untrained":
            (runs[-1] / "checkpoint").mkdir()
            (runs[-1] / "checkpoint" / "model.safetensors").write_bytes(b"")
    asked = []

    def evaluate(run, kb, questions, out, openbook):
        asked.append((run.name, out.name, kb.name))
        return _report(out / "report.json", answers[run.name, out.name])

    monkeypatch.setattr(module, "evaluate", evaluate)
    (tmp_path / "demo-kb").mkdir()
    summary = module.main(["--kb", str(tmp_path / "book"), "--runs", *map(str, runs), "--book-default",
                           str(default_book), "--demo-default", str(default_demo), "--demo-kb",
                           str(tmp_path / "demo-kb"), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert json.loads(out.strip().splitlines()[-1]) == summary and "untrained: no checkpoint, skipped" in out
    assert sorted(asked) == [("forgets", "book", "book"), ("forgets", "demo", "demo-kb"),
                             ("good", "book", "book"), ("good", "demo", "demo-kb")]
    good, forgets = summary["candidates"]["good"], summary["candidates"]["forgets"]
    assert good["ship"] and good["book"]["mcnemar_p"] < 0.05 and good["book"]["n"] == n
    assert not forgets["ship"] and "more than 1 point" in forgets["why"]
    assert set(summary["candidates"]) == {"good", "forgets"}


def test_a_candidate_not_significantly_better_over_the_book_is_not_shipped():
    module = _module()
    ship, why = module.verdict({"a": 0.20, "b": 0.22, "mcnemar_p": 0.4}, {"a": 0.5, "b": 0.5})
    assert not ship and "not better" in why


def test_candidates_and_the_open_domain_bench_decode_as_the_model_card():
    """The candidates' reports are compared question by question with bench/open_domain.py's: one setting for both."""
    from bench_scripts import bench_modules

    module = _module()
    compare_reports = importlib.import_module("compare_reports")
    with bench_modules("open_domain") as bench:
        assert module.ASK is compare_reports.MODEL_CARD_ASK and bench.ASK is compare_reports.MODEL_CARD_ASK
    assert dict(zip(module.ASK[::2], module.ASK[1::2])) == {
        "--beams": "1", "--decoding": "lazy", "--max-new-tokens": "16", "--dtype": "float32"}
