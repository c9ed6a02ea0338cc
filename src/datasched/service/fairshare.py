"""Fair-share admission: which pending elementary job the daemon hands to the runner next.

The rule (batch systems' fair share, as HTCondor's; PROOF §3's priorities from decayed usage
towards target quotas):

* each group's **weight** is ``quota x priority`` (its target share, relative to the other
  groups with work; with equal or unset quotas the priorities are the weights);
* each group's **usage** is the CPU seconds of its packets done, decaying with a half-life
  (older use counts less), plus the **committed** CPU of the jobs it has in the runner now
  (their events not yet done, at the group's measured CPU seconds per event): what it has
  used and what it is already promised;
* when the runner has room, the next job is the oldest pending job of the group with the
  least usage per weight, among the groups with pending work only (work-conserving: a group
  with nothing to run blocks nobody, and its target is shared out among the others); ties go
  to the higher weight, then the name;
* within a group, users take turns (round robin over the users with pending work, by name);
  within a user, oldest request first, then job order.

Pure bookkeeping: the store's queries are in :mod:`datasched.service.daemon`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from datasched.policies.proof.groups import UsageHistory

__all__ = ["FairShare", "GroupTurn", "cluster_slots", "targets"]


def cluster_slots(cluster: Mapping[str, object]) -> int:
    """The slots of a runner's cluster view (each node's ``slots_total``, else its ``slots``:
    a number, or the list of its slots); 0 when it says none."""
    total = 0
    nodes = cluster.get("nodes") or []
    if not isinstance(nodes, Sequence):
        return 0
    for node in nodes:
        if not isinstance(node, Mapping):
            continue
        slots = node.get("slots_total", node.get("slots"))
        if isinstance(slots, bool):
            continue
        if isinstance(slots, int):
            total += max(slots, 0)
        elif isinstance(slots, Sequence) and not isinstance(slots, str):
            total += len(slots)
    return total


@dataclass(frozen=True, slots=True)
class GroupTurn:
    """A group with pending work, as one admission sees it: its ``weight`` (quota x
    priority), its users with pending work, and the events its jobs in the runner still
    have to do."""

    name: str
    weight: float
    users: tuple[str, ...]
    held_events: int = 0


@dataclass(slots=True)
class FairShare:
    """Decayed usage per group and the admission order built on it (see the module)."""

    half_life_s: float = 3600.0
    cpu: UsageHistory = field(init=False)
    events: UsageHistory = field(init=False)
    last_user: dict[str, str] = field(default_factory=dict)
    """Per group, the user served last (round robin)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.half_life_s) and self.half_life_s > 0):
            raise ValueError(f"half_life_s: expected a number > 0, got {self.half_life_s}")
        self.cpu = UsageHistory(self.half_life_s)
        self.events = UsageHistory(self.half_life_s)

    def add(self, group: str, user: str, cpu_s: float, n_events: int, now: float) -> None:
        """A packet done at ``now`` (seconds, any clock the caller keeps to)."""
        self.cpu.add(group, user, max(cpu_s, 0.0), now)
        self.events.add(group, user, float(max(n_events, 0)), now)

    def load(self, packets: Iterable[tuple[str, str, float, int, float]], now: float) -> None:
        """Usage from stored packets ``(group, user, cpu_s, n_events, done_at)``, each decayed
        from when it was done to ``now`` (a restarted daemon forgets nothing)."""
        for group, user, cpu_s, n_events, at in sorted(packets, key=lambda p: p[4]):
            self.add(group, user, cpu_s, n_events, min(at, now))
        self.cpu._decay(now)
        self.events._decay(now)

    def cpu_per_event(self, group: str) -> float:
        """The group's measured CPU seconds per event (decayed), else everyone's, else 1."""
        for cpu, events in (
            (self.cpu.groups.get(group, 0.0), self.events.groups.get(group, 0.0)),
            (sum(self.cpu.groups.values()), sum(self.events.groups.values())),
        ):
            if cpu > 0 and events > 0:
                return cpu / events
        return 1.0

    def usage(self, now: float) -> dict[str, float]:
        """Each group's decayed CPU seconds."""
        self.cpu._decay(now)
        return dict(self.cpu.groups)

    def achieved(self, now: float) -> dict[str, float]:
        """Each group's share of the decayed CPU used (empty before any use)."""
        return self.cpu.shares(now)

    def key(self, turn: GroupTurn, now: float) -> float:
        """Usage (decayed, plus committed) per weight: the lowest goes first."""
        used = self.usage(now).get(turn.name, 0.0)
        committed = turn.held_events * self.cpu_per_event(turn.name)
        if turn.weight <= 0:
            return math.inf
        return (used + committed) / turn.weight

    def pick_group(self, turns: Sequence[GroupTurn], now: float) -> GroupTurn:
        """The group whose job goes next (``turns``: the groups with pending work)."""
        if not turns:
            raise ValueError("turns: no group has pending work")
        return min(turns, key=lambda t: (self.key(t, now), -t.weight, t.name))

    def pick_user(self, group: str, users: Sequence[str]) -> str:
        """The group's next user in turn: the first by name after the one served last."""
        if not users:
            raise ValueError(f"users: group {group!r} has no user with pending work")
        ordered = sorted(users)
        last = self.last_user.get(group)
        user = next((u for u in ordered if last is None or u > last), ordered[0])
        self.last_user[group] = user
        return user


def targets(weights: Mapping[str, float]) -> dict[str, float]:
    """Target shares: the weights normalised (over the groups given)."""
    total = sum(w for w in weights.values() if w > 0)
    return {g: (w / total if total > 0 and w > 0 else 0.0) for g, w in weights.items()}
