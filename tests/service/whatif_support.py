"""Small snapshots whose predictions can be worked out by hand."""

from __future__ import annotations

from datasched.service.contracts import (
    ClusterSnapshot,
    FileTodo,
    JobSnapshot,
    NodeRates,
    NodeSnapshot,
)

GB = 10**9


def one_node(events: int = 5000, rate: float = 1000.0) -> ClusterSnapshot:
    """One node of one slot, its file cached, measured at ``rate`` events/s: one job."""
    node = NodeSnapshot("w0", 1, GB, ("f1",), NodeRates(cached_events_per_s=rate))
    job = JobSnapshot("r1.0", "r1", (FileTodo("f1", events, events * 1000),), 90.0)
    return ClusterSnapshot(100.0, (node,), (job,))


def cached_on_second_node() -> ClusterSnapshot:
    """Two nodes; the second caches both files of the one job; central storage is slow
    (1 MB/s), so reading the files there costs 100 s against 10 s from the cache."""
    rates = NodeRates(cached_events_per_s=1000.0, tertiary_bytes_per_s=1e6)
    nodes = (
        NodeSnapshot("w0", 1, GB, (), rates),
        NodeSnapshot("w1", 1, GB, ("f1", "f2"), rates),
    )
    files = (FileTodo("f1", 5000, 5 * 10**7), FileTodo("f2", 5000, 5 * 10**7))
    return ClusterSnapshot(0.0, nodes, (JobSnapshot("r1.0", "r1", files, 0.0),))


def mixed() -> ClusterSnapshot:
    """Three nodes, two requests, a running job partly done, rates measured on some."""
    nodes = (
        NodeSnapshot("w0", 2, GB, ("a",), NodeRates(2000.0, 1500.0, 800.0, 50e6)),
        NodeSnapshot("w1", 1, GB, ("b", "c"), NodeRates(tertiary_events_per_s=500.0)),
        NodeSnapshot("w2", 1, GB),
    )
    jobs = (
        JobSnapshot(
            "r1.0",
            "r1",
            (FileTodo("a", 4000, 4 * 10**7, ((1000, 4000),)), FileTodo("b", 2000, 2 * 10**7)),
            10.0,
            user="ann",
            node="w0",
            cpu_s_per_event=6e-4,
        ),
        JobSnapshot("r1.1", "r1", (FileTodo("c", 3000, 3 * 10**7),), 10.0, user="ann"),
        JobSnapshot(
            "r2.0",
            "r2",
            (FileTodo("d", 8000, 8 * 10**7), FileTodo("a", 4000, 4 * 10**7)),
            20.0,
            user="bob",
            group="g",
            priority=2.0,
        ),
        JobSnapshot("r3.0", "r3", (FileTodo("e", 100, 10**6, ()),), 30.0, user="bob"),
    )
    return ClusterSnapshot(50.0, nodes, jobs)
