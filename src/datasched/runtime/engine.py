"""The Dask engine: the same built :class:`Scheduler` core as the simulator, driving real
workers.

The master is one asyncio loop (docs/design.md, "The engines"). It turns the world into core events
(jobs arriving at their submission times, packets returning, workers leaving and coming back,
wake-ups) and carries out the core's actions. A node of the core is one Dask worker (with its
own disk cache); each of its slots runs one subjob at a time:

* ``Start(subjob, slot)``: the subjob runs as a stream of packets, PROOF-style (the PROOF
  paper §2): each packet is an event range of one file, cut by the policy
  (:meth:`~datasched.core.policy.Policy.packet_stop`; push policies keep the default
  packetizer of :mod:`datasched.core.packets`) from what the master measured (the slot's
  time per event, the job's events left), submitted as a Dask task pinned to the node's
  worker (``workers=[address]``, ``allow_other_workers=False``, ``pure=False``, a unique
  key). At least ``packets_in_flight`` (2) packets per slot, so the next one's file is
  fetched while the current one computes; more while packets are short, so that the worker
  does not wait for the master's round trip between them.
* ``Assign`` (the answer to a pull: PROOF's packetizers) is one packet, cut only at its
  file's end (and the run's chunksize). Pull policies are asked: every slot raises
  ``WorkRequested`` when the run starts, and a slot whose packet returns is free again
  (``SubjobFinished``, the core's request), so the policy answers with the next packet.
* ``Preempt(slot)``: no more packets; once those in flight return, the core learns what was
  really processed (``SubjobStopped`` with the exact remainder).
* ``Shrink(slot, release)``: what is asked and not yet sent as a packet is taken from the
  slot's work at once (``SubjobShrunk``); the slot goes on with the rest without a pause.
* ``Fetch``, ``Replicate``, ``Pin``, ``Unpin``, ``Evict``: tasks on the node's worker
  (:mod:`datasched.runtime.datamoves`), answered by ``FetchDone``, ``TransferDone`` or
  ``CacheChanged``.
* Cache changes reported by packets become ``CacheChanged`` events, so the core's cache
  directory stays true.

Faults: a worker that vanishes (killed, crashed) is a ``NodeLost`` at once: its packets in
flight are written off and the exact rest of each of its subjobs goes back to the core,
which offers it to other slots. When it comes back (its nanny restarts it under its name), it
is a ``NodeJoined``, and what its persistent cache holds is reported. The run's notes name
each lost worker, when, and what went back to the queue (:attr:`RunReport.workers_lost`).

Holds: once a batch's last job has arrived, the core hears ``ArrivalsClosed`` (a policy
that gathers jobs for a period, delayed scheduling, then lets them go: none will join them).
A job a policy holds back (``JobHeld``) and lets go (``JobReleased``) is told to the progress
sink and the log as it happens, and the run's notes say it afterwards. A packet that fails on
its data (missing or corrupted file) or in the user's code fails its job, with a message
naming the file: the core cancels the job (its running subjobs stop, the rest is dropped) and
other jobs go on. Results are counted only when a packet returns, and each event range at most
once (checked), so no event is lost or counted twice.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections import deque
from typing import Any

from distributed import Client, Future

from datasched.core.actions import (
    Assign,
    Evict,
    Fetch,
    JobCompleted,
    JobFailed,
    JobHeld,
    JobReleased,
    Pin,
    Preempt,
    Replicate,
    Shrink,
    Start,
    Unpin,
    WakeAt,
)
from datasched.core.dispatch import EventPump
from datasched.core.events import (
    ArrivalsClosed,
    CacheChanged,
    Event,
    JobArrived,
    JobCancelled,
    NodeJoined,
    NodeLost,
    Tick,
    WorkRequested,
)
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job
from datasched.core.scheduler import Scheduler
from datasched.runtime.cachefaults import CacheFaults
from datasched.runtime.commands import CommandSpec
from datasched.runtime.datamoves import evict_files, pin_files, unpin_files
from datasched.runtime.jobspec import JobSpec, processor_for
from datasched.runtime.limits import JobLimits
from datasched.runtime.moves import DataMoves
from datasched.runtime.outputs import finish_output
from datasched.runtime.processor import Processor, ShippedProcessor, user_traceback
from datasched.runtime.reports import (
    EngineConfig,
    EngineListener,
    JobReport,
    NoteSink,
    PacketStat,
    ProgressSink,
    RunReport,
    span,
)
from datasched.runtime.serving import Serving
from datasched.runtime.space import job_events
from datasched.runtime.streams import PacketStreams, _JobRun, _Slot, _Worker
from datasched.runtime.worker import cache_contents

__all__ = ["RuntimeEngine"]

_EMPTY = IntervalSet()
log = logging.getLogger("datasched.runtime")


class RuntimeEngine(JobLimits, Serving, PacketStreams, DataMoves):
    """Runs :class:`JobSpec` s on the workers of a Dask ``client``, one worker a node of
    ``scheduler``'s topology (``worker_names[i]`` is node ``i``): a batch (:meth:`run`), or
    jobs submitted and cancelled while it runs (:meth:`serve`, :class:`Serving`)."""

    def __init__(
        self,
        client: Client,
        scheduler: Scheduler,
        worker_names: list[str],
        *,
        config: EngineConfig | None = None,
        progress: ProgressSink | None = None,
        time_scale: float = 1.0,
        listener: EngineListener | None = None,
    ) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale: must be positive, got {time_scale!r}")
        if len(worker_names) != scheduler.topology.n_nodes:
            raise ValueError("worker_names: one worker per node of the scheduler's topology")
        self.client = client
        self.scheduler = scheduler
        self.space = scheduler.space
        self.config = config or EngineConfig()
        self.policy_name = scheduler.policy.name
        self.progress = progress
        self.listener = listener
        """Told of each job's first packet, each packet's result and each job's end."""
        self.time_scale = time_scale
        """Seconds of the core's time per second of real time: above 1, periods of hours
        (delayed scheduling's, adaptive delay's) pass in seconds (tests, demos). Arrival and
        wake-up times are in the core's time; packets run at their own pace."""
        self.workers: list[_Worker] = [_Worker(name) for name in worker_names]
        self._by_name = {name: i for i, name in enumerate(worker_names)}
        first_guess = (  # an engine that serves may start with no data yet
            scheduler.s_per_event_on(0, IntervalSet.range(0, 1))
            if self.space.n_events
            else scheduler.cost.cpu_s_per_event
        )
        self.slots = {
            slot: _Slot(node, s_per_event=first_guess)
            for node in range(len(worker_names))
            for slot in scheduler.slots_of(node)
        }
        self._jobs: dict[int, _JobRun] = {}
        self._events = EventPump(scheduler, self, timer=time.perf_counter, restamp=True)
        """The one event order (core.dispatch): what the loop and the workers' results bring
        are external events; answers given while actions are carried out are follow-ups.
        An external event queued before a follow-up stamped later is handled at the
        follow-up's time (the real clock went on)."""
        self._ticks: list[float] = []
        self._ids = itertools.count()
        self._packets: dict[int, tuple[int, int, int, int, Future[Any]]] = {}
        """packet id -> (slot, job id, global start, global stop, future)."""
        self._moves: dict[int, tuple[Fetch | Replicate | Evict, Future[Any]]] = {}
        self._attempts: dict[tuple[int, int], int] = {}
        self._results: asyncio.Queue[tuple[int, Any, bool]] = asyncio.Queue()
        self._stats: list[PacketStat] = []
        self._scheduling_s = 0.0
        self._t0 = 0.0
        self._t0_wall = 0.0
        self._notes: list[str] = []
        self._cache_faults = CacheFaults()
        self._run_id = uuid.uuid4().hex[:8]
        self._tasks: set[asyncio.Task[None]] = set()
        self._outputs: dict[str, Any] = {}
        """Each written output's result, by the id it belongs to."""
        self._to_cancel: list[Future[Any]] = []
        self.worker_departures = 0
        """Times a worker vanished (its packets written off)."""
        self._job_ids = itertools.count()
        self._arrivals: deque[_JobRun] = deque()
        self._processors: dict[str, tuple[Processor, ShippedProcessor]] = {}
        self._serving = False
        """Open-ended (:meth:`serve`): no outputs written, no per-packet statistics kept,
        finished jobs forgotten."""
        self._keep_stats = True
        self._stopping = False
        self.ready = asyncio.Event()
        """Set once :meth:`serve` has started: jobs may be submitted."""
        self._uncharted: dict[str, list[int]] = {}
        """Files the workers cache that no job has named yet: url -> nodes."""
        self._arrivals_closed = False
        self._holds: dict[int, float] = {}
        """Job id -> until when its policy holds it back (while it does)."""
        self._hold_news: list[tuple[bool, int, float]] = []
        """Holds and releases not told yet: (released, job id, until)."""
        self._lost: list[dict[str, Any]] = []
        """Each worker lost during the run (:attr:`RunReport.workers_lost`)."""

    # -- the loop -----------------------------------------------------------------------------

    def now(self) -> float:
        return (time.monotonic() - self._t0) * self.time_scale

    def _next_id(self) -> int:
        return next(self._ids)

    async def run(self, specs: list[JobSpec], *, known_cache: dict[str, list[str]]) -> RunReport:
        """Run every job to completion (or failure); ``known_cache`` is each worker's cache
        content at the start (worker name -> URLs), so the directory starts out true."""
        for spec in specs:
            self._add_job(spec)
        await self._begin(known_cache)
        await self._loop()
        await self._settle_moves()
        return self._report()

    def _add_job(
        self, spec: JobSpec, *, done: IntervalSet = _EMPTY, command: CommandSpec | None = None
    ) -> _JobRun:
        """A job to run (from its submission time): its events less ``done``; a command
        job runs ``command`` once instead of a processor per packet."""
        data = job_events(self.space, spec.dataset, spec.start, spec.stop) - done
        report = JobReport(
            id=spec.id,
            events_expected=data.length,
            output=str(spec.output),
            skipped_files=list(spec.skipped),
        )
        proc, shipped = (None, None) if command else processor_for(spec, self._processors)
        jr = _JobRun(
            spec,
            next(self._job_ids),
            data,
            report,
            proc,
            shipped,
            command=command,
            user=spec.user,
            group=spec.user_group,
        )
        self._jobs[jr.job_id] = jr
        self._arrivals.append(jr)
        return jr

    async def _begin(self, known_cache: dict[str, list[str]]) -> None:
        self._t0 = time.monotonic()
        self._t0_wall = time.time()
        await self._refresh_workers(initial=True)
        for name, urls in known_cache.items():
            node = self._by_name.get(name)
            if node is not None and urls:
                self._emit(CacheChanged(self.now(), node, added=self.space.events_of(urls)))
                if self._serving:  # files of jobs to come: told when a job names them
                    placed = {f.name for f in self.space.files}
                    for url in set(urls) - placed:
                        self._uncharted.setdefault(url, []).append(node)
        for index, slot in self.slots.items():  # every slot asks for work (a pull)
            if self.workers[slot.node].up:
                self._emit(WorkRequested(self.now(), index))
        self._arrivals = deque(sorted(self._arrivals, key=lambda j: (j.spec.submit_s, j.job_id)))

    def _open(self) -> bool:
        if self._serving:
            return not self._stopping
        return any(j.report.status in ("pending", "running") for j in self._jobs.values())

    async def _loop(self) -> None:
        arrivals = self._arrivals
        next_poll = 0.0
        while self._open():
            now = self.now()
            while arrivals and arrivals[0].spec.submit_s <= now:
                jr = arrivals.popleft()
                jr.report.status = "running"
                if self.progress is not None:
                    self.progress.job_started(jr.spec.id, jr.data.length)
                job = Job(
                    jr.job_id, now, jr.data, user=jr.user, group=jr.group, priority=jr.spec.priority
                )
                self._emit(JobArrived(now, job))
            if not arrivals and not self._serving and not self._arrivals_closed:
                # The batch's last job is in: what a policy holds for others to join may go.
                self._arrivals_closed = True
                self._emit(ArrivalsClosed(now))
            self._ticks.sort()
            while self._ticks and self._ticks[0] <= now:
                self._ticks.pop(0)
                self._emit(Tick(now))
            self._pump()
            if now >= next_poll:
                await self._refresh_workers()
                next_poll = now + self.config.poll_s * self.time_scale
                self._pump()
            wake = [next_poll]
            if arrivals:
                wake.append(arrivals[0].spec.submit_s)
            if self._ticks:
                wake.append(self._ticks[0])
            timeout = max(min(wake) - self.now(), 0.0) / self.time_scale
            try:
                item = await asyncio.wait_for(self._results.get(), timeout=timeout)
            except TimeoutError:
                continue
            self._on_result(*item)
            while not self._results.empty():
                self._on_result(*self._results.get_nowait())
            self._pump()

    def _report(self) -> RunReport:
        makespan = max((j.report.wall_s + j.spec.submit_s for j in self._jobs.values()), default=0)
        return RunReport(
            policy=self.policy_name,
            makespan_s=makespan,
            jobs=[j.report for j in self._jobs.values()],
            packets=self._stats,
            scheduling_s=self._scheduling_s + self._events.scheduling_s,
            results=dict(self._outputs),
            notes=[
                *self._notes,
                *self._cache_faults.notes(),
                *(self._lost_note(lost) for lost in self._lost),
            ],
            cache_faults=self._cache_faults.as_dict(),
            workers=[w.name for w in self.workers],
            workers_lost=[dict(lost) for lost in self._lost],
            started_wall=self._t0_wall,
        )

    def _on_result(self, token: int, payload: Any, ok: bool) -> None:
        """A task came back: a data move, or a packet (or the loop was woken: a job came)."""
        if token == self.WAKE:
            return
        if token in self._moves:
            self._on_move(token, payload, ok)
        else:
            self._on_packet(token, payload, ok)

    # -- core events in, actions out (core.dispatch) ----------------------------------------

    def _emit(self, event: Event) -> None:
        self._events.emit(event)

    def _pump(self) -> None:
        self._events.pump()
        if self._hold_news:
            self._tell_holds()

    def on_start(self, action: Start | Assign) -> None:
        slot = self.slots[action.slot]
        if slot.subjob is not None:
            raise RuntimeError(f"slot {action.slot}: start while running a subjob")
        slot.subjob, slot.start = action.subjob, action
        slot.todo, slot.processed, slot.stopping = action.subjob.data, _EMPTY, False
        slot.since = time.time()
        self._announce(slot.node, action)
        self._feed(action.slot)

    def on_preempt(self, action: Preempt) -> None:
        slot = self.slots[action.slot]
        if slot.subjob is not None and slot.subjob.subjob_id == action.subjob_id:
            slot.stopping = True
            self._feed(action.slot)

    def on_shrink(self, action: Shrink) -> None:
        self._emit(self._shrink(action))

    def on_wake_at(self, action: WakeAt) -> None:
        self._ticks.append(action.time)

    def on_job_completed(self, action: JobCompleted) -> None:
        self._complete(self._jobs[action.job_id])

    def on_job_failed(self, action: JobFailed) -> None:
        jr = self._jobs[action.job_id]
        self._fail(jr, action.reason)
        self._complete(jr)

    def on_job_held(self, action: JobHeld) -> None:
        if action.job_id in self._jobs:
            self._holds[action.job_id] = action.until
            self._hold_news.append((False, action.job_id, action.until))

    def on_job_released(self, action: JobReleased) -> None:
        until = self._holds.pop(action.job_id, None)
        if until is not None:
            self._hold_news.append((True, action.job_id, until))

    def _tell_holds(self) -> None:
        """Holds and releases since the last pump, one line per kind and time: on the
        progress sink (its bars), in the log, and releases in the run's notes."""
        news, self._hold_news = self._hold_news, []
        policy = self.policy_name or "the policy"
        sink = self.progress if isinstance(self.progress, NoteSink) else None
        real_now = self.now() / self.time_scale
        groups: dict[tuple[bool, float], list[str]] = {}
        for released, job_id, until in news:
            name = self._jobs[job_id].report.id
            groups.setdefault((released, until), []).append(name)
            if sink is not None:
                if released:
                    sink.job_released(name)
                else:
                    sink.job_held(name, f"held until {span(until / self.time_scale)}")
        for (released, until), names in groups.items():
            jobs = f"job{'s' if len(names) > 1 else ''} {', '.join(names)}"
            until_text = span(until / self.time_scale)
            if not released:
                line = (
                    f"{jobs} held by {policy} until {until_text} into the run (the end of its "
                    "period; it ends sooner once the jobs file has no more jobs to come)"
                )
            else:
                why = (
                    "the jobs file has no more jobs to come"
                    if self._arrivals_closed and self.scheduler.now < until
                    else "the period ended"
                )
                line = (
                    f"{jobs} held by {policy} (period end {until_text} into the run), "
                    f"released {span(real_now)} into the run: {why}"
                )
                self._notes.append(line)
            log.info("%s", line)
            if sink is not None:
                sink.note(line)

    def on_fetch(self, action: Fetch) -> None:
        self._move(action)

    def on_replicate(self, action: Replicate) -> None:
        self._move(action)

    def on_evict(self, action: Evict) -> None:
        self._submit_move(action, action.node, evict_files, self._urls(action.data))

    def on_pin(self, action: Pin) -> None:
        self._fire(action.node, pin_files, action.token, self._urls(action.data))

    def on_unpin(self, action: Unpin) -> None:
        self._fire(action.node, unpin_files, action.token)

    # -- packets ------------------------------------------------------------------------------

    def _fail(self, jr: _JobRun, message: str, traceback: str = "") -> None:
        """A job cannot go on: the core cancels it (its running subjobs stop)."""
        if not jr.failed:
            jr.failed = True
            jr.report.error = message
            jr.report.traceback = traceback
            self._emit(JobCancelled(self.now(), jr.job_id, message))
            self._abort_on_workers(jr)

    def _complete(self, jr: _JobRun) -> None:
        now = self.now()
        report = jr.report
        report.wall_s = now - jr.spec.submit_s
        report.wait_s = (jr.first_packet_s or now) - jr.spec.submit_s
        report.cache_hit_ratio = jr.hits / report.events_processed if report.events_processed else 0
        report.status = "aborted" if jr.aborted else "failed" if jr.failed else "completed"
        if jr.failed:
            jr.accumulator = None
        if self._serving:
            self._forget(jr)
        else:
            # A fileset's datasets write one output, once the last of them is over.
            group = [j for j in self._jobs.values() if j.spec.output_of == jr.spec.output_of]
            if all(j.report.status in ("completed", "failed") for j in group):
                self._finish_output(group)
        if self.progress is not None:
            self.progress.job_done(jr.spec.id, report.status)
        if self.listener is not None:
            self.listener.job_done(jr.spec.id, report.status, report.error, report.traceback)

    def _finish_output(self, group: list[_JobRun]) -> None:
        """The group's output (:func:`~datasched.runtime.outputs.finish_output`)."""
        first = group[0]
        post = getattr(first.processor, "postprocess", None)
        written, result = finish_output(
            first.spec.output,
            [(j.report, j.accumulator) for j in group],
            post if callable(post) else None,
            user_traceback,
        )
        if written:
            self._outputs[first.spec.output_of] = result

    # -- data moves ---------------------------------------------------------------------------

    # -- workers coming and going -------------------------------------------------------------

    async def _refresh_workers(self, *, initial: bool = False) -> None:
        assert self.client.scheduler is not None
        info = await self.client.scheduler.identity()
        alive = {str(w.get("name")): addr for addr, w in info.get("workers", {}).items()}
        now = self.now()
        for node, worker in enumerate(self.workers):
            addr = alive.get(worker.name)
            if initial:
                # Workers missing at the start are lost until they show up.
                worker.address, worker.up = addr, addr is not None
                if addr is None:
                    self._emit(NodeLost(now, node))
                continue
            if addr == worker.address:
                continue
            if worker.up:
                # Gone, or back under a new address: its packets are lost either way.
                self.worker_departures += 1
                self._lose(node)
            worker.address = addr
            if addr is None:
                continue
            worker.up = True
            for lost in reversed(self._lost):
                if lost["worker"] == worker.name and lost["back_s"] is None:
                    lost["back_s"] = round(now / self.time_scale, 3)
                    break
            self._emit(NodeJoined(now, self.scheduler.topology.nodes[node]))
            contents: dict[str, list[str]] = await self.client.run(cache_contents, workers=[addr])
            urls = contents.get(addr, [])
            if urls:
                self._emit(CacheChanged(now, node, added=self.space.events_of(urls)))
        if self._to_cancel:
            futures, self._to_cancel = self._to_cancel, []
            await self.client.cancel(futures)  # type: ignore[no-untyped-call]

    def _lose(self, node: int) -> None:
        """The node's worker went away: its packets in flight are written off (their results
        cannot arrive any more, so they are never counted) and the exact rest of each of its
        subjobs goes back to the core with NodeLost."""
        worker = self.workers[node]
        worker.up = False
        worker.announced.clear()
        remaining = []
        requeued: dict[str, int] = {}
        written_off = written_off_events = 0
        for index, slot in self.slots.items():
            if slot.node != node:
                continue
            for pid in list(slot.inflight):
                entry = self._packets.pop(pid, None)
                if entry is not None:
                    self._to_cancel.append(entry[4])
                    written_off += 1
                    written_off_events += entry[3] - entry[2]
            slot.inflight.clear()
            if slot.subjob is not None:
                rest = slot.subjob.data - slot.processed
                remaining.append((index, rest))
                jr = self._jobs.get(slot.subjob.job_id)
                if jr is not None and rest:
                    requeued[jr.report.id] = requeued.get(jr.report.id, 0) + rest.length
            slot.subjob = slot.start = None
            slot.todo = slot.processed = _EMPTY
            slot.stopping = False
            slot.cpu_s = 0.0
        self._lost.append(
            {
                "worker": worker.name,
                "lost_s": round(self.now() / self.time_scale, 3),
                "back_s": None,
                "packets_written_off": written_off,
                "events_written_off": written_off_events,
                "events_requeued": dict(requeued),
            }
        )
        self._emit(NodeLost(self.now(), node, tuple(remaining)))

    @staticmethod
    def _lost_note(lost: dict[str, Any]) -> str:
        """One line of the run's notes for a lost worker: who, when, what was re-run."""
        requeued: dict[str, int] = lost["events_requeued"]
        back = "" if lost["back_s"] is None else f", back {span(lost['back_s'])} into the run"
        if requeued:
            total = sum(requeued.values())
            per_job = ", ".join(f"job {j}: {n:,}" for j, n in requeued.items())
            what = (
                f"{total:,} events went back to the queue and were run again ({per_job}), "
                f"{lost['events_written_off']:,} of them in {lost['packets_written_off']} "
                "packets in flight, written off"
            )
        else:
            what = "it was running nothing: nothing was re-run"
        return f"worker {lost['worker']} lost {span(lost['lost_s'])} into the run{back}: {what}"
