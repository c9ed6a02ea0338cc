"""Fetches and replications in the simulated engine: bytes moved over the topology's links as
a fluid (:mod:`datasched.sim.network`), landing in a node's cache when the transfer ends, and
evictions the scheduler asks for. A base of :class:`~datasched.sim.engine.SimEngine`."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from datasched.core.cache import NodeCache
from datasched.core.data import TERTIARY
from datasched.core.directory import CacheDirectory
from datasched.core.events import CacheChanged, FetchDone, TransferDone
from datasched.core.intervals import IntervalSet
from datasched.core.model import node_endpoint
from datasched.sim.network import Network, Transfer
from datasched.sim.recorder import Recorder
from datasched.sim.state import EngineState, Kind

__all__ = ["DataMoves", "Move"]

_TRANSFER = int(Kind.TRANSFER)
_EMPTY = IntervalSet()


@dataclass(slots=True)
class Move:
    """A Fetch or Replicate in flight."""

    node: int
    data: IntervalSet
    source: int | None
    token: int
    n_bytes: float
    replicate: bool


class DataMoves(EngineState):
    """Fetches, replications and evictions (see the module docstring)."""

    # Provided by the engine (besides EngineState's).
    caches: list[NodeCache]
    rec: Recorder
    _network: Network
    _world: CacheDirectory | None

    def _begin_move(
        self, node: int, data: IntervalSet, source: int | None, *, replicate: bool
    ) -> None:
        cache = self.caches[node]
        _, missing = cache.partition(data)
        if source is not None:
            missing = missing & self.caches[source].content
        n_bytes = self.space.cached_bytes(missing)
        token = cache.begin_fetch(data)
        move = Move(node, data, source, token, n_bytes, replicate)
        origin = TERTIARY if source is None else node_endpoint(source)
        path = self.scheduler.topology.route(origin, node_endpoint(node)) if n_bytes > 0 else ()
        _, changed = self._network.start(path, n_bytes, self.now, tag=move)
        self._rerated(changed)

    def _rerated(self, changed: list[Transfer]) -> None:
        """Completion events for transfers whose rate changed (older ones go stale)."""
        for t in changed:
            heapq.heappush(
                self._heap, (t.eta(), next(self._seq), _TRANSFER, t.transfer_id, t.version)
            )

    def _moved(self, transfer_id: int) -> FetchDone | TransferDone:
        t, changed = self._network.finish(transfer_id, self.now)
        self._rerated(changed)
        move = t.tag
        assert isinstance(move, Move)
        return self._land(move, ok=True)

    def _land(self, move: Move, *, ok: bool) -> FetchDone | TransferDone:
        """Insert what a move brought (nothing when its source failed) and say so."""
        cache = self.caches[move.node]
        added, evicted = cache.end_fetch(move.token, move.data if ok else _EMPTY, self.now)
        if self._world is not None:
            self._world.remove(move.node, evicted)
            self._world.add(move.node, added)
        if ok:
            self.rec.transferred(move.n_bytes)
        now_cached = cache.lookup(move.data)
        if move.replicate:
            assert move.source is not None
            return TransferDone(self.now, move.source, move.node, move.data, now_cached, evicted)
        return FetchDone(self.now, move.node, move.data, now_cached, evicted)

    def _evict(self, node: int, data: IntervalSet) -> CacheChanged:
        cache = self.caches[node]
        gone = cache.evict(data - cache.pinned)
        if self._world is not None:
            self._world.remove(node, gone)
        return CacheChanged(self.now, node, evicted=gone)
