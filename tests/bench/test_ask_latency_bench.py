"""The helpers of bench/ask_latency.py (the benchmark itself is run by hand: it loads the real models)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tolerance import tolerance

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("ask_latency")
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize("values", [[0.8], [0.5, 2.0], [3.0, 1.0, 2.0, 10.0, 0.25], list(np.linspace(0.1, 3.0, 30))])
@pytest.mark.parametrize("q", [50, 95])
def test_percentile_is_numpys_linear_interpolation(bench, values, q):
    want = float(np.percentile(values, q))
    # two interpolations between the same two order statistics: a few roundings of values of this size
    assert bench.percentile(values, q) == pytest.approx(want, abs=tolerance(values, terms=4, dtype="float64")["atol"])


def test_the_settings_are_asks_defaults(bench):
    from openbook.presets import INTERACTIVE

    settings, dtype = bench.ask_settings(5)
    assert settings == {"k": 5, "num_beams": INTERACTIVE.num_beams, "decoding": INTERACTIVE.decoding,
                        "max_new_tokens": INTERACTIVE.max_new_tokens}
    assert dtype == INTERACTIVE.dtype
    assert len(bench.QUESTIONS) == len(set(bench.QUESTIONS)) >= 30


def test_the_json_line_has_the_issues_figures(bench):
    result = bench.result_line(warm=[0.4, 0.6, 0.5, 2.0], paper=[4.0, 6.0, 5.0, 9.0], fp32=[0.8, 1.2, 1.0, 3.0],
                               cold=[7.0, 9.5, 8.0],
                               peak_rss_kb=1024 * 900, dtype="bfloat16", settings={"k": 5, "num_beams": 1},
                               extra={"questions": 4}, fast=[1.0, 1.5, 1.2, 2.5])
    line = json.loads(json.dumps(result))  # one JSON value, as printed
    for key in ("warm_p50_s", "warm_p95_s", "cold_start_s", "peak_rss_mb", "paper_p50_s", "speedup_p50", "dtype",
                "fast_p50_s", "lazy_speedup_p50"):
        assert key in line
    assert line["warm_p50_s"] == 0.55 and line["cold_start_s"] == 8.0 and line["peak_rss_mb"] == 900.0
    assert line["speedup_p50"] == round(5.5 / 0.55, 2) and line["meets_targets"] is True
    assert line["float32_p50_s"] == 1.1 and line["dtype_speedup_p50"] == 2.0
    assert line["fast_p50_s"] == 1.35 and line["lazy_speedup_p50"] == round(1.35 / 0.55, 2)
    assert line["paper_settings"] == {"num_beams": 4, "decoding": "thorough", "max_new_tokens": 32, "k": 5,
                                      "dtype": "float32"}
