"""Which workers have a warm sandbox for which user, and what a cold one costs, from the
packets stored: the ETAs' setup per user and node (``CostModel.user_setup_s``).

A worker keeps a user's sandboxed child between that user's packets and closes it after
:data:`~datasched.sandbox.confine.IDLE_S` seconds idle (docs/security.md, "Every job in a
sandbox"). So a node is warm for a user who had a packet stored there within that time, and
a packet is a cold start when the same user had none there within that time before it. A
cold packet's time from its slot to its storing, less the median of the next
:data:`LATER` packets of that user on that node (warm), is one measure of a start; the
setup is the median of the measures (docs/service-whatif.md).

The files whose run on a node began with a cold start (:attr:`WarmSandboxes.cold`) are left
out of the nodes' paces (:func:`~datasched.service.live_rates.sent_paces`): the start is
charged on its own, once (:func:`starting_sandboxes`, and the simulated node's
``user_setup_s``)."""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from datasched.sandbox.confine import IDLE_S, KEEP
from datasched.service.contracts import JobSnapshot, NodeSnapshot
from datasched.service.store.db import Store
from datasched.service.store.models import Job, Packet, Request, User

__all__ = [
    "HISTORY_S",
    "LATER",
    "WarmSandboxes",
    "cold_flags",
    "cold_starts",
    "start_left",
    "starting_sandboxes",
    "warm_sandboxes",
]

HISTORY_S = 600.0
"""How far back the packets are read (at least :data:`IDLE_S` more than a start measured)."""
LATER = 8
"""The warm packets after a cold one that it is measured against (at least one)."""

Row = tuple[str, str, float, float]
"""A packet: (node, user, when it got its slot, when it was stored), in seconds."""


@dataclass(frozen=True, slots=True)
class WarmSandboxes:
    """Per node, the users whose sandbox is warm there now (at most
    :data:`~datasched.sandbox.confine.KEEP`, the least recently used first), and the measured
    cost of a cold start (None: none measured)."""

    users: Mapping[str, tuple[str, ...]]
    setup_s: float | None
    cold: frozenset[tuple[str, str]] = frozenset()
    """(job, file) pairs with a cold start among their packets read: their runs held it."""
    starts: tuple[float, ...] = ()
    """Each cold start measured (seconds, ascending): :func:`start_left` reads them."""


def start_left(starts: Sequence[float], setup_s: float, elapsed: float) -> float:
    """What is left of a sandbox's start that began ``elapsed`` seconds ago: the median of
    what the measured ``starts`` (ascending) that lasted longer had left after as long
    (0 when none did). Without measures, ``setup_s`` less ``elapsed``.

    A start's time spreads (on two cores, one alone 1.0 to 1.2 s, four at once 1.5 to 2.3
    s): one under way longer than the median has not ended with it, and the median less
    its age (0) priced such a start as done (docs/service-whatif.md)."""
    if not starts:
        return max(setup_s - elapsed, 0.0)
    longer = [s - elapsed for s in starts[bisect_right(starts, elapsed) :]]
    return statistics.median(longer) if longer else 0.0


def cold_flags(rows: Sequence[Row], since: float, keep: int = KEEP) -> list[bool]:
    """Whether each of ``rows`` (in storing order, read from ``since`` on) is a cold start:
    its user had no packet stored on its node within :data:`IDLE_S` before it got its slot,
    or ``keep`` other users had one there since theirs (the worker keeps that many idle
    sandboxes, :data:`~datasched.sandbox.confine.KEEP`, the least recently used closed
    first). A user's first packet read on a node is cold only if the history covers the
    idle time before it."""
    last: dict[str, dict[str, float]] = {}
    """Per node, each user's last packet stored."""
    out: list[bool] = []
    for node, user, slotted, stored in rows:
        users = last.setdefault(node, {})
        before = users.get(user)
        if before is None:
            cold = slotted - since > IDLE_S
        elif slotted - before > IDLE_S:
            cold = True
        else:
            cold = sum(before < t <= slotted for u, t in users.items() if u != user) >= keep
        out.append(cold)
        users[user] = max(before if before is not None else stored, stored)
    return out


def cold_starts(
    rows: Sequence[Row], since: float, flags: Sequence[bool] | None = None
) -> list[float]:
    """What each cold start among ``rows`` (in storing order, read from ``since`` on) cost
    over the same user's next warm packets on its node (``flags``: the rows'
    :func:`cold_flags`, worked out here when not given)."""
    if flags is None:
        flags = cold_flags(rows, since)
    by_pair: dict[tuple[str, str], list[tuple[float, float, bool]]] = {}
    for (node, user, slotted, stored), cold_start in zip(rows, flags, strict=True):
        by_pair.setdefault((node, user), []).append((slotted, stored, cold_start))
    out: list[float] = []
    for pair in by_pair.values():
        packets = [(slotted, stored) for slotted, stored, _ in pair]
        cold = [c for *_, c in pair]
        for k, (slotted, stored) in enumerate(packets):
            if not cold[k]:
                continue
            warm: list[float] = []
            for j in range(k + 1, len(packets)):
                if cold[j] or len(warm) == LATER:
                    break
                warm.append(packets[j][1] - packets[j][0])
            if warm:
                out.append(max(stored - slotted - statistics.median(warm), 0.0))
    return out


def warm_sandboxes(store: Store, now: datetime | None = None) -> WarmSandboxes:
    """The packets of the last :data:`HISTORY_S` seconds read as above."""
    now = now or datetime.now(UTC)
    since = now - timedelta(seconds=HISTORY_S)
    with store.reading() as s:
        found = s.execute(
            select(
                Packet.node, User.name, Packet.slotted, Packet.created, Packet.job_id, Packet.url
            )
            .join(Job, Packet.job_id == Job.id)
            .join(Request, Job.request_id == Request.id)
            .join(User, Request.owner_id == User.id)
            .where(Packet.created >= since)
            .where(Packet.slotted.is_not(None))
            .order_by(Packet.created, Packet.id)
        ).all()
    rows: list[Row] = []
    runs: list[tuple[str, str]] = []
    """Each row's (job, file)."""
    for node, user, slotted, created, job, url in found:
        if slotted is not None:
            rows.append(
                (str(node), str(user), _aware(slotted).timestamp(), _aware(created).timestamp())
            )
            runs.append((str(job), str(url)))
    t_now = now.timestamp()
    last: dict[str, dict[str, float]] = {}
    for node, user, _, stored in rows:
        if t_now - stored <= IDLE_S:
            users = last.setdefault(node, {})
            users[user] = max(users.get(user, stored), stored)
    flags = cold_flags(rows, since.timestamp())
    starts = cold_starts(rows, since.timestamp(), flags)
    return WarmSandboxes(
        {node: _most_recent(users, KEEP) for node, users in last.items()},
        statistics.median(starts) if starts else None,
        frozenset(run for run, cold in zip(runs, flags, strict=True) if cold),
        tuple(sorted(starts)),
    )


def _most_recent(last: Mapping[str, float], keep: int) -> tuple[str, ...]:
    """The ``keep`` users last stored, the least recent first."""
    ranked = sorted(last, key=lambda user: (last[user], user))
    return tuple(ranked[-keep:]) if keep else tuple(ranked)


def starting_sandboxes(
    jobs: Sequence[JobSnapshot],
    nodes: Sequence[NodeSnapshot],
    setup_s: float | None,
    running_for: Mapping[str, float],
    stored: Set[tuple[str, str]],
    starts: Sequence[float] = (),
) -> tuple[tuple[JobSnapshot, ...], tuple[NodeSnapshot, ...]]:
    """The jobs and nodes with the sandboxes being started: a job running on a node not
    warm for its user, with none of its packets stored from that node yet, is starting its
    user's sandbox there. Its time per event takes what is left of the start
    (:func:`start_left` of the measured ``starts`` after how long it has been running there,
    ``running_for``; ``setup_s`` less that time without them), and the node is warm for that
    user from then on: the simulation charges that start once, to that job, and not again
    to the user's next subjob there. ``stored``: the (job, node) pairs with a packet stored
    (a job whose next file out-of-order sent to another node starts there again). Jobs not
    priced yet are left as they are (docs/service-whatif.md, "A running job's rest")."""
    if not setup_s:
        return tuple(jobs), tuple(nodes)
    warm = {n.name: list(n.warm_users) for n in nodes}
    out: list[JobSnapshot] = []
    for j in jobs:
        left, node = j.events_left, j.node
        if (
            node is not None
            and j.cpu_s_per_event is not None
            and (j.id, node) not in stored
            and node in warm
            and j.user not in warm[node]
            and left > 0
        ):
            rest = start_left(starts, setup_s, running_for.get(j.id, 0.0))
            j = replace(j, cpu_s_per_event=j.cpu_s_per_event + rest / left)
            warm[node].append(j.user)  # the most recent
        out.append(j)
    return tuple(out), tuple(replace(n, warm_users=tuple(warm[n.name])) for n in nodes)


def _aware(t: datetime) -> datetime:
    """SQLite gives back naive datetimes (stored as UTC)."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
