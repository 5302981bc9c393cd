"""Cold `openbook retrieve` of one or more source trees in one run: a fresh process each time, interleaved.

Each run is ``python -m openbook retrieve QUESTION --json`` in a new process, timed from its start to its
passages on stdout (``time_to_output`` of bench/ask_latency.py, which times the cold ``ask``), with
``PYTHONPATH`` set to the tree, so the same virtualenv runs each tree's openbook: a before/after is
``git worktree add /tmp/old COMMIT`` and ``--tree /tmp/old --tree .``. One untimed run per tree first (it builds
the demo knowledge base if needed and warms the page cache), then ``--runs`` rounds, each running every tree
once, the order reversed every other round, so a change in the machine's load hits every tree alike. Besides
the wall time, each run's CPU time (user + system, ``getrusage(RUSAGE_CHILDREN)`` before and after) is
reported: on a machine shared with other work it moves much less than the wall time.

Usage:  PYTHONPATH=. python bench/cold_retrieve.py [--tree DIR ...] [--runs 5] [--k 5]

It ends with one JSON line: per tree, the median wall and CPU seconds and every run's, and the CPU model.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from _common import cpu_description, print_header
from ask_latency import COLD_QUESTION, time_to_output

REPO = Path(__file__).resolve().parents[1]


def tree_env(tree: Path) -> dict:
    """The environment that runs ``tree``'s openbook: the tree first on ``PYTHONPATH``, and the working directory
    not on the path (``PYTHONSAFEPATH``: ``python -m`` would put it first, and so its openbook)."""
    path = os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return dict(os.environ, PYTHONPATH=path, PYTHONSAFEPATH="1")


def openbook_of(tree: Path) -> str:
    """Where ``import openbook`` finds the package with ``tree``'s environment (it must be inside ``tree``)."""
    done = subprocess.run([sys.executable, "-c", "import openbook; print(openbook.__file__)"], env=tree_env(tree),
                          capture_output=True, text=True, check=True)
    found = Path(done.stdout.strip()).resolve()
    if tree.resolve() not in found.parents:
        raise SystemExit(f"{tree}: `import openbook` finds {found}, not the tree's package")
    return str(found)


def timed(command: list[str], env: dict) -> tuple[float, float, dict]:
    """Wall seconds to ``command``'s output, the CPU seconds (user + system) of its process, and its JSON."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds, record = time_to_output(command, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the process has been waited for
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu, record


def result_line(times: dict[str, list[float]], cpu_times: dict[str, list[float]], question: str, k: int) -> dict:
    """The final JSON line: each tree's median and runs, wall and CPU (seconds, rounded to ms)."""
    def figures(runs: list[float], name: str) -> dict:
        return {f"median_{name}_s": round(statistics.median(runs), 3), f"{name}_runs_s": [round(t, 3) for t in runs]}

    return {"question": question, "k": k, "runs": len(next(iter(times.values()))),
            "trees": {tree: {**figures(times[tree], "wall"), **figures(cpu_times[tree], "cpu")} for tree in times},
            "cpu": cpu_description(), "load_average_1min": round(os.getloadavg()[0], 2)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", action="append", type=Path, metavar="DIR",
                   help="a source tree holding openbook/ (repeat to compare; default: this repository)")
    p.add_argument("--runs", type=int, default=5, help="timed runs per tree (default: %(default)s)")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--question", default=COLD_QUESTION)
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    trees = args.tree or [REPO]
    print_header()
    command = [sys.executable, "-m", "openbook", "retrieve", args.question, "--json", "--k", str(args.k)]
    print(f"timed:         PYTHONPATH=TREE {' '.join(command)}")
    for tree in trees:
        print(f"tree:          {tree} (openbook from {openbook_of(tree)})")
        time_to_output(command, tree_env(tree))  # untimed warm-up
    times: dict[str, list[float]] = {str(tree): [] for tree in trees}
    cpu_times: dict[str, list[float]] = {str(tree): [] for tree in trees}
    for r in range(args.runs):
        for tree in (trees if r % 2 == 0 else trees[::-1]):
            seconds, cpu, record = timed(command, tree_env(tree))
            times[str(tree)].append(seconds)
            cpu_times[str(tree)].append(cpu)
            print(f"run {r + 1}/{args.runs} {str(tree):40s} {seconds:6.2f} s wall, {cpu:6.2f} s CPU "
                  f"({len(record['passages'])} passages)", flush=True)
    result = result_line(times, cpu_times, args.question, args.k)
    for tree, figures in result["trees"].items():
        print(f"{tree}: median {figures['median_wall_s']} s wall, {figures['median_cpu_s']} s CPU "
              f"over {result['runs']} runs")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
