"""The ETAs priced per packet (service/packet_pace.py): the daemon's CPU per stored packet as
the simulator's master queue, the nodes and jobs at their packets' CPU per event."""

from __future__ import annotations

import pytest

from datasched.service.contracts import (
    ClusterSnapshot,
    FileTodo,
    JobSnapshot,
    NodeRates,
    NodeSnapshot,
)
from datasched.service.packet_pace import (
    MIN_PACKETS,
    DaemonPace,
    packet_cpu,
    priced_per_packet,
)
from datasched.service.store.db import Store
from datasched.service.store.models import Packet
from datasched.service.whatif import predict
from service.test_live_rates import _submit


def _packets(store: Store, job: str, n: int, *, first: int = 0, cpu_s: float = 0.01) -> None:
    with store.session() as s:
        for k in range(first, first + n):
            s.add(
                Packet(
                    job_id=job, url="/d/a.root", start=100 * k, stop=100 * (k + 1), node="w0",
                    n_bytes=10, cpu_s=cpu_s, result=None,
                )
            )  # fmt: skip


def test_the_daemons_pace_is_its_cpu_over_the_packets_it_stored(store: Store) -> None:
    clock = [10.0]
    pace = DaemonPace(store, cpu=lambda: clock[0])
    job = _submit(store, "p.py:P", "/d/a.root", n=10**6)
    assert pace.sample() is None  # nothing to measure over yet
    _packets(store, job, MIN_PACKETS - 1)
    clock[0] += 0.5
    assert pace.sample() is None  # too few packets since the first sample
    _packets(store, job, 1, first=MIN_PACKETS - 1)
    clock[0] += 0.3
    # 0.8 s of the daemon's CPU over 20 packets.
    assert pace.sample() == pytest.approx(0.8 / MIN_PACKETS)
    # A burst of submissions: 3 s of CPU over the next 20 packets. The least span stands.
    _packets(store, job, MIN_PACKETS, first=MIN_PACKETS)
    clock[0] += 3.0
    assert pace.sample() == pytest.approx(0.8 / MIN_PACKETS)


def test_the_packets_cpu_prices_the_nodes_and_each_job(store: Store) -> None:
    assert packet_cpu(store) == (None, {})
    heavy = _submit(store, "h.py:H", "/d/h.root", n=10**6)
    light = _submit(store, "l.py:L", "/d/l.root", n=10**6)
    _packets(store, heavy, 3, cpu_s=0.1)  # 1 ms an event
    _packets(store, light, 1, cpu_s=0.01)  # 0.1 ms
    mean, per_job = packet_cpu(store)
    assert mean is not None
    assert mean == pytest.approx(0.31 / 400)
    assert per_job == pytest.approx({heavy: 1e-3, light: 1e-4})
    snap = ClusterSnapshot(
        0.0,
        (NodeSnapshot("w0", 1, 10**9, (), NodeRates(5.0, 4.0, 3.0, 1e6)),),
        (
            JobSnapshot(heavy, "r1", (FileTodo("/d/x.root", 1000, 10**6),), 0.0),
            JobSnapshot("other", "r2", (FileTodo("/d/y.root", 1000, 10**6),), 0.0),
        ),
    )
    priced = priced_per_packet(snap, mean, per_job)
    (node,) = priced.nodes
    assert node.rates == NodeRates(1 / mean, 1 / mean, 1 / mean, None)
    assert [j.cpu_s_per_event for j in priced.jobs] == pytest.approx([1e-3, mean])


def test_the_master_queue_bounds_a_prediction_at_its_packets() -> None:
    """One node, one job of one file of 10,000 events at 1 µs an event (10 ms of CPU): the
    runner's packets are a quarter of what is left, with its packets in flight counted
    (sim/packetcut.py); at 0.1 s of the daemon a packet the prediction is the packets'
    turns, not the CPU."""
    snap = ClusterSnapshot(
        0.0,
        (NodeSnapshot("w0", 1, 10**9, (), NodeRates(1e6, 1e6, 1e6, None)),),
        (
            JobSnapshot(
                "j", "r", (FileTodo("/d/x.root", 10_000, 10**6),), 0.0, cpu_s_per_event=1e-6
            ),
        ),
    )
    free = predict(snap, "farm").makespan_s
    assert free == pytest.approx(0.01, rel=0.01)
    queued = predict(snap, "farm", master_s_per_packet=0.1).makespan_s
    assert queued > 0.2  # at least two packets' turns
    # Faster rates for the interval make the daemon faster too.
    assert predict(snap, "farm", master_s_per_packet=0.1, rate_factor=2.0).makespan_s == (
        pytest.approx(queued / 2, rel=0.05)
    )


def test_the_watch_prices_per_packet_once_the_daemons_pace_is_measured(store: Store) -> None:
    """A job of 1,000 events, 50 done in a packet of 1 ms of CPU (20 µs an event), then
    twenty more packets stored elsewhere over 20 s of the daemon's CPU (1 s a packet): the
    ETA is the simulator's with the daemon as its master queue, each of the job's packets
    waiting its turn there, where the node's pace alone gives it a few hundredths of a
    second."""
    from datasched.service.contracts import JobState, PacketDone
    from datasched.service.daemon import StoreListener
    from datasched.service.eta_watch import EtaWatch

    cluster = {
        "nodes": [{"name": "w0", "up": True, "slots_total": 1, "cache_capacity_bytes": 10**9}]
    }
    job = _submit(store, "p.py:P", "/d/0.root", n=1000)
    rid = job.rsplit(".", 1)[0]
    listener = StoreListener(store)
    listener.job_state(job, JobState.RUNNING, node="w0")
    listener.packet_done(PacketDone(job, "/d/0.root", 0, 50, "w0", 10, 0.001, None))
    clock = [0.0]
    watch = EtaWatch(store, lambda: cluster, policy="farm", clock=lambda: 1000.0)
    watch.refresh()
    by_rates = watch.eta(rid)
    assert by_rates is not None
    assert by_rates["predicted_finish"] - 1000.0 < 0.1
    watch.pace = DaemonPace(store, cpu=lambda: clock[0])
    watch.refresh()  # the pace's first sample: nothing measured, priced as before
    again = watch.eta(rid)
    assert again is not None
    assert again["predicted_finish"] - 1000.0 < 0.1
    other = _submit(store, "q.py:Q", "/d/1.root", n=100 * MIN_PACKETS)
    _packets(store, other, MIN_PACKETS, cpu_s=0.0002)
    clock[0] = 20.0
    watch.refresh()
    eta = watch.eta(rid)
    assert eta is not None
    # At least the job's last packet's whole turn at the daemon: 1 s.
    assert eta["predicted_finish"] - 1000.0 >= 1.0
    assert eta["predictions"] == 3
