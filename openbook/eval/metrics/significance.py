"""Paired significance tests: do two systems scored on the SAME questions really differ?

Pure functions over per-question scores (KILT style: scored apart from prediction):

* :func:`paired_bootstrap` -- the paired bootstrap (Koehn, 2004; Berg-Kirkpatrick et al., 2012) for any
  per-question score (exact match, F1, answer recall ...): the difference of means, its 95% percentile
  interval, and a two-sided p-value;
* :func:`mcnemar` -- McNemar's exact test for per-question correctness (0/1): a two-sided binomial test
  on the discordant pairs, without continuity correction.

The bootstrap p-value follows Berg-Kirkpatrick et al. (2012, Fig. 1): resample the questions with
replacement ``samples`` times; the observed difference ``d`` is shifted to the null by centring, so the
two-sided p-value is the fraction of resamples whose difference ``d_i`` lies at least as far from ``d``
as ``d`` lies from 0, ``|d_i - d| >= |d|`` (their one-sided count ``d_i > 2d``, on both sides). It is a
fraction of ``samples``: 0 means below ``1 / samples``. Identical systems (``d = 0``) get p = 1.

McNemar: of the questions where exactly one system is right, ``b`` favour A and ``c`` favour B; under
the null each discordant question favours A with probability 1/2, so ``p = min(1, 2 P[X <= min(b, c)])``
for ``X ~ Binomial(b + c, 1/2)``, summed exactly in integers (no normal approximation); no discordant
pair gives p = 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from openbook.errors import InputError, positive_int
from openbook.eval.metrics.base import _same_length

MAX_BOOTSTRAP_SAMPLES = 1_000_000
MAX_RESAMPLED = 50_000_000  # questions drawn per chunk of resamples: bounds memory, not the total work
MAX_DISCORDANT = 100_000  # McNemar's exact integer sum costs O(n^2) bit operations (~5 s at this bound)


@dataclass(frozen=True)
class Bootstrap:
    """The paired bootstrap of ``mean(a) - mean(b)`` (see :func:`paired_bootstrap`)."""

    diff: float  # mean(a) - mean(b) on the given questions
    ci95: tuple[float, float]  # 2.5th and 97.5th percentiles of the resampled differences
    p_value: float  # two-sided
    samples: int
    n: int


@dataclass(frozen=True)
class McNemar:
    """McNemar's exact test (see :func:`mcnemar`)."""

    a_only: int  # b: questions only A gets right
    b_only: int  # c: questions only B gets right
    p_value: float  # two-sided, exact binomial


def _scores(values: Sequence[float], name: str) -> np.ndarray:
    if isinstance(values, (str, bytes)):
        raise InputError(f"{name} must be a list of per-question scores, not a string")
    try:
        array = np.asarray(list(values), dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise InputError(f"{name} must be a list of numbers: {err}") from None
    if array.ndim != 1:
        raise InputError(f"{name} must be a flat list of per-question scores")
    if not array.size:
        raise InputError(f"{name} is empty: a test over no questions is undefined")
    if not np.isfinite(array).all():
        raise InputError(f"{name} holds a NaN or infinite score")
    return array


def _pair(a, b, kind) -> tuple[np.ndarray, np.ndarray]:
    a, b = kind(a, "a"), kind(b, "b")
    _same_length(a, b, "a", "b")
    return a, b


def paired_bootstrap(a: Sequence[float], b: Sequence[float], samples: int = 10_000, seed: int = 0) -> Bootstrap:
    """Paired bootstrap test of two systems' per-question scores ``a`` and ``b`` (same questions, same
    order): difference of means, 95% percentile interval and two-sided p-value (module docs). The same
    ``seed`` gives the same resamples, hence the same interval and p-value."""
    a, b = _pair(a, b, _scores)
    samples = positive_int(samples, "samples")
    if samples > MAX_BOOTSTRAP_SAMPLES:
        raise InputError(f"samples must be at most {MAX_BOOTSTRAP_SAMPLES:,}, got {samples:,}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}")
    delta = a - b
    n, observed = len(delta), float(delta.mean())
    rng = np.random.default_rng(seed)
    chunk = max(1, MAX_RESAMPLED // n)
    means = np.concatenate([delta[rng.integers(0, n, size=(min(chunk, samples - start), n))].mean(axis=1)
                            for start in range(0, samples, chunk)])
    # |d_i - d| >= |d|; a resample tying with the observed one in exact arithmetic (d_i = 2d) counts as extreme
    # whichever way the two means of n terms round (Higham's gamma_n bound, twice), never the other way.
    slack = 4 * n * np.finfo(np.float64).eps * max(1.0, float(np.abs(delta).max()))
    extreme = int((np.abs(means - observed) >= abs(observed) - slack).sum())
    low, high = np.percentile(means, [2.5, 97.5])
    return Bootstrap(observed, (float(low), float(high)), extreme / samples, samples, n)


def _correct(values: Sequence, name: str) -> np.ndarray:
    array = _scores(values, name)
    if not np.isin(array, (0.0, 1.0)).all():
        raise InputError(f"{name} must hold per-question correctness (0/1 or True/False), got other values")
    return array.astype(bool)


def mcnemar(a_correct: Sequence, b_correct: Sequence) -> McNemar:
    """McNemar's exact two-sided test of two systems' per-question correctness (0/1 or booleans, same
    questions, same order): a binomial test on the discordant pairs (module docs)."""
    a, b = _pair(a_correct, b_correct, _correct)
    a_only, b_only = int((a & ~b).sum()), int((~a & b).sum())
    n = a_only + b_only
    if n > MAX_DISCORDANT:
        raise InputError(f"{n:,} discordant questions: the exact test is limited to {MAX_DISCORDANT:,}")
    tail, term = 0, 1  # sum of C(n, i) for i <= min(b, c), C(n, i) updated exactly in integers
    for i in range(min(a_only, b_only) + 1):
        tail += term
        term = term * (n - i) // (i + 1)
    p = min(1.0, 2 * tail / (1 << n)) if n else 1.0
    return McNemar(a_only, b_only, p)


def significant(p_values: Sequence[float | None], alpha: float = 0.05) -> bool:
    """Whether every given test (``None``: not applicable) rejects at level ``alpha``."""
    given = [p for p in p_values if p is not None]
    return bool(given) and all(p < alpha for p in given)

