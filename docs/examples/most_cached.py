"""A policy of one's own: each job runs whole on the free slot whose node caches most of it
(first come first served otherwise), caching what it reads. docs/writing-a-policy.md walks
through it; tests/policies/test_example_policy.py runs it through the checks every registered
policy passes."""

from __future__ import annotations

from collections import deque
from typing import ClassVar

from datasched.core.model import Subjob
from datasched.core.policy import (
    DEFAULT,
    JobView,
    Param,
    Policy,
    ReadMode,
    Returned,
    SchedulerView,
)


class MostCached(Policy):
    name = "most-cached"
    section = "an example"
    summary = "whole jobs, FIFO, each on the free node caching most of it"
    params: ClassVar[tuple[Param, ...]] = (
        Param("cache_fill", bool, True, "keep what a job reads in its node's cache"),
    )

    def __init__(self, *, cache_fill: bool = DEFAULT) -> None:
        self.reads = ReadMode(cache_fill=cache_fill)
        self.returned: deque[Subjob] = deque()

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        sched.queue_job(js)
        for slot in list(sched.idle_slots):
            self.work_requested(sched, slot, None)

    def work_requested(self, sched: SchedulerView, slot: int, ended: JobView | None) -> None:
        if not sched.is_idle(slot):
            return
        if self.returned:  # work given back first: it is the oldest
            sched.start(self.returned.popleft(), slot)
            return
        if not sched.job_queue:
            return
        js = sched.pop_queued_job()
        assert js is not None
        best = max(
            sched.idle_slots,
            key=lambda s: (sched.directory.cached_length(sched.node_of(s), js.job.data), -s),
        )
        sched.start(sched.new_subjob(js, js.job.data), best)

    def work_returned(self, sched: SchedulerView, sj: Subjob, cause: Returned) -> None:
        self.returned.append(sj)

    def job_cancelled(self, sched: SchedulerView, js: JobView) -> None:
        self.returned = deque(sj for sj in self.returned if sj.job_id != js.job_id)
