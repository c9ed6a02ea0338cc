"""An ended request always has its finish and its first ETA's error, on each backend: the
ETA watch closes its records at each refresh, and a reader who asks between an end and the
next refresh must not see the ended request with "seconds left" and no finish."""

from __future__ import annotations

import pytest

from datasched.service.contracts import (
    JobState,
    PacketDone,
)
from datasched.service.daemon import StoreListener
from datasched.service.eta import eta_error
from datasched.service.eta_watch import EtaWatch
from datasched.service.store.db import Store
from svc_support import one_running_job

CLUSTER = {
    "nodes": [{"name": "w1", "up": True, "slots_total": 1, "cache_capacity_bytes": 10**9}],
}


def test_a_request_that_ended_since_the_last_refresh_has_its_finish(store: Store) -> None:
    rid, job = one_running_job(store)
    listener = StoreListener(store)
    listener.packet_done(PacketDone(job, "/d/0.root", 0, 50, "w1", 10, 1.0, None))
    watch = EtaWatch(store, lambda: CLUSTER, policy="farm")
    assert watch.refresh() == 1
    listener.job_state(job, JobState.COMPLETED, node="w1")
    ended = watch.eta(rid)  # no refresh between the end and this read
    assert ended is not None
    assert ended["actual_finish"] is not None
    assert ended["seconds_left"] is None
    assert ended["error_at_submission_s"] == pytest.approx(
        eta_error(ended["predicted_finish"], ended["actual_finish"])
    )
    # The next refresh keeps the same finish (no second close).
    finish = ended["actual_finish"]
    watch.refresh()
    again = watch.eta(rid)
    assert again is not None
    assert again["actual_finish"] == finish


def test_eta_errors_are_predicted_minus_actual() -> None:
    """One sign everywhere: positive when the request ended sooner than predicted."""
    assert eta_error(110.0, 100.0) == pytest.approx(10.0)
    assert eta_error(100.0, 110.0) == pytest.approx(-10.0)
