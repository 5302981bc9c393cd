"""Training steps per second with 1 vs 2 DDP processes (torchrun, gloo, CPU) on the same global batch, and
whether the 2-process run ends with the 1-process weights (issue 12, item 5c; part of bench/scale_out.py).

Both runs go through torchrun (``--nproc-per-node 1`` and ``2``) and time only ``openbook.train.train`` (rank
0's wall clock, process start-up and model building excluded). The model is tests/helpers/ddp_worker.py's tiny random
RAG, widened (d_model 256, 4+4 layers) so that compute dominates communication. The equality check trains the
small model in float64 for 4 steps in 1 and 2 processes and compares every weight with tests/helpers/tolerance.py's
bound, as tests/train/test_train_ddp.py does (float64 rounding plus the float32 index scores' through Adam).

    python bench/_scale_ddp.py [--quick]    # prints one JSON line
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
sys.path[:0] = [str(ROOT), str(TESTS / "helpers"), str(TESTS / "train")]


def _torchrun(processes: int, kb: Path, out: Path, *args: str) -> dict:
    timing = out.with_suffix(".timing.json")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
                    "--log-dir", str(out.parent / "torchrun-logs"),  # not a torchelastic_* folder left in /tmp
                    str(TESTS / "helpers" / "ddp_worker.py"), str(kb), str(out), "--timing", str(timing), *args],
                   env=env, check=True, capture_output=True)
    return json.loads(timing.read_text())


def _weights_equal(a: Path, b: Path) -> bool:
    """Every weight within tests/train/test_train_ddp.py's rounding bound (the one the test asserts)."""
    from test_train_ddp import assert_same_weights, weights

    try:
        assert_same_weights(weights(a), weights(b))
    except AssertionError:
        return False
    return True


def measure(quick: bool = False) -> dict:
    import ddp_worker

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        kb = tmp / "kb"
        ddp_worker.build_kb(kb)
        small = ["--max-steps", "4", "--batch-size", "4", "--float64"]
        _torchrun(1, kb, tmp / "eq1", *small)
        _torchrun(2, kb, tmp / "eq2", *small)
        equal = _weights_equal(tmp / "eq1", tmp / "eq2")
        size = ["--d-model", "32", "--layers", "2", "--max-steps", "3"] if quick else \
            ["--d-model", "256", "--layers", "4", "--max-steps", "20"]
        speed = [*size, "--batch-size", "8", "--repeat", "40"]
        rates = {n: _torchrun(n, kb, tmp / f"speed{n}", *speed) for n in (1, 2)}
    per_s = {n: r["steps"] / r["seconds"] for n, r in rates.items()}
    return {"ddp_params_equal": equal, "ddp_speedup_2v1": round(per_s[2] / per_s[1], 3),
            "ddp_steps_per_s_1": round(per_s[1], 3), "ddp_steps_per_s_2": round(per_s[2], 3),
            "ddp_global_batch": 8, "ddp_backend": "gloo", "ddp_cpu_count": os.cpu_count()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    print(json.dumps(measure(quick=parser.parse_args().quick)))
