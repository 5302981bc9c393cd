"""bench/abstention.py: its calibration pieces on made-up scores (a check of the script, not a figure)."""

from __future__ import annotations

import pytest

from bench_scripts import bench_modules


@pytest.fixture(scope="module")
def bench():
    with bench_modules("abstention") as modules:
        yield modules


def test_the_threshold_keeps_the_share_asked_for(bench):
    scores = [i / 100 for i in range(100)]
    t = bench.threshold_keeping(scores, 0.97)
    assert sum(s >= t for s in scores) >= 97 and sum(s >= t + 0.01 for s in scores) < 97


def test_halves_are_seeded_and_disjoint(bench):
    rows = list(range(11))
    first, second = bench.halves(rows, 0)
    assert sorted(first + second) == rows and (first, second) == bench.halves(rows, 0)
    assert bench.interleave([1, 3, 5], [2, 4]) == [1, 2, 3, 4, 5]


def test_the_weights_point_to_the_separating_feature(bench):
    """Answerable and unanswerable differ only in log-likelihood: its weight grows large and positive, and
    cross-validation keeps about the share asked for while abstaining on nearly every unanswerable."""
    answerable = [{"top_score": 0.5 + 0.01 * (i % 3), "logprob": -0.2 - 0.01 * i, "support": 0.5,
                   "words": 2.0} for i in range(40)]
    unanswerable = [{**f, "logprob": f["logprob"] - 0.8} for f in answerable]
    weights = bench.fit_weights(answerable, unanswerable, bench.SIGNALS["combined"], steps=500)
    assert weights["logprob"] > 1.0 and abs(weights["support"]) + abs(weights["words"]) < 1e-9
    kept, abstained = bench.cross_validate("combined", answerable, unanswerable, 0.9, rounds=2, seed=0)
    assert kept >= 0.85 and abstained >= 0.95
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
