"""bench/scale_out.py part (a): passage-encoding throughput of ``kb build --ray`` with 1 vs 2 Ray workers.

The real document encoder (the packaged all-MiniLM-L6-v2), the shipped demo passages, encoded the way
``openbook kb build --ray`` encodes a batch (:class:`openbook.index.kb.ray_encode.RayEncodePassages`: a
Ray Data actor pool, one encoder per actor, 1 CPU each). Each timing covers one batch of all the
passages, actor start-up included (a build pays it once per batch); the two pool sizes alternate over
the repeats so machine load hits both. Uses the Ray already initialised in this process, else starts a
local one (2 CPUs, 256 MB object store) and shuts it down after.

    .venv/bin/python bench/_scale_encode.py [--quick]

Ends with one JSON line: ``ray_encode_pps_1``, ``ray_encode_pps_2``, ``ray_encode_speedup_2v1``.

``--kinds`` instead times, with 2 workers, one ``kb build --ray`` batch (``RAY_BATCH`` passages; ``--passages``)
in each of float32, int8 and int8 compiled (``--encode-dtype int8 --compile``): actors start anew for every
batch, so a compiled kind pays its compile in each actor at each batch, and this says whether it still gains.
It ends with one JSON line: ``ray_<kind>_pps`` and ``ray_int8_compiled_vs_int8``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
import sys
import time


def time_pools(passages: list, pools: dict, repeats: int) -> dict:
    """Median seconds of encoding ``passages`` in one batch with each of ``pools`` (name -> (make_encode,
    workers)), a fresh :class:`RayEncodePassages` each time, the pools alternating in order over ``repeats``.
    Uses the Ray already initialised in this process, else starts a local one and shuts it down after."""
    import ray

    from openbook.index.kb.ray_encode import RayEncodePassages

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, object_store_memory=256 * 1024**2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    seconds: dict = {name: [] for name in pools}
    try:
        for repeat in range(repeats):
            for name in (list(pools) if repeat % 2 == 0 else list(reversed(pools))):
                encode = RayEncodePassages(pools[name][0], workers=pools[name][1])
                start = time.perf_counter()
                encode(passages)
                seconds[name].append(time.perf_counter() - start)
    finally:
        if started:
            ray.shutdown()
    return {name: statistics.median(times) for name, times in seconds.items()}


def measure(quick: bool = False) -> dict:
    from openbook.commands.kb_encode import load_encode_passages
    from openbook.corpus import read_passages
    from openbook.data import demo_passages_path

    n, repeats = (200, 1) if quick else (2000, 2)
    passages = list(itertools.islice(read_passages(demo_passages_path()), n))
    make_encode = functools.partial(load_encode_passages, "minilm")
    seconds = time_pools(passages, {1: (make_encode, 1), 2: (make_encode, 2)}, repeats)
    pps = {workers: len(passages) / median for workers, median in seconds.items()}
    return {
        "ray_encode_passages": len(passages),
        "ray_encode_pps_1": round(pps[1], 1),
        "ray_encode_pps_2": round(pps[2], 1),
        "ray_encode_speedup_2v1": round(pps[2] / pps[1], 3),
    }


KINDS = {"float32": ("float32", False), "int8": ("int8", False), "int8_compiled": ("int8", True)}


def measure_kinds(n: int) -> dict:
    """Passages per second of one ``--ray`` batch of ``n`` passages on 2 workers, per kind (actor start-up and,
    compiled, each actor's compile included), the kinds alternating over two rounds."""
    from openbook.commands.kb_encode import load_encode_passages
    from openbook.corpus import read_passages
    from openbook.data import demo_passages_path

    passages = list(itertools.islice(itertools.cycle(read_passages(demo_passages_path())), n))
    pools = {kind: (functools.partial(load_encode_passages, "minilm", *KINDS[kind]), 2) for kind in KINDS}
    pps = {kind: n / median for kind, median in time_pools(passages, pools, 2).items()}
    return {"ray_batch_passages": n, "workers": 2, **{f"ray_{kind}_pps": round(rate, 1) for kind, rate in pps.items()},
            "ray_int8_compiled_vs_int8": round(pps["int8_compiled"] / pps["int8"], 3)}


def main() -> None:
    from openbook.commands.kb_encode import RAY_BATCH

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few hundred passages, one round")
    parser.add_argument("--kinds", action="store_true", help="float32, int8 and int8 compiled on 2 workers instead")
    parser.add_argument("--passages", type=int, default=RAY_BATCH, help="--kinds: passages in the batch")
    args = parser.parse_args()
    print("command:", " ".join(["python", *sys.argv]), flush=True)
    print(json.dumps(measure_kinds(args.passages) if args.kinds else measure(quick=args.quick)))


if __name__ == "__main__":
    main()
