"""The live snapshot's rates, from injected packet records (no clock read): a node's
wall-clock rate counts only the time it had work, and a request with no packet yet is
costed from the earlier packets of the same processor."""

from __future__ import annotations

import pickle

import pytest

from datasched.service.contracts import (
    ElementaryJob,
    FileRef,
    JobState,
    MetaJobRequest,
    PacketDone,
    ProcessorWork,
)
from datasched.service.daemon import StoreListener
from datasched.service.live import IDLE_FACTOR, busy_rate, job_costs, wall_rates
from datasched.service.store import ops
from datasched.service.store.db import Store
from datasched.service.users import add_user, authenticate

CLUSTER = {"nodes": [{"name": "w0", "up": True, "slots_total": 1, "cache_capacity_bytes": 10**9}]}


def _steady(n: int, every_s: float = 1.0, events: int = 100) -> list[tuple[float, int]]:
    return [(i * every_s, events) for i in range(n)]


def test_a_steady_node_keeps_its_rate() -> None:
    assert busy_rate(_steady(8)) == pytest.approx(100.0)
    assert wall_rates({"w0": _steady(8)}, {"w0": 2}) == {"w0": pytest.approx(50.0)}


def test_a_wait_for_the_dispatcher_does_not_count_as_work() -> None:
    # Eight packets a second apart, a 60 s wait for work, eight more: the node works at
    # 100 events/s; the span from first to last (74 s for 1500 events) says 20.
    run = _steady(8) + [(67.0 + t, n) for t, n in _steady(8)]
    naive = sum(n for _, n in run[1:]) / (run[-1][0] - run[0][0])
    assert naive < 25
    got = busy_rate(run)
    assert got is not None
    # The wait counts as IDLE_FACTOR packets' time at most: 15 gaps of 1 s, one of 3 s.
    assert got == pytest.approx(1500 / (14 + IDLE_FACTOR))
    assert got > 4 * naive


def test_a_slow_node_is_not_mistaken_for_an_idle_one() -> None:
    # Every packet slow (5 s each): its median pace is that, and nothing is cut.
    assert busy_rate(_steady(6, every_s=5.0)) == pytest.approx(20.0)
    # Paces vary within the factor: every gap counts whole.
    run = [(0.0, 100), (1.0, 100), (3.0, 100), (4.0, 100), (6.0, 100)]
    assert busy_rate(run) == pytest.approx(400 / 6.0)


def test_no_gap_with_events_gives_no_rate() -> None:
    assert busy_rate([(0.0, 100)]) is None
    assert busy_rate([(0.0, 100), (0.0, 100)]) is None


def test_a_job_without_packets_takes_its_processors_earlier_cost() -> None:
    per_job = {"old-heavy": (100.0, 4.0), "old-light": (300.0, 3.0), "mine": (50.0, 1.0)}
    keys = {
        "old-heavy": "heavy",
        "old-light": "light",
        "mine": "light",
        "new-heavy": "heavy",
        "new-unknown": "other",
    }
    got = job_costs(per_job, keys, ["mine", "new-heavy", "new-unknown"])
    mean = 8.0 / 450.0
    assert got["new-heavy"] == pytest.approx(0.04 / mean)  # its processor's, not the mean
    assert got["mine"] == pytest.approx(0.02 / mean)  # its own packets first
    assert "new-unknown" not in got  # nothing known: the nodes' rates as before
    assert job_costs({}, keys, ["new-heavy"]) == {}


def _submit(store: Store, processor: str, url: str, n: int = 1000) -> str:
    with store.session() as s:
        caller = authenticate(s, add_user(s, f"u{abs(hash(url)) % 10**6}", "g"))
        assert caller is not None
        rid = ops.new_request_id()
        work = ProcessorWork(processor)
        job = ElementaryJob(rid, 0, (FileRef(url, n, n * 10),), work)
        ops.store_accepted(
            s, caller, rid, "raw", "application/yaml", MetaJobRequest("u", work, ()), [job]
        )
    return job.id


def test_a_new_request_is_costed_from_earlier_requests_of_its_processor(store: Store) -> None:
    from datasched.service.live import live_snapshot
    from datasched.service.whatif import predict

    listener = StoreListener(store)
    # Earlier: a heavy processor (10 ms an event) and a light one (1 ms), both done.
    for proc, url, cpu in (("heavy.py:H", "/d/h.root", 1.0), ("light.py:L", "/d/l.root", 0.1)):
        job = _submit(store, proc, url, n=100)
        listener.job_state(job, JobState.RUNNING, node="w0")
        listener.packet_done(PacketDone(job, url, 0, 100, "w0", 10, cpu, pickle.dumps(1)))
        listener.job_state(job, JobState.COMPLETED, node="w0")
    heavy = _submit(store, "heavy.py:H", "/d/h2.root")
    light = _submit(store, "light.py:L", "/d/l2.root")
    snap = live_snapshot(store, CLUSTER)
    cost = {j.id: j.cpu_s_per_event for j in snap.jobs}
    # The node's rate (200 events over 1.1 s of CPU) is the mean; each job its share.
    assert cost[heavy] == pytest.approx(0.01)
    assert cost[light] == pytest.approx(0.001)
    prediction = predict(snap, "farm")
    # 1000 events at 10 ms is 10 s at least, whatever runs first.
    took = prediction.jobs[heavy]
    assert took is not None
    assert took >= 10.0


def test_a_node_idle_for_the_window_keeps_the_rate_it_last_worked_at(store: Store) -> None:
    from datetime import UTC, datetime, timedelta

    from datasched.service.live import live_snapshot
    from datasched.service.store.models import Packet

    job = _submit(store, "p.py:P", "/d/a.root", n=1000)
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    with store.session() as s:
        # Five packets of 100 events two seconds apart, an hour ago; their CPU says 1000/s.
        for k in range(5):
            s.add(
                Packet(
                    job_id=job, url="/d/a.root", start=100 * k, stop=100 * (k + 1), node="w0",
                    n_bytes=10, cpu_s=0.1, result=None,
                    created=long_ago + timedelta(seconds=2 * k),
                )
            )  # fmt: skip
    (node,) = live_snapshot(store, CLUSTER).nodes
    assert node.rates.cached_events_per_s == pytest.approx(50.0)  # wall clock, not CPU
