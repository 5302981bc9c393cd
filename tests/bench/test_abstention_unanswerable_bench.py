"""bench/abstention_unanswerable.py: what a reader of the unanswerable side sees, and how the read labels take the
questions the book does answer off that side (a check of the script, not a figure)."""

from __future__ import annotations

import json

import pytest

from bench_scripts import bench_modules

PASSAGES = [(0.7, 0.6, "Denmark", "danish is the official language of denmark .", 1.5),
            (0.2, 0.4, "Berlin", "berlin is the capital city of germany", -2.0)]
ITEMS = [{"question": "capital of germany?", "answer": "Berlin", "passages": PASSAGES, "split": "test",
          "kind": "right", "f": {"s": 3.0}},
         {"question": "language of denmark?", "answer": "Danish", "passages": PASSAGES, "split": "test",
          "kind": "absent", "f": {"s": 2.5}},
         {"question": "capital of peru?", "answer": "Berlin", "passages": PASSAGES, "split": "test",
          "kind": "absent", "f": {"s": 0.5}},
         {"question": "capital of peru?", "answer": "Berlin", "passages": PASSAGES, "split": "test",
          "kind": "absent", "f": {"s": 0.5}},  # a question asked twice is read once
         {"question": "capital of chile?", "answer": "Berlin", "passages": PASSAGES[1:], "split": "test",
          "kind": "deleted", "f": {"s": 1.5}},
         {"question": "capital of spain?", "answer": "Berlin", "passages": PASSAGES, "split": "dev",
          "kind": "absent", "f": {"s": 0.1}}]
GOLDS = {"capital of germany?": ["Berlin"], "language of denmark?": ["Danish Language"],
         "capital of peru?": ["Lima"], "capital of chile?": ["Santiago"], "capital of spain?": ["Madrid"]}


@pytest.fixture(scope="module")
def bench():
    with bench_modules("abstention_unanswerable") as module:
        yield module


def test_a_reader_sees_each_unanswerable_test_question_once_without_answer_score_kind_or_split(bench):
    rows = bench.to_read(ITEMS, GOLDS, seed=0)
    assert sorted(r["question"] for r in rows) == ["capital of chile?", "capital of peru?", "language of denmark?"]
    for r in rows:
        assert set(r) == {"id", "question", "gold", "passages"}
        assert r["id"] == bench.item_id(r["question"]) and r["gold"] == GOLDS[r["question"]]
    assert rows == bench.to_read(ITEMS, GOLDS, seed=0)  # a seeded order


def test_held_questions_leave_the_unanswerable_side_and_nothing_else_moves(bench):
    held = {bench.item_id("language of denmark?"): True, bench.item_id("capital of peru?"): False,
            bench.item_id("capital of chile?"): False}
    assert bench.unanswerable(ITEMS, "absent") == ITEMS[1:4]
    assert bench.unanswerable(ITEMS, "absent", held) == ITEMS[2:4]
    assert bench.unanswerable(ITEMS, "deleted", held) == ITEMS[4:5]


def test_abstention_is_scored_with_the_shipped_signal_at_its_threshold(bench, monkeypatch):
    monkeypatch.setattr(bench, "shipped_score", lambda f: f["s"])
    got = bench.abstention(3.0, [3.0, 2.9, 2.0], ITEMS[1:4], seed=0)
    assert got["questions"] == 3 and got["abstained"] == 1.0  # 2.5, 0.5 and 0.5 are below 3.0
    assert got["at_95_answered"] == pytest.approx(2 / 3, abs=1e-3)  # keeping 95% of the three answers takes 2.0


def test_labels_must_be_booleans(bench, tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"id": "x", "held": "no"}) + "\n")
    with pytest.raises(SystemExit, match="labels.jsonl:1: 'held' must be true or false"):
        bench.read_labels(path, "held")


def test_the_shipped_labels_name_their_questions_and_what_the_passage_says(bench):
    """bench/data/abstention-unanswerable.jsonl: one line per question read, its id its question's, each held one
    with the passage and the reader's note; the second reading covers only questions of the first."""
    rows = [json.loads(line) for line in bench.LABELS.read_text(encoding="utf-8").splitlines()]
    assert len({r["id"] for r in rows}) == len(rows) > 0
    for r in rows:
        assert r["id"] == bench.item_id(r["question"]) and isinstance(r["held"], bool)
        assert (r["passage"] in range(5) and r["note"]) if r["held"] else r["passage"] is None
    assert bench.read_labels(bench.LABELS, "held") == {r["id"]: r["held"] for r in rows}
    assert set(bench.read_labels(bench.RECHECK, "held")) <= {r["id"] for r in rows}


def test_a_reader_of_answers_sees_the_held_questions_answers_only(bench):
    held = {bench.item_id("language of denmark?"): True, bench.item_id("capital of peru?"): False,
            bench.item_id("capital of chile?"): True}
    rows = bench.answers_to_read(ITEMS, GOLDS, held, seed=0)
    assert sorted((r["question"], r["answer"]) for r in rows) == [("capital of chile?", "Berlin"),
                                                                   ("language of denmark?", "Danish")]
    for r in rows:
        assert set(r) == {"id", "question", "gold", "answer"} and r["gold"] == GOLDS[r["question"]]


def test_the_shipped_answer_labels_cover_exactly_the_held_questions(bench):
    rows = [json.loads(line) for line in bench.ANSWERS.read_text(encoding="utf-8").splitlines()]
    held = bench.read_labels(bench.LABELS, "held")
    assert {r["id"] for r in rows} == {i for i, h in held.items() if h}
    for r in rows:
        assert r["id"] == bench.item_id(r["question"]) and isinstance(r["right"], bool)
        assert r["note"] or not r["right"]
