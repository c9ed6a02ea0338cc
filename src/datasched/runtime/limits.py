"""A confined job's limits as the master keeps them (the service's jobs, run in sandboxes):
what each packet may still spend of the job's CPU and wall time, and the stop of its packets
in flight on their workers when it fails or is cancelled. A base of
:class:`~datasched.runtime.engine.RuntimeEngine`.

A job stopped is no failure of its packets: they are cancelled through Dask (those not
started never run; those running end as cancelled tasks), and a packet whose sandbox is
killed because its job was stopped returns None instead of raising
(:class:`~datasched.runtime.sandboxed.JobStopped`). Dask's worker logs every task that
raises as "Compute Failed", with its traceback: a cancel would otherwise fill a daemon's log
with tracebacks of what was asked for, beside the real failures, which it logs still."""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any

from distributed import Client, Future

from datasched.runtime.sandboxed import abort_job
from datasched.runtime.streams import _JobRun

__all__ = ["JobLimits"]


class JobLimits:
    """What a confined job has left, and stopping it on the workers."""

    # Provided by the engine.
    client: Client
    _run_id: str
    _packets: dict[int, tuple[int, int, int, int, Future[Any]]]
    _tasks: set[asyncio.Task[None]]

    def now(self) -> float:
        raise NotImplementedError

    def _budget(self, jr: _JobRun) -> dict[str, Any]:
        """What a confined job has left of its CPU time (its packets' so far counted) and of
        its wall time (from its first packet): its next packet's sandbox is killed past
        them, so that packets in flight do not each spend the whole of the job's limits."""
        conf = jr.spec.confine
        if conf is None:
            return {}
        began = jr.first_packet_s if jr.first_packet_s is not None else self.now()
        return {
            "cpu_budget_s": max(conf.cpu_s - jr.cpu_s, 1.0),
            "wall_budget_s": max(conf.wall_s - (self.now() - began), 1.0),
            "token": self._token(jr),
        }

    def _token(self, jr: _JobRun) -> str:
        return f"{self._run_id}-{jr.job_id}"

    def _abort_on_workers(self, jr: _JobRun) -> None:
        """A confined job failed or was cancelled: its packets in flight are cancelled
        through Dask, then stopped on their workers, not left to run to their limits (a
        user's code may never return)."""
        if (jr.spec.code is None and jr.command is None) or jr.first_packet_s is None:
            return
        token = self._token(jr)
        futures = [entry[4] for entry in self._packets.values() if entry[1] == jr.job_id]

        async def abort() -> None:
            if futures:
                # The master's futures are cancelled at once (their results, if any come,
                # are not read); the scheduler releases the tasks.
                await self.client.cancel(futures)  # type: ignore[no-untyped-call]
            with suppress(Exception):  # a worker gone meanwhile: its packets went with it
                await self.client.run(abort_job, token)

        task = asyncio.ensure_future(abort())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
