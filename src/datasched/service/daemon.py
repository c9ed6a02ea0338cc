"""The daemon's side of the runner: the :class:`Runner` it drives, the
:class:`StoreListener` that writes what the runner reports, and the :class:`Dispatcher`
loop that hands queued elementary jobs over.

Restart: the store holds every job and every packet done. On start,
:meth:`Dispatcher.start` puts back to ``pending`` every job the runner held (submitted,
queued, running) and hands each over again with the ranges already done; a packet the
runner reports twice is stored once (the packets table's UNIQUE constraint), so no event is
counted twice or lost.

Admission (the groups' priorities and quotas): the dispatcher keeps at most
``max_held`` jobs in the runner (default twice the cluster's slots) and, as room opens,
hands the next job by fair share (:mod:`datasched.service.fairshare`): the group furthest
below its target share first, its users in turn, each user's oldest first. Usage is read
back from the stored packets on start, so a restart forgets none of it.

Cancels: the API's ``cancel`` stops the request's jobs in the runner at once; a request
aborted in the store by another process (``users remove NAME --cancel``) has the jobs the
runner holds cancelled the same way at the dispatcher's next round
(:meth:`Dispatcher.stop_aborted`).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from datasched.service.contracts import (
    ElementaryJob,
    JobState,
    PacketDone,
    ProcessorWork,
    RunnerListener,
)
from datasched.service.fairshare import FairShare, GroupTurn, cluster_slots
from datasched.service.merger import Merger
from datasched.service.periodic import Periodic
from datasched.service.store.db import Store
from datasched.service.store.models import Group, Job, Packet, Request, User
from datasched.service.store.ops import (
    HANDED_OVER,
    done_ranges,
    elementary_job,
    lock_request,
    progress,
    refresh_request_state,
    requeue_unfinished,
)
from datasched.service.whatif import Admission

__all__ = ["Dispatcher", "Runner", "StoreListener"]

log = logging.getLogger(__name__)


class Runner(Protocol):
    """What the daemon needs of the runner (:mod:`datasched.service.runner`).

    ``start(listener)`` starts it, reporting to ``listener`` from then on; ``submit`` hands
    it a job with the ranges ``(url, start, stop)`` already done, which it must not run
    again; ``cancel`` stops a job (reported ``aborted``); ``cluster`` describes the cluster
    (nodes, slots, cache fill, what runs where) as JSON; ``merge`` merges a request's packet
    results (opaque bytes) where user code may run, never in the daemon; ``stop`` stops
    it."""

    def start(self, listener: RunnerListener) -> None: ...

    def submit(self, job: ElementaryJob, done_ranges: Sequence[tuple[str, int, int]]) -> None: ...

    def cancel(self, job_id: str) -> None: ...

    def cluster(self) -> Mapping[str, Any]: ...

    def merge(self, work: ProcessorWork, results: Sequence[bytes]) -> bytes: ...

    def stop(self) -> None: ...


class StoreListener:
    """The :class:`~datasched.service.contracts.RunnerListener` of the daemon: every call is
    one transaction. A job already final (cancelled meanwhile) keeps its state; a packet
    already stored (a replay) is ignored."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.replays = 0
        self.on_packet: Callable[[PacketDone], None] | None = None
        """Called with each packet stored (not with replays): the dispatcher's usage."""
        self.on_final: Callable[[], None] | None = None
        """Called when a job ends: the runner has room again."""
        self.on_released: Callable[[str], None] | None = None
        """Called with a job's id whenever the runner reports it final (even a job the
        store had made final already): the runner no longer holds it."""

    def job_state(
        self,
        job_id: str,
        state: JobState,
        *,
        node: str | None = None,
        log: str = "",
        failed_file: str | None = None,
    ) -> None:
        if JobState(state).final and self.on_released is not None:
            self.on_released(job_id)
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
        if JobState(state).final and self.on_final is not None:
            self.on_final()

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
                        started=_started(packet.started_at),
                        slotted=_started(packet.slot_at),
                    )
                )
        except IntegrityError:
            self.replays += 1  # stored before: the runner replayed it after a restart
            return
        if self.on_packet is not None:
            self.on_packet(packet)


DEFAULT_HELD_PER_SLOT = 2
"""Jobs kept in the runner per slot of the cluster, unless ``max_held`` says otherwise."""
FALLBACK_HELD = 8
"""Jobs kept in the runner while it reports no slots (not started yet)."""


def _started(at: float | None) -> datetime | None:
    """When a packet began on its worker, as the store keeps it (never after now: a worker's
    clock ahead of the daemon's would make a packet take less than nothing)."""
    if at is None or not math.isfinite(at):
        return None
    return datetime.fromtimestamp(min(max(at, 0.0), time.time()), UTC)


def _timestamp(at: datetime) -> float:
    """A stored time as POSIX seconds (SQLite gives it back naive: it was UTC)."""
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


def _events(job: Job) -> int:
    return sum(int(f["n_events"]) for f in job.files)


_OPEN = (Request.state.not_in([JobState.ABORTED.value, JobState.REFUSED.value]),)


class Dispatcher(Periodic):
    """The daemon's loop: every ``period_s`` (or when woken), hands pending jobs to the
    runner by fair share while it holds fewer than ``max_held`` (None: twice the cluster's
    slots), each with its ranges done, and marks them ``submitted``. Usage decays with
    ``half_life_s``; ``clock`` gives POSIX seconds (the stored packets' times)."""

    name = "dispatcher"

    def __init__(
        self,
        store: Store,
        runner: Runner,
        *,
        period_s: float = 0.5,
        max_held: int | None = None,
        half_life_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_held is not None and max_held < 1:
            raise ValueError(f"max_held: expected a number >= 1, got {max_held}")
        super().__init__()
        self.store = store
        self.runner = runner
        self.period_s = period_s
        self.max_held = max_held
        self.clock = clock
        self.fair = FairShare(half_life_s)
        self.listener = StoreListener(store)
        self.listener.on_packet = self._used
        self.listener.on_final = self.wake
        self.listener.on_released = self._released
        self.merger = Merger(store, runner)
        """Merges each completed request's results on a worker."""
        self._owners: dict[str, tuple[str, str]] = {}
        self._held_ids: set[str] = set()
        """The jobs handed to the runner and not reported final since (under ``_lock``)."""
        self._lock = threading.Lock()
        self._capacity: int | None = max_held

    def recover(self) -> int:
        """Requeue what the runner held before a restart (how many jobs), and read the
        groups' usage back from the stored packets."""
        with self.store.session() as s:
            n = requeue_unfinished(s)
        self.load_usage()
        return n

    def load_usage(self) -> None:
        """The groups' decayed usage, from every stored packet."""
        with self.store.reading() as s:
            rows = s.execute(
                select(
                    Group.name, User.name, Packet.cpu_s, Packet.stop - Packet.start, Packet.created
                )
                .select_from(Packet)
                .join(Job, Packet.job_id == Job.id)
                .join(Request, Job.request_id == Request.id)
                .join(User, Request.owner_id == User.id)
                .join(Group, User.group_id == Group.id)
            ).all()
        fair = FairShare(self.fair.half_life_s)
        fair.load(
            ((g, u, float(c), int(n), _timestamp(at)) for g, u, c, n, at in rows), self.clock()
        )
        with self._lock:
            self.fair = fair

    def _used(self, packet: PacketDone) -> None:
        owner = self._owners.get(packet.job_id)
        if owner is None:
            with self.store.reading() as s:
                row = s.execute(
                    select(Group.name, User.name)
                    .select_from(Job)
                    .join(Request, Job.request_id == Request.id)
                    .join(User, Request.owner_id == User.id)
                    .join(Group, User.group_id == Group.id)
                    .where(Job.id == packet.job_id)
                ).first()
            if row is None:
                return
            owner = (str(row[0]), str(row[1]))
        with self._lock:
            self.fair.add(*owner, packet.cpu_s, packet.stop - packet.start, self.clock())

    def capacity(self) -> int:
        """How many jobs the runner may hold: ``max_held``, else twice its slots."""
        if self._capacity is None:
            try:
                slots = cluster_slots(self.runner.cluster())
            except Exception:  # a runner that cannot say yet: ask again next round
                log.exception("the runner's cluster view failed")
                slots = 0
            if slots <= 0:
                return FALLBACK_HELD
            self._capacity = DEFAULT_HELD_PER_SLOT * slots
        return self._capacity

    def _held(self, s: Session) -> tuple[int, dict[str, int]]:
        """How many jobs the runner holds, and per group the events they have left."""
        rows = s.execute(
            select(Job, Group.name)
            .join(Request, Job.request_id == Request.id)
            .join(User, Request.owner_id == User.id)
            .join(Group, User.group_id == Group.id)
            .where(Job.state.in_([st.value for st in HANDED_OVER]))
        ).all()
        done = progress(s, [job.id for job, _ in rows])
        left: dict[str, int] = {}
        for job, group in rows:
            rest = max(_events(job) - int(done[job.id]["events"]), 0)
            left[group] = left.get(group, 0) + rest
        return len(rows), left

    def _queues(self, s: Session) -> dict[str, tuple[float, dict[str, int]]]:
        """Per group with pending work: its weight and its users' pending counts."""
        rows = s.execute(
            select(Group.name, Group.priority, Group.quota, User.name, func.count(Job.id))
            .select_from(Job)
            .join(Request, Job.request_id == Request.id)
            .join(User, Request.owner_id == User.id)
            .join(Group, User.group_id == Group.id)
            .where(Job.state == JobState.PENDING.value, *_OPEN)
            .group_by(Group.name, Group.priority, Group.quota, User.name)
        ).all()
        out: dict[str, tuple[float, dict[str, int]]] = {}
        for group, priority, quota, user, n in rows:
            weight = float(priority) * float(quota)
            out.setdefault(str(group), (weight, {}))[1][str(user)] = int(n)
        return out

    def _oldest(self, s: Session, user: str, limit: int) -> list[Job]:
        q = (
            select(Job)
            .join(Request, Job.request_id == Request.id)
            .join(User, Request.owner_id == User.id)
            .where(Job.state == JobState.PENDING.value, User.name == user, *_OPEN)
            .order_by(Request.created, Request.id, Job.index)
            .limit(limit)
        )
        return list(s.scalars(q))

    def choose(self, s: Session, room: int) -> list[tuple[Job, str, str]]:
        """The next ``room`` pending jobs by fair share: ``(job, group, user)`` each."""
        return self._choose(s, room, self.fair, self._lock)

    def admission(self) -> Admission:
        """The pending jobs in the order the dispatcher would hand them over if nothing
        else changed (its fair share now, on a copy: the turns it takes are not taken), and
        how many the runner holds at a time: the queue the ETAs simulate in front of the
        runner (docs/service-whatif.md)."""
        with self.store.reading() as s:
            (n,) = s.execute(
                select(func.count(Job.id))
                .join(Request, Job.request_id == Request.id)
                .where(Job.state == JobState.PENDING.value, *_OPEN)
            ).one()
            with self._lock:
                fair = copy.deepcopy(self.fair)
            chosen = self._choose(s, int(n), fair, contextlib.nullcontext()) if n else []
        order = [job.id for job, _, _ in chosen]
        return Admission(tuple(order), self.capacity())

    def _choose(
        self, s: Session, room: int, fair: FairShare, lock: AbstractContextManager[object]
    ) -> list[tuple[Job, str, str]]:
        """:meth:`choose` on ``fair`` (taking its turns), under ``lock``."""
        _, left = self._held(s)
        queues = self._queues(s)
        waiting: dict[str, list[Job]] = {}
        chosen: list[tuple[Job, str, str]] = []
        now = self.clock()
        with lock:
            while len(chosen) < room and queues:
                turns = [
                    GroupTurn(g, w, tuple(u for u, n in users.items() if n > 0), left.get(g, 0))
                    for g, (w, users) in sorted(queues.items())
                ]
                turn = fair.pick_group(turns, now)
                user = fair.pick_user(turn.name, turn.users)
                if user not in waiting:
                    waiting[user] = self._oldest(s, user, room)
                users = queues[turn.name][1]
                if not waiting[user]:
                    users[user] = 0
                else:
                    job = waiting[user].pop(0)
                    chosen.append((job, turn.name, user))
                    left[turn.name] = left.get(turn.name, 0) + _events(job)
                    users[user] -= 1
                if not any(n > 0 for n in users.values()):
                    del queues[turn.name]
        return chosen

    def dispatch_once(self) -> int:
        """Hand pending jobs to the runner while it has room; how many it took."""
        with self.store.session() as s:
            held, _ = self._held(s)
            room = self.capacity() - held
            if room <= 0:
                return 0
            chosen = self.choose(s, room)
            for request_id in sorted({pick.request_id for pick, _, _ in chosen}):
                lock_request(s, request_id)
            handed = []
            for pick, group, user in chosen:
                row = s.get(Job, pick.id, populate_existing=True)
                if row is None or row.state != JobState.PENDING.value:
                    continue  # cancelled meanwhile
                if JobState(row.request.state) in (JobState.ABORTED, JobState.REFUSED):
                    continue
                handed.append((elementary_job(row), done_ranges(s, row.id)))
                self._owners[row.id] = (group, user)
                row.state = JobState.SUBMITTED.value
                refresh_request_state(s, row.request_id)
        n = 0
        for job, done in handed:
            try:
                with self._lock:
                    self._held_ids.add(job.id)
                self.runner.submit(job, done)
                n += 1
            except Exception:  # the runner refused it: back to the queue, tried again later
                log.exception("the runner refused elementary job %s", job.id)
                self._released(job.id)
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
                self.cancel(job_id)
        return n

    def _released(self, job_id: str) -> None:
        with self._lock:
            self._held_ids.discard(job_id)

    def cancel(self, job_id: str) -> None:
        """Stop a job in the runner (an aborted request's): the one way a job is cancelled
        there, for ``DELETE /requests/{id}`` as for :meth:`stop_aborted`."""
        self._released(job_id)
        self.runner.cancel(job_id)

    def stop_aborted(self) -> int:
        """Cancel in the runner every job it holds that the store shows aborted: a request
        cancelled by another process on the store (``users remove NAME --cancel``) reaches
        the runner at the dispatcher's next round. How many."""
        with self._lock:
            held = sorted(self._held_ids)
        if not held:
            return 0
        with self.store.reading() as s:
            aborted = list(
                s.scalars(
                    select(Job.id).where(Job.id.in_(held), Job.state == JobState.ABORTED.value)
                )
            )
        for job_id in aborted:
            log.info("elementary job %s was aborted in the store: cancelled", job_id)
            self.cancel(job_id)
        return len(aborted)

    def shares(self) -> dict[str, float]:
        """Each group's achieved share of the decayed CPU used."""
        with self._lock:
            return self.fair.achieved(self.clock())

    def wake(self) -> None:
        """Dispatch now (a request was just accepted, or a job ended: it may need merging)."""
        super().wake()
        self.merger.wake()

    def start(self) -> None:
        """Recover, start the runner, and run the loop in a thread."""
        n = self.recover()
        if n:
            log.info("requeued %d elementary jobs held before the restart", n)
        self.runner.start(self.listener)
        super().start()
        self.merger.start()

    def round(self) -> int:
        self.stop_aborted()
        return self.dispatch_once()

    def stop(self) -> None:
        """Stop the loop, then the runner."""
        super().stop()
        self.merger.stop()
        self.runner.stop()
