"""How the runtime master streams a subjob to its slot as packets (PROOF's model), and books
what the packets bring back. A base of :class:`~datasched.runtime.engine.RuntimeEngine`."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import Any

from distributed import Client, Future

from datasched.core.actions import Assign, Shrink, Start
from datasched.core.data import DataSpace
from datasched.core.events import CacheChanged, Event, SubjobFinished, SubjobShrunk, SubjobStopped
from datasched.core.intervals import IntervalSet
from datasched.core.model import Subjob
from datasched.core.packets import PacketRequest
from datasched.core.scheduler import Scheduler
from datasched.runtime.cachefaults import CacheFaults
from datasched.runtime.commands import CommandSpec, run_command
from datasched.runtime.jobspec import JobSpec
from datasched.runtime.outputs import merge
from datasched.runtime.processor import Processor, ShippedProcessor
from datasched.runtime.reports import (
    EngineConfig,
    EngineListener,
    JobReport,
    PacketReport,
    PacketStat,
    ProgressSink,
    tell_packet,
)
from datasched.runtime.worker import PacketError, PacketResult, PacketSpec, run_packet

__all__ = ["PacketStreams"]

_EMPTY = IntervalSet()


@dataclass(slots=True)
class _Worker:
    """A node: one Dask worker and its disk cache."""

    name: str
    address: str | None = None
    up: bool = False
    announced: set[str] = field(default_factory=set)
    """Files announced to the core as cached here, not fetched yet."""


@dataclass(slots=True)
class _Slot:
    """What one slot of a node is doing."""

    node: int
    subjob: Subjob | None = None
    start: Start | Assign | None = None
    todo: IntervalSet = _EMPTY
    processed: IntervalSet = _EMPTY
    inflight: dict[int, tuple[int, int]] = field(default_factory=dict)
    stopping: bool = False
    s_per_event: float = 0.0
    packet_s: float = 0.0
    """A packet's time on its worker, smoothed (0: none back yet)."""
    cpu_s: float = 0.0
    """CPU seconds of the subjob's packets back so far (its worker threads')."""
    since: float = 0.0
    """When its subjob got the slot, on the wall clock (POSIX seconds; the service's ETAs
    read how long a job has been on a node it has no packet back from)."""


@dataclass(slots=True)
class _JobRun:
    spec: JobSpec
    job_id: int
    data: IntervalSet
    report: JobReport
    processor: Processor | None
    """The master's copy (its postprocess runs here); None for a command job."""
    shipped: ShippedProcessor | None
    """What the packets carry to the workers; None for a command job."""
    first_packet_s: float | None = None
    accumulator: Any = None
    done: IntervalSet = _EMPTY
    """Events whose packets returned."""
    hits: int = 0
    failed: bool = False
    aborted: bool = False
    """Cancelled by its owner (a failed job is cancelled by the engine)."""
    command: CommandSpec | None = None
    """A command job: its one packet runs this (:mod:`~datasched.runtime.commands`)."""
    user: str = "user"
    group: str = "default"
    """Whose job it is (the core's fair shares, PROOF's groups)."""
    cpu_s: float = 0.0
    """CPU seconds of its packets back so far."""


class PacketStreams:
    """Packets of the subjobs running on slots (see the module docstring)."""

    # Provided by the engine.
    client: Client
    scheduler: Scheduler
    space: DataSpace
    config: EngineConfig
    progress: ProgressSink | None
    listener: EngineListener | None
    _keep_stats: bool
    workers: list[_Worker]
    slots: dict[int, _Slot]
    _jobs: dict[int, _JobRun]
    _packets: dict[int, tuple[int, int, int, int, Future[Any]]]
    _attempts: dict[tuple[int, int], int]
    _results: asyncio.Queue[tuple[int, Any, bool]]
    _stats: list[PacketStat]
    _scheduling_s: float
    _run_id: str
    _tasks: set[asyncio.Task[None]]
    _t0_wall: float
    _notes: list[str]
    _cache_faults: CacheFaults

    def now(self) -> float:
        raise NotImplementedError

    def _emit(self, event: Event) -> None:
        raise NotImplementedError

    def _fail(self, jr: _JobRun, message: str, traceback: str = "") -> None:
        raise NotImplementedError

    def _next_id(self) -> int:
        raise NotImplementedError

    def _chart(self, node: int, urls: list[str]) -> None:
        raise NotImplementedError

    def _shrink(self, action: Shrink) -> SubjobShrunk:
        """Give up what was asked of the packets not yet sent; those in flight go on, and so
        does the subjob with what it keeps (no pause, unlike a Preempt)."""
        slot = self.slots[action.slot]
        sj = slot.subjob
        released = _EMPTY
        if sj is not None and sj.subjob_id == action.subjob_id and not slot.stopping:
            released = action.release & slot.todo
            if released:
                slot.todo = slot.todo - released
                slot.subjob = sj.shrunk(released)
        return SubjobShrunk(self.now(), action.subjob_id, action.slot, released)

    def _packet_stop(
        self, slot: _Slot, jr: _JobRun, a: int, b: int, file_stop: int, *, pulled: bool
    ) -> int:
        """The policy cuts the packet (:meth:`~datasched.core.policy.Policy.packet_stop`):
        the runtime only says what it measured."""
        job_slots = sum(
            1 for s in self.slots.values() if s.subjob is not None and s.subjob.job_id == jr.job_id
        )
        req = PacketRequest(
            start=a,
            stop=b,
            file_stop=file_stop,
            pulled=pulled,
            s_per_event=slot.s_per_event,
            events_left=jr.data.length - jr.done.length,
            job_slots=job_slots,
        )
        stop = self.scheduler.policy.packet_stop(req)
        if not a < stop <= min(b, file_stop):
            name = self.scheduler.policy.name
            raise RuntimeError(f"policy {name}: packet {a}-{stop} outside {a}-{min(b, file_stop)}")
        return stop

    def _depth(self, slot: _Slot) -> int:
        """Packets in flight for the slot: ``packets_in_flight``, or more while its packets
        are short (cut at the ends of small files): about ``queue_s`` of work queued on the
        worker, so that it goes from one packet to the next without waiting for the master's
        round trip (result back, next packet out), up to ``max_in_flight``."""
        return self.config.packet_depth.depth(slot.packet_s)

    def _feed(self, index: int) -> None:
        """Keep the slot's packets going (:meth:`_depth` of them); close the subjob when
        done."""
        t0 = time.perf_counter()
        slot = self.slots[index]
        sj, start = slot.subjob, slot.start
        if sj is None or start is None:
            return
        jr = self._jobs[sj.job_id]
        address = self.workers[slot.node].address
        while slot.todo and not slot.stopping and not jr.failed:
            if address is None or len(slot.inflight) >= self._depth(slot):
                break
            a, b = slot.todo.ranges[0]
            f = self.space.files[self.space.file_at(a)]
            b = self._packet_stop(slot, jr, a, b, f.stop, pulled=not isinstance(start, Start))
            slot.todo = slot.todo - IntervalSet.range(a, b)
            self._submit(index, jr, a, b, start, address)
        self._scheduling_s += time.perf_counter() - t0
        if not slot.inflight and (not slot.todo or slot.stopping or jr.failed):
            self._close(index)

    def _submit(
        self, index: int, jr: _JobRun, a: int, b: int, start: Start | Assign, address: str
    ) -> None:
        slot = self.slots[index]
        f = self.space.files[self.space.file_at(a)]
        pid = self._next_id()
        if jr.first_packet_s is None and self.listener is not None:
            self.listener.job_running(jr.spec.id, self.workers[slot.node].name)
        if jr.command is not None:
            command = self._command_spec(index, jr, pid, start)
            self._submit_task(index, jr, a, b, pid, address, run_command, command)
            return
        assert jr.shipped is not None
        spec = PacketSpec(
            packet_id=pid,
            job_id=jr.job_id,
            url=f.name,
            tree=f.tree,
            local_start=a - f.start,
            local_stop=b - f.start,
            file_bytes=f.n_bytes,
            processor=jr.shipped,
            read=jr.spec.read,
            cache_fill=start.cache_fill,
            peer=self._peer_address(slot.node, a) if start.peer_reads else None,
            replicate=start.replicate,
            peers=self._other_workers(slot.node) if start.peer_reads else (),
            use_cache=start.cache_fill or start.peer_reads,
            nice=self.scheduler.policy.packet_nice(jr.job_id),
            code=jr.spec.code,
            confine=jr.spec.confine,
            **self._budget(jr),
        )
        self._submit_task(index, jr, a, b, pid, address, run_packet, spec)

    def _budget(self, jr: _JobRun) -> dict[str, Any]:
        raise NotImplementedError  # runtime.limits.JobLimits

    def _token(self, jr: _JobRun) -> str:
        raise NotImplementedError  # runtime.limits.JobLimits

    def _command_spec(
        self, index: int, jr: _JobRun, pid: int, start: Start | Assign
    ) -> CommandSpec:
        """The command job's one packet: every file of it, through this node's cache."""
        assert jr.command is not None
        return replace(
            jr.command,
            packet_id=pid,
            job_id=jr.job_id,
            cache_fill=start.cache_fill,
            use_cache=start.cache_fill or start.peer_reads,
            peers=self._other_workers(self.slots[index].node) if start.peer_reads else (),
            token=self._token(jr),
        )

    def _submit_task(
        self,
        index: int,
        jr: _JobRun,
        a: int,
        b: int,
        pid: int,
        address: str,
        task: Any,
        spec: Any,
    ) -> None:
        slot = self.slots[index]
        future = self.client.submit(
            task,
            spec,
            key=f"datasched-packet-{self._run_id}-{pid}",
            pure=False,
            workers=[address],
            allow_other_workers=False,
            retries=0,
        )
        slot.inflight[pid] = (a, b)
        self._packets[pid] = (index, jr.job_id, a, b, future)
        if jr.first_packet_s is None:
            jr.first_packet_s = self.now()
        self._watch(pid, future)

    def _watch(self, token: int, future: Future[Any]) -> None:
        task = asyncio.ensure_future(self._await(token, future))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    ASK_PEERS_UP_TO = 16
    """Clusters this size or smaller: a packet that may read from peers asks every other
    worker before it fetches from tertiary storage (the directory may not know yet)."""

    def _other_workers(self, node: int) -> tuple[str, ...]:
        others = [
            w.address
            for i, w in enumerate(self.workers)
            if i != node and w.up and w.address is not None
        ]
        return tuple(others) if len(others) < self.ASK_PEERS_UP_TO else ()

    def _peer_address(self, node: int, event: int) -> str | None:
        """The Dask address of another worker whose cache holds (or is fetching) the file
        of ``event``: the packet reads it from there, over the cluster's network."""
        f = self.space.files[self.space.file_at(event)]
        for _, _, holders in self.scheduler.directory.holders(f.start, f.start + 1):
            for peer in sorted(h for h in holders if h != node):
                if self.workers[peer].up and self.workers[peer].address is not None:
                    return self.workers[peer].address
        return None

    async def _await(self, token: int, future: Future[Any]) -> None:
        try:
            result = await future
        except BaseException as exc:  # every failure, cancellation included, is booked
            await self._results.put((token, exc, False))
            return
        await self._results.put((token, result, True))

    def _on_packet(self, token: int, payload: Any, ok: bool) -> None:
        entry = self._packets.pop(token, None)
        if entry is None:
            return  # written off already (its worker vanished): its events went back
        index, job_id, a, b, _ = entry
        slot = self.slots[index]
        slot.inflight.pop(token, None)
        worker = self.workers[slot.node]
        if ok and payload is None:  # stopped on its worker with its job: not processed
            ok = False
        if ok:
            url = self.space.files[self.space.file_at(a)].name
            if payload.source == "cache" or url in payload.cache_added:
                worker.announced.discard(url)
            elif payload.source == "direct" and url in worker.announced:
                # Its cache disk is full: the file announced there is not coming.
                worker.announced.discard(url)
                self._emit(CacheChanged(self.now(), slot.node, evicted=self.space.events_of([url])))
            self._cache_faults.packet(worker.name, url, payload.source, payload.cache_corrupted)
        jr = self._jobs[job_id]
        skip = self.config.skip_bad_files
        if ok:
            self._book(index, jr, a, b, payload)
        elif jr.failed:
            # Stopped with its job (failed, or cancelled: its future cancelled through
            # Dask): not processed, and no failure of its own to count or skip a file for.
            slot.todo = slot.todo | IntervalSet.range(a, b)
        elif isinstance(payload, PacketError):
            if skip and payload.kind == "data":
                self._skip_file(index, jr, a, b, payload.message)
            else:
                # Not processed: the rest of the job is dropped by the core.
                slot.todo = slot.todo | IntervalSet.range(a, b)
                self._fail(jr, f"{payload.kind} error: {payload}", payload.traceback)
        else:
            attempts = self._attempts.get((a, b), 0) + 1
            self._attempts[(a, b)] = attempts
            slot.todo = slot.todo | IntervalSet.range(a, b)
            if attempts >= self.config.max_packet_attempts:
                message = f"packet {a}-{b} failed {attempts} times: {payload!r}"
                if skip:
                    slot.todo = slot.todo - IntervalSet.range(a, b)
                    self._skip_file(index, jr, a, b, message)
                else:
                    self._fail(jr, message)
        self._feed(index)

    def _skip_file(self, index: int, jr: _JobRun, a: int, b: int, reason: str) -> None:
        """``--skip-bad-files``: the packet's file cannot be read. Its events not yet sent
        (by any slot of the job) are dropped with the packet's, counted as done but skipped,
        and the file is recorded in the job's report."""
        f = self.space.files[self.space.file_at(a)]
        gone = IntervalSet.range(a, b)
        for slot in self.slots.values():
            if slot.subjob is not None and slot.subjob.job_id == jr.job_id:
                mine = slot.todo.clip(f.start, f.stop)
                if mine:
                    slot.todo = slot.todo - mine
                    slot.processed = slot.processed | mine
                    jr.done = jr.done | mine
                    jr.report.events_skipped += mine.length
        self.slots[index].processed = self.slots[index].processed | gone
        jr.done = jr.done | gone
        jr.report.events_skipped += b - a
        if all(url != f.name for url, _ in jr.report.skipped_files):
            jr.report.skipped_files.append((f.name, reason))

    def _book(self, index: int, jr: _JobRun, a: int, b: int, result: PacketResult) -> None:
        slot = self.slots[index]
        piece = IntervalSet.range(a, b)
        if jr.done.overlaps(piece):
            raise RuntimeError(f"job {jr.spec.id}: events {a}-{b} returned twice")
        jr.done = jr.done | piece
        slot.processed = slot.processed | piece
        slot.cpu_s += result.cpu_s
        jr.cpu_s += result.cpu_s
        n = b - a
        if not jr.failed:
            if jr.spec.code is None:  # a sandboxed job's result is opaque bytes: not merged
                jr.accumulator = merge(jr.accumulator, result.accumulator)
            jr.report.events_processed += n
            jr.report.bytes_from_tertiary += result.bytes_from_tertiary
            if result.source == "cache":
                jr.hits += n
        spent = result.read_s + result.compute_s
        # The slot's time per event, smoothed: the policy sizes packets from it.
        slot.s_per_event = 0.7 * slot.s_per_event + 0.3 * spent / max(n, 1)
        slot.packet_s = 0.7 * slot.packet_s + 0.3 * spent if slot.packet_s else spent
        if result.note and result.note not in self._notes:
            self._notes.append(result.note)
        f = self.space.files[self.space.file_at(a)]
        stat = PacketStat(
            job=jr.spec.id,
            node=self.workers[slot.node].name,
            url=f.name,
            start=a,
            stop=b,
            source=result.source,
            bytes_from_tertiary=result.bytes_from_tertiary,
            bytes_from_peer=result.bytes_from_peer,
            read_s=result.read_s,
            compute_s=result.compute_s,
            bytes_read=result.bytes_read,
            cpu_s=result.cpu_s,
            nice=result.nice,
            t_start=max(result.started - self._t0_wall, 0.0),
            t_end=self.now(),
            t_slot=(None if result.slot_at is None else max(result.slot_at - self._t0_wall, 0.0)),
        )
        if self._keep_stats:
            self._stats.append(stat)
        if self.listener is not None and not jr.failed:
            report = PacketReport(
                jr.spec.id, f.name, a - f.start, b - f.start, stat, result.accumulator
            )
            self.listener.packet_done(report)
        if self.progress is not None:
            self.progress.advance(jr.spec.id, n, result.source == "cache")
            tell_packet(self.progress, stat)
        if jr.command is not None and result.cache_added:
            self._chart(slot.node, result.cache_added)
        if result.cache_added or result.cache_evicted:
            self._emit(
                CacheChanged(
                    self.now(),
                    slot.node,
                    added=self.space.events_of(result.cache_added),
                    evicted=self.space.events_of(result.cache_evicted),
                )
            )

    def _announce(self, node: int, start: Start | Assign) -> None:
        """Tell the core at once that the subjob's files will be in this node's cache: jobs
        arriving meanwhile are then sent here instead of fetching the same files elsewhere
        (fetches in flight, which the simulator's caches model too). What is not fetched
        after all is retracted when the node's subjobs end."""
        worker = self.workers[node]
        if not start.cache_fill or start.peer_reads:
            return
        directory = self.scheduler.directory
        added = []
        for i in self.space.files_in(start.subjob.data):
            f = self.space.files[i]
            if directory.cached_length(node, f.events) < f.n_events:
                added.append((f.start, f.stop))
                worker.announced.add(f.name)
        if added:
            self._emit(CacheChanged(self.now(), node, added=IntervalSet(added)))

    def _retract(self, node: int) -> None:
        """Announced files the node did not fetch after all (once none of its slots runs)."""
        worker = self.workers[node]
        busy = any(s.subjob is not None for s in self.slots.values() if s.node == node)
        if worker.announced and not busy:
            gone = self.space.events_of(sorted(worker.announced))
            worker.announced.clear()
            self._emit(CacheChanged(self.now(), node, evicted=gone))

    def _close(self, index: int) -> None:
        """The slot's subjob is over: finished, or stopped with its exact remainder."""
        slot = self.slots[index]
        sj = slot.subjob
        if sj is None:
            return
        remaining = sj.data - slot.processed
        cpu_s, slot.cpu_s = slot.cpu_s, 0.0
        slot.subjob = slot.start = None
        slot.todo = slot.processed = _EMPTY
        slot.stopping = False
        self._retract(slot.node)
        if remaining:
            self._emit(SubjobStopped(self.now(), sj.subjob_id, index, remaining, cpu_s=cpu_s))
        else:
            self._emit(SubjobFinished(self.now(), sj.subjob_id, index, cpu_s=cpu_s))
