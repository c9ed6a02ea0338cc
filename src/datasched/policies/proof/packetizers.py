"""PROOF's packetizers, one per job: which packet a worker that asks gets next (ganis et al.
§2 and appendix A; ROOT's ``TPacketizer`` and ``TPacketizerAdaptive`` as the PROOF notes
describe them). Pure bookkeeping: the policies of :mod:`datasched.policies.proof.policy` drive them.

A job's data is cut into *pieces*: the part of the job in one file of the data space, further
cut where a different node holds it (range-grained caches hold any event range). Each piece
lives on a *file node*: the node whose disk holds it, or central storage (``None``, ROOT's
"no-host"). A packet is a part of one piece, taken from its head. A worker is a slot; the
node it sits on is its host, and the file node of that host is its *local* one.

Counters follow ROOT: ``my`` (workers whose host is the node), ``ext`` (workers from other
hosts with a current piece there), ``run`` (workers with a current piece there). ROOT's
adaptive packetizer counts local workers in ``ext`` too (a quirk of its node names, see the
notes); here ``ext`` counts only workers from other hosts, as the paper means it. The limit
on workers per node applies to nodes, not to central storage, which every node reaches by
its own path in the cluster model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from datasched.core.intervals import IntervalSet
from datasched.policies.proof.nodes import FileNode, Locate, Piece, Roster, Worker

__all__ = [
    "AdaptivePacketizer",
    "BasicPacketizer",
    "FileNode",
    "Locate",
    "Packetizer",
    "Piece",
    "Roster",
    "Worker",
]


class Workers(Mapping[int, Worker]):
    """A packetizer's workers by slot, those of its roster made as they are looked up. In no
    particular order: the roster's slots not made yet, then the others."""

    __slots__ = ("_pk",)

    def __init__(self, pk: Packetizer) -> None:
        self._pk = pk

    def __getitem__(self, slot: int) -> Worker:
        w = self._pk.worker(slot)
        if w is None:
            raise KeyError(slot)
        return w

    def __contains__(self, slot: object) -> bool:
        return isinstance(slot, int) and self._pk.has_worker(slot)

    def __len__(self) -> int:
        return self._pk.n_workers

    def __iter__(self) -> Iterator[int]:
        pk = self._pk
        roster = pk._roster
        if roster is not None:
            yield from [s for s in roster.host if s not in pk._out]
        yield from list(pk._made)


class Packetizer:
    """The state common to both packetizers: pieces, file nodes, workers, accounting."""

    def __init__(
        self,
        data: IntervalSet,
        files: Iterable[tuple[int, int, int]],
        locate: Locate,
        *,
        max_workers_per_node: int | None,
    ) -> None:
        """``files``: ``(index, start, stop)`` of the data space's files ``data`` touches."""
        self.total = data.length
        self.max_per_node = max_workers_per_node
        self.nodes: dict[int, FileNode] = {}
        self.pieces: dict[int, list[Piece]] = {}
        """File index -> its pieces."""
        self._made: dict[int, Worker] = {}
        """Slot -> its worker, for the workers made: registered one by one, or of the roster
        and asked (or looked up) once."""
        self._roster: Roster | None = None
        """The slots registered at once (:meth:`add_roster`), made as they ask."""
        self._roster_nodes: dict[int, FileNode] = {}
        """The file nodes when the roster was registered: a roster slot's home, while there."""
        self._out: set[int] = set()
        """The roster's slots no longer waiting to be made: made, removed or registered
        again one by one."""
        self.n_workers = 0
        """The workers registered, made or not."""
        self._perfs: dict[float, int] = {}
        """Performance index -> workers with it: the best of them sizes packets
        (:meth:`best_perf`) without a pass over every worker at every packet."""
        self._perfs_shared = False
        """Whether ``_perfs`` is still the roster's (copied before it changes)."""
        self._best: float | None = None
        """The highest index in ``_perfs``; None: to find again (its last worker left)."""
        self.processed = 0
        self.cum_busy_s = 0.0
        self.handed = 0
        for index, start, stop in files:
            part = data.clip(start, stop)
            for a, b, holder in locate(start, stop):
                events = part.clip(a, b)
                if events:
                    self._add_piece(index, events, holder)

    # -- building ---------------------------------------------------------------------------

    def file_node(self, node: int | None) -> FileNode:
        key = -1 if node is None else node
        fn = self.nodes.get(key)
        if fn is None:
            fn = self.nodes[key] = FileNode(node)
        return fn

    def _add_piece(self, index: int, events: IntervalSet, holder: int | None) -> None:
        fn = self.file_node(holder)
        piece = Piece(index, events, events, fn)
        fn.unallocated.append(piece)
        fn.events += events.length
        self.pieces.setdefault(index, []).append(piece)

    @property
    def workers(self) -> Workers:
        """The registered workers by slot (a roster's made as they are looked up)."""
        return Workers(self)

    def add_worker(self, slot: int, host: int, perf: float = 100.0) -> None:
        home = self.nodes.get(host)
        if home is not None:
            home.my += 1
        old = self._made.get(slot)
        if old is not None:
            self._forget_perf(old.perf)
        elif self._waiting(slot):
            # Registered again over its roster registration: replaced, as a worker is.
            assert self._roster is not None
            self._out.add(slot)
            self._forget_perf(self._roster.perf[slot])
        else:
            self.n_workers += 1
        self._made[slot] = Worker(slot, host, home, home, perf)
        perfs = self._own_perfs()
        perfs[perf] = perfs.get(perf, 0) + 1
        if self._best is not None and perf > self._best:
            self._best = perf

    def add_roster(self, roster: Roster) -> None:
        """Register every slot of ``roster`` (as :meth:`add_worker` for each would) in time
        independent of its size: the node counters from its count per node, the performance
        histogram shared until it changes; a slot's :class:`Worker` is made when it is first
        looked up (:meth:`worker`). Only a packetizer with no worker takes a roster."""
        if self.n_workers:
            raise ValueError("a roster is registered only with no worker registered")
        self._roster = roster
        self._out = set()
        self._made = {}
        self._roster_nodes = dict(self.nodes)
        per_host = roster.per_host
        for fn in self.nodes.values():
            if fn.node is not None:
                fn.my += per_host.get(fn.node, 0)
        self.n_workers = len(roster)
        self._perfs = roster.perfs
        self._perfs_shared = True
        self._best = None

    def _waiting(self, slot: int) -> bool:
        """Whether ``slot`` is registered by the roster and not made yet."""
        roster = self._roster
        return roster is not None and slot in roster.host and slot not in self._out

    def _roster_home(self, host: int) -> FileNode | None:
        """The home a roster worker on ``host`` has: its node's file node when the roster was
        registered, while that is still the job's (:meth:`relocate` detaches the workers
        of a node lost; a file node made later is no worker's home, as with
        :meth:`add_worker`)."""
        fn = self._roster_nodes.get(host)
        return fn if fn is not None and self.nodes.get(host) is fn else None

    def has_worker(self, slot: int) -> bool:
        """Whether ``slot`` is a registered worker (made or not)."""
        return slot in self._made or self._waiting(slot)

    def worker(self, slot: int) -> Worker | None:
        """The worker on ``slot`` (made now if it is the roster's), or None."""
        w = self._made.get(slot)
        if w is not None or not self._waiting(slot):
            return w
        roster = self._roster
        assert roster is not None
        host = roster.host[slot]
        home = self._roster_home(host)
        self._out.add(slot)
        w = self._made[slot] = Worker(slot, host, home, home, roster.perf[slot])
        return w

    def worker_made(self, slot: int) -> bool:
        """Whether the :class:`Worker` of ``slot`` exists: registered one by one, or of the
        roster and looked up since."""
        return slot in self._made

    def may_ask(self, slot: int, force: bool = False) -> bool:
        """Whether ``slot`` is a worker that asks for packets: registered and not done with
        the query (``force``: even if it is), without making it."""
        w = self._made.get(slot)
        if w is not None:
            return force or not w.finished
        return self._waiting(slot)  # a worker not made yet never asked

    def remove_worker(self, slot: int) -> None:
        w = self._made.pop(slot, None)
        if w is None:
            if not self._waiting(slot):
                return
            assert self._roster is not None
            self._out.add(slot)
            self.n_workers -= 1
            self._forget_perf(self._roster.perf[slot])
            home = self._roster_home(self._roster.host[slot])
            if home is not None:
                home.my -= 1
            return
        self.n_workers -= 1
        self._forget_perf(w.perf)
        self._drop_current(w)
        if w.home is not None:
            w.home.my -= 1

    def _own_perfs(self) -> dict[float, int]:
        if self._perfs_shared:
            self._perfs = dict(self._perfs)
            self._perfs_shared = False
        return self._perfs

    def _forget_perf(self, perf: float) -> None:
        perfs = self._own_perfs()
        left = perfs[perf] - 1
        if left:
            perfs[perf] = left
        else:
            del perfs[perf]
            if perf == self._best:
                self._best = None

    def best_perf(self, default: float) -> float:
        """The highest performance index among the workers (``default`` with none), kept
        between packets: found again over the distinct indexes only when the last worker
        with the best one leaves, not over every worker at every packet, as the workers grow
        with the cluster (docs/scale.md)."""
        if not self._perfs:
            return default
        if self._best is None:
            self._best = max(self._perfs)
        return self._best

    # -- state -------------------------------------------------------------------------------

    @property
    def remaining(self) -> int:
        """Events not processed yet (handed out or not)."""
        return self.total - self.processed

    def has_todo(self) -> bool:
        """Whether events are left to hand out."""
        return self.total > self.handed

    def revive(self) -> None:
        """Workers that found nothing ask again (work came back, or nothing runs)."""
        for w in self._made.values():  # one not made yet never asked
            w.finished = False

    def relocate(self, node: int, locate: Locate) -> None:
        """``node`` is gone: its pieces move to wherever their events are held now (central
        storage at worst), with the workers reading them; its counters go. A piece held in
        several places now is cut, the original keeping its first part (it may be a worker's
        current piece: its events must stay in one place only)."""
        lost = self.nodes.pop(node, None)
        if lost is None:
            return
        for pieces in self.pieces.values():
            for p in [p for p in pieces if p.node is lost]:
                runs = locate(p.span.start, p.span.stop)
                whole, todo = p.span, p.todo
                for i, (a, b, holder) in enumerate(runs):
                    span = whole.clip(a, b)
                    if not span:
                        continue
                    fn = self.file_node(holder)
                    if i == 0:
                        piece, p.span, p.todo, p.node, p.active = (
                            p,
                            span,
                            todo.clip(a, b),
                            fn,
                            False,
                        )
                        self._move_readers(piece, fn)
                    else:
                        piece = Piece(p.file, span, todo.clip(a, b), fn, started=p.started)
                        pieces.append(piece)
                    fn.events += piece.todo.length
                    if piece.todo:
                        self._list(piece)
        for w in self._made.values():  # one not made yet finds its home gone when made
            if w.home is lost:
                w.home = w.local = None

    def _move_readers(self, piece: Piece, fn: FileNode) -> None:
        """The workers whose current piece moved to ``fn`` now count there."""
        for w in self._made.values():  # one not made yet has no current piece
            if w.current is piece:
                w.current_node = fn
                fn.run += 1
                if fn.node != w.host:
                    fn.ext += 1

    def _list(self, piece: Piece) -> None:
        """Put a piece with events to hand out where a worker will find it."""
        fn = piece.node
        if not piece.started:
            fn.unallocated.append(piece)
        elif not piece.active:
            piece.active = True
            fn.active.append(piece)

    def give_back(self, data: IntervalSet) -> None:
        """Events handed out and not processed come back (a stopped packet's rest)."""
        self.handed -= data.length
        for pieces in self.pieces.values():
            for p in pieces:
                back = data & p.span
                if back:
                    p.todo = p.todo | back
                    data = data - back
                    self._list(p)
                    if not data:
                        return
        if data:
            raise ValueError(f"events {data} came back to a job that never had them")

    # -- accounting --------------------------------------------------------------------------

    def packet_done(self, slot: int, piece: Piece, events: int, seconds: float) -> None:
        """A packet of ``piece`` left ``slot`` having processed ``events`` in ``seconds``."""
        self.processed += events
        self.cum_busy_s += seconds
        piece.node.processed += events
        w = self.worker(slot)
        if w is None:
            return
        w.processed += events
        w.busy_s += seconds
        if w.current is piece:
            w.file_events += events
            w.file_s += seconds

    # -- the request ---------------------------------------------------------------------------

    def next_packet(self, slot: int, *, force: bool = False) -> tuple[Piece, IntervalSet] | None:
        """The packet for the worker on ``slot``, or None (it is then done with the job).
        ``force`` ignores the limit on workers per node (used only when nothing of the job
        runs any more: a limit must not strand it)."""
        w = self.worker(slot)
        if w is None:
            raise KeyError(slot)
        if w.current is not None and not w.current.todo:
            self._drop_current(w)
        if w.current is None:
            piece = self._choose(w, force)
            if piece is None:
                w.finished = True
                return None
            self._take(w, piece)
        piece = w.current
        assert piece is not None
        n = self._size(w, piece)
        packet, piece.todo = piece.todo.head(n)
        self.handed += packet.length
        return piece, packet

    def _take(self, w: Worker, piece: Piece) -> None:
        fn = piece.node
        if not piece.started:
            piece.started = True
            self._on_first_take(piece)
        if not piece.active:
            piece.active = True
            fn.active.append(piece)
        w.current, w.current_node = piece, fn
        w.file_events, w.file_s = 0, 0.0
        fn.run += 1
        if fn.node != w.host:
            fn.ext += 1

    def _drop_current(self, w: Worker) -> None:
        fn = w.current_node
        if fn is not None:
            fn.run -= 1
            if fn.node != w.host:
                fn.ext -= 1
        w.current = w.current_node = None
        w.file_events, w.file_s = 0, 0.0

    def _on_first_take(self, piece: Piece) -> None:
        """A piece is handed out for the first time."""

    def _under_limit(self, fn: FileNode, count: int, force: bool) -> bool:
        limit = self.max_per_node
        return force or limit is None or fn.node is None or count < limit

    def _choose(self, w: Worker, force: bool) -> Piece | None:
        raise NotImplementedError

    def _size(self, w: Worker, piece: Piece) -> int:
        raise NotImplementedError


class BasicPacketizer(Packetizer):
    """ROOT's ``TPacketizer`` (appendix A.1): local pieces first, then remote ones, from the
    node with the fewest workers, never past ``max_workers_per_node`` on one node; packets
    of total / (``fraction`` x workers) events, scaled by the worker's performance index."""

    def __init__(
        self,
        data: IntervalSet,
        files: Iterable[tuple[int, int, int]],
        locate: Locate,
        *,
        fraction: int = 20,
        max_workers_per_node: int | None = 4,
        packet_events: int | None = None,
    ) -> None:
        super().__init__(data, files, locate, max_workers_per_node=max_workers_per_node)
        self.fraction = fraction
        self.packet_events = packet_events

    def _choose(self, w: Worker, force: bool) -> Piece | None:
        if w.local is not None:
            piece = w.local.take_unallocated()
            if piece is not None:
                return piece
            w.local = None  # nothing left to start here: detached for good
        for has, take in _LISTS:
            candidates = [fn for fn in self.nodes.values() if has(fn)]
            if not candidates:
                continue
            # Only the node with the fewest workers is considered.
            first = min(candidates, key=lambda fn: (fn.my + fn.ext, fn.key))
            if not self._under_limit(first, first.my + first.ext, force):
                return None
            piece = take(first)
            if piece is not None:
                return piece
        return None

    def _size(self, w: Worker, piece: Piece) -> int:
        if self.packet_events is not None:
            base = self.packet_events
        else:
            base = max(self.total // (self.fraction * max(self.n_workers, 1)), 1)
        best = self.best_perf(w.perf)
        n = max(int(base * w.perf / best), 1)
        return min(n, piece.todo.length)


class AdaptivePacketizer(Packetizer):
    """ROOT's ``TPacketizerAdaptive`` (appendix A.2, strategy 1): a worker predicted to end
    its local part early takes remote pieces before it is done; nodes are served fewest
    running workers first; packets last about a ``fraction`` of the job's estimated time
    left, at the worker's measured rate, within [``min_packet_s``, ``max_packet_s``]; the
    first packet of a worker is ``calibration_events``; a piece's last packet takes what
    would be left under half a packet."""

    def __init__(
        self,
        data: IntervalSet,
        files: Iterable[tuple[int, int, int]],
        locate: Locate,
        *,
        fraction: float = 4.0,
        min_packet_s: float = 3.0,
        max_packet_s: float = 20.0,
        calibration_events: int = 1000,
        local_preference: float = 1.2,
        max_workers_per_node: int | None = None,
    ) -> None:
        super().__init__(data, files, locate, max_workers_per_node=max_workers_per_node)
        self.fraction = fraction
        self.min_packet_s = min_packet_s
        self.max_packet_s = max_packet_s
        self.calibration_events = calibration_events
        self.local_preference = local_preference
        self.events_on_remote = -1
        """ROOT's ``NEventsOnRemLoc``: events on nodes with no worker of the job; counted
        when the first worker asks (workers join after the pieces are made)."""

    def _on_first_take(self, piece: Piece) -> None:
        if piece.node.my == 0 and self.events_on_remote > 0:
            self.events_on_remote = max(self.events_on_remote - piece.span.length, 0)

    @staticmethod
    def _order(fn: FileNode) -> tuple[int, int, int]:
        # Fewest running workers first; on a tie, the most events left.
        return (fn.run, fn.processed - fn.events, fn.key)

    def _first(self, has: Callable[[FileNode], bool]) -> FileNode | None:
        """The first node by :meth:`_order` of those ``has`` holds for (a worker's first
        request asks twice: one pass, no list)."""
        first: FileNode | None = None
        best: tuple[int, int, int] | None = None
        for fn in self.nodes.values():
            if has(fn):
                order = self._order(fn)
                if best is None or order < best:
                    first, best = fn, order
        return first

    def _choose(self, w: Worker, force: bool) -> Piece | None:
        if self.events_on_remote < 0:
            self.events_on_remote = sum(
                fn.events - fn.processed for fn in self.nodes.values() if fn.my == 0
            )
        own = w.local
        if own is not None and self._open_local(w, own, force):
            piece = own.take_unallocated() or own.take_active()
            if piece is not None:
                return piece
            w.local = None  # nothing left here: detached
        for has, take in _LISTS:
            first = self._first(has)
            if first is None:
                continue
            if not self._under_limit(first, first.ext, force):
                return None
            piece = take(first)
            if piece is not None:
                return piece
        return None

    def _open_local(self, w: Worker, own: FileNode, force: bool) -> bool:
        """Whether the worker stays on its own node for its next piece (the notes, step 3)."""
        first = self._first(FileNode.has_unallocated)
        if first is None or not self._under_limit(first, first.ext, force):
            return True  # no remote piece is possible
        if own.run > own.my - 1:
            return True  # workers from other hosts already help on its node
        left = max(self.remaining, 1)
        avg_left = left / max(self.n_workers, 1)
        pref = self.local_preference - self.events_on_remote / (0.4 * left)
        local_left = own.events_left_per_worker()
        if w.rate == 0.0:
            return (
                local_left * pref > avg_left
                or first.events_left_per_worker() < local_left * pref
                or first.ext > 1
                or first.run == 0
            )
        avg_rate = self.processed / self.cum_busy_s if self.cum_busy_s > 0 else w.rate
        return (local_left / w.rate) * pref > avg_left / avg_rate or (
            first.events_left_per_worker() < local_left * pref
        )

    def _size(self, w: Worker, piece: Piece) -> int:
        rate = w.file_rate or w.rate
        if rate == 0.0 or self.processed == 0:
            n = self.calibration_events
        else:
            # The cluster's throughput, the job's time left at it, a fraction of that.
            cluster_rate = self.processed / (self.cum_busy_s / max(self.n_workers, 1))
            packet_s = self.remaining / cluster_rate / self.fraction
            packet_s = min(max(packet_s, self.min_packet_s), self.max_packet_s)
            n = max(int(rate * packet_s), 1)
        left = piece.todo.length
        return left if 1.5 * n >= left else n


_LISTS = (
    (FileNode.has_unallocated, FileNode.take_unallocated),
    (FileNode.has_active, FileNode.take_active),
)
"""Where a worker looks for a piece on other nodes: pieces nobody started, then pieces being
read (round robin)."""
