"""Command groups of the `openbook` command line (one module per group, registered in openbook/cli.py).

Commands never import :mod:`openbook.cli` (the entry point imports them).
"""

import argparse


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1, with a message that names what was given."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def k_list(text: str) -> list[int]:
    """argparse type: comma-separated whole numbers of at least 1, sorted and distinct (``--k 1,5,20``)."""
    return sorted({positive_int(part.strip()) for part in text.split(",")})
