"""Disks shared by their readers (``CostModel.shared_disks``), a base of the simulated engine.

Off by default, and then nothing here runs: every reader of a disk gets its whole rate, as in
ponce-hersch. When on, a node's disk is a fluid shared by everyone reading it at that moment:
its own slots reading its cache, and other nodes' slots reading it as a peer (a PROOF file
server read by four workers). Each reader would read ``b / t0`` bytes a second alone (``b``
the bytes of an event, ``t0`` its time per event from the cost model); the disk's
``disk_bytes_per_s`` is split max-min fairly over these demands, and a reader held below its
demand takes ``b / share`` seconds an event. Identical readers thus go at
``max(t0, n * b / disk)``: alone or few, as fast as their CPU lets them; many, at the disk's
pace, each its ``1/n``. With ``CostModel.disk_contention`` ``c`` above 0 the disk's total
falls with its readers, to ``disk / (1 + c (n - 1))`` (a disk seeking between them); 0 keeps
the total whole, and nothing else changes.

A subjob stays costed in closed form: its segments (by source) keep their times per event,
and only the segment in progress is re-timed when the readers of its disk change, from the
present on (the event in progress keeps what it has done). A subjob whose next segments read
another disk gets a heap entry at the end of the stretch it is reading, to move over. Reads
from central storage, and of a file just fetched from there, count on no disk: the path to
storage is their bound.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass

from datasched.core.model import CostModel, Source
from datasched.sim.fetches import SharedFetches
from datasched.sim.state import FINISH as _FINISH
from datasched.sim.state import SEGMENT

__all__ = ["SharedDisks", "disk_capacity", "fair_shares"]
_Kind = tuple[int | None, Source, float]


def disk_capacity(cost: CostModel, readers: int) -> float:
    """The total rate of a disk with ``readers`` at once: whole (``disk_contention`` 0, the
    default), or falling as ``1 / (1 + c (n - 1))`` (a disk seeking between its readers)."""
    c = cost.disk_contention
    if c == 0.0 or readers <= 1:
        return cost.disk_bytes_per_s
    return cost.disk_bytes_per_s / (1.0 + c * (readers - 1))


def fair_shares(capacity: float, demands: list[float]) -> list[float]:
    """Max-min fair shares of ``capacity`` over ``demands``: nobody gets more than it asks,
    and what the small demands leave is split evenly over the rest."""
    n = len(demands)
    out = [0.0] * n
    left = capacity
    order = sorted(range(n), key=demands.__getitem__)
    for pos, i in enumerate(order):
        fair = left / (n - pos)
        if demands[i] <= fair:
            out[i] = demands[i]
            left -= demands[i]
            continue
        for j in order[pos:]:
            out[j] = fair
        break
    return out


@dataclass(slots=True)
class _Reader:
    """What one slot's subjob reads now: a stretch of segments ``[k, j]`` of one kind."""

    disk: int | None
    """The node whose disk is read; None: central storage (no disk shared)."""
    k: int
    j: int
    bytes_per_event: float
    nominal: float
    """Seconds per event alone on the disk."""
    per: float
    """Seconds per event now."""


class SharedDisks(SharedFetches):
    """Readers of each node's disk, and the re-timing of their subjobs (see the module)."""

    _readers: dict[int, _Reader] | None
    """Slot -> what it reads (None: disks are not shared, nothing is tracked)."""
    _disk_readers: dict[int, set[int]]

    def _rates_of(
        self, node: int, bytes_per_event: float, cpu: float | None
    ) -> tuple[float, float, float]:
        raise NotImplementedError

    def _segment_kind(self, slot: int, seg: tuple[int, int, float, Source, int]) -> _Kind:
        """(disk, source, bytes per event) of a segment: segments of one kind in a row are
        read at one pace."""
        a, b, _, src, peer = seg
        if a == b or src is Source.TERTIARY:
            return (None, src, 0.0)
        disk = self._slot_node[slot] if src is Source.CACHE else peer
        density = self.space.uniform_bytes_per_event
        if density is None:
            density = self.space.files[self.space.file_at(a)].bytes_per_event
        return (disk, src, density)

    def _disk_enter(self, slot: int, k: int) -> None:
        """The subjob on ``slot`` starts reading segment ``k``: register it on its disk."""
        assert self._readers is not None
        run = self._runs[slot]
        segments = run.segments
        kind = self._segment_kind(slot, segments[k])
        j = k
        while j + 1 < len(segments) and self._segment_kind(slot, segments[j + 1]) == kind:
            j += 1
        disk, src, density = kind
        nominal = segments[k][2]
        if disk is not None:
            cpu = self._jobs[run.subjob.job_id].cpu_s_per_event
            nominal = self._rates_of(self._slot_node[slot], density, cpu)[src]
        self._readers[slot] = _Reader(disk, k, j, density, nominal, segments[k][2])
        if disk is None:
            self._push_boundary(slot)
            return
        self._disk_readers.setdefault(disk, set()).add(slot)
        self._rerate(disk, force=slot)

    def _disk_leave(self, slot: int) -> None:
        """The subjob on ``slot`` stops reading: the others on its disk speed up."""
        assert self._readers is not None
        reader = self._readers.pop(slot, None)
        if reader is None or reader.disk is None:
            return
        readers = self._disk_readers[reader.disk]
        readers.discard(slot)
        if readers:
            self._rerate(reader.disk)

    def _disk_boundary(self, slot: int, version: int) -> None:
        """A subjob reached the end of the stretch it was reading: on to the next one."""
        run = self._runs[slot]
        if run is None or run.version != version:
            return  # re-timed or gone since
        assert self._readers is not None
        j = self._readers[slot].j
        self._disk_leave(slot)
        self._disk_enter(slot, j + 1)

    def _disk_reshaped(self, slot: int, k: int) -> None:
        """The subjob on ``slot`` was shrunk (its segments from ``k``, the one in progress,
        were cut): register its stretch anew."""
        self._disk_leave(slot)
        if k < len(self._runs[slot].segments):
            self._disk_enter(slot, k)

    def _rerate(self, disk: int, force: int = -1) -> None:
        """Share ``disk`` over its readers again; re-time those whose pace changed (and
        ``force``'s stretch in any case: it was costed alone)."""
        assert self._readers is not None
        slots = sorted(self._disk_readers[disk])
        readers = [self._readers[s] for s in slots]
        demands = [r.bytes_per_event / r.nominal for r in readers]
        shares = fair_shares(disk_capacity(self.cost, len(readers)), demands)
        for slot, reader, demand, share in zip(slots, readers, demands, shares, strict=True):
            per = reader.nominal if share >= demand else reader.bytes_per_event / share
            if per != reader.per or slot == force:
                self._retime(slot, reader, per)

    def _retime(self, slot: int, reader: _Reader, per: float) -> None:
        """From now on, the stretch ``slot`` reads goes at ``per`` seconds an event."""
        run = self._runs[slot]
        segments, ends = run.segments, run.ends
        elapsed = self.now - run.start_s
        c = min(bisect_right(ends, elapsed, reader.k, reader.j + 1), reader.j)
        before = ends[c - 1] if c else 0.0
        a, b, old, src, peer = segments[c]
        into = max(elapsed - before, 0.0)
        done = into / old
        m = int(done)
        if m >= b - a:
            return  # the stretch is over: its boundary is due now
        if into <= 0.0:
            pieces = [(a, b, per, src, peer)]
        else:
            # The event in progress keeps what it has done and does the rest at ``per``.
            pieces = [(a, a + m, old, src, peer)] if m else []
            spent = into - m * old
            pieces.append((a + m, a + m + 1, spent + (1.0 - (done - m)) * per, src, peer))
            if a + m + 1 < b:
                pieces.append((a + m + 1, b, per, src, peer))
        rest = [(s0, s1, per, s, p) for s0, s1, _, s, p in segments[c + 1 : reader.j + 1]]
        new = segments[:c] + pieces + rest + segments[reader.j + 1 :]
        grown = len(pieces) - 1
        new_ends = ends[:c]
        total = before
        for s0, s1, spe, _, _ in new[c:]:
            total += spe if s0 == s1 else (s1 - s0) * spe
            new_ends.append(total)
        run.segments, run.ends = new, new_ends
        reader.k = c + (1 if m and into > 0.0 else 0)
        reader.j += grown
        reader.per = per
        run.version = next(self._versions)
        finish = (run.start_s + total, next(self._seq), _FINISH, slot, run.version)
        heapq.heappush(self._heap, finish)
        self._push_boundary(slot)
        if run.turns is not None:  # a queue at the master (sim/master.py)
            self._master_due(slot, run)

    def _push_boundary(self, slot: int) -> None:
        """A heap entry at the end of the stretch ``slot`` reads, unless the subjob ends there."""
        assert self._readers is not None
        run = self._runs[slot]
        j = self._readers[slot].j
        if j + 1 < len(run.segments):
            at = run.start_s + run.ends[j]
            heapq.heappush(self._heap, (at, next(self._seq), SEGMENT, slot, run.version))
