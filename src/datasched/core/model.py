"""The scheduling model: jobs, subjobs, nodes, the cluster and its cost model.

These are the nouns of ponce-hersch §2.4 and DESIGN.md ("Data model"). Everything here is an
immutable value; the mutable bookkeeping lives in :mod:`datasched.core.scheduler`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

from datasched.core.intervals import IntervalSet

__all__ = [
    "ClusterSpec",
    "CostModel",
    "Job",
    "Node",
    "Pipelining",
    "Source",
    "Subjob",
]


class Source(enum.IntEnum):
    """Where a node reads an event from (ponce-hersch §2.3, Figure 1)."""

    CACHE = 0
    """The node's own disk cache."""
    PEER = 1
    """Another node's disk cache, over the cluster network (ponce-hersch §4.2)."""
    TERTIARY = 2
    """Central (tape-backed) storage, at its per-node bandwidth."""


class Pipelining(enum.Enum):
    """Which I/O is overlapped with computation (ponce-hersch §7)."""

    NONE = "none"
    TERTIARY = "tertiary"
    DISK = "disk"
    BOTH = "both"

    @property
    def tertiary(self) -> bool:
        return self in (Pipelining.TERTIARY, Pipelining.BOTH)

    @property
    def disk(self) -> bool:
        return self in (Pipelining.DISK, Pipelining.BOTH)


@dataclass(frozen=True, slots=True)
class CostModel:
    """What reading and processing one event costs (ponce-hersch §2.4 and §7).

    Without pipelining the time per event is CPU plus I/O; with pipelining of that kind of I/O
    it is ``max(cpu, io)``: the next event is read while the current one is processed. Reads
    from a peer's cache cross the network and the peer's disk, so they go at the slower of the
    two, and count as disk I/O for pipelining (they are disk reads, only remote).
    """

    cpu_s_per_event: float = 0.2
    bytes_per_event: float = 600e3
    disk_bytes_per_s: float = 10e6
    tertiary_bytes_per_s: float = 1e6
    network_bytes_per_s: float = 125e6
    pipelining: Pipelining = Pipelining.NONE

    def __post_init__(self) -> None:
        for name in (
            "cpu_s_per_event",
            "bytes_per_event",
            "disk_bytes_per_s",
            "tertiary_bytes_per_s",
            "network_bytes_per_s",
        ):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name}: must be positive, got {value!r}")

    def io_s_per_event(self, source: Source) -> float:
        """Seconds to read one event from ``source``."""
        if source is Source.CACHE:
            return self.bytes_per_event / self.disk_bytes_per_s
        if source is Source.PEER:
            return self.bytes_per_event / min(self.disk_bytes_per_s, self.network_bytes_per_s)
        return self.bytes_per_event / self.tertiary_bytes_per_s

    def s_per_event(self, source: Source) -> float:
        """Wall-clock seconds to read and process one event read from ``source``."""
        io = self.io_s_per_event(source)
        overlapped = self.pipelining.tertiary if source is Source.TERTIARY else self.pipelining.disk
        if overlapped:
            return max(self.cpu_s_per_event, io)
        return self.cpu_s_per_event + io

    @property
    def reference_s_per_event(self) -> float:
        """Time per event of a lone job on one node without cache and without pipelining.

        This is the numerator of the paper's speedup (ponce-hersch §3.4: "the single job single
        node processing time in processing farm oriented job scheduling"), and does not change
        with the pipelining switch: pipelining shows up as speedup.
        """
        return self.cpu_s_per_event + self.bytes_per_event / self.tertiary_bytes_per_s


@dataclass(frozen=True, slots=True)
class Node:
    """A worker node: one or more processing slots and a disk cache of ``cache_bytes``."""

    node_id: int
    cache_bytes: float
    slots: int = 1
    site: str = ""


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """The nodes of a cluster and the cost model they share."""

    nodes: tuple[Node, ...]
    cost: CostModel = field(default_factory=CostModel)

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("nodes: a cluster needs at least one node")
        ids = [n.node_id for n in self.nodes]
        if ids != list(range(len(ids))):
            raise ValueError("nodes: node ids must be 0..n-1 in order")
        for n in self.nodes:
            if n.cache_bytes < 0:
                raise ValueError(f"cache_bytes: must not be negative, got {n.cache_bytes!r}")
            if n.slots != 1:
                raise ValueError("slots: only single-slot nodes are modelled so far")

    @classmethod
    def uniform(
        cls, n_nodes: int, cache_bytes: float, cost: CostModel | None = None
    ) -> ClusterSpec:
        """``n_nodes`` identical single-CPU nodes (ponce-hersch §2.4)."""
        if n_nodes < 1:
            raise ValueError(f"n_nodes: must be positive, got {n_nodes!r}")
        nodes = tuple(Node(node_id=i, cache_bytes=cache_bytes) for i in range(n_nodes))
        return cls(nodes=nodes, cost=cost if cost is not None else CostModel())

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    def cache_events(self, node_id: int) -> int:
        """How many events fit in a node's cache."""
        return int(self.nodes[node_id].cache_bytes // self.cost.bytes_per_event)


@dataclass(frozen=True, slots=True)
class Job:
    """A user's request to process a set of events (ponce-hersch §2.4, DESIGN.md)."""

    job_id: int
    submit_s: float
    data: IntervalSet
    user: str = "user"
    group: str = "default"
    priority: float = 0.0

    @property
    def n_events(self) -> int:
        return self.data.length


class Subjob(NamedTuple):
    """A part of a job's data that runs, or waits to run, on one node at a time.

    The live subjobs of a job always partition what is left of it, so every event is processed
    exactly once; suspending a subjob retires it and creates new ones, and splitting one keeps
    it (same id, :meth:`shrunk`) with a new subjob for the released part.
    ``cached_on`` names the node whose cache holds the data, when the subjob was cut that way;
    ``preemptible`` marks work taken from another node's queue that cached work may displace
    (ponce-hersch Table 3). A named tuple, not a dataclass: tens are built per job (see
    :mod:`datasched.core.events`).
    """

    subjob_id: int
    job_id: int
    data: IntervalSet
    cached_on: int | None = None
    preemptible: bool = False

    def shrunk(self, released: IntervalSet) -> Subjob:
        """The same subjob without ``released`` (what a Shrink took from it)."""
        return Subjob(
            self.subjob_id, self.job_id, self.data - released, self.cached_on, self.preemptible
        )
