"""What the API and the daemon do with the store: store a request (accepted with its
elementary jobs, or refused with its errors), find one as its owner (or an administrator)
may, cancel it, read its state and progress, and the runner's side: jobs to hand over, the
ranges already done, jobs requeued after a restart.

Each function works in the caller's session (one transaction); none commits.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from datasched.service.contracts import (
    CommandWork,
    ElementaryJob,
    FileRef,
    JobState,
    MetaJobRequest,
    ProcessorWork,
)
from datasched.service.fairshare import targets
from datasched.service.store.models import Group, Job, Packet, Request, User, utcnow
from datasched.service.users import (
    OPEN_STATES,
    Caller,
    Removed,
    mark_removed,
    removable_user,
    revoke_token,
)

__all__ = [
    "HANDED_OVER",
    "OPEN",
    "CommandRun",
    "GroupQueue",
    "Removal",
    "UserRemoved",
    "cancel_request",
    "command_runs",
    "done_ranges",
    "elementary_job",
    "find_request",
    "group_queues",
    "is_command",
    "job_node",
    "list_requests",
    "lock_request",
    "lock_user",
    "new_request_id",
    "open_requests",
    "packet_nodes",
    "pending_jobs",
    "progress",
    "refresh_request_state",
    "remove_user_cancelling",
    "requeue_unfinished",
    "store_accepted",
    "work_from_json",
    "work_to_json",
]

HANDED_OVER = (JobState.SUBMITTED, JobState.QUEUED, JobState.RUNNING)
"""Job states in which the runner holds the job (requeued after a restart)."""

OPEN = OPEN_STATES
"""States of a request not yet final (what the per-user cap on pending requests counts; the
same that keep a user from being removed)."""


def new_request_id() -> str:
    """A request's id: 12 random hex digits (unguessable enough that ids say nothing of
    other users' requests; access is checked anyway)."""
    return secrets.token_hex(6)


def work_to_json(work: ProcessorWork | CommandWork) -> dict[str, Any]:
    """A job's work as JSON (``kind``: ``processor`` or ``command``)."""
    data = asdict(work)
    data["kind"] = "processor" if isinstance(work, ProcessorWork) else "command"
    if isinstance(work, ProcessorWork):
        data["processor_args"] = dict(work.processor_args)
        data["columns"] = list(work.columns) if work.columns is not None else None
    return data


def work_from_json(data: dict[str, Any]) -> ProcessorWork | CommandWork:
    """The inverse of :func:`work_to_json`."""
    fields = {k: v for k, v in data.items() if k != "kind"}
    if data.get("kind") == "command":
        return CommandWork(**fields)
    if fields.get("columns") is not None:
        fields["columns"] = tuple(fields["columns"])
    return ProcessorWork(**fields)


def _file_json(f: FileRef) -> dict[str, Any]:
    data = asdict(f)
    data["cached_on"] = list(f.cached_on)
    return data


class UserRemoved(Exception):
    """The caller was removed after their token was checked (a call under way then)."""


def lock_user(s: Session, user_id: int) -> None:
    """Lock the user's row until the transaction ends (PostgreSQL's ``FOR UPDATE``; SQLite's
    transactions hold the write lock already), so that a user's concurrent submissions
    count their pending and refused requests one after the other, and so that a submission
    and the user's removal (which locks the row too) come one after the other: raises
    :class:`UserRemoved` for a user removed meanwhile, so that no request is stored for
    them once ``users remove`` found none open."""
    removed = s.execute(select(User.removed).where(User.id == user_id).with_for_update()).first()
    if removed is not None and removed[0] is not None:
        raise UserRemoved(user_id)


def open_requests(s: Session, owner_id: int) -> int:
    """How many of the user's requests are not yet final."""
    q = select(func.count()).select_from(Request)
    return int(s.scalar(q.where(Request.owner_id == owner_id, Request.state.in_(OPEN))) or 0)


def store_accepted(
    s: Session,
    caller: Caller,
    request_id: str,
    raw: str,
    content_type: str,
    mjr: MetaJobRequest,
    jobs: Sequence[ElementaryJob],
) -> Request:
    """Keep an accepted request and its elementary jobs, all ``pending`` (the daemon's loop
    hands them to the runner)."""
    req = Request(
        id=request_id,
        owner_id=caller.id,
        state=JobState.PENDING.value,
        raw=raw,
        content_type=content_type,
        title=mjr.title[:256],
        errors=[],
        policy=mjr.policy,
        split=mjr.split.value if mjr.split is not None else None,
    )
    s.add(req)
    for job in jobs:
        s.add(
            Job(
                id=job.id,
                request=req,
                index=job.index,
                node=job.node,
                state=JobState.PENDING.value,
                files=[_file_json(f) for f in job.files],
                work=work_to_json(job.work),
                priority=job.priority,
                log="",
            )
        )
    s.flush()
    return req


def find_request(s: Session, caller: Caller, request_id: str) -> Request | None:
    """The request, if ``caller`` owns it or is an administrator; None otherwise (another
    user's request is as unknown as one that does not exist)."""
    req = s.get(Request, request_id)
    if req is None or (req.owner_id != caller.id and not caller.admin):
        return None
    return req


def list_requests(
    s: Session, caller: Caller, *, limit: int = 1000, after: Request | None = None
) -> list[Request]:
    """The caller's requests (an administrator's: everyone's), newest first, at most
    ``limit``; with ``after``, those that come after it in that order (the next page)."""
    q = select(Request).order_by(Request.created.desc(), Request.id).limit(limit)
    if not caller.admin:
        q = q.where(Request.owner_id == caller.id)
    if after is not None:
        q = q.where(
            (Request.created < after.created)
            | ((Request.created == after.created) & (Request.id > after.id))
        )
    return list(s.scalars(q))


def lock_request(s: Session, request_id: str) -> Request | None:
    """The request, read afresh and locked until the transaction ends (PostgreSQL's ``FOR
    UPDATE``; SQLite's transactions hold the write lock already). Every change of a
    request's jobs locks the request first, so that two transactions changing two jobs of
    one request cannot both miss the other's change when they derive its state, and so that
    they take their locks in one order (request, then jobs), which cannot deadlock."""
    q = (
        select(Request)
        .where(Request.id == request_id)
        .with_for_update(of=Request)
        .execution_options(populate_existing=True)
    )
    return s.scalars(q).one_or_none()


def cancel_request(s: Session, req: Request) -> list[str]:
    """Abort the request and its unfinished jobs; the ids of those the runner holds (to
    cancel there)."""
    lock_request(s, req.id)
    s.refresh(req, ["jobs"])
    handed = []
    for job in req.jobs:
        if not JobState(job.state).final:
            if JobState(job.state) in HANDED_OVER:
                handed.append(job.id)
            job.state = JobState.ABORTED.value
    if not JobState(req.state).final:
        req.state = JobState.ABORTED.value
        req.updated = utcnow()
    return handed


@dataclass(frozen=True, slots=True)
class Removal:
    """A user removed with their open requests cancelled (:func:`remove_user_cancelling`):
    the user as removed, the requests cancelled (oldest first), and the jobs of theirs the
    runner held, to cancel there."""

    removed: Removed
    cancelled: tuple[str, ...]
    handed: tuple[str, ...]


def remove_user_cancelling(s: Session, name: str) -> Removal:
    """Shut user ``name`` out in one transaction: their token revoked, every request of
    theirs not yet final cancelled as ``cancel`` does (:func:`cancel_request`), then the user
    marked removed. The user's row is locked first, as a submission locks it
    (:func:`lock_user`): a submission that committed before is cancelled here, one after
    finds the user removed and stores nothing. The runner's jobs of the requests cancelled
    are stopped by the daemon (here: ``handed``; a daemon serving the store from another
    process cancels the jobs it holds that its store shows aborted). Refused, changing
    nothing, for an unknown or removed user and for the last administrator
    (:class:`~datasched.service.users.UserError`)."""
    user = removable_user(s, name)
    revoke_token(user)
    q = select(Request).where(Request.owner_id == user.id, Request.state.in_(OPEN))
    cancelled, handed = [], []
    for req in s.scalars(q.order_by(Request.created, Request.id)).all():
        handed += cancel_request(s, req)
        cancelled.append(req.id)
    return Removal(mark_removed(s, user), tuple(cancelled), tuple(handed))


def refresh_request_state(s: Session, request_id: str) -> None:
    """The request's state from its jobs' (an aborted or refused request stays so): all
    completed → completed; all final with one failed → failed; one running → running; one
    handed over → queued; else pending."""
    req = s.get(Request, request_id)
    if req is None or JobState(req.state) in (JobState.ABORTED, JobState.REFUSED):
        return
    states = {JobState(j.state) for j in req.jobs}
    if not states:
        return
    if all(st.final for st in states):
        if states == {JobState.COMPLETED}:
            new = JobState.COMPLETED
        elif JobState.FAILED in states:
            new = JobState.FAILED
        else:
            new = JobState.ABORTED
    elif JobState.RUNNING in states:
        new = JobState.RUNNING
    elif states & {JobState.SUBMITTED, JobState.QUEUED}:
        new = JobState.QUEUED
    else:
        new = JobState.PENDING
    if req.state != new.value:
        req.state = new.value
        req.updated = utcnow()


def progress(s: Session, job_ids: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per job: events, bytes and packets done, and CPU seconds."""
    out = {j: {"events": 0, "bytes": 0, "packets": 0, "cpu_s": 0.0} for j in job_ids}
    if not job_ids:
        return out
    rows = s.execute(
        select(
            Packet.job_id,
            func.sum(Packet.stop - Packet.start),
            func.sum(Packet.n_bytes),
            func.count(),
            func.sum(Packet.cpu_s),
        )
        .where(Packet.job_id.in_(job_ids))
        .group_by(Packet.job_id)
    )
    for job_id, events, n_bytes, count, cpu in rows:
        out[job_id] = {
            "events": int(events or 0),
            "bytes": int(n_bytes or 0),
            "packets": int(count),
            "cpu_s": float(cpu or 0.0),
        }
    return out


def is_command(job: Job) -> bool:
    """Whether the job runs a command (STAR's), not a processor over events: it reads no
    events in packets, so its packets' figures mean nothing; :func:`command_runs` says what
    does."""
    return bool(job.work.get("kind") == "command")


@dataclass(frozen=True, slots=True)
class CommandRun:
    """What a command's job did: when it started (on its worker; None: not yet, or not
    reported), when it ended (None: not yet), and its exit status where the store has it
    (0 once completed: a command completes only on exit 0; a failed one's log says its code
    when it exited with one; None otherwise: killed, stopped by a limit, never run)."""

    started: datetime | None
    ended: datetime | None
    exit_code: int | None


_EXITED = re.compile(r"exited with code (-?\d+)")
"""How a failed command's log says its exit code (:mod:`datasched.runtime.commands`)."""


def command_runs(s: Session, jobs: Sequence[Job]) -> dict[str, CommandRun]:
    """Per command job of ``jobs`` (the others left out): its :class:`CommandRun`. Its start
    is its packets' earliest start on the worker; while it runs with none yet, when it was
    reported running (the job's last change); its end, the job's last change once final."""
    ids = [j.id for j in jobs if is_command(j)]
    if not ids:
        return {}
    started = dict(
        s.execute(
            select(Packet.job_id, func.min(Packet.started))
            .where(Packet.job_id.in_(ids))
            .group_by(Packet.job_id)
        ).all()
    )
    out = {}
    for job in jobs:
        if job.id not in ids:
            continue
        state = JobState(job.state)
        began = started.get(job.id) or (job.updated if state == JobState.RUNNING else None)
        code = None
        if state == JobState.COMPLETED:
            code = 0
        elif state == JobState.FAILED:
            said = _EXITED.findall(job.log or "")
            code = int(said[-1]) if said else None
        out[job.id] = CommandRun(began, job.updated if state.final else None, code)
    return out


def packet_nodes(s: Session, job_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per job, the nodes its packets ran on and the events each did (the facts; a job's
    ``node`` column is the split's preference until the runner reports where it started)."""
    out: dict[str, dict[str, int]] = {j: {} for j in job_ids}
    if not job_ids:
        return out
    rows = s.execute(
        select(Packet.job_id, Packet.node, func.sum(Packet.stop - Packet.start))
        .where(Packet.job_id.in_(job_ids))
        .group_by(Packet.job_id, Packet.node)
    )
    for job_id, node, events in rows:
        out[job_id][str(node)] = int(events or 0)
    return out


def job_node(job: Job, ran_on: dict[str, int]) -> tuple[str | None, str | None]:
    """``(node, preferred_node)`` of a job: the node it ran on (the one of most events by its
    packets; while running with none yet, the one the runner reported; else None), and the
    split's preference while the job waits (pending, submitted, queued: the column still
    holds it then; once started the runner overwrote it, so None)."""
    waiting = JobState(job.state) in (JobState.PENDING, JobState.SUBMITTED, JobState.QUEUED)
    if ran_on:
        node: str | None = max(sorted(ran_on), key=lambda n: ran_on[n])
    elif waiting:
        node = None
    else:
        node = job.node
    return node, job.node if waiting else None


def done_ranges(s: Session, job_id: str) -> list[tuple[str, int, int]]:
    """The ranges ``(url, start, stop)`` of a job whose results are stored."""
    rows = s.execute(
        select(Packet.url, Packet.start, Packet.stop)
        .where(Packet.job_id == job_id)
        .order_by(Packet.url, Packet.start)
    )
    return [(u, int(a), int(b)) for u, a, b in rows]


def elementary_job(job: Job) -> ElementaryJob:
    """A stored job as the runner takes it."""
    req = job.request
    user: User = req.owner
    group: Group = user.group
    files = tuple(
        FileRef(
            url=f["url"],
            n_events=int(f["n_events"]),
            n_bytes=int(f["n_bytes"]),
            tree=f.get("tree"),
            dataset=f.get("dataset"),
            cached_on=tuple(f.get("cached_on") or ()),
        )
        for f in job.files
    )
    return ElementaryJob(
        request_id=req.id,
        index=job.index,
        files=files,
        work=work_from_json(job.work),
        node=job.node,
        user=user.name,
        group=group.name,
        priority=group.priority,
    )


def pending_jobs(s: Session, limit: int = 100) -> list[Job]:
    """Jobs waiting to be handed to the runner: those of the groups of highest priority
    first, then the oldest request's first. (The daemon's dispatcher does not hand them in
    this order but by fair share: :mod:`datasched.service.fairshare`.)"""
    q = (
        select(Job)
        .join(Request, Job.request_id == Request.id)
        .join(User, Request.owner_id == User.id)
        .join(Group, User.group_id == Group.id)
        .where(Job.state == JobState.PENDING.value)
        .where(Request.state.not_in([JobState.ABORTED.value, JobState.REFUSED.value]))
        .order_by(Group.priority.desc(), Request.created, Request.id, Job.index)
        .limit(limit)
        .execution_options(populate_existing=True)
    )
    return list(s.scalars(q))


def requeue_unfinished(s: Session) -> int:
    """After a restart: every job the runner held (submitted, queued, running) back to
    pending, to be handed over again with its ranges done. Returns how many."""
    result = s.execute(
        update(Job)
        .where(Job.state.in_([st.value for st in HANDED_OVER]))
        .values(state=JobState.PENDING.value)
    )
    return int(getattr(result, "rowcount", 0) or 0)


@dataclass(frozen=True, slots=True)
class GroupQueue:
    """A group's queue (PROOF §3's groups): its priority and quota, its target share (its
    weight, quota x priority, over those of the groups with work: the dispatcher's fair
    share), the share of the recent CPU it achieved (None without a dispatcher), and its
    elementary jobs waiting (pending, submitted, queued) and running."""

    group: str
    priority: float
    quota: float
    waiting: int
    running: int
    target: float = 0.0
    achieved: float | None = None


_WAITING = (JobState.PENDING.value, JobState.SUBMITTED.value, JobState.QUEUED.value)


def group_queues(s: Session, achieved: Mapping[str, float] | None = None) -> list[GroupQueue]:
    """The groups with jobs waiting or running, furthest below target first (the order of
    the dispatcher's fair share; by priority when nothing is used yet). ``achieved``: each
    group's share of the recent CPU (the dispatcher's)."""
    rows = s.execute(
        select(Group.name, Group.priority, Group.quota, Job.state, func.count())
        .select_from(Job)
        .join(Request, Job.request_id == Request.id)
        .join(User, Request.owner_id == User.id)
        .join(Group, User.group_id == Group.id)
        .where(Job.state.in_([*_WAITING, JobState.RUNNING.value]))
        .group_by(Group.name, Group.priority, Group.quota, Job.state)
    ).all()
    counts: dict[tuple[str, float, float], list[int]] = {}
    for name, priority, quota, state, n in rows:
        entry = counts.setdefault((name, float(priority), float(quota)), [0, 0])
        entry[0 if state in _WAITING else 1] += int(n)
    share = targets({name: p * q for name, p, q in counts})
    out = [
        GroupQueue(
            name,
            priority,
            quota,
            waiting,
            running,
            share[name],
            None if achieved is None else achieved.get(name, 0.0),
        )
        for (name, priority, quota), (waiting, running) in counts.items()
    ]
    return sorted(
        out,
        key=lambda g: (
            (g.achieved or 0.0) / g.target if g.target > 0 else float("inf"),
            -g.target,
            g.group,
        ),
    )
