"""How the runtime master carries out the core's data movements (Fetch, Replicate, Pin,
Unpin, Evict) as tasks on the node's worker (:mod:`datasched.runtime.datamoves`) and turns
their results into the core's answers. A base of
:class:`~datasched.runtime.engine.RuntimeEngine`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from distributed import Client, Future

from datasched.core.actions import Evict, Fetch, Replicate
from datasched.core.data import DataSpace
from datasched.core.events import CacheChanged, Event, FetchDone, TransferDone
from datasched.core.intervals import IntervalSet
from datasched.runtime.cachefaults import CacheFaults
from datasched.runtime.datamoves import FileToMove, MoveResult, move_files
from datasched.runtime.streams import _Worker

__all__ = ["SETTLE_S", "DataMoves"]

SETTLE_S = 30.0
"""How long a batch run waits, after its last job ended, for its data moves still under way
(:meth:`DataMoves._settle_moves`)."""


class DataMoves:
    """Data movements on workers (see the module docstring)."""

    # Provided by the engine.
    client: Client
    space: DataSpace
    workers: list[_Worker]
    _moves: dict[int, tuple[Fetch | Replicate | Evict, Future[Any]]]
    _run_id: str
    _cache_faults: CacheFaults
    _results: asyncio.Queue[tuple[int, Any, bool]]

    def now(self) -> float:
        raise NotImplementedError

    def _on_result(self, token: int, payload: Any, ok: bool) -> None:
        raise NotImplementedError

    def _pump(self) -> None:
        raise NotImplementedError

    def _emit(self, event: Event) -> None:
        raise NotImplementedError

    def _next_id(self) -> int:
        raise NotImplementedError

    def _watch(self, token: int, future: Future[Any]) -> None:
        raise NotImplementedError

    def _urls(self, data: IntervalSet) -> list[str]:
        return [self.space.files[i].name for i in self.space.files_in(data)]

    def _move(self, action: Fetch | Replicate) -> None:
        source = action.source
        # A Replicate copies from the source node's worker over the cluster's network.
        peer = self.workers[source].address if source is not None else None
        files = [
            FileToMove(self.space.files[i].name, self.space.files[i].n_bytes, peer)
            for i in self.space.files_in(action.data)
        ]
        self._submit_move(action, action.node, move_files, files)

    def _submit_move(
        self, action: Fetch | Replicate | Evict, node: int, fn: Callable[..., Any], arg: Any
    ) -> None:
        address = self.workers[node].address
        if address is None:
            self._answer_move(action, RuntimeError("worker away"), False)
            return
        token = self._next_id()
        future = self.client.submit(
            fn,
            arg,
            key=f"datasched-move-{self._run_id}-{token}",
            pure=False,
            workers=[address],
            allow_other_workers=False,
        )
        self._moves[token] = (action, future)
        self._watch(token, future)

    def _fire(self, node: int, fn: Callable[..., Any], *args: Any) -> None:
        """A task whose answer the core does not wait for (pins)."""
        address = self.workers[node].address
        if address is not None:
            future = self.client.submit(
                fn, *args, pure=False, workers=[address], allow_other_workers=False
            )
            self._watch(self._next_id(), future)

    async def _settle_moves(self, timeout_s: float = SETTLE_S) -> None:
        """Wait (at most ``timeout_s``) for the data moves still under way when the batch's
        last job ended, a hot file's copy to another worker (replication) most often: the
        run then leaves each cache as the core's directory says, and a copy is not cut off
        by the caller closing the cluster. A move past the wait is left to finish or not;
        the caches are read again at the next run's start (``known_cache``)."""
        deadline = time.monotonic() + timeout_s
        while self._moves and (left := deadline - time.monotonic()) > 0:
            try:
                item = await asyncio.wait_for(self._results.get(), timeout=left)
            except TimeoutError:
                break
            self._on_result(*item)
            self._pump()

    def _on_move(self, token: int, payload: Any, ok: bool) -> None:
        action, _ = self._moves.pop(token)
        self._answer_move(action, payload, ok)

    def _answer_move(self, action: Fetch | Replicate | Evict, payload: Any, ok: bool) -> None:
        now = self.now()
        if isinstance(action, Evict):
            gone = payload if ok else []
            self._emit(CacheChanged(now, action.node, evicted=self.space.events_of(gone)))
            return
        result = payload if ok else MoveResult(self.workers[action.node].name)
        assert isinstance(result, MoveResult)
        self._cache_faults.copies(self.workers[action.node].name, result.corrupted)
        added = self.space.events_of(result.cached)
        evicted = self.space.events_of(result.evicted)
        if isinstance(action, Replicate):
            self._emit(TransferDone(now, action.source, action.node, action.data, added, evicted))
        else:
            self._emit(FetchDone(now, action.node, action.data, added, evicted))
