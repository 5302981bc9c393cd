"""Command groups of the `openbook` command line (one module per group, registered in openbook/cli.py).

Commands never import :mod:`openbook.cli` (the entry point imports them).
"""

import argparse
import math

from openbook.errors import InputError, check_k


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1, with a message that names what was given."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def k_arg(text: str) -> int:
    """argparse type of ``--k``: a whole number checked by :func:`openbook.errors.check_k`, the one check of k."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    try:
        return check_k(value)
    except InputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def k_list(text: str) -> list[int]:
    """argparse type: comma-separated ks (each as :func:`k_arg`), sorted and distinct (``--k 1,5,20``)."""
    return sorted({k_arg(part.strip()) for part in text.split(",")})


def finite_float(text: str) -> float:
    """argparse type: a finite number (``nan`` and ``inf`` are refused, with a message that names what was given)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    """argparse type: a finite number of at least 0."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text!r}")
    return value
