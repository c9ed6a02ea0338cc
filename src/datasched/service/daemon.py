"""The daemon's side of the runner: the :class:`Runner` it drives, the
:class:`StoreListener` that writes what the runner reports, and the :class:`Dispatcher`
loop that hands queued elementary jobs over.

Restart (issue 18): the store holds every job and every packet done. On start,
:meth:`Dispatcher.start` puts back to ``pending`` every job the runner held (submitted,
queued, running) and hands each over again with the ranges already done; a packet the
runner reports twice is stored once (the packets table's UNIQUE constraint), so no event is
counted twice or lost.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from datasched.service.contracts import ElementaryJob, JobState, PacketDone, RunnerListener
from datasched.service.store.db import Store
from datasched.service.store.models import Job, Packet
from datasched.service.store.ops import (
    done_ranges,
    elementary_job,
    lock_request,
    pending_jobs,
    refresh_request_state,
    requeue_unfinished,
)

__all__ = ["Dispatcher", "Runner", "StoreListener"]

log = logging.getLogger(__name__)


class Runner(Protocol):
    """What the daemon needs of the runner (:mod:`datasched.service.runner`).

    ``start(listener)`` starts it, reporting to ``listener`` from then on; ``submit`` hands
    it a job with the ranges ``(url, start, stop)`` already done, which it must not run
    again; ``cancel`` stops a job (reported ``aborted``); ``cluster`` describes the cluster
    (nodes, slots, cache fill, what runs where) as JSON; ``stop`` stops it."""

    def start(self, listener: RunnerListener) -> None: ...

    def submit(self, job: ElementaryJob, done_ranges: Sequence[tuple[str, int, int]]) -> None: ...

    def cancel(self, job_id: str) -> None: ...

    def cluster(self) -> Mapping[str, Any]: ...

    def stop(self) -> None: ...


class StoreListener:
    """The :class:`~datasched.service.contracts.RunnerListener` of the daemon: every call is
    one transaction. A job already final (cancelled meanwhile) keeps its state; a packet
    already stored (a replay) is ignored."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.replays = 0

    def job_state(
        self,
        job_id: str,
        state: JobState,
        *,
        node: str | None = None,
        log: str = "",
        failed_file: str | None = None,
    ) -> None:
        with self.store.session() as s:
            job = s.get(Job, job_id)
            if job is None:
                return
            lock_request(s, job.request_id)
            s.refresh(job)
            if JobState(job.state).final:
                return
            job.state = JobState(state).value
            if node is not None:
                job.node = node
            if log:
                job.log = (job.log + log)[-1_000_000:]
            if failed_file is not None:
                job.failed_file = failed_file
            refresh_request_state(s, job.request_id)

    def packet_done(self, packet: PacketDone) -> None:
        try:
            with self.store.session() as s:
                if s.get(Job, packet.job_id) is None:
                    return
                s.add(
                    Packet(
                        job_id=packet.job_id,
                        url=packet.url,
                        start=packet.start,
                        stop=packet.stop,
                        node=packet.node,
                        n_bytes=packet.n_bytes,
                        cpu_s=packet.cpu_s,
                        result=packet.result,
                    )
                )
        except IntegrityError:
            self.replays += 1  # stored before: the runner replayed it after a restart


class Dispatcher:
    """The daemon's loop: every ``period_s``, hands the pending jobs to the runner (each
    with its ranges done) and marks them ``submitted``."""

    def __init__(self, store: Store, runner: Runner, *, period_s: float = 0.5) -> None:
        self.store = store
        self.runner = runner
        self.period_s = period_s
        self.listener = StoreListener(store)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def recover(self) -> int:
        """Requeue what the runner held before a restart; how many jobs."""
        with self.store.session() as s:
            return requeue_unfinished(s)

    def dispatch_once(self) -> int:
        """Hand every pending job to the runner; how many it took."""
        with self.store.session() as s:
            for request_id in sorted({j.request_id for j in pending_jobs(s)}):
                lock_request(s, request_id)
            handed = [(elementary_job(j), done_ranges(s, j.id)) for j in pending_jobs(s)]
            for job, _ in handed:
                row = s.get(Job, job.id)
                assert row is not None
                row.state = JobState.SUBMITTED.value
                refresh_request_state(s, job.request_id)
        n = 0
        for job, done in handed:
            try:
                self.runner.submit(job, done)
                n += 1
            except Exception:  # the runner refused it: back to the queue, tried again later
                log.exception("the runner refused elementary job %s", job.id)
                with self.store.session() as s:
                    row = s.get(Job, job.id)
                    if row is not None and row.state == JobState.SUBMITTED.value:
                        row.state = JobState.PENDING.value
                        refresh_request_state(s, job.request_id)
        if handed:
            # A request cancelled while its jobs were being handed over: the cancel may
            # have reached the runner before the job did, so cancel those jobs again.
            with self.store.reading() as s:
                ids = [job.id for job, _ in handed]
                aborted = [
                    job_id
                    for (job_id,) in s.execute(
                        select(Job.id).where(Job.id.in_(ids), Job.state == JobState.ABORTED.value)
                    )
                ]
            for job_id in aborted:
                self.runner.cancel(job_id)
        return n

    def wake(self) -> None:
        """Dispatch now (a request was just accepted)."""
        self._wake.set()

    def start(self) -> None:
        """Recover, start the runner, and run the loop in a thread."""
        n = self.recover()
        if n:
            log.info("requeued %d elementary jobs held before the restart", n)
        self.runner.start(self.listener)
        self._thread = threading.Thread(target=self._loop, name="dispatcher", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.dispatch_once()
            except Exception:  # keep serving; the next round retries
                log.exception("dispatching elementary jobs failed")
            self._wake.wait(self.period_s)
            self._wake.clear()

    def stop(self) -> None:
        """Stop the loop, then the runner."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.runner.stop()
