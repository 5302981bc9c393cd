"""bench/filter_latency.py on a tiny book: times each default filter, first and cached, beside the unfiltered
search, and ends with one JSON line (a check of the script, not a figure)."""

from __future__ import annotations

import json

import pytest

from bench_scripts import bench_modules
from tiny_kb import build_corpus_book


@pytest.fixture(scope="module")
def bench():
    with bench_modules("filter_latency") as module:
        yield module


def test_times_the_book_s_own_filters(bench, tmp_path, capsys, encoders, monkeypatch):
    kb = build_corpus_book(capsys, tmp_path, 40)
    import openbook.commands.kb as kb_commands
    import openbook.models.loading as loading

    monkeypatch.setattr(loading, "load_encoder", kb_commands.load_encoder)  # the tests' bag-of-words encoder
    capsys.readouterr()
    bench.main(["--kb", str(kb), "--repeats", "1", "--k", "3"])
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["passages"] == 40 and figures["k"] == 3 and figures["no_filter_ms"] > 0
    filters = {" ".join(row["filter"]): row for row in figures["filters"]}
    assert [name.split("=")[0] for name in filters] == ["source", "source^", "modified>"]
    assert all(row["matching"] == 40 and row["first_ms"] > 0 for row in filters.values())  # one file: every passage
    bench.main(["--kb", str(kb), "--repeats", "1", "--where", "source=nothing-here"])
    none = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["filters"]
    assert none[0]["matching"] == 0
