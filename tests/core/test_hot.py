"""Hot-file replication (ranganathan-foster's Dataset Scheduler beside any policy): the
threshold fires exactly when a file's popularity reaches it, on hand-computed sequences of
accesses, and the replicator picks its source and target by the declared rules."""

from __future__ import annotations

from typing import Any

import pytest

from clusters import EVENT_BYTES, space
from datasched.core.actions import Action, Assign, Replicate, Start
from datasched.core.directory import CacheDirectory
from datasched.core.events import Event, NodeLost, Tick, TransferDone
from datasched.core.hot import HotReplicator
from datasched.core.intervals import IntervalSet
from datasched.core.model import Subjob, Topology
from datasched.core.policy import ParamError

FILE_EVENTS = 10
FILE_BYTES = FILE_EVENTS * EVENT_BYTES
F0 = IntervalSet.range(0, FILE_EVENTS)
F1 = IntervalSet.range(FILE_EVENTS, 2 * FILE_EVENTS)


class View:
    """The part of the scheduler the replicator reads, set by hand: nodes of one slot each
    and caches of ``cache_files`` files."""

    def __init__(self, n_nodes: int = 4, cache_files: float = 3) -> None:
        self.now = 0.0
        self.space = space(FILE_EVENTS, n_events=10 * FILE_EVENTS)
        self.topology = Topology.uniform(n_nodes, cache_files * FILE_BYTES)
        self.directory = CacheDirectory(n_nodes)
        self.nodes = list(range(n_nodes))
        self.node_running = [0] * n_nodes
        self.running: dict[int, Any] = {}
        self.moving: dict[int, list[IntervalSet]] = {}
        self.out: list[Replicate] = []

    def slots_of(self, node: int) -> list[int]:
        return [node]

    def fetching(self, node: int) -> IntervalSet:
        out = IntervalSet()
        for data in self.moving.get(node, ()):
            out = out | data
        return out

    def replicate(self, source: int, node: int, data: IntervalSet) -> None:
        self.moving.setdefault(node, []).append(data)
        self.out.append(Replicate(source, node, data))

    def land(self, r: Replicate) -> TransferDone:
        """The engine's answer: the copy is in ``r.node``'s cache."""
        self.moving[r.node].remove(r.data)
        self.directory.add(r.node, r.data)
        return TransferDone(self.now, r.source, r.node, r.data, r.data)


_ids = iter(range(10**6))


def read(hot: HotReplicator, view: View, job: int, data: IntervalSet, t: float) -> list[Any]:
    """Job ``job`` starts work on ``data`` at ``t``; the replications that causes."""
    view.now = t
    before = len(view.out)
    action: Action = Start(Subjob(next(_ids), job, data), 0, True)
    event: Event = Tick(t)
    hot.observe(view, event, [action])  # type: ignore[arg-type]
    return view.out[before:]


def test_fires_exactly_when_popularity_reaches_the_threshold() -> None:
    view = View()
    view.directory.add(0, F0)
    hot = HotReplicator(3, max_copies=3)
    assert read(hot, view, 1, F0, 1.0) == []
    assert read(hot, view, 2, F0, 2.0) == []
    # The same job again (another packet of it) is no new reader.
    assert read(hot, view, 2, F0, 2.5) == []
    assert hot.popularity(0, 2.5) == 2
    fired = read(hot, view, 3, F0, 3.0)
    # Nodes 1-3 are equally idle with equal room: the lowest takes the copy.
    assert fired == [Replicate(0, 1, F0)]
    hot.observe(view, view.land(fired[0]), [])  # type: ignore[arg-type]
    # Two copies now; the third is wanted at 2 * 3 readers, not before.
    assert read(hot, view, 4, F0, 4.0) == []
    assert read(hot, view, 5, F0, 5.0) == []
    fired = read(hot, view, 6, F0, 6.0)
    assert fired == [Replicate(0, 2, F0)]
    hot.observe(view, view.land(fired[0]), [])  # type: ignore[arg-type]
    # max_copies reached: no more, however popular.
    assert [read(hot, view, j, F0, 7.0 + j) for j in range(7, 13)] == [[]] * 6
    assert hot.replications == 2


def test_a_packet_of_a_pull_policy_counts_like_a_start() -> None:
    view = View()
    view.directory.add(2, F1)
    hot = HotReplicator(1)
    view.now = 1.0
    hot.observe(view, Tick(1.0), [Assign(Subjob(0, 7, F1.clip(12, 15)), 0, False)])  # type: ignore[arg-type]
    assert view.out == [Replicate(2, 0, F1)]


def test_the_window_forgets_old_readers() -> None:
    view = View()
    view.directory.add(0, F0)
    hot = HotReplicator(3, window_s=10.0)
    assert read(hot, view, 1, F0, 0.0) == []
    assert read(hot, view, 2, F0, 5.0) == []
    # At 12 the window is (2, 12]: job 1 (at 0) has left it, so 2 readers, not 3.
    assert read(hot, view, 3, F0, 12.0) == []
    assert hot.popularity(0, 12.0) == 2
    # At 13 the window (3, 13] holds jobs 2, 3 and 4.
    assert read(hot, view, 4, F0, 13.0) == [Replicate(0, 1, F0)]
    # A job reading again moves its time forward; one whose last read left the window goes.
    assert hot.popularity(0, 15.5) == 2


def test_source_and_target_rules() -> None:
    view = View(n_nodes=5, cache_files=2)
    view.directory.add(0, F0)
    view.directory.add(3, F0)
    view.node_running = [1, 0, 1, 0, 0]
    # Node 1 is idle but full (two files of room, two cached): it would have to evict.
    view.directory.add(1, IntervalSet.range(20, 40))
    # Node 4 is lost: not in the cluster's nodes.
    view.nodes = [0, 1, 2, 3]
    hot = HotReplicator(1, max_copies=3)
    # Copies made by ordinary cache fills count: two holders are what one reader wants.
    assert read(hot, view, 1, F0, 1.0) == []
    fired = read(hot, view, 2, F0, 2.0)
    # Source: the less loaded holder (3); target: the only node with room (2), though busy.
    assert fired == [Replicate(3, 2, F0)]


def test_no_copy_to_a_node_whose_own_subjob_reads_the_file() -> None:
    view = View(n_nodes=3)
    view.directory.add(0, F0)

    class Run:
        subjob = Subjob(99, 9, F0.clip(4, 8))

    view.running[1] = Run()  # slot 1 is node 1's
    view.node_running = [0, 0, 1]  # (loads set apart: node 1 would win on load alone)
    hot = HotReplicator(1)
    assert read(hot, view, 1, F0, 1.0) == [Replicate(0, 2, F0)]


def test_nothing_to_copy_from_or_to() -> None:
    view = View(n_nodes=2)
    hot = HotReplicator(1)
    assert read(hot, view, 1, F0, 1.0) == []  # no node holds the file whole
    view.directory.add(0, F0.clip(0, 5))
    assert read(hot, view, 2, F0, 2.0) == []  # half of it is not a source
    view.directory.add(0, F0)
    view.directory.add(1, F0)
    assert read(hot, view, 3, F0, 3.0) == []  # every node holds it already


def test_in_flight_limit_and_a_lost_target() -> None:
    view = View(n_nodes=4)
    view.directory.add(0, F0)
    view.directory.add(0, F1)
    hot = HotReplicator(1, max_in_flight=1)
    assert read(hot, view, 1, F0, 1.0) == [Replicate(0, 1, F0)]
    assert read(hot, view, 2, F1, 2.0) == []  # one copy travels already
    # The target is lost while the copy travels: forgotten, and the next reader of F1 (the
    # popularity counts) gets its copy.
    view.moving.clear()
    view.nodes = [0, 2, 3]
    hot.observe(view, NodeLost(3.0, 1), [])  # type: ignore[arg-type]
    assert read(hot, view, 3, F1, 4.0) == [Replicate(0, 2, F1)]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"threshold": 0}, "threshold"),
        ({"threshold": 2, "window_s": 0.0}, "window_s"),
        ({"threshold": 2, "max_copies": 1}, "max_copies"),
        ({"threshold": 2, "max_in_flight": 0}, "max_in_flight"),
        ({"threshold": 2, "colour": 1}, "colour"),
        ({}, "threshold"),
    ],
)
def test_bad_parameters_name_the_field(params: dict[str, Any], field: str) -> None:
    with pytest.raises(ParamError, match=f"^{field}: "):
        HotReplicator.from_params(params)


@pytest.mark.parametrize(
    ("policy", "copies_expected"),
    [("out-of-order", True), ("cache-splitting", True), ("farm", False)],
)
def test_in_the_simulator_copies_travel_and_every_event_is_processed_once(
    policy: str, copies_expected: bool
) -> None:
    """Twelve jobs over the same two files on four nodes: the files become hot, copies
    reach other caches, and the jobs' events are processed exactly once as without them.
    A processing farm keeps nothing in the caches, so there is nothing to copy from."""
    from clusters import scheduler
    from datasched.core.model import Job
    from datasched.sim.engine import SimEngine

    jobs = [
        Job(job_id=i, submit_s=400.0 * i, data=IntervalSet.range(0, 2 * FILE_EVENTS))
        for i in range(12)
    ]
    results = {}
    for hot in (None, 2):
        sched = scheduler(
            policy, 4, 4 * FILE_EVENTS, min_subjob=3, data=space(FILE_EVENTS, 1000), hot=hot
        )
        copies: list[Any] = []
        handle = sched.handle

        def watch(event: Event, handle: Any = handle, copies: list[Any] = copies) -> list[Action]:
            out: list[Action] = handle(event)
            copies.extend(a for a in out if isinstance(a, Replicate))
            return out

        sched.handle = watch  # type: ignore[method-assign]
        engine = SimEngine(sched, check_conservation=True)
        run = engine.run(jobs)
        assert run.processed is not None
        for job in jobs:
            union = IntervalSet()
            for piece in run.processed[job.job_id]:
                assert not (piece & union)
                union = union | piece
            assert union == job.data
        assert run.jobs_completed == len(jobs)
        results[hot] = copies
    assert results[None] == []
    assert bool(results[2]) == copies_expected
    assert all(r.data in (F0, F1) and r.source != r.node for r in results[2])
