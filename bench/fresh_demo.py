"""Time `make demo` on a fresh clone, as a newcomer runs it: clone, create the venv, install, answer.

Each run clones the repository at a git ref into a new temporary folder and runs ``make demo`` there (a new
virtualenv and a new, empty ``$OPENBOOK_CACHE`` every time, so each run also converts the generator and builds
the demo knowledge base, as a newcomer's first run does; pip's own download cache is shared). With
``--before REF`` the two refs run in turn, A B A B ..., and the ratio before/after is taken pair by pair, so
drift on a shared machine hits both alike. Wall time and the largest single process's peak RSS come from the
operating system's accounting of the finished ``make`` (``os.wait4``).

Usage:  python3 bench/fresh_demo.py [--after HEAD] [--before REF] [--runs 2] [--repo .]

It needs no venv of its own (standard library only). It ends with one JSON line: ``after_median_s``,
``before_median_s`` and ``ratio_median`` (before/after; present with ``--before``), each ref's installed
distributions and venv size (which the machine's load does not move), the refs, runs and CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_description  # noqa: E402


def commit_of(repo: Path, ref: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", f"{ref}^{{commit}}"], check=True,
                          capture_output=True, text=True).stdout.strip()


def installed(venv: Path) -> tuple[int, float]:
    """``(distributions, MB on disk)`` of the virtualenv ``venv``: what the install put there, whatever the load."""
    site = list(venv.glob("lib/python*/site-packages"))
    distributions = sum(1 for folder in site for _ in folder.glob("*.dist-info"))
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    return distributions, size / 2**20


def timed_demo(repo: Path, commit: str, log) -> tuple[float, float, int, tuple[int, float]]:
    """``(wall seconds, peak RSS in MB of the largest process, exit status, (distributions, venv MB))`` of
    ``make demo`` in a fresh clone."""
    with tempfile.TemporaryDirectory(prefix="openbook-demo-") as tmp:
        clone = Path(tmp) / "openbook"
        subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(repo), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", commit], check=True)
        env = os.environ | {"OPENBOOK_CACHE": str(Path(tmp) / "cache")}
        start = time.perf_counter()
        process = subprocess.Popen(["make", "--no-print-directory", "-C", str(clone), "demo"], stdout=log,
                                   stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = code = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        venv = installed(clone / ".venv")
        shutil.rmtree(clone, ignore_errors=True)
    return wall, usage.ru_maxrss / 1024, code, venv


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--after", default="HEAD", help="the git ref timed (default: HEAD)")
    parser.add_argument("--before", default=None, help="a second git ref, timed in turn with --after")
    parser.add_argument("--runs", type=int, default=2, help="runs of each ref (default: 2)")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1], help="the repository to clone")
    parser.add_argument("--log", type=Path, default=None, help="append make's output here (default: thrown away)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: must be at least 1")

    refs = {"after": args.after} | ({"before": args.before} if args.before else {})
    commits = {name: commit_of(args.repo, ref) for name, ref in refs.items()}
    print(f"command:       {' '.join([sys.executable, *sys.argv])}")
    print(f"cpu:           {cpu_description()} (os.cpu_count() = {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.2f} at start)")
    for name, ref in refs.items():
        print(f"{name + ':':<14} {ref} = {commits[name][:12]}")

    walls = {name: [] for name in refs}
    rss = {name: [] for name in refs}
    venvs = {}
    with open(args.log or os.devnull, "a", encoding="utf-8") as log:
        for run in range(args.runs):
            order = list(refs) if run % 2 == 0 else list(refs)[::-1]
            for name in order:
                wall, peak, code, (distributions, venv_mb) = timed_demo(args.repo, commits[name], log)
                if code != 0:
                    raise SystemExit(f"fresh_demo.py: make demo at {refs[name]} exited {code} (see --log)")
                walls[name].append(wall)
                rss[name].append(peak)
                venvs[name] = {"distributions": distributions, "venv_mb": round(venv_mb)}
                print(f"  run {run + 1}/{args.runs} {name:<6} {wall:7.1f} s wall, peak RSS {peak:7.0f} MB, "
                      f"{distributions} distributions in {venv_mb:.0f} MB of venv", flush=True)

    figures = {"after_ref": args.after, "after_commit": commits["after"], "runs": args.runs, "cpu": cpu_description(),
               "after_median_s": round(statistics.median(walls["after"]), 1),
               "after_peak_rss_mb": round(max(rss["after"])), "after_distributions": venvs["after"]["distributions"],
               "after_venv_mb": venvs["after"]["venv_mb"]}
    if args.before:
        ratios = [b / a for b, a in zip(walls["before"], walls["after"])]
        figures |= {"before_ref": args.before, "before_commit": commits["before"],
                    "before_median_s": round(statistics.median(walls["before"]), 1),
                    "before_peak_rss_mb": round(max(rss["before"])),
                    "before_distributions": venvs["before"]["distributions"], "before_venv_mb": venvs["before"]["venv_mb"],
                    "ratio_median": round(statistics.median(ratios), 2)}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
