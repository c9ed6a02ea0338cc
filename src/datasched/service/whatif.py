"""Predictions from the live cluster: each job's and request's finish time (ETA) under a
policy, by the simulator run from the daemon's snapshot; and what-if across policies.

The snapshot (:class:`~datasched.service.contracts.ClusterSnapshot`) becomes what the
runtime would build: a file-grained data space of the jobs' files, a topology of the nodes
(their slots and cache sizes), the caches holding what the nodes hold now, and costs from
the measured rates. The scheduling core is built under the policy asked, and the simulated
engine (:class:`~datasched.sim.engine.SimEngine`) runs what is left of every job from "now"
(time 0 is the snapshot's time): every job queued or running arrives at once, running ones
first, then by submission. Deterministic: the same snapshot and policy give the same answer.

How the measured rates (per slot) become the core's cost model:

* **cached**: a job's CPU time per event is its own measured one, else the inverse of the
  nodes' mean cached rate (reads from the local cache are taken as free beside it);
* **peer**: the node's network rate is set so that a read from a peer's cache goes at the
  measured peer rate (at the mean event size): what it takes beyond the node's own cached
  rate (the nodes' mean where it measured none);
* **tertiary**: the node's fetch rate from central storage is the measured bytes per
  second, else the one its tertiary events per second imply (beyond its own cached rate,
  likewise), else the nodes' mean.

A node not measured yet takes the mean of those that were, else the defaults below. The
core's cost model has one CPU time per event per job, not per node: nodes of different
speeds are averaged.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Any

from datasched.core.data import CacheGrain, DataSpace, FileSpec
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Node, Pipelining, Topology
from datasched.core.params import ParamError
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy, get_policy
from datasched.sandbox.confine import KEEP
from datasched.service.contracts import (
    ClusterSnapshot,
    FileTodo,
    JobSnapshot,
    NodeSnapshot,
    SnapshotError,
)
from datasched.sim.engine import SimEngine

__all__ = [
    "DEFAULT_CPU_S_PER_EVENT",
    "DEFAULT_TERTIARY_BYTES_PER_S",
    "Admission",
    "BudgetSpent",
    "Comparison",
    "ParamsError",
    "Prediction",
    "compare",
    "params_from_text",
    "predict",
    "under_way_s",
]

DEFAULT_CPU_S_PER_EVENT = 1e-4
"""CPU seconds per event when nothing was measured (the runtime's own guess)."""
DEFAULT_TERTIARY_BYTES_PER_S = 200e6
"""Fetch rate from central storage when nothing was measured (the runtime's)."""
DEFAULT_NETWORK_BYTES_PER_S = 125e6
"""A node's network when its peer rate was not measured (a Gigabit link)."""
_FREE = 1e15
"""A rate so high that its time vanishes beside the others (bytes per second)."""
STEPS = 2000
"""Engine steps between two looks at the clock when a prediction has a deadline (a step is
a few to a hundred microseconds: a look every few milliseconds to tenths of a second)."""


class BudgetSpent(RuntimeError):
    """A prediction ran past its deadline (:func:`predict`'s ``deadline``, :func:`compare`'s
    ``budget_s``): ``policy`` is the one being simulated then, ``budget_s`` the time given
    (None where the caller gave a deadline, not a budget)."""

    def __init__(self, policy: str, budget_s: float | None = None) -> None:
        self.policy, self.budget_s = policy, budget_s
        given = "its deadline" if budget_s is None else f"its limit of {budget_s:g} s"
        super().__init__(f"the simulation under {policy!r} ran past {given}")


@dataclass(frozen=True, slots=True)
class Prediction:
    """What the simulator predicts under ``policy``: each job's and request's finish, in
    seconds from the snapshot's time (None: the job fails in the simulation), and when the
    last job ends."""

    policy: str
    time_s: float
    """The snapshot's time: add it to an ETA for a finish on the daemon's clock."""
    makespan_s: float
    jobs: dict[str, float | None]
    requests: dict[str, float | None]
    simulate_s: float = field(default=0.0, compare=False)
    """Wall-clock seconds the prediction took."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "time_s": self.time_s,
            "makespan_s": self.makespan_s,
            "jobs": dict(self.jobs),
            "requests": dict(self.requests),
        }


@dataclass(frozen=True, slots=True)
class Admission:
    """The daemon's queue in front of the runner: the runner holds at most ``max_held``
    jobs (those running and those queued in its core), and the dispatcher hands the
    ``pending`` ones over in this order (fair share: ``Dispatcher.admission``) as room
    opens. The runtime's core chooses only among the jobs it holds, so a prediction whose
    core saw the whole queue at once would run them in another order (out-of-order takes
    whatever its caches hold first) and predict some requests far too early or too late."""

    pending: tuple[str, ...]
    max_held: int

    def __post_init__(self) -> None:
        if self.max_held < 1:
            raise SnapshotError("max_held", f"must be at least 1, got {self.max_held!r}")

    def arrange(self, ordered: Sequence[JobSnapshot]) -> list[JobSnapshot]:
        """``ordered`` (running first, then by submission) with the pending jobs moved to
        the end in the dispatcher's order. A job not named pending is held by the runner
        (one the dispatcher handed over after the snapshot was taken is held by now)."""
        rank = {job_id: i for i, job_id in enumerate(self.pending)}
        held = [j for j in ordered if j.id not in rank]
        waiting = sorted((j for j in ordered if j.id in rank), key=lambda j: rank[j.id])
        return held + waiting

    def split(self, ids: Sequence[str]) -> tuple[int, bool]:
        """Of the jobs ``ids`` (arranged), how many are in the core from the start: those
        held, then pending ones while the runner has room; and whether any waits."""
        pending = set(self.pending)
        held = sum(1 for i in ids if i not in pending)
        first = min(len(ids), max(held, self.max_held))
        return first, first < len(ids)


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _node_model(
    snapshot: ClusterSnapshot, bytes_per_event: float, rate_factor: float = 1.0
) -> tuple[tuple[Node, ...], float]:
    """The nodes of the topology and the default CPU time per event (every rate, measured
    or default, times ``rate_factor``)."""
    rates = [n.rates for n in snapshot.nodes]
    cached = _mean([r.cached_events_per_s for r in rates])
    cpu = (1.0 / cached if cached else DEFAULT_CPU_S_PER_EVENT) / rate_factor

    def own_s(n: NodeSnapshot) -> float:
        """The node's own seconds per event from its cache (the nodes' mean where it
        measured none), at the measured rates: what a read from elsewhere costs more is
        measured against it, so that a node slower than the mean does not pay its slowness
        again as a fetch (docs/service-whatif.md)."""
        r = n.rates.cached_events_per_s or cached
        return 1.0 / r if r else DEFAULT_CPU_S_PER_EVENT

    def tertiary_bps(n: NodeSnapshot) -> float | None:
        r = n.rates
        if r.tertiary_bytes_per_s is not None:
            return r.tertiary_bytes_per_s
        if r.tertiary_events_per_s is not None and bytes_per_event > 0:
            extra = 1.0 / r.tertiary_events_per_s - own_s(n)
            return bytes_per_event / extra if extra > 0 else _FREE
        return None

    mean_tertiary = _mean([tertiary_bps(n) for n in snapshot.nodes])
    peer = _mean([r.peer_events_per_s for r in rates])
    nodes = []
    for i, n in enumerate(snapshot.nodes):
        peer_rate = n.rates.peer_events_per_s or peer
        network = DEFAULT_NETWORK_BYTES_PER_S
        if peer_rate is not None and bytes_per_event > 0:
            extra = 1.0 / peer_rate - own_s(n)
            network = bytes_per_event / extra if extra > 0 else _FREE
        tertiary = tertiary_bps(n) or mean_tertiary or DEFAULT_TERTIARY_BYTES_PER_S
        nodes.append(
            Node(
                node_id=i,
                cache_bytes=n.cache_bytes,
                slots=n.slots,
                tertiary_bytes_per_s=min(tertiary * rate_factor, _FREE),
                network_bytes_per_s=min(network * rate_factor, _FREE),
            )
        )
    return tuple(nodes), cpu


def _order(snapshot: ClusterSnapshot) -> list[JobSnapshot]:
    """Running jobs first, then queued ones by submission (ties: by id)."""
    return sorted(snapshot.jobs, key=lambda j: (j.node is None, j.submitted_s, j.id))


def _space(jobs: Sequence[JobSnapshot]) -> tuple[DataSpace, dict[str, int]]:
    space = DataSpace(CacheGrain.FILE)
    index: dict[str, int] = {}
    for j in jobs:
        for f in j.files:
            if f.url not in index:
                index[f.url] = space.add_file(FileSpec(f.url, f.n_events, f.n_bytes))
    return space, index


def _job_data(space: DataSpace, index: Mapping[str, int], job: JobSnapshot) -> IntervalSet:
    ranges: list[tuple[int, int]] = []
    for f in job.files:
        base = space.files[index[f.url]].start
        todo = ((0, f.n_events),) if f.todo is None else f.todo
        ranges.extend((base + a, base + b) for a, b in todo if b > a)
    return IntervalSet(ranges)


def under_way_s(
    job: JobSnapshot, rate_factor: float = 1.0, holders: Mapping[str, Set[str]] | None = None
) -> float | None:
    """At most when a running job ends: its events left at its own time per event (None:
    not running, not priced yet, or a file of it will wait for another node).

    A running job's time per event is priced from its node's runs, what is left of its
    files begun and of its sandbox's start there included (:mod:`datasched.service.live`).
    Its files begun (a packet stored) and under way (packets out) run at that pace where
    they are, and a file not begun stays with its subjob on its node, unless other nodes
    cache it and its node does not (``holders``: the nodes caching each file): out-of-order
    then sends it to one of those when a slot frees there, a wait the simulation prices.
    The simulated core starts from scratch at the snapshot: it hands every job to a slot
    anew, one job a slot at a time and in its policy's order, so without this bound a
    running job waits behind the jobs the runner holds on its node (its packets run side by
    side with theirs), or its last file goes to a node its user has not run on and pays a
    sandbox's start there (docs/service-whatif.md, "A running job's rest"). The other jobs
    running on its node are not added: their rests often run on other nodes by then, and
    over eleven runs of the ETA benchmark adding them side by side made the last ETA later
    (a median of +0.11 of the time left, against -0.04) and no closer."""
    if job.node is None or job.cpu_s_per_event is None:
        return None
    left = 0
    for f in job.files:
        n = _left(f)
        if n <= 0:
            continue
        left += n
        begun = f.under_way or (f.todo is not None and n < f.n_events)
        where = (holders or {}).get(f.url, ())
        if not begun and where and job.node not in where:
            return None
    return left * job.cpu_s_per_event / rate_factor if left > 0 else None


def _left(f: FileTodo) -> int:
    return f.n_events if f.todo is None else sum(b - a for a, b in f.todo)


def predict(
    snapshot: ClusterSnapshot,
    policy: str,
    policy_params: Mapping[str, Any] | None = None,
    *,
    rate_factor: float = 1.0,
    admission: Admission | None = None,
    master_s_per_packet: float = 0.0,
    deadline: float | None = None,
) -> Prediction:
    """The finish of every job and request of ``snapshot`` under ``policy`` (built from its
    declared ``policy_params``), predicted by the simulator, with every rate (measured or
    default) times ``rate_factor`` (the ETAs' intervals simulate the rates' spread).

    ``master_s_per_packet``: the daemon's time a packet, as the simulator's master queue
    (the ETAs priced per packet, :mod:`datasched.service.packet_pace`; the rates are then
    the packets' CPU, and a running job's rest is not priced on its own: its packets'
    round trips are in the queue). 0: no queue.

    ``admission``: the daemon's queue in front of the runner (:class:`Admission`); the jobs
    it names reach the simulated core in its order, one as each job ends, as the dispatcher
    hands them over, and every other job is in the core from the start. None: every job is
    in the core from the start (what-if across policies).

    ``deadline``: a :func:`time.monotonic` time past which the simulation is given up
    (:class:`BudgetSpent`); a what-if's parameters are the caller's, and some make a queue's
    simulation take minutes (packets of one event). None: no deadline.

    Raises :class:`~datasched.service.contracts.SnapshotError` for an inconsistent snapshot,
    :class:`BudgetSpent` past ``deadline``, and the registry's errors for an unknown policy
    or a bad parameter."""
    import time

    started = time.perf_counter()
    snapshot.check()  # every node has a slot, among the rest
    ordered = _order(snapshot)
    space, index = _space(ordered)
    if not rate_factor > 0:
        raise SnapshotError("rate_factor", f"must be positive, got {rate_factor!r}")
    nodes, cpu = _node_model(snapshot, space.bytes_per_event, rate_factor)
    built = build_policy(policy, **dict(policy_params or {}))
    cost = CostModel(
        cpu_s_per_event=cpu,
        disk_bytes_per_s=_FREE,
        pipelining=Pipelining.TERTIARY,
        master_s_per_packet=master_s_per_packet / rate_factor,
        user_setup_s=(snapshot.user_setup_s or 0.0) / rate_factor,
        user_sandboxes_kept=KEEP,
    )
    sched = Scheduler(Topology(nodes=nodes), space, built, cost=cost)
    warm: dict[int, IntervalSet] = {}
    for i, n in enumerate(snapshot.nodes):
        held = space.events_of(n.cached)
        if held:
            warm[i] = held
    jobs: list[Job] = []
    ids: list[str] = []
    eta: dict[str, float | None] = {}
    if admission is not None:
        ordered = admission.arrange(ordered)
    for j in ordered:
        data = _job_data(space, index, j)
        if not data:
            eta[j.id] = 0.0  # nothing left: it ends as soon as its last packet is in
            continue
        jobs.append(
            Job(
                len(jobs),
                0.0,
                data,
                user=j.user or "user",
                group=j.group or "default",
                priority=j.priority,
                cpu_s_per_event=(
                    None if j.cpu_s_per_event is None else j.cpu_s_per_event / rate_factor
                ),
            )
        )
        ids.append(j.id)
    ready = {i: n.warm_users for i, n in enumerate(snapshot.nodes) if n.warm_users}
    engine = SimEngine(sched, warm=warm, warm_users=ready)
    if admission is None:
        engine.begin(jobs)
    else:
        first, rest = admission.split([ids[job.job_id] for job in jobs])
        waiting = iter(jobs[first:])

        def hand_over(_: Job, now: float) -> Job | None:
            """The next job the dispatcher hands over as one ends."""
            nxt = next(waiting, None)
            return None if nxt is None else replace(nxt, submit_s=now)

        engine.begin(jobs[:first], follow_up=hand_over if rest else None)
    if deadline is None:
        engine.proceed()
    else:
        while not engine.proceed(max_steps=STEPS):
            if time.monotonic() > deadline:
                raise BudgetSpent(policy)
    run = engine.close()
    for rec in run.jobs:
        eta[ids[rec.job_id]] = None if rec.failed or rec.end_s < 0 else rec.end_s
    for job_id in ids:
        eta.setdefault(job_id, None)  # never handed over: a failed job's room was lost
    if not master_s_per_packet:  # priced per packet, the rest's round trips are queued
        holders: dict[str, set[str]] = {}
        for n in snapshot.nodes:
            for url in n.cached:
                holders.setdefault(url, set()).add(n.name)
        for j in ordered:
            own = under_way_s(j, rate_factor, holders)
            got = eta.get(j.id)
            if own is not None and got is not None:
                eta[j.id] = min(got, own)
    requests: dict[str, float | None] = {}
    for j in snapshot.jobs:
        mine, known = eta[j.id], requests.get(j.request_id, 0.0)
        requests[j.request_id] = None if mine is None or known is None else max(mine, known)
    makespan = max((v for v in eta.values() if v is not None), default=0.0)
    return Prediction(
        policy=policy,
        time_s=snapshot.time_s,
        makespan_s=makespan,
        jobs={j.id: eta[j.id] for j in snapshot.jobs},
        requests=requests,
        simulate_s=time.perf_counter() - started,
    )


@dataclass(frozen=True, slots=True)
class Comparison:
    """What-if: the same snapshot predicted under several policies."""

    predictions: tuple[Prediction, ...]

    @property
    def policies(self) -> list[str]:
        return [p.policy for p in self.predictions]

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``datasched whatif --json`` and of ``GET /api/v1/whatif``."""
        first = self.predictions[0] if self.predictions else None
        requests = list(first.requests) if first else []
        jobs = list(first.jobs) if first else []
        return {
            "time_s": first.time_s if first else None,
            "policies": self.policies,
            "makespan_s": {p.policy: p.makespan_s for p in self.predictions},
            "requests": [
                {"request": r, "eta_s": {p.policy: p.requests[r] for p in self.predictions}}
                for r in requests
            ],
            "jobs": [
                {"job": j, "eta_s": {p.policy: p.jobs[j] for p in self.predictions}} for j in jobs
            ],
        }


def compare(
    snapshot: ClusterSnapshot,
    policies: Sequence[str],
    policy_params: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    budget_s: float | None = None,
) -> Comparison:
    """:func:`predict` under each of ``policies`` (``policy_params``: by policy name), all
    of them within ``budget_s`` seconds of the wall clock (None: no limit), else
    :class:`BudgetSpent` naming the policy under way when the time ran out."""
    import time

    params = policy_params or {}
    deadline = None if budget_s is None else time.monotonic() + budget_s
    out = []
    for p in policies:
        try:
            out.append(predict(snapshot, p, params.get(p), deadline=deadline))
        except BudgetSpent as exc:
            raise BudgetSpent(p, budget_s) from exc
    return Comparison(tuple(out))


class ParamsError(ValueError):
    """A what-if's policy parameter (``-P NAME=VALUE``, the API's ``param``) refused:
    ``name`` is the parameter as given (or the whole item where it has none), ``reason``
    says why."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


def params_from_text(
    policies: Sequence[str], items: Sequence[str], *, files: bool
) -> dict[str, dict[str, Any]]:
    """Policy parameters given as ``NAME=VALUE`` for a what-if across ``policies``: each goes
    to every policy that declares it (as ``datasched sweep`` does), parsed and checked by its
    declaration, and each policy is built once to check the rules across its parameters.
    ``files``: whether a parameter whose value names a file (a performance map) may be read;
    the daemon passes False, for a what-if must not make it read a path of the caller's
    choosing. Raises :class:`ParamsError`; an unknown policy raises the registry's error."""
    declared = {p: {q.name: q for q in get_policy(p).params} for p in dict.fromkeys(policies)}
    out: dict[str, dict[str, Any]] = {p: {} for p in declared}
    seen: set[str] = set()
    for item in items:
        raw, sep, text = item.partition("=")
        name = raw.strip().replace("-", "_")
        if not sep or not name:
            raise ParamsError(item.strip() or repr(item), "expected NAME=VALUE")
        if name in seen:
            raise ParamsError(name, "given twice (give it once)")
        seen.add(name)
        takers = [p for p, params in declared.items() if name in params]
        if not takers:
            raise ParamsError(
                name, f"none of the policies ({', '.join(declared)}) takes such a parameter"
            )
        for policy in takers:
            param = declared[policy][name]
            off = param.none_ok and text.strip().lower() in ("none", "off", "null")
            if param.parse is not None and not files and not off:
                raise ParamsError(name, "names a file on the server, which a what-if does not read")
            try:
                out[policy][name] = param.from_text(policy, text)
            except ParamError as exc:
                raise ParamsError(name, exc.reason) from None
    for policy, params in out.items():
        if params:
            try:
                build_policy(policy, **params)
            except ParamError as exc:
                raise ParamsError(exc.param, exc.reason) from None
    return {p: params for p, params in out.items() if params}
