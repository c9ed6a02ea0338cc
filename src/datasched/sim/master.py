"""The master as a queue of one: the runtime's serial work per packet, in the simulator.

Every packet of a real run passes through one process, the master, which Dask's scheduler
shares: it sends the packet, follows its task's transitions and takes its result. That work
is serial. When many packets end at once, they wait their turn there; and on a machine
whose cores other programs take, the master gets its share of a core like every other
thread, so its time a packet grows. A cost charged on the slots in parallel
(``CostModel.packet_overhead_s``) cannot show that; this queue does
(``CostModel.master_s_per_packet``; docs/performance.md, "Prediction on a shared machine").

In the simulator each packet of a subjob ends with its turn at the master, a segment of no
events (``sim/subjobs.py``). When a slot reaches one, at its time in the engine's event
order, the master serves it first come, first served, after whatever it is serving. A
runtime slot has its next packet in hand meanwhile (at least two in flight), so it computes
that during the turn and waits only for what the turn (its wait and its service) outlasts
the next packet; the subjob's last turn is whole, since the job has a packet's result only
when the master has it (docs/performance.md, "Prediction on a shared machine").
"""

from __future__ import annotations

import heapq
from itertools import pairwise
from typing import Any

from datasched.core.model import Source
from datasched.core.packets import PacketDepth
from datasched.sim.moves import DataMoves
from datasched.sim.recorder import Recorder
from datasched.sim.state import FINISH, MASTER_TURN

__all__ = ["MASTER", "MasterQueue", "MasterTurns"]

MASTER = -3
"""The peer field of a segment of no events that is a packet's turn at the master (its
wait there and its service, ``CostModel.master_s_per_packet``), after the packet's last
event."""


class MasterQueue:
    """One server, first come first served: when it is free again."""

    __slots__ = ("free_at", "served")

    def __init__(self) -> None:
        self.free_at = 0.0
        """When the master has served every packet that reached it so far."""
        self.served = 0

    def serve(self, arrival: float, service: float) -> float:
        """A packet reaches the master at ``arrival`` (no earlier than any before it) and
        takes ``service`` seconds of it; when its service begins (it waits that less
        ``arrival``)."""
        if not service > 0:
            raise ValueError(f"service: must be positive, got {service!r}")
        begin = arrival if arrival > self.free_at else self.free_at
        self.free_at = begin + service
        self.served += 1
        return begin


class MasterTurns(DataMoves):
    """The packets' turns at the master in the simulated engine (a link of its chain of bases,
    :mod:`datasched.sim.state`; see the module docstring)."""

    _master: MasterQueue | None
    """The master (``CostModel.master_s_per_packet``; None: no queue)."""
    _readers: dict[int, Any] | None

    _per_packet: bool
    """Whether the cost model charges packets (a cost per packet, the master's queue)."""
    _in_flight: PacketDepth
    """The runtime's packets in flight a slot, which its packets are cut with."""
    rec: Recorder
    """What the run measures (its packets served at the master among it)."""

    def _push_boundary(self, slot: int) -> None:
        raise NotImplementedError

    def _master_setup(self, in_flight: PacketDepth | None) -> None:
        """The master's queue, when the cost model has one, and the runtime's packets in
        flight a slot (None: its defaults), with which packets are cut (at the engine's
        start)."""
        self._in_flight = PacketDepth() if in_flight is None else in_flight
        self._master = MasterQueue() if self.cost.master_s_per_packet > 0 else None
        self._per_packet = self.cost.packet_overhead_s > 0 or self._master is not None

    def _master_turns(
        self,
        segments: list[tuple[int, int, float, Source, int]],
        packets: dict[int, tuple[list[int], int, list[int]]],
    ) -> tuple[list[tuple[int, int, float, Source, int]], list[float], float]:
        """``segments`` with each packet's turn at the master after its last event
        (``CostModel.master_s_per_packet``, :mod:`datasched.sim.master`): a segment of no
        events lasting the service, to which the wait is added when the slot gets there
        (:meth:`_master_turn`). A file's packets end where
        :meth:`_packets_by_file` cut them (counted in the file's events done here); a
        segment is cut there."""
        service = self.cost.master_s_per_packet
        space = self.space
        files = space.files
        cuts: dict[int, list[int]] = {}
        """File -> its events here done at each of its packets' ends (the last first)."""
        for i, (_, _, ends) in packets.items():
            cuts[i] = ends[::-1]
        done: dict[int, int] = dict.fromkeys(packets, 0)
        out: list[tuple[int, int, float, Source, int]] = []
        for a, b, per, src, peer in segments:
            if a == b:
                out.append((a, b, per, src, peer))
                continue
            lo = a
            while lo < b:
                i = space.file_at(lo)
                hi = min(b, files[i].stop)
                left = cuts[i]
                # Where this file's next packet ends, if in this piece.
                at = lo + left[-1] - done[i]
                stop = at if at < hi else hi
                out.append((lo, stop, per, src, peer))
                done[i] += stop - lo
                if done[i] >= left[-1]:
                    left.pop()
                    out.append((stop, stop, service, Source.CACHE, MASTER))
                lo = stop
        # Their times and ends are summed once, with the turns' overlap (_overlapped).
        return _overlapped(out, service)

    def _master_due(self, slot: int, run: Any) -> None:
        """An entry on the engine's heap for ``run``'s next turn at the master (on
        ``slot``), when it gets there as it is timed now; none when it has no turn left.
        Called again whenever the run is re-timed (its version then changes)."""
        turns = run.turns
        if turns is None:
            return
        seen = 0
        for k, seg in enumerate(run.segments):
            if seg[4] == MASTER:
                if seen == turns:
                    at = run.start_s + (run.ends[k - 1] if k else 0.0)
                    heapq.heappush(
                        self._heap, (at, next(self._seq), MASTER_TURN, slot, run.version)
                    )
                    return
                seen += 1

    def _master_turn(self, slot: int, version: int) -> None:
        """The subjob on ``slot`` reached its next turn at the master: the master serves it
        after the packets before it; the slot waits that long more, and what follows moves
        accordingly."""
        run = self._runs[slot]
        if run is None or run.version != version or run.turns is None:
            return  # gone or re-timed since (a new entry was pushed then)
        assert self._master is not None
        segments = run.segments
        seen = 0
        k = -1
        for j, seg in enumerate(segments):
            if seg[4] == MASTER:
                if seen == run.turns:
                    k = j
                    break
                seen += 1
        if k < 0:
            return
        run.turns += 1
        service = self.cost.master_s_per_packet
        ends = run.ends
        # Until the master has this packet's result; the slot computes its next packet
        # meanwhile and waits only for what is left of that (see _overlapped).
        held = self._master.serve(self.now, service) + service - self.now
        self.rec.run.master_packets += 1
        after = _next_turn(segments, k)
        if after is not None:
            held = max(0.0, held - (ends[after - 1] - ends[k]))
        wait = held - segments[k][2]
        if wait > 0:
            a, b, per, src, peer = segments[k]
            segments[k] = (a, b, per + wait, src, peer)
            for j in range(k, len(ends)):
                ends[j] += wait
            run.version = next(self._versions)
            finish = (run.start_s + ends[-1], next(self._seq), FINISH, slot, run.version)
            heapq.heappush(self._heap, finish)
            if self._readers is not None and slot in self._readers:
                self._push_boundary(slot)
        self._master_due(slot, run)


def _next_turn(segments: list[tuple[int, int, float, Source, int]], k: int) -> int | None:
    """The index of the turn at the master after segment ``k`` (None: ``k`` is the last)."""
    for j in range(k + 1, len(segments)):
        if segments[j][4] == MASTER:
            return j
    return None


def _overlapped(
    segments: list[tuple[int, int, float, Source, int]], service: float
) -> tuple[list[tuple[int, int, float, Source, int]], list[float], float]:
    """``segments`` with each turn at the master lasting, on its slot, only what the
    master's service outlasts the slot's next packet, and the last turn its whole service.

    A runtime slot has its next packet in hand when one ends (at least two in flight:
    ``EngineConfig.packets_in_flight``), so it computes that while the master takes the
    result of the one before; it idles only when the master's turn outlasts that packet,
    and the packet after is late by the rest. Here the rest is charged at the turn itself,
    before the next packet instead of the one after: the subjob ends at the same time. Its
    last packet's turn is whole: the subjob has its result only when the master has it.
    A wait in the master's queue is added the same way when the slot gets there."""
    turns = [j for j, seg in enumerate(segments) if seg[4] == MASTER]
    if len(turns) < 2:
        out = segments
    else:
        out = list(segments)
        for j, after in pairwise(turns):
            busy = 0.0
            for a, b, per, _, _ in segments[j + 1 : after]:
                busy += per if a == b else (b - a) * per
            a, b, _, src, peer = segments[j]
            out[j] = (a, b, max(0.0, service - busy), src, peer)
    ends: list[float] = []
    total = 0.0
    for a, b, per, _, _ in out:
        total += per if a == b else (b - a) * per
        ends.append(total)
    return out, ends, total
