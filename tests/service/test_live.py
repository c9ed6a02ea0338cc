"""The daemon's live snapshot (what the simulator predicts from) and the what-if route wired
into the application: a request held running has its events still to do in the snapshot,
and ``GET /api/v1/whatif`` answers its ETA under each policy asked for, to users with a
token only."""

from __future__ import annotations

import copy
import pickle
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from datasched.service.api.deps import Limits
from datasched.service.app import build_state, create_app
from datasched.service.contracts import (
    ElementaryJob,
    FileRef,
    JobState,
    MetaJobRequest,
    PacketDone,
    ProcessorWork,
)
from datasched.service.daemon import StoreListener
from datasched.service.live import live_snapshot
from datasched.service.store import ops
from datasched.service.store.db import Store
from datasched.service.users import add_user, authenticate
from svc_support import FakeLanguage, FakeRunner, one_running_job, seed

CLUSTER = {
    "nodes": [
        {
            "name": "w1",
            "up": True,
            "slots": [{"slot": 0, "job": None}],
            "cache_capacity_bytes": 10**9,
            "cached_urls": ["/d/0.root"],
        },
        {"name": "w0", "up": True, "slots_total": 2, "cache_capacity_bytes": 10**9},
        {"name": "gone", "up": False, "slots": 1},
    ]
}


def test_the_snapshot_has_what_is_left_of_open_jobs_and_rates_from_packets(
    sqlite_store: Store,
) -> None:
    with sqlite_store.session() as s:
        caller = authenticate(s, add_user(s, "ann", "g"))
        assert caller is not None
        rid = ops.new_request_id()
        work = ProcessorWork("p.py:P")
        jobs = [
            ElementaryJob(
                rid, 0, (FileRef("/d/0.root", 100, 1000), FileRef("/d/1.root", 50, 500)), work
            ),
            ElementaryJob(rid, 1, (FileRef("/d/2.root", 40, 400),), work),
        ]
        ops.store_accepted(
            s, caller, rid, "raw", "application/yaml", MetaJobRequest("ann", work, ()), jobs
        )
    listener = StoreListener(sqlite_store)
    first, second = jobs[0].id, jobs[1].id
    listener.job_state(first, JobState.RUNNING, node="w1")
    for a, b in ((0, 30), (60, 100)):
        listener.packet_done(PacketDone(first, "/d/0.root", a, b, "w1", 10, 0.5, pickle.dumps(1)))
    listener.job_state(second, JobState.RUNNING, node="w0")
    listener.packet_done(PacketDone(second, "/d/2.root", 0, 40, "w0", 10, 2.0, pickle.dumps(1)))
    listener.job_state(second, JobState.COMPLETED, node="w0")

    # w1's slot runs the first job (the runner's view).
    cluster = copy.deepcopy(CLUSTER)
    cluster["nodes"][0]["slots"] = [{"slot": 0, "job": first, "since": time.time() - 1.0}]
    snap = live_snapshot(sqlite_store, cluster)
    snap.check()
    assert [n.name for n in snap.nodes] == ["w0", "w1"]  # the lost node left out, sorted
    w0, w1 = snap.nodes
    assert (w0.slots, w1.slots) == (2, 1)
    assert w1.cached == ("/d/0.root",)
    assert w1.rates.cached_events_per_s == pytest.approx(70 / 1.0)
    assert w0.rates.cached_events_per_s == pytest.approx(40 / 2.0)
    assert [j.id for j in snap.jobs] == [first]  # the completed job is not open
    (job,) = snap.jobs
    assert job.node == "w1"
    assert [(f.url, f.todo) for f in job.files] == [
        ("/d/0.root", ((30, 60),)),
        ("/d/1.root", ((0, 50),)),
    ]
    assert job.events_left == 80
    # In no slot (between two files, out-of-order may send its next one to another node):
    # it waits as a queued job does, with its files' progress.
    (waiting,) = live_snapshot(sqlite_store, CLUSTER).jobs
    assert waiting.node is None
    assert waiting.events_left == 80


@pytest.fixture
def held(sqlite_store: Store) -> Iterator[tuple[TestClient, dict[str, str]]]:
    runner = FakeRunner(packet=1, hold_users=frozenset({"ann"}))
    tokens = seed(sqlite_store)
    state = build_state(
        sqlite_store,
        FakeLanguage(),
        runner=runner,
        period_s=0.05,
        limits=Limits(rate_per_s=1000, burst=1000),
    )
    with TestClient(create_app(state)) as client:
        yield client, tokens
        for rid in [
            r["id"]
            for r in client.get(
                "/api/v1/requests", headers={"Authorization": f"Bearer {tokens['root']}"}
            ).json()["requests"]
        ]:
            client.delete(
                f"/api/v1/requests/{rid}", headers={"Authorization": f"Bearer {tokens['root']}"}
            )
    runner.wait()


def test_whatif_answers_the_eta_of_a_running_request_per_policy(
    held: tuple[TestClient, dict[str, str]],
) -> None:
    client, tokens = held
    h = {"Authorization": f"Bearer {tokens['ann']}"}
    sent = client.post(
        "/api/v1/requests",
        content="title: zz\nprocessor: p.py:P\ninput: [{catalog: year=2004}]\n",
        headers={**h, "Content-Type": "application/yaml"},
    )
    assert sent.status_code == 201, sent.text
    rid = sent.json()["id"]
    assert client.get("/api/v1/whatif?policy=farm").status_code == 401
    got = client.get("/api/v1/whatif?policy=farm&policy=out-of-order", headers=h)
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["policies"] == ["farm", "out-of-order"]
    assert rid in str(body["requests"])
    bad = client.get("/api/v1/whatif?policy=no-such-policy", headers=h)
    assert bad.status_code == 400


def test_eta_watch_keeps_each_open_request_s_eta_and_its_error_once_ended(
    sqlite_store: Store,
) -> None:
    from datasched.service.eta_watch import EtaWatch

    rid, job = one_running_job(sqlite_store)
    listener = StoreListener(sqlite_store)
    listener.packet_done(PacketDone(job, "/d/0.root", 0, 50, "w1", 10, 1.0, None))
    watch = EtaWatch(sqlite_store, lambda: CLUSTER, policy="farm")
    assert watch.eta(rid) is None
    assert watch.refresh() == 1
    eta = watch.eta(rid)
    assert eta is not None
    assert eta["policy"] == "farm"
    assert eta["actual_finish"] is None
    # 50 events left at the 50 events/s measured on w1: about a second (plus reads).
    assert 0.5 < eta["predicted_finish"] - eta["predicted_at"] < 30
    assert eta["error_at_submission_s"] is None
    listener.packet_done(PacketDone(job, "/d/0.root", 50, 100, "w1", 10, 1.0, None))
    listener.job_state(job, JobState.COMPLETED, node="w1")
    assert watch.refresh() == 0  # nothing open: no prediction, the record closed
    ended = watch.eta(rid)
    assert ended is not None
    assert ended["actual_finish"] is not None
    assert ended["error_at_submission_s"] == pytest.approx(
        ended["predicted_finish"] - ended["actual_finish"]
    )
    assert ended["seconds_left"] is None
    assert watch.median_error() is not None


def test_a_file_with_packets_out_on_a_worker_is_under_way(sqlite_store: Store) -> None:
    _, job = one_running_job(sqlite_store, node="w1")
    idle = live_snapshot(sqlite_store, CLUSTER)
    assert [f.under_way for f in idle.jobs[0].files] == [False]
    out = {"slot": 0, "job": job, "files_in_flight": ["/d/0.root"]}
    cluster = {"nodes": [{**CLUSTER["nodes"][0], "slots": [out]}, *CLUSTER["nodes"][1:]]}
    (f,) = live_snapshot(sqlite_store, cluster).jobs[0].files
    assert f.under_way
    assert f.todo == ((0, 100),)  # out, none of it stored yet
    # Another job's packets, or none, on that slot: not this file's.
    other = {"nodes": [{**CLUSTER["nodes"][0], "slots": [{**out, "job": "x.0"}]}]}
    assert not live_snapshot(sqlite_store, other).jobs[0].files[0].under_way
