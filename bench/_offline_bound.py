"""bench/serve_load.py's offline bound: ``rag.ask`` in a process of its own, loaded once and idle between turns.

The server computes in its own process, so the bound it is measured against does too: :class:`OfflineBound` starts
``serve_load.py --offline-only`` (:func:`offline_worker`) and asks it for timed turns, one batch size at a time, so that
its turns can alternate with the servers' windows (serve_load.schedule).
"""

from __future__ import annotations

import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve().parent / "serve_load.py"


def offline_batches(questions: list[str], batch_size: int) -> list[list[str]]:
    """The clients' turn order cut into batches as the server cuts it at full load, until every question has come as
    often as every other: a cycle of lcm(questions, batch) questions."""
    cycle = math.lcm(len(questions), batch_size) // batch_size
    return [[questions[(j * batch_size + i) % len(questions)] for i in range(batch_size)] for j in range(cycle)]


def time_cycles(rag, batches: list[list[str]], settings: dict, seconds: float) -> tuple[int, float]:
    """``(answers, seconds)`` of ``rag.ask`` on ``batches`` in turn, for at least ``seconds`` and whole cycles: a
    question's cost varies severalfold, so a window that ends inside a cycle would weigh some questions more than
    the server's clients, which ask each in turn."""
    answered, done, start = 0, 0, time.perf_counter()
    while done < len(batches) or time.perf_counter() - start < seconds or done % len(batches):
        answered += len(rag.ask(batches[done % len(batches)], **settings))
        done += 1
    return answered, time.perf_counter() - start


OFFLINE_READY = "offline bound ready"


def offline_worker(args, questions: list[str], batch_sizes: tuple[int, ...], settings: dict, commands, out) -> None:
    """The offline bound's process (``serve_load.py --offline-only``): load the model, ask one untimed batch of each size, say
    :data:`OFFLINE_READY`, then for each line of ``commands`` (a batch size) answer :func:`time_cycles` for
    ``--seconds`` as one JSON line ``{"batch_size", "answers", "seconds"}``; idle in between."""
    from openbook.commands import options

    rag = options.model_from_args(args)
    cycles = {size: offline_batches(questions, size) for size in batch_sizes}
    for batches in cycles.values():
        rag.ask(batches[0], **settings)  # untimed warm-up
    print(OFFLINE_READY, file=out, flush=True)
    for line in commands:
        size = int(line)
        answers, seconds = time_cycles(rag, cycles[size], settings, args.seconds)
        print(json.dumps({"batch_size": size, "answers": answers, "seconds": seconds}), file=out, flush=True)


class OfflineBound:
    """:func:`offline_worker` in a new process of this script, as the server runs in one, started once and idle
    between its turns (:meth:`turn`), so that its turns can alternate with the servers' windows."""

    def __init__(self, argv: list[str], log: Path, timeout: float):
        """``timeout``: the longest wait for one line of the process (loading the model, or one turn)."""
        self.command = [sys.executable, str(SCRIPT), *argv, "--offline-only"]
        self.log, self.timeout, self.process = log, timeout, None

    def __enter__(self) -> OfflineBound:
        path = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                            text=True, env={**os.environ, "PYTHONPATH": path})
        self.lines: queue.SimpleQueue = queue.SimpleQueue()  # its stdout, read by a thread: waits can time out

        def read() -> None:
            for line in self.process.stdout:
                self.lines.put(line)
            self.lines.put("")  # the end

        threading.Thread(target=read, daemon=True).start()
        try:
            while self._line() != OFFLINE_READY:
                pass
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _line(self) -> str:
        """The process's next stdout line, within the timeout; SystemExit with its log if it ends or hangs."""
        try:
            line = self.lines.get(timeout=self.timeout)
        except queue.Empty:
            line = ""
        if not line:
            self.stop(grace=0.0)  # ended, or hung: not worth waiting for
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
            raise SystemExit(f"the offline bound failed ({self.process.returncode}):\n{tail}")
        return line.strip()

    def turn(self, batch_size: int) -> tuple[int, float]:
        """``(answers, seconds)`` of one timed turn in batches of ``batch_size``."""
        self.process.stdin.write(f"{batch_size}\n")
        self.process.stdin.flush()
        while True:
            line = self._line()
            if line.startswith("{"):
                data = json.loads(line)
                return int(data["answers"]), float(data["seconds"])

    def stop(self, grace: float = 30.0) -> None:
        """End the process: close its commands (its loop ends), wait ``grace`` s, then kill it."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            self.process.stdin.close()
            self.process.wait(timeout=grace)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
