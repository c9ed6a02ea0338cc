"""romosan's co-scheduling policies in the simulator: a job starts only with all its files
cached and pinned on its server, and they stay there while it runs; a pinned file is never
evicted; one transfer a file and server, and a file on its way is copied from where it goes,
not fetched again; each policy's own rule (servers in turn, cheapest data first, batches of
the min-cost flow, which are optima of the LP)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusters import cosched_scheduler
from datasched.core.actions import Action, Assign, Fetch, Replicate, Start
from datasched.core.events import (
    CacheChanged,
    Event,
    FetchDone,
    SubjobFinished,
    SubjobStopped,
    TransferDone,
)
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job
from datasched.core.policy import SchedulerView
from datasched.core.scheduler import Scheduler
from datasched.policies.cosched import flow as cosched_flow
from datasched.policies.cosched.mincostflow import Batch, BatchFlow, Network, solve, solve_lp
from datasched.sim.engine import SimEngine
from strategies import multi_file_jobs

POLICIES = ("fifo-roundrobin", "sjf-data", "mincostflow")
FILE = 100
"""Events a file in these tests (the cluster helper's default)."""


def files(*indices: int) -> IntervalSet:
    return IntervalSet((f * FILE, (f + 1) * FILE) for f in indices)


class CheckingEngine(SimEngine):
    """The simulator, checking romosan's rule at every start and end of a subjob and every
    cache change, and keeping the actions the scheduler sent."""

    def __init__(self, sched: Scheduler) -> None:
        super().__init__(sched)
        self.actions: list[tuple[float, Action]] = []
        self.staged: set[int] = set()
        """Subjobs started with all their files staged."""
        handle = sched.handle

        def checked(event: Event) -> list[Action]:
            self._no_pinned_file_evicted(event)
            out = handle(event)
            self.actions += [(event.time, a) for a in out]
            return out

        sched.handle = checked  # type: ignore[method-assign]  # wrapped: the test watches each event

    def _no_pinned_file_evicted(self, ev: Event) -> None:
        if isinstance(ev, FetchDone | TransferDone | CacheChanged):
            node, evicted = ev.node, ev.evicted
        elif isinstance(ev, SubjobFinished | SubjobStopped):
            node, evicted = self._slot_node[ev.slot], ev.cache_evicted
        else:
            return
        assert not evicted.overlaps(self.caches[node].pinned), "a pinned file was evicted"

    def _start(self, action: Start | Assign) -> None:
        if action.cache_fill:  # every file of the job was staged
            cache = self.caches[self._slot_node[action.slot]]
            whole = self.space.whole_files(action.subjob.data)
            assert whole.issubset(cache.content), "a job started before its files were in"
            assert whole.issubset(cache.pinned), "a job started with files not pinned"
            self.staged.add(action.subjob.subjob_id)
        super()._start(action)

    def _leave(self, slot: int, finished: bool) -> SubjobFinished | SubjobStopped:
        run = self._runs[slot]
        assert run is not None
        if run.subjob.subjob_id in self.staged:
            cache = self.caches[self._slot_node[slot]]
            whole = self.space.whole_files(run.subjob.data)
            assert whole.issubset(cache.content), "a file of a running job left its cache"
        return super()._leave(slot, finished=finished)

    def moves(self) -> list[Fetch | Replicate]:
        return [a for _, a in self.actions if isinstance(a, Fetch | Replicate)]


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=40, deadline=None)
@given(
    jobs=multi_file_jobs(n_files=8, file_events=FILE, max_jobs=10, max_files=3),
    nodes=st.integers(1, 3),
    slots=st.integers(1, 2),
    roomy=st.booleans(),
)
def test_jobs_start_with_their_files_pinned_and_pinned_files_stay(
    policy: str, jobs: list[Job], nodes: int, slots: int, roomy: bool
) -> None:
    """Caches just large enough for the files every slot's job pins (three a job), or room
    for everything: every job starts with all its files cached and pinned on its server, they
    stay there while it runs, and no pinned file is ever evicted."""
    cache_files = 40 if roomy else 3 * slots
    sched = cosched_scheduler(policy, nodes, slots=slots, cache_files=cache_files, n_files=8)
    engine = CheckingEngine(sched)
    run = engine.run(jobs)
    assert run.jobs_completed == len(jobs)
    assert len(engine.staged) == len(jobs)  # no job ran without its files
    counters = run.policy_counters
    assert counters["local_copies"] + counters["remote_copies"] == run.transfers
    if roomy:
        # Nothing is evicted: each file comes from the archive once, whoever needs it.
        wanted = {f for j in jobs for f in sched.space.files_in(j.data)}
        assert counters["remote_copies"] == len(wanted)


@pytest.mark.parametrize("policy", POLICIES)
def test_one_transfer_a_file_and_server_and_copies_from_where_it_goes(policy: str) -> None:
    """Four jobs of file 3 arrive together on two servers of two slots: one remote copy to
    the first server; the second server's copy waits for it to land and comes from there."""
    sched = cosched_scheduler(policy, 2, slots=2)
    engine = CheckingEngine(sched)
    engine.run([Job(i, 0.0, files(3)) for i in range(4)])
    moves = engine.moves()
    assert [type(m).__name__ for m in moves] == ["Fetch", "Replicate"], moves
    fetch, copy = moves
    assert isinstance(copy, Replicate)
    assert copy.source == fetch.node != copy.node
    (copied,) = [t for t, a in engine.actions if isinstance(a, Replicate)]
    assert copied > 0  # once the remote copy had landed


@pytest.mark.parametrize("policy", POLICIES)
def test_a_cached_file_is_copied_from_its_holder(policy: str) -> None:
    """Three servers of one slot: jobs of file 1 and of files 0, 2, 4 take two of them; a job
    of file 1 arriving while both run goes to the third, with a local copy of file 1 from the
    server that fetched it, not a remote one."""
    sched = cosched_scheduler(policy, 3, slots=1)
    engine = CheckingEngine(sched)
    jobs = [Job(0, 0.0, files(1)), Job(1, 0.0, files(0, 2, 4)), Job(2, 10.0, files(1))]
    engine.run(jobs)
    moves = engine.moves()
    (fetched,) = [m for m in moves if isinstance(m, Fetch) and m.data == files(1)]
    (copy,) = [m for m in moves if isinstance(m, Replicate)]
    assert copy.data == files(1)
    assert copy.source == fetched.node != copy.node


def test_fifo_roundrobin_takes_servers_in_turn() -> None:
    sched = cosched_scheduler("fifo-roundrobin", 3, slots=2)
    engine = CheckingEngine(sched)
    engine.run([Job(i, 0.0, files(i)) for i in range(5)])
    starts = [a for _, a in engine.actions if isinstance(a, Fetch)]
    assert [a.node for a in starts] == [0, 1, 2, 0, 1]


def test_sjf_runs_the_job_whose_file_is_cached_first() -> None:
    """One server, one slot, caching file 2. Jobs of files 5, 6 and 2 queue behind a running
    job; when it ends, the job of file 2 moves nothing and goes first (the early exit), then
    the others in arrival order."""
    sched = cosched_scheduler("sjf-data", 1, slots=1)
    sched.handle(CacheChanged(0.0, 0, added=files(2)))
    engine = CheckingEngine(sched)
    engine.caches[0].insert(files(2), 0.0)
    jobs = [Job(0, 0.0, files(7)), Job(1, 1.0, files(5)), Job(2, 2.0, files(6))]
    jobs.append(Job(3, 3.0, files(2)))
    engine.run(jobs)
    order = [a.subjob.job_id for _, a in engine.actions if isinstance(a, Start)]
    assert order == [0, 3, 1, 2]


def test_fifo_keeps_arrival_order_where_sjf_would_not() -> None:
    sched = cosched_scheduler("fifo-roundrobin", 1, slots=1)
    sched.handle(CacheChanged(0.0, 0, added=files(2)))
    engine = CheckingEngine(sched)
    engine.caches[0].insert(files(2), 0.0)
    jobs = [Job(0, 0.0, files(7)), Job(1, 1.0, files(5)), Job(2, 2.0, files(6))]
    jobs.append(Job(3, 3.0, files(2)))
    engine.run(jobs)
    order = [a.subjob.job_id for _, a in engine.actions if isinstance(a, Start)]
    assert order == [0, 1, 2, 3]


def test_mincostflow_places_jobs_in_batches_every_period() -> None:
    """With a period of 100 s, jobs arriving at 0, 10 and 20 s all wait for the batch at
    100 s; one more arriving later waits for the next."""
    sched = cosched_scheduler("mincostflow", 2, slots=2, params={"lp_period_s": 100.0})
    engine = CheckingEngine(sched)
    jobs = [Job(i, 10.0 * i, files(i)) for i in range(3)] + [Job(3, 150.0, files(3))]
    run = engine.run(jobs)
    placed = [t for t, a in engine.actions if isinstance(a, Fetch)]
    assert placed == [100.0, 100.0, 100.0, 250.0]
    assert run.policy_counters["batches"] == 2


def test_mincostflow_batches_are_optima_of_the_lp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every batch the policy solves during a run is checked against HiGHS."""
    checked: list[int] = []

    def both(batch: Batch, network: Network = "grouped") -> BatchFlow:
        result = solve(batch, network)
        lp_objective, _ = solve_lp(batch)
        assert result.objective == pytest.approx(lp_objective, rel=1e-9, abs=1e-9)
        checked.append(batch.n_files)
        return result

    monkeypatch.setattr(cosched_flow, "solve", both)
    sched = cosched_scheduler(
        "mincostflow", 3, slots=2, cache_files=3, params={"lp_period_s": 30.0}
    )
    jobs = [Job(i, 7.0 * i, files(i % 7, (3 * i) % 10)) for i in range(40)]
    run = CheckingEngine(sched).run(jobs)
    assert run.jobs_completed == 40
    assert len(checked) == run.policy_counters["batches"] > 3
    assert max(checked) > 3


@pytest.mark.parametrize("policy", POLICIES)
def test_policies_declare_their_costs(policy: str) -> None:
    from datasched.policies import describe

    params: dict[str, Any] = {p["name"]: p for p in describe(policy)["params"]}
    if policy != "fifo-roundrobin":
        assert params["local_cost"]["default"] == 1.0
        assert params["remote_cost"]["default"] == 10.0


@settings(max_examples=50, deadline=None)
@given(
    cached=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9), st.booleans()), max_size=25),
    wanted=st.sets(st.integers(0, 9), min_size=1),
)
def test_holders_of_many_files_is_holders_of_each(
    cached: list[tuple[int, int, bool]], wanted: set[int]
) -> None:
    """The batch's one walk over the directory finds what a lookup per file finds."""
    sched = cosched_scheduler("mincostflow", 3)
    for node, f, add in cached:
        if add:
            sched.handle(CacheChanged(0.0, node, added=files(f)))
        else:
            sched.handle(CacheChanged(0.0, node, evicted=files(f)))
    policy = sched.policy
    assert isinstance(policy, cosched_flow.MinCostFlow)
    order = sorted(wanted)
    assert policy.holders_of(sched, order) == [policy.holders(sched, f) for f in order]


GOLDEN = Path(__file__).parent.parent / "golden"


def cosched_trace(policy: str) -> str:
    """Two servers of two slots caching three files each; jobs of one to three files, some
    sharing files, arriving close together: placements, copies, pins, starts, releases."""
    sched = cosched_scheduler(policy, 2, slots=2, cache_files=3, n_files=6)
    lines: list[str] = []
    handle = sched.handle

    def traced(event: Event) -> list[Action]:
        actions = handle(event)
        lines.append(f"{event.time:9.2f} {type(event).__name__} {_brief(event)}")
        lines.extend(f"    -> {type(a).__name__} {_brief(a)}" for a in actions)
        return actions

    sched.handle = traced  # type: ignore[method-assign]  # wrapped: the test watches each event
    jobs = [
        Job(0, 0.0, files(0)),
        Job(1, 0.0, files(1, 2)),
        Job(2, 5.0, files(0)),
        Job(3, 5.0, files(0, 3)),
        Job(4, 10.0, files(2)),
        Job(5, 400.0, files(4, 5, 1)),
        Job(6, 400.0, files(1)),
    ]
    SimEngine(sched).run(jobs)
    return "\n".join(lines) + "\n"


def _brief(x: object) -> str:
    """The fields a trace shows: ids, nodes, slots, files (not event ranges)."""
    out = []
    for name in ("job", "subjob", "slot", "node", "source", "data", "token", "added", "evicted"):
        value = getattr(x, name, None)
        if value is None:
            continue
        if name == "job":
            value = value.job_id
        elif name == "subjob":
            value = f"{value.subjob_id} of job {value.job_id} files {_files(value.data)}"
        elif isinstance(value, IntervalSet):
            value = _files(value)
        out.append(f"{name}={value}")
    return " ".join(out)


def _files(data: IntervalSet) -> str:
    """The files ``data`` covers (the files of these tests are ``FILE`` events each)."""
    return "[" + ",".join(str(f) for a, b in data for f in range(a // FILE, b // FILE)) + "]"


@pytest.mark.parametrize("policy", POLICIES)
def test_cosched_golden_trace(policy: str) -> None:
    """Like tests/core/test_golden.py, over whole files: regenerate with
    ``DATASCHED_REGEN_GOLDEN=1`` and review the diff."""
    path = GOLDEN / f"cosched-{policy}.txt"
    got = cosched_trace(policy)
    if os.environ.get("DATASCHED_REGEN_GOLDEN"):
        path.write_text(got)
    assert path.exists(), f"no golden trace for {policy}: regenerate (see the docstring)"
    assert got == path.read_text()


# -- the index of free servers (CoScheduling._free): the answers of a pass over every server --


def _full_scan_checks(mp: pytest.MonkeyPatch) -> list[str]:
    """Make every look at the index of free servers check itself against a pass over every
    server (capacities(), what the policies read before the index), and ``_cheapest``
    against the pass it replaced; the calls checked, by name."""
    from datasched.policies.cosched.greedy import ShortestDataFirst
    from datasched.policies.cosched.model import CoScheduling

    checked: list[str] = []
    next_open, widest_open = CoScheduling._next_open, CoScheduling.widest_open
    cheapest = ShortestDataFirst._cheapest

    def checked_next(self: CoScheduling, sched: SchedulerView, start: int) -> int | None:
        caps = sorted(self.capacities(sched))
        want = next((n for n in caps if n >= start), caps[0]) if caps else None
        got = next_open(self, sched, start)
        assert got == want, f"next open server from {start}: {got}, a pass says {want}"
        checked.append("next")
        return got

    def checked_widest(self: CoScheduling, sched: SchedulerView) -> tuple[int, int] | None:
        caps = self.capacities(sched)
        want = None
        if caps:
            node = min(caps, key=lambda n: (-caps[n], n))
            want = (node, caps[node])
        got = widest_open(self, sched)
        assert got == want, f"widest open server: {got}, a pass says {want}"
        checked.append("widest")
        return got

    def checked_cheapest(
        self: ShortestDataFirst,
        sched: SchedulerView,
        files: tuple[int, ...],
        widest: int,
        known: dict[int, frozenset[int]],
    ) -> tuple[float, int]:
        caps = self.capacities(sched)
        space_files = sched.space.files

        def elsewhere(f: int) -> float:
            on_way = self.holders(sched, f) or self.on_its_way(f)
            return space_files[f].n_bytes * (self.local_cost if on_way else self.remote_cost)

        def here(n: int, f: int) -> bool:
            return n in self.holders(sched, f) or self.coming(n, f)

        best = min((sum(elsewhere(f) for f in files if not here(n, f)), -caps[n], n) for n in caps)
        got = cheapest(self, sched, files, widest, known)
        assert got == (best[0], best[2]), f"cheapest for {files}: {got}, a pass says {best}"
        checked.append("cheapest")
        return got

    mp.setattr(CoScheduling, "_next_open", checked_next)
    mp.setattr(CoScheduling, "widest_open", checked_widest)
    mp.setattr(ShortestDataFirst, "_cheapest", checked_cheapest)
    return checked


@pytest.mark.parametrize("policy", ["fifo-roundrobin", "sjf-data"])
@settings(max_examples=15, deadline=None)
@given(
    jobs=multi_file_jobs(n_files=8, file_events=FILE, max_jobs=12, max_files=3),
    nodes=st.integers(1, 5),
    slots=st.integers(1, 3),
    mtbf_s=st.sampled_from([None, 60.0, 600.0]),
    seed=st.integers(0, 3),
)
def test_the_free_servers_index_answers_what_a_pass_over_every_server_does(
    policy: str, jobs: list[Job], nodes: int, slots: int, mtbf_s: float | None, seed: int
) -> None:
    """Servers failing and coming back (their slots freed, their work returned), jobs of
    one to three files, servers of one to three slots: every choice read from the index is
    the one a pass over every server makes."""
    from datasched.sim.faults import NodeFaults

    faults = None if mtbf_s is None else NodeFaults(mtbf_s / 3600, 30.0 / 3600, seed=seed)
    with pytest.MonkeyPatch.context() as mp:
        checked = _full_scan_checks(mp)
        sched = cosched_scheduler(policy, nodes, slots=slots, cache_files=6, n_files=8)
        run = SimEngine(sched, faults=faults).run(jobs)
    assert run.jobs_completed == len(jobs)
    assert checked


@pytest.mark.parametrize("policy", ["fifo-roundrobin", "sjf-data"])
def test_a_cancelled_placed_job_frees_its_server_at_once(policy: str) -> None:
    """One server of one slot: job 0 is placed there and waits for its file, job 1 queues;
    cancelling job 0 gives its slot back, and job 1 is placed at once (its file asked for)."""
    from datasched.core.events import JobArrived, JobCancelled

    with pytest.MonkeyPatch.context() as mp:
        checked = _full_scan_checks(mp)
        sched = cosched_scheduler(policy, 1, slots=1)
        sched.handle(JobArrived(0.0, Job(0, 0.0, files(1))))
        assert not sched.handle(JobArrived(1.0, Job(1, 1.0, files(2))))  # no free slot
        out = sched.handle(JobCancelled(2.0, 0))
    fetched = [a.data for a in out if isinstance(a, Fetch)]
    assert fetched == [files(2)], out
    assert checked


# -- the min-cost flow's servers by free slots (CoScheduling.free_slots) and its groups -------


def _checked_batches(mp: pytest.MonkeyPatch) -> list[int]:
    """Make every batch of the min-cost flow check the index of servers by free slots
    against a pass over every server (capacities()), and its network of groups against the
    paper's network of every server at the same moment (the same optimum); the free slots of
    each batch checked."""
    run_batch = cosched_flow.MinCostFlow.run_batch
    checked: list[int] = []

    def checked_run(self: cosched_flow.MinCostFlow, sched: SchedulerView) -> None:
        caps = self.capacities(sched)
        index = self.free_slots(sched)
        assert index.as_dict() == caps, f"index {index.as_dict()}, a pass says {caps}"
        if caps and self._items:
            grouped, _, servers = self.grouped_batch(sched, index)
            full, _, nodes = self.batch(sched, caps)
            assert grouped.n_machines == full.n_servers == len(caps)
            holding = sorted({nodes[s] for s in full.zero_idx.tolist()})
            assert [n for n in servers if n >= 0] == holding
            assert solve(grouped).objective == pytest.approx(solve(full).objective, abs=1e-9)
            checked.append(len(caps))
        run_batch(self, sched)
        assert self.free_slots(sched).as_dict() == self.capacities(sched)

    mp.setattr(cosched_flow.MinCostFlow, "run_batch", checked_run)
    return checked


@settings(max_examples=20, deadline=None)
@given(
    jobs=multi_file_jobs(n_files=8, file_events=FILE, max_jobs=12, max_files=3),
    nodes=st.integers(1, 6),
    slots=st.integers(1, 3),
    period_s=st.sampled_from([0.0, 30.0]),
    mtbf_s=st.sampled_from([None, 60.0, 600.0]),
    seed=st.integers(0, 3),
)
def test_the_servers_by_free_slots_stay_what_a_pass_over_every_server_says(
    jobs: list[Job],
    nodes: int,
    slots: int,
    period_s: float,
    mtbf_s: float | None,
    seed: int,
) -> None:
    """Servers failing and coming back (their slots freed, their work returned), jobs of
    one to three files placed and started as slots fill and free: after every event the
    index is what a pass over every server counts, and every batch of groups has the
    optimum of the paper's network over the same servers."""
    from datasched.sim.faults import NodeFaults

    faults = None if mtbf_s is None else NodeFaults(mtbf_s / 3600, 30.0 / 3600, seed=seed)
    with pytest.MonkeyPatch.context() as mp:
        checked = _checked_batches(mp)
        sched = cosched_scheduler(
            "mincostflow",
            nodes,
            slots=slots,
            cache_files=6,
            n_files=8,
            params={"lp_period_s": period_s},
        )
        policy = sched.policy
        assert isinstance(policy, cosched_flow.MinCostFlow)
        handle = sched.handle
        events: list[int] = []

        def watched(event: Event) -> list[Action]:
            out = handle(event)
            if not policy._slots_stale:
                assert policy._slots.as_dict() == policy.capacities(sched), event
                events.append(1)
            return out

        sched.handle = watched  # type: ignore[method-assign]  # wrapped: checked each event
        run = SimEngine(sched, faults=faults).run(jobs)
    assert run.jobs_completed == len(jobs)
    assert checked
    assert events


def test_a_groups_jobs_go_to_its_lowest_servers_first() -> None:
    """Five empty servers of two slots, three jobs of files cached nowhere, one batch at
    100 s: the five servers are one group of the network, and its three units go to the
    lowest servers, each filled before the next (jobs 0 and 1 on server 0, job 2 on 1)."""
    sched = cosched_scheduler("mincostflow", 5, slots=2, params={"lp_period_s": 100.0})
    engine = CheckingEngine(sched)
    jobs = [Job(i, 10.0 * i, files(i)) for i in range(3)]
    run = engine.run(jobs)
    fetched = [(a.data, a.node) for _, a in engine.actions if isinstance(a, Fetch)]
    assert fetched == [(files(0), 0), (files(1), 0), (files(2), 1)]
    assert run.policy_counters["batches"] == 1


def test_the_full_network_places_as_the_paper_builds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``network=full`` builds each batch over every free server one by one (the paper's
    network, no groups), and the run completes."""
    seen: list[tuple[bool, int]] = []

    def recorded(batch: Batch, network: Network = "grouped") -> BatchFlow:
        assert network == "full"
        seen.append((batch.count is None, batch.n_servers))
        return solve(batch, network)

    monkeypatch.setattr(cosched_flow, "solve", recorded)
    sched = cosched_scheduler(
        "mincostflow", 3, slots=2, cache_files=3, params={"network": "full", "lp_period_s": 30.0}
    )
    jobs = [Job(i, 7.0 * i, files(i % 7, (3 * i) % 10)) for i in range(20)]
    run = CheckingEngine(sched).run(jobs)
    assert run.jobs_completed == 20
    assert len(seen) == run.policy_counters["batches"]
    assert all(ungrouped for ungrouped, _ in seen)
    assert max(n for _, n in seen) == 3
