"""Progress bars: the one way openbook makes them, always on standard error (standard output stays for results).

A bar is drawn unless the caller says not to (the commands' ``--quiet``, the Python API's ``progress=False``).
On a terminal it is drawn at once and redrawn in place several times a second. When standard error is not a
terminal (a log file, a pipe, a CI job) a long job still says how far it got, but as a log would want it: a line
(not a redraw) every :data:`LOG_INTERVAL` seconds from then on, and the final state when the job is done; a job
shorter than that writes one line, at its end. A job that fails leaves no bar above its error message: the command line ends
the bars still open (:func:`end_bars`, on a terminal they are erased) before it prints the error, and prints
warnings :func:`above_bars`. ``TQDM_DISABLE=1`` in the environment turns every bar off, as in any tqdm program.

A bar with a known ``total`` shows the percentage done and the time left (ETA); one without shows the count,
the rate and the time elapsed. Use it as a context manager (or close it) so that it ends as said above.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from tqdm import tqdm

#: Seconds between the lines of a bar when standard error is not a terminal.
LOG_INTERVAL = 30.0
_CURSOR_UP = "\x1b[A"


class _Bar(tqdm):
    """tqdm that erases itself when the block it guards fails, and when it was never drawn (standard error is
    not a terminal and the job was short) draws its final state on a clean close."""

    def __exit__(self, exc_type, exc_value, traceback):
        if exc_type is not None:
            self.leave = False  # an error message follows: no half-done bar above it
        return super().__exit__(exc_type, exc_value, traceback)

    def close(self) -> None:
        if not getattr(self, "disable", True) and self.leave is not False and self.delay:
            self.delay = 0  # close() draws the final state only of a bar shown before
        super().close()


def progress_bar(iterable: Iterable | None = None, *, desc: str, unit: str, total: float | None = None,
                 enabled: bool = True, **options: Any) -> tqdm:
    """A tqdm bar on standard error over ``iterable`` (or updated by hand), counting ``unit``s; a bar that
    draws nothing when not ``enabled``. ``options`` go to :class:`tqdm.tqdm` (e.g. ``initial``, ``leave``)."""
    terminal = _is_terminal(sys.stderr)
    if not terminal:
        options.update(delay=LOG_INTERVAL, mininterval=LOG_INTERVAL, maxinterval=LOG_INTERVAL)
    return _Bar(iterable, desc=desc, unit=unit, total=total, disable=not enabled,
                file=sys.stderr if terminal else _Lines(sys.stderr), dynamic_ncols=terminal, **options)


class _Lines:
    """A stream for a bar that is not on a terminal: each state it draws becomes a line of its own (tqdm redraws
    in place with carriage returns, which a log file would keep as one endless line)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.replace(_CURSOR_UP, "")  # tqdm moves up to redraw a second bar in place: not in a log
        for state in text.replace("\n", "\r").split("\r"):
            if state.strip():
                self.stream.write(state.rstrip() + "\n")

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def end_bars() -> None:
    """End every bar still open without its final state (on a terminal, erase it): an error message follows."""
    for bar in list(tqdm._instances):
        bar.leave = False
        bar.close()


@contextlib.contextmanager
def above_bars(stream) -> Iterator[None]:
    """Write to ``stream`` (a warning, say) without breaking the bars drawn on it: they are cleared, then redrawn."""
    with tqdm.external_write_mode(file=stream):
        yield


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or stand-in stream
        return False
