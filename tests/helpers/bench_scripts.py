"""Importing the benchmark scripts of bench/ in tests (a check of a script's pieces, never a figure)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@contextlib.contextmanager
def bench_modules(*names: str) -> Iterator:
    """The bench scripts ``names`` imported as modules (one, or a tuple of several), with bench/ (their siblings,
    e.g. ``_common``) and scripts/ on ``sys.path`` while the block runs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCH))
        patch.syspath_prepend(str(BENCH.parent / "scripts"))
        modules = tuple(importlib.import_module(name) for name in names)
        yield modules[0] if len(modules) == 1 else modules
