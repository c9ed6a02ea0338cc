"""Which workers have a warm sandbox for which user, and what a cold one costs, from the
packets stored: the ETAs' setup per user and node (``CostModel.user_setup_s``).

A worker keeps a user's sandboxed child between that user's packets and closes it after
:data:`~datasched.sandbox.confine.IDLE_S` seconds idle (docs/security.md, "Every job in a
sandbox"). So a node is warm for a user who had a packet stored there within that time, and
a packet is a cold start when the same user had none there within that time before it. A
cold packet's time from its slot to its storing, less the median of the next
:data:`LATER` packets of that user on that node (warm), is one measure of a start; the
setup is the median of the measures (docs/service-whatif.md)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from datasched.sandbox.confine import IDLE_S
from datasched.service.contracts import JobSnapshot, NodeSnapshot
from datasched.service.store.db import Store
from datasched.service.store.models import Job, Packet, Request, User

__all__ = [
    "HISTORY_S",
    "LATER",
    "WarmSandboxes",
    "cold_starts",
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
    """Per node, the users whose sandbox is warm there now, and the measured cost of a cold
    start (None: none measured)."""

    users: Mapping[str, tuple[str, ...]]
    setup_s: float | None


def cold_starts(rows: Sequence[Row], since: float) -> list[float]:
    """What each cold start among ``rows`` (in storing order, read from ``since`` on) cost
    over the same user's next warm packets on its node. A pair's first packet read is cold
    only if the history covers the idle time before it."""
    by_pair: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for node, user, slotted, stored in rows:
        by_pair.setdefault((node, user), []).append((slotted, stored))
    out: list[float] = []
    for packets in by_pair.values():
        cold: list[bool] = []
        last = since - IDLE_S  # nothing read before: warm unless the history covers it
        for slotted, stored in packets:
            cold.append(slotted - last > IDLE_S and slotted - since > IDLE_S)
            last = max(last, stored)
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
            select(Packet.node, User.name, Packet.slotted, Packet.created)
            .join(Job, Packet.job_id == Job.id)
            .join(Request, Job.request_id == Request.id)
            .join(User, Request.owner_id == User.id)
            .where(Packet.created >= since)
            .where(Packet.slotted.is_not(None))
            .order_by(Packet.created, Packet.id)
        ).all()
    rows = [
        (str(node), str(user), _aware(slotted).timestamp(), _aware(created).timestamp())
        for node, user, slotted, created in found
        if slotted is not None
    ]
    t_now = now.timestamp()
    users: dict[str, set[str]] = {}
    for node, user, _, stored in rows:
        if t_now - stored <= IDLE_S:
            users.setdefault(node, set()).add(user)
    starts = cold_starts(rows, since.timestamp())
    return WarmSandboxes(
        {node: tuple(sorted(u)) for node, u in users.items()},
        statistics.median(starts) if starts else None,
    )


def starting_sandboxes(
    jobs: Sequence[JobSnapshot],
    nodes: Sequence[NodeSnapshot],
    setup_s: float | None,
    running_for: Mapping[str, float],
    stored: Set[str],
) -> tuple[tuple[JobSnapshot, ...], tuple[NodeSnapshot, ...]]:
    """The jobs and nodes with the sandboxes being started: a job running on a node not
    warm for its user, with none of its packets stored yet, is starting its user's sandbox
    there. Its time per event takes what is left of the start (``setup_s`` less how long it
    has been running, ``running_for``), and the node is warm for that user from then on: the
    simulation charges that start once, to that job, and not again to the user's next
    subjob there. ``stored``: the jobs with a packet stored. Jobs not priced yet are left
    as they are (docs/service-whatif.md, "A running job's rest")."""
    if not setup_s:
        return tuple(jobs), tuple(nodes)
    warm = {n.name: set(n.warm_users) for n in nodes}
    out: list[JobSnapshot] = []
    for j in jobs:
        left, node = j.events_left, j.node
        if (
            node is not None
            and j.cpu_s_per_event is not None
            and j.id not in stored
            and node in warm
            and j.user not in warm[node]
            and left > 0
        ):
            rest = max(setup_s - running_for.get(j.id, 0.0), 0.0)
            j = replace(j, cpu_s_per_event=j.cpu_s_per_event + rest / left)
            warm[node].add(j.user)
        out.append(j)
    return tuple(out), tuple(replace(n, warm_users=tuple(sorted(warm[n.name]))) for n in nodes)


def _aware(t: datetime) -> datetime:
    """SQLite gives back naive datetimes (stored as UTC)."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
