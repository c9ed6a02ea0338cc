"""The daemon survives its restart: a runner dies mid-way, a new daemon on the same store
requeues what was held and hands each job its ranges done; every event is counted once."""

from __future__ import annotations

import itertools
import time

import pytest
from sqlalchemy import func, select

from datasched import safepickle
from datasched.runtime.outputs import merge_all
from datasched.service.contracts import (
    ElementaryJob,
    FileRef,
    JobState,
    MetaJobRequest,
    ProcessorWork,
)
from datasched.service.daemon import Dispatcher
from datasched.service.store import ops
from datasched.service.store.db import Store
from datasched.service.store.models import Packet, Request
from datasched.service.users import add_user, authenticate
from svc_support import FakeRunner

EVENTS = (47, 30, 23)


def _submit(store: Store) -> str:
    with store.session() as s:
        caller = authenticate(s, add_user(s, "ann", "g"))
        assert caller is not None
        rid = ops.new_request_id()
        work = ProcessorWork("p.py:P")
        jobs = [
            ElementaryJob(rid, i, (FileRef(f"/d/{i}.root", n, 10 * n),), work)
            for i, n in enumerate(EVENTS)
        ]
        ops.store_accepted(
            s, caller, rid, "raw", "application/yaml", MetaJobRequest("ann", work, ()), jobs
        )
    return rid


def _state(store: Store, rid: str) -> str:
    with store.session() as s:
        req = s.get(Request, rid)
        assert req is not None
        return req.state


def _wait(pred: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize("replay", [False, True], ids=["resumes", "replays"])
def test_a_restart_mid_request_counts_every_event_once(store: Store, replay: bool) -> None:
    rid = _submit(store)
    first = FakeRunner(packet=5, die_after=9)
    d1 = Dispatcher(store, first, period_s=0.02)
    d1.start()
    _wait(first.dead.is_set)
    first.wait()
    d1.stop()  # the daemon goes down with its runner; the store keeps what it was told
    assert _state(store, rid) in ("running", "queued")
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(Packet)) == 9
        req = s.get(Request, rid)
        assert req is not None
        unfinished = {j.id for j in req.jobs if j.state != "completed"}
        done_before = {j: len(ops.done_ranges(s, j)) for j in unfinished}
    assert unfinished  # 9 packets of the 21 reported: some job is cut short

    second = FakeRunner(packet=5, replay=replay)
    d2 = Dispatcher(store, second, period_s=0.02)
    d2.start()
    _wait(lambda: _state(store, rid) == "completed")
    second.wait()
    d2.stop()
    # Every job not completed was handed over again with the ranges it had done.
    handed = {job_id: len(done) for job_id, done in second.submitted}
    assert handed == done_before
    with store.session() as s:
        rows = s.execute(select(Packet.url, Packet.start, Packet.stop, Packet.result)).all()
    ranges = sorted((u, a, b) for u, a, b, _ in rows)
    assert len(ranges) == len(set(ranges))
    per_file = {f"/d/{i}.root": n for i, n in enumerate(EVENTS)}
    for url, n in per_file.items():
        mine = sorted((a, b) for u, a, b in ranges if u == url)
        assert mine[0][0] == 0
        assert mine[-1][1] == n
        assert all(x[1] == y[0] for x, y in itertools.pairwise(mine))
    assert merge_all(safepickle.loads(r) for *_, r in rows if r) == {"events": sum(EVENTS)}
    if replay:
        assert d2.listener.replays == sum(done_before.values())


def test_a_job_the_runner_refuses_at_submit_goes_back_to_pending(sqlite_store: Store) -> None:
    class Refusing(FakeRunner):
        def submit(self, job: ElementaryJob, done_ranges: object) -> None:
            raise RuntimeError("no slot")

    rid = _submit(sqlite_store)
    d = Dispatcher(sqlite_store, Refusing(), period_s=10)
    d.runner.start(d.listener)
    assert d.dispatch_once() == 0
    with sqlite_store.session() as s:
        assert {j.state for j in ops.pending_jobs(s)} == {JobState.PENDING.value}
        assert len(ops.pending_jobs(s)) == 3
    assert _state(sqlite_store, rid) == "pending"
