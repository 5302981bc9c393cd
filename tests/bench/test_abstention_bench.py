"""bench/abstention.py: its calibration pieces on made-up scores (a check of the script, not a figure)."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from bench_scripts import bench_modules

SPLIT = Path(__file__).resolve().parents[2] / "scripts" / "split_qa_data.py"


@pytest.fixture(scope="module")
def bench():
    with bench_modules("abstention") as modules:
        yield modules


def test_the_threshold_keeps_the_share_asked_for(bench):
    scores = [i / 100 for i in range(100)]
    t = bench.threshold_keeping(scores, 0.97)
    assert sum(s >= t for s in scores) >= 97 and sum(s >= t + 0.01 for s in scores) < 97


def test_folds_are_seeded_halves_of_the_keys(bench):
    keys = [f"q{i}" for i in range(11)] + ["q0", "q3"]  # a question asked twice keeps one fold
    fold = bench.folds(keys, 0)
    assert set(fold) == set(keys) and sorted(fold.values()).count(0) == 6 and fold == bench.folds(keys, 0)
    assert fold != bench.folds(keys, 1)
    assert bench.interleave([1, 3, 5], [2, 4]) == [1, 2, 3, 4, 5]
    assert bench.by_kind([1.0, 0.0, 0.5, 0.5], ["a", "b", "a", "b"]) == {"all": 0.5, "a": 0.75, "b": 0.25}


def test_cross_validation_keeps_a_question_s_items_in_one_fold(bench, monkeypatch):
    """The same question answerable over one book and unanswerable over another is never fitted on one side and
    scored on the other."""
    answerable = [{"top_score": float(i), "logprob": 0.0} for i in range(10)]
    unanswerable = [{"top_score": float(i) - 5, "logprob": 0.0} for i in range(10)]
    keys = ([f"q{i}" for i in range(10)], [f"q{i}" for i in range(10)])
    fitted_on: list[set] = []
    signal_of = bench.signal_of

    def spy(name, a, u):
        fitted_on.append({id(f) for f in a + u})
        return signal_of(name, a, u)

    monkeypatch.setattr(bench, "signal_of", spy)
    kept, rates = bench.cross_validate("top_score", answerable, unanswerable, 0.9, rounds=3, seed=0, keys=keys)
    assert len(rates) == len(kept) == 10 and all(0.0 <= r <= 1.0 for r in rates + kept)
    for fitted in fitted_on:
        for a, u in zip(answerable, unanswerable):
            assert (id(a) in fitted) == (id(u) in fitted)


def test_the_weights_point_to_the_separating_feature(bench):
    """Answerable and unanswerable differ only in log-likelihood: its weight grows large and positive, and
    cross-validation keeps about the share asked for while abstaining on nearly every unanswerable."""
    answerable = [{"top_score": 0.5 + 0.01 * (i % 3), "logprob": -0.2 - 0.01 * i, "support": 0.5,
                   "words": 2.0, "coverage": 0.5, "judge": 1.0, "judge_answer": 0.5, "answer_coverage": 0.5}
                  for i in range(40)]
    unanswerable = [{**f, "logprob": f["logprob"] - 0.8} for f in answerable]
    weights = bench.fit_weights(answerable, unanswerable, bench.SIGNALS["combined"], steps=500)
    assert weights["logprob"] > 1.0
    assert sum(abs(weights[name]) for name in bench.SIGNALS["combined"] if name not in ("top_score", "logprob")) < 1e-9
    kept, rates = bench.cross_validate("combined", answerable, unanswerable, 0.9, rounds=2, seed=0)
    assert bench.share(kept) >= 0.85 and bench.share(rates) >= 0.95 and len(kept) == len(answerable)
    assert bench.auc([2.0, 3.0], [0.0, 1.0]) == 1.0 and bench.auc([0.0], [1.0]) == 0.0
    assert bench.auc([1.0, 3.0], [1.0, 2.0]) == pytest.approx((0.5 + 0 + 1 + 1) / 4)  # a tie counts half
    # the curve at the targets: answering 95% of 1..20 allows a threshold of 2, below which 2 of 0.5..9.5 lie;
    # abstaining on 70% of those (7 of 10, up to 6.5) answers the 14 of 20 above 6.5
    points = bench.curve_points([float(v) for v in range(1, 21)], [v + 0.5 for v in range(10)])
    assert points == {"abstain_unanswerable_at_95_answered": 0.2, "answered_right_at_70_abstained": 0.7}
    flags = [True] * 3 + [False]
    low, high = bench.bootstrap(flags, seed=0, rounds=200)
    assert 0.0 <= low <= bench.share(flags) <= high <= 1.0


def test_the_shipped_calibration_is_scored_with_the_shipped_signal(bench):
    from openbook.presets import ABSTAIN_SIGNAL, ABSTAIN_WEIGHTS
    from openbook.rag.abstain import FEATURES, combined_score

    def features(value):
        return dict.fromkeys(FEATURES, value)

    score = (lambda f: f[ABSTAIN_SIGNAL]) if ABSTAIN_SIGNAL in FEATURES else (
        lambda f: combined_score(f, ABSTAIN_WEIGHTS))
    answerable, unanswerable = [features(v) for v in (1.0, 2.0, 0.1)], [features(v) for v in (-1.0, 0.0, 0.05, 3.0)]
    threshold = score(features(0.5))
    got = bench.shipped_figures(threshold, answerable, unanswerable)
    # the features here move every score the same way as their common value: 2 of 3 above, 3 of 4 below
    higher = score(features(1.0)) > threshold
    assert got["signal"] == ABSTAIN_SIGNAL and got["threshold"] == threshold
    assert (got["test_other_answered_right"], got["test_abstain_unanswerable"]) == (
        (0.667, 0.75) if higher else (0.333, 0.25))


def test_the_fresh_test_set_is_what_the_default_never_trained_on_nor_any_run_read(bench, tmp_path):
    """The fresh questions are the WebQuestions/CuratedTrec training parts past what default-train.jsonl takes
    (as scripts/split_qa_data.py writes it), less any question that repeats a trained or held-out one."""
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    n = 21  # NQ: 16 to train on, so default-train takes the first 8 of each other training part
    with gzip.open(data / "nq-open-oracle.dev-split.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"question": f"q{i}", "answers": ["a"], "ctxs": []}) + "\n" for i in range(n))
    wq = [f"w{i}" for i in range(n)]
    wq[19], wq[18] = wq[1], wq[10]  # training part past the first 8: 19 repeats a trained one, 18 a held-out one
    (data / "webquestions.train.json").write_text(json.dumps(
        [{"qId": str(i), "qText": q, "answers": ["a"]} for i, q in enumerate(wq)]))
    (data / "curatedtrec.train.tsv").write_text("".join(f"{i}\tfactoid\tc{i}\ta{i}\n" for i in range(n)))
    for name in ("jeopardy.dev-split.jsonl.gz", "fever.paper_dev.dev-split.jsonl.gz"):
        gzip.open(data / name, "wt").close()
    spec = importlib.util.spec_from_file_location("split_qa_data", SPLIT)
    split = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(split)
    split.main(["--data-dir", str(data), "--out", str(out)])

    fresh = bench.load_fresh(data, 16)
    trained = {json.loads(line)["question"] for line in (out / "default-train.jsonl").read_text().splitlines()}
    nq, held = bench.load_sets(data)
    assert not {r["question"] for r in fresh} & (trained | {r["question"] for r in nq + held})
    questions = [r["question"] for r in fresh]
    # training parts: indices not divisible by 5; past the first 8 of each: 11..19 less 15 (and the repeats)
    assert questions == [f"w{i}" for i in (11, 12, 13, 14, 16, 17)] + [f"c{i}" for i in (11, 12, 13, 14, 16, 17, 18, 19)]
    assert {r["mode"] for r in fresh if r["question"].startswith("c")} == {"regex"}
    # the passage judge (scripts/train_judge.py) trains on exactly the default's training questions
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(SPLIT.parent))
        from train_judge import training_rows
    rows = training_rows(data)
    assert {r["question"] for r in rows} == trained and len(rows) == len(trained)
    assert {r["source"] for r in rows} == {"nq", "wq", "ct"}
    assert {r["mode"] for r in rows if r["source"] == "ct"} == {"regex"}


def test_the_deleted_answer_book_holds_none_of_the_answers_and_the_rest(bench, tmp_path):
    """bench/_abstention_sets.py: the passages holding a question's answers are found (a DPR match, a regex for
    CuratedTrec) and deleted from a copy of the book as one new version; the original book is untouched."""
    from openbook.corpus import Passage
    from openbook.index import KnowledgeBase
    from tiny_kb import build

    with bench_modules("_abstention_sets") as sets:
        passages = [Passage("a", "Paris", "Paris is the capital of France."),
                    Passage("b", "Lyon", "Lyon is a city in France on the river Rhone."),
                    Passage("c", "Tower", "The tower was built in 1889 in Paris."),
                    Passage("d", "Moon", "The moon orbits the earth.")]
        kb = build(tmp_path / "kb", lambda: iter(passages))
        rows = [{"question": "capital of france?", "answers": ["Paris"], "mode": "dpr"},
                {"question": "when was it built?", "answers": [r"18[0-9]{2}"], "mode": "regex"}]
        held = sets.holding_rows(kb, rows)
        assert held == {"capital of france?": {"a", "c"}, "when was it built?": {"c"}}
        copy = sets.book_without(kb, {"a", "c"}, tmp_path / "without")
        assert {p.id for _, p in copy.live_rows()} == {"b", "d"} and copy.version == kb.version + 1
        assert {p.id for _, p in KnowledgeBase.load(tmp_path / "kb").live_rows()} == {"a", "b", "c", "d"}
        assert not (tmp_path / "without.tmp").exists()
        again = sets.book_without(kb, {"a", "c"}, tmp_path / "without")  # reused, not deleted twice
        assert again.version == copy.version
