"""ETA intervals: each ETA comes with P10 and P90 finishes from the rates made slower and
faster by their measured spread; the interval holds the point estimate; a request has an
ETA from its submission; coverage counts the finishes inside their interval. Rates are
measured in wall-clock time from the packets' stored times (given here, never read from
the clock)."""

from __future__ import annotations

import math
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
from datasched.service.eta import EtaRecord, interval_coverage
from datasched.service.eta_watch import COLD_SPREAD, SPREAD_FLOOR, EtaWatch, interval_factors
from datasched.service.live import MIN_PACKETS, rate_spread, wall_rates
from datasched.service.store import ops
from datasched.service.store.db import Store
from datasched.service.users import add_user, authenticate
from svc_support import FakeLanguage, FakeRunner, seed

CLUSTER = {"nodes": [{"name": "w1", "up": True, "slots_total": 1, "cache_capacity_bytes": 10**9}]}


def test_wall_rates_count_the_events_after_the_first_packet_over_the_time_between() -> None:
    steady = [(10.0 + 2 * i, 100) for i in range(5)]  # 100 events every 2 s
    assert wall_rates({"w": steady}, {"w": 2}) == {"w": pytest.approx(25.0)}  # per slot
    assert wall_rates({"w": steady[: MIN_PACKETS - 1]}, {"w": 1}) == {}  # too few
    assert rate_spread({"w": steady * 1}) is None  # one run of packets: no spread
    uneven = [(float(t), 100) for t in (0, 1, 2, 3, 4, 8, 12, 16, 20)]  # 100/s, then 25/s
    spread = rate_spread({"w": uneven})
    assert spread is not None
    assert spread == pytest.approx(math.log(4) / 2)


def test_an_interval_must_hold_its_finish_and_coverage_counts_the_finishes_inside() -> None:
    rec = EtaRecord("r")
    with pytest.raises(ValueError, match="does not hold"):
        rec.predict(0.0, 10.0, (11.0, 20.0))
    rec.predict(0.0, 10.0, (8.0, 14.0))
    rec.predict(5.0, 12.0)  # an ETA without an interval counts in no coverage
    rec.predict(6.0, 12.0, (11.0, 12.5))
    assert rec.covered(0) is None  # not ended
    rec.finish(13.0)
    assert [rec.covered(i) for i in range(3)] == [True, None, False]
    assert interval_coverage([rec], 0) == 1.0
    assert interval_coverage([rec], -1) == 0.0
    assert interval_coverage([rec]) == 0.5
    assert interval_coverage([EtaRecord("open")]) is None
    assert rec.as_dict()["predictions"][0] == {"at": 0.0, "finish": 10.0, "low": 8.0, "high": 14.0}


def test_no_measured_rate_gives_a_wider_interval_than_a_measured_one() -> None:
    cold_slow, cold_fast = interval_factors(None, measured=False)
    slow, fast = interval_factors(0.01, measured=True)  # below the floor
    assert cold_slow < slow < 1 < fast < cold_fast
    assert math.log(fast) == pytest.approx(1.2816 * SPREAD_FLOOR)
    assert math.log(cold_fast) == pytest.approx(1.2816 * COLD_SPREAD)


def test_each_refresh_gives_an_interval_holding_the_eta(sqlite_store: Store) -> None:
    with sqlite_store.session() as s:
        caller = authenticate(s, add_user(s, "ann", "g"))
        assert caller is not None
        rid = ops.new_request_id()
        work = ProcessorWork("p.py:P")
        jobs = [ElementaryJob(rid, 0, (FileRef("/d/0.root", 1000, 10**4),), work)]
        ops.store_accepted(
            s, caller, rid, "raw", "application/yaml", MetaJobRequest("ann", work, ()), jobs
        )
    listener = StoreListener(sqlite_store)
    listener.job_state(jobs[0].id, JobState.RUNNING, node="w1")
    listener.packet_done(PacketDone(jobs[0].id, "/d/0.root", 0, 50, "w1", 10, 1.0, None))
    watch = EtaWatch(sqlite_store, lambda: CLUSTER, policy="farm", clock=lambda: 1000.0)
    assert watch.refresh() == 1
    eta = watch.eta(rid)
    assert eta is not None
    assert eta["predicted_low"] < eta["predicted_finish"] < eta["predicted_high"]
    # 950 events at the 50 events/s measured: 19 s; the interval at least the floor's.
    assert eta["predicted_finish"] - 1000.0 == pytest.approx(19.0, rel=0.2)
    assert (eta["predicted_high"] - 1000.0) / (eta["predicted_finish"] - 1000.0) > math.exp(
        1.2816 * SPREAD_FLOOR
    ) * 0.9
    assert len(watch.cost_s) == 1


@pytest.fixture
def client(sqlite_store: Store) -> Iterator[tuple[TestClient, dict[str, str]]]:
    runner = FakeRunner(packet=1, hold_users=frozenset({"ann"}))
    tokens = seed(sqlite_store)
    state = build_state(
        sqlite_store,
        FakeLanguage(),
        runner=runner,
        period_s=0.05,
        eta_period_s=3600.0,  # no refresh of its own: the ETA is the submission's
        limits=Limits(rate_per_s=1000, burst=1000),
    )
    with TestClient(create_app(state)) as c:
        yield c, tokens
        root = {"Authorization": f"Bearer {tokens['root']}"}
        for r in c.get("/api/v1/requests", headers=root).json()["requests"]:
            c.delete(f"/api/v1/requests/{r['id']}", headers=root)
    runner.wait()


def test_a_submission_answers_with_an_eta_and_its_interval(
    client: tuple[TestClient, dict[str, str]],
) -> None:
    c, tokens = client
    h = {"Authorization": f"Bearer {tokens['ann']}", "Content-Type": "application/yaml"}
    sent = c.post(
        "/api/v1/requests",
        content="title: zz\nprocessor: p.py:P\ninput: [{catalog: year=2004}]\n",
        headers=h,
    )
    assert sent.status_code == 201, sent.text
    eta = sent.json()["eta"]
    assert eta is not None, sent.json()
    assert eta["predictions"] == 1
    assert eta["predicted_low"] <= eta["predicted_finish"] <= eta["predicted_high"]
    assert eta["predicted_low"] < eta["predicted_high"]
    got = c.get(f"/api/v1/requests/{sent.json()['id']}", headers=h).json()["eta"]
    assert got["predicted_finish"] == eta["predicted_finish"]
