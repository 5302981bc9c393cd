"""bench/encode_agreement.py's pieces: FAISS's flat-index order (ties by row) and top-5 agreement as a set and in
order (a check of the script, not a figure)."""

from __future__ import annotations

import numpy as np

from bench_scripts import bench_modules


def test_top5_orders_by_score_then_row_as_a_flat_index():
    with bench_modules("encode_agreement") as bench:
        vectors = np.eye(7, dtype=np.float32)
        vectors[5] = vectors[1]  # rows 1 and 5 tie for the query below: the lower row first
        query = np.array([[0.1, 0.9, 0.0, 0.5, 0.0, 0.0, 0.3]], dtype=np.float32)
        assert bench.top5(query, vectors).tolist() == [[1, 5, 3, 6, 0]]


def test_agreement_counts_sets_and_orders_apart():
    with bench_modules("encode_agreement") as bench:
        reference = np.array([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
        ours = np.array([[0, 1, 2, 3, 4], [6, 5, 7, 8, 9], [0, 1, 2, 3, 9], [1, 2, 3, 4, 5]])
        assert bench.agreement(ours, reference) == (0.75, 0.5)


def test_bf32_sets_onednn_bfloat16_products_only_within_its_block():
    import torch

    with bench_modules("encode_agreement") as bench:
        before = torch.backends.mkldnn.matmul.fp32_precision
        with bench.matmul_precision("bf16"):
            assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
        assert torch.backends.mkldnn.matmul.fp32_precision == before
        with bench.matmul_precision(None):  # the other kinds: PyTorch's own setting, untouched
            assert torch.backends.mkldnn.matmul.fp32_precision == before
