"""Warm sandboxes and the cost of a cold one, from the packets stored
(:mod:`datasched.service.warm_sandboxes`): worked out by hand on made-up packets, and on the
store through the live snapshot."""

from __future__ import annotations

import pickle
import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import update

from datasched.sandbox.confine import IDLE_S, KEEP
from datasched.service.contracts import (
    FileTodo,
    JobSnapshot,
    NodeSnapshot,
    PacketDone,
)
from datasched.service.daemon import StoreListener
from datasched.service.live import live_snapshot
from datasched.service.store.db import Store
from datasched.service.store.models import Packet
from datasched.service.warm_sandboxes import (
    LATER,
    cold_flags,
    cold_starts,
    start_left,
    starting_sandboxes,
    warm_sandboxes,
)
from svc_support import one_running_job

T = 1000.0  # the history begins here


def test_a_cold_packet_costs_its_time_over_its_users_next_ones() -> None:
    since = 0.0
    rows = [
        # ann on w0: cold at T (nothing within the idle time before), 2.5 s from its slot
        # to its storing; then 0.5, 0.7, 0.6: the start cost 2.5 - 0.6 = 1.9.
        ("w0", "ann", T, T + 2.5),
        ("w0", "ann", T + 2.5, T + 3.0),
        ("w0", "ann", T + 3.0, T + 3.7),
        ("w0", "ann", T + 3.7, T + 4.3),
        # bob on w0 as well: cold, 1.0 over a later 0.2.
        ("w0", "bob", T + 5.0, T + 6.0),
        ("w0", "bob", T + 6.0, T + 6.2),
        # ann again on w0 after the idle time: cold again, 1.5 over 0.5.
        ("w0", "ann", T + 4.3 + IDLE_S + 1, T + 4.3 + IDLE_S + 2.5),
        ("w0", "ann", T + 4.3 + IDLE_S + 2.5, T + 4.3 + IDLE_S + 3.0),
        # cy on w1: cold, but nothing after it to measure against.
        ("w1", "cy", T, T + 3.0),
    ]
    assert sorted(round(c, 9) for c in cold_starts(rows, since)) == [0.8, 1.0, 1.9]


def test_a_first_packet_soon_after_the_history_begins_is_not_taken_as_cold() -> None:
    # Its user may have run there just before what was read.
    rows = [("w0", "ann", IDLE_S / 2, IDLE_S / 2 + 3.0), ("w0", "ann", 40.0, 40.5)]
    assert cold_starts(rows, 0.0) == []


def test_a_user_pushed_out_of_a_nodes_kept_sandboxes_starts_again() -> None:
    # On w0, ann, then KEEP other users, then ann again within the idle time: the worker
    # kept the KEEP most recent users' sandboxes and closed ann's, so her packet is cold.
    others = [f"u{k}" for k in range(KEEP)]
    rows = [("w0", "ann", T, T + 2.0)]
    rows += [("w0", u, T + 3.0 + k, T + 3.5 + k) for k, u in enumerate(others)]
    back = T + 4.0 + KEEP
    rows += [("w0", "ann", back, back + 2.0), ("w0", "ann", back + 2.0, back + 2.5)]
    flags = cold_flags(rows, 0.0)
    assert flags == [True] * (1 + KEEP) + [True, False]
    # One other user fewer: ann's sandbox was still kept.
    fewer = rows[:KEEP] + rows[1 + KEEP :]
    assert cold_flags(fewer, 0.0) == [True] * KEEP + [False, False]
    assert cold_starts(rows, 0.0)[-1] == pytest.approx(1.5)


def test_only_the_next_warm_packets_count() -> None:
    rows = [("w0", "ann", T, T + 3.0)]
    rows += [("w0", "ann", T + 3.0 + k, T + 3.0 + k + 0.5) for k in range(LATER)]
    rows += [("w0", "ann", T + 20.0, T + 30.0)]  # one more, slow: past the LATER counted
    assert cold_starts(rows, 0.0) == [pytest.approx(2.5)]


def _a_start_measured_on_w1(store: Store) -> tuple[str, float]:
    """ann's job running on w1 with two packets stored now: the first got its slot 2 s
    before (her sandbox started), the second 0.5 s before: a start of 1.5 s. (The job's
    id, and now.) Both are stored at ``now`` exactly, whenever the store wrote them: on a
    busy machine the second write came a few tenths of a second after the first, and the
    start measured that much shorter."""
    _, job = one_running_job(store)
    listener = StoreListener(store)
    now = time.time()
    for (a, b), slotted in (((0, 30), now - 2.0), ((30, 60), now - 0.5)):
        listener.packet_done(
            PacketDone(job, "/d/0.root", a, b, "w1", 10, 0.1, pickle.dumps(1), slotted, slotted)
        )
    with store.session() as s:
        s.execute(
            update(Packet)
            .where(Packet.job_id == job)
            .values(created=datetime.fromtimestamp(now, UTC))
        )
    return job, now


def test_the_snapshot_names_the_warm_users_and_the_start_cost(sqlite_store: Store) -> None:
    job, _ = _a_start_measured_on_w1(sqlite_store)
    warm = warm_sandboxes(sqlite_store)
    assert warm.users == {"w1": ("ann",)}
    assert warm.setup_s == pytest.approx(1.5)
    assert warm.starts == (warm.setup_s,)  # the one start measured, kept for start_left
    assert warm.cold == {(job, "/d/0.root")}  # the run that held the start
    cluster = {"nodes": [{"name": n, "up": True, "slots": 1} for n in ("w0", "w1")]}
    snap = live_snapshot(sqlite_store, cluster)
    assert [(n.name, n.warm_users) for n in snap.nodes] == [("w0", ()), ("w1", ("ann",))]
    assert snap.user_setup_s == warm.setup_s
    assert [j.user for j in snap.jobs] == ["ann"]


def test_a_job_sent_to_a_cold_node_pays_what_is_left_of_its_start_and_warms_it() -> None:
    files = (FileTodo("/d/1", 1000, 10**4, None),)
    sent = JobSnapshot("s", "r", files, 0.0, user="ann", cpu_s_per_event=1e-3, node="w0")
    back = JobSnapshot("b", "r", files, 0.0, user="ann", cpu_s_per_event=1e-3, node="w1")
    queued = JobSnapshot("q", "r", files, 0.0, user="ann", cpu_s_per_event=1e-3)
    unpriced = JobSnapshot("u", "r", files, 0.0, user="cy", node="w1")
    there = JobSnapshot("t", "r", files, 0.0, user="bob", cpu_s_per_event=1e-3, node="w1")
    nodes = (NodeSnapshot("w0"), NodeSnapshot("w1", warm_users=("bob",)))
    jobs, warmed = starting_sandboxes(
        (sent, back, queued, unpriced, there), nodes, 1.5, {"s": 0.5, "b": 0.1}, {("b", "w1")}
    )
    # Sent 0.5 s ago, none of its packets back: 1.5 - 0.5 s of its start left, over its
    # 1,000 events; w0 is warm for ann from then on, so the simulation charges it once.
    assert jobs[0].cpu_s_per_event == pytest.approx(1e-3 + 1.0 / 1000)
    assert warmed[0].warm_users == ("ann",)
    # A packet of its back (its start paid), queued, not priced, or on a node warm for its
    # user: as they were.
    assert jobs[1:] == (back, queued, unpriced, there)
    assert warmed[1].warm_users == ("bob",)
    # Its packets back from another node only (out-of-order sent its next file to w1, cold
    # for ann): it starts again there.
    moved, warmed = starting_sandboxes((back,), nodes, 1.5, {"b": 0.1}, {("b", "w0")})
    assert moved[0].cpu_s_per_event == pytest.approx(1e-3 + 1.4 / 1000)
    assert warmed[1].warm_users == ("bob", "ann")  # the least recently used first
    # Running for longer than a start: nothing left of it, the node warm all the same.
    late, warmed = starting_sandboxes((sent,), nodes, 1.5, {"s": 4.0}, set())
    assert late == (sent,)
    assert warmed[0].warm_users == ("ann",)
    # No start measured: nothing to charge.
    assert starting_sandboxes((sent,), nodes, None, {}, set()) == ((sent,), nodes)
    # With the starts measured, one under way longer than their median is not done: it has
    # left what the longer ones had left after as long (2.4 - 2.0 and 3.0 - 2.0: a median
    # of 0.7 s).
    starts = (1.0, 1.2, 1.5, 2.4, 3.0)
    slow, _ = starting_sandboxes((sent,), nodes, 1.5, {"s": 2.0}, set(), starts)
    assert slow[0].cpu_s_per_event == pytest.approx(1e-3 + 0.7 / 1000)


def test_what_is_left_of_a_start_is_the_median_of_the_longer_starts_rest() -> None:
    starts = (1.0, 1.2, 1.5, 2.4, 3.0)
    assert start_left(starts, 1.5, 0.0) == 1.5  # just begun: the median start
    assert start_left(starts, 1.5, 1.1) == pytest.approx(0.85)  # 0.1, 0.4, 1.3, 1.9
    assert start_left(starts, 1.5, 3.0) == 0.0  # longer than any measured
    assert start_left((), 1.5, 1.0) == 0.5  # nothing measured: the median less its age
    assert start_left((), 1.5, 2.0) == 0.0


def test_a_job_whose_next_packets_went_to_a_cold_node_pays_its_start_there(
    sqlite_store: Store,
) -> None:
    job, _ = _a_start_measured_on_w1(sqlite_store)

    def cluster(node: str) -> dict[str, object]:
        """The runner's view: ``node``'s slot runs the job, for half a second now (counted
        when the view is asked for, not from when the packets were stored)."""
        since = time.time() - 0.5
        return {
            "nodes": [
                {
                    "name": n,
                    "up": True,
                    "slots": [{"slot": 0, "job": job if n == node else None, "since": since}],
                }
                for n in ("w0", "w1")
            ]
        }

    (there,) = live_snapshot(sqlite_store, cluster("w1")).jobs
    moved = live_snapshot(sqlite_store, cluster("w0"))
    (away,) = moved.jobs
    # The store says w1; the runner runs it on w0, cold for ann: about 1.5 - 0.5 s of the
    # start is left to pay there, on top of the same 40 events' rest, and the simulation
    # then takes w0 as warm for ann.
    assert (there.node, away.node) == ("w1", "w0")
    assert there.cpu_s_per_event is not None
    assert away.cpu_s_per_event is not None
    extra = (away.cpu_s_per_event - there.cpu_s_per_event) * away.events_left
    assert extra == pytest.approx(1.0, abs=0.25)
    assert {n.name: n.warm_users for n in moved.nodes}["w0"] == ("ann",)
