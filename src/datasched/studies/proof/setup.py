"""The clusters, data and workloads of the PROOF experiments (ganis et al. §2.2 and §3.3).

Everything the paper gives is taken from it: 34 machines, 16 of them workers for the job, a
single SATA disk each, Gigabit Ethernet, one day of four groups with quotas of 10 to 40 %.
What it does not give is chosen here once, from the hardware of the time, and said: disks
read 60 MB/s, the network carries 125 MB/s, an ESD event is 500 KB, and the job is "I/O
intensive" in the plain sense that a worker spends as long computing an event as reading it
from its own disk (8.3 ms each). Disks are shared by their readers
(:attr:`~datasched.core.model.CostModel.shared_disks`), the contention the paper names.

How the data set was spread is not given either ("randomly distributed", "non-uniform"):
here every node draws a weight from a log-normal distribution (``spread`` its sigma) and each
file goes to a node with probability in proportion to the weights, a fresh draw per seed.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

from datasched.core.data import DataSpace, FileSpec
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Node, Topology, node_endpoint

__all__ = ["QuotaGroup", "QuotaSetup", "UnevenSetup"]

EVENT_BYTES = 500e3
DISK_BYTES_PER_S = 60e6


@dataclass(frozen=True, slots=True)
class UnevenSetup:
    """The uneven-data job of §2.3: one query over files spread unevenly over 34 nodes, 16 of
    which run a worker; the others only serve their disks."""

    workers: int = 16
    servers: int = 18
    files: int = 300
    file_events: int = 2000
    event_bytes: float = EVENT_BYTES
    cpu_s_per_event: float = EVENT_BYTES / DISK_BYTES_PER_S
    disk_bytes_per_s: float = DISK_BYTES_PER_S
    network_bytes_per_s: float = 125e6
    spread: float = 1.0
    uniform: bool = False
    """Spread the files evenly over the workers' own disks instead (file i on worker i mod
    workers): the uniform case where the paper finds the basic packetizer does well."""
    disk_contention: float = 0.0
    """How a disk's total rate falls with its readers (``CostModel.disk_contention``): 0, the
    reproduction's, keeps it whole; docs/proof.md measures the figures it gives."""

    @property
    def nodes(self) -> int:
        return self.workers + self.servers

    def topology(self) -> Topology:
        room = self.files * self.file_events * self.event_bytes
        return Topology(
            tuple(
                Node(
                    i,
                    room,
                    slots=1 if i < self.workers else 0,
                    network_bytes_per_s=self.network_bytes_per_s,
                )
                for i in range(self.nodes)
            )
        )

    def cost(self) -> CostModel:
        return CostModel(
            cpu_s_per_event=self.cpu_s_per_event,
            disk_bytes_per_s=self.disk_bytes_per_s,
            shared_disks=True,
            disk_contention=self.disk_contention,
        )

    def placement(self, seed: int) -> list[int]:
        """The node of each file."""
        if self.uniform:
            return [i % self.workers for i in range(self.files)]
        rng = random.Random(seed)
        weights = [rng.lognormvariate(0.0, self.spread) for _ in range(self.nodes)]
        return rng.choices(range(self.nodes), weights=weights, k=self.files)

    def space(self, seed: int) -> DataSpace:
        size = round(self.file_events * self.event_bytes)
        space = DataSpace()
        space.add_dataset(
            "esd",
            [
                FileSpec(f"esd/{i:04d}.root", self.file_events, size, replicas=(node_endpoint(n),))
                for i, n in enumerate(self.placement(seed))
            ],
        )
        return space

    def job(self, space: DataSpace) -> Job:
        return Job(0, 0.0, IntervalSet.range(0, space.n_events))

    def bound_s(self, seed: int) -> float:
        """No schedule ends sooner: every worker busy at its fastest (reading its own disk
        alone), or the most loaded disk reading without a break, whichever is longer."""
        per_event = self.cpu_s_per_event + self.event_bytes / self.disk_bytes_per_s
        work = self.files * self.file_events * per_event / self.workers
        counts: dict[int, int] = {}
        for n in self.placement(seed):
            counts[n] = counts.get(n, 0) + 1
        busiest = max(counts.values()) * self.file_events * self.event_bytes
        return max(work, busiest / self.disk_bytes_per_s)


@dataclass(frozen=True, slots=True)
class QuotaGroup:
    name: str
    target_percent: float
    users: int


@dataclass(frozen=True, slots=True)
class QuotaSetup:
    """The quota test of §3.3: four groups with target CPU shares of 10 to 40 %, whose users
    run one analysis after another for a day, on a cluster whose every node holds part of the
    data. Each query gets every worker (PROOF's default), so the worker-level control by nice
    values decides the shares, as in the ALICE test."""

    nodes: int = 32
    hours: float = 24.0
    groups: tuple[QuotaGroup, ...] = (
        QuotaGroup("g10", 10.0, 3),
        QuotaGroup("g20", 20.0, 3),
        QuotaGroup("g30", 30.0, 3),
        QuotaGroup("g40", 40.0, 3),
    )
    files_per_node: int = 20
    file_events: int = 2000
    event_bytes: float = EVENT_BYTES
    cpu_s_per_event: float = 0.05
    """A CPU-heavier analysis than the I/O test's: a quota is on CPU."""
    query_files: tuple[int, int] = (10, 40)
    seed: int = 0

    @property
    def horizon_s(self) -> float:
        return self.hours * 3600.0

    def quotas(self) -> str:
        """The policy's ``quotas`` parameter."""
        return ",".join(f"{g.name}={g.target_percent:g}" for g in self.groups)

    def topology(self) -> Topology:
        room = self.files_per_node * self.file_events * self.event_bytes
        return Topology(tuple(Node(i, room) for i in range(self.nodes)))

    def cost(self) -> CostModel:
        return CostModel(
            cpu_s_per_event=self.cpu_s_per_event,
            disk_bytes_per_s=DISK_BYTES_PER_S,
            shared_disks=True,
        )

    def space(self) -> DataSpace:
        size = round(self.file_events * self.event_bytes)
        n = self.nodes * self.files_per_node
        space = DataSpace()
        space.add_dataset(
            "data",
            [
                FileSpec(
                    f"data/{i:05d}.root",
                    self.file_events,
                    size,
                    replicas=(node_endpoint(i % self.nodes),),
                )
                for i in range(n)
            ],
        )
        return space

    def workload(self, space: DataSpace) -> tuple[list[Job], Callable[[Job, float], Job | None]]:
        """The first query of every user, and the rule that brings each user's next one
        when the last ends (until the day is over)."""
        rng = random.Random(self.seed)
        ids = itertools.count()
        n_files = len(space.files)

        def query(group: str, user: str, at: float) -> Job:
            k = rng.randint(*self.query_files)
            first = rng.randrange(n_files - k + 1)
            start, stop = space.files[first].start, space.files[first + k - 1].stop
            return Job(next(ids), at, IntervalSet.range(start, stop), user=user, group=group)

        first = [query(g.name, f"{g.name}-u{u}", 0.0) for g in self.groups for u in range(g.users)]

        def follow_up(done: Job, now: float) -> Job | None:
            if now >= self.horizon_s:
                return None
            return query(done.group, done.user, now)

        return first, follow_up
