"""bench/serve_ray_load.py: its schedule, its JSON line and its refusals (no servers: a check of the script, not a
figure)."""

from __future__ import annotations

import pytest

from bench_scripts import bench_modules


@pytest.fixture(scope="module")
def bench():
    with bench_modules("serve_ray_load") as modules:
        yield modules


def test_rounds_alternate_the_two_servers(bench):
    assert bench.schedule(3) == [("single", "ray"), ("ray", "single"), ("single", "ray")]


def test_the_json_line_pools_and_compares_the_servers(bench):
    levels = {"single": {"qps": 2.0, "errors": 0, "rounds_qps": [2.0, 2.0]},
              "ray": {"qps": 2.5, "errors": 1, "rounds_qps": [2.4, 2.6]}}
    line = bench.result_line(levels, 2, extra={"settings": {}})
    assert (line["qps_single"], line["qps_ray"], line["ray_vs_single"]) == (2.0, 2.5, 1.25)
    assert line["per_round"] == [1.2, 1.3] and line["errors"] == 1 and line["replicas"] == 2
    assert line["levels"] is levels and line["settings"] == {}


@pytest.mark.parametrize("argv", [["--replicas", "0"], ["--seconds", "0"], ["--rounds", "-1"], ["--replicas", "999"]])
def test_bad_options_are_refused(bench, argv):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
