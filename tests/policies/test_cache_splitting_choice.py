"""Cache-oriented splitting's split choice: the index's answer agrees with the full scan.

``CacheOrientedSplitting._best_split`` costs only the candidates the scheduler's split index
hands out (every subjob whose data the freed node caches, and per pace those that may have
the most events left); it must pick what ``_best_split_by_scan`` (the rule, costing every
running subjob in full) picks, decision by decision (docs/performance.md, "Cost per event as
the cluster grows"). With validation on, every choice is checked against it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from datasched.core import splitindex
from datasched.core.intervals import IntervalSet
from datasched.core.policy import SchedulerView
from datasched.core.state import SchedulerError
from datasched.policies.ponce import fcfs
from datasched.sim.experiment import SimConfig, simulate

# Counted where the scheduler's ``split_candidates`` asks the index: the scheduler's own class
# is an extension type in the compiled build, which takes no patched methods.
_CANDIDATES = splitindex.SplitIndex.candidates


def _config() -> SimConfig:
    # Enough nodes and jobs that splits of running subjobs happen, warm caches included.
    return SimConfig(
        policy="cache-splitting",
        n_nodes=20,
        cache_gb=100.0,
        load_jobs_per_h=1.0,
        data_space_bytes=4e12,
        n_jobs=30,
        max_backlog=10**9,
    )


def _summary(monkeypatch: pytest.MonkeyPatch, *, check: bool) -> dict[str, object]:
    monkeypatch.setattr(fcfs, "validate_by_default", lambda: check)
    summary, _ = simulate(_config(), validate=False)
    return {k: v for k, v in dataclasses.asdict(summary).items() if k != "wall_s"}


def test_fast_choice_agrees_with_the_full_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    # The index's path: every choice asks the split index (20 nodes would scan otherwise).
    monkeypatch.setattr(fcfs, "SCAN_AT_MOST", 0)
    calls = {"n": 0}
    scan = fcfs._best_split_by_scan

    def counted(sched: SchedulerView, target: int) -> int | None:
        calls["n"] += 1
        return scan(sched, target)

    seen = {"cached": 0, "leaders": 0}

    def counted_candidates(index: splitindex.SplitIndex, *args: Any) -> tuple[list[int], list[int]]:
        cached, leaders = _CANDIDATES(index, *args)
        seen["cached"] += len(cached)
        seen["leaders"] += len(leaders)
        return cached, leaders

    monkeypatch.setattr(fcfs, "_best_split_by_scan", counted)
    monkeypatch.setattr(splitindex.SplitIndex, "candidates", counted_candidates)
    checked = _summary(monkeypatch, check=True)  # raises on the first disagreement
    assert calls["n"] > 50, "the scenario must ask for many splits"
    # Both kinds of candidates: subjobs whose data the freed node caches, and the others.
    assert seen["cached"] > 10, seen
    assert seen["leaders"] > 50, seen
    # And the run is the one the full scan alone gives.
    monkeypatch.setattr(
        fcfs.CacheOrientedSplitting, "_best_split", lambda self, sched, t: scan(sched, t)
    )
    assert _summary(monkeypatch, check=False) == checked


def test_few_slots_scan_agrees_with_the_full_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to ``SCAN_AT_MOST`` running subjobs, every one is costed with the arithmetic
    written out (``_best_split_few``): the same choices as the rule's scan, checked at each
    decision, without the index."""
    assert _config().n_nodes <= fcfs.SCAN_AT_MOST  # one slot a node: the scan's path
    calls = {"few": 0, "index": 0, "cached": 0}
    few = fcfs._best_split_few

    def counted(sched: SchedulerView, target: int, content: IntervalSet) -> int | None:
        calls["few"] += 1
        calls["cached"] += sum(
            content.overlaps_each([r.subjob.data for r in sched.running.values()])
        )
        return few(sched, target, content)

    def no_index(index: splitindex.SplitIndex, *args: Any) -> tuple[list[int], list[int]]:
        calls["index"] += 1
        raise AssertionError("the index is not asked with this few slots")

    monkeypatch.setattr(fcfs, "_best_split_few", counted)
    monkeypatch.setattr(splitindex.SplitIndex, "candidates", no_index)
    checked = _summary(monkeypatch, check=True)  # raises on the first disagreement
    assert calls["few"] > 50, calls
    assert calls["index"] == 0, calls
    assert calls["cached"] > 10, calls  # subjobs whose data the freed node caches, costed in full
    # The same run as with the index's path.
    monkeypatch.setattr(splitindex.SplitIndex, "candidates", _CANDIDATES)
    monkeypatch.setattr(fcfs, "SCAN_AT_MOST", 0)
    assert _summary(monkeypatch, check=False) == checked


def test_a_wrong_choice_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def wrong(self: fcfs.CacheOrientedSplitting, sched: SchedulerView, t: int) -> int | None:
        best = fcfs._best_split_by_scan(sched, t)
        others = [s for s in sched.running if s != best and sched.running[s].settled]
        return others[0] if others else best

    monkeypatch.setattr(fcfs.CacheOrientedSplitting, "_best_split", wrong)
    with pytest.raises(SchedulerError, match="split choice"):
        _summary(monkeypatch, check=True)
