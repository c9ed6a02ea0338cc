"""The PROOF quota test on a local Dask cluster (studies/proof/runtime_quota.py): the measures on
hand-made packets, a short run of two groups, and the 10-minute run of four (slow)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from datasched.monitoring import PacketRow
from datasched.studies.proof.runtime_quota import (
    QuotaResult,
    RuntimeQuota,
    measure_quota_runtime,
    run_quota_runtime,
)

TWO = (("low", 25.0), ("high", 75.0))


def row(job: str, start: float, end: float, cpu_s: float) -> PacketRow:
    return PacketRow(job, "0", "0", "f", 10, start, end, cpu_s, 0.0, "local")


def test_shares_from_per_packet_cpu_time_by_hand() -> None:
    """A packet's CPU time is spread over its processing: low's 4 s packet [8, 12) puts
    2 CPU s in each 10 s bin."""
    setup = RuntimeQuota(duration_s=20.0, quotas=TWO, bin_s=10.0)
    rows = (row("a", 0, 8, 6.0), row("b", 8, 12, 4.0), row("a", 12, 20, 6.0))
    result = QuotaResult(setup, rows, {"a": "high", "b": "low"})
    assert result.shares() == pytest.approx({"high": 0.75, "low": 0.25})
    assert result.max_error_pp() == pytest.approx(0.0)
    assert result.over_time() == [
        {"start_s": 0.0, "high": 75.0, "low": 25.0},
        {"start_s": 10.0, "high": 75.0, "low": 25.0},
    ]
    assert result.max_error_pp(lo=12.0) == pytest.approx(25.0)  # only high's last packet


def test_bad_setups_name_their_field() -> None:
    with pytest.raises(ValueError, match="quotas: at least two groups"):
        RuntimeQuota(quotas=(("a", 1.0),))
    with pytest.raises(ValueError, match="duration_s: must be positive"):
        RuntimeQuota(duration_s=0)
    # Enough events that a group alone on every worker would not run out in the run.
    setup = RuntimeQuota(workers=2, duration_s=10, cpu_ms_per_event=5)
    assert setup.events >= 2 * 10 / 0.005


def test_two_groups_move_towards_their_targets(tmp_path: Path) -> None:
    """Two continuous analyses, targets 25 / 75 %, for 10 s on two workers. Equal shares (what
    first come, first served or a plain fair share gives) would give the high group half.
    The first packets go out before any usage is known (both workers' first to the job listed
    first, here the low group's); the controller then serves the high group until its
    weighted usage catches up. Asserted: the high group's share is above half in the packets
    that began once usage was known (after the first packet's end). Not asserted: the
    share in the run's second half by the clock. On an idle machine it is 0.63 to 0.79
    (measured), but how much of that half the low group's first packets fill depends on
    the machine's speed: with the suite and other work beside it (load average 12) a run
    of this test once left the high group at most half there. Nor that the share grows from
    the first half to the second (on an idle machine the controller reaches the target
    within the first half, 0.81 to 0.82, so the share settles from above), nor the share of
    the whole run, which in 10 s is a handful of packets a slot on cores shared with
    whatever else runs, nor the few points a long run reaches (the slow test, and
    docs/proof.md's measured run)."""
    setup = RuntimeQuota(
        workers=2,
        duration_s=10.0,
        quotas=TWO,
        cpu_ms_per_event=5.0,
        quota_period_s=1.0,
        usage_half_life_s=5.0,
        bin_s=2.0,
        packet_s=(0.5, 1.0),
        calibration_events=50,
        files=2,
    )
    result = run_quota_runtime(setup, tmp_path)
    assert len(result.rows) >= 4
    assert result.cpu_s > 0
    known = min(r.end_s for r in result.rows)
    cpu = {"low": 0.0, "high": 0.0}
    for r in result.rows:
        if r.start_s >= known:
            cpu[result.group_of[r.job]] += r.cpu_s
    assert cpu["high"] + cpu["low"] > 0, result.rows
    assert cpu["high"] / (cpu["high"] + cpu["low"]) > 0.5, (cpu, result.shares())


@pytest.mark.slow
def test_the_ten_minute_run(tmp_path: Path) -> None:
    """The full run: four groups, 10/20/30/40 %, 10 minutes. The paper reached its targets
    "within few percentage units" over a day; ours does not on a local cluster (21.7 and
    23.6 pp measured, too steep a split: docs/proof.md says why), so what is asserted is
    what held there: the two groups with the larger targets get more of the CPU than the
    other two, and the measurement and its figures are written."""
    measured = measure_quota_runtime(quick=False, figures=tmp_path)
    assert math.isfinite(measured.ours)
    assert (tmp_path / "quota_runtime.png").exists()
    with (tmp_path / "quota_runtime.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 20  # 30 s bins over 600 s
    high = sum(float(r["g30"]) + float(r["g40"]) for r in rows)
    low = sum(float(r["g10"]) + float(r["g20"]) for r in rows)
    assert high > low, measured.fields["detail"]
