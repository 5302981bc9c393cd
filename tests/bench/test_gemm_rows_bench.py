"""bench/gemm_rows.py: its rate and its JSON line (small shapes, one round: a check of the script, not a figure)."""

from __future__ import annotations

import json
import sys

import pytest

from bench_scripts import bench_modules


@pytest.fixture(scope="module")
def gemm():
    with bench_modules("gemm_rows") as modules:
        yield modules


def test_the_json_line_has_every_shape_and_the_ratio(gemm, capsys, monkeypatch):
    monkeypatch.setattr(gemm, "SHAPES", {"tiny": (16, 8)})
    monkeypatch.setattr(sys, "argv", ["gemm_rows.py", "--rows", "8,256", "--rounds", "1", "--dtype", "float32"])
    gemm.main()
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["dtype"] == "float32" and set(line["gflops"]["tiny"]) == {"8", "256"}
    assert all(g > 0 for g in line["gflops"]["tiny"].values())
    assert line["ratio_256_vs_256"]["tiny"] == 1.0


@pytest.mark.parametrize("argv", [["--rows", "8,x"], ["--rows", "8,16"], ["--rounds", "0"]])
def test_bad_options_are_refused(gemm, monkeypatch, argv):
    monkeypatch.setattr(sys, "argv", ["gemm_rows.py", *argv])
    with pytest.raises(SystemExit):
        gemm.main()
