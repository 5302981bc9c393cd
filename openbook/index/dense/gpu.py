"""FAISS on the GPUs, when ``faiss-gpu`` is installed: never required.

:func:`on_gpus` copies an index to every visible GPU (``faiss.index_cpu_to_all_gpus``) for searching; with
the CPU-only ``faiss-cpu`` package, no GPU, or a kind FAISS cannot move (HNSW graphs), it returns None and
the index is searched on the host as always. The index itself (and the knowledge base's vectors) stays on
the host: the GPU copy is a cache, dropped when vectors are added.
"""

from __future__ import annotations

import logging

import faiss

logger = logging.getLogger(__name__)


def gpu_count() -> int:
    """GPUs FAISS can use: 0 with faiss-cpu (which has no ``get_num_gpus``) or without a GPU."""
    return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0


def on_gpus(faiss_index):
    """A copy of ``faiss_index`` searched on all GPUs, or None where there are none or FAISS cannot move it."""
    if gpu_count() == 0 or not hasattr(faiss, "index_cpu_to_all_gpus"):
        return None
    try:
        return faiss.index_cpu_to_all_gpus(faiss_index)
    except (RuntimeError, AttributeError, TypeError) as exc:  # an index kind with no GPU version
        logger.debug("searching %s on the host: %s", type(faiss_index).__name__, exc)
        return None
