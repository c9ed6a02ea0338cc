"""How a packetizer policy's sessions (its jobs, each owned by a user of a group) share the
slots under PROOF's resource scheduling (ganis et al. §3): the order in which a slot serves
them by CPU weight, the sizes of queries, the nice values, and the usage behind quota
priorities, charged when a packet is handed out and corrected when it returns.

Pure bookkeeping, no clock: times come with the calls. The arithmetic is
:mod:`datasched.policies.proof.groups`'.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from datasched.core.policy import ParamError
from datasched.policies.proof.groups import (
    QuotaPriorities,
    UsageHistory,
    clipped,
    cpu_weight,
    nice_value,
    normalised_priorities,
    parse_groups,
    priority_levels,
    workers_for_query,
)

__all__ = ["GroupScheduler", "SlotShares"]


class SlotShares:
    """How a slot serves several sessions: by CPU weight, as the kernel shares a CPU among
    processes of different nice values, at the grain of a packet. Each slot keeps, per
    entity (a session, or a group's sessions taking turns), its virtual time: the slot
    seconds it used divided by its weight; the entity furthest behind goes next. A newcomer
    starts at the slot's floor (the virtual time last served), so it neither owes nor is
    owed for the time before it came."""

    def __init__(self) -> None:
        self._vtime: dict[int, dict[Hashable, float]] = {}
        self._floor: dict[int, float] = {}

    def order(
        self,
        slot: int,
        entities: Sequence[Hashable],
        weight: Mapping[Hashable, float] | None = None,
    ) -> list[Hashable]:
        """``entities`` (each waiting to be served on ``slot``) in the order to try them;
        among those level, the heaviest (by ``weight``) first, so that sessions starting
        together do not all go first to the one listed first."""
        vt = self._vtime.setdefault(slot, {})
        floor = self._floor.get(slot, 0.0)
        for e in entities:
            if vt.get(e, -math.inf) < floor:
                vt[e] = floor
        w = weight or {}
        return sorted(entities, key=lambda e: (vt[e], -w.get(e, 1.0)))

    def served(self, slot: int, entity: Hashable) -> None:
        vt = self._vtime.setdefault(slot, {})
        self._floor[slot] = max(self._floor.get(slot, 0.0), vt.get(entity, 0.0))

    def used(self, slot: int, entity: Hashable, seconds: float, weight: float) -> None:
        vt = self._vtime.setdefault(slot, {})
        vt[entity] = vt.get(entity, self._floor.get(slot, 0.0)) + seconds / weight

    def forget(self, entity: Hashable) -> None:
        for vt in self._vtime.values():
            vt.pop(entity, None)


class GroupScheduler:
    """The resource scheduling of a packetizer policy's sessions (its jobs, each owned by a
    user of a group): off without priorities or quotas (``on`` False: every query gets every
    worker, first come first served); on, the sizes of queries, the order in which a slot
    serves its sessions, and the priorities behind both. ``params`` are
    :data:`GROUP_PARAMS`' values."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        static = parse_groups(params["priorities"], "priorities")
        quotas = parse_groups(params["quotas"], "quotas")
        if static and quotas:
            raise ParamError("", "quotas", "give priorities or quotas, not both")
        self._static = static
        self._levels: int = params["levels"]
        self._kernel: str = params["kernel"]
        self._quota = None
        if quotas:
            self._quota = QuotaPriorities(
                quotas, period_s=params["quota_period_s"], levels=self._levels, kernel=self._kernel
            )
        self.on = bool(static or quotas)
        self._fraction: float = params["worker_fraction"]
        self._min_workers: int = params["min_workers"]
        self._round_robin: bool = params["round_robin"]
        self.usage = UsageHistory(params["usage_half_life_s"])
        self.owner: dict[int, tuple[str, str]] = {}
        """Job -> (group, user), for the jobs in the system."""
        self._shares = SlotShares()
        self._entity: dict[int, Hashable] = {}
        self._weight: dict[Hashable, float] = {}
        self._nice: dict[Hashable, int] = {}
        self._turn: dict[tuple[int, Hashable], int] = {}
        self._stale = True
        self.os_nice: bool = params.get("os_nice", False)
        """Whether packets also run at their session's nice value (``Policy.packet_nice``)."""
        self._pending: dict[int, tuple[str, str, float, float]] = {}
        """Slot -> the provisional charge of its packet in flight: (group, user, cost, when)."""
        self._measured: dict[int, tuple[float, int]] = {}
        """Job -> (cost, events) of its packets back so far: its cost per event."""

    def add(self, job_id: int, group: str, user: str) -> None:
        self.owner[job_id] = (group, user)
        self._stale = True

    def remove(self, job_id: int) -> None:
        if self.owner.pop(job_id, None) is not None:
            self._stale = True
        if self._entity.pop(job_id, None) == job_id:
            self._shares.forget(job_id)
        self._measured.pop(job_id, None)

    def active_users(self) -> dict[str, int]:
        users: dict[str, set[str]] = {}
        for group, user in self.owner.values():
            users.setdefault(group, set()).add(user)
        return {g: len(u) for g, u in users.items()}

    def priorities(self) -> dict[str, float]:
        """The group priorities in force (the quota controller's, when quotas are set)."""
        if self._quota is None:
            return dict(self._static)
        return self._quota.priorities(self.active_users())

    def query_size(self, job_id: int, n_free: int, n_slots: int) -> int:
        """How many workers the central scheduler gives the query ``job_id`` now."""
        pbar = normalised_priorities(self.priorities(), self.active_users())
        group = self.owner[job_id][0]
        return workers_for_query(
            n_free, self._fraction, pbar.get(group, 1.0), self._min_workers, n_slots
        )

    def order(self, slot: int, jobs: Sequence[int]) -> list[tuple[Hashable, list[int]]]:
        """The ``jobs`` waiting for ``slot``, by entity, in the order to try them: the entity
        furthest behind in weighted CPU first; a group's sessions taking turns from the user
        after the last served."""
        if self._stale:
            self._relevel()
        waiting: dict[Hashable, list[int]] = {}
        for job_id in jobs:
            waiting.setdefault(self._entity[job_id], []).append(job_id)
        out = []
        for entity in self._shares.order(slot, list(waiting), self._weight):
            mine = waiting[entity]
            turn = self._turn.get((slot, entity), 0) % len(mine)
            out.append((entity, mine[turn:] + mine[:turn]))
        return out

    def nice_of(self, job_id: int) -> int | None:
        """The OS priority for a worker process running a packet of ``job_id``: nice 20 - its
        session's level (P̄ mapped to [1, levels]); None when resource scheduling is off."""
        if not self.on or job_id not in self.owner:
            return None
        if self._stale:
            self._relevel()
        return self._nice.get(self._entity.get(job_id, job_id))

    def served(self, slot: int, entity: Hashable) -> None:
        self._shares.served(slot, entity)
        self._turn[(slot, entity)] = self._turn.get((slot, entity), 0) + 1

    def expected_cost(self, job_id: int, events: int, prior_s: float) -> float:
        """What a packet of ``events`` of ``job_id`` should cost: ``events`` x the job's
        measured cost per event (its packets back so far), or ``prior_s`` (the engine's
        estimate) before any is back."""
        cost, n = self._measured.get(job_id, (0.0, 0))
        return events * cost / n if n > 0 else prior_s

    def assigned(self, job_id: int, slot: int, events: int, prior_s: float, now: float) -> None:
        """A packet of ``events`` of ``job_id`` went to ``slot``: its session is charged the
        expected cost now (usage counts work as it is handed out, not only once back), and
        :meth:`used` corrects it when the packet returns."""
        owner = self.owner.get(job_id)
        self.withdraw(slot, now)
        if owner is None:
            return
        cost = self.expected_cost(job_id, events, prior_s)
        self.usage.add(owner[0], owner[1], cost, now)
        self._pending[slot] = (owner[0], owner[1], cost, now)

    def withdraw(self, slot: int, now: float) -> None:
        """Take back what is left of the provisional charge of ``slot``'s packet (it
        returned, or will never be reported: its node was lost, its job is gone)."""
        pending = self._pending.pop(slot, None)
        if pending is not None:
            group, user, cost, since = pending
            self.usage.add(group, user, -self.usage.left_of(cost, since, now), now)

    def used(
        self,
        job_id: int,
        slot: int,
        seconds: float,
        now: float,
        events: int = 0,
        cpu_s: float | None = None,
    ) -> None:
        """A packet of ``job_id`` (``events`` processed) took ``slot`` for ``seconds``, and
        ``cpu_s`` of CPU where the engine measured it: its cost is the CPU time, else the
        slot time. The provisional charge is replaced by it (usage is then what charging on
        return alone would give), and the slot's account of who is behind takes it."""
        self.withdraw(slot, now)
        owner = self.owner.get(job_id)
        if owner is None:
            return
        cost = seconds if cpu_s is None else cpu_s
        self.usage.add(owner[0], owner[1], cost, now)
        if events > 0:
            total, n = self._measured.get(job_id, (0.0, 0))
            self._measured[job_id] = (total + cost, n + events)
        if not self.on:
            return
        entity = self._entity.get(job_id, job_id)
        self._shares.used(slot, entity, cost, self._weight.get(entity, 1.0))
        if self._quota is not None:
            active = sorted({g for g, _ in self.owner.values()})
            if self._quota.update(self.usage, active, now):
                self._stale = True

    def _relevel(self) -> None:
        """Each session's level, nice value and CPU weight, from its group's P̄ divided by
        the sessions its user has. With ``round_robin``, the sessions of a group too low for
        a level of their own (more than the levels would be needed) become one entity with
        their summed priority, whose sessions take turns: the paper's fallback."""
        self._stale = False
        pbar = normalised_priorities(self.priorities(), self.active_users())
        sessions: dict[tuple[str, str], int] = {}
        for owner in self.owner.values():
            sessions[owner] = sessions.get(owner, 0) + 1
        share: dict[Hashable, float] = {
            j: pbar[g] / sessions[(g, u)] for j, (g, u) in self.owner.items()
        }
        largest = max(share.values(), default=1.0)
        self._entity = {job_id: job_id for job_id in self.owner}
        if self._round_robin:
            for job_id, (group, _) in self.owner.items():
                if clipped(share[job_id], largest, 1, self._levels):
                    turns = ("turns", group)
                    share[turns] = share.get(turns, 0.0) + share.pop(job_id)
                    self._entity[job_id] = turns
        levels = priority_levels(share, 1, self._levels)
        self._nice = {e: nice_value(lv) for e, lv in levels.items()}
        self._weight = {e: cpu_weight(n, self._kernel) for e, n in self._nice.items()}
