"""The demo's calibration scaled for workers sharing fewer cores: once, never twice (the
simulator's prediction once charged every event twice its CPU by scaling the run's
already-scaled calibration again)."""

from __future__ import annotations

import pytest

from datasched.compare.demo import shared_cores
from datasched.core.model import CostModel
from datasched.runtime.session import Calibration


def _measured(cpu: float) -> Calibration:
    return Calibration(CostModel(cpu_s_per_event=cpu), 0.25e6, measured=True)


def test_four_workers_on_two_cores_each_get_half_a_core() -> None:
    scaled = shared_cores(_measured(0.01), workers=4, cores=2)
    assert scaled.cost.cpu_s_per_event == pytest.approx(0.02)
    assert scaled.core_share == 0.5
    assert scaled.measured
    assert scaled.tertiary_bytes_per_s == 0.25e6


def test_scaling_a_scaled_calibration_leaves_it_as_it_is() -> None:
    once = shared_cores(_measured(0.01), workers=4, cores=2)
    assert shared_cores(once, workers=4, cores=2) == once


def test_a_scaled_calibration_rescales_from_its_own_share() -> None:
    half = shared_cores(_measured(0.01), workers=4, cores=2)
    quarter = shared_cores(half, workers=8, cores=2)
    assert quarter.cost.cpu_s_per_event == pytest.approx(0.04)
    assert shared_cores(half, workers=2, cores=2).cost.cpu_s_per_event == pytest.approx(0.01)


def test_as_many_cores_as_workers_changes_nothing() -> None:
    cal = _measured(0.01)
    assert shared_cores(cal, workers=2, cores=4) == cal


def test_the_masters_time_a_packet_goes_at_the_same_share_as_the_rest() -> None:
    cost = CostModel(cpu_s_per_event=0.01, packet_overhead_s=0.004, master_s_per_packet=0.01)
    cal = Calibration(cost, 0.25e6, measured=True)
    # Four workers and two other programs' threads on two cores: a third of a core each.
    scaled = shared_cores(cal, workers=4, cores=2, others=2.0)
    assert scaled.core_share == pytest.approx(1 / 3)
    assert scaled.cost.master_s_per_packet == pytest.approx(0.03)
    assert scaled.cost.packet_overhead_s == pytest.approx(0.012)
    assert shared_cores(scaled, workers=4, cores=2, others=2.0) == scaled
