"""What a PROOF packetizer keeps track of (see :mod:`datasched.policies.proof.packetizers`): a
job's *pieces* (its part in one file, cut where a different node holds it), the *file nodes*
that hold them with ROOT's counters, the *workers* (slots) with their measured rates, and the
*roster* of a cluster's slots that a query gets at once. Pure bookkeeping."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from datasched.core.intervals import IntervalSet

__all__ = ["FileNode", "Locate", "Piece", "Roster", "Worker"]

_EMPTY = IntervalSet()


@dataclass(slots=True, eq=False)
class Piece:
    """A job's events in one file (and on one file node), not yet all handed out."""

    file: int
    span: IntervalSet
    """Every event of the piece, handed out or not."""
    todo: IntervalSet
    node: FileNode
    started: bool = False
    active: bool = False
    """Listed among its node's active pieces (started, with events still to hand out)."""


@dataclass(slots=True, eq=False)
class FileNode:
    """A node holding pieces of the job (or central storage, ``node`` None)."""

    node: int | None
    unallocated: deque[Piece] = field(default_factory=deque)
    active: list[Piece] = field(default_factory=list)
    next_active: int = 0
    my: int = 0
    ext: int = 0
    run: int = 0
    events: int = 0
    processed: int = 0

    @property
    def key(self) -> int:
        return -1 if self.node is None else self.node

    def events_left_per_worker(self) -> float:
        """ROOT's ``EventsLeftPerSlave``: what is left here per worker on it, counting one
        more (the one asking)."""
        return (self.events - self.processed) / (self.run + 1)

    def take_unallocated(self) -> Piece | None:
        while self.unallocated:
            piece = self.unallocated.popleft()
            if piece.todo and not piece.started:
                return piece
        return None

    def take_active(self) -> Piece | None:
        """The next active piece, round robin (several workers may share one)."""
        active = self.active
        while active:
            i = self.next_active % len(active)
            piece = active[i]
            if piece.todo:
                self.next_active = i + 1
                return piece
            active.pop(i)
            piece.active = False
        return None

    def has_unallocated(self) -> bool:
        return any(p.todo and not p.started for p in self.unallocated)

    def has_active(self) -> bool:
        return any(p.todo for p in self.active)


@dataclass(slots=True, eq=False)
class Worker:
    """A slot working for the job."""

    slot: int
    host: int
    home: FileNode | None
    """The file node of its host (its local data), while it has one."""
    local: FileNode | None
    """``home`` until the worker finds nothing left there (ROOT detaches it for good)."""
    perf: float = 100.0
    current: Piece | None = None
    current_node: FileNode | None = None
    processed: int = 0
    busy_s: float = 0.0
    file_events: int = 0
    file_s: float = 0.0
    finished: bool = False
    """It asked and got nothing: in PROOF it is done with this query."""

    @property
    def rate(self) -> float:
        return self.processed / self.busy_s if self.busy_s > 0 else 0.0

    @property
    def file_rate(self) -> float:
        return self.file_events / self.file_s if self.file_s > 0 else 0.0


class Roster:
    """Every slot of the cluster as a worker of a query (PROOF without resource scheduling:
    every query gets every worker), built once per cluster and shared by the jobs'
    packetizers. A packetizer given it (``Packetizer.add_roster``) counts its slots
    registered as ``Packetizer.add_worker`` one by one would, but makes a slot's
    :class:`Worker` only when the slot first asks, so that a job handed out in fewer packets
    than the cluster has slots costs no pass over them (docs/performance.md). Not changed
    once built: a node joining or lost makes a new one."""

    __slots__ = ("host", "per_host", "perf", "perfs")

    def __init__(self, workers: Iterable[tuple[int, int, float]]) -> None:
        """``workers``: ``(slot, host, perf)``, each slot once."""
        self.host: dict[int, int] = {}
        """Slot -> its node."""
        self.perf: dict[int, float] = {}
        """Slot -> its performance index."""
        self.per_host: dict[int, int] = {}
        """Node -> its slots in the roster."""
        self.perfs: dict[float, int] = {}
        """Performance index -> slots with it."""
        for slot, host, perf in workers:
            if slot in self.host:
                raise ValueError(f"slot {slot} is in the roster twice")
            self.host[slot] = host
            self.perf[slot] = perf
            self.per_host[host] = self.per_host.get(host, 0) + 1
            self.perfs[perf] = self.perfs.get(perf, 0) + 1

    def __len__(self) -> int:
        return len(self.host)


_Run = tuple[int, int, int | None]
Locate = Callable[[int, int], list[_Run]]
"""``locate(start, stop)``: the runs ``(a, b, node)`` of ``[start, stop)`` held by one node
(``None``: central storage only)."""
