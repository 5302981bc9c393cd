"""The input checks every metric shares, and :func:`aggregate`, the mean of per-example scores.

Every metric checks its input and raises :class:`~openbook.errors.InputError` naming what is wrong; a
metric over no examples is undefined and raises rather than returning 0 (see :func:`aggregate`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from openbook.errors import InputError, positive_int

# ---------------------------------------------------------------------------------------------------
# input checks


def _check_text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{name} must be a string, got {type(value).__name__}")
    return value


def _check_texts(values: Any, name: str, allow_empty: bool = False) -> list[str]:
    """A list of strings (a bare string is refused: it would be read as a list of characters)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InputError(f"{name} must be a list of strings, got {type(values).__name__}")
    values = list(values)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise InputError(f"{name}[{i}] must be a string, got {type(value).__name__}")
    if not values and not allow_empty:
        raise InputError(f"{name} is empty")
    return values


def _same_length(a: Sequence, b: Sequence, name_a: str, name_b: str) -> None:
    if len(a) != len(b):
        raise InputError(f"{name_a} and {name_b} differ in length ({len(a)} vs {len(b)})")


def _check_ks(ks: Any) -> list[int]:
    """Distinct positive integer ks, in the order given."""
    if isinstance(ks, int) and not isinstance(ks, bool):
        ks = [ks]
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Iterable):
        raise InputError(f"ks must be a list of positive integers, got {ks!r}")
    values: list[int] = []
    for k in ks:
        k = positive_int(k, "k")
        if k not in values:
            values.append(k)
    if not values:
        raise InputError("give at least one k")
    return values


# ---------------------------------------------------------------------------------------------------
# aggregation


def aggregate(values: Iterable[float]) -> float:
    """The mean of per-example scores: a set's EM, F1, ROUGE-L or Q-BLEU-1 (KILT's corpus averages).

    An empty list raises :class:`~openbook.errors.InputError` rather than returning 0.0: a score over
    no examples is undefined, and a silent 0.0 would hide an empty or wrongly filtered evaluation set.
    Values must be finite numbers (bools count as 0/1).
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InputError(f"values must be a list of numbers, got {type(values).__name__}")
    numbers = []
    for i, value in enumerate(values):
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"values[{i}] must be a finite number, got {value!r}")
        numbers.append(float(value))
    if not numbers:
        raise InputError("the mean of no values is undefined (no examples to aggregate)")
    return math.fsum(numbers) / len(numbers)
