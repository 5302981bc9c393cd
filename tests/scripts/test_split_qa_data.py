"""scripts/split_qa_data.py: every fifth record of each set held out, the rest for training, each part in a
format its task reads (NQ, WebQuestions, CuratedTrec, Jeopardy, FEVER)."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

from openbook.eval.tasks import get_task

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "split_qa_data.py"


def _gzip_jsonl(path: Path, rows: list[dict]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


def test_every_fifth_record_is_held_out_for_each_set(tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    n = 7
    _gzip_jsonl(data / "nq-open-oracle.dev-split.jsonl.gz",
                [{"question": f"q{i}", "answers": [f"a{i}"], "ctxs": []} for i in range(n)])
    (data / "webquestions.train.json").write_text(json.dumps(
        [{"qId": str(i), "qText": f"w{i}", "answers": [f"a{i}"]} for i in range(n)]))
    (data / "curatedtrec.train.tsv").write_text("".join(f"{i}\tfactoid\tc{i}\ta{i}\n" for i in range(n)))
    _gzip_jsonl(data / "jeopardy.dev-split.jsonl.gz",
                [{"context": f"HISTORY: clue {i}", "continuation": f"answer {i}", "category": "history"}
                 for i in range(n)])
    labels = ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"]
    _gzip_jsonl(data / "fever.paper_dev.dev-split.jsonl.gz",
                [{"id": i, "label": labels[i % 3], "claim": f"claim {i}",
                  "evidence": [[[i, i, f"Title_{i}", 0]]] if i % 3 < 2 else [[[i, None, None, None]]]}
                 for i in range(n)])
    spec = importlib.util.spec_from_file_location("split_qa_data", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--data-dir", str(data), "--out", str(out)])

    jeopardy = get_task("jeopardy")
    held = [ex.input for ex in jeopardy.read(out / "jeopardy-heldout.jsonl")]
    trained = [ex.input for ex in jeopardy.read(out / "jeopardy-train.jsonl")]
    assert held == ["answer 0", "answer 5"] and trained == [f"answer {i}" for i in (1, 2, 3, 4, 6)]
    fever = get_task("fever3")
    held = fever.read(out / "fever-heldout.jsonl")
    assert [ex.input for ex in held] == ["claim 0", "claim 5"]
    assert [ex.golds[0] for ex in held] == ["SUPPORTS", "NOT ENOUGH INFO"]
    assert held[0].meta["evidence_titles"] == ["Title_0"]  # kept for the gold-title overlap
    assert [ex.input for ex in fever.read(out / "fever-train.jsonl")] == [f"claim {i}" for i in (1, 2, 3, 4, 6)]
    assert [r["question"] for r in map(json.loads, (out / "nq-dev.jsonl").read_text().splitlines())] == ["q0", "q5"]
