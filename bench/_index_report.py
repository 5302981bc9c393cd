"""The figures bench/index_scale.py derives from its measurements: whether the targets are met (HNSW recall@10
and speed-up over flat, IVF-PQ size and recall), and the disk and memory each index kind would take for the RAG
paper's Wikipedia (the per-vector bytes measured, the fixed parts computed for that size)."""

from __future__ import annotations

from openbook.index.dense import default_nlist

PAPER_PASSAGES = 21_015_300
K = 10  # results per query: recall@10


# -- projection to the paper's 21M passages -------------------------------------------------------


def padded_dim(dim: int, multiple: int) -> int:
    """Stored dimension of hnsw_sq8 / ivfpq: dim + 1 transformed coordinates + padding (see dense/via_l2.py)."""
    return -(-(dim + 2) // multiple) * multiple


def fixed_bytes(kind: str, dim: int, params: dict, nlist: int | None = None) -> int:
    """Bytes of an index that do not grow with N: the padding transform; for IVF-PQ also the coarse
    centroids, PQ codebooks, OPQ matrix and list headers."""
    if kind == "hnsw_sq8":
        stored = padded_dim(dim, 8)
        return stored * (dim + 2) * 4
    if kind != "ivfpq":
        return 0
    stored = padded_dim(dim, params["m"])
    nlist = nlist or params["nlist"]
    fixed = stored * (dim + 2) * 4 + nlist * stored * 4 + 2 ** params["nbits"] * stored * 4 + nlist * 8
    if params["opq"]:
        fixed += stored * stored * 4
    return fixed


def ivfpq_table_bytes(params: dict, nlist: int) -> int:
    """FAISS's precomputed IVF-PQ distance table (RAM only; built at load if under 2 GB)."""
    size = nlist * params["m"] * 2 ** params["nbits"] * 4
    return size if size <= 2 * 1024**3 else 0


def projection(rows: list[dict], n: int, dim: int) -> list[dict]:
    """Disk and RAM of each kind for PAPER_PASSAGES vectors, scaling the measured per-vector part."""
    out = []
    big_nlist = default_nlist(PAPER_PASSAGES)
    for row in rows:
        kind, params = row["kind"], row["params"]
        per_vector = (row["file_bytes"] - fixed_bytes(kind, dim, params)) / n
        fixed = fixed_bytes(kind, dim, params, big_nlist)
        disk = per_vector * PAPER_PASSAGES + fixed
        ram = disk
        if kind == "ivfpq":
            code = (params["m"] * params["nbits"] + 7) // 8
            table = ivfpq_table_bytes(params, big_nlist)
            ram += table
            note = (
                f"{code} B PQ code + 8 B id per vector; {fixed / 1e6:.0f} MB centroids, codebooks, transforms "
                f"at nlist={big_nlist}; RAM adds {table / 1e9:.1f} GB precomputed table"
            )
        elif kind in ("hnsw", "hnsw_sq8"):
            stored = dim + 1 if kind == "hnsw" else padded_dim(dim, 8)
            vector_bytes = stored * (4 if kind == "hnsw" else 1)
            note = f"{vector_bytes} B vector + {per_vector - vector_bytes:.0f} B graph (links, levels, offsets) per vector"
        else:
            note = f"{dim * 4} B vector per passage"
        out.append({"kind": kind, "bytes_per_vector": per_vector, "disk_bytes": disk, "ram_bytes": ram, "note": note})
    return out


def markdown_table(projected: list[dict], dim: int) -> str:
    lines = [
        f"| index (dim {dim}) | bytes/vector | disk for {PAPER_PASSAGES:,} | RAM for {PAPER_PASSAGES:,} (mmap=False) | composition |",
        "|---|---:|---:|---:|---|",
    ]
    for item in projected:
        lines.append(
            f"| {item['kind']} | {item['bytes_per_vector']:.1f} | {item['disk_bytes'] / 1e9:.1f} GB | "
            f"{item['ram_bytes'] / 1e9:.1f} GB | {item['note']} |"
        )
    embeddings = PAPER_PASSAGES * dim * 4 / 1e9
    lines.append(
        f"| (embeddings.npy, kept beside any index by the knowledge base) | {dim * 4} | {embeddings:.1f} GB | "
        "memory-mapped | float32 d(z) |"
    )
    lines.append(
        "\nRAM is for loading the index with mmap=False (≈ its file). With mmap=True the file is mapped and "
        "the OS pages in what queries touch; building needs the vectors being added in RAM as well."
    )
    return "\n".join(lines)


# -- targets --------------------------------------------------------------------------------------

HNSW_TARGET = {"recall_at_10": 0.95, "speedup_vs_flat": 10.0}
IVFPQ_TARGET = {"recall_at_10": 0.80, "bytes_per_vector": 100.0}


def check_targets(by_kind: dict[str, dict]) -> dict:
    """Whether the defaults meet the targets, and else the cheapest swept setting that does."""
    flat, out, lines = by_kind["flat"], {}, []
    if "hnsw" in by_kind:
        row = by_kind["hnsw"]
        speedup = flat["latency_b1_ms"] / row["latency_b1_ms"]
        met = row["recall_at_10"] >= HNSW_TARGET["recall_at_10"] and speedup >= HNSW_TARGET["speedup_vs_flat"]
        out["hnsw_target_met"] = met
        lines.append(f"HNSW recall@10 >= 0.95 with >= 10x lower batch-1 latency than flat, as configured: "
                     f"{'met' if met else 'NOT met'} (recall {row['recall_at_10']:.4f}, {speedup:.0f}x)")
        for point in row.get("sweep", []):
            point_speedup = flat["latency_b1_ms"] / point["latency_b1_ms"]
            if point["recall_at_10"] >= HNSW_TARGET["recall_at_10"] and point_speedup >= HNSW_TARGET["speedup_vs_flat"]:
                out["hnsw_tuned"] = {**point, "speedup_vs_flat": round(point_speedup, 1)}
                lines.append(f"  smallest swept ef_search meeting it: {point['ef_search']} (recall "
                             f"{point['recall_at_10']:.4f}, {point['latency_b1_ms']:.3f} ms, {point_speedup:.0f}x)")
                break
    if "ivfpq" in by_kind:
        row = by_kind["ivfpq"]
        small = row["bytes_per_vector"] <= IVFPQ_TARGET["bytes_per_vector"]
        met = small and row["recall_at_10"] >= IVFPQ_TARGET["recall_at_10"]
        out["ivfpq_target_met"] = met
        lines.append(f"IVF-PQ <= 100 bytes/vector with recall@10 >= 0.80, index alone (PQ scores): {'met' if met else 'NOT met'} "
                     f"({row['bytes_per_vector']:.1f} bytes/vector, recall {row['recall_at_10']:.4f}; best swept nprobe: "
                     f"{max((p['recall_at_10'] for p in row.get('sweep', [])), default=row['recall_at_10']):.4f})")
        if "rerank" in row:
            reranked = small and row["rerank"]["recall_at_10"] >= IVFPQ_TARGET["recall_at_10"]
            out["ivfpq_rerank_target_met"] = reranked
            lines.append(f"  with exact re-ranking of the top {row['rerank']['factor'] * K} from the float vectors "
                         f"(the knowledge base's embeddings.npy; no index bytes): {'met' if reranked else 'NOT met'} "
                         f"(recall {row['rerank']['recall_at_10']:.4f}, {row['rerank']['latency_b1_ms']:.3f} ms)")
    if lines:
        out["lines"] = lines
    return out
