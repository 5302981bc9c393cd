"""bench/scale_out.py runs each scale-out part's measure() in turn and ends with one JSON line of them all."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "scale_out.py"


def load():
    spec = importlib.util.spec_from_file_location("scale_out", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_part_has_a_measure_function():
    bench = load()
    for name in bench.PARTS:
        assert callable(bench.load_part(name).measure), name


def test_the_last_line_holds_every_parts_figures(monkeypatch, capsys):
    bench = load()
    figures = {"_scale_encode": {"ray_encode_speedup_2v1": 1.5}, "_scale_shard": {"sharded_topk_exact": True},
               "_scale_ddp": {"ddp_params_equal": True, "ddp_speedup_2v1": 1.1}}

    class Part:
        def __init__(self, name):
            self.name = name

        def measure(self, quick=False):
            assert quick
            return figures[self.name]

    monkeypatch.setattr(bench, "load_part", Part)
    bench.main(["--quick"])
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for part in figures.values():
        assert part.items() <= line.items()


def test_unknown_part_is_a_usage_error():
    with pytest.raises(SystemExit):
        load().main(["--parts", "_scale_nothing"])
