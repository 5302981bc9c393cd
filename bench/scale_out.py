#!/usr/bin/env python
"""Scale-out on this machine (issue 12 item 5): Ray encoding 1 vs 2 workers, sharded retrieval S = 1, 2, 4 over 1M
synthetic vectors, DDP training 1 vs 2 processes.

    PYTHONPATH=. .venv/bin/python bench/scale_out.py            # full sizes (about 15 minutes on 2 cores)
    PYTHONPATH=. .venv/bin/python bench/scale_out.py --quick    # tiny sizes, a smoke test

Each part is its own script, runnable alone (bench/_scale_encode.py, bench/_scale_shard.py, bench/_scale_ddp.py);
this one runs them one after another (never two heavy jobs at once) and ends with one JSON line holding every
part's figures, at least ``ray_encode_speedup_2v1``, ``sharded_topk_exact``, ``ddp_params_equal`` and
``ddp_speedup_2v1``. What the figures mean for the paper's 21M passages and for 1B: docs/scaling.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTS = ("_scale_encode", "_scale_shard", "_scale_ddp")


def load_part(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts to run (default: all)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(HERE.parent))
    figures: dict = {"quick": args.quick, "cpu_count": os.cpu_count()}
    for name in args.parts.split(","):
        if name not in PARTS:
            p.error(f"--parts: unknown part {name!r} (parts: {', '.join(PARTS)})")
        start = time.perf_counter()
        part = load_part(name).measure(quick=args.quick)
        figures.update(part)
        figures[f"{name.strip('_')}_seconds"] = round(time.perf_counter() - start, 1)
        print(f"{name}: {json.dumps(part)}", flush=True)
    figures["load_average_1min"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
