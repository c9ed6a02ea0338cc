"""Progress of one long simulation (``datasched sim``): a rich bar on a terminal, a plain line
every few seconds of wall-clock time otherwise (a batch job's log, a pipe), both on stderr.

Each shows the simulated time reached, the jobs ended and an estimate of the wall-clock time
left at the pace so far (docs/performance.md has what a run costs).
"""

from __future__ import annotations

import math
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from datasched.cli.common import err
from datasched.sim.experiment import SimProgress

__all__ = [
    "LINE_EVERY_S",
    "SimProgressView",
    "interrupt_stops",
    "parse_sim_time",
    "sim_time",
    "wall_time",
]

LINE_EVERY_S = 10.0
"""Wall-clock seconds between two plain progress lines when stderr is not a terminal."""

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)


def parse_sim_time(text: str) -> float:
    """``90d``, ``36h``, ``45m``, ``5000s``, ``2w`` as seconds; a bare number is hours (as
    ``--load`` counts jobs per hour). ValueError says what is wrong, in one line."""
    match = _TIME.match(text)
    if match is None:
        raise ValueError(f"expected a time like 36h, 90d, 2w or 5000s, got {text!r}")
    value = float(match.group(1)) * _UNITS[(match.group(2) or "h").lower()]
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"must be a positive time, got {text!r}")
    return value


def sim_time(seconds: float) -> str:
    """Simulated time for a progress line: ``5.2 h`` under two days, ``12.4 d`` above."""
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def wall_time(seconds: float | None) -> str:
    """Wall-clock time left: ``?`` (not known yet), ``42 s``, ``3 min 5 s``, ``1 h 12 min``."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def line(p: SimProgress) -> str:
    """One plain progress line."""
    return (
        f"sim: {sim_time(p.sim_s)} simulated, {p.jobs_ended} of {p.jobs_total} jobs ended, "
        f"{wall_time(p.wall_s)} elapsed, about {wall_time(p.eta_s)} left"
    )


class SimProgressView:
    """The progress sink of one run, as a context manager: call it with each
    :class:`SimProgress`. ``console`` defaults to the commands' stderr; a bar when it is a
    terminal (and not ``quiet``), else a line every ``every_s`` seconds of wall-clock time."""

    def __init__(
        self,
        what: str,
        *,
        console: Console | None = None,
        quiet: bool = False,
        every_s: float = LINE_EVERY_S,
    ) -> None:
        self.console = console or err
        self.what = what
        self.every_s = every_s
        self._last_line = time.monotonic()
        self.lines = 0
        """Plain lines printed so far."""
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        if self.console.is_terminal and not quiet:
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )

    def __enter__(self) -> SimProgressView:
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task(self.what, total=1000, status="starting")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __call__(self, p: SimProgress) -> None:
        if self._bar is not None and self._task is not None:
            status = (
                f"{sim_time(p.sim_s)} simulated, {p.jobs_ended}/{p.jobs_total} jobs, "
                f"{wall_time(p.eta_s)} left"
            )
            self._bar.update(self._task, completed=round(1000 * p.fraction), status=status)
            return
        now = time.monotonic()
        if now - self._last_line >= self.every_s:
            self._last_line = now
            self.lines += 1
            self.console.print(line(p), markup=False, highlight=False, soft_wrap=True)


@contextmanager
def interrupt_stops(console: Console | None = None) -> Iterator[Callable[[], bool]]:
    """While inside, Ctrl-C (SIGINT) and SIGTERM do not kill the command: they raise a flag,
    and the run asks it (the ``stop`` of :func:`~datasched.sim.experiment.simulate`) between
    two slices, then stops with partial figures. A second signal stops at once
    (KeyboardInterrupt), for a run that will not come back. The previous handlers are put
    back after; outside the main thread (where no handler can be set) nothing changes."""
    stopped = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stopped.is_set
        return
    say = console or err

    def handler(signum: int, frame: FrameType | None) -> None:
        if stopped.is_set():
            raise KeyboardInterrupt
        stopped.set()
        say.print(
            "interrupted: stopping the run, its partial figures follow (again to quit at once)",
            markup=False,
            highlight=False,
        )

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopped.is_set
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
