"""The PROOF experiments in the simulator: the uneven-data job's bookkeeping (a bound no run
beats, the tail measure), quotas met over a simulated day (the quick one here, on either
kernel's scale), and the full reproduction (slow)."""

from __future__ import annotations

import math

import pytest

from datasched.sim.monitor import active_workers, progress, tail_fraction
from datasched.sim.recorder import PacketRecord
from datasched.studies.proof.runs import ADAPTIVE, BASIC, run_quota, run_uneven
from datasched.studies.proof.setup import QuotaSetup, UnevenSetup

SMALL = UnevenSetup(files=60)


def packet(start: float, end: float, events: int = 10, slot: int = 0) -> PacketRecord:
    return PacketRecord(0, slot, 0, start, end, events, 0, 0, -1, events * 1e6, 1.0, True)


def test_tail_and_progress_by_hand() -> None:
    """Four workers: all busy for 10 s, one alone for 10 s more: below half for half the
    time. Progress: 40 events in the first 10 s, 10 in the next."""
    packets = [packet(0, 10, slot=i) for i in range(3)] + [packet(0, 20, 20, slot=3)]
    assert active_workers(packets) == [(0, 4), (10, 1), (20, 0)]
    assert tail_fraction(packets, 4, 0.0, 20.0) == pytest.approx(0.5)
    rows = progress(packets, 10.0, 20.0)
    assert [r.events_per_s for r in rows] == pytest.approx([4.0, 1.0])
    assert [r.active_workers for r in rows] == pytest.approx([4.0, 1.0])
    assert rows[0].mb_per_s == pytest.approx(4.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_no_packetizer_beats_the_bound(seed: int) -> None:
    for policy in (BASIC, ADAPTIVE):
        run = run_uneven(SMALL, policy, seed)
        assert run.end_s >= run.bound_s * (1 - 1e-9)
        assert run.forced == 0
        assert sum(p.events for p in run.packets) == SMALL.files * SMALL.file_events


def test_uniform_data_lets_the_basic_packetizer_work_locally() -> None:
    run = run_uneven(UnevenSetup(files=64, uniform=True), BASIC, 0)
    assert all(p.source == 0 for p in run.packets)  # every packet local
    assert run.tail_fraction < 0.05


@pytest.mark.parametrize("kernel", ["o1", "cfs"])
def test_quotas_are_met_over_a_simulated_day(kernel: str) -> None:
    """Four hours on eight workers, quotas 10/20/30/40 %: every group within 3 points of its
    target. The same users with equal priorities miss by far more: the quotas do it."""
    setup = QuotaSetup(nodes=8, hours=4.0)
    run = run_quota(setup, params={"kernel": kernel})
    assert run.max_error_pp() <= 3.0, run.day_shares()
    hourly = run.hourly()
    assert len(hourly) == 4
    assert all(math.isclose(sum(h[g.name] for g in setup.groups), 1.0) for h in hourly)
    if kernel == "o1":
        control = run_quota(setup, priorities="g10=1,g20=1,g30=1,g40=1")
        assert control.max_error_pp() > 10.0


@pytest.mark.slow
def test_the_full_reproduction_measures_every_claim() -> None:
    from datasched.studies.proof.reproduce import run_proof

    results = run_proof(quick=False)
    by_key = {c.key: c for c in results.claims}
    assert set(by_key) >= {
        "adaptive_over_basic_time",
        "adaptive_over_basic_time_runtime",
        "quota_max_error_pp",
        "tail_fraction_basic",
        "tail_fraction_adaptive",
    }
    assert math.isnan(by_key["adaptive_over_basic_time_runtime"].ours)
    assert math.isnan(by_key["quota_max_error_pp_runtime"].ours)
    assert by_key["quota_max_error_pp"].agrees
    assert results.quota.setup.hours == 24.0
    assert len(results.pairs) == 8
