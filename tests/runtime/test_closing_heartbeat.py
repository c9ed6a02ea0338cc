"""Dask's "Failed to communicate with scheduler during heartbeat" is dropped while every
worker of the process is closing (the race of a cluster's close), and kept while one runs
(a real loss of its scheduler): datasched.runtime.closing."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
from distributed.core import Status

from datasched.runtime.closing import HEARTBEAT_FAILED, ClosingHeartbeat, quiet_heartbeat_at_close


@dataclass(eq=False)
class FakeWorker:
    status: Status


def _record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, msg, None, None)


def test_the_heartbeat_failure_is_dropped_only_when_no_worker_runs() -> None:
    f = ClosingHeartbeat()
    failed = _record(HEARTBEAT_FAILED + ".")
    assert f.filter(failed)  # no worker known: kept
    a, b = FakeWorker(Status.running), FakeWorker(Status.running)
    f.workers.add(a)
    f.workers.add(b)
    assert f.filter(failed)  # running: a real loss of the scheduler
    a.status = Status.closing
    assert f.filter(failed)  # b still runs
    b.status = Status.closed
    assert not f.filter(failed)  # the cluster is closing: dropped
    a.status = Status.paused
    assert f.filter(failed)  # a paused worker is alive


@pytest.mark.parametrize(
    "msg",
    ["Unexpected exception during heartbeat. Closing worker.", "Compute Failed", "other"],
)
def test_other_messages_pass_while_closing(msg: str) -> None:
    f = ClosingHeartbeat()
    f.workers.add(FakeWorker(Status.closed))
    assert f.filter(_record(msg))


def test_the_filter_is_on_dask_s_worker_logger_once_a_process() -> None:
    workers = [FakeWorker(Status.running), FakeWorker(Status.running)]
    first = quiet_heartbeat_at_close(workers[0])
    second = quiet_heartbeat_at_close(workers[1])
    assert first is second
    logger = logging.getLogger("distributed.worker")
    assert logger.filters.count(first) == 1
    assert set(workers) <= set(first.workers)
    # On the logger itself: a closing process's record never reaches a handler.
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    handler = Keep()
    logger.addHandler(handler)
    try:
        for w in list(first.workers):
            w.status = Status.closed
        logger.error("%s.", HEARTBEAT_FAILED)
        assert seen == []  # formatted with its arguments, then matched
        logger.error("another error")
        assert [r.getMessage() for r in seen] == ["another error"]
    finally:
        logger.removeHandler(handler)
        first.workers.clear()


def test_a_worker_without_weak_references_is_not_counted() -> None:
    from types import SimpleNamespace

    f = quiet_heartbeat_at_close(SimpleNamespace(status=Status.closed))
    assert all(not isinstance(w, SimpleNamespace) for w in f.workers)
