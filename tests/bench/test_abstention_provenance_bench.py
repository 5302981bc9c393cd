"""bench/abstention_provenance.py: what a reader of the right answers sees, and how the labels take the
unsupported ones off the answerable side (a check of the script, not a figure)."""

from __future__ import annotations

import json

import pytest

from bench_scripts import bench_modules

PASSAGES = [(0.7, 0.6, "Paris", "paris is the capital of france .", 1.5),
            (0.2, 0.4, "Berlin", "berlin is the capital city of germany", -2.0)]
ITEMS = [{"question": "capital of france?", "answer": "Paris", "logprob": -0.1, "passages": PASSAGES,
          "split": "dev", "kind": "right"},
         {"question": "capital of germany?", "answer": "Berlin", "logprob": -0.3, "passages": PASSAGES,
          "split": "test", "kind": "right"},
         {"question": "capital of peru?", "answer": "Paris", "logprob": -2.0, "passages": PASSAGES,
          "split": "test", "kind": "absent"},
         {"question": "capital of france?", "answer": "Lyon", "logprob": -1.0, "passages": PASSAGES[1:],
          "split": "dev", "kind": "deleted", "book": "nq"}]
GOLDS = {"capital of france?": ["Paris"], "capital of germany?": ["Berlin"], "capital of peru?": ["Lima"]}


@pytest.fixture(scope="module")
def bench():
    with bench_modules("abstention_provenance") as module:
        yield module


@pytest.fixture(scope="module")
def sets():
    with bench_modules("_abstention_sets") as module:
        yield module


def test_a_reader_sees_the_right_answers_only_without_scores_or_split(bench):
    rows = bench.to_read(ITEMS, GOLDS, seed=0)
    assert sorted(r["question"] for r in rows) == ["capital of france?", "capital of germany?"]
    for r in rows:
        assert set(r) == {"id", "question", "gold", "answer", "passages"}
        assert r["id"] == bench.item_id(r["question"]) and r["gold"] == GOLDS[r["question"]]
        assert r["passages"] == [{"title": p[2], "text": p[3]} for p in PASSAGES]
    assert rows == bench.to_read(ITEMS, GOLDS, seed=0)  # a seeded order


def test_unsupported_right_answers_leave_the_answerable_side_and_nothing_else_moves(bench, tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": bench.item_id("capital of france?"), "supported": True},
        {"id": bench.item_id("capital of germany?"), "supported": False, "note": "lucky"}]))
    kept = bench.supported_only(ITEMS, bench.read_labels(path))
    assert kept == [ITEMS[0], ITEMS[2], ITEMS[3]]  # the deleted-answer item of a supported question stays too


def test_labels_must_be_booleans_and_cover_every_right_answer(bench, tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"id": bench.item_id("capital of france?"), "supported": "yes"}) + "\n")
    with pytest.raises(SystemExit, match="labels.jsonl:1: 'supported' must be true or false"):
        bench.read_labels(path)
    with pytest.raises(SystemExit, match="1 right answers have no label.*capital of germany"):
        bench.supported_only(ITEMS, {bench.item_id("capital of france?"): True})


def test_without_labels_every_right_answer_stays(sets):
    assert sets.supported(["a?", "b?"], None) == ["a?", "b?"]
    assert sets.supported(["a?", "b?"], {sets.item_id("a?"): False, sets.item_id("b?"): True}) == ["b?"]


def test_the_shipped_labels_name_their_questions_and_say_why_not(bench):
    """bench/data/abstention-provenance.jsonl: one line per right answer read, its id its question's, each
    unsupported one with the reader's reason."""
    rows = [json.loads(line) for line in bench.LABELS.read_text(encoding="utf-8").splitlines()]
    assert len({r["id"] for r in rows}) == len(rows) > 0
    for r in rows:
        assert r["id"] == bench.item_id(r["question"]) and isinstance(r["supported"], bool)
        assert r["supported"] or (r["note"] and r["passage"] is None)
    assert bench.read_labels(bench.LABELS) == {r["id"]: r["supported"] for r in rows}
    assert set(bench.read_labels(bench.RECHECK)) <= {r["id"] for r in rows}


def test_agreement_of_two_readings(bench):
    first = {"a": True, "b": False, "c": True, "d": False}
    assert bench.agreement(first, dict(first)) == {"items": 4, "agree": 1.0, "kappa": 1.0}
    flipped = {"a": True, "b": True, "c": True, "d": False, "e": False}  # e: not in the first reading
    got = bench.agreement(first, flipped)
    assert got["items"] == 4 and got["agree"] == 0.75
    assert got["kappa"] == pytest.approx((0.75 - (0.5 * 0.75 + 0.5 * 0.25)) / (1 - 0.5), abs=1e-4)
