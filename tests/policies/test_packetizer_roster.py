"""The packetizers' roster (every slot registered at once, a worker made when it first asks)
and the policy's index of the jobs with work give exactly what registering every worker one
by one and asking every job did: the same packets, in the same order, to the same slots,
with workers joining and leaving and nodes lost on the way. The references here are the
eager forms, kept small: the packetizer's own one-by-one registration, and the policy's
scans of every job as they were before the index (docs/performance.md)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusters import placed_space, servers_and_workers, space
from datasched.core.actions import Action, Assign
from datasched.core.events import Event, JobArrived, NodeJoined, NodeLost
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Topology
from datasched.core.policy import Policy, SchedulerView
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.policies.proof.packetizers import (
    AdaptivePacketizer,
    BasicPacketizer,
    Packetizer,
    Piece,
    Roster,
)
from datasched.policies.proof.policy import (
    AdaptivePacketizerPolicy,
    BasicPacketizerPolicy,
    ProofPolicy,
)
from datasched.sim.engine import SimEngine
from datasched.sim.faults import NodeFaults
from strategies import placements

FILE = 40
NODES = 5


# -- the packetizer: a roster against one-by-one registration ---------------------------------


def _locate(placement: list[int], lost: set[int]) -> Any:
    """File ``i`` (``FILE`` events from ``i * FILE``) on node ``placement[i]`` (4: central
    storage), or central storage once that node is lost."""

    def locate(start: int, stop: int) -> list[tuple[int, int, int | None]]:
        runs: list[tuple[int, int, int | None]] = []
        at = start
        while at < stop:
            i = at // FILE
            b = min((i + 1) * FILE, stop)
            node: int | None = placement[i % len(placement)]
            if node == NODES - 1 or node in lost:
                node = None
            runs.append((at, b, node))
            at = b
        return runs

    return locate


def _make(kind: str, limit: int | None, placement: list[int], lost: set[int]) -> Packetizer:
    n = len(placement) * FILE
    files = [(i, i * FILE, (i + 1) * FILE) for i in range(len(placement))]
    data = IntervalSet.range(3, n - 2)
    locate = _locate(placement, lost)
    if kind == "basic":
        return BasicPacketizer(data, files, locate, fraction=3, max_workers_per_node=limit)
    return AdaptivePacketizer(
        data, files, locate, calibration_events=5, min_packet_s=0.5, max_workers_per_node=limit
    )


def _slots(slots_per_node: int) -> dict[int, list[int]]:
    return {n: list(range(n * slots_per_node, (n + 1) * slots_per_node)) for n in range(NODES)}


def _perf(node: int) -> float:
    return [100.0, 50.0, 80.0, 100.0, 65.0][node]


def _state(pk: Packetizer, slots: list[int]) -> Any:
    """What a packetizer shows without making a worker: its counters and who may ask."""
    nodes = sorted(
        (k, fn.my, fn.ext, fn.run, fn.events, fn.processed, len(fn.active))
        for k, fn in pk.nodes.items()
    )
    asking = [(s, pk.has_worker(s), pk.may_ask(s), pk.may_ask(s, force=True)) for s in slots]
    extra = pk.events_on_remote if isinstance(pk, AdaptivePacketizer) else None
    return (
        nodes,
        asking,
        pk.n_workers,
        sorted(pk._perfs.items()),
        pk.best_perf(-1.0),
        pk.handed,
        pk.processed,
        pk.has_todo(),
        extra,
    )


def _workers(pk: Packetizer) -> Any:
    """Every worker as it stands (made now where it is not yet)."""
    out = []
    for slot in sorted(pk.workers):
        w = pk.workers[slot]
        out.append(
            (
                slot,
                w.host,
                None if w.home is None else w.home.key,
                None if w.local is None else w.local.key,
                w.perf,
                w.finished,
                w.processed,
                None if w.current_node is None else w.current_node.key,
            )
        )
    return out


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["ask", "ask", "ask", "done", "back", "lose", "move", "join", "revive"]),
        st.integers(0, 99),
        st.booleans(),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["basic", "adaptive"]),
    limit=st.sampled_from([None, 1, 2]),
    placement=placements(NODES),
    slots_per_node=st.integers(1, 3),
    ops=_OPS,
)
def test_a_roster_hands_out_what_workers_added_one_by_one_do(
    kind: str,
    limit: int | None,
    placement: list[int],
    slots_per_node: int,
    ops: list[tuple[str, int, bool]],
) -> None:
    """Two packetizers of one job, one given the cluster as a roster, the other every
    worker one by one: workers asking (forced or not), packets done or coming back, nodes
    lost (their workers removed, their pieces moved) and joining again (or registered twice,
    which replaces a worker), a node's pieces moving while its workers stay: the same
    packets every time, the same counters."""
    lost: set[int] = set()
    node_slots = _slots(slots_per_node)
    all_slots = [s for n in range(NODES) for s in node_slots[n]]
    lazy = _make(kind, limit, placement, lost)
    eager = _make(kind, limit, placement, lost)
    lazy.add_roster(Roster((s, n, _perf(n)) for n in range(NODES) for s in node_slots[n]))
    for n in range(NODES):
        for s in node_slots[n]:
            eager.add_worker(s, n, _perf(n))
    inflight: list[tuple[int, Piece, Piece, IntervalSet]] = []
    clock = 0.0
    for op, x, flag in ops:
        if op == "ask":
            slot = all_slots[x % len(all_slots)]
            if any(f[0] == slot for f in inflight) or not eager.has_worker(slot):
                continue
            got_lazy = lazy.next_packet(slot, force=flag)
            got_eager = eager.next_packet(slot, force=flag)
            assert (got_lazy is None) == (got_eager is None)
            if got_lazy is not None and got_eager is not None:
                assert got_lazy[0].file == got_eager[0].file
                assert got_lazy[0].span == got_eager[0].span
                assert got_lazy[1] == got_eager[1]
                inflight.append((slot, got_lazy[0], got_eager[0], got_lazy[1]))
        elif op in {"done", "back"} and inflight:
            slot, p_lazy, p_eager, packet = inflight.pop(x % len(inflight))
            if op == "done":
                clock += 1.0
                seconds = packet.length * (1 + slot % 3) / 10
                lazy.packet_done(slot, p_lazy, packet.length, seconds)
                eager.packet_done(slot, p_eager, packet.length, seconds)
            else:
                lazy.give_back(packet)
                eager.give_back(packet)
                lazy.revive()
                eager.revive()
        elif op == "lose":
            node = x % NODES
            if node in lost:
                continue
            lost.add(node)
            for slot in node_slots[node]:
                for i in [i for i, f in enumerate(inflight) if f[0] == slot][::-1]:
                    _, p_lazy, p_eager, packet = inflight.pop(i)
                    lazy.give_back(packet)
                    eager.give_back(packet)
                lazy.remove_worker(slot)
                eager.remove_worker(slot)
            lazy.relocate(node, _locate(placement, lost))
            eager.relocate(node, _locate(placement, lost))
        elif op == "move":
            # The node's pieces move (its disk is lost), its workers stay, detached.
            node = x % NODES
            lost.add(node)
            lazy.relocate(node, _locate(placement, lost))
            eager.relocate(node, _locate(placement, lost))
        elif op == "join":
            node = x % NODES
            if node not in lost and not flag:
                continue  # flag: registered again while there (replaced)
            lost.discard(node)
            for slot in node_slots[node]:
                lazy.add_worker(slot, node, _perf(node))
                eager.add_worker(slot, node, _perf(node))
        elif op == "revive":
            lazy.revive()
            eager.revive()
        assert _state(lazy, all_slots) == _state(eager, all_slots)
    assert _workers(lazy) == _workers(eager)


def test_a_roster_makes_only_the_workers_that_ask() -> None:
    """A job of two calibration packets on a cluster of 200 slots: two workers made, 200
    registered (the packet sizes count them all)."""
    pk = AdaptivePacketizer(
        IntervalSet.range(0, 10), [(0, 0, 10)], _locate([4], set()), calibration_events=5
    )
    pk.add_roster(Roster((s, s // 2, 100.0) for s in range(200)))
    assert pk.next_packet(7) is not None
    assert pk.next_packet(8) is not None
    assert not pk.has_todo()
    assert pk.n_workers == 200
    assert len(pk.workers) == 200
    assert pk.may_ask(9)
    made = [s for s in range(200) if pk.worker_made(s)]
    assert made == [7, 8]


def test_a_roster_is_taken_only_by_a_packetizer_without_workers() -> None:
    pk = _make("basic", None, [0], set())
    pk.add_worker(0, 0)
    with pytest.raises(ValueError, match="no worker"):
        pk.add_roster(Roster([(1, 0, 100.0)]))
    with pytest.raises(ValueError, match="twice"):
        Roster([(1, 0, 100.0), (1, 0, 100.0)])


# -- the policy: the index of jobs with work against asking every job ---------------------------


class _EagerProof(ProofPolicy):
    """The policy as it was before the roster and the index of jobs with work: every worker
    registered one by one, every job asked by every free slot."""

    def _add_workers(self, sched: SchedulerView, pk: Packetizer, job_id: int) -> None:
        for slot in self._workers_for(sched, job_id):
            self._add_worker(sched, pk, slot)

    def _try(self, sched: SchedulerView, slot: int, job_id: int, force: bool = False) -> bool:
        pk = self._jobs[job_id]
        w = pk.workers.get(slot)
        if w is None or (w.finished and not force) or not pk.has_todo():
            return False
        got = pk.next_packet(slot, force=force)
        if got is None:
            return False
        self._assign(sched, slot, job_id, *got)
        return True

    def _serve(self, sched: SchedulerView, slot: int) -> bool:
        for job_id in [j for j in self._jobs if j not in sched.jobs]:
            self._drop(job_id)
        if not self.groups.on:
            return any(self._try(sched, slot, job_id) for job_id in list(self._jobs))
        waiting = [
            job_id
            for job_id, pk in self._jobs.items()
            if (w := pk.workers.get(slot)) is not None and not w.finished and pk.has_todo()
        ]
        for entity, jobs in self.groups.order(slot, waiting):
            for job_id in jobs:
                if self._try(sched, slot, job_id):
                    self.groups.served(slot, entity)
                    return True
        return False

    def _offer_idle(self, sched: SchedulerView) -> None:
        for slot in list(sched.idle_slots):
            if not self.groups.on and not any(pk.has_todo() for pk in self._jobs.values()):
                break
            if sched.is_idle(slot):
                self._serve(sched, slot)

    def _unstick(self, sched: SchedulerView) -> None:
        if not sched.idle_slots:
            return
        for job_id, pk in list(self._jobs.items()):
            if self._running.get(job_id, 0) or not pk.has_todo() or job_id not in sched.jobs:
                continue
            pk.revive()
            if not pk.workers:
                for slot in self._workers_for(sched, job_id):
                    self._add_worker(sched, pk, slot)
            for slot in list(sched.idle_slots):
                if slot not in pk.workers:
                    continue
                if self._try(sched, slot, job_id):
                    break
                if self._try(sched, slot, job_id, force=True):
                    self.forced += 1
                    break


class _EagerBasic(_EagerProof, BasicPacketizerPolicy):
    pass


class _EagerAdaptive(_EagerProof, AdaptivePacketizerPolicy):
    pass


def _run(
    policy: Policy,
    topology: Topology,
    placement: list[int],
    jobs: list[tuple[float, int]],
    mtbf_s: float,
    seed: int,
) -> tuple[list[tuple[float, int, int, int, IntervalSet]], int, dict[str, int]]:
    data = placed_space(placement, FILE)
    cost = CostModel(cpu_s_per_event=0.1, disk_bytes_per_s=6e6, shared_disks=True)
    sched = Scheduler(topology, data, policy, cost=cost)
    log: list[tuple[float, int, int, int, IntervalSet]] = []
    handle = sched.handle

    def traced(event: Event) -> list[Action]:
        actions = handle(event)
        if isinstance(policy, ProofPolicy) and not isinstance(policy, _EagerProof):
            # The index of jobs with work is exact, in arrival order.
            todo = [j for j, pk in policy._jobs.items() if pk.has_todo()]
            assert list(policy._todo) == todo
            if not policy.groups.on:
                # Every query has every slot of the cluster as it is now (the roster kept
                # up to date as nodes come and go).
                live = sorted(s for n in sched.nodes for s in sched.node_slots[n])
                for pk in policy._jobs.values():
                    assert sorted(pk.workers) == live
                    assert pk.n_workers == len(live)
        log.extend(
            (event.time, a.slot, a.subjob.job_id, a.subjob.subjob_id, a.subjob.data)
            for a in actions
            if isinstance(a, Assign)
        )
        return actions

    sched.handle = traced  # type: ignore[method-assign]  # wrapped: the test watches each event
    faults = NodeFaults(mtbf_h=mtbf_s / 3600, repair_h=10.0 / 3600, seed=seed)
    arrivals = [
        Job(i, t, IntervalSet.range((first % len(placement)) * FILE, data.n_events))
        for i, (t, first) in enumerate(jobs)
    ]
    run = SimEngine(sched, faults=faults).run(arrivals)
    return log, run.jobs_completed, run.policy_counters


SETUPS: list[tuple[str, dict[str, Any]]] = [
    ("basic-packetizer", {}),
    ("basic-packetizer", {"max_workers_per_node": 1}),
    ("adaptive-packetizer", {"calibration_events": 7, "min_packet_s": 1.0}),
    ("adaptive-packetizer", {"max_workers_per_node": 1, "calibration_events": 7}),
    ("adaptive-packetizer", {"priorities": "default=1", "calibration_events": 7}),
    ("basic-packetizer", {"quotas": "a=0.5,default=0.5"}),
]


@settings(max_examples=60, deadline=None)
@given(
    setup=st.sampled_from(SETUPS),
    placement=placements(5),
    workers=st.integers(1, 4),
    slots=st.sampled_from([1, 2, 3]),
    jobs=st.lists(
        st.tuples(st.sampled_from([0.0, 5.0, 12.0, 20.0, 30.0, 45.0, 60.0]), st.integers(0, 11)),
        min_size=1,
        max_size=6,
    ),
    mtbf_s=st.sampled_from([8.0, 15.0, 60.0, 1e6]),
    seed=st.integers(0, 3),
)
def test_the_policy_assigns_what_asking_every_job_did(
    setup: tuple[str, dict[str, Any]],
    placement: list[int],
    workers: int,
    slots: int,
    jobs: list[tuple[float, int]],
    mtbf_s: float,
    seed: int,
) -> None:
    """Whole simulations, jobs overlapping, nodes failing and coming back: every Assign the
    same (time, slot, job, subjob, events) as the eager reference's, the same counters."""
    name, params = setup
    reference: ProofPolicy = (_EagerBasic if name == "basic-packetizer" else _EagerAdaptive)(
        **params
    )
    topology = servers_and_workers(workers, 5 - workers, slots=slots)
    got = _run(build_policy(name, **params), topology, placement, jobs, mtbf_s, seed)
    want = _run(reference, topology, placement, jobs, mtbf_s, seed)
    assert got[0] == want[0]
    assert got[1] == want[1]
    assert got[2] == want[2]
    assert got[0]  # something ran


@pytest.mark.parametrize("name", ["basic-packetizer", "adaptive-packetizer"])
def test_queries_between_nodes_lost_and_back_have_the_slots_there_then(name: str) -> None:
    """A query, a node lost, a query, the node back, a query: each query has the slots of
    the cluster when it came (the roster is made again at each change), and every action
    is the eager reference's."""
    topology = Topology.uniform(3, 0.0, slots=2)
    reference: ProofPolicy = (_EagerBasic if name == "basic-packetizer" else _EagerAdaptive)()
    runs = []
    for policy in (build_policy(name), reference):
        sched = Scheduler(topology, space(), policy)
        node = sched.topology.nodes[2]
        script: list[Event] = [
            JobArrived(0.0, Job(0, 0.0, IntervalSet.range(0, 50_000))),
            NodeLost(1.0, 2),
            JobArrived(2.0, Job(1, 2.0, IntervalSet.range(0, 50_000))),
            NodeJoined(3.0, node),
            JobArrived(4.0, Job(2, 4.0, IntervalSet.range(0, 50_000))),
        ]
        assert isinstance(policy, ProofPolicy)
        steps = []
        for event in script:
            actions = [str(a) for a in sched.handle(event)]
            steps.append((actions, {j: sorted(pk.workers) for j, pk in policy._jobs.items()}))
        runs.append(steps)
    assert runs[0] == runs[1]
    every, without_2 = list(range(6)), list(range(4))
    assert [workers for _, workers in runs[0]] == [
        {0: every},
        {0: without_2},
        {0: without_2, 1: without_2},
        {0: every, 1: every},
        {0: every, 1: every, 2: every},
    ]
