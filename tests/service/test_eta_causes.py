"""The causes of the ETAs' errors named in docs/service-whatif.md, each on a case worked out
by hand: the daemon's queue in front of the runner, a job's CPU against the round trips in
a slot's time, the pace of a job already begun, when a request really ended, and a merger
that stops without tracebacks."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from datasched.service.contracts import (
    ClusterSnapshot,
    FileTodo,
    JobSnapshot,
    JobState,
    NodeRates,
    NodeSnapshot,
    PacketDone,
    ProcessorWork,
    SnapshotError,
)
from datasched.service.daemon import Dispatcher, StoreListener
from datasched.service.eta_watch import EtaWatch
from datasched.service.live import _costed, job_time_per_event, start_costs, started_rates
from datasched.service.merger import Merger
from datasched.service.runner import RunnerError
from datasched.service.store.db import Store
from datasched.service.store.models import Job, Packet, Request
from datasched.service.users import add_user
from datasched.service.whatif import Admission, predict
from service.step_support import StepRunner, submit

NODE = NodeSnapshot("w0", 1, 10**9, (), NodeRates(100.0, 100.0, 100.0))


def _job(i: int, url: str | None = None, node: str | None = None) -> JobSnapshot:
    return JobSnapshot(
        f"j{i}", f"r{i}", (FileTodo(url or f"/d/{i}.root", 100, 1000, None),), float(i), node=node
    )


# -- the queue in front of the runner -----------------------------------------------------


def test_pending_jobs_reach_the_core_in_the_dispatchers_order() -> None:
    # One slot, 1 s a job (100 events at 100/s): without the queue, by submission.
    snap = ClusterSnapshot(0.0, (NODE,), tuple(_job(i) for i in range(4)))
    assert predict(snap, "farm").jobs == {"j0": 1.0, "j1": 2.0, "j2": 3.0, "j3": 4.0}
    # The dispatcher hands them over newest first (its fair share says so), one at a time.
    got = predict(snap, "farm", admission=Admission(("j3", "j2", "j1", "j0"), 1))
    assert got.jobs == {"j3": 1.0, "j2": 2.0, "j1": 3.0, "j0": 4.0}
    # j0 and j1 are held by the runner already: they run first, then the pending in order.
    got = predict(snap, "farm", admission=Admission(("j3", "j2"), 1))
    assert got.jobs == {"j0": 1.0, "j1": 2.0, "j3": 3.0, "j2": 4.0}


def test_a_cache_aware_core_sees_only_what_the_runner_holds() -> None:
    # w0 caches j3's file. Seeing the whole queue at once, out-of-order runs j3 first; the
    # runner holds only j0 (max_held 1), so j3 reaches its core last and ends last.
    node = NodeSnapshot("w0", 1, 10**9, ("/d/hot.root",), NodeRates(100.0, 100.0, 100.0))
    jobs = (_job(0), _job(1), _job(2), _job(3, url="/d/hot.root"))
    snap = ClusterSnapshot(0.0, (node,), jobs)
    whole = predict(snap, "out-of-order").jobs
    assert whole["j3"] == min(v for v in whole.values() if v is not None)
    queued = predict(snap, "out-of-order", admission=Admission(("j1", "j2", "j3"), 1)).jobs
    assert queued["j3"] == max(v for v in queued.values() if v is not None)


def test_a_queue_of_no_room_is_refused() -> None:
    with pytest.raises(SnapshotError, match="max_held"):
        Admission(("j0",), 0)


def test_the_dispatchers_queue_is_its_order_and_takes_no_turn(sqlite_store: Store) -> None:
    store = sqlite_store
    with store.session() as s:
        tokens = {u: add_user(s, u, g) for u, g in (("ann", "a"), ("bob", "a"), ("cy", "b"))}
    rids = {
        (user, k): submit(store, tokens[user], 2)
        for k, user in enumerate(("ann", "ann", "bob", "cy"))
    }
    runner = StepRunner()
    d = Dispatcher(store, runner, max_held=2)
    d.recover()
    queue = d.admission()
    assert queue.max_held == 2
    assert len(queue.pending) == 8
    assert d.admission() == queue  # asking took no user's turn
    cy = rids[("cy", 3)]
    assert [i for i, job in enumerate(queue.pending) if job.startswith(cy)] == [1, 3]
    assert queue.pending[0] == f"{rids[('ann', 0)]}.0"
    # Groups alternate (a, b), a's users take turns, each user's oldest first: cy's jobs
    # come second and fourth, though cy submitted last.
    assert d.dispatch_once() == 2
    assert [j.id for j in runner.held] == list(queue.pending[:2])
    runner.held.clear()
    with store.session() as s:
        for job in s.query(Job).filter(Job.id.in_(queue.pending[:2])):
            job.state = JobState.COMPLETED.value
    d.dispatch_once()
    assert [j.id for j in runner.held] == list(queue.pending[2:4])


# -- a job's cost ---------------------------------------------------------------------------


def test_a_jobs_cpu_replaces_the_mean_cpu_in_a_slots_time() -> None:
    # A slot takes 1 ms an event, of which 0.1 ms is the processor's CPU (the mean of all
    # packets'); the rest is round trips. A job of twice the mean CPU takes 1.1 ms, not 2.
    assert job_time_per_event(1e-3, 1e-4, 2e-4) == pytest.approx(1.1e-3)
    assert job_time_per_event(1e-3, 1e-4, 0.0) == pytest.approx(0.9e-3)
    # CPU-bound (the slot's time is the CPU's): the job's share, as before.
    assert job_time_per_event(1e-4, 1e-4, 3e-4) == pytest.approx(3e-4)
    assert job_time_per_event(5e-5, 1e-4, 2e-4) == pytest.approx(1e-4)


def test_a_begun_file_goes_at_the_pace_within_a_jobs_run() -> None:
    # Node w0: jobs a and b, four packets of 100 events each, 0.1 s apart; 2 s between
    # the jobs (starting b's sandboxed child). Within a run: 300 events in 0.3 s.
    runs = {
        "w0": [(0.1 * k, 100, "a") for k in range(4)]
        + [(2.3 + 0.1 * k, 100, "b") for k in range(4)]
    }
    assert started_rates(runs) == {"w0": pytest.approx(1000.0)}
    assert started_rates({"w0": [(0.0, 100, "a"), (1.0, 100, "a")]}) == {}  # too short a run
    # The node's rate over all (2.6 s for 700 events) says ~270/s: a job half done on its
    # file is charged the run's pace for the rest, one not begun the node's rate.
    node = NodeSnapshot("w0", 1, 10**9, (), NodeRates(270.0, 270.0, 270.0))
    begun = JobSnapshot("a", "ra", (FileTodo("/d/a", 1000, 10**4, ((500, 1000),)),), 0.0)
    fresh = JobSnapshot("b", "rb", (FileTodo("/d/b", 1000, 10**4, None),), 0.0)
    per_job = {"a": (500.0, 0.05), "old": (500.0, 0.05)}
    got = _costed([begun, fresh], {"a": 1.0, "b": 1.0}, per_job, [node], started=1e-3)
    cost = {j.id: j.cpu_s_per_event for j in got}
    assert cost["a"] == pytest.approx(1e-3)
    assert cost["b"] == pytest.approx(1 / 270.0)


def test_a_job_starting_pays_what_is_left_of_the_start_then_the_runs_pace() -> None:
    # Runs of 400 events: 0.4 s at the pace within a run (1000/s), 1.48 s at the node's
    # rate with the start in it (270/s): starting a job takes the difference.
    runs = {"w0": [(0.1 * k, 100, "a") for k in range(4)]}
    (start,) = start_costs(runs, {"w0": 270.0}, {"w0": 1000.0}).values()
    assert start == pytest.approx(400 / 270 - 0.4)
    assert start_costs(runs, {"w0": 2000.0}, {"w0": 1000.0}) == {"w0": 0.0}  # never < 0
    assert start_costs(runs, {}, {"w0": 1000.0}) == {}
    node = NodeSnapshot("w0", 1, 10**9, (), NodeRates(270.0, 270.0, 270.0))
    starting = JobSnapshot("s", "rs", (FileTodo("/d/s", 1000, 10**4, None),), 0.0, node="w0")
    waiting = JobSnapshot("w", "rw", (FileTodo("/d/w", 1000, 10**4, None),), 0.0)
    per_job = {"old": (500.0, 0.05)}
    got = _costed(
        [starting, waiting],
        {"s": 1.0, "w": 1.0},
        per_job,
        [node],
        started=1e-3,
        start_s=start,
        running_for={"s": 0.5},
    )
    cost = {j.id: j.cpu_s_per_event for j in got}
    # Running for 0.5 s: the rest of its start, then 1000 events at 1 ms.
    assert cost["s"] == pytest.approx((start - 0.5) / 1000 + 1e-3)
    assert cost["w"] == pytest.approx(1 / 270.0)  # not sent yet: the node's rate
    late = _costed(
        [starting], {"s": 1.0}, per_job, [node], started=1e-3, start_s=start,
        running_for={"s": 60.0},
    )  # fmt: skip
    assert late[0].cpu_s_per_event == pytest.approx(1e-3)  # its start is long over


def test_a_jobs_start_is_work_and_a_wait_before_its_submission_is_not() -> None:
    from datasched.service.live import busy_rate

    # Jobs a then b on one node: each a burst of four packets 0.1 s apart, b's after a 1 s
    # start. Packet by packet, the median gap (0.1 s) cuts b's start to 0.3 s; by runs it
    # counts whole: a's 300 events after its first in 0.3 s, b's 400 in 1.3 s.
    run = [(0.1 * k, 100) for k in range(4)] + [(1.3 + 0.1 * k, 100) for k in range(4)]
    jobs = ["a"] * 4 + ["b"] * 4
    by_packet = busy_rate(run)
    by_run = busy_rate(run, jobs)
    assert by_run == pytest.approx(700 / (0.3 + 1.3))
    assert by_packet is not None
    assert by_run is not None
    assert by_packet > 1.5 * by_run
    # Job b was submitted 0.8 s after a's last packet: the node waited for it meanwhile.
    waited = busy_rate(run, jobs, {"a": 0.0, "b": 1.1})
    assert waited == pytest.approx(700 / (0.3 + 0.5))


# -- when a request ended ---------------------------------------------------------------------


CLUSTER = {"nodes": [{"name": "w1", "up": True, "slots_total": 1, "cache_capacity_bytes": 10**9}]}


def test_a_requests_end_is_its_last_jobs_not_its_merge(store: Store) -> None:
    with store.session() as s:
        token = add_user(s, "ann", "g")
    rid = submit(store, token, 1)
    job_id = f"{rid}.0"
    listener = StoreListener(store)
    listener.job_state(job_id, JobState.RUNNING, node="w1")
    listener.packet_done(PacketDone(job_id, f"/d/{rid}/0.root", 0, 50, "w1", 10, 0.1, None))
    watch = EtaWatch(store, lambda: CLUSTER, policy="farm")
    assert watch.refresh() == 1
    listener.job_state(job_id, JobState.COMPLETED, node="w1")
    with store.session() as s:
        ended = s.get(Job, job_id)
        assert ended is not None
        job_end = ended.updated
        req = s.get(Request, rid)
        assert req is not None
        # The merger stores the result ten seconds later: the request's last change.
        req.result = pickle.dumps(1)
        req.updated = job_end + timedelta(seconds=10)
    got = watch.eta(rid)
    assert got is not None
    end = job_end if job_end.tzinfo else job_end.replace(tzinfo=UTC)
    assert got["actual_finish"] == pytest.approx(end.timestamp())
    assert got["actual_finish"] < datetime.now(UTC).timestamp() + 1


# -- a merger that stops -----------------------------------------------------------------------


class _StoppedUnder:
    """A runner stopped while the merge is under way (the daemon stopping)."""

    def __init__(self, merger: list[Merger]) -> None:
        self.merger = merger
        self.calls = 0

    def merge(self, work: ProcessorWork, results: Sequence[bytes]) -> bytes:
        self.calls += 1
        self.merger[0]._stop.set()  # stop() called meanwhile
        raise RunnerError("runner: not running")


def _completed(store: Store, token: str, n: int) -> list[str]:
    ids = []
    listener = StoreListener(store)
    for _ in range(n):
        rid = submit(store, token, 1)
        job_id = f"{rid}.0"
        listener.packet_done(
            PacketDone(job_id, f"/d/{rid}/0.root", 0, 100, "w1", 10, 0.1, pickle.dumps(1))
        )
        listener.job_state(job_id, JobState.COMPLETED, node="w1")
        ids.append(rid)
    return ids


def test_a_merger_stopping_leaves_its_merges_for_later_quietly(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    with store.session() as s:
        token = add_user(s, "ann", "g")
    ids = _completed(store, token, 3)
    holder: list[Merger] = []
    runner = _StoppedUnder(holder)
    merger = Merger(store, runner)
    holder.append(merger)
    with caplog.at_level(logging.INFO, logger="datasched.service.merger"):
        assert merger.merge_once() == 0
    assert runner.calls == 1  # the other two were not tried once it stopped
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    with store.reading() as s:
        assert all(s.get(Request, rid).result is None for rid in ids)  # type: ignore[union-attr]
    assert len(merger.pending()) == 3  # merged at the next start


def test_a_merge_that_fails_while_running_is_still_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    with store.session() as s:
        token = add_user(s, "ann", "g")
    _completed(store, token, 1)

    class Down:
        def merge(self, work: ProcessorWork, results: Sequence[bytes]) -> bytes:
            raise RunnerError("runner: not running")

    with caplog.at_level(logging.ERROR, logger="datasched.service.merger"):
        assert Merger(store, Down()).merge_once() == 0
    assert any("merging the results" in r.getMessage() for r in caplog.records)


# -- a file's run, from its packets' beginning on the worker ----------------------------------


def test_a_files_run_counts_from_its_packets_beginning_not_between_their_storings() -> None:
    from datasched.service.live_rates import SENT_RUNS, sent_paces, started_rates

    # Job a's file on w0: four packets of 2500 events begin together at 10.0 and run side
    # by side; they are stored 2.0 s later, 0.1 s apart. Between storings: 7500 events in
    # 0.3 s (25,000/s); from the beginning: 10,000 events in 2.3 s.
    packets = [(10.0, 12.0 + 0.1 * k, 2500, "a", "/d/a") for k in range(4)]
    assert started_rates({"w0": [(t, n, j) for _, t, n, j, _ in packets]})["w0"] == (
        pytest.approx(25_000.0)
    )
    assert sent_paces({"w0": packets}) == {"w0": pytest.approx(10_000 / 2.3)}
    # The median of the last runs: a file sent in small packets over 20 s, long ago, and
    # the runs of a busier minute before the last SENT_RUNS do not count.
    slow = [(0.0, 20.0, 10_000, "s", "/d/s")]
    busy = [(30.0 + 5 * k, 34.0 + 5 * k, 10_000, f"b{k}", f"/d/b{k}") for k in range(3)]
    recent = [(100.0 + 2 * k, 101.0 + 2 * k, 10_000, f"r{k}", f"/d/r{k}") for k in range(SENT_RUNS)]
    assert sent_paces({"w0": slow + busy + recent}) == {"w0": pytest.approx(10_000.0)}
    assert sent_paces({"w0": [(5.0, 5.0, 100, "z", "/d/z")]}) == {}  # no time: no pace


def test_a_run_that_held_a_sandboxs_start_is_no_pace() -> None:
    from datasched.service.live_rates import cycle_paces, sent_paces, warm_runs

    # On w0, job c's file began with its user's sandbox starting (1.5 s of its 1.6 s), then
    # jobs a and b ran warm: 10,000 events in 0.1 s each, b 0.05 s after a.
    cold = [(0.0, 1.6, 10_000, "c", "/d/c")]
    warm = [(2.0 + 0.15 * k, 2.1 + 0.15 * k, 10_000, j, f"/d/{j}") for k, j in enumerate("ab")]
    runs = warm_runs({"w0": cold + warm, "w1": cold}, {("c", "/d/c")})
    # The start is charged on its own (the snapshot's user_setup_s): the paces are the warm
    # runs', and a node with only a cold run has none; with every run cold, they all count.
    assert runs == {"w0": warm}
    assert sent_paces(runs) == {"w0": pytest.approx(100_000.0)}
    assert cycle_paces(runs) == {"w0": pytest.approx(10_000 / 0.15)}
    assert sent_paces(warm_runs({"w0": cold + warm}, set())) == {"w0": pytest.approx(100_000.0)}
    assert warm_runs({"w1": cold}, {("c", "/d/c")}) == {"w1": cold}


def test_a_begun_file_has_what_is_left_of_its_run_and_a_job_begun_pays_no_start() -> None:
    # A file's run takes 1 ms an event (sent=1e-3, a job of the mean CPU): 1 s for 1000.
    node = NodeSnapshot("w0", 1, 10**9, (), NodeRates(270.0, 270.0, 270.0))
    files = (
        FileTodo("/d/1", 1000, 10**4, ()),  # done
        FileTodo("/d/2", 1000, 10**4, ((500, 1000),)),  # begun 0.6 s ago: 0.4 s left
        FileTodo("/d/3", 1000, 10**4, None),  # not begun: its whole run, no start
    )
    job = JobSnapshot("j", "r", files, 0.0, node="w0")
    per_job = {"j": (1000.0, 0.1)}
    ages = {"j": {"/d/1": 3.0, "/d/2": 0.6}}
    got = _costed(
        [job], {"j": 1.0}, per_job, [node], started=1e-4, start_s=5.0, sent=1e-3, file_age=ages
    )
    # 0.4 s + 1 s over the 1500 events left.
    assert got[0].cpu_s_per_event == pytest.approx((0.4 + 1.0) / 1500)
    # Begun 5 s ago, past its 1 s run: a quarter of a run is left, not its events' worth.
    late = {"j": {"/d/1": 9.0, "/d/2": 5.0}}
    got = _costed([job], {"j": 1.0}, per_job, [node], sent=1e-3, file_age=late)
    assert got[0].cpu_s_per_event == pytest.approx((0.25 + 1.0) / 1500)
    # Its last 100 events left (its last packet under way): at most their worth, 0.1 s,
    # whether past its run or begun 0.2 s ago (0.8 s of the run left by its age).
    tail = replace(job, files=(files[0], FileTodo("/d/2", 1000, 10**4, ((900, 1000),)), files[2]))
    for age in (5.0, 0.2):
        ages = {"j": {"/d/1": 9.0, "/d/2": age}}
        got = _costed([tail], {"j": 1.0}, per_job, [node], sent=1e-3, file_age=ages)
        assert got[0].cpu_s_per_event == pytest.approx((0.1 + 1.0) / 1100)
    # Its next file's packets out for 0.6 s, none stored: the runner's slot age gives it
    # what is left of its run, 0.4 s; a file not out is charged whole whatever the slot.
    out = replace(files[2], under_way=True)
    for third, charged in ((out, 0.4), (files[2], 1.0)):
        nxt = replace(job, files=(files[0], FileTodo("/d/2", 1000, 10**4, ()), third))
        ages = {"j": {"/d/1": 9.0, "/d/2": 2.0}}
        for slot_age, want in (({"j": 0.6}, charged), (None, 1.0)):
            got = _costed(
                [nxt], {"j": 1.0}, per_job, [node], sent=1e-3, file_age=ages, slot_age=slot_age
            )
            assert got[0].cpu_s_per_event == pytest.approx(want / 1000)
    # No beginning known (packets stored before the store kept it): the pace within a run.
    got = _costed([job], {"j": 1.0}, per_job, [node], started=1e-4, sent=1e-3)
    assert got[0].cpu_s_per_event == pytest.approx((500 * 1e-4 + 1000 / 270.0) / 1500)


def test_a_job_whose_files_are_under_way_does_not_wait_for_the_slot() -> None:
    from datasched.service.whatif import under_way_s

    # One slot; the runner holds j0 (not begun, 1000 events at 100/s: 10 s) and j1, whose
    # only file is begun on w0 (its packets under way: 100 events left at 1 ms, 0.1 s).
    # The simulated core runs one job at a time by submission: j1 would end after j0.
    j0 = JobSnapshot("j0", "r0", (FileTodo("/d/0", 1000, 10**4, None),), 0.0, node="w0")
    begun = (FileTodo("/d/1", 1000, 10**4, ((900, 1000),)),)
    j1 = JobSnapshot("j1", "r1", begun, 1.0, cpu_s_per_event=1e-3, node="w0")
    snap = ClusterSnapshot(0.0, (NODE,), (j0, j1))
    got = predict(snap, "farm")
    assert got.jobs["j0"] == pytest.approx(10.0)
    assert got.jobs["j1"] == pytest.approx(0.1)
    assert predict(snap, "farm", rate_factor=0.5).jobs["j1"] == pytest.approx(0.2)
    # Not running, or not priced yet: the simulated queue decides.
    assert under_way_s(JobSnapshot("q", "rq", begun, 1.0, cpu_s_per_event=1e-3)) is None
    mixed = JobSnapshot("m", "rm", (*begun, FileTodo("/d/2", 10, 100, None)), 1.0, node="w0")
    assert under_way_s(mixed) is None
    # Running and priced, a file not begun among its files: its rest at its pace.
    assert under_way_s(replace(mixed, cpu_s_per_event=1e-3)) == pytest.approx(0.11)
    waiting = predict(ClusterSnapshot(0.0, (NODE,), (j0, replace(j1, node=None))), "farm").jobs
    assert (waiting["j1"] or 0.0) > 10.0


def _one_file_done_one_half_back(
    listener: StoreListener,
    rid: str,
    done: tuple[float, float | None],
    half: tuple[float, float | None],
) -> None:
    """On node w1, request ``rid``'s job 0 completes its file of 1000 events in two packets
    begun and slotted at ``done``, and job 1 runs and has the first half of its file back,
    one packet begun and slotted at ``half`` (slotted None: a runtime that did not say)."""
    listener.job_state(f"{rid}.0", JobState.RUNNING, node="w1")
    for a in (0, 500):
        packet = PacketDone(f"{rid}.0", f"/d/{rid}/0.root", a, a + 500, "w1", 10, 0.05)
        listener.packet_done(replace(packet, started_at=done[0], slot_at=done[1]))
    listener.job_state(f"{rid}.0", JobState.COMPLETED, node="w1")
    listener.job_state(f"{rid}.1", JobState.RUNNING, node="w1")
    first = PacketDone(f"{rid}.1", f"/d/{rid}/1.root", 0, 500, "w1", 10, 0.05)
    listener.packet_done(replace(first, started_at=half[0], slot_at=half[1]))


def test_the_store_keeps_when_packets_began_and_the_snapshot_prices_runs_from_it(
    store: Store,
) -> None:
    from datasched.service.live import live_snapshot

    with store.session() as s:
        token = add_user(s, "ann", "g")
    rid = submit(store, token, 2, events=1000)
    listener = StoreListener(store)
    now = datetime.now(UTC).timestamp()
    # Job 0's file: two packets that began 4 s ago, stored now: 1000 events in 4 s.
    # Job 1's file: half of it back, its packets began 2 s ago (250 events/s again).
    _one_file_done_one_half_back(listener, rid, (now - 4.0, None), (now - 2.0, None))
    snap = live_snapshot(store, CLUSTER)
    (job,) = snap.jobs
    # Its run takes 1000 / 250 = 4 s, 2 s of which are over: 2 s for its 500 events left
    # (less the moments the store took since ``now``). Priced from the storings alone,
    # 500 events in no time would be a rate of nothing.
    assert job.cpu_s_per_event is not None
    assert job.cpu_s_per_event * 500 == pytest.approx(2.0, abs=0.2)


# -- a file's run, from its packets getting the slot -------------------------------------------


def test_a_files_run_leaves_out_other_jobs_packets_on_the_slot() -> None:
    from datasched.service.live_rates import sent_paces

    # One slot; jobs a and b each sent two packets of 5000 events at 0.0, which took the
    # slot in turns: a, b, a, b, each for a second, stored as it left the slot. From the
    # first slot to the last storing, a's file took 3 s; it held the slot 2 s of them.
    turns = [("a", 0.0), ("b", 1.0), ("a", 2.0), ("b", 3.0)]
    packets = [(t, t + 1.0, 5000, job, f"/d/{job}") for job, t in turns]
    assert sent_paces({"w0": packets}) == {"w0": pytest.approx(5000.0)}
    # Packets side by side (spans overlapping) count their time once.
    side = [(0.0, 2.0, 5000, "c", "/d/c"), (0.5, 2.0, 5000, "c", "/d/c")]
    assert sent_paces({"w0": side}) == {"w0": pytest.approx(5000.0)}


def test_runs_count_from_the_slot_and_price_a_job_sent_with_no_packet_back(
    store: Store,
) -> None:
    from datasched.service.live import live_snapshot

    with store.session() as s:
        token = add_user(s, "ann", "g")
    rid = submit(store, token, 3, events=1000)
    listener = StoreListener(store)
    now = datetime.now(UTC).timestamp()
    # Job 0's file: two packets whose tasks began 10 s ago, but which waited 6 s behind
    # other jobs' packets on the node: they got the slot 4 s ago and are stored now. The
    # run is 1000 events in 4 s, not in 10.
    # Job 1's file: half of it back; its packets began 3 s ago and got the slot 2 s ago.
    _one_file_done_one_half_back(
        listener,
        rid,
        (now - 10.0, now - 4.0),
        (now - 3.0, now - 2.0),
    )
    # Job 2 was sent to w1 and has no packet back yet.
    listener.job_state(f"{rid}.2", JobState.RUNNING, node="w1")
    with store.session() as s:  # stored at ``now`` exactly, however long storing took
        for row in s.scalars(select(Packet)):
            row.created = datetime.fromtimestamp(now, UTC)
    snap = live_snapshot(store, CLUSTER)
    since = datetime.now(UTC).timestamp() - now  # the moments since ``now``
    got = {j.id: j for j in snap.jobs}
    one, two = got[f"{rid}.1"].cpu_s_per_event, got[f"{rid}.2"].cpu_s_per_event
    assert one is not None
    assert two is not None
    # Job 1: a run of 4 s, 2 s of it over since its slot: 2 s for its 500 events left (less
    # the moments since). From the tasks' beginning it would be a run of 10 s, 3 s over: 7 s.
    assert 2.0 - since - 1e-6 <= one * 500 <= 2.0 + 1e-6
    # Job 2: its file's whole run, 4 s (a job starting no longer pays the rates' start),
    # less the moments it has been running.
    assert 4.0 - since - 1e-6 <= two * 1000 <= 4.0 + 1e-6


def test_a_job_sent_with_no_packet_back_has_its_first_run_less_its_time_running() -> None:
    # Runs of 1 ms an event (sent=1e-3, a job of the mean CPU): 1 s a file of 1000 events.
    node = NodeSnapshot("w0", 1, 10**9, (), NodeRates(270.0, 270.0, 270.0))
    files = (FileTodo("/d/1", 1000, 10**4, None), FileTodo("/d/2", 1000, 10**4, None))
    job = JobSnapshot("j", "r", files, 0.0, node="w0")
    per_job = {"j": (1000.0, 0.1)}

    def priced(running_for: float) -> float:
        got = _costed(
            [job], {"j": 1.0}, per_job, [node], sent=1e-3, running_for={"j": running_for}
        )[0].cpu_s_per_event
        assert got is not None
        return got * 2000

    # Running for 0.6 s: its first file's packets are under way, 0.4 s left of that run,
    # then the second file's whole run.
    assert priced(0.6) == pytest.approx(0.4 + 1.0)
    # Running for 5 s, past its run: a quarter of the run is left, never less.
    assert priced(5.0) == pytest.approx(0.25 + 1.0)
    assert priced(0.0) == pytest.approx(2.0)


def test_a_job_not_sent_yet_is_priced_from_the_nodes_file_cycles_not_their_busy_rate() -> None:
    from datasched.service.live_rates import IDLE_FACTOR, cycle_paces

    # Node w0, one slot: job a's file (1000 events) gets the slot at 0.0 and is stored at
    # 1.0; job b's gets it at 1.5 (submitted at 0.2) and is stored at 2.5; job c's gets it
    # at 9.0 and is stored at 10.0, but c was submitted at 8.5. A file's cycle: its run
    # and the gap before it: b's 1 s + 0.5 s; c's 1 s + 0.5 s (from its submission: the
    # node had no such job before). The first run's gap is not known: no sample.
    packets = [
        (0.0, 1.0, 1000, "a", "/d/a"),
        (1.5, 2.5, 1000, "b", "/d/b"),
        (9.0, 10.0, 1000, "c", "/d/c"),
    ]
    submitted = {"a": 0.0, "b": 0.2, "c": 8.5}
    assert cycle_paces({"w0": packets}, submitted) == {"w0": pytest.approx(1000 / 1.5)}
    # Without c's submission its gap runs from b's storing: 6.5 s, a wait for work, counted
    # at most IDLE_FACTOR runs; the median of the two cycles.
    assert cycle_paces({"w0": packets}) == {
        "w0": pytest.approx((1000 / 1.5 + 1000 / (1.0 + IDLE_FACTOR)) / 2)
    }
    assert cycle_paces({"w1": packets[:1]}) == {}  # one run: no gap known
    # Two packets side by side of one file count as one run, with no gap between them.
    side = [(0.0, 1.0, 500, "a", "/d/a"), (0.2, 1.0, 500, "a", "/d/a"), *packets[1:2]]
    assert cycle_paces({"w0": side}, submitted) == {"w0": pytest.approx(1000 / 1.5)}
    # A run that began with its user's sandbox starting (b's, cold) is no sample: the
    # simulation charges the start on its own. It still ends the gap before the next run:
    # c's cycle counts from b's storing, not from a's, whichever is later with c's
    # submission (8.5).
    assert cycle_paces({"w0": packets}, submitted, cold={("b", "/d/b")}) == {
        "w0": pytest.approx(1000 / 1.5)
    }
    late = [*packets[:2], (3.0, 4.0, 1000, "d", "/d/d")]
    # d's gap from b's storing (2.5) is 0.5 s: 1000 / 1.5; from a's it would be 2 s.
    assert cycle_paces({"w0": late}, {}, cold={("b", "/d/b")}) == {"w0": pytest.approx(1000 / 1.5)}
    assert cycle_paces({"w0": packets[:2]}, submitted, cold={("b", "/d/b")}) == {}

    # A job not sent (no node, no packet) is priced at the cycle (1.5 ms an event), not at
    # the nodes' busy rate (250 events/s: 4 ms), which held every wait since submission;
    # without a cycle measured, at the busy rate as before.
    node = NodeSnapshot("w0", 1, 10**9, (), NodeRates(250.0, 250.0, 250.0))
    queued = JobSnapshot("q", "rq", (FileTodo("/d/q", 1000, 10**4, None),), 0.0)
    per_job = {"q": (1000.0, 1e-4)}  # a job of the mean CPU, 0.1 us an event
    got = _costed([queued], {"q": 1.0}, per_job, [node], sent=1e-3, cycle=1.5e-3)
    assert got[0].cpu_s_per_event == pytest.approx(1.5e-3)
    got = _costed([queued], {"q": 1.0}, per_job, [node], sent=1e-3)
    assert got[0].cpu_s_per_event == pytest.approx(1 / 250.0)
    # A job running is priced from its runs, whatever the cycle.
    running = replace(queued, node="w0")
    got = _costed(
        [running], {"q": 1.0}, per_job, [node], sent=1e-3, cycle=1.5e-3, running_for={"q": 0.0}
    )
    assert got[0].cpu_s_per_event == pytest.approx(1e-3)


def test_the_snapshot_prices_a_job_not_sent_from_the_cycles_held_or_pending(
    store: Store,
) -> None:
    from datasched.service.live import live_snapshot

    with store.session() as s:
        token = add_user(s, "ann", "g")
    earlier = submit(store, token, 1, events=1000)
    rid = submit(store, token, 4, events=1000)
    listener = StoreListener(store)
    now = datetime.now(UTC).timestamp()
    # ann's sandbox on w1 started 30 s ago, for an earlier request (a cold start: its run is
    # no pace), so the runs below are warm.
    listener.job_state(f"{earlier}.0", JobState.RUNNING, node="w1")
    first = PacketDone(f"{earlier}.0", f"/d/{earlier}/0.root", 0, 1000, "w1", 10, 0.1)
    listener.packet_done(replace(first, started_at=now - 31.0, slot_at=now - 31.0))
    listener.job_state(f"{earlier}.0", JobState.COMPLETED, node="w1")
    # On w1: job 0's file ran from its slot 4 s ago to now, then job 1's first half from
    # 2 s ago: the second run, 500 events in 2 s with no gap before it, is a cycle of 250
    # events a second (the first run's gap is not known).
    _one_file_done_one_half_back(listener, rid, (now - 4.0, now - 4.0), (now - 2.0, now - 2.0))
    listener.job_state(f"{rid}.2", JobState.QUEUED)  # held by the runner, not sent
    with store.session() as s:  # stored at ``now`` exactly, however long storing took
        for row in s.scalars(select(Packet)):
            at = now - 30.0 if row.job_id == f"{earlier}.0" else now
            row.created = datetime.fromtimestamp(at, UTC)
    got = {j.id: j.cpu_s_per_event for j in live_snapshot(store, CLUSTER).jobs}
    held, pending = got[f"{rid}.2"], got[f"{rid}.3"]  # job 3 is still the dispatcher's
    assert held is not None
    assert pending is not None
    # Both at the cycle, not at w1's rate: with too few packets for a wall-clock one, its
    # events per CPU second (1500 events in three packets of 0.05 s: 0.1 s for 1000).
    assert held * 1000 == pytest.approx(4.0)
    assert pending * 1000 == pytest.approx(4.0)


# -- a node's slowness is not a fetch ---------------------------------------------------------


def test_a_slow_node_does_not_pay_its_slowness_again_as_a_fetch() -> None:
    from datasched.service.whatif import _FREE, _node_model

    # The live snapshot gives each node one wall-clock rate for every source (its reads,
    # wherever from, are in it). w0 does 2000 events/s, w1 1000: the mean is 1500. A read
    # from a peer or from storage costs what it takes beyond the node's own cached rate:
    # nothing here. Against the mean, w1 paid 1/1000 - 1/1500 s an event more for every
    # file it did not cache (at 100 bytes an event, a link of 300 kB/s), w0 nothing less.
    job = JobSnapshot("j", "r", (FileTodo("/d/f", 1000, 10**5, None),), 0.0)
    nodes = (
        NodeSnapshot("w0", 1, 10**9, (), NodeRates(2000.0, 2000.0, 2000.0)),
        NodeSnapshot("w1", 1, 10**9, (), NodeRates(1000.0, 1000.0, 1000.0)),
    )
    built, cpu = _node_model(ClusterSnapshot(0.0, nodes, (job,)), 100.0)
    assert cpu == pytest.approx(1 / 1500)
    assert [n.tertiary_bytes_per_s for n in built] == [_FREE, _FREE]
    assert [n.network_bytes_per_s for n in built] == [_FREE, _FREE]
    # Storage measured slower than the node's cache: 1/500 - 1/1000 s an event more, 100
    # bytes in a millisecond (against the mean it was 1/500 - 1/1500: 75 kB/s).
    slow = (nodes[0], NodeSnapshot("w1", 1, 10**9, (), NodeRates(1000.0, 1000.0, 500.0)))
    built, _ = _node_model(ClusterSnapshot(0.0, slow, (job,)), 100.0)
    assert built[1].tertiary_bytes_per_s == pytest.approx(100_000.0)
    # A node that measured no cached rate is measured against the nodes' mean, as before.
    bare = (nodes[0], NodeSnapshot("w1", 1, 10**9, (), NodeRates(tertiary_events_per_s=500.0)))
    built, _ = _node_model(ClusterSnapshot(0.0, bare, (job,)), 100.0)
    assert built[1].tertiary_bytes_per_s == pytest.approx(100 / (1 / 500 - 1 / 2000))


def test_a_running_jobs_rest_stays_on_its_node() -> None:
    """The simulated core hands every job to a slot anew at the snapshot: with ``w0`` busy
    with an older job's 10 s, it sent the rest of ``ann``'s job (one file done, the next not
    begun, 1 s at its pace) to ``w1``, where her sandbox would start (5 s): 6 s. Her job's
    subjob holds that rest on ``w0``, where her sandbox is warm: 1 s."""
    from datasched.service.whatif import under_way_s

    w1 = replace(NODE, name="w1")
    done = FileTodo("/d/1", 1000, 10**4, ())
    rest = FileTodo("/d/2", 1000, 10**4, None)
    hers = JobSnapshot("a", "ra", (done, rest), 1.0, user="ann", cpu_s_per_event=1e-3, node="w0")
    old = JobSnapshot(
        "o",
        "ro",
        (FileTodo("/d/3", 10_000, 10**5, ((0, 10_000),)),),
        0.0,
        user="bob",
        cpu_s_per_event=1e-3,
        node="w0",
    )
    nodes = (replace(NODE, warm_users=("ann", "bob")), w1)
    snap = ClusterSnapshot(0.0, nodes, (old, hers), user_setup_s=5.0)
    assert predict(snap, "farm").jobs == pytest.approx({"o": 10.0, "a": 1.0})
    assert predict(snap, "farm", rate_factor=2.0).jobs["a"] == pytest.approx(0.5)
    # Her next file cached on w1 and not on w0: out-of-order sends it there when a slot
    # frees, a wait the simulation prices (here w1 is free: 1 s, and her start there).
    cached = replace(snap, nodes=(nodes[0], replace(w1, cached=("/d/2",))))
    assert under_way_s(hers, 1.0, {"/d/2": {"w1"}}) is None
    assert predict(cached, "farm").jobs["a"] == pytest.approx(6.0)
    # Its packets out already (on whichever node): at its pace, wherever it is cached.
    flying = replace(hers, files=(done, replace(rest, under_way=True)))
    assert under_way_s(flying, 1.0, {"/d/2": {"w1"}}) == pytest.approx(1.0)
    # Cached on its own node too: it may stay there.
    assert under_way_s(hers, 1.0, {"/d/2": {"w0", "w1"}}) == pytest.approx(1.0)
    # Not begun anywhere (queued): the simulated queue decides, the start charged.
    queued = replace(snap, jobs=(old, replace(hers, node=None, cpu_s_per_event=None)))
    assert (predict(queued, "farm").jobs["a"] or 0.0) > 5.0
