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
    PacketDone,
)
from datasched.service.daemon import StoreListener
from datasched.service.eta import EtaRecord, interval_coverage
from datasched.service.eta_watch import (
    COLD_SPREAD,
    SPREAD_FLOOR,
    Z90,
    EtaWatch,
    horizon_interval,
    interval_factors,
)
from datasched.service.live import MIN_PACKETS, rate_spread, wall_rates
from datasched.service.live_rates import span_spreads, spread_over
from datasched.service.store.db import Store
from svc_support import FakeLanguage, FakeRunner, one_running_job, seed

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


def _running_with_a_packet(store: Store) -> str:
    """A request of one job over a file of 1,000 events running on w1, its first 50
    events stored (in 1 s of CPU): the request's id."""
    rid, job = one_running_job(store, "w1", entries=1000, n_bytes=10**4)
    StoreListener(store).packet_done(PacketDone(job, "/d/0.root", 0, 50, "w1", 10, 1.0, None))
    return rid


def test_each_refresh_gives_an_interval_holding_the_eta(sqlite_store: Store) -> None:
    rid = _running_with_a_packet(sqlite_store)
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


def test_the_spread_over_spans_leaves_the_packets_sizes_out_and_keeps_the_pace_moving() -> None:
    # A packet every 0.1 s, of 10 and 190 events in turn: over a quarter of a second the
    # rate moves with the packets' sizes; over a second or more it is steady.
    sizes = [(0.1 * i, 10 if i % 2 else 190) for i in range(200)]
    got = span_spreads({"w": sizes})
    assert got[0.25] > 0.2
    assert got[1.0] == pytest.approx(0.0, abs=1e-9)
    assert got[8.0] == pytest.approx(0.0, abs=1e-9)
    # Its pace going from 1,000 to 3,000 events a second after 10 s moves the rate over
    # every span that fits in each half, and by about half of log 3 about the node's mean.
    pace = [(0.1 * i, 100 if i < 100 else 300) for i in range(200)]
    moved = span_spreads({"w": pace})
    assert moved[2.0] == pytest.approx(math.log(3) / 2, rel=0.05)
    assert 16.0 not in moved  # 20 s of packets hold no two groups of 16 s
    # Two nodes steady at different paces: each about its own mean, no spread.
    apart = {"a": [(0.1 * i, 100) for i in range(50)], "b": [(0.1 * i, 300) for i in range(50)]}
    assert span_spreads(apart)[1.0] == pytest.approx(0.0, abs=1e-9)
    assert span_spreads({"w": sizes[:1]}) == {}


def test_the_spread_over_a_time_left_is_read_between_the_spans_on_log_scales() -> None:
    spreads = {1.0: 0.8, 4.0: 0.2}
    assert spread_over(spreads, 0.1) == 0.8  # below the shortest: the shortest's
    assert spread_over(spreads, 2.0) == pytest.approx(0.4)  # halfway on both log scales
    # Past the longest, falling as it fell from 1 to 4 s: a quarter each fourfold.
    assert spread_over(spreads, 16.0) == pytest.approx(0.05)
    # A spread that grows, or one span alone, is not carried on: the longest's.
    assert spread_over({1.0: 0.2, 4.0: 0.4}, 16.0) == 0.4
    assert spread_over({4.0: 0.3}, 16.0) == 0.3
    assert spread_over({1.0: 0.8, 4.0: 0.0}, 16.0) == 0.0
    assert spread_over({}, 2.0) is None


def test_an_interval_is_drawn_to_the_spread_over_its_time_left() -> None:
    # 8 s left, the simulations' P10 and P90 at 4 and 16 s (log 2 either side).
    spreads = {1.0: 1.0, 8.0: 0.3}
    low, high = horizon_interval(8.0, 4.0, 16.0, spreads)
    want = 2 * Z90 * math.hypot(SPREAD_FLOOR, 0.3)  # over 8 s: 0.3, the floor added
    assert math.log(high / low) == pytest.approx(want)
    assert math.log(8.0 / low) == pytest.approx(math.log(high / 8.0))  # its shape kept
    # Lopsided simulations keep their shares: log 4 below the point, log 2 above it.
    low, high = horizon_interval(8.0, 2.0, 16.0, spreads)
    assert math.log(8.0 / low) == pytest.approx(2 * math.log(high / 8.0))
    # With 64 s left, the spread carried on past 8 s: 0.3 x (64 / 8) ** (log 0.3 / log 8).
    low, high = horizon_interval(64.0, 32.0, 128.0, spreads)
    assert math.log(high / low) == pytest.approx(2 * Z90 * math.hypot(SPREAD_FLOOR, 0.09))
    # With a fifth of a second left the spread over the shortest span: wider than before.
    low, high = horizon_interval(0.2, 0.1, 0.4, spreads)
    assert math.log(high / low) == pytest.approx(2 * Z90 * math.hypot(SPREAD_FLOOR, 1.0))
    # Nothing measured over spans, no time left, or no width: as the simulations gave.
    assert horizon_interval(10.0, 5.0, 20.0, {}) == (5.0, 20.0)
    assert horizon_interval(0.0, 0.0, 0.0, spreads) == (0.0, 0.0)
    assert horizon_interval(10.0, 10.0, 10.0, spreads) == (10.0, 10.0)


def test_a_refresh_draws_each_interval_to_its_time_left_once_the_queue_has_run(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasched.service.eta_watch as eta_watch

    rid = _running_with_a_packet(sqlite_store)  # a packet of the open job: the queue ran
    read: list[dict[str, list[tuple[float, int]]]] = []

    def steady(packets: dict[str, list[tuple[float, int]]]) -> dict[float, float]:
        read.append(packets)
        return {1.0: 0.0}  # the rates steady over every span

    monkeypatch.setattr(eta_watch, "span_spreads", steady)
    watch = EtaWatch(sqlite_store, lambda: CLUSTER, policy="farm", clock=lambda: 1000.0)
    assert watch.refresh() == 1
    eta = watch.eta(rid)
    assert eta is not None
    assert eta["predicted_low"] < eta["predicted_finish"] < eta["predicted_high"]
    low, high = (eta[k] - 1000.0 for k in ("predicted_low", "predicted_high"))
    # the floor alone: where the simulations drew it at the measured spread, at least
    # the floor, 2 x Z90 x SPREAD_FLOOR is the narrowest it can be
    assert math.log(high / low) == pytest.approx(2 * Z90 * SPREAD_FLOOR)
    assert [list(p) for p in read] == [["w1"]]  # read from the window's packets


def test_before_the_queue_has_run_the_interval_is_the_simulations(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasched.service.eta_watch as eta_watch

    rid = _running_with_a_packet(sqlite_store)
    # The window's packets are all of a job no longer open (a warm-up before a burst).
    monkeypatch.setattr(
        eta_watch, "recent_jobs", lambda store, now: {"w1": [(t, 50, "gone.0") for t in (1, 2)]}
    )
    read: list[object] = []

    def spans(packets: object) -> dict[float, float]:
        read.append(packets)
        return {1.0: 0.0}

    monkeypatch.setattr(eta_watch, "span_spreads", spans)
    watch = EtaWatch(sqlite_store, lambda: CLUSTER, policy="farm", clock=lambda: 1000.0)
    assert watch.refresh() == 1
    eta = watch.eta(rid)
    assert eta is not None
    assert read == []  # no spread over spans read: the simulations' interval stands
    assert eta["predicted_low"] < eta["predicted_finish"] < eta["predicted_high"]


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
