"""The helpers of bench/ask_latency.py and bench/cold_retrieve.py (the benchmarks themselves are run by hand:
they load the real models)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from bench_scripts import bench_modules
from tolerance import tolerance

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench():
    with bench_modules("ask_latency") as module:
        yield module


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


def test_the_json_line_has_the_cold_retrieve(bench):
    result = bench.result_line(warm=[0.5], paper=[5.0], fp32=[1.0], cold=[7.0, 9.5, 8.0], cold_retrieve=[3.0, 2.0, 4.5],
                               peak_rss_kb=1024, dtype="bfloat16", settings={"k": 5}, extra={})
    line = json.loads(json.dumps(result))
    assert line["cold_retrieve_s"] == 3.0 and line["cold_retrieve_runs_s"] == [3.0, 2.0, 4.5]
    assert line["cold_start_s"] == 8.0


def test_cold_retrieve_times_a_fresh_openbook_retrieve(bench, monkeypatch):
    commands = []
    monkeypatch.setattr(bench, "time_to_output", lambda command: commands.append(command) or (1.0, {"passages": []}))
    assert bench.cold_retrieve("Who wrote Hamlet?", 3) == (1.0, {"passages": []})
    assert bench.cold_start("Who wrote Hamlet?", 3)[0] == 1.0
    retrieve, ask = commands
    assert retrieve == [sys.executable, "-m", "openbook", "retrieve", "Who wrote Hamlet?", "--json", "--k", "3"]
    assert ask[3] == "ask" and ask[4:] == retrieve[4:]


def test_with_kb_every_cold_process_answers_from_it_and_the_target_is_the_books(bench, monkeypatch):
    commands = []
    monkeypatch.setattr(bench, "time_to_output", lambda command: commands.append(command) or (1.0, {}))
    bench.cold_start("Who wrote Hamlet?", 5, "/books/wiki")
    bench.cold_retrieve("Who wrote Hamlet?", 5, "/books/wiki")
    assert all(command[-2:] == ["--kb", "/books/wiki"] for command in commands)
    line = bench.result_line(warm=[0.5], paper=[5.0], fp32=[1.0], cold=[12.0], peak_rss_kb=1024, dtype="float32",
                             settings={"k": 5}, extra={}, cold_target_s=bench.KB_COLD_TARGET_S)
    assert line["targets"] == {"warm_p50_s": 1.0, "cold_start_s": 15.0} and line["meets_targets"] is True
    demo = bench.result_line(warm=[0.5], paper=[5.0], fp32=[1.0], cold=[12.0], peak_rss_kb=1024, dtype="float32",
                             settings={"k": 5}, extra={})
    assert demo["targets"]["cold_start_s"] == 10.0 and demo["meets_targets"] is False


def test_time_to_output_reads_the_json_a_process_prints(bench):
    seconds, record = bench.time_to_output([sys.executable, "-c", "import json; print(json.dumps({'passages': [1]}))"])
    assert record == {"passages": [1]} and seconds > 0
    with pytest.raises(SystemExit, match="failed"):
        bench.time_to_output([sys.executable, "-c", "import sys; sys.exit('no')"])


@pytest.fixture(scope="module")
def cold_retrieve_bench(bench):
    with bench_modules("cold_retrieve") as module:
        yield module


def test_cold_retrieve_bench_runs_each_trees_own_openbook(cold_retrieve_bench, tmp_path):
    repo = BENCH.parent
    assert cold_retrieve_bench.openbook_of(repo) == str((repo / "openbook" / "__init__.py").resolve())
    env = cold_retrieve_bench.tree_env(tmp_path)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path) and env["PYTHONSAFEPATH"] == "1"
    with pytest.raises(SystemExit, match="not the tree's package"):
        cold_retrieve_bench.openbook_of(tmp_path)  # no openbook/ there: another tree's would be timed
    line = cold_retrieve_bench.result_line({"/old": [9.0, 7.0, 8.0], "/new": [3.0, 4.0, 2.5]},
                                           {"/old": [6.0, 5.0, 5.5], "/new": [2.0, 2.5, 1.5]}, "q?", 5)
    assert line["trees"]["/old"] == {"median_wall_s": 8.0, "wall_runs_s": [9.0, 7.0, 8.0], "median_cpu_s": 5.5,
                                     "cpu_runs_s": [6.0, 5.0, 5.5]}
    assert line["trees"]["/new"]["median_wall_s"] == 3.0 and line["runs"] == 3


def test_cold_retrieve_bench_counts_the_cpu_time_of_the_process(cold_retrieve_bench):
    busy = "import json, time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\nprint('{}')"
    seconds, cpu, record = cold_retrieve_bench.timed([sys.executable, "-c", busy], dict(os.environ))
    assert record == {} and cpu >= 0.3 and seconds > 0
