"""bench/shard_plan.py on a tiny book: splits it into 1, 2 and 3 Ray shards, measures them and prints a plan for
the paper's 21M passages ending in one JSON line (a check of the script, not a figure); bad input is one line."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from bench_scripts import bench_modules
from ray_fixture import ray_local  # noqa: F401
from tiny_kb import build_corpus_book

QUESTIONS = ["capital of france", "paris king", "moon orbit earth", "largest planet jupiter", "river lake ocean",
             "music and poem", "war and peace", "sun star light", "water carbon sugar", "novel and queen"]


@pytest.fixture(scope="module")
def bench():
    with bench_modules("shard_plan") as module:
        yield module


@pytest.fixture
def book(tmp_path, capsys, encoders):
    """A 90-passage knowledge base built by `openbook kb build`, and a data folder of NQ-open records."""
    kb = build_corpus_book(capsys, tmp_path, 90)
    data = tmp_path / "data"
    data.mkdir()
    with gzip.open(data / "nq-open-oracle.dev-split.jsonl.gz", "wt", encoding="utf-8") as fh:
        for i in range(5 * len(QUESTIONS)):  # the held-out fifth is every fifth: QUESTIONS
            fh.write(json.dumps({"question": QUESTIONS[i // 5] if i % 5 == 0 else f"training {i}", "answers": ["x"]})
                     + "\n")
    return kb, data


def test_measures_every_split_and_plans_from_it(bench, book, capsys, ray_local):  # noqa: F811
    kb, data = book
    bench.main(["--kb", str(kb), "--data", str(data), "--build-rate", "50", "--worker-memory-gb", "4",
                "--build-workers", "10"])
    out = capsys.readouterr().out
    assert "cpu:" in out and "exact top k on every split: True" in out
    line = json.loads(out.strip().splitlines()[-1])
    assert (line["rows"], line["questions"], line["exact"], line["build_rate_from"]) == (90, 10, True, "--build-rate")
    assert line["shard_rows"] == {"1": [90], "2": [45, 45], "3": [30, 30, 30]}
    for s in ("1", "2", "3"):
        assert set(line["ray_ms"][s]) == {"k5_b1", "k5_b32", "k100_b1", "k100_b32"}
        assert all(rss > index for rss, index in zip(line["shard_rss_bytes"][s], line["shard_index_bytes"][s]))
    plan = line["plan"]
    assert plan["passages"] == 21_015_324 and plan["bytes_per_passage"] == line["index_bytes"] / 90
    room = 4e9 - plan["overhead_bytes"]
    assert plan["shards"] == plan["workers"] == math.ceil(21_015_324 / math.floor(room / plan["bytes_per_passage"]))
    assert plan["rows_per_shard"] * plan["bytes_per_passage"] + plan["overhead_bytes"] <= 4e9
    assert plan["build_hours"] == pytest.approx(21_015_324 / (50 * 10) / 3600, abs=0.01)
    assert all(ms > 0 for ms in plan["latency_ms"].values()) and "latency k5_b1 = a + b x rows" in out


def test_the_build_rate_comes_from_the_build_record(bench):
    seconds = {"encode": 4.0, "store": 1.0, "index": 0.5, "encode_rows_timed": 100, "encode_passages_per_s": 25.0}
    assert bench.build_rate({"num_rows": 100, "build": {"seconds": seconds}}) == 25.0
    assert bench.build_rate({"num_rows": 100, "build": {"batch_size": 256}}) is None


def test_bad_input_is_one_line(bench, book, capsys, tmp_path, monkeypatch):
    kb, data = book

    def error(*argv) -> str:
        with pytest.raises(SystemExit) as stop:
            bench.main(list(argv))
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err
        return err.splitlines()[-1]

    with monkeypatch.context() as patch:  # a book built before kb build recorded its stages
        patch.setattr(bench, "build_rate", lambda manifest: None)
        assert "holds no build rate; give --build-rate" in error("--kb", str(kb), "--data", str(data))
    assert "holds no nq-open-oracle" in error("--kb", str(kb), "--data", str(tmp_path), "--build-rate", "5")
    assert error("--kb", str(tmp_path / "missing"), "--build-rate", "5").startswith(
        f"shard_plan.py: error: --kb {tmp_path / 'missing'}")
    assert "--build-rate" in error("--kb", str(kb), "--build-rate", "0")
