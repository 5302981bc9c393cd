"""bench/ingest.py in a tiny mode: a corpus of a few files of every format, read and built with a tiny encoder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_scripts import bench_modules
from tiny_encoders import save_sentence_transformers

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench():
    with bench_modules("ingest") as module:
        yield module


def test_the_corpus_is_seeded_and_every_file_is_read(bench, tmp_path):
    words = bench.make_corpus(tmp_path / "a", 14, seed=3)
    bench.make_corpus(tmp_path / "b", 14, seed=3)
    assert set(words) == set(bench.FORMATS) and all(w >= 2 * bench.MIN_WORDS * 0.9 for w in words.values())
    for kind in bench.FORMATS:
        files = sorted((tmp_path / "a" / kind).iterdir())
        assert len(files) == 2 and all(f.suffix == bench.SUFFIX[kind] for f in files)
        read, passages, _, skipped = bench.read_folder(tmp_path / "a" / kind, 100)
        assert read == 2 and not skipped and passages >= 2 * bench.MIN_WORDS // 100
        again = bench.read_folder(tmp_path / "b" / kind, 100)
        assert again[:2] == (read, passages)  # the same seed, the same corpus


def test_tiny_run_ends_with_the_json_line(bench, tmp_path, capsys):
    encoder = save_sentence_transformers(tmp_path / "encoder")
    result = bench.main(["--files", "14", "--encoder", str(encoder), "--keep", str(tmp_path / "work")])
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line == json.loads(json.dumps(result))
    assert set(line["formats"]) == set(bench.FORMATS)
    assert all(f["files"] == 2 and f["passages"] > 0 for f in line["formats"].values())
    assert line["reading"]["files"] == 14
    assert line["reading"]["passages"] == sum(f["passages"] for f in line["formats"].values())
    build = line["build"]
    assert build["passages"] == line["reading"]["passages"]  # the build read the same passages
    parts = ("reading", "encoding", "indexing", "other")
    assert all(build[f"{p}_s"] >= 0 for p in parts)
    # each part and the build's seconds are rounded to the millisecond
    assert sum(build[f"{p}_s"] for p in parts) == pytest.approx(build["seconds"], abs=0.0025)
    assert line["cpu"] and line["files"] == 14
