"""bench/abstention.py: its calibration pieces on made-up scores (a check of the script, not a figure)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCH))
        patch.syspath_prepend(str(BENCH.parent / "scripts"))
        yield importlib.import_module("abstention")


def test_the_threshold_keeps_the_share_asked_for(bench):
    scores = [i / 100 for i in range(100)]
    t = bench.threshold_keeping(scores, 0.97)
    assert sum(s >= t for s in scores) >= 97 and sum(s >= t + 0.01 for s in scores) < 97


def test_halves_are_seeded_and_disjoint(bench):
    rows = list(range(11))
    first, second = bench.halves(rows, 0)
    assert sorted(first + second) == rows and (first, second) == bench.halves(rows, 0)
    assert bench.interleave([1, 3, 5], [2, 4]) == [1, 2, 3, 4, 5]


def test_the_logprob_weight_points_to_the_separating_signal(bench):
    """Answerable and unanswerable differ only in log-likelihood: the weight grows large and positive."""
    answerable = [{"top_score": 0.5 + 0.01 * (i % 3), "logprob": -0.2 - 0.01 * i} for i in range(20)]
    unanswerable = [{"top_score": 0.5 + 0.01 * (i % 3), "logprob": -1.0 - 0.01 * i} for i in range(20)]
    assert bench.logprob_weight(answerable, unanswerable, steps=500) > 1.0
    flags = [True] * 3 + [False]
    low, high = bench.bootstrap(flags, seed=0, rounds=200)
    assert 0.0 <= low <= bench.share(flags) <= high <= 1.0
