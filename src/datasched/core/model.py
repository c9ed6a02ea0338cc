"""The scheduling model: jobs, subjobs, the cluster's topology and its cost model.

These are the nouns of the papers and of docs/design.md ("The data model"): nodes with slots and a
disk cache, grouped in sites; links with bandwidths between nodes, sites and tertiary storage; jobs
that name their data as event ranges of a :class:`~datasched.core.data.DataSpace`. Everything
here is an immutable value; the mutable bookkeeping lives in :mod:`datasched.core.scheduler`.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from datasched.core.data import TERTIARY
from datasched.core.intervals import IntervalSet

__all__ = [
    "CostModel",
    "Job",
    "Link",
    "ModelError",
    "Node",
    "Part",
    "Pipelining",
    "Site",
    "Source",
    "Subjob",
    "Topology",
    "node_endpoint",
    "site_endpoint",
]


class ModelError(ValueError):
    """A value of the cluster model is out of range; ``field`` names it."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class Source(enum.IntEnum):
    """Where a node reads an event from (ponce-hersch §2.3, Figure 1)."""

    CACHE = 0
    """The node's own disk cache."""
    PEER = 1
    """Another node's disk cache, over the cluster network (ponce-hersch §4.2)."""
    TERTIARY = 2
    """Central (tape-backed) storage, over the node's path to it."""


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
    """What processing an event costs besides moving its bytes (ponce-hersch §2.4 and §7).

    Bytes are the data space's (per file); bandwidths are the topology's links. Without
    pipelining the time per event is CPU plus I/O; with pipelining of that kind of I/O it is
    ``max(cpu, io)``: the next event is read while the current one is processed. Reads from a
    peer's cache cross the network and the peer's disk, so they go at the slower of the two,
    and count as disk I/O for pipelining (they are disk reads, only remote).
    """

    cpu_s_per_event: float = 0.2
    """CPU seconds per event of a job that does not give its own."""
    fresh_cpu_s_per_event: float = 0.0
    """More CPU per event when the events come from a copy new to the node (tertiary
    storage, a peer): opening the file and parsing its tree's header, spread over the
    file's events. A node's own cached copy stays open between packets (the runtime keeps
    it), so its events do not pay it. 0 in the papers' models."""
    disk_bytes_per_s: float = 10e6
    pipelining: Pipelining = Pipelining.NONE
    packet_overhead_s: float = 0.0
    """Wall seconds each packet costs besides its events: the runtime's round trip through
    the master and Dask (sending it, starting its task, returning its result). The
    simulator charges it once per packet the runtime would cut from a subjob (at least one
    per file it reads, more when the file's part takes longer than the packetizer's aim),
    spread over that packet's events (docs/performance.md, "Per-packet cost"). 0 (the
    default, and the papers' models): nothing charged, every simulation as before."""
    master_s_per_packet: float = 0.0
    """Wall seconds of the master's serial work on each packet (sending it, its task's
    transitions in Dask's scheduler, taking its result): its CPU a packet over its share of
    a core. Unlike ``packet_overhead_s``, charged on the slots in parallel, the master
    serves one packet at a time: the simulator queues each packet's service there at the
    packet's end; the slot computes its next packet meanwhile and waits for what the turn
    outlasts it, its last packet's turn whole (``sim/master.py``;
    docs/performance.md, "Prediction on a shared machine"). 0 (the default, and the papers'
    models): no queue, every simulation as before."""
    user_setup_s: float = 0.0
    """Wall seconds a node's slot spends the first time it runs a job of a user: the
    service starts a sandbox per user, processor and worker (docs/security.md), and keeps
    it for that user's later packets there. Charged on the subjob's first events, spread
    over them; the node is then warm for that user for the rest of the run (a simulation
    can start with nodes warm for some users). 0 (the default, and the papers' models):
    nothing charged, every simulation as before."""
    user_sandboxes_kept: int = 0
    """With ``user_setup_s``: how many users a node keeps warm at once, as a worker keeps at
    most so many idle sandboxes and closes the least recently used: a user pushed out pays
    the setup again. 0 (the default): every user stays warm for the rest of the run."""
    shared_disks: bool = False
    """Whether a node's disk rate is shared by everyone reading it at once (its own slots
    reading its cache, other nodes' slots reading it as a peer), as a fluid: a reader gets at
    most its fair share of ``disk_bytes_per_s`` (max-min over what each would read alone).
    Off (the default, and ponce-hersch's model): every reader gets the whole rate. PROOF's
    results hinge on it: four workers reading one file server's disk go slower."""
    disk_contention: float = 0.0
    """With ``shared_disks``: how much a disk's total rate falls with its readers, as a disk
    whose head seeks between them does: ``n`` readers share ``disk_bytes_per_s / (1 + c (n -
    1))``. 0 (the default): the total stays whole however many read (a fluid, a network link's
    token bucket); 1: ``n`` readers get ``1/n`` of the rate between them. docs/proof.md,
    "Disks whose throughput falls with their readers"."""

    def __post_init__(self) -> None:
        for name in ("cpu_s_per_event", "disk_bytes_per_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ModelError(name, f"must be positive, got {value!r}")
        if not self.disk_contention >= 0:
            raise ModelError(
                "disk_contention", f"must not be negative, got {self.disk_contention!r}"
            )
        if not self.user_setup_s >= 0:
            raise ModelError("user_setup_s", f"must not be negative, got {self.user_setup_s!r}")
        if not self.user_sandboxes_kept >= 0:
            raise ModelError(
                "user_sandboxes_kept", f"must not be negative, got {self.user_sandboxes_kept!r}"
            )
        if not self.packet_overhead_s >= 0:
            raise ModelError(
                "packet_overhead_s", f"must not be negative, got {self.packet_overhead_s!r}"
            )
        if not self.master_s_per_packet >= 0:
            raise ModelError(
                "master_s_per_packet", f"must not be negative, got {self.master_s_per_packet!r}"
            )
        if not self.fresh_cpu_s_per_event >= 0:
            raise ModelError(
                "fresh_cpu_s_per_event", f"must not be negative, got {self.fresh_cpu_s_per_event!r}"
            )

    def s_per_event(self, source: Source, io_s: float, cpu_s: float | None = None) -> float:
        """Wall-clock seconds to read (``io_s``) and process one event read from ``source``."""
        cpu = self.cpu_s_per_event if cpu_s is None else cpu_s
        if source is not Source.CACHE:
            cpu += self.fresh_cpu_s_per_event
        overlapped = self.pipelining.tertiary if source is Source.TERTIARY else self.pipelining.disk
        if overlapped:
            return cpu if cpu > io_s else io_s
        return cpu + io_s


def node_endpoint(node_id: int) -> str:
    """A node's name in the link graph."""
    return f"node:{node_id}"


def site_endpoint(site: str) -> str:
    """A site's name in the link graph (its network switch and storage)."""
    return f"site:{site}"


@dataclass(frozen=True, slots=True)
class Node:
    """A worker node: ``slots`` processing slots sharing a disk cache of ``cache_bytes``.

    A node of zero slots only stores data (a file server, a grid site's storage element).
    Its links: to its site's network at ``network_bytes_per_s`` (reads from peers cross it),
    and its own path to tertiary storage at ``tertiary_bytes_per_s`` (ponce-hersch: a
    bandwidth per node); None sends tertiary reads through the site's links instead (a
    shared archive, as in romosan).
    """

    node_id: int
    cache_bytes: float
    slots: int = 1
    site: str = "site0"
    tertiary_bytes_per_s: float | None = 1e6
    network_bytes_per_s: float = 125e6

    def __post_init__(self) -> None:
        if not (isinstance(self.node_id, int) and self.node_id >= 0):
            raise ModelError("node_id", f"must be a whole number >= 0, got {self.node_id!r}")
        if not self.cache_bytes >= 0:
            raise ModelError("cache_bytes", f"must not be negative, got {self.cache_bytes!r}")
        if not (isinstance(self.slots, int) and self.slots >= 0):
            raise ModelError("slots", f"must be a whole number >= 0, got {self.slots!r}")
        if self.tertiary_bytes_per_s is not None and not self.tertiary_bytes_per_s > 0:
            raise ModelError("tertiary_bytes_per_s", "must be positive")
        if not self.network_bytes_per_s > 0:
            raise ModelError("network_bytes_per_s", "must be positive")
        if not self.site:
            raise ModelError("site", "a node needs a site")


@dataclass(frozen=True, slots=True)
class Site:
    """A group of nodes on one network (a cluster of the grid), with its own storage."""

    name: str
    storage_bytes: float = 0.0


@dataclass(frozen=True, slots=True)
class Link:
    """A link between two endpoints of the graph (``"tertiary"``, ``"site:NAME"``,
    ``"node:ID"``), whose bandwidth the transfers crossing it share."""

    a: str
    b: str
    bytes_per_s: float

    def __post_init__(self) -> None:
        if not self.bytes_per_s > 0:
            raise ModelError("bytes_per_s", f"link {self.a}-{self.b}: must be positive")
        if self.a == self.b:
            raise ModelError("link", f"{self.a}: a link joins two different endpoints")


@dataclass(frozen=True)
class Topology:
    """Nodes, sites and the links between them (docs/design.md, "The data model": Topology).

    A node's own links (to its site, and to tertiary storage if it has a path of its own) are
    derived from the node; ``links`` adds the rest: between sites, and from sites to tertiary
    storage. Nodes join and leave while a cluster runs: :meth:`with_node` gives the topology
    with one more.
    """

    nodes: tuple[Node, ...]
    sites: tuple[Site, ...] = ()
    links: tuple[Link, ...] = ()
    _routes: dict[tuple[str, str], tuple[Link, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _graph: dict[str, list[tuple[str, Link]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ModelError("nodes", "a cluster needs at least one node")
        ids = [n.node_id for n in self.nodes]
        if ids != list(range(len(ids))):
            raise ModelError("nodes", "node ids must be 0..n-1 in order")
        if not any(n.slots for n in self.nodes):
            raise ModelError("slots", "no node has a processing slot")
        names = [s.name for s in self.sites]
        if len(set(names)) != len(names):
            raise ModelError("sites", "two sites have the same name")
        known = set(names)
        missing = sorted({n.site for n in self.nodes} - known)
        if missing:
            # Sites named only by their nodes exist with no storage of their own.
            object.__setattr__(self, "sites", (*self.sites, *(Site(s) for s in missing)))

    @classmethod
    def uniform(
        cls,
        n_nodes: int,
        cache_bytes: float,
        *,
        slots: int = 1,
        tertiary_bytes_per_s: float = 1e6,
        network_bytes_per_s: float = 125e6,
    ) -> Topology:
        """``n_nodes`` identical nodes on one site (ponce-hersch §2.4: 10 single-CPU nodes,
        tertiary storage at 1 MB/s per node, a Gigabit network)."""
        if not (isinstance(n_nodes, int) and n_nodes >= 1):
            raise ModelError("n_nodes", f"must be a positive whole number, got {n_nodes!r}")
        if not (isinstance(slots, int) and slots >= 1):
            raise ModelError("slots", f"must be a positive whole number, got {slots!r}")
        nodes = tuple(
            Node(
                node_id=i,
                cache_bytes=cache_bytes,
                slots=slots,
                tertiary_bytes_per_s=tertiary_bytes_per_s,
                network_bytes_per_s=network_bytes_per_s,
            )
            for i in range(n_nodes)
        )
        return cls(nodes=nodes)

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def n_slots(self) -> int:
        return sum(n.slots for n in self.nodes)

    def with_node(self, node: Node) -> Topology:
        """This topology with ``node`` (a new one, numbered next, or a returning one)."""
        if node.node_id < len(self.nodes):
            nodes = list(self.nodes)
            nodes[node.node_id] = node
            return replace(self, nodes=tuple(nodes))
        if node.node_id != len(self.nodes):
            raise ModelError("node_id", f"a new node is numbered {len(self.nodes)}")
        return replace(self, nodes=(*self.nodes, node))

    def all_links(self) -> Iterable[Link]:
        """Every link: the nodes' own, then the topology's."""
        for n in self.nodes:
            here = node_endpoint(n.node_id)
            yield Link(here, site_endpoint(n.site), n.network_bytes_per_s)
            if n.tertiary_bytes_per_s is not None:
                yield Link(here, TERTIARY, n.tertiary_bytes_per_s)
        yield from self.links

    def route(self, a: str, b: str) -> tuple[Link, ...]:
        """The links a transfer from ``a`` to ``b`` crosses: the path of fewest links,
        ties broken by the order links were declared. Empty when ``a == b``; ModelError when
        nothing joins them."""
        key = (a, b)
        known = self._routes.get(key)
        if known is not None:
            return known
        if a == b:
            return ()
        graph = self._graph
        if not graph:  # built once: a topology is immutable (with_node makes a new one)
            for link in self.all_links():
                graph.setdefault(link.a, []).append((link.b, link))
                graph.setdefault(link.b, []).append((link.a, link))
        came: dict[str, tuple[str, Link] | None] = {a: None}
        todo = deque([a])
        while todo and b not in came:
            here = todo.popleft()
            for there, link in graph.get(here, ()):
                if there not in came:
                    came[there] = (here, link)
                    todo.append(there)
                    if there == b:
                        break
        if b not in came:
            raise ModelError("links", f"no path from {a} to {b}")
        path: list[Link] = []
        at = b
        while (step := came[at]) is not None:
            at, link = step
            path.append(link)
        out = tuple(reversed(path))
        self._routes[key] = out
        return out

    def bandwidth(self, a: str, b: str) -> float:
        """The bottleneck bandwidth between two endpoints (infinite when they are one)."""
        path = self.route(a, b)
        return min((link.bytes_per_s for link in path), default=float("inf"))

    def tertiary_bytes_per_s(self, node_id: int) -> float:
        return self.bandwidth(node_endpoint(node_id), TERTIARY)

    def peer_bytes_per_s(self, node_id: int, peer: int | None = None) -> float:
        """The bandwidth of reads from ``peer``'s cache (any node of the same site when
        None: the node's own link to its site's network is the bound)."""
        if peer is None:
            return self.nodes[node_id].network_bytes_per_s
        return self.bandwidth(node_endpoint(node_id), node_endpoint(peer))

    def rates(
        self,
        node_id: int,
        cost: CostModel,
        bytes_per_event: float,
        cpu_s: float | None = None,
    ) -> tuple[float, float, float]:
        """Seconds per event on ``node_id`` reading from its cache, a peer's and tertiary
        storage (indexed by :class:`Source`)."""
        disk = cost.disk_bytes_per_s
        peer = min(disk, self.peer_bytes_per_s(node_id))
        tertiary = self.tertiary_bytes_per_s(node_id)
        return (
            cost.s_per_event(Source.CACHE, bytes_per_event / disk, cpu_s),
            cost.s_per_event(Source.PEER, bytes_per_event / peer, cpu_s),
            cost.s_per_event(Source.TERTIARY, bytes_per_event / tertiary, cpu_s),
        )

    def reference_s_per_event(self, cost: CostModel, bytes_per_event: float) -> float:
        """Time per event of a lone job on node 0 without cache and without pipelining:
        the numerator of ponce-hersch's speedup (§3.4: "the single job single node
        processing time in processing farm oriented job scheduling"). It does not change
        with the pipelining switch: pipelining shows up as speedup."""
        return cost.cpu_s_per_event + bytes_per_event / self.tertiary_bytes_per_s(0)


@dataclass(frozen=True, slots=True)
class Job:
    """A user's request to process a set of events (ponce-hersch §2.4, docs/design.md)."""

    job_id: int
    submit_s: float
    data: IntervalSet
    user: str = "user"
    group: str = "default"
    priority: float = 0.0
    cpu_s_per_event: float | None = None
    """CPU seconds per event of this job's analysis (None: the cost model's)."""
    files_local: bool = False
    """Romosan's rule: every file of the job is cached (and pinned) on a node before the
    job starts there."""

    @property
    def n_events(self) -> int:
        return self.data.length


class Subjob(NamedTuple):
    """A part of a job's data that runs, or waits to run, on one slot at a time.

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
        # ``tuple.__new__``: the named tuple's own ``__new__`` is Python code, a frame for each
        # (hot; see ``_tuple_new`` below). The same tuple: every field, in order.
        return _tuple_new(
            Subjob,
            (self.subjob_id, self.job_id, self.data - released, self.cached_on, self.preemptible),
        )


_tuple_new = tuple.__new__
"""How a named tuple's own ``__new__`` builds it, for the hot paths that build subjobs, events
and actions (here, core/commands.py, sim/subjobs.py): the ``__new__`` that ``NamedTuple``
writes is Python code, a frame for each tuple (compiled, 0.4 us of the 0.6 us a ``Subjob``
takes; about three a scheduler event, docs/performance.md, "Named tuples built without their
Python constructor"). The same tuples: every field given, in order."""


class Part(NamedTuple):
    """One part of a subjob being re-cut (:meth:`Scheduler.resplit`): its events, and the
    ``cached_on`` and ``preemptible`` of the subjob it becomes."""

    data: IntervalSet
    cached_on: int | None = None
    preemptible: bool = False
