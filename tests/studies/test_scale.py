"""The master's scalability measurement (ponce-hersch §8)."""

from __future__ import annotations

import pytest

from datasched.sim.experiment import SimConfig
from datasched.studies.ponce.scale import scale_config, scale_point


def test_scale_grows_load_and_data_with_the_cluster_and_shrinks_the_period() -> None:
    base = SimConfig(policy="delayed", load_jobs_per_h=0.5)
    big = scale_config(base, 100)
    assert big.n_nodes == 100
    assert big.load_jobs_per_h == pytest.approx(5.0)
    assert big.data_space_bytes == pytest.approx(20e12)
    assert big.policy_params["period_h"] == pytest.approx(30 * 24 / 100)


def test_scale_point_measures_the_scheduler() -> None:
    point = scale_point(SimConfig(policy="splitting", n_jobs=60), 20)
    assert point.n_jobs == 60
    assert 0 < point.scheduler_s_per_job < 1.0
    assert 0 < point.master_load < 1e-3  # a 20-node cluster barely loads the master
