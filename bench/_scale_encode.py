"""bench/scale_out.py part (a): passage-encoding throughput of ``kb build --ray`` with 1 vs 2 Ray workers.

The real document encoder (the packaged all-MiniLM-L6-v2), the shipped demo passages, encoded the way
``openbook kb build --ray`` encodes a batch (:class:`openbook.index.kb.ray_encode.RayEncodePassages`: a
Ray actor pool, one encoder per actor, 1 CPU each). Each timing covers one batch of all the
passages, actor start-up included (a build pays it once, at its first batch); the two pool sizes alternate over
the repeats so machine load hits both. Uses the Ray already initialised in this process, else starts a
local one (2 CPUs, 256 MB object store) and shuts it down after.

    .venv/bin/python bench/_scale_encode.py [--quick]

Ends with one JSON line: ``ray_encode_pps_1``, ``ray_encode_pps_2``, ``ray_encode_speedup_2v1``.

``--kinds`` instead times, with 2 workers, two ``kb build --ray`` batches (``RAY_BATCH`` passages each;
``--passages``) in each of float32, int8 and int8 compiled (``--encode-dtype int8 --compile``): the first batch
starts the actors (a compiled kind compiles in each), the second reuses them, as every later batch of a build
does. It ends with one JSON line: ``ray_<kind>_pps_first``, ``ray_<kind>_pps_next`` and
``ray_int8_compiled_vs_int8_first`` / ``_next``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
import sys
import time


def time_pools(batches: list[list], pools: dict, repeats: int) -> dict:
    """Median seconds of each of ``batches``, encoded in turn by one :class:`RayEncodePassages` per pool and repeat
    (``pools``: name -> (make_encode, workers)), as a build encodes its batches: the first batch pays the actors'
    start-up (and a compiled kind's compile), the later ones reuse them. The pools alternate in order over
    ``repeats``. Uses the Ray already initialised in this process, else starts a local one and shuts it down after.
    Returns name -> [median seconds of batch 1, of batch 2, ...]."""
    import ray

    from openbook.index.kb.ray_encode import RayEncodePassages

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, object_store_memory=256 * 1024**2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    seconds: dict = {name: [[] for _ in batches] for name in pools}
    try:
        for repeat in range(repeats):
            for name in (list(pools) if repeat % 2 == 0 else list(reversed(pools))):
                with RayEncodePassages(pools[name][0], workers=pools[name][1]) as encode:
                    for i, batch in enumerate(batches):
                        start = time.perf_counter()
                        encode(batch)
                        seconds[name][i].append(time.perf_counter() - start)
    finally:
        if started:
            ray.shutdown()
    return {name: [statistics.median(times) for times in per_batch] for name, per_batch in seconds.items()}


def measure(quick: bool = False) -> dict:
    from openbook.commands.kb_encode import load_encode_passages
    from openbook.corpus import read_passages
    from openbook.data import demo_passages_path

    n, repeats = (200, 1) if quick else (2000, 2)
    passages = list(itertools.islice(read_passages(demo_passages_path()), n))
    make_encode = functools.partial(load_encode_passages, "minilm")
    seconds = time_pools([passages], {1: (make_encode, 1), 2: (make_encode, 2)}, repeats)
    pps = {workers: len(passages) / medians[0] for workers, medians in seconds.items()}
    return {
        "ray_encode_passages": len(passages),
        "ray_encode_pps_1": round(pps[1], 1),
        "ray_encode_pps_2": round(pps[2], 1),
        "ray_encode_speedup_2v1": round(pps[2] / pps[1], 3),
    }


KINDS = {"float32": ("float32", False), "int8": ("int8", False), "int8_compiled": ("int8", True)}


def measure_kinds(n: int) -> dict:
    """Passages per second of two ``--ray`` batches of ``n`` passages on 2 workers, per kind: the first batch with
    the actors' start-up (and, compiled, each actor's compile), the second on the same actors; the kinds
    alternating over two rounds."""
    from openbook.commands.kb_encode import load_encode_passages
    from openbook.corpus import read_passages
    from openbook.data import demo_passages_path

    passages = list(itertools.islice(itertools.cycle(read_passages(demo_passages_path())), 2 * n))
    pools = {kind: (functools.partial(load_encode_passages, "minilm", *KINDS[kind]), 2) for kind in KINDS}
    seconds = time_pools([passages[:n], passages[n:]], pools, 2)
    first = {kind: n / medians[0] for kind, medians in seconds.items()}
    later = {kind: n / medians[1] for kind, medians in seconds.items()}
    return {"ray_batch_passages": n, "workers": 2,
            **{f"ray_{kind}_pps_first": round(rate, 1) for kind, rate in first.items()},
            **{f"ray_{kind}_pps_next": round(rate, 1) for kind, rate in later.items()},
            "ray_int8_compiled_vs_int8_first": round(first["int8_compiled"] / first["int8"], 3),
            "ray_int8_compiled_vs_int8_next": round(later["int8_compiled"] / later["int8"], 3)}


def main() -> None:
    from openbook.commands.kb_encode import RAY_BATCH

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few hundred passages, one round")
    parser.add_argument("--kinds", action="store_true", help="float32, int8 and int8 compiled on 2 workers instead")
    parser.add_argument("--passages", type=int, default=RAY_BATCH, help="--kinds: passages in each batch")
    args = parser.parse_args()
    print("command:", " ".join(["python", *sys.argv]), flush=True)
    print(json.dumps(measure_kinds(args.passages) if args.kinds else measure(quick=args.quick)))


if __name__ == "__main__":
    main()
