"""The helpers of bench/decoding_ab.py (the benchmark itself is run by hand: it loads the real models)."""

from __future__ import annotations

import pytest
import torch

from bench_scripts import bench_modules


@pytest.fixture(scope="module")
def bench():
    with bench_modules("decoding_ab") as module:
        yield module


def test_the_variants_add_one_change_at_a_time(bench):
    from openbook.rag import decoding

    table = bench.variants(decoding)
    assert tuple(table) == bench.NAMES == ("before", "one_or_all", "now", "fast")
    assert [mode for mode, _, _ in table.values()] == ["lazy", "lazy", "lazy", "fast"]
    (_, old, off), (_, new, off2), (_, new2, prune), (_, new3, prune2) = table.values()
    assert old is decoding._first_reads and new is new2 is new3 is decoding._first_stage
    assert off is off2 and off() is None and prune is prune2 is decoding._fast_pruner
    flat = torch.tensor([[0.3, 0.25, 0.2, 0.15, 0.1]]).log()  # a large book's p(z|x): no document past half
    peaked = torch.tensor([[0.1, 0.7, 0.1, 0.05, 0.05]]).log()
    assert old(flat).sum().item() == 2 and new(flat).sum().item() == 5
    assert old(peaked).tolist() == new(peaked).tolist() == [[False, True, False, False, False]]


def test_summary_and_ratio(bench):
    assert bench.summary([1.0, 3.0, 2.0], [1, 5, 5]) == {"p50_s": 2.0, "mean_s": 2.0, "mean_docs_read": 3.67}
    assert bench.ratio({"a": [2.0, 4.0, 3.0], "b": [1.0, 2.0]}, "a", "b") == 2.0
