"""The pieces of bench/train_heap.py (the benchmark itself is run by hand: it trains over a real book)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench_scripts import bench_modules


@pytest.fixture(scope="module")
def bench():
    with bench_modules("train_heap") as module:
        yield module


def test_each_variant_sets_its_threshold(bench):
    assert bench.threshold_bytes("glibc", 1.0) is None and bench.threshold_bytes("trim", 1.0) is None
    assert bench.threshold_bytes("mmap", 1.0) == 1 << 20
    assert bench.threshold_bytes("mmap", 0.5) == 1 << 19
    assert bench.threshold_bytes("mmap4", 1.0) == 4 << 20
    for name in ("mmapx", "heap", ""):
        with pytest.raises(ValueError, match="unknown variant"):
            bench.threshold_bytes(name, 1.0)


def test_the_training_command_is_one_openbook_train_accepts(bench):
    from argparse import Namespace

    from openbook.cli import build_parser

    command = bench.train_command(Namespace(train="train.jsonl", steps=3, kb="KB"), "OUT")
    args = build_parser().parse_args(command)
    assert (args.command, args.max_steps, args.kb, args.out, args.freeze_retriever) == ("train", 3, "KB", "OUT", True)


def test_the_wrapper_patches_what_train_calls_and_reports_at_exit(bench, tmp_path):
    """A run that stops at its input still writes the report: the wrapper's imports and patches hold."""
    wrapper, report = tmp_path / "wrapper.py", tmp_path / "report.json"
    wrapper.write_text(bench._WRAPPER)
    missing = tmp_path / "missing.jsonl"
    done = subprocess.run([sys.executable, str(wrapper), "mmap", str(1 << 20), str(report),
                           "train", "--train", str(missing), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "missing.jsonl" in done.stderr
    figures = json.loads(report.read_text())
    assert figures["steps"] == [] and figures["losses"] == [] and figures["peak_rss_kb"] > 0


def test_summary_medians_ratios_and_losses(bench):
    def run(step, rss, losses=(1.0, 2.0)):
        return {"median_step_s": step, "user_s": 10.0, "sys_s": 1.0, "peak_rss_kb": rss, "losses": list(losses)}

    figures = bench.summarise({"glibc": [run(2.0, 100), run(4.0, 300)], "mmap": [run(3.0, 50), run(3.6, 70)]})
    assert figures["variants"]["glibc"]["median_step_s"] == 3.0 and figures["variants"]["mmap"]["peak_rss_kb"] == 60
    assert figures["mmap_vs_glibc_step"] == 1.1 and figures["same_losses"] is True
    assert bench.summarise({"glibc": [run(1.0, 1)], "trim": [run(1.0, 1, (1.0, 2.5))]})["same_losses"] is False
