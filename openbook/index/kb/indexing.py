"""The dense index of a knowledge base: creating it over the embeddings (trained on a sample), loading it
as the manifest records it, and searching it while excluding rows invisible at a version."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from openbook.errors import InputError, KnowledgeBaseError
from openbook.index.dense import INDEX_TYPES, DenseIndex, default_nlist, index_class
from openbook.index.kb.layout import (
    ADD_CHUNK_ROWS,
    EMBEDDINGS_FILE,
    MANIFEST_FILE,
    PHI_HEADROOM,
    REBUILD_HINT,
    TRAIN_SAMPLE_ROWS,
)
from openbook.index.store import map_embeddings, read_npy_header
from openbook.index.topk import cut_is_open, top_k
from openbook.presets import AUTO_INDEX
from openbook.progress import progress_bar

# ---------------------------------------------------------------------------------------------------
# indexes


def parse_index_params(pairs: Iterable[str]) -> dict[str, Any]:
    """``["M=32", "opq=true"]`` -> ``{"M": 32, "opq": True}`` (ints, floats, true/false/none, else text)."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"index parameter {pair!r} must look like KEY=VALUE")
        value = _parse_value(text.strip())
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"index parameter {key.strip()} must be a finite number, got {text.strip()!r}")
        params[key.strip()] = value
    return params


def _parse_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# The index ``kb build`` chooses without ``--index`` (AUTO_INDEX): exact Flat search while one question's search reads at
# most FLAT_MAX_COMPONENTS vector components (rows x dim), HNSW beyond. A Flat search reads every component, so its
# time grows with rows x dim; the bound is where one question's Flat search passes a tenth of a second (a tenth of an
# interactive answer's budget) at the pace measured over the 2015 Wikipedia book's real vectors: 111 ms for 666,158 x
# 384 components, 0.44 ns each (bench/index_scale.py --kb, docs/benchmarks.md "Index kinds on the 2015 Wikipedia
# book"), so about 585,000 passages of MiniLM's 384 dimensions or 293,000 of DPR's 768. Beyond it HNSW with its
# defaults (M 32, ef_construction 200, ef_search 128) found 0.978 of Flat's top 10 for the book's held-out NQ
# questions (at least 0.95 asked), 118 times faster, for 7 minutes more of building.
FLAT_MAX_COMPONENTS = 225_000_000
AUTO_LARGE_INDEX = "hnsw"
AUTO_LARGE_PARAMS: dict[str, Any] = {}


def check_index_type(type_name: str, params: dict[str, Any] | None = None) -> str:
    """The index type a build records: a registered kind's own name, or ``"auto"`` (which takes no parameters:
    they belong to a kind, so naming them without naming the kind is an InputError)."""
    if type_name == AUTO_INDEX:
        if params:
            names = ", ".join(sorted(params))
            raise InputError(f"index parameters ({names}) need an index type: name one with --index "
                             f"({', '.join(sorted(INDEX_TYPES))})")
        return AUTO_INDEX
    return index_class(type_name).type_name


def resolve_index(type_name: str, params: dict[str, Any], rows: int, dim: int) -> tuple[type[DenseIndex], dict[str, Any]]:
    """The index kind and parameters to build for ``rows`` vectors of ``dim``: ``type_name``'s own, or for
    ``"auto"`` Flat up to :data:`FLAT_MAX_COMPONENTS` components and :data:`AUTO_LARGE_INDEX` beyond."""
    if type_name != AUTO_INDEX:
        return index_class(type_name), params
    if rows * dim <= FLAT_MAX_COMPONENTS:
        return index_class("flat"), {}
    return index_class(AUTO_LARGE_INDEX), dict(AUTO_LARGE_PARAMS)


def _check_index_params(params: dict[str, Any] | None) -> dict[str, Any]:
    params = dict(params or {})
    try:
        json.dumps(params)
    except (TypeError, ValueError) as exc:
        raise InputError(f"index parameters must be JSON-serialisable: {exc}") from None
    return params


def _create_index(
    kind: type[DenseIndex], params: dict[str, Any], embeddings: np.ndarray, progress: bool
) -> DenseIndex:
    """A new index of ``kind`` over all rows of ``embeddings`` (read in chunks, trained on a sample)."""
    params = dict(params)
    defaults = getattr(kind, "param_defaults", {})
    if "phi" in defaults and params.get("phi") is None:
        # HNSW kinds need a bound on |x|^2 before the first add; leave room for later edits.
        params["phi"] = float(_max_squared_norm(embeddings)) * PHI_HEADROOM or 1.0
    if "nlist" in defaults and params.get("nlist") is None:
        # IVF kinds: size the lists for all rows, not for the training sample below
        params["nlist"] = default_nlist(len(embeddings))
    index = kind.create(embeddings.shape[1], **params)
    if getattr(index, "needs_training", False):
        limit = int(getattr(kind, "max_train_vectors", TRAIN_SAMPLE_ROWS))
        n = len(embeddings)
        rows = np.unique(np.linspace(0, n - 1, num=min(n, limit)).astype(np.int64))
        index.train(np.asarray(embeddings[rows], dtype=np.float32))
    with progress_bar(total=len(embeddings), unit="vector", desc="indexing", enabled=progress) as bar:
        for start in range(0, len(embeddings), ADD_CHUNK_ROWS):
            chunk = np.asarray(embeddings[start:start + ADD_CHUNK_ROWS], dtype=np.float32)
            index.add(chunk)
            bar.update(len(chunk))
    return index


def _max_squared_norm(embeddings: np.ndarray) -> float:
    best = 0.0
    for start in range(0, len(embeddings), ADD_CHUNK_ROWS):
        chunk = np.asarray(embeddings[start:start + ADD_CHUNK_ROWS], dtype=np.float64)
        if len(chunk):
            best = max(best, float(np.einsum("ij,ij->i", chunk, chunk).max()))
    return best


def _index_record(index: DenseIndex, params: dict[str, Any], file_name: str) -> dict[str, Any]:
    recorded = getattr(index, "params", None)
    return {"type": index.type_name, "params": _check_index_params(recorded if recorded is not None else params),
            "file": file_name}


def _search_excluding(index: DenseIndex, queries, k: int, exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-k search that never returns ``exclude`` and (where the index finds enough) no -1 entries; of rows
    tied at the k-th place the lowest are kept (:mod:`openbook.index.topk`), so it asks for one result more
    and, while the last one found still ties with the k-th, for more."""
    want = min(k + 1, index.ntotal)
    while True:
        scores, ids = index.search(queries, want, exclude=exclude if exclude.size else None)
        found = (ids[:, :k] >= 0).all() if ids.shape[1] >= k else False
        if (found and not cut_is_open(scores, ids, k)) or want >= index.ntotal:
            break
        want = min(index.ntotal, want * 4)  # too few found (an approximate search) or ties past the last
    valid = (ids >= 0).sum(axis=1)
    if ids.shape[1] < k or (valid < k).any():
        usable = int(valid.min())
        if usable == 0:
            raise KnowledgeBaseError(f"the {index.type_name} index found no passages for a query")
        warnings.warn(f"the {index.type_name} index found only {usable} of the {k} passages asked for", stacklevel=3)
        k = usable
    return top_k(scores, ids, k)


def _load_embeddings(path: Path, manifest: dict[str, Any]) -> np.ndarray:
    """Memory-map embeddings.npy read-only, checking its header against the manifest."""
    file_path = path / EMBEDDINGS_FILE
    dtype, rows, dim = read_npy_header(file_path)
    count, expected_dim = manifest["num_rows"], manifest["dim"]
    if dtype.name != manifest["dtype"] or dim != expected_dim or rows < count:
        raise KnowledgeBaseError(
            f"{file_path} holds {dtype.name} ({rows}, {dim}) but {MANIFEST_FILE} records {manifest['dtype']} "
            f"({count}, {expected_dim}); {REBUILD_HINT}"
        )
    return map_embeddings(file_path, dtype, count, dim)


def _load_index(path: Path, manifest: dict[str, Any], mmap: bool) -> DenseIndex:
    """Read the index and check it matches the manifest's type, size and dimension."""
    file_path = path / manifest["index"]["file"]
    try:
        expected = index_class(manifest["index"]["type"])
        index = DenseIndex.load(file_path, mmap=mmap)
    except InputError as exc:
        raise KnowledgeBaseError(f"knowledge base {path}: {exc}; {REBUILD_HINT}") from None
    if not isinstance(index, expected) or index.ntotal != manifest["num_rows"] or index.dim != manifest["dim"]:
        raise KnowledgeBaseError(
            f"{file_path} holds a {index.type_name} index of {index.ntotal} vectors of dimension {index.dim} but "
            f"{MANIFEST_FILE} records {manifest['index']['type']} with {manifest['num_rows']} of dimension "
            f"{manifest['dim']}; {REBUILD_HINT}"
        )
    return index


