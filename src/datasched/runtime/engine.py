"""The Dask engine: the same :class:`Scheduler` core as the simulator, driving real workers.

The master is one asyncio loop (DESIGN.md, "Runtime"). It turns the world into core events
(jobs arriving at their submission times, packets returning, workers vanishing, wake-ups) and
carries out the core's actions:

* ``Start(subjob, node)``: the subjob runs as a stream of packets, PROOF-style (the PROOF
  paper §2): each packet is an event range of one file, sized from the node's measured time
  per event to take about ``packet_target_s`` (smaller near the end of the subjob), submitted
  as a Dask task pinned to the node's worker (``workers=[address]``,
  ``allow_other_workers=False``, ``pure=False``, a unique key). ``packets_in_flight`` (2)
  packets per worker: the next one's file is fetched while the current one computes.
* ``Preempt(node)``: no more packets; once those in flight return, the core learns what was
  really processed (``SubjobStopped`` with the exact remainder).
* ``Shrink(node, release)``: what is asked and not yet sent as a packet is taken from the
  node's work at once (``SubjobShrunk``); the node goes on with the rest without a pause.
* Cache changes reported by packets become ``CacheChanged`` events, so the core's cache
  directory stays true.

Faults: a packet lost with its worker (killed, restarted under the same name by its nanny)
is written off and its events go back to the node's work; a worker that stays away for
``worker_timeout_s`` becomes ``NodeLost`` and the core gives its work to others. A packet that
fails on its data (missing or corrupted file) or in the user's code fails its job, with a
message naming the file; the job's other events are then released without running (drained),
so the core's books close, and other jobs go on. Results are counted only when a packet
returns, and each event range at most once (checked), so no event is lost or counted twice.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from distributed import Client, Future

from datasched.core.actions import Action, JobCompleted, Preempt, Shrink, Start, WakeAt
from datasched.core.events import (
    CacheChanged,
    Event,
    JobArrived,
    NodeLost,
    SubjobFinished,
    SubjobShrunk,
    SubjobStopped,
    Tick,
)
from datasched.core.intervals import IntervalSet
from datasched.core.model import ClusterSpec, CostModel, Job, Source, Subjob
from datasched.core.scheduler import Scheduler
from datasched.policies.registry import make_policy
from datasched.runtime.jobspec import JobSpec
from datasched.runtime.processor import merge, write_output
from datasched.runtime.space import EventSpace
from datasched.runtime.worker import PacketError, PacketResult, PacketSpec, run_packet

__all__ = [
    "EngineConfig",
    "JobReport",
    "PacketStat",
    "ProgressSink",
    "RunReport",
    "RuntimeEngine",
]

_EMPTY = IntervalSet()


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How the master cuts and sends packets."""

    packet_target_s: float = 2.0
    """Aimed time per packet (PROOF aims for seconds: long enough to amortise the round trip,
    short enough to preempt and rebalance quickly)."""
    min_packet_events: int = 100
    max_packet_events: int = 100_000
    packets_in_flight: int = 2
    worker_timeout_s: float = 30.0
    """How long a vanished worker may take to come back before its node counts as lost."""
    poll_s: float = 0.25
    """How often the master checks which workers are alive."""
    max_packet_attempts: int = 3
    """A packet whose storage keeps failing (after the worker's own retries) fails its job."""

    def __post_init__(self) -> None:
        if not self.packet_target_s > 0:
            raise ValueError(f"packet_target_s: must be positive, got {self.packet_target_s!r}")
        if not 1 <= self.min_packet_events <= self.max_packet_events:
            raise ValueError("min_packet_events: must be >= 1 and <= max_packet_events")
        if self.packets_in_flight < 1:
            raise ValueError("packets_in_flight: must be at least 1")


@dataclass(slots=True)
class PacketStat:
    """One packet's statistics (PROOF keeps the same per packet)."""

    job: str
    node: str
    url: str
    start: int
    stop: int
    source: str
    bytes_from_tertiary: int
    bytes_from_peer: int
    read_s: float
    compute_s: float

    @property
    def n_events(self) -> int:
        return self.stop - self.start


@dataclass(slots=True)
class JobReport:
    """What happened to one job."""

    id: str
    events_expected: int
    events_processed: int = 0
    wall_s: float = 0.0
    wait_s: float = 0.0
    cache_hit_ratio: float = 0.0
    bytes_from_tertiary: int = 0
    output: str = ""
    status: str = "pending"
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "events_expected": self.events_expected,
            "events_processed": self.events_processed,
            "wall_s": round(self.wall_s, 3),
            "wait_s": round(self.wait_s, 3),
            "cache_hit_ratio": round(self.cache_hit_ratio, 4),
            "bytes_from_tertiary": self.bytes_from_tertiary,
            "output": self.output,
            "error": self.error,
        }


@dataclass(slots=True)
class RunReport:
    """A whole run: per job, per packet, and the master's own cost."""

    policy: str
    makespan_s: float
    jobs: list[JobReport]
    packets: list[PacketStat]
    scheduling_s: float = 0.0
    """Master CPU seconds inside the core and packet cutting."""
    results: dict[str, Any] = field(default_factory=dict)
    """Each completed job's merged (post-processed) accumulator."""

    @property
    def events_expected(self) -> int:
        return sum(j.events_expected for j in self.jobs)

    @property
    def events_processed(self) -> int:
        return sum(j.events_processed for j in self.jobs)

    @property
    def bytes_from_tertiary(self) -> int:
        return sum(p.bytes_from_tertiary for p in self.packets)

    @property
    def cache_hit_ratio(self) -> float:
        n = sum(p.n_events for p in self.packets)
        hits = sum(p.n_events for p in self.packets if p.source == "cache")
        return hits / n if n else 0.0

    @property
    def scheduling_ms_per_packet(self) -> float:
        return 1e3 * self.scheduling_s / max(len(self.packets), 1)

    def summary(self) -> dict[str, Any]:
        return {
            "makespan_s": round(self.makespan_s, 3),
            "events_expected": self.events_expected,
            "events_processed": self.events_processed,
            "cache_hit_ratio": round(self.cache_hit_ratio, 4),
            "bytes_from_tertiary": self.bytes_from_tertiary,
        }


class ProgressSink(Protocol):
    """Where the engine reports progress (the CLI draws rich progress bars)."""

    def job_started(self, job_id: str, n_events: int) -> None: ...

    def advance(self, job_id: str, n_events: int, from_cache: bool) -> None: ...

    def job_done(self, job_id: str, status: str) -> None: ...


@dataclass(slots=True)
class _Node:
    name: str
    address: str | None
    subjob: Subjob | None = None
    start: Start | None = None
    todo: IntervalSet = _EMPTY
    processed: IntervalSet = _EMPTY
    inflight: dict[int, tuple[int, int]] = field(default_factory=dict)
    stopping: bool = False
    announced: set[str] = field(default_factory=set)
    """Files announced to the core as cached here, not fetched yet."""
    down_since: float | None = None
    lost: bool = False
    s_per_event: float = 0.0


@dataclass(slots=True)
class _JobRun:
    spec: JobSpec
    job_id: int
    data: IntervalSet
    report: JobReport
    first_packet_s: float | None = None
    accumulator: Any = None
    done: IntervalSet = _EMPTY
    """Events whose packets returned (or were drained, for a failed job)."""
    hits: int = 0
    failed: bool = False


class RuntimeEngine:
    """Runs :class:`JobSpec` s on the workers of a Dask ``client`` under a named policy."""

    def __init__(
        self,
        client: Client,
        node_names: list[str],
        *,
        policy: str,
        policy_params: dict[str, Any] | None = None,
        cache_bytes: int,
        cost: CostModel,
        cache_root: str | None = None,
        config: EngineConfig | None = None,
        progress: ProgressSink | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.config = config or EngineConfig()
        self.policy_name = policy
        cluster = ClusterSpec.uniform(len(node_names), cache_bytes, cost)
        self.scheduler = Scheduler(cluster, make_policy(policy, **(policy_params or {})))
        self.cost = cost
        self.cache_root = cache_root
        self.progress = progress
        self._clock = clock
        first_guess = cost.s_per_event(Source.TERTIARY)
        self.nodes = [_Node(name, None, s_per_event=first_guess) for name in node_names]
        self._by_name = {n.name: i for i, n in enumerate(self.nodes)}
        self.space = EventSpace()
        self._jobs: dict[int, _JobRun] = {}
        self._events: deque[Event] = deque()
        self._ticks: list[float] = []
        self._packet_ids = itertools.count()
        self._packets: dict[int, tuple[int, int, int, int, Future[Any]]] = {}
        """packet id -> (node, job id, global start, global stop, future)."""
        self._attempts: dict[tuple[int, int], int] = {}
        self._results: asyncio.Queue[tuple[int, Any, bool]] = asyncio.Queue()
        self._stats: list[PacketStat] = []
        self._scheduling_s = 0.0
        self._t0 = 0.0
        self._run_id = uuid.uuid4().hex[:8]
        self._tasks: set[asyncio.Task[None]] = set()

        self.worker_departures = 0
        """Times a worker vanished or came back under a new address (its packets written off)."""
        self._to_cancel: list[Future[Any]] = []

    # -- the loop -----------------------------------------------------------------------------

    def now(self) -> float:
        return self._clock() - self._t0

    async def run(self, specs: list[JobSpec], *, known_cache: dict[str, list[str]]) -> RunReport:
        """Run every job to completion (or failure); ``known_cache`` is each worker's cache
        content at the start (worker name -> URLs), so the directory starts out true."""
        for i, spec in enumerate(specs):
            data = self.space.job_data(spec.dataset, spec.start, spec.stop)
            report = JobReport(id=spec.id, events_expected=data.length, output=str(spec.output))
            self._jobs[i] = _JobRun(spec, i, data, report)
        # Caching is by whole file: cuts between nodes cost least at file boundaries.
        self.scheduler.boundaries = [f.start for f in self.space.files]
        self._t0 = self._clock()
        await self._refresh_workers()
        for name, urls in known_cache.items():
            node = self._by_name.get(name)
            if node is not None and urls:
                self._emit(CacheChanged(self.now(), node, added=self.space.ranges_of_urls(urls)))
        arrivals = deque(sorted(self._jobs.values(), key=lambda j: (j.spec.submit_s, j.job_id)))
        next_poll = 0.0
        while any(j.report.status in ("pending", "running") for j in self._jobs.values()):
            now = self.now()
            while arrivals and arrivals[0].spec.submit_s <= now:
                jr = arrivals.popleft()
                jr.report.status = "running"
                if self.progress is not None:
                    self.progress.job_started(jr.spec.id, jr.data.length)
                self._emit(JobArrived(now, Job(jr.job_id, now, jr.data)))
            self._ticks.sort()
            while self._ticks and self._ticks[0] <= now:
                self._ticks.pop(0)
                self._emit(Tick(now))
            self._pump()
            if now >= next_poll:
                await self._refresh_workers()
                next_poll = now + self.config.poll_s
                self._pump()
                if all(n.lost for n in self.nodes):
                    for jr in self._jobs.values():
                        if jr.report.status in ("pending", "running"):
                            jr.report.status = "failed"
                            jr.report.error = "every worker was lost"
                    break
            wake = [next_poll]
            if arrivals:
                wake.append(arrivals[0].spec.submit_s)
            if self._ticks:
                wake.append(self._ticks[0])
            timeout = max(min(wake) - self.now(), 0.0)
            try:
                item = await asyncio.wait_for(self._results.get(), timeout=timeout)
            except TimeoutError:
                continue
            self._on_packet(*item)
            while not self._results.empty():
                self._on_packet(*self._results.get_nowait())
            self._pump()
        makespan = max((j.report.wall_s + j.spec.submit_s for j in self._jobs.values()), default=0)
        return RunReport(
            policy=self.policy_name,
            makespan_s=makespan,
            jobs=[j.report for j in self._jobs.values()],
            packets=self._stats,
            scheduling_s=self._scheduling_s,
            results={
                j.spec.id: j.accumulator
                for j in self._jobs.values()
                if j.report.status == "completed"
            },
        )

    # -- core events in, actions out ----------------------------------------------------------

    def _emit(self, event: Event) -> None:
        self._events.append(event)

    def _pump(self) -> None:
        while self._events:
            event = self._events.popleft()
            t0 = time.perf_counter()
            actions = self.scheduler.handle(event)
            self._scheduling_s += time.perf_counter() - t0
            for action in actions:
                self._apply(action)

    def _apply(self, action: Action) -> None:
        if isinstance(action, Start):
            node = self.nodes[action.node]
            if node.subjob is not None:
                raise RuntimeError(f"node {node.name}: start while running a subjob")
            node.subjob, node.start = action.subjob, action
            node.todo, node.processed, node.stopping = action.subjob.data, _EMPTY, False
            self._announce(action.node, action)
            self._feed(action.node)
        elif isinstance(action, Preempt):
            node = self.nodes[action.node]
            if node.subjob is not None and node.subjob.subjob_id == action.subjob_id:
                node.stopping = True
                self._feed(action.node)
        elif isinstance(action, Shrink):
            self._emit(self._shrink(action))
        elif isinstance(action, WakeAt):
            self._ticks.append(action.time)
        elif isinstance(action, JobCompleted):
            self._complete(self._jobs[action.job_id])

    # -- packets ------------------------------------------------------------------------------

    def _shrink(self, action: Shrink) -> SubjobShrunk:
        """Give up what was asked of the packets not yet sent; those in flight go on, and so
        does the subjob with what it keeps (no pause, unlike a Preempt)."""
        node = self.nodes[action.node]
        sj = node.subjob
        released = _EMPTY
        if sj is not None and sj.subjob_id == action.subjob_id and not node.stopping:
            released = action.release & node.todo
            if released:
                node.todo = node.todo - released
                node.subjob = sj.shrunk(released)
        return SubjobShrunk(self.now(), action.subjob_id, action.node, released)

    def _packet_events(self, node: _Node, jr: _JobRun, a: int, file_stop: int) -> int:
        """PROOF-style packet size (the PROOF notes, ``CalculatePacketSize``): about
        ``packet_target_s`` of work at the node's measured pace, shrinking to a quarter of
        the job's estimated time left as the job nears its end, so that its nodes finish
        together; a packet that would leave less than half a packet of its file takes the
        rest of the file (each packet pays a fixed cost to open its file and set up the
        processor, and a whole-file cache has fetched that file anyway)."""
        cfg = self.config
        pace = max(node.s_per_event, 1e-9)
        nodes = sum(1 for n in self.nodes if n.subjob is not None and n.subjob.job_id == jr.job_id)
        left_s = (jr.data.length - jr.done.length) * pace / max(nodes, 1)
        n = int(min(cfg.packet_target_s, left_s / 4) / pace)
        n = min(max(n, cfg.min_packet_events), cfg.max_packet_events)
        if a + 1.5 * n >= file_stop:
            n = file_stop - a
        return n

    def _feed(self, index: int) -> None:
        """Keep ``packets_in_flight`` packets going on a node; close the subjob when done."""
        t0 = time.perf_counter()
        node = self.nodes[index]
        sj, start = node.subjob, node.start
        if sj is None or start is None:
            return
        jr = self._jobs[sj.job_id]
        while node.todo and not node.stopping:
            if jr.failed:
                # Drain: the job has failed, its events are released without running.
                jr.done = jr.done | node.todo
                node.processed = node.processed | node.todo
                node.todo = _EMPTY
                break
            if node.address is None or len(node.inflight) >= self.config.packets_in_flight:
                break
            a, b = node.todo.ranges[0]
            f = self.space.files[self.space.file_at(a)]
            b = min(b, a + self._packet_events(node, jr, a, f.stop))
            node.todo = node.todo - IntervalSet.range(a, b)
            self._submit(index, jr, a, b, start)
        self._scheduling_s += time.perf_counter() - t0
        if not node.inflight and (not node.todo or node.stopping):
            self._close(index)

    def _submit(self, index: int, jr: _JobRun, a: int, b: int, start: Start) -> None:
        node = self.nodes[index]
        f = self.space.files[self.space.file_at(a)]
        pid = next(self._packet_ids)
        peer_path = None
        if start.peer_reads and self.cache_root is not None:
            peer_path = self._peer_copy(index, a)
        spec = PacketSpec(
            packet_id=pid,
            job_id=jr.job_id,
            url=f.url,
            tree=f.tree,
            local_start=a - f.start,
            local_stop=b - f.start,
            file_bytes=f.n_bytes,
            processor=jr.spec.processor,
            base_dir=str(jr.spec.base_dir),
            cache_fill=start.cache_fill,
            peer_path=peer_path,
            replicate=start.replicate,
        )
        assert node.address is not None
        future = self.client.submit(
            run_packet,
            spec,
            key=f"datasched-packet-{self._run_id}-{pid}",
            pure=False,
            workers=[node.address],
            allow_other_workers=False,
            retries=0,
        )
        node.inflight[pid] = (a, b)
        self._packets[pid] = (index, jr.job_id, a, b, future)
        if jr.first_packet_s is None:
            jr.first_packet_s = self.now()
        task = asyncio.ensure_future(self._await_packet(pid, future))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _peer_copy(self, index: int, event: int) -> str | None:
        from datasched.runtime.diskcache import cache_file_name
        from datasched.runtime.worker import node_cache_dir

        f = self.space.files[self.space.file_at(event)]
        for a, _, holders in self.scheduler.directory.holders(f.start, f.start + 1):
            del a
            peers = sorted(h for h in holders if h != index)
            if peers:
                assert self.cache_root is not None
                root = node_cache_dir(self.cache_root, self.nodes[peers[0]].name)
                return str(root / cache_file_name(f.url))
        return None

    async def _await_packet(self, pid: int, future: Future[Any]) -> None:
        try:
            result = await future
        except BaseException as exc:  # every failure, cancellation included, is booked
            await self._results.put((pid, exc, False))
            return
        await self._results.put((pid, result, True))

    def _on_packet(self, pid: int, payload: Any, ok: bool) -> None:
        entry = self._packets.pop(pid, None)
        if entry is None:
            return  # written off already (its worker vanished): its events went back
        index, job_id, a, b, _ = entry
        node = self.nodes[index]
        node.inflight.pop(pid, None)
        if ok:
            url = self.space.files[self.space.file_at(a)].url
            if payload.source == "cache" or url in payload.cache_added:
                node.announced.discard(url)
        jr = self._jobs[job_id]
        if ok:
            result: PacketResult = payload
            self._book(index, jr, a, b, result)
        elif isinstance(payload, PacketError):
            self._fail(jr, f"{payload.kind} error: {payload}")
            jr.done = jr.done | IntervalSet.range(a, b)
            node.processed = node.processed | IntervalSet.range(a, b)
        else:
            attempts = self._attempts.get((a, b), 0) + 1
            self._attempts[(a, b)] = attempts
            if attempts >= self.config.max_packet_attempts:
                self._fail(jr, f"packet {a}-{b} failed {attempts} times: {payload!r}")
                jr.done = jr.done | IntervalSet.range(a, b)
                node.processed = node.processed | IntervalSet.range(a, b)
            else:
                node.todo = node.todo | IntervalSet.range(a, b)
        self._feed(index)

    def _book(self, index: int, jr: _JobRun, a: int, b: int, result: PacketResult) -> None:
        node = self.nodes[index]
        piece = IntervalSet.range(a, b)
        if jr.done.overlaps(piece):
            raise RuntimeError(f"job {jr.spec.id}: events {a}-{b} returned twice")
        jr.done = jr.done | piece
        node.processed = node.processed | piece
        n = b - a
        if not jr.failed:
            jr.accumulator = merge(jr.accumulator, result.accumulator)
            jr.report.events_processed += n
            jr.report.bytes_from_tertiary += result.bytes_from_tertiary
            if result.source == "cache":
                jr.hits += n
        spent = result.read_s + result.compute_s
        # The node's time per event, smoothed: packets are sized from it.
        node.s_per_event = 0.7 * node.s_per_event + 0.3 * spent / max(n, 1)
        self._stats.append(
            PacketStat(
                job=jr.spec.id,
                node=node.name,
                url=self.space.files[self.space.file_at(a)].url,
                start=a,
                stop=b,
                source=result.source,
                bytes_from_tertiary=result.bytes_from_tertiary,
                bytes_from_peer=result.bytes_from_peer,
                read_s=result.read_s,
                compute_s=result.compute_s,
            )
        )
        if self.progress is not None:
            self.progress.advance(jr.spec.id, n, result.source == "cache")
        if result.cache_added or result.cache_evicted:
            self._emit(
                CacheChanged(
                    self.now(),
                    index,
                    added=self.space.ranges_of_urls(result.cache_added),
                    evicted=self.space.ranges_of_urls(result.cache_evicted),
                )
            )

    def _close(self, index: int) -> None:
        """The node's subjob is over: finished, or stopped with its exact remainder."""
        node = self.nodes[index]
        sj = node.subjob
        if sj is None:
            return
        remaining = sj.data - node.processed
        self._retract(index)
        node.subjob = node.start = None
        node.todo = node.processed = _EMPTY
        node.stopping = False
        if remaining:
            self._emit(SubjobStopped(self.now(), sj.subjob_id, index, remaining))
        else:
            self._emit(SubjobFinished(self.now(), sj.subjob_id, index))

    def _fail(self, jr: _JobRun, message: str) -> None:
        if not jr.failed:
            jr.failed = True
            jr.report.error = message

    def _complete(self, jr: _JobRun) -> None:
        now = self.now()
        report = jr.report
        report.wall_s = now - jr.spec.submit_s
        report.wait_s = (jr.first_packet_s or now) - jr.spec.submit_s
        report.cache_hit_ratio = jr.hits / report.events_processed if report.events_processed else 0
        if jr.failed:
            report.status = "failed"
            jr.accumulator = None
        else:
            acc = jr.accumulator
            post = getattr(self._processor_for(jr), "postprocess", None)
            if callable(post):
                acc = post(acc)
                jr.accumulator = acc
            try:
                write_output(acc, jr.spec.output)
                report.status = "completed"
            except Exception as exc:  # an unwritable output fails the job, not the run
                report.status = "failed"
                report.error = f"output {jr.spec.output}: {exc}"
        if self.progress is not None:
            self.progress.job_done(jr.spec.id, report.status)

    def _processor_for(self, jr: _JobRun) -> Any:
        from datasched.runtime.processor import load_processor

        return load_processor(jr.spec.processor, Path(jr.spec.base_dir))

    # -- workers coming and going -------------------------------------------------------------

    async def _refresh_workers(self) -> None:
        assert self.client.scheduler is not None
        info = await self.client.scheduler.identity()
        alive = {str(w.get("name")): addr for addr, w in info.get("workers", {}).items()}
        now = self.now()
        for index, node in enumerate(self.nodes):
            if node.lost:
                continue
            addr = alive.get(node.name)
            if addr == node.address and addr is not None:
                continue
            if node.address is not None:
                self.worker_departures += 1
                self._write_off(index)  # gone, or back under a new address: packets lost
            node.address = addr
            if addr is None:
                if node.down_since is None:
                    node.down_since = now
                elif now - node.down_since > self.config.worker_timeout_s:
                    self._lose(index)
            else:
                node.down_since = None
                self._feed(index)
        if self._to_cancel:
            futures, self._to_cancel = self._to_cancel, []
            await self.client.cancel(futures)  # type: ignore[no-untyped-call]

    def _announce(self, index: int, start: Start) -> None:
        """Tell the core at once that the subjob's files will be in this node's cache: jobs
        arriving meanwhile are then sent here instead of fetching the same files elsewhere
        (fetches in flight, which the simulator's caches model too). What is not fetched
        after all is retracted when the subjob ends."""
        node = self.nodes[index]
        if not start.cache_fill or start.peer_reads:
            return
        directory = self.scheduler.directory
        added = []
        for a, b in start.subjob.data:
            i = self.space.file_at(a)
            while i < len(self.space.files) and self.space.files[i].start < b:
                f = self.space.files[i]
                whole = IntervalSet.range(f.start, f.stop)
                if directory.cached_length(index, whole) < whole.length:
                    added.append((f.start, f.stop))
                    node.announced.add(f.url)
                i += 1
        if added:
            self._emit(CacheChanged(self.now(), index, added=IntervalSet(added)))

    def _retract(self, index: int) -> None:
        """Announced files the node did not fetch after all."""
        node = self.nodes[index]
        if node.announced:
            gone = self.space.ranges_of_urls(sorted(node.announced))
            node.announced.clear()
            self._emit(CacheChanged(self.now(), index, evicted=gone))

    def _write_off(self, index: int) -> None:
        """The node's worker went away: its packets in flight are lost; their events go
        back to the node's work (never counted: their results cannot arrive any more)."""
        node = self.nodes[index]
        for pid, (a, b) in list(node.inflight.items()):
            entry = self._packets.pop(pid, None)
            if entry is not None:
                self._to_cancel.append(entry[4])

            node.todo = node.todo | IntervalSet.range(a, b)
        node.inflight.clear()
        if node.subjob is not None:
            # Give the work back to the core now: other nodes can take it meanwhile.
            node.stopping = True
            self._close(index)

    def _lose(self, index: int) -> None:
        node = self.nodes[index]
        node.lost = True
        remaining = None
        if node.subjob is not None:
            remaining = node.subjob.data - node.processed
            node.subjob = node.start = None
            node.todo = node.processed = _EMPTY
        self._emit(NodeLost(self.now(), index, remaining))
