"""bench/scale_out.py part (a): passage-encoding throughput of ``kb build --ray`` with 1 vs 2 Ray workers.

The real document encoder (the packaged all-MiniLM-L6-v2), the shipped demo passages, encoded the way
``openbook kb build --ray`` encodes a batch (:class:`openbook.index.kb.ray_encode.RayEncodePassages`: a
Ray Data actor pool, one encoder per actor, 1 CPU each). Each timing covers one batch of all the
passages, actor start-up included (a build pays it once per batch); the two pool sizes alternate over
the repeats so machine load hits both. Uses the Ray already initialised in this process, else starts a
local one (2 CPUs, 256 MB object store) and shuts it down after.

    .venv/bin/python bench/_scale_encode.py [--quick]

Ends with one JSON line: ``ray_encode_pps_1``, ``ray_encode_pps_2``, ``ray_encode_speedup_2v1``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
import time


def measure(quick: bool = False) -> dict:
    import ray

    from openbook.commands.kb_encode import load_encode_passages
    from openbook.corpus import read_passages
    from openbook.data import demo_passages_path
    from openbook.index.kb.ray_encode import RayEncodePassages

    n, repeats = (200, 1) if quick else (2000, 2)
    passages = list(itertools.islice(read_passages(demo_passages_path()), n))
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, object_store_memory=256 * 1024**2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    try:
        make_encode = functools.partial(load_encode_passages, "minilm")
        seconds: dict[int, list[float]] = {1: [], 2: []}
        for repeat in range(repeats):
            for workers in ((1, 2) if repeat % 2 == 0 else (2, 1)):
                encode = RayEncodePassages(make_encode, workers=workers)
                start = time.perf_counter()
                encode(passages)
                seconds[workers].append(time.perf_counter() - start)
    finally:
        if started:
            ray.shutdown()
    pps = {workers: len(passages) / statistics.median(times) for workers, times in seconds.items()}
    return {
        "ray_encode_passages": len(passages),
        "ray_encode_pps_1": round(pps[1], 1),
        "ray_encode_pps_2": round(pps[2], 1),
        "ray_encode_speedup_2v1": round(pps[2] / pps[1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few hundred passages, one round")
    args = parser.parse_args()
    print(json.dumps(measure(quick=args.quick)))


if __name__ == "__main__":
    main()
