"""Fetches in flight, shared between nodes: a base of the simulated engine (whole-file
caches, peer reads allowed).

The runtime's workers read a file from tertiary storage once for the cluster, not once for
each node that wants it at about the same time: a worker about to fetch a file asks its
peers first, and one that is fetching it already, or has it, hands it over
(``runtime/worker.fetcher``). Here likewise, a subjob asking for a file at time ``at`` finds
the last registered fetch of it: begun by then, it waits for that fetch to end and copies
the file from that node (no copy on the same node); not begun yet, it fetches the file
itself and the subjob that was to fetch it later waits for this fetch instead (it would
find the file being fetched). A file fetched this way joins the fetching node's cache, and
the directory, only when its subjob ends; until then readers find it here.

When a fetching subjob stops, or is shrunk off the file, before its fetch ends, the first
subjob still waiting for it takes the fetch over (counted as its tertiary read, in the time
its wait was planned to take), so no file is read without a tertiary read behind it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from datasched.core.model import Source
from datasched.sim.master import MasterTurns
from datasched.sim.state import FINISH as _FINISH

__all__ = ["LUMP", "FileFetch", "SharedFetches"]

LUMP = -2
"""The peer field of a segment that moves a whole file and processes no event."""


@dataclass(slots=True)
class FileFetch:
    """A whole-file fetch from tertiary storage by the subjob ``subjob_id`` on ``slot``."""

    slot: int
    subjob_id: int
    begun: float
    done: float
    waiters: list[tuple[int, int]] = field(default_factory=list)
    """(slot, subjob id) of the subjobs waiting to copy the file from it."""


class SharedFetches(MasterTurns):
    """Whole-file fetches from tertiary storage, shared (see the module docstring)."""

    _readers: dict[int, Any] | None
    _fetching: dict[int, FileFetch]

    def _plan_fetch(
        self, i: int, node: int, at: float, link_free: float, who: tuple[int, int, bool]
    ) -> tuple[float, Source, int, float | None]:
        """How a subjob (``who``: slot, subjob id, peer reads allowed) on ``node``, asking
        for file ``i`` at time ``at``, gets it into its cache: ``(when it is there, source,
        peer, seconds of its own tertiary fetch or None)``. Its own fetch begins once its
        link is free (``link_free``)."""
        slot, subjob_id, share = who
        f = self.space.files[i]
        own_s = f.n_bytes / self.scheduler.topology.tertiary_bytes_per_s(node)
        start = max(at, link_free)
        waiters: list[tuple[int, int]] = []
        if share and (found := self._registered_fetch(i)) is not None:
            entry, k = found
            other = self._slot_node[entry.slot]
            if entry.begun <= at:
                entry.waiters.append((slot, subjob_id))
                copy, src, holder = self._copy_from(node, other, f.n_bytes)
                return max(entry.done, at) + copy, src, holder, None
            if self._readers is not None:
                # Disks shared by readers re-time segments themselves: the two are not
                # combined, and the earlier plan stays the one readers wait for.
                return start + own_s, Source.TERTIARY, -1, own_s
            self._wait_for(entry.slot, k, node, start + own_s)
            waiters = [*entry.waiters, (entry.slot, entry.subjob_id)]
        if share:  # only subjobs that read from peers look for fetches to share
            self._fetching[i] = FileFetch(slot, subjob_id, start, start + own_s, waiters)
        return start + own_s, Source.TERTIARY, -1, own_s

    def _copy_from(self, node: int, holder: int, n_bytes: int) -> tuple[float, Source, int]:
        """``(seconds, source, peer)`` of copying a file of ``n_bytes`` the node ``holder``
        has just fetched into ``node``'s cache (nothing to copy on the same node)."""
        if holder == node:
            return 0.0, Source.CACHE, -1
        topology = self.scheduler.topology
        bps = min(self.cost.disk_bytes_per_s, topology.peer_bytes_per_s(node, holder))
        return n_bytes / bps, Source.PEER, holder

    def _running(self, slot: int, subjob_id: int) -> Any:
        """The run of subjob ``subjob_id`` if it is still on ``slot``, else None."""
        run = self._runs[slot] if slot < len(self._runs) else None
        return run if run is not None and run.subjob.subjob_id == subjob_id else None

    def _lump_of(self, run: Any, i: int, src: Source | None) -> int | None:
        """The index of the whole-file segment of file ``i`` in ``run`` (of source ``src``;
        any when None), or None."""
        f = self.space.files[i]
        for k, (a, b, _, s, peer) in enumerate(run.segments):
            if a == b and peer == LUMP and (src is None or s is src) and f.start <= a < f.stop:
                return k
        return None

    def _registered_fetch(self, i: int) -> tuple[FileFetch, int] | None:
        """The last registered fetch of file ``i``, while its subjob runs with it still
        planned, and the index of its segment there. Stale entries are dropped."""
        entry = self._fetching.get(i)
        if entry is None:
            return None
        run = self._running(entry.slot, entry.subjob_id)
        k = None if run is None else self._lump_of(run, i, Source.TERTIARY)
        if k is None:
            del self._fetching[i]  # ended, stopped, or shrunk off this file
            return None
        return entry, k

    def _wait_for(self, slot: int, k: int, fetcher: int, done_s: float) -> None:
        """Re-plan the subjob on ``slot``, which was to fetch a file from tertiary storage
        at its segment ``k`` (not begun): it waits for ``fetcher``'s fetch of the file,
        ending at ``done_s``, and copies it from there once it gets to the file (the copy is
        not prefetched); what follows moves accordingly."""
        run = self._runs[slot]
        a = run.segments[k][0]
        f = self.space.files[self.space.file_at(a)]
        reached = run.start_s + (run.ends[k - 1] if k else 0.0)
        copy, src, peer = self._copy_from(self._slot_node[slot], fetcher, f.n_bytes)
        self._count_file_as(
            run, slot, k, f.start, f.stop, src, peer, max(done_s, reached) + copy - reached
        )

    def _count_file_as(
        self,
        run: Any,
        slot: int,
        k: int,
        lo: int,
        hi: int,
        src: Source,
        peer: int,
        lump_s: float | None,
    ) -> None:
        """Count the file ``[lo, hi)`` of ``run`` (on ``slot``), whose whole-file segment is
        ``k``, under ``src`` and ``peer`` from now on; the segment lasts ``lump_s`` (None:
        as it was). Its end and what follows move accordingly."""
        segments = run.segments
        new = segments[:k]
        a, _, was, _, _ = segments[k]
        new.append((a, a, was if lump_s is None else max(lump_s, 0.0), src, LUMP))
        for s0, s1, per, s_src, s_peer in segments[k + 1 :]:
            if s0 < s1 and lo <= s0 < hi:
                new.append((s0, s1, per, src, peer))
            else:
                new.append((s0, s1, per, s_src, s_peer))
        ends = run.ends[:k]
        total = ends[-1] if ends else 0.0
        for s0, s1, per, _, _ in new[k:]:
            total += per if s0 == s1 else (s1 - s0) * per
            ends.append(total)
        run.segments, run.ends = new, ends
        run.version = next(self._versions)
        heapq.heappush(
            self._heap, (run.start_s + total, next(self._seq), _FINISH, slot, run.version)
        )
        if run.turns is not None:  # a queue at the master (sim/master.py)
            self._master_due(slot, run)

    def _fetches_dropped(self, slot: int, run: Any, *, stopping: bool) -> None:
        """The subjob ``run`` on ``slot`` stops (``stopping``) or was shrunk: each file it
        was fetching for others and no longer will (not done by now) goes to the first of
        them still waiting. Only the files it fetches are looked at: stops are frequent."""
        if not run.fetched or not self._fetching:
            return  # (range caches fetch no whole files: nothing to hand over)
        subjob_id = run.subjob.subjob_id
        for i in self.space.files_in(run.fetched):
            entry = self._fetching.get(i)
            if entry is None or entry.slot != slot or entry.subjob_id != subjob_id:
                continue
            k = self._lump_of(run, i, Source.TERTIARY)
            if k is not None and (not stopping or run.start_s + run.ends[k] <= self.now):
                continue  # still fetching it, or fetched (cached as the subjob leaves)
            del self._fetching[i]
            self._hand_over(i, entry)

    def _hand_over(self, i: int, entry: FileFetch) -> None:
        """The first of ``entry``'s waiters still waiting for file ``i`` fetches it itself."""
        for n, (slot, subjob_id) in enumerate(entry.waiters):
            run = self._running(slot, subjob_id)
            k = None if run is None else self._lump_of(run, i, None)
            if k is None:
                continue
            f = self.space.files[i]
            self._count_file_as(run, slot, k, f.start, f.stop, Source.TERTIARY, -1, None)
            ends_at = run.start_s + run.ends[k]
            self._fetching[i] = FileFetch(
                slot, subjob_id, min(entry.begun, ends_at), ends_at, entry.waiters[n + 1 :]
            )
            return
