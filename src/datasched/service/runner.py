"""The runner: elementary jobs run on the Dask cluster while the daemon runs.

A :class:`Runner` owns (or joins, by scheduler address) the Dask cluster, the scheduling core
(a :class:`~datasched.core.scheduler.Scheduler` under a policy built by name) and a
long-lived :class:`~datasched.runtime.engine.RuntimeEngine` (its
:meth:`~datasched.runtime.serving.Serving.serve` mode). It turns each
:class:`~datasched.service.contracts.ElementaryJob` into a job of the engine and tells a
:class:`~datasched.service.contracts.RunnerListener` everything that happens, from the
engine's loop, in order: ``queued`` when it is accepted, ``running`` when its first packet
is sent (with the node), every packet whose result is in (:class:`PacketDone`: the file's
entry range and the packet's accumulator, pickled by the user's code in its sandbox: opaque
bytes here), and at the end ``completed``, ``failed`` (with the log) or ``aborted``. No
packet of a job is reported after its ``aborted`` or ``failed``, nor after
:meth:`Runner.stop`.

A job handed back with the entry ranges already done (what a daemon killed and restarted
read from its store) runs only the rest: the core's job is its events less those ranges, so
every event's result is reported exactly once over the two runs.

Processor work runs in packets cut by the policy, each through the node's cache, as
``datasched run``'s do, but the processor is never loaded here: its file's text travels as
data (:class:`~datasched.sandbox.confine.UserCode`) and each worker runs it in a sandbox
(:mod:`datasched.runtime.sandboxed`), confined by :attr:`Runner.confine`. Command work
(STAR's) is one unit, run once, sandboxed too: see :mod:`datasched.runtime.commands` for what
the command gets, and docs/service-runner.md for how the core sees it. A completed request's
results are merged on a worker (:meth:`Runner.merge`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from datasched.core.data import DataSpace
from datasched.core.packets import PacketSizing
from datasched.runtime.commands import (
    CommandOutcome,
)
from datasched.runtime.dataset import Dataset, FileEntry
from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.jobspec import JobSpec
from datasched.runtime.reports import EngineConfig, PacketReport
from datasched.runtime.sandboxed import merge_task
from datasched.runtime.session import (
    Calibration,
    ClusterOptions,
    build_scheduler,
    cache_by_name,
    default_calibration,
    open_cluster,
)
from datasched.sandbox.confine import Confinement, UserCode, sandbox_problem
from datasched.service.command_jobs import command_job
from datasched.service.contracts import (
    CommandWork,
    ElementaryJob,
    JobState,
    PacketDone,
    ProcessorWork,
    RunnerListener,
)
from datasched.service.usercode import user_code

__all__ = ["Runner", "RunnerError"]

log = logging.getLogger("datasched.runner")


class RunnerError(RuntimeError):
    """The runner cannot do what was asked (not started, stopped)."""


class Runner:
    """Runs elementary jobs on a cluster (see the module docstring).

    ``roots``: where processor files, command executables and the files a command's
    arguments name are found (relative paths from the first), and where commands' outputs
    go; ``user_dirs``: outputs go under each user's own directory of a root
    (``<root>/<user>/``: a daemon of several users); ``confine``: how user code is confined
    (:class:`~datasched.sandbox.confine.Confinement`: a sandbox, an account without
    privileges, the limits)."""

    def __init__(
        self,
        listener: RunnerListener,
        *,
        policy: str,
        cluster: ClusterOptions | None = None,
        policy_params: dict[str, Any] | None = None,
        roots: Sequence[Path] = (),
        user_dirs: bool = False,
        confine: Confinement | None = None,
        config: EngineConfig | None = None,
        packets: PacketSizing | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        self.listener = listener
        self.policy = policy
        self.opts = cluster or ClusterOptions()
        self.policy_params = policy_params
        self.roots = [Path(r).resolve() for r in roots]
        self.user_dirs = user_dirs
        self.confine = confine or Confinement()
        self.config = config
        self.packets = packets
        self.calibration = calibration
        self._engine: RuntimeEngine | None = None
        self._task: asyncio.Task[Any] | None = None
        self._watch: asyncio.Task[Any] | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._client: Any = None
        self._jobs: dict[str, ElementaryJob] = {}
        """Jobs accepted and not over."""
        self._preferred: dict[str, str] = {}
        self._logs: dict[str, str] = {}
        """A command's log, from its packet to its end."""
        self._whole: dict[str, set[str]] = {}
        """A command job's files reported done before it was resumed: not reported again."""
        self._cpu: dict[str, float] = {}
        """CPU seconds of each job's packets so far (its limit's measure)."""
        self._began: dict[str, float] = {}
        """When each job's first packet was sent (its wall time limit's start)."""
        self.error: BaseException | None = None
        """What stopped the engine, if it stopped by itself."""

    # -- life --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open (or join) the cluster, build the core and start the engine."""
        if self._engine is not None:
            raise RunnerError("runner: already started")
        if self.confine.bwrap and sandbox_problem() is not None:
            raise RunnerError(f"runner: user code cannot be confined: {sandbox_problem()}")
        stack = contextlib.AsyncExitStack()
        try:
            client, names = await stack.enter_async_context(open_cluster(self.opts))
            if self.confine.bwrap:
                problems = await client.run(sandbox_problem)  # on every worker
                bad = {w: p for w, p in problems.items() if p}
                if bad:
                    worker, problem = sorted(bad.items())[0]
                    raise RunnerError(
                        f"runner: worker {worker} cannot confine user code: {problem}"
                    )
            calibration = self.calibration or default_calibration(self.opts.tertiary_bytes_per_s)
            scheduler = build_scheduler(
                len(names),
                self.opts,
                DataSpace(),
                calibration,
                policy=self.policy,
                policy_params=self.policy_params,
                packets=self.packets,
            )
            engine = RuntimeEngine(
                client, scheduler, names, config=self.config, listener=_Relay(self)
            )
            known = await cache_by_name(client)
        except BaseException:
            await stack.aclose()
            raise
        self._stack, self._engine, self._client = stack, engine, client
        self._task = asyncio.create_task(engine.serve(known_cache=known))
        self._task.add_done_callback(self._ended)
        self._watch = asyncio.create_task(self._watch_limits())
        ready = asyncio.create_task(engine.ready.wait())
        await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
            await self.stop()
            raise RunnerError(f"runner: the engine did not start: {self.error!r}")

    async def stop(self) -> None:
        """Stop at once: jobs not over stay as they are (nothing more is reported about
        them); the cluster is closed if this runner started it."""
        engine, task, stack = self._engine, self._task, self._stack
        self._engine = self._task = self._stack = self._client = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if engine is not None:
            engine.stop()
        if task is not None:
            with contextlib.suppress(Exception):
                await task
        if stack is not None:
            await stack.aclose()
        for kept in (self._jobs, self._preferred, self._logs, self._whole, self._cpu, self._began):
            kept.clear()

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        self.error = task.exception()
        log.error("runner: the engine stopped: %r", self.error)

    def _live(self) -> RuntimeEngine:
        engine = self._engine
        if engine is None or self._task is None or self._task.done():
            raise RunnerError(f"runner: not running{f' ({self.error!r})' if self.error else ''}")
        return engine

    # -- jobs --------------------------------------------------------------------------------

    def submit(
        self, job: ElementaryJob, done: Mapping[str, Sequence[tuple[int, int]]] | None = None
    ) -> None:
        """Accept ``job`` (``queued``); ``done``: per file URL, the entry ranges whose
        results are stored already (they are not run again). A job that cannot run (its
        processor does not load, a bad command) is reported ``failed`` with the reason."""
        engine = self._live()
        if job.id in self._jobs:
            raise ValueError(f"job {job.id!r}: already submitted")
        done = dict(done or {})
        user, group = job.user or "user", job.group or "default"
        try:
            if isinstance(job.work, CommandWork):
                # A command always runs, once, whatever its files' reports say: a file of a
                # command has no event count (0), and is never taken as done before it ran.
                spec, command = command_job(
                    job, roots=self.roots, user_dirs=self.user_dirs, confinement=self.confine
                )
                engine.submit(spec, command=command, user=user, group=group)
                self._whole[job.id] = {u for u, ranges in done.items() if ranges}
            else:
                spec = self._processor_job(job, job.work)
                engine.submit(spec, done=done, user=user, group=group)
        except ValueError as exc:
            self.listener.job_state(job.id, JobState.FAILED, log=str(exc))
            return
        self._accepted(job)

    def cancel(self, job_id: str) -> bool:
        """Abort a job: ``aborted`` is reported once its packets in flight are back (their
        results are not reported). False if it is not running here."""
        if job_id not in self._jobs:
            return False
        return self._live().cancel(job_id)

    def cluster(self) -> dict[str, Any]:
        """The cluster (JSON-able): nodes with their slots and what they run, what their
        caches hold (as the core knows it) against their capacity, and the jobs."""
        engine = self._engine
        if engine is None:
            return {"running": False, "policy": self.policy, "nodes": [], "jobs": []}
        snap = engine.snapshot()
        for node in snap["nodes"]:
            node["cache_capacity_bytes"] = self.opts.cache_bytes
            node["slots_total"] = self.opts.slots
        for j in snap["jobs"]:
            j["preferred_node"] = self._preferred.get(j["id"])
        scheduler = getattr(getattr(self._client, "scheduler", None), "address", None)
        return {
            "running": self._task is not None and not self._task.done(),
            "policy": self.policy,
            "scheduler": scheduler,
            **snap,
        }

    def _accepted(self, job: ElementaryJob) -> None:
        self._jobs[job.id] = job
        if job.node is not None:
            self._preferred[job.id] = job.node
        self.listener.job_state(job.id, JobState.QUEUED, node=job.node)

    def _finish(self, job_id: str, state: JobState, log_text: str = "", **kw: Any) -> None:
        self._jobs.pop(job_id, None)
        for kept in (self._whole, self._preferred, self._cpu, self._began):
            kept.pop(job_id, None)
        self.listener.job_state(job_id, state, log=log_text, **kw)

    # -- elementary jobs as engine jobs -------------------------------------------------------

    def _processor_job(self, job: ElementaryJob, work: ProcessorWork) -> JobSpec:
        files = []
        for i, f in enumerate(job.files):
            tree = f.tree or work.tree
            if not tree:
                raise ValueError(f"files[{i}].tree: {f.url} names no tree (and the work none)")
            files.append(FileEntry(f.url, tree, f.n_events, f.n_bytes))
        name = next((f.dataset for f in job.files if f.dataset), job.id)
        dataset = Dataset(job.id, tuple(files), {"dataset": name})
        return JobSpec(
            id=job.id,
            dataset=dataset,
            start=0,
            stop=dataset.n_events,
            processor=work.processor,
            output=Path("-"),
            schema=work.schema,
            columns=work.columns,
            # A job of no named user shares its sandboxes with no other job.
            code=self.user_code(work, owner=job.user or f"job {job.id}"),
            confine=self.confine,
        )

    def user_code(self, work: ProcessorWork, owner: str = "") -> UserCode:
        """The job's processor as data, for ``owner``'s jobs
        (:func:`~datasched.service.usercode.user_code`)."""
        return user_code(work, self.roots, owner)

    # -- what the engine tells -----------------------------------------------------------------

    def _running(self, job_id: str, node: str) -> None:
        if job_id in self._jobs:
            self._began.setdefault(job_id, time.monotonic())
            self.listener.job_state(job_id, JobState.RUNNING, node=node)

    async def _watch_limits(self, period_s: float = 1.0) -> None:
        """Fail each job whose wall time (from its first packet) passed its limit."""
        while True:
            await asyncio.sleep(period_s)
            now = time.monotonic()
            limit = self.confine.wall_s
            for job_id, began in list(self._began.items()):
                if now - began > limit and job_id in self._jobs and self._engine is not None:
                    self._began.pop(job_id, None)
                    why = f"the job's wall time limit ({limit:g} s) was reached"
                    self._engine.cancel(job_id, why, failed=True)

    async def merge(self, work: ProcessorWork, results: Sequence[bytes]) -> bytes:
        """The merge of a request's packet results, done on a worker in a sandbox that loaded
        its processor (its ``postprocess`` applied once): bytes, never unpickled here.
        ``ValueError`` saying why they cannot be merged."""
        client = self._client
        if client is None:
            raise RunnerError("runner: not running")
        code = self.user_code(work)
        future = client.submit(
            merge_task, self.confine, code, list(results), self.confine.wall_s, pure=False
        )
        merged = await future
        if not isinstance(merged, bytes):
            raise RunnerError("runner: a merge did not give bytes")
        return merged

    def _packet(self, packet: PacketReport) -> None:
        job = self._jobs.get(packet.job)
        if job is None:
            return
        stat = packet.stat
        began = _began(stat.t_start, stat.t_end)
        slot = None if stat.t_slot is None else _began(stat.t_slot, stat.t_end)
        if isinstance(job.work, CommandWork):
            # One packet over all its files: each file is done whole (the command's CPU
            # time shared among them by size).
            total = sum(f.n_bytes for f in job.files) or 1
            already = self._whole.get(job.id, set())
            for f in job.files:
                if f.url in already:
                    continue
                cpu = stat.cpu_s * f.n_bytes / total
                self.listener.packet_done(
                    PacketDone(
                        job.id, f.url, 0, f.n_events, stat.node, f.n_bytes, cpu, None, began, slot
                    )
                )
            outcome = packet.accumulator
            self._logs[job.id] = outcome.log if isinstance(outcome, CommandOutcome) else ""
            return
        result = packet.accumulator
        if not isinstance(result, bytes):  # made in a sandbox: never anything else here
            raise RunnerError(f"job {job.id}: a packet's result is not opaque bytes")
        self.listener.packet_done(
            PacketDone(
                job_id=job.id,
                url=packet.url,
                start=packet.start,
                stop=packet.stop,
                node=stat.node,
                n_bytes=stat.bytes_read,
                cpu_s=stat.cpu_s,
                result=result,
                started_at=began,
                slot_at=slot,
            )
        )
        used = self._cpu[job.id] = self._cpu.get(job.id, 0.0) + stat.cpu_s
        if used > self.confine.cpu_s and self._engine is not None:
            why = f"the job's CPU time limit ({self.confine.cpu_s:g} s) was reached"
            self._engine.cancel(job.id, why, failed=True)

    def _done(self, job_id: str, status: str, error: str, traceback: str) -> None:
        if job_id not in self._jobs:
            return
        if status == "completed":
            self._finish(job_id, JobState.COMPLETED, self._logs.pop(job_id, ""))
            return
        self._logs.pop(job_id, None)
        if status == "aborted":
            self._finish(job_id, JobState.ABORTED, error)
            return
        text = error + (f"\n{traceback}" if traceback else "")
        # "data error: <url>: why": the file that could not be read (not a processor's
        # error or a limit, where the file is only where it happened).
        data = error.startswith("data error: ") and error.count(": ") >= 2
        failed = error.split(": ", 2)[1] if data else None
        job = self._jobs[job_id]
        if failed not in {f.url for f in job.files}:
            failed = None
        self._finish(job_id, JobState.FAILED, text, failed_file=failed)


def _began(t_start: float, t_end: float) -> float:
    """When a packet reported now began on its worker (POSIX seconds): the engine gives both
    times in seconds from its start (``t_start`` on the worker's clock, ``t_end`` when the
    result reached it, which is now), so the packet took their difference until now."""
    return time.time() - max(t_end - t_start, 0.0)


class _Relay:
    """The engine's listener: forwards to the runner."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def job_running(self, job: str, node: str) -> None:
        self.runner._running(job, node)

    def packet_done(self, packet: PacketReport) -> None:
        self.runner._packet(packet)

    def job_done(self, job: str, status: str, error: str, traceback: str) -> None:
        self.runner._done(job, status, error, traceback)
