"""PROOF's resource scheduling by group priority (ganis et al. §3): the normalised priority of
a session, its nice value, the number of workers the central scheduler gives a query, usage
history with decay, the priorities that steer usage towards target quotas, and how a slot
shared by several sessions serves them (:mod:`datasched.policies.proof.sessions`).

Pure arithmetic and bookkeeping; :mod:`datasched.policies.proof.policy` applies it. Where the paper
leaves a rule open (how ALICE's daemon turned usage into priorities) the choice is said here.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from datasched.core.policy import Param, ParamError

__all__ = [
    "GROUP_PARAMS",
    "KERNELS",
    "QuotaPriorities",
    "UsageHistory",
    "clipped",
    "cpu_weight",
    "nice_value",
    "normalised_priorities",
    "parse_groups",
    "priority_levels",
    "workers_for_query",
]

K = TypeVar("K", bound=Hashable)

KERNELS = ("o1", "cfs")
"""How a kernel turns nice values into CPU: ``o1``, Linux's scheduler when the paper was
written (time slices of 5 ms x (20 - nice) for nice >= 0 and 20 ms x (20 - nice) below:
CPU in proportion to the level, with a step at nice 0); ``cfs``, today's (weights
1024 / 1.25 ** nice: each level about 10 % more CPU than the next)."""


GROUP_PARAMS: tuple[Param, ...] = (
    Param(
        "priorities",
        str,
        "",
        "group priorities, GROUP=P,... (static; a job's group is its owner's); empty: no "
        "resource scheduling, every job gets every slot",
        option=False,
    ),
    Param(
        "quotas",
        str,
        "",
        "target CPU shares, GROUP=PERCENT,...: priorities then follow decayed usage",
        option=False,
    ),
    Param("worker_fraction", float, 0.5, "f of N = N_free x f x P̄ + N_min", low=0, option=False),
    Param("min_workers", int, 1, "N_min: workers every query gets", low=0, option=False),
    Param("levels", int, 40, "priority levels (nice 20 - level)", low=2, high=40, option=False),
    Param(
        "round_robin",
        bool,
        True,
        "sessions too low for a level of their own take turns per group",
        option=False,
    ),
    Param(
        "kernel",
        str,
        "o1",
        "how nice values share a CPU: o1 (the paper's Linux, CPU in proportion to the level) "
        "or cfs (today's, 1.25x a level)",
        choices=KERNELS,
        option=False,
    ),
    Param(
        "usage_half_life_s",
        float,
        3600.0,
        "half-life of the usage history behind quota priorities",
        low=0,
        low_open=True,
        unit="seconds",
        option=False,
    ),
    Param(
        "quota_period_s",
        float,
        300.0,
        "how often quota priorities are recomputed",
        low=0,
        low_open=True,
        unit="seconds",
        option=False,
    ),
    Param(
        "os_nice",
        bool,
        False,
        "also compute each packet at its session's nice value on the worker (the paper's OS "
        "priority, where the OS allows it); off: the slots' order by CPU weight applies the "
        "priority alone (on, it is applied twice)",
        option=False,
    ),
)
"""The parameters of resource scheduling, which both packetizer policies take."""


def parse_groups(text: str, what: str) -> dict[str, float]:
    """``"alice=10,beta=20"`` -> ``{"alice": 10.0, "beta": 20.0}``; ParamError naming
    ``what`` (a policy parameter) on a bad entry."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = part.partition("=")
        name = name.strip()
        try:
            number = float(value) if eq else float("nan")
        except ValueError:
            number = float("nan")
        if not name or not math.isfinite(number) or number <= 0:
            raise ParamError("", what, f"expected GROUP=POSITIVE_NUMBER, got {part!r}")
        if name in out:
            raise ParamError("", what, f"group {name!r} is given twice")
        out[name] = number
    return out


def normalised_priorities(
    priority: Mapping[str, float], active_users: Mapping[str, int]
) -> dict[str, float]:
    """The paper's §3.1: for each active group j (one with processing sessions, the keys of
    ``active_users``), P̄_j = P_j / (mean P of the active groups) / (active users in j).

    A group without a declared priority counts as priority 1."""
    active = [g for g, n in active_users.items() if n > 0]
    if not active:
        return {}
    mean = sum(priority.get(g, 1.0) for g in active) / len(active)
    return {g: priority.get(g, 1.0) / mean / active_users[g] for g in active}


def priority_levels(shares: Mapping[K, float], low: int = 1, high: int = 40) -> dict[K, int]:
    """The sessions' normalised priorities mapped into the integer levels [``low``,
    ``high``] (the paper: [1, 40], UNIX's range): the largest gets ``high``, every other
    ``floor(share / largest x (high - low)) + low`` (ROOT's ``XrdProofdPriorityMgr``)."""
    if not shares:
        return {}
    largest = max(shares.values())
    # Ratios a hair under a whole level (a tenth added up ten times) count as reaching it.
    return {
        key: min(math.floor(share / largest * (high - low) + _EPS) + low, high)
        for key, share in shares.items()
    }


_EPS = 1e-9


def clipped(share: float, largest: float, low: int = 1, high: int = 40) -> bool:
    """Whether a session's priority is too small for its own level: it shares the lowest
    one with everything below it (the paper: more than 40 levels would be needed)."""
    return share / largest * (high - low) + _EPS < 1.0


def nice_value(level: int) -> int:
    """The paper's nice value of a priority level: 20 - level (level 40: nice -20)."""
    return 20 - level


def cpu_weight(nice: int, kernel: str = "o1") -> float:
    """How much CPU a process of that nice value gets beside others under ``kernel``."""
    if kernel == "cfs":
        return 1024.0 / 1.25**nice
    return 20.0 * (20 - nice) if nice < 0 else 5.0 * (20 - nice)


def workers_for_query(n_free: int, fraction: float, pbar: float, n_min: int, n_slots: int) -> int:
    """The central scheduler's §3.2: N = N_free x f x P̄_j + N_min workers for a query
    (rounded down, at least one, at most every slot)."""
    n = math.floor(n_free * fraction * pbar) + n_min
    return min(max(n, 1), n_slots)


@dataclass(slots=True)
class UsageHistory:
    """CPU seconds used per group and per (group, user), decaying with ``half_life_s``
    (older use counts less: a quota is met over the recent past, not since the start)."""

    half_life_s: float
    groups: dict[str, float] = field(default_factory=dict)
    users: dict[tuple[str, str], float] = field(default_factory=dict)
    stamp: float = 0.0

    def _decay(self, now: float) -> None:
        if now <= self.stamp:
            return
        factor = 0.5 ** ((now - self.stamp) / self.half_life_s)
        for g in self.groups:
            self.groups[g] *= factor
        for u in self.users:
            self.users[u] *= factor
        self.stamp = now

    def add(self, group: str, user: str, cpu_s: float, now: float) -> None:
        """Charge ``cpu_s`` (negative: take back part of an earlier charge; usage never
        falls below 0)."""
        self._decay(now)
        self.groups[group] = max(self.groups.get(group, 0.0) + cpu_s, 0.0)
        self.users[(group, user)] = max(self.users.get((group, user), 0.0) + cpu_s, 0.0)

    def left_of(self, amount: float, since: float, now: float) -> float:
        """What is left now of ``amount`` charged at ``since`` (decayed in between)."""
        return amount * math.pow(0.5, max(now - since, 0.0) / self.half_life_s)

    def shares(self, now: float) -> dict[str, float]:
        """Each group's fraction of the decayed usage (empty before any use)."""
        self._decay(now)
        total = sum(self.groups.values())
        if total <= 0:
            return {}
        return {g: u / total for g, u in self.groups.items()}


@dataclass(slots=True)
class QuotaPriorities:
    """Group priorities that steer CPU use towards target shares (the daemon of §3.3, whose
    rule the paper does not give).

    Ours has two parts. Feed-forward: the priorities that would give every group its target
    if each session could always run on every worker: a session of group g should weigh
    ``target_g / active users_g``; the level whose CPU weight (under ``kernel``) comes
    nearest to that, relative to the heaviest session at the top level, is its level, and
    its priority the one that :func:`priority_levels` maps to it. Feedback: every
    ``period_s`` each active group's wanted weight is corrected by (target / decayed usage
    share) ** ``gain`` (a step of at most 25 %), which takes up what the model leaves out
    (sessions that cannot run everywhere, levels being whole numbers: a group between two
    levels alternates). A slow integral, so it does not oscillate against the usage
    history's memory."""

    targets: dict[str, float]
    period_s: float = 300.0
    gain: float = 0.1
    levels: int = 40
    kernel: str = "o1"
    correction: dict[str, float] = field(default_factory=dict)
    next_s: float = 0.0

    def __post_init__(self) -> None:
        total = sum(self.targets.values())
        self.targets = {g: t / total for g, t in self.targets.items()}

    def priorities(self, active_users: Mapping[str, int]) -> dict[str, float]:
        """The priority of each group with active users (the keys of ``active_users``)."""
        groups = [g for g, n in active_users.items() if n > 0]
        if not groups:
            return {}
        least = min(self.targets.values())
        want = {
            g: self.targets.get(g, least) * self.correction.get(g, 1.0) / active_users[g]
            for g in groups
        }
        top = max(want.values())
        scale = [
            math.log(cpu_weight(nice_value(level), self.kernel))
            for level in range(1, self.levels + 1)
        ]
        out = {}
        for g in groups:
            goal = scale[-1] - math.log(top / want[g])
            level = 1 + min(range(self.levels), key=lambda i: abs(scale[i] - goal))
            fraction = 1.0 if level >= self.levels else (level - 1 + 0.5) / (self.levels - 1)
            out[g] = fraction * active_users[g]
        return out

    def update(self, usage: UsageHistory, active: Sequence[str], now: float) -> bool:
        """Correct the wanted weights if a period has passed; True when they changed."""
        if now < self.next_s:
            return False
        self.next_s = now + self.period_s
        shares = usage.shares(now)
        groups = [g for g in active if g in self.targets]
        if not shares or len(groups) < 2:
            return False
        wanted = sum(self.targets[g] for g in groups)
        used = sum(shares.get(g, 0.0) for g in groups)
        for g in groups:
            # Renormalised over the active groups: an idle group's share is nobody's debt.
            target = self.targets[g] / wanted
            got = max(shares.get(g, 0.0) / used if used > 0 else 0.0, 1e-3)
            step = min(max((target / got) ** self.gain, 0.8), 1.25)
            self.correction[g] = min(max(self.correction.get(g, 1.0) * step, 0.01), 100.0)
        return True
