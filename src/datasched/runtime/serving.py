"""The engine open-ended: jobs submitted and cancelled while it runs, until it is stopped.

:meth:`Serving.serve` runs the engine's loop (the same loop as a batch's
:meth:`~datasched.runtime.engine.RuntimeEngine.run`) until :meth:`Serving.stop`. Meanwhile
:meth:`Serving.submit` adds a job, which arrives at once (a core ``JobArrived``), with the
events already done elsewhere left out (a resumed job runs only the rest);
:meth:`Serving.cancel` withdraws one (the core's ``JobCancelled``: its running subjobs stop,
the rest is dropped; packets in flight finish, but their results are not reported). Served
jobs write no output: their owner gets each packet's accumulator through the engine's
:class:`~datasched.runtime.reports.EngineListener`. A base of
:class:`~datasched.runtime.engine.RuntimeEngine`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from distributed import Client, Future

from datasched.core.data import DataSpace
from datasched.core.events import CacheChanged, Event
from datasched.core.intervals import IntervalSet
from datasched.core.scheduler import Scheduler
from datasched.runtime.commands import CommandSpec
from datasched.runtime.jobspec import JobSpec
from datasched.runtime.reports import EngineListener, RunReport
from datasched.runtime.space import place
from datasched.runtime.streams import _JobRun, _Slot, _Worker

__all__ = ["Serving"]

_EMPTY = IntervalSet()


class Serving:
    """Submitting, cancelling and stopping while the engine runs (see the module
    docstring)."""

    WAKE = -1
    """The token that wakes the loop (a job submitted or cancelled, a stop)."""

    # Provided by the engine.
    client: Client
    scheduler: Scheduler
    space: DataSpace
    workers: list[_Worker]
    slots: dict[int, _Slot]
    listener: EngineListener | None
    _jobs: dict[int, _JobRun]
    _arrivals: deque[_JobRun]
    _results: asyncio.Queue[tuple[int, Any, bool]]
    _packets: dict[int, tuple[int, int, int, int, Future[Any]]]
    _moves: dict[int, tuple[Any, Future[Any]]]
    _tasks: set[asyncio.Task[None]]
    ready: asyncio.Event
    _serving: bool
    _keep_stats: bool
    _stopping: bool
    _uncharted: dict[str, list[int]]

    def now(self) -> float:
        raise NotImplementedError

    def _emit(self, event: Event) -> None:
        raise NotImplementedError

    def _fail(self, jr: _JobRun, message: str, traceback: str = "") -> None:
        raise NotImplementedError

    def _add_job(
        self, spec: JobSpec, *, done: IntervalSet = _EMPTY, command: CommandSpec | None = None
    ) -> _JobRun:
        raise NotImplementedError

    async def _begin(self, known_cache: dict[str, list[str]]) -> None:
        raise NotImplementedError

    async def _loop(self) -> None:
        raise NotImplementedError

    def _report(self) -> RunReport:
        raise NotImplementedError

    async def serve(self, *, known_cache: dict[str, list[str]]) -> RunReport:
        """Run until :meth:`stop`; ``known_cache`` as for a batch. Jobs unfinished then are
        left as they are (their packets in flight cancelled, never reported): a restarted
        engine is given them again with what was reported done."""
        self._serving = True
        self._keep_stats = False
        await self._begin(known_cache)
        self.ready.set()
        try:
            await self._loop()
        finally:
            futures = [entry[4] for entry in self._packets.values()]
            futures += [future for _, future in self._moves.values()]
            self._packets.clear()
            self._moves.clear()
            for task in list(self._tasks):
                task.cancel()
            if futures:
                await self.client.cancel(futures)  # type: ignore[no-untyped-call]
        return self._report()

    def stop(self) -> None:
        """End :meth:`serve` (at once: nothing more is reported)."""
        self._stopping = True
        self._wake()

    def submit(
        self,
        spec: JobSpec,
        *,
        done: Mapping[str, Sequence[tuple[int, int]]] | None = None,
        command: CommandSpec | None = None,
        user: str = "user",
        group: str = "default",
    ) -> int:
        """Add a job while serving: it arrives now, and runs what of its events is not in
        ``done`` (per file URL, entry ranges ``[start, stop)`` within the file, already
        processed); ``command``: a command job; ``user`` and ``group``: whose it is (the
        core's). Returns the events it will run. Raises
        ``ValueError`` naming the problem (an id already running, a range outside its
        file, a file not of the job)."""
        if any(j.spec.id == spec.id for j in self._jobs.values()):
            raise ValueError(f"job {spec.id!r}: already submitted")
        skip = self._done_events(spec, done or {})
        jr = self._add_job(replace(spec, submit_s=self.now()), done=skip, command=command)
        jr.user, jr.group = user, group
        for f in jr.spec.dataset.files:
            for node in self._uncharted.pop(f.url, []):
                self._emit(CacheChanged(self.now(), node, added=self.space.events_of([f.url])))
        self._wake()
        return jr.data.length

    def _done_events(
        self, spec: JobSpec, done: Mapping[str, Sequence[tuple[int, int]]]
    ) -> IntervalSet:
        """``done`` in the data space's event numbers (the job's files placed there)."""
        ids = place(self.space, spec.dataset)
        starts = {}
        for f, i in zip(spec.dataset.files, ids, strict=True):
            starts[f.url] = (self.space.files[i].start, f.n_events)
        ranges = []
        for url, pieces in done.items():
            if url not in starts:
                raise ValueError(f"done: {url!r} is not a file of job {spec.id!r}")
            base, n = starts[url]
            for a, b in pieces:
                if not 0 <= a <= b <= n:
                    raise ValueError(f"done: {url!r}: range [{a}, {b}) outside [0, {n})")
                ranges.append((base + a, base + b))
        return IntervalSet(ranges)

    def _chart(self, node: int, urls: Sequence[str]) -> None:
        """Files a command cached that no job has placed yet: told to the core when one
        does (a command's files are not its job's data)."""
        for url in urls:
            if not self.space.events_of([url]):
                self._uncharted.setdefault(url, []).append(node)

    def cancel(self, job: str, reason: str = "cancelled", *, failed: bool = False) -> bool:
        """Withdraw a job (by its spec id): ``aborted`` by its owner, or ``failed`` with
        ``reason`` (a limit it passed); False if it is not running or waiting."""
        for jr in list(self._jobs.values()):
            if jr.spec.id != job or jr.report.status not in ("pending", "running"):
                continue
            if jr in self._arrivals:  # not arrived yet: nothing of it runs
                self._arrivals.remove(jr)
                jr.report.status = "failed" if failed else "aborted"
                self._forget(jr)
                if self.listener is not None:
                    self.listener.job_done(job, jr.report.status, reason, "")
                return True
            if jr.failed:
                return False
            jr.aborted = not failed
            self._fail(jr, reason)
            self._wake()
            return True
        return False

    def running(self) -> list[str]:
        """The ids of the jobs not over."""
        return [j.spec.id for j in self._jobs.values() if j.report.status in ("pending", "running")]

    def snapshot(self) -> dict[str, Any]:
        """What runs where (JSON-able): each node's state, slots and what its cache holds as
        the core knows it, and each job's events to do and done."""
        nodes = []
        for n, w in enumerate(self.workers):
            running = []
            for index, slot in sorted(self.slots.items()):
                if slot.node != n:
                    continue
                sj = slot.subjob
                jr = self._jobs.get(sj.job_id) if sj is not None else None
                running.append(
                    {
                        "slot": index,
                        "job": jr.spec.id if jr is not None else None,
                        "events": sj.data.length if sj is not None else 0,
                        "packets_in_flight": len(slot.inflight),
                        "files_in_flight": self._files_of(slot.inflight.values()),
                        "since": slot.since if sj is not None else None,
                    }
                )
            cached = self.scheduler.directory.content(n)
            nodes.append(
                {
                    "name": w.name,
                    "address": w.address,
                    "up": w.up,
                    "slots": running,
                    "cached_bytes": self.space.bytes_of(cached),
                    "cached_files": len(self.space.files_in(cached)),
                    "cached_urls": [self.space.files[i].name for i in self.space.files_in(cached)],
                }
            )
        jobs = [
            {
                "id": j.spec.id,
                "status": j.report.status,
                "events": j.data.length,
                "done": j.done.length,
            }
            for j in self._jobs.values()
        ]
        return {"nodes": nodes, "jobs": jobs}

    def _files_of(self, ranges: Iterable[tuple[int, int]]) -> list[str]:
        """The names of the files that event ranges lie in, sorted."""
        data = IntervalSet(list(ranges))
        return sorted(self.space.files[i].name for i in self.space.files_in(data))

    def _forget(self, jr: _JobRun) -> None:
        """A served job is over: nothing of it is kept."""
        if self._serving:
            self._jobs.pop(jr.job_id, None)

    def _wake(self) -> None:
        self._results.put_nowait((self.WAKE, None, True))
