"""The ETA refreshes keep to a share of the daemon's time: a refresh of a large queue takes
seconds (three simulations of it, in the daemon's process beside the API), so once one is
not cheap the next waits, and a submission in between is answered with no new prediction
rather than with three more simulations. Cheap refreshes (small queues) are never held."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import delete

from datasched.service import whatif
from datasched.service.contracts import (
    ElementaryJob,
    FileRef,
    JobState,
    MetaJobRequest,
    PacketDone,
    ProcessorWork,
)
from datasched.service.daemon import StoreListener
from datasched.service.eta_watch import (
    CHEAP_S,
    NEAR_FRACTION,
    NEAR_MIN_S,
    EtaWatch,
    next_refresh_at,
    next_wait,
)
from datasched.service.store import ops
from datasched.service.store.db import Store
from datasched.service.store.models import Job, Packet, Request
from datasched.service.users import add_user, authenticate

CLUSTER = {"nodes": [{"name": "w1", "up": True, "slots_total": 1, "cache_capacity_bytes": 10**9}]}


def test_a_refresh_past_cheap_holds_the_next_back_to_keep_its_share() -> None:
    assert next_refresh_at(100.0, CHEAP_S / 2) == 100.0  # cheap: at once
    assert next_refresh_at(100.0, 1.0, share=0.25) == pytest.approx(103.0)  # 1 s of every 4
    assert next_refresh_at(100.0, 2.0, share=0.5) == pytest.approx(102.0)
    assert next_refresh_at(100.0, 2.0, share=1.0) == 100.0
    with pytest.raises(ValueError, match="max_share"):
        EtaWatch(None, dict, max_share=0.0)  # type: ignore[arg-type]


def _request(store: Store, name: str) -> str:
    """A request of one job over one file of 1,000 events, running on w1 with a packet of
    50 done (so the rates are measured)."""
    with store.session() as s:
        caller = authenticate(s, add_user(s, name, "g"))
        assert caller is not None
        rid = ops.new_request_id()
        work = ProcessorWork("p.py:P")
        jobs = [ElementaryJob(rid, 0, (FileRef(f"/d/{name}.root", 1000, 10**4),), work)]
        ops.store_accepted(
            s, caller, rid, "raw", "application/yaml", MetaJobRequest(name, work, ()), jobs
        )
    listener = StoreListener(store)
    listener.job_state(jobs[0].id, JobState.RUNNING, node="w1")
    listener.packet_done(PacketDone(jobs[0].id, f"/d/{name}.root", 0, 50, "w1", 10, 1.0, None))
    return rid


class Timer:
    """A monotonic clock that moves only when a prediction runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _watch(store: Store, timer: Timer) -> EtaWatch:
    """A watch whose refreshes' cost and wait are both read on ``timer``."""
    return EtaWatch(
        store, lambda: CLUSTER, policy="farm", clock=lambda: 1000.0, timer=timer, cpu_timer=timer
    )


def test_submissions_are_not_predicted_while_expensive_refreshes_are_over_their_share(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = whatif.predict
    timer = Timer()
    calls: list[float] = []

    def slow(*args: Any, **kwargs: Any) -> Any:
        """A prediction as a queue of thousands of jobs takes it: 0.4 s of CPU."""
        calls.append(timer.now)
        timer.now += 0.4
        return real(*args, **kwargs)

    monkeypatch.setattr("datasched.service.eta_watch.predict", slow)
    watch = _watch(sqlite_store, timer)
    first = _request(sqlite_store, "ann")
    assert watch.submitted(first) is not None  # nothing before it: predicted at once
    assert len(calls) == 3  # the point and its interval: 1.2 s
    assert watch.held_back == 0
    second = _request(sqlite_store, "bob")
    timer.now += 3.0  # within the 3.6 s that keep the refreshes to a quarter
    assert watch.submitted(second) is None  # not predicted now
    assert len(calls) == 3
    assert watch.held_back == 1
    timer.now += 0.7
    third = _request(sqlite_store, "cid")
    assert watch.submitted(third) is not None  # past the wait: predicted, the others too
    assert len(calls) == 6
    assert watch.eta(second) is not None


def test_cheap_refreshes_predict_every_submission_at_once(sqlite_store: Store) -> None:
    timer = Timer()  # no time passes: every refresh is cheap
    watch = _watch(sqlite_store, timer)
    for name in ("ann", "bob", "cid"):
        assert watch.submitted(_request(sqlite_store, name)) is not None
    assert watch.held_back == 0
    assert len(watch.cost_s) == 3  # a refresh for each


def test_refreshes_close_in_on_a_predicted_end() -> None:
    assert next_wait(2.0, None, 0.01) == 2.0  # nothing predicted: the period
    assert next_wait(2.0, 10.0, 0.01) == 2.0  # the soonest end past the period
    assert next_wait(2.0, 1.6, 0.01) == pytest.approx(NEAR_FRACTION * 1.6)
    assert next_wait(2.0, 0.0, 0.01) == NEAR_MIN_S  # due or overdue: the least wait
    # a cheap refresh near an end keeps to the share too: 0.2 s of every 0.8 s at most
    assert next_wait(2.0, 0.0, 0.2, share=0.25) == pytest.approx(0.6)
    assert next_wait(2.0, 0.0, 5.0, share=0.25) == 2.0  # never longer than the period


def test_refreshes_are_spaced_from_beginning_to_beginning() -> None:
    # a refresh that took 0.15 s of the wall clock (on a busy machine, mostly waits for a
    # core) and 0.01 s of CPU: the next begins NEAR_MIN_S after it began, not after it ended
    assert next_wait(2.0, 0.0, 0.01, elapsed_s=0.15) == pytest.approx(NEAR_MIN_S - 0.15)
    assert next_wait(2.0, None, 0.03, elapsed_s=0.5) == pytest.approx(1.5)  # the period too
    assert next_wait(2.0, 0.0, 0.0, elapsed_s=1.0) == 0.0  # past due: at once
    # the share still holds: 0.1 s of CPU asks 0.3 s after it, however long it took
    assert next_wait(2.0, 0.0, 0.1, elapsed_s=0.5) == pytest.approx(0.3)


def test_the_loop_keeps_its_share_on_the_refreshs_cpu_time(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulations' wall time (``cost_s``) on a busy machine is mostly waits for a core:
    the loop's wait keeps the share on the CPU time the refresh took."""
    real = whatif.predict
    wall, cpu = Timer(), Timer()

    def waited(*args: Any, **kwargs: Any) -> Any:
        """A prediction that waits 0.1 s for a core and computes for 0.01 s."""
        wall.now += 0.11
        cpu.now += 0.01
        return real(*args, **kwargs)

    monkeypatch.setattr("datasched.service.eta_watch.predict", waited)
    now = [1000.0]
    watch = EtaWatch(
        sqlite_store,
        lambda: CLUSTER,
        policy="farm",
        clock=lambda: now[0],
        timer=wall,
        cpu_timer=cpu,
    )
    _request(sqlite_store, "ann")
    watch.refresh()
    assert watch.last_cpu_s == pytest.approx(0.03)
    assert watch.last_wall_s == pytest.approx(0.33)
    now[0] += 10**6  # past the predicted end: the refreshes are near it
    assert watch.soonest_left() == 0.0
    # 0.03 s of CPU keeps to a quarter with 0.09 s after it; the least wait (0.2 s) is
    # counted from the refresh's beginning, 0.33 s ago: the next follows the share
    assert watch._wait_s() == pytest.approx(0.09)


def test_the_soonest_end_is_the_last_refreshs_and_counts_down(sqlite_store: Store) -> None:
    now = [1000.0]
    watch = EtaWatch(sqlite_store, lambda: CLUSTER, policy="farm", clock=lambda: now[0])
    assert watch.soonest_left() is None  # no refresh yet
    ann, bob = _request(sqlite_store, "ann"), _request(sqlite_store, "bob")
    assert watch.refresh() == 2
    finishes = [watch.eta(r)["predicted_finish"] for r in (ann, bob)]  # type: ignore[index]
    assert watch.soonest_left() == pytest.approx(min(finishes) - 1000.0)
    now[0] += 1.0
    assert watch.soonest_left() == pytest.approx(max(min(finishes) - 1001.0, 0.0))
    now[0] += 10**6  # long past: due, not negative
    assert watch.soonest_left() == 0.0
    # a request the refreshes no longer predict (gone from the store) holds nothing
    with sqlite_store.session() as s:
        for model in (Packet, Job, Request):
            s.execute(delete(model))
    watch.refresh()
    assert watch.soonest_left() is None
