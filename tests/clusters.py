"""Small clusters for tests of the core and the simulator (importable: ``tests`` is on the
path): a scheduler over a uniform data space of ponce-hersch events, built the way the
simulator builds one; and a cluster of romosan's model (servers of several slots sharing one
archive link, files cached whole)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from datasched.core.data import DataSpace, FileSpec
from datasched.core.hot import HotReplicator
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Link, Node, Pipelining, Topology, node_endpoint
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy

__all__ = [
    "EVENT_BYTES",
    "assert_each_event_once",
    "cosched_scheduler",
    "file_space",
    "placed_space",
    "scheduler",
    "servers_and_workers",
    "space",
]

EVENT_BYTES = 600e3
"""ponce-hersch §2.4: 600 KB an event."""
N_EVENTS = 100_000
"""Wide enough for every scenario of the tests."""


def assert_each_event_once(
    processed: Mapping[int, Iterable[IntervalSet]] | None, jobs: Sequence[Job]
) -> None:
    """Each job's processed pieces (a run's ``processed``) are disjoint and make up exactly
    its data: no event lost, none processed twice."""
    assert processed is not None
    for job in jobs:
        union = IntervalSet()
        for piece in processed[job.job_id]:
            assert not (piece & union), f"job {job.job_id}: events processed twice"
            union = union | piece
        assert union == job.data, f"job {job.job_id}: events lost"


def space(file_events: int = 0, n_events: int = N_EVENTS) -> DataSpace:
    """Events of 600 KB, one range (cached at any grain) or files of ``file_events``."""
    return DataSpace.uniform(n_events, EVENT_BYTES, file_events=file_events)


def file_space(sizes: list[int], n_events: int = N_EVENTS) -> DataSpace:
    """Files of the given numbers of events, then one file for the rest of ``n_events``."""
    specs = [FileSpec(f"f{i}", n, round(n * EVENT_BYTES)) for i, n in enumerate(sizes)]
    rest = n_events - sum(sizes)
    if rest > 0:
        specs.append(FileSpec("rest", rest, round(rest * EVENT_BYTES)))
    out = DataSpace()
    out.add_dataset("data", specs)
    return out


def scheduler(
    policy: str,
    nodes: int,
    cache_events: int = 0,
    *,
    min_subjob: int = 10,
    slots: int = 1,
    data: DataSpace | None = None,
    pipelining: Pipelining = Pipelining.NONE,
    params: dict[str, Any] | None = None,
    hot: int | None = None,
) -> Scheduler:
    """A scheduler of ``nodes`` uniform nodes with caches of ``cache_events`` events;
    ``hot`` switches hot-file replication on beside the policy, at that threshold (one
    replication in flight per node, so that small scenarios see several at once)."""
    topology = Topology.uniform(nodes, cache_events * EVENT_BYTES, slots=slots)
    return Scheduler(
        topology,
        data if data is not None else space(),
        build_policy(policy, **(params or {})),
        cost=CostModel(pipelining=pipelining),
        min_subjob_events=min_subjob,
        replicator=None if hot is None else HotReplicator(hot, max_in_flight=nodes),
    )


def placed_space(placement: list[int], file_events: int = 100) -> DataSpace:
    """Files of ``file_events`` 600 KB events, file ``i`` on the disk of node
    ``placement[i]`` from the start (a replica naming the node)."""
    out = DataSpace()
    out.add_dataset(
        "data",
        [
            FileSpec(
                f"f{i}",
                file_events,
                round(file_events * EVENT_BYTES),
                replicas=(node_endpoint(node),),
            )
            for i, node in enumerate(placement)
        ],
    )
    return out


def servers_and_workers(
    workers: int, servers: int, *, slots: int = 1, cache_events: int = 100_000
) -> Topology:
    """``workers`` nodes of ``slots`` slots (numbered first), then ``servers`` nodes of no
    slot that only store data (PROOF's file servers)."""
    return Topology(
        tuple(
            Node(i, cache_events * EVENT_BYTES, slots=slots if i < workers else 0)
            for i in range(workers + servers)
        )
    )


def cosched_scheduler(
    policy: str,
    nodes: int,
    *,
    slots: int = 2,
    cache_files: float = 4,
    n_files: int = 10,
    file_events: int = 100,
    archive_bytes_per_s: float = 100e6,
    params: dict[str, Any] | None = None,
) -> Scheduler:
    """``nodes`` servers of ``slots`` slots caching ``cache_files`` files each, reading
    ``n_files`` files of ``file_events`` events through one shared archive link."""
    space = DataSpace.uniform(n_files * file_events, EVENT_BYTES, file_events=file_events)
    file_bytes = file_events * EVENT_BYTES
    servers = tuple(
        Node(i, cache_files * file_bytes, slots=slots, tertiary_bytes_per_s=None)
        for i in range(nodes)
    )
    topology = Topology(servers, links=(Link("site:site0", "tertiary", archive_bytes_per_s),))
    return Scheduler(topology, space, build_policy(policy, **(params or {})), cost=CostModel())
