"""The share of a core the demo's simulator charges: measured from what other programs want
of the machine (runnable threads sampled before a run), so a busy machine gives each node
less of a core than a quiet one. The measurement is injected: nothing here reads the
machine's clock or load."""

from __future__ import annotations

import pytest

from datasched.compare.demo import shared_cores
from datasched.core.model import CostModel
from datasched.runtime.coreshare import core_share, measure_machine_load
from datasched.runtime.session import Calibration


def _measure(counts: list[int | None]) -> tuple[float, int, str]:
    it = iter(counts)
    load = measure_machine_load(
        2, samples=len(counts), read=lambda: next(it), sleep=lambda _: None,
        loadavg=lambda: (7.0, 0.0, 0.0),
    )  # fmt: skip
    return load.others, load.samples, load.source


def test_a_busy_machine_gives_each_node_less_of_a_core_than_a_quiet_one() -> None:
    quiet, n, source = _measure([1, 1, 1, 1])  # the sampling thread alone
    busy, _, _ = _measure([2, 2, 3, 2])  # one other program busy, sometimes two
    assert (quiet, n, source) == (0.0, 4, "procs_running")
    assert busy == pytest.approx(1.25)
    assert core_share(2, 4, quiet) == 0.5
    assert core_share(2, 4, busy) == pytest.approx(2 / 5.25)
    cal = Calibration(CostModel(cpu_s_per_event=0.01), 0.25e6, measured=True)
    assert (
        shared_cores(cal, 4, 2, busy).cost.cpu_s_per_event
        > shared_cores(cal, 4, 2, quiet).cost.cpu_s_per_event
    )
    assert shared_cores(cal, 4, 2, busy).core_share == pytest.approx(2 / 5.25)


def test_without_proc_stat_the_load_average_stands_in() -> None:
    others, n, source = _measure([None, None])
    assert (others, n, source) == (7.0, 0, "loadavg")


def test_a_thread_never_gets_more_than_a_core_and_bad_input_is_refused() -> None:
    assert core_share(16, 4, 2.0) == 1.0
    with pytest.raises(ValueError, match="others"):
        core_share(2, 4, -1.0)
    with pytest.raises(ValueError, match="cores"):
        core_share(0, 4)


def test_a_share_measured_once_is_not_charged_twice() -> None:
    cal = Calibration(CostModel(cpu_s_per_event=0.01), 0.25e6, measured=True)
    once = shared_cores(cal, 4, 2, 1.0)
    assert shared_cores(once, 4, 2, 1.0) == once
    assert shared_cores(once, 4, 2, 0.0).cost.cpu_s_per_event == pytest.approx(0.02)
