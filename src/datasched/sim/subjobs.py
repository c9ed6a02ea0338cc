"""A subjob running on a simulated slot, costed in closed form (ponce-hersch §2.3, docs/design.md):
its data cut into segments by where each event is read from (own cache, a peer's cache,
tertiary storage), each with its time per event, so its end, and how far it got when it is
stopped or shrunk, follow without an event per collision event. Where caches hold whole
files, a file read from tertiary storage is first fetched whole (a segment of no events
lasting its transfer), then read from the local disk, as the runtime does. A base of
:class:`~datasched.sim.engine.SimEngine`.

Length: one concept, a run's segments: how a start builds them, a shrink cuts them and an
end reads them, with the common cases of job splitting written out beside the general
paths (docs/performance.md, "Job splitting at 1,000 nodes")."""

from __future__ import annotations

import heapq
from bisect import bisect_right

from datasched.core.actions import Assign, Shrink, Start
from datasched.core.cache import NodeCache
from datasched.core.directory import CacheDirectory
from datasched.core.events import SubjobFinished, SubjobShrunk, SubjobStopped
from datasched.core.intervals import IntervalSet
from datasched.core.model import Source, Subjob, _tuple_new
from datasched.sim.disks import SharedDisks
from datasched.sim.fetches import LUMP as _LUMP
from datasched.sim.master import MASTER as _MASTER
from datasched.sim.packetcut import cut_packets
from datasched.sim.recorder import Recorder
from datasched.sim.state import FINISH as _FINISH

__all__ = ["SubjobRuns"]

_EMPTY = IntervalSet()
_CACHE, _TERTIARY = Source.CACHE, Source.TERTIARY


class _Run:
    """A subjob running on a simulated slot.

    A plain class with slots, not a dataclass: compiled, it is an extension type
    (sim/subjobs.pxd), which a dataclass cannot be, and built without the Python frame of a
    dataclass's ``__init__`` (one per subjob started). Compared by identity."""

    __slots__ = (
        "ends",
        "fetch",
        "fetched",
        "fill_duplicates",
        "local",
        "peer_pins",
        "pin",
        "segments",
        "start_s",
        "subjob",
        "turns",
        "version",
    )

    subjob: Subjob
    start_s: float
    segments: list[tuple[int, int, float, Source, int]]
    """``(start, stop, seconds per event, source, peer node or -1)`` in processing order;
    a segment with ``start == stop`` fetches a whole file and lasts ``seconds per event``."""
    ends: list[float]
    """Cumulative seconds from ``start_s`` to the end of each segment."""
    local: IntervalSet
    fetched: IntervalSet
    pin: int | None
    peer_pins: list[tuple[NodeCache, int]]
    fetch: int | None
    version: int
    fill_duplicates: bool
    turns: int | None
    """How many of its packets' turns at the master (its segments of peer ``_MASTER``, in
    order) have been served or are being served (None: no queue at the master)."""

    def __init__(
        self,
        subjob: Subjob,
        start_s: float,
        segments: list[tuple[int, int, float, Source, int]],
        ends: list[float],
        local: IntervalSet,
        fetched: IntervalSet,
        pin: int | None,
        peer_pins: list[tuple[NodeCache, int]],
        fetch: int | None,
        version: int,
        fill_duplicates: bool = True,
    ) -> None:
        self.subjob = subjob
        self.start_s = start_s
        self.segments = segments
        self.ends = ends
        self.local = local
        self.fetched = fetched
        self.pin = pin
        self.peer_pins = peer_pins
        self.fetch = fetch
        self.version = version
        self.fill_duplicates = fill_duplicates
        self.turns = None

    def __repr__(self) -> str:
        return (
            f"_Run(subjob={self.subjob!r}, start_s={self.start_s!r}, "
            f"segments={self.segments!r}, version={self.version!r})"
        )


class SubjobRuns(SharedDisks):
    """Subjobs running on simulated slots (see the module docstring)."""

    # Provided by the engine (besides EngineState's).
    caches: list[NodeCache]
    rec: Recorder
    _file_grain: bool
    _runs: list[_Run | None]
    _default_rates: list[tuple[float, float, float]]
    _rates: dict[tuple[int, float, float | None], tuple[float, float, float]]
    _record_packets: bool

    _world: CacheDirectory | None

    def _log_packet(
        self, run: _Run, slot: int, processed: IntervalSet, by_source: tuple[int, int, int]
    ) -> None:
        raise NotImplementedError

    @property
    def world(self) -> CacheDirectory:
        """Who caches what, across the simulated cluster: built on first use (peer reads,
        duplicate-free filling) and kept up to date from then on; policies that never ask
        do not pay for it."""
        if self._world is None:
            self._world = CacheDirectory(len(self.caches))
            for node, cache in enumerate(self.caches):
                self._world.add(node, cache.content)
        return self._world

    def _rates_of(
        self, node: int, bytes_per_event: float, cpu: float | None
    ) -> tuple[float, float, float]:
        key = (node, bytes_per_event, cpu)
        rates = self._rates.get(key)
        if rates is None:
            rates = self.scheduler.topology.rates(node, self.cost, bytes_per_event, cpu)
            self._rates[key] = rates
        return rates

    def _start(self, action: Start | Assign) -> None:
        slot = action.slot
        runs = self._runs
        if slot >= len(runs):
            runs.extend([None] * (slot + 1 - len(runs)))  # a node joined with new slots
        elif runs[slot] is not None:
            raise RuntimeError(f"slot {slot} asked to start a subjob while busy")
        node = self._slot_node[slot]
        sj = action.subjob
        data = sj.data
        cache = self.caches[node]
        local, other = cache.partition(data)
        cpu = self._jobs[sj.job_id].cpu_s_per_event
        setup = self._user_setup(node, sj.job_id) if self.cost.user_setup_s else 0.0
        if not action.peer_reads and not self._file_grain and not self._per_packet and not setup:
            # The common case (range caches, no peer reads, nothing per packet): the
            # segments straight from the cached part and the rest, without the general
            # path's list of pieces and its sort (docs/performance.md, "The constant
            # factor"). The same segments, times and order.
            self._start_plain(action, node, local, other, cpu)
            return
        pieces: list[tuple[int, int, Source, int]] = [(a, b, _CACHE, -1) for a, b in local]
        peer_read = _EMPTY
        peer_pins: list[tuple[NodeCache, int]] = []
        if action.peer_reads and other:
            for start, stop in other:
                for a, b, holders in self.world.holders(start, stop):
                    peers = [h for h in holders if h != node]
                    if peers:
                        peer = min(peers)
                        pieces.append((a, b, Source.PEER, peer))
                        seg = IntervalSet.range(a, b)
                        peer_read = peer_read | seg
                        peer_cache = self.caches[peer]
                        peer_pins.append((peer_cache, peer_cache.pin(seg)))
            other = other - peer_read
        pieces.extend([(a, b, _TERTIARY, -1) for a, b in other])
        pieces.sort()
        fetched = _EMPTY
        fetch = None
        if action.cache_fill:
            fetched = other | peer_read if action.replicate else other
            if fetched and not action.fill_duplicates:
                fetched = fetched - self._held_elsewhere(node, fetched)
            if fetched:
                fetch = cache.begin_fetch(fetched)
        if self._file_grain:
            segments, ends, total = self._file_segments(
                node, pieces, fetched, cpu, (slot, sj.subjob_id, action.peer_reads)
            )
        else:
            spe = self._range_rates(node, cpu)
            segments = []
            ends = []
            total = 0.0
            for a, b, src, peer in pieces:
                per = spe[src]
                segments.append((a, b, per, src, peer))
                total += (b - a) * per
                ends.append(total)
        if self._per_packet:
            packets = self._packets_by_file(segments, isinstance(action, Assign))
            if self.cost.packet_overhead_s > 0:
                segments, ends, total = self._charge_packets(segments, packets)
            if self._master is not None:
                segments, ends, total = self._master_turns(segments, packets)
        if setup:
            segments, ends, total = _with_setup(segments, setup)
        pin = cache.pin(local) if local else None
        version = next(self._versions)
        run = _Run(
            sj,
            self.now,
            segments,
            ends,
            local,
            fetched,
            pin,
            peer_pins,
            fetch,
            version,
            action.fill_duplicates,
        )
        runs[slot] = run
        heapq.heappush(self._heap, (self.now + total, next(self._seq), _FINISH, slot, version))
        if self._readers is not None and segments:
            self._disk_enter(slot, 0)
        if self._master is not None:
            run.turns = 0
            self._master_due(slot, run)

    def _user_setup(self, node: int, job_id: int) -> float:
        """What a subjob of ``job_id`` starting on ``node`` pays first
        (``CostModel.user_setup_s``): the setup, the first time the node runs a job of its
        user; 0 after (the node is then warm for that user), unless the node has run
        ``CostModel.user_sandboxes_kept`` other users since (it keeps that many warm, the
        least recently used pushed out)."""
        user = self._jobs[job_id].user
        keep = self.cost.user_sandboxes_kept
        if keep:
            order = self._user_recent.setdefault(node, {})
            warm = order.pop(user, False) is None
            order[user] = None  # the most recent, last
            while len(order) > keep:
                del order[next(iter(order))]
            return 0.0 if warm else self.cost.user_setup_s
        key = (node, user)
        if key in self._user_ready:
            return 0.0
        self._user_ready.add(key)
        return self.cost.user_setup_s

    def _range_rates(self, node: int, cpu: float | None) -> tuple[float, float, float]:
        """``node``'s time per event by source over a range cache (events of one size), for a
        job of ``cpu`` seconds an event (None: the calibrated default)."""
        if cpu is None:
            return self._default_rates[node]
        density = self.space.uniform_bytes_per_event
        assert density is not None  # range caches hold events of one size
        return self._rates_of(node, density, cpu)

    def _start_plain(
        self,
        action: Start | Assign,
        node: int,
        local: IntervalSet,
        other: IntervalSet,
        cpu: float | None,
    ) -> None:
        """:meth:`_start` over a range cache without peer reads or a cost per packet: the
        subjob's segments are its cached ranges and the rest, in event order, each at its
        source's time per event; with ``cache_fill`` the rest is fetched into the cache.
        (Emptiness read from lengths: ``IntervalSet.__bool__`` is a call, this is hot.)"""
        slot = action.slot
        spe = self._default_rates[node] if cpu is None else self._range_rates(node, cpu)
        segments: list[tuple[int, int, float, Source, int]] = []
        ends: list[float] = []
        total = 0.0
        if not local.length:
            per = spe[_TERTIARY]
            t0, t1 = other._starts, other._stops
            for k in range(len(t0)):  # (by index: a zip is a call with keywords, hot)
                a = t0[k]
                b = t1[k]
                segments.append((a, b, per, _TERTIARY, -1))
                total += (b - a) * per
                ends.append(total)
        elif not other.length:
            # All cached (delayed scheduling's subjobs, mostly): the cached ranges in order,
            # as the sort of the general case below would leave them.
            per = spe[_CACHE]
            t0, t1 = local._starts, local._stops
            for k in range(len(t0)):
                a = t0[k]
                b = t1[k]
                segments.append((a, b, per, _CACHE, -1))
                total += (b - a) * per
                ends.append(total)
        else:
            pieces = [(a, b, _CACHE) for a, b in local]
            pieces.extend([(a, b, _TERTIARY) for a, b in other])
            pieces.sort()
            for a, b, src in pieces:
                per = spe[src]
                segments.append((a, b, per, src, -1))
                total += (b - a) * per
                ends.append(total)
        cache = self.caches[node]
        fetched = _EMPTY
        fetch = None
        if action.cache_fill and other.length:
            fetched = other
            if not action.fill_duplicates:
                fetched = fetched - self._held_elsewhere(node, fetched)
            if fetched:
                fetch = cache.begin_fetch(fetched)
        pin = cache.pin(local) if local.length else None
        version = next(self._versions)
        run = _Run(
            action.subjob,
            self.now,
            segments,
            ends,
            local,
            fetched,
            pin,
            [],
            fetch,
            version,
            action.fill_duplicates,
        )
        self._runs[slot] = run
        heapq.heappush(self._heap, (self.now + total, next(self._seq), _FINISH, slot, version))
        if self._readers is not None and segments:
            self._disk_enter(slot, 0)

    def _packets_by_file(
        self, segments: list[tuple[int, int, float, Source, int]], one_packet: bool
    ) -> dict[int, tuple[list[int], int, list[int]]]:
        """The packets the runtime would cut from a subjob of these ``segments``
        (:func:`~datasched.sim.packetcut.cut_packets`)."""
        return cut_packets(self.space, self.scheduler.policy, self._in_flight, segments, one_packet)

    def _charge_packets(
        self,
        segments: list[tuple[int, int, float, Source, int]],
        packets: dict[int, tuple[list[int], int, list[int]]],
    ) -> tuple[list[tuple[int, int, float, Source, int]], list[float], float]:
        """``segments`` with the cost model's fixed cost per packet
        (``CostModel.packet_overhead_s``) spread over the events of each of ``packets``
        (:meth:`_packets_by_file`). A segment of no events (the wait for a file's fetch)
        pays nothing."""
        overhead = self.cost.packet_overhead_s
        files = self.space.files
        charged = list(segments)
        for i, (ks, n, cut) in packets.items():
            f = files[i]
            extra = overhead * len(cut) / n
            for k in ks:
                a, b, per, src, peer = charged[k]
                m = min(b, f.stop) - max(a, f.start)
                # A segment spanning several files gets each file's share, by its events.
                charged[k] = (a, b, per + extra * m / (b - a), src, peer)
        return charged, *_timed(charged)

    def _file_segments(
        self,
        node: int,
        pieces: list[tuple[int, int, Source, int]],
        fetched: IntervalSet,
        cpu: float | None,
        who: tuple[int, int, bool],
    ) -> tuple[list[tuple[int, int, float, Source, int]], list[float], float]:
        """Segments of a subjob over whole-file caches: each piece cut by file, at that
        file's event size; a file to be cached is first fetched whole (a segment of no
        events: the wait for it), then read from the local disk, its events charged the
        cost of opening a new copy (``CostModel.fresh_cpu_s_per_event``).

        With tertiary pipelining (``CostModel.pipelining``), a file's fetch begins when the
        subjob starts on the file before it, as the runtime's workers fetch the next
        packet's file while the current one runs, one fetch at a time on the node's link:
        the wait is what is left of it. Without, fetches and reads take turns.

        ``who`` is ``(slot, subjob id, peer reads allowed)``; with peer reads, a file is
        not fetched from tertiary storage twice at once (see :meth:`_plan_fetch`)."""
        space = self.space
        files = space.files
        pipelined = self.cost.pipelining.tertiary
        fresh = self.cost.fresh_cpu_s_per_event
        segments: list[tuple[int, int, float, Source, int]] = []
        ends: list[float] = []
        total = 0.0
        look = link_free = self.now
        """When the next file's fetch may begin, and when this node's link is free."""
        previous = -1
        lumped: dict[int, tuple[Source, int]] = {}
        """File -> the source and peer its events are counted under, once it is fetched."""
        for a, b, src, peer in pieces:
            i = space.file_at(a)
            while a < b:
                f = files[i]
                stop = min(b, f.stop)
                if stop == a:  # an empty file
                    i += 1
                    continue
                seq = self.now + total
                at = look if pipelined else seq
                if i != previous:
                    look, previous = seq, i
                spe = self._rates_of(node, f.bytes_per_event, cpu)
                per = spe[src]
                seg_src, seg_peer = src, peer
                if src is Source.TERTIARY and a in fetched:
                    if i not in lumped:
                        ready, how, holder, own_s = self._plan_fetch(i, node, at, link_free, who)
                        lumped[i] = (how, holder)
                        if own_s is not None:
                            link_free = ready
                        lump = own_s if own_s is not None and not pipelined else ready - seq
                        if lump > 0 or pipelined:
                            # A fetch or wait with no time left stays: found by its segment
                            # (readers, a hand-over), counted as the file's arrival.
                            segments.append((a, a, max(lump, 0.0), how, _LUMP))
                            total += max(lump, 0.0)
                            ends.append(total)
                    seg_src, seg_peer = lumped[i]
                    per = spe[Source.CACHE] + fresh
                segments.append((a, stop, per, seg_src, seg_peer))
                total += (stop - a) * per
                ends.append(total)
                a = stop
                i += 1
        return segments, ends, total

    def _shrink(self, action: Shrink) -> SubjobShrunk:
        """Take what was asked, less what is processed or in progress, from a running subjob;
        it goes on with the rest, its finish moved earlier."""
        slot = action.slot
        run = self._runs[slot]
        if run is None or run.subjob.subjob_id != action.subjob_id:
            raise RuntimeError(f"slot {slot} is not running subjob {action.subjob_id}")
        segments = run.segments
        k, part = _position(run, self.now - run.start_s)
        released = _EMPTY
        if k < len(segments):
            # Segments are in ascending event order: everything after the event in progress
            # is untouched.
            in_progress = segments[k][0] + part
            release, data = action.release, run.subjob.data
            if len(release._starts) == 1 and len(data._starts) == 1:
                # One range asked of one range (job splitting's every shrink): the same
                # set as below without its three temporaries.
                lo = max(release._starts[0], data._starts[0], in_progress + 1)
                hi = min(release._stops[0], data._stops[0])
                if lo < hi:
                    released = IntervalSet._make([lo], [hi], hi - lo)
            else:
                released = (release & data).split_at(in_progress + 1)[1]
        if not released.length:
            return _tuple_new(SubjobShrunk, (self.now, action.subjob_id, slot, _EMPTY))
        kept = segments[:k]
        ends = run.ends[:k]
        total = ends[-1] if ends else 0.0
        keep_data: IntervalSet | None = None
        master = run.turns is not None
        in_packet = False
        """Whether an event kept since the last turn at the master is in a packet."""
        rest = segments[k:]
        if not master and len(rest) == 1 and len(released._starts) == 1:
            # The common case (job splitting's subjobs read one range): one segment left,
            # holding what is released, one range after the event in progress. What the
            # loop below keeps of it, the part before and any part after, written out
            # (docs/performance.md, "Fewer events per job"): the same segments and sums.
            a, b, per, src, peer = rest[0]
            c, d = released._starts[0], released._stops[0]
            if a < c and d <= b:
                rest = []
                kept.append((a, c, per, src, peer))
                total += (c - a) * per
                ends.append(total)
                if d < b:
                    kept.append((d, b, per, src, peer))
                    total += (b - d) * per
                    ends.append(total)
        for j, (a, b, per, src, peer) in enumerate(rest, k):
            if master and peer == _MASTER:
                # A packet's turn at the master: kept in progress, or after its packet's
                # events when any are kept (a packet with none left is not sent).
                if j == k or in_packet:
                    kept.append((a, b, per, src, peer))
                    total += per
                    ends.append(total)
                in_packet = False
                continue
            if a == b:
                # A whole-file fetch stays if any event of its file is kept.
                if keep_data is None:
                    keep_data = run.subjob.data - released
                f = self.space.files[self.space.file_at(a)]
                if keep_data.clip(a, f.stop):
                    kept.append((a, b, per, src, peer))
                    total += per
                    ends.append(total)
                continue
            for lo, hi in released.gaps(a, b):
                kept.append((lo, hi, per, src, peer))
                total += (hi - lo) * per
                ends.append(total)
                in_packet = True
        run.segments, run.ends = kept, ends
        run.subjob = run.subjob.shrunk(released)
        cache = self.caches[self._slot_node[slot]]
        if run.pin is not None and run.local.overlaps(released):
            cache.unpin(run.pin)
            run.local = run.local - released
            run.pin = cache.pin(run.local) if run.local else None
        run.version = next(self._versions)
        finish = (run.start_s + total, next(self._seq), _FINISH, slot, run.version)
        heapq.heappush(self._heap, finish)
        if self._readers is not None:
            self._disk_reshaped(slot, k)
        if master:
            self._master_due(slot, run)
        if run.fetched.length:  # (range caches fetch no whole files: nothing to hand over)
            self._fetches_dropped(slot, run, stopping=False)
        return _tuple_new(SubjobShrunk, (self.now, action.subjob_id, slot, released))

    def _held_elsewhere(self, node: int, data: IntervalSet) -> IntervalSet:
        """The part of ``data`` that some node other than ``node`` caches."""
        held: list[tuple[int, int]] = []
        for start, stop in data:
            for a, b, holders in self.world.holders(start, stop):
                if holders and holders != {node}:
                    held.append((a, b))
        return IntervalSet(held)

    def _progress(
        self, run: _Run, finished: bool
    ) -> tuple[IntervalSet, IntervalSet, tuple[int, int, int], IntervalSet]:
        """What ``run`` has processed by now, what it has not, its events by source, and an
        event of each file whose whole-file fetch is done."""
        data = run.subjob.data
        segments = run.segments
        if finished:
            k, part = len(segments), 0
        else:
            k, part = _position(run, self.now - run.start_s)
        counts = [0, 0, 0]
        n_done = 0
        lumps: list[tuple[int, int]] = []
        for i in range(k):
            a, b, _, src, peer = segments[i]
            if peer == _LUMP:
                lumps.append((a, a + 1))
            counts[src] += b - a
            n_done += b - a
        if k < len(segments):
            counts[segments[k][3]] += part
            n_done += part
        if finished:
            processed, remaining = data, _EMPTY
        else:
            # Segments are in ascending event order: what was processed is a prefix.
            processed, remaining = data.head(n_done)
        fetched_files = IntervalSet(lumps) if lumps else _EMPTY
        return processed, remaining, (counts[0], counts[1], counts[2]), fetched_files

    def _leave(self, slot: int, finished: bool) -> SubjobFinished | SubjobStopped:
        """Take the subjob off ``slot`` now: book what it processed and update the cache."""
        run = self._runs[slot]
        if run is None:
            raise RuntimeError(f"slot {slot} has no subjob to stop")
        self._runs[slot] = None
        if not finished:
            self._fetches_dropped(slot, run, stopping=True)
        if self._readers is not None:
            self._disk_leave(slot)
        now = self.now
        subjob = run.subjob
        if finished and not self._file_grain:
            # ``_progress`` written out for a finished run over range caches (every
            # segment done, no whole-file fetch): half of job splitting's events.
            processed, remaining, fetched_files = subjob.data, _EMPTY, _EMPTY
            counts = [0, 0, 0]
            for a, b, _, src, _ in run.segments:
                counts[src] += b - a
            by_source = (counts[0], counts[1], counts[2])
        else:
            processed, remaining, by_source, fetched_files = self._progress(run, finished)
        self.rec.ran(
            subjob.job_id,
            run.start_s,
            now,
            by_source,
            processed,
            # ``_sized`` written out: None when events are of one size.
            None
            if self.space.uniform_bytes_per_event is not None
            else self._tertiary_bytes(run, processed),
        )
        if self._record_packets:
            self._log_packet(run, slot, processed, by_source)
        node = self._slot_node[slot]
        cache = self.caches[node]
        if run.pin is not None:
            cache.unpin(run.pin)
        for peer_cache, token in run.peer_pins:
            peer_cache.unpin(token)
            peer_cache.touch(processed, now)
        if run.local.length:  # (not its truth, a Python call: a subjob's end is hot)
            # Pinned since the start, so cached; a finished subjob read all of it (no
            # intersection to build: both sets are often fragmented).
            cache.refresh(run.local if finished else processed & run.local, now)
        added = evicted = _EMPTY
        if run.fetch is not None:
            completed = processed | fetched_files if fetched_files else processed
            if not run.fill_duplicates:
                # Another node may have fetched the same data meanwhile.
                completed = completed - self._held_elsewhere(node, completed & run.fetched)
            added, evicted = cache.end_fetch(run.fetch, completed, now)
            if self._world is not None:
                self._world.remove(node, evicted)
                self._world.add(node, added)
        # The model's CPU time: the job's CPU seconds an event, for each event processed.
        cpu = self._jobs[subjob.job_id].cpu_s_per_event
        cpu_s = processed.length * (self.cost.cpu_s_per_event if cpu is None else cpu)
        if finished:
            return _tuple_new(SubjobFinished, (now, subjob.subjob_id, slot, added, evicted, cpu_s))
        return SubjobStopped(now, subjob.subjob_id, slot, remaining, added, evicted, cpu_s)

    def _sized(self, run: _Run, processed: IntervalSet) -> float | None:
        """Bytes ``run`` read from tertiary storage when events differ in size (None: the
        recorder sizes its event counts)."""
        if self.space.uniform_bytes_per_event is not None:
            return None
        return self._tertiary_bytes(run, processed)

    def _tertiary_bytes(self, run: _Run, processed: IntervalSet) -> float:
        """Bytes ``run`` read from tertiary storage (events of unequal sizes)."""
        total = 0.0
        for a, b, _, src, peer in run.segments:
            if src is not Source.TERTIARY:
                continue
            if peer == _LUMP:
                if processed.clip(a, a + 1) or self._lump_done(run, a):
                    total += self.space.files[self.space.file_at(a)].n_bytes
                continue
            if a not in run.fetched:
                total += self.space.bytes_of(processed.clip(a, b))
        return total

    def _lump_done(self, run: _Run, a: int) -> bool:
        for i, seg in enumerate(run.segments):
            if seg[0] == a and seg[4] == _LUMP:
                return run.start_s + run.ends[i] <= self.now
        return False


def _with_setup(
    segments: list[tuple[int, int, float, Source, int]], setup: float
) -> tuple[list[tuple[int, int, float, Source, int]], list[float], float]:
    """``segments`` with ``setup`` seconds spread over the events of the first that has
    any (the sandbox starts as the first packet does; a wait for a fetch before it is as
    before), their ends and total again."""
    out = list(segments)
    for k, (a, b, per, src, peer) in enumerate(out):
        if b > a:
            out[k] = (a, b, per + setup / (b - a), src, peer)
            break
    return out, *_timed(out)


def _timed(segments: list[tuple[int, int, float, Source, int]]) -> tuple[list[float], float]:
    """When each of ``segments`` ends from the subjob's start, and their total: events at
    their time each, a segment of no events its own duration."""
    ends = []
    total = 0.0
    for a, b, per, _, _ in segments:
        total += (b - a) * per if b > a else per
        ends.append(total)
    return ends, total


def _position(run: _Run, elapsed: float) -> tuple[int, int]:
    """Where ``run`` is after ``elapsed`` seconds: the index of the segment in progress (the
    number of segments when all are done) and how many of its events are done."""
    k = bisect_right(run.ends, elapsed)
    if k >= len(run.segments):
        return len(run.segments), 0
    a, b, per, _, _ = run.segments[k]
    before = run.ends[k - 1] if k > 0 else 0.0
    return k, max(min(int((elapsed - before) / per), b - a - 1), 0)
