"""A packet's computation, without Dask: open its events and run a processor on them.

Shared by the worker's packet task (:mod:`~datasched.runtime.worker`, where ``datasched run``
runs its own processors in the worker's process) and the sandboxed child
(:mod:`datasched.sandbox.child`, where the service runs its users' processors), so that both
tell a broken file from a broken processor the same way.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import uproot

from datasched.runtime.events import EventsError, ReadSpec, open_events
from datasched.runtime.processor import Processor, user_traceback

__all__ = ["PacketError", "read_failed", "run_processor"]


class PacketError(Exception):
    """A packet failed for a reason retrying elsewhere will not fix: its data or its code.

    ``kind`` is ``"data"`` (missing, unreadable or corrupted file), ``"processor"`` (the
    user's code raised, or passed one of its job's limits) or ``"command"``; ``traceback``
    is then the user's traceback (their file and line).
    """

    def __init__(self, kind: str, url: str, message: str, traceback: str = "") -> None:
        super().__init__(f"{url}: {message}")
        self.kind = kind
        self.url = url
        self.message = message
        self.traceback = traceback

    def __reduce__(self) -> tuple[object, ...]:
        return (PacketError, (self.kind, self.url, self.message, self.traceback))


_READERS = (str(Path(uproot.__file__).resolve().parent),)
"""Where the code that reads files lives (uproot; coffea's NanoEvents read through it)."""


def read_failed(exc: BaseException) -> bool:
    """Whether ``exc``, raised while a processor ran, came from reading the file: events are
    read lazily, so a corrupted basket breaks inside the processor's call, in uproot."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(_READERS):
            return True
        tb = tb.tb_next
    return False


def run_processor(
    proc: Processor,
    name: str,
    path: str,
    url: str,
    tree: str,
    read: ReadSpec,
    start: int,
    stop: int,
    repeats: int = 1,
) -> tuple[Any, int, float, float]:
    """Open entries ``[start, stop)`` of ``url`` (its local copy at ``path``) and run
    ``proc`` (named ``name`` in messages) on them ``repeats`` times: ``(accumulator, bytes
    read, open seconds, least compute seconds)``; :class:`PacketError` saying whether the
    data or the code failed."""
    t0 = time.perf_counter()
    a, b = start, stop
    try:
        with open_events(path, url, tree, read, a, b) as opened:
            if len(opened.events) != b - a:
                raise EventsError(f"read {len(opened.events)} entries, expected {b - a}")
            t1 = time.perf_counter()
            best = float("inf")
            accumulator = None
            for _ in range(repeats):
                t2 = time.perf_counter()
                try:
                    accumulator = proc.process(opened.events)
                except Exception as exc:
                    if read_failed(exc):  # a lazy read of the file broke, not the user's code
                        raise PacketError(
                            "data", url, f"cannot read entries {a}-{b}: {exc}"
                        ) from exc
                    raise PacketError(
                        "processor",
                        url,
                        f"processor {name} failed on entries {a}-{b}: {type(exc).__name__}: {exc}",
                        user_traceback(exc),
                    ) from exc
                best = min(best, time.perf_counter() - t2)
            return accumulator, opened.bytes_read(), t1 - t0, best
    except PacketError:
        raise
    except Exception as exc:
        raise PacketError("data", url, f"cannot read entries {a}-{b}: {exc}") from exc
