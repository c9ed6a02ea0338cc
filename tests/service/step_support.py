"""A runner driven step by step and requests stored straight into the store: the set-up of
the dispatcher's tests (fair share, the ETAs' queue), with no threads and no clock but the
test's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from datasched.service.contracts import (
    ElementaryJob,
    FileRef,
    JobState,
    MetaJobRequest,
    PacketDone,
    ProcessorWork,
    RunnerListener,
)
from datasched.service.store import ops
from datasched.service.store.db import Store
from datasched.service.users import authenticate

EVENTS = 100
"""Events of each elementary job's one file."""
CPU_PER_EVENT = 0.01
"""CPU seconds an event the step runner reports."""


class StepRunner:
    """Holds what it is handed; :meth:`finish` completes the oldest job held (one packet
    per file, CPU in proportion to the events)."""

    def __init__(self, slots: int = 2) -> None:
        self.slots = slots
        self.listener: RunnerListener | None = None
        self.held: list[ElementaryJob] = []
        self.done: list[ElementaryJob] = []
        self.cancelled: list[str] = []
        self.most_held = 0

    def start(self, listener: RunnerListener) -> None:
        self.listener = listener

    def submit(self, job: ElementaryJob, done_ranges: Sequence[tuple[str, int, int]]) -> None:
        self.held.append(job)
        self.most_held = max(self.most_held, len(self.held))

    def finish(self) -> ElementaryJob:
        assert self.listener is not None
        job = self.held.pop(0)
        self.listener.job_state(job.id, JobState.RUNNING, node="n0")
        for f in job.files:
            cpu = f.n_events * CPU_PER_EVENT
            self.listener.packet_done(
                PacketDone(job.id, f.url, 0, f.n_events, "n0", f.n_bytes, cpu, None)
            )
        self.listener.job_state(job.id, JobState.COMPLETED, node="n0")
        self.done.append(job)
        return job

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)

    def cluster(self) -> Mapping[str, Any]:
        return {"nodes": [{"name": "n0", "slots": self.slots}]}

    def merge(self, work: ProcessorWork, results: Sequence[bytes]) -> bytes:
        raise AssertionError("the dispatcher never merges: the merger does")

    def stop(self) -> None:
        pass


def submit(store: Store, token: str, n_jobs: int, events: int = EVENTS) -> str:
    """A request of ``n_jobs`` elementary jobs of one file of ``events`` each, stored as
    accepted for the user of ``token``; its id."""
    with store.session() as s:
        caller = authenticate(s, token)
        assert caller is not None
        rid = ops.new_request_id()
        work = ProcessorWork("p.py:P")
        jobs = [
            ElementaryJob(rid, i, (FileRef(f"/d/{rid}/{i}.root", events, 10 * events),), work)
            for i in range(n_jobs)
        ]
        ops.store_accepted(
            s, caller, rid, "raw", "application/yaml", MetaJobRequest(caller.name, work, ()), jobs
        )
    return rid
