"""The ``kilt`` task reads KILT JSON Lines ``{id, input, output: [{answer, provenance}]}``."""

from __future__ import annotations

import json
import re

import pytest

from openbook.errors import InputError
from openbook.eval.evaluate import evaluate
from openbook.eval.tasks import get_task
from test_evaluate import StubModel

# A few records in the shape of KILT's NQ, FEVER and T-REx dev files (abridged provenance).
KILT_RECORDS = [
    {"id": "-4496950195393000000", "input": "who wrote the sun also rises",
     "output": [{"answer": "Ernest Hemingway",
                 "provenance": [{"wikipedia_id": "140354", "title": "The Sun Also Rises",
                                 "section": "Section::::Abstract.",
                                 "start_paragraph_id": 1, "start_character": 0, "end_paragraph_id": 1,
                                 "end_character": 210, "bleu_score": 1.0}]},
                {"answer": "Hemingway"},
                {"answer": "Ernest Hemingway"},  # the same answer again: once
                {"answer": "  "},  # empty: not an answer
                {"provenance": [{"wikipedia_id": "13408", "title": "Ernest Hemingway"}]}],  # provenance only
     "meta": {}},
    {"id": 75397, "input": "Nikolaj Coster-Waldau worked with the Fox Broadcasting Company.",
     "output": [{"answer": "SUPPORTS",
                 "provenance": [{"wikipedia_id": "17436", "title": "Fox Broadcasting Company"},
                                {"wikipedia_id": "17436", "title": "Fox Broadcasting Company"}]}]},
    {"input": "Paris [SEP] capital of", "output": [{"answer": "France"}]},  # no id, no provenance
]


def write_kilt(path, records) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def test_kilt_reader_answers_and_gold_pages(tmp_path):
    nq, fever, trex = get_task("kilt").read(write_kilt(tmp_path / "dev-kilt.jsonl", KILT_RECORDS))
    assert nq.input == "who wrote the sun also rises" and nq.target == "Ernest Hemingway"
    assert nq.golds == ["Ernest Hemingway", "Hemingway"]
    assert nq.meta["gold_titles"] == ["The Sun Also Rises", "Ernest Hemingway"]
    assert nq.meta["gold_wikipedia_ids"] == ["140354", "13408"]
    assert nq.meta["id"] == "-4496950195393000000" and nq.meta["line"] == 1
    assert fever.to_pair() == ("Nikolaj Coster-Waldau worked with the Fox Broadcasting Company.", "SUPPORTS")
    assert fever.meta["gold_titles"] == ["Fox Broadcasting Company"] and fever.meta["id"] == 75397
    assert trex.golds == ["France"] and trex.meta["gold_titles"] == [] and "id" not in trex.meta
    assert len(get_task("kilt").read(tmp_path / "dev-kilt.jsonl", limit=2)) == 2


def test_kilt_is_scored_by_exact_match_and_f1(tmp_path):
    """The stub model answers the last word of the input: 'rises' is wrong, 'of' too; EM/F1 against any answer."""
    examples = get_task("kilt").read(write_kilt(tmp_path / "dev-kilt.jsonl", KILT_RECORDS))
    examples[0].input = "who wrote the sun also rises Hemingway"
    report = evaluate(StubModel(), "kilt", examples)
    assert report["task"] == "kilt" and report["n"] == 3
    assert [row["scores"]["exact_match"] for row in report["predictions"]] == [1.0, 0.0, 0.0]
    assert report["predictions"][0]["id"] == "-4496950195393000000"
    assert report["metrics"]["exact_match"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("record, message", [
    ({"input": "q", "output": [{"provenance": [{"title": "T"}]}]}, "no non-empty 'answer'"),
    ({"id": "test-1", "input": "q"}, "'output' must be a list"),
    ({"input": "q", "output": {"answer": "a"}}, "'output' must be a list"),
    ({"input": "q", "output": [{"answer": 3}]}, "an 'answer' must be a string"),
    ({"input": "q", "output": [{"answer": "a", "provenance": {"title": "T"}}]}, "'provenance' must be a list"),
    ({"input": "q", "output": [{"answer": "a", "provenance": [{"title": 7}]}]}, "'title' must be a string"),
    ({"question": "q", "output": [{"answer": "a"}]}, "no 'input' field"),
    ({"input": " ", "output": [{"answer": "a"}]}, "'input' must be a non-empty string"),
])
def test_malformed_kilt_records_name_file_and_line(tmp_path, record, message):
    path = write_kilt(tmp_path / "bad-kilt.jsonl", [KILT_RECORDS[2], record])
    with pytest.raises(InputError, match=rf"{re.escape(str(path))}:2: .*{re.escape(message)}"):
        get_task("kilt").read(path)
