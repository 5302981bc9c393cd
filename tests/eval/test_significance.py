"""Paired significance tests (openbook.eval.metrics.significance) against values computed by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from openbook.errors import InputError
from openbook.eval.metrics import mcnemar, paired_bootstrap, significant


def pairs(both: int, a_only: int, b_only: int, neither: int) -> tuple[list[int], list[int]]:
    """Per-question correctness of systems A and B with the given concordant / discordant counts."""
    a = [1] * both + [1] * a_only + [0] * b_only + [0] * neither
    b = [1] * both + [0] * a_only + [1] * b_only + [0] * neither
    return a, b


def sampling_bound(p: float, samples: int) -> float:
    """Six binomial standard deviations of a Monte Carlo estimate of p from ``samples`` draws."""
    return 6 * math.sqrt(p * (1 - p) / samples)


# ------------------------------------------------------------------------------------------ McNemar


def test_mcnemar_hand_computed():
    # b = 10, c = 2: p = 2 * (C(12,0) + C(12,1) + C(12,2)) / 2**12 = 2 * 79 / 4096
    result = mcnemar(*pairs(30, 10, 2, 7))
    assert (result.a_only, result.b_only) == (10, 2)
    assert result.p_value == 158 / 4096 and round(result.p_value, 4) == 0.0386
    assert mcnemar(*pairs(0, 5, 0, 0)).p_value == 2 / 32  # every discordant pair one way: 2 * 0.5**5
    assert mcnemar(*pairs(3, 0, 0, 4)).p_value == 1.0  # no discordant pair
    assert mcnemar(*pairs(1, 6, 6, 1)).p_value == 1.0  # balanced: the doubled tail is capped at 1


def test_mcnemar_is_the_binomial_formula_and_symmetric():
    for b, c in itertools.product(range(0, 14, 3), range(0, 25, 4)):
        n = b + c
        expected = min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n) if n else 1.0
        a_correct, b_correct = pairs(2, b, c, 3)
        assert mcnemar(a_correct, b_correct).p_value == expected
        assert mcnemar(b_correct, a_correct).p_value == expected  # two-sided: the order does not matter
    booleans = mcnemar([True, True, False], [False, False, False])
    assert (booleans.a_only, booleans.b_only, booleans.p_value) == (2, 0, 0.5)


def test_identical_systems_give_p_one():
    rng = np.random.default_rng(3)
    correct = rng.integers(0, 2, 50).tolist()
    assert mcnemar(correct, correct).p_value == 1.0
    result = paired_bootstrap(correct, correct)
    assert (result.diff, result.ci95, result.p_value) == (0.0, (0.0, 0.0), 1.0)
    f1 = rng.random(40).tolist()  # any score, not only 0/1
    assert paired_bootstrap(f1, f1).p_value == 1.0


# ------------------------------------------------------------------------------------------ bootstrap


def test_bootstrap_difference_and_interval():
    a, b = pairs(20, 12, 3, 5)  # 40 questions: A 32 right, B 23 right
    result = paired_bootstrap(a, b)
    assert result.diff == pytest.approx((32 - 23) / 40, abs=8 * 40 * np.finfo(float).eps)
    assert result.n == 40 and result.samples == 10_000
    low, high = result.ci95
    assert low < result.diff < high and low > 0  # A is better, the interval excludes 0
    assert result.p_value < 0.05
    # the systems swapped: the same test mirrored
    mirrored = paired_bootstrap(b, a)
    assert mirrored.diff == -result.diff and mirrored.p_value == result.p_value
    assert mirrored.ci95 == pytest.approx((-high, -low), abs=8 * 40 * np.finfo(float).eps)


def test_bootstrap_p_value_against_exact_enumeration():
    # 3 questions, per-question differences (1, 0, 0): d = 1/3. A resample's mean is (number of times
    # question 1 is drawn) / 3, Binomial(3, 1/3) draws; |d_i - 1/3| >= 1/3 unless drawn exactly once.
    exact = 1 - 3 * (1 / 3) * (2 / 3) ** 2  # = 5/9
    samples = 20_000
    result = paired_bootstrap([1, 0, 0], [0, 0, 0], samples=samples, seed=7)
    assert result.p_value == pytest.approx(exact, abs=sampling_bound(exact, samples))
    # two questions, differences (1, 0): resample means 0, 1/2, 1 with 1/4, 1/2, 1/4 -> p = 1/2
    result = paired_bootstrap([1, 0], [0, 0], samples=samples, seed=1)
    assert result.p_value == pytest.approx(0.5, abs=sampling_bound(0.5, samples))
    # every question favours A by the same margin: no resample is as far from d as 0 is
    assert paired_bootstrap([1] * 9, [0] * 9).p_value == 0.0


def test_bootstrap_is_reproducible_under_its_seed():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 2, 60).tolist(), rng.integers(0, 2, 60).tolist()
    assert paired_bootstrap(a, b, seed=5) == paired_bootstrap(a, b, seed=5)
    assert paired_bootstrap(a, b, seed=5) != paired_bootstrap(a, b, seed=6)  # other resamples


def test_significant_needs_every_applicable_test():
    assert significant([0.01, 0.02]) and significant([0.01, None])
    assert not significant([0.01, 0.2]) and not significant([None]) and not significant([0.05])


@pytest.mark.parametrize("call, message", [
    (lambda: paired_bootstrap([1, 0], [1]), "differ in length"),
    (lambda: mcnemar([1, 0, 1], [1]), "differ in length"),
    (lambda: paired_bootstrap([], []), "empty"),
    (lambda: mcnemar([], []), "empty"),
    (lambda: paired_bootstrap("10", "01"), "not a string"),
    (lambda: paired_bootstrap([1, float("nan")], [0, 0]), "NaN"),
    (lambda: mcnemar([0.5, 1], [0, 1]), "correctness"),
    (lambda: paired_bootstrap([1], [0], samples=0), "samples"),
    (lambda: paired_bootstrap([1], [0], samples=10**7), "at most"),
    (lambda: paired_bootstrap([1], [0], seed=-1), "seed"),
])
def test_bad_input_is_a_clear_error(call, message):
    with pytest.raises(InputError, match=message):
        call()
