"""scripts/wiki_book.sh runs issue 32's measurements one after another and, run again, skips the steps done."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "scripts" / "wiki_book.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_steps_run_in_order_once_and_an_unknown_step_is_an_error(tmp_path):
    calls = tmp_path / "calls"
    fake = tmp_path / "fake"
    fake.write_text('#!/bin/sh\necho "$@" >> "$CALLS"\n[ "$1" = -m ] && cat > /dev/null  # json.tool reads its input\n'
                    '[ "$FAIL" = "$1" ] && exit 1\necho \'{"done": true}\'\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PY": str(fake), "OB": str(fake), "LOGS": str(tmp_path / "logs"), "KB": str(tmp_path / "kb"),
           "DATA": "data", "CALLS": str(calls), "FAIL": "bench/index_scale.py"}
    failed = run(["build", "index"], env)  # the index step fails: no JSON line, the script stops there
    assert failed.returncode != 0
    env["FAIL"] = ""
    first = run(["build", "index", "shards"], env)
    assert first.returncode == 0, first.stderr
    # the build step's output goes through `$PY -m json.tool --compact` (one JSON line): not a step of its own
    lines = [line for line in calls.read_text().splitlines() if not line.startswith("-m json.tool")]
    assert "-m json.tool --compact" in calls.read_text().splitlines()  # (the two ends of a pipe: either order)
    assert lines[0] == f"kb build data/wikipedia-2015-core --out {tmp_path / 'kb'} --json"
    # the build ran once (the first time); the failed index step again, then the next one
    assert [line.split()[0] for line in lines[1:]] == ["bench/index_scale.py", "bench/index_scale.py",
                                                      "bench/shard_plan.py"]
    again = run(["build", "index", "shards"], env)  # all done: nothing runs again
    assert again.returncode == 0 and [line for line in calls.read_text().splitlines()
                                      if not line.startswith("-m json.tool")] == lines
    assert again.stdout.count(": done (") == 3
    unknown = run(["nope"], env)
    assert unknown.returncode == 2 and "unknown step nope" in unknown.stderr
