"""Dask's heartbeat failure at a cluster's close, kept off the user's terminal.

When an embedded cluster closes, a worker's heartbeat that was under way meets its own
connections closing, and Dask logs "Failed to communicate with scheduler during heartbeat."
with three chained tracebacks (a known race of its shutdown). Nothing was lost: the run had
ended. A user reads it as a failure, though, after a run that succeeded
(docs/performance.md, "Prediction on a shared machine", saw it 1 to 5 times in three
runs, each time as a calibration's cluster closed).

:func:`quiet_heartbeat_at_close` is called by the worker plugin in each worker's process. It
drops that one message when no worker of the process is running any more (every one is
closing or closed). A running worker that cannot reach its scheduler still logs it: that is
a real loss, and its traceback stays.
"""

from __future__ import annotations

import logging
import threading
import weakref
from contextlib import suppress
from typing import Any

from distributed.core import Status

__all__ = ["HEARTBEAT_FAILED", "ClosingHeartbeat", "quiet_heartbeat_at_close"]

HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat"
"""The start of the message Dask's worker logs (``distributed.worker``)."""
_RUNNING = frozenset({Status.running, Status.paused})
_LOGGER = "distributed.worker"


class ClosingHeartbeat(logging.Filter):
    """Drops :data:`HEARTBEAT_FAILED` while none of ``workers`` is running."""

    def __init__(self) -> None:
        super().__init__()
        self.workers: weakref.WeakSet[Any] = weakref.WeakSet()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(HEARTBEAT_FAILED):
            return True
        workers = list(self.workers)
        return not workers or any(w.status in _RUNNING for w in workers)


_filter: ClosingHeartbeat | None = None
_lock = threading.Lock()


def quiet_heartbeat_at_close(worker: Any) -> ClosingHeartbeat:
    """Count ``worker`` among this process's workers and make sure the filter is on Dask's
    worker logger (once a process, whatever the number of runs that register the plugin)."""
    global _filter
    with _lock:
        if _filter is None:
            _filter = ClosingHeartbeat()
            logging.getLogger(_LOGGER).addFilter(_filter)
        with suppress(TypeError):  # a stand-in that takes no weak reference: not counted
            _filter.workers.add(worker)
        return _filter
