"""benchmarks/service_eta.py: the ETA errors of a load test with the real runner. The
figures' arithmetic in the default run; the benchmark end to end (an embedded Dask
cluster, half a minute) marked slow."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from datasched.service.eta import EtaRecord, median_abs_relative_error
from datasched.service.eta_watch import Z90
from script_support import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "service_eta.py"


def _bench() -> ModuleType:
    return load_script(SCRIPT, "service_eta")


def test_the_figures_are_the_first_and_last_eta_of_each_ended_request() -> None:
    early = EtaRecord("a", [(0.0, 10.0), (5.0, 14.0)], actual_finish=15.0)
    late = EtaRecord("b", [(0.0, 30.0)], actual_finish=20.0)
    open_ = EtaRecord("c", [(0.0, 9.0)])
    figures = _bench().eta_figures([early, late, open_])
    assert figures["with_eta"] == 2
    # a: first -5 / 15, last -1 / 10; b: first and last +10 / 20.
    assert figures["median_abs_first"] == pytest.approx((5 / 15 + 0.5) / 2)
    assert figures["median_abs_last"] == pytest.approx((0.1 + 0.5) / 2)
    assert figures["median_first"] == pytest.approx((-5 / 15 + 0.5) / 2)
    assert figures["median_abs_first"] == median_abs_relative_error([early, late, open_])
    assert [r["predictions"] for r in figures["per_request"]] == [2, 1]
    # the last ETAs were made 10 s (a) and 20 s (b) before their ends
    assert [r["last_left_s"] for r in figures["per_request"]] == [10.0, 20.0]
    assert figures["median_last_left_s"] == 15.0


def test_repeated_runs_pool_their_requests_errors_and_intervals() -> None:
    bench = _bench()
    # a: ended inside its first interval, outside its last; b: no interval; c: inside both.
    a = EtaRecord("a", [(0.0, 10.0), (5.0, 14.0)], 15.0, [(9.0, 16.0), (13.0, 14.5)])
    b = EtaRecord("b", [(0.0, 30.0)], 20.0, [None])
    c = EtaRecord("c", [(0.0, 8.0), (4.0, 9.0)], 10.0, [(7.0, 11.0), (8.0, 12.0)])
    runs = [bench.eta_figures([a, b]), bench.eta_figures([c])]
    got = bench.pooled(runs)
    assert got["runs"] == 2
    assert got["with_eta"] == 3
    assert got["coverage_first"] == pytest.approx(2 / 2)  # b gave none
    assert got["coverage_last"] == pytest.approx(1 / 2)
    assert got["coverage_all"] == pytest.approx(3 / 4)
    # first errors: a -5/15, b +10/20, c -2/10; the median of their sizes is 1/3
    assert got["median_abs_first"] == pytest.approx(5 / 15)
    assert got["median_first"] == pytest.approx(-2 / 10)
    # pooled, not the median of the runs' medians
    assert got["median_abs_last"] == bench.eta_figures([a, b, c])["median_abs_last"]
    assert got["coverage_all"] == bench.eta_figures([a, b, c])["coverage_all"]
    assert got["median_last_left_s"] == 10.0  # a 10, b 20, c 6


def test_predictions_are_banded_by_the_time_they_predicted_left() -> None:
    bench = _bench()
    # a: predicted at 0 to end at 10 (10 s left, band 8-16) with P10-P90 5 to 20, ended
    # at 5 (inside, at its low end); then at 4, 0.4 s left (band 0-0.5), no interval.
    # b: at 0, 3 s left (band 2-4), interval 2.5 to 4: ended at 6, outside.
    a = EtaRecord("a", [(0.0, 10.0), (4.0, 4.4)], 5.0, [(5.0, 20.0), None])
    b = EtaRecord("b", [(0.0, 3.0)], 6.0, [(2.5, 4.0)])
    c = EtaRecord("c", [(0.0, 0.0)], 1.0, [(0.0, 0.0)])  # predicted to end at once: left out
    got = bench.eta_figures([a, b, c])["by_left"]
    assert [band["left_s"] for band in got] == [[0.0, 0.5], [2.0, 4.0], [8.0, 16.0]]
    assert [band["predictions"] for band in got] == [1, 1, 1]
    near, mid, far = got
    assert near["median_log_error"] == pytest.approx(math.log(0.4 / 1.0))
    assert near["spread_used"] is None
    assert near["inside"] is None
    # predicted 3 s left, 6 really: log(3/6), too early, negative
    assert mid["median_log_error"] == pytest.approx(math.log(0.5))
    assert mid["spread_used"] == pytest.approx(math.log(4.0 / 2.5) / (2 * Z90))
    assert mid["inside"] == 0.0
    assert far["median_log_error"] == pytest.approx(math.log(2.0))
    assert far["spread_used"] == pytest.approx(math.log(4.0) / (2 * Z90))
    assert far["inside"] == 1.0
    # one prediction a band: no spread between P10 and P90
    assert far["spread_needed"] == 0.0
    # pooled over runs, the bands hold every run's predictions
    pooled = bench.pooled([bench.eta_figures([a]), bench.eta_figures([b])])["by_left"]
    assert [band["predictions"] for band in pooled] == [1, 1, 1]


def test_the_spread_needed_is_what_holds_the_middle_eighty_percent() -> None:
    bench = _bench()
    # 101 predictions of 10 s left whose real times left are spread log-evenly over a
    # factor of e either side: P10 to P90 of the log error is -0.8 to +0.8
    lefts = [[10.0, 10.0 * math.exp(-1.0 + k / 50), None, None] for k in range(101)]
    (band,) = bench.by_left(lefts)
    assert band["p10_log_error"] == pytest.approx(-0.8)
    assert band["p90_log_error"] == pytest.approx(0.8)
    assert band["spread_needed"] == pytest.approx(1.6 / (2 * Z90))
    assert band["median_log_error"] == pytest.approx(0.0, abs=1e-12)


def test_the_last_eta_is_told_apart_by_what_the_request_was_doing_at_its_refresh() -> None:
    bench = _bench()
    t0 = 1000.0

    def job(rid: str, node: str | None, todo: list[list[int]] | None) -> dict[str, object]:
        files = [{"url": "/d/0", "n_events": 100, "n_bytes": 1, "todo": todo}]
        return {"id": f"{rid}.0", "request_id": rid, "node": node, "files": files}

    # At 5 s: a runs on w0; b has half its file done, in no slot; c has begun nothing.
    at5 = [job("a", "w0", [[50, 100]]), job("b", None, [[50, 100]]), job("c", None, None)]
    snapshots = [
        {"at": t0 + 1.0, "snapshot": {"jobs": [job(r, None, None) for r in "abc"]}},
        {"at": t0 + 5.0, "snapshot": {"jobs": at5}},
    ]
    rows = [
        # a: last predicted at 5.0 for 6.0, ended at 6.5 (-0.5 over 1.5 s left).
        {"request": "a", "predictions": [[1.0, 9.0], [5.0, 6.0]], "actual_finish": 6.5},
        # b: at 5.0 for 9.0, ended at 7.0 (+2 over 2 s); c: at 5.0 for 10.0, ended at 9.0.
        {"request": "b", "predictions": [[5.0, 9.0]], "actual_finish": 7.0},
        {"request": "c", "predictions": [[1.0, 4.0], [5.0, 10.0]], "actual_finish": 9.0},
        {"request": "d", "predictions": [], "actual_finish": 3.0},  # never predicted
    ]
    got = bench.last_by_state(rows, snapshots, t0)
    assert got["running"] == {
        "requests": 1,
        "median_abs": pytest.approx(0.5 / 1.5),
        "median": pytest.approx(-0.5 / 1.5),
        "median_left_s": pytest.approx(1.5),
    }
    assert got["between files"]["median"] == pytest.approx(1.0)
    assert got["not sent"]["median"] == pytest.approx(0.25)
    assert bench.request_state({"jobs": at5}, "d") is None


def test_requests_overlap_and_bad_options_are_refused(tmp_path: Path) -> None:
    body = _bench().request_body(tmp_path, 1, 2, 3)
    assert [line.strip()[2:] for line in body.splitlines() if line.startswith("  - ")] == [
        str(tmp_path / f"part-{i:03d}.root") for i in (13, 14, 15)
    ]
    for args, message in (
        (["--files", "21"], "--files: at most 20"),
        (["--repeat", "0"], "--repeat: expected an integer >= 1"),
    ):
        done = subprocess.run(
            [sys.executable, str(SCRIPT), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        assert done.returncode == 2, args
        assert message in done.stderr.splitlines()[-1], done.stderr


@pytest.mark.slow
def test_the_benchmark_gives_every_ended_request_with_an_eta_its_errors() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--users", "2", "--requests", "2", "--workers", "2",
         "--rounds", "2", "--json", "--detail"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["accepted"] == report["completed"] == report["ended"] == 4
    assert report["with_eta"] + report["ended_without_eta"] == 4
    assert len(report["per_request"]) == report["with_eta"]
    for row in report["per_request"]:
        assert math.isfinite(row["first_relative_error"])
        assert math.isfinite(row["last_relative_error"])
    if report["with_eta"]:
        assert report["median_abs_relative_error"] == pytest.approx(report["median_abs_first"])
    # Two rounds, the figures the last's; the detail has each of its requests' packets.
    assert len(report["rounds"]) == 2
    assert report["rounds"][-1]["median_abs_first"] == report["median_abs_first"]
    assert len(report["detail"]) == report["with_eta"]
    for row in report["detail"]:
        # Each packet: stored at, node, events, CPU s, began at, file, slot at.
        assert all(len(packet) == 7 for packet in row["packets"])
        assert sum(packet[2] for packet in row["packets"]) > 0
        assert row["actual_finish"] >= row["predictions"][0][0]
    assert report["snapshots"]
    # The process's CPU sampled through both rounds, never going back.
    cpu = [c for _, c in report["process_cpu"]]
    assert len(cpu) >= 2
    assert cpu == sorted(cpu)


def test_each_refresh_gives_the_pace_it_assumed_and_the_pace_delivered() -> None:
    """Two refreshes of one request's job: the nodes' rates summed against the events left
    over the time until the request ended; its ETA at that refresh beside its real end."""

    def snap(at: float, left: int, rates: dict[str, float | None]) -> dict[str, object]:
        return {
            "at": at,
            "snapshot": {"jobs": [{"id": "r1.0", "request_id": "r1"}] if left else []},
            "nodes": rates,
            "jobs": {"r1.0": {"node": None, "cpu_s_per_event": 1e-4, "left": left}} if left else {},
        }

    t0 = 1000.0
    snapshots = [
        snap(999.0, 20_000, {"0": 5_000.0}),  # before the users': left out
        snap(1000.5, 20_000, {"0": 5_000.0, "1": None}),
        snap(1002.5, 5_000, {"0": 8_000.0, "1": 2_000.0}),
        snap(1003.0, 0, {"0": 8_000.0}),  # nothing left: left out
    ]
    rows = [
        {
            "request": "r1",
            "actual_finish": 4.5,
            "predictions": [[0.49, 6.0, 5.0, 7.0], [2.52, 4.0, 3.5, 4.5]],
        }
    ]
    got = _bench().refresh_rates(snapshots, rows, t0)
    assert got == [
        {
            "t_s": 0.5,
            "jobs": 1,
            "events_left": 20_000,
            "assumed_events_per_s": 5_000,
            "delivered_events_per_s": 5_000,  # 20,000 events in the 4 s until 4.5
            "predicted_end_s": 6.0,
            "real_end_s": 4.5,
        },
        {
            "t_s": 2.5,
            "jobs": 1,
            "events_left": 5_000,
            "assumed_events_per_s": 10_000,
            "delivered_events_per_s": 2_500,
            "predicted_end_s": 4.0,
            "real_end_s": 4.5,
        },
    ]
    # A request not ended (no row) gives no line: there is no real end to compare.
    assert _bench().refresh_rates(snapshots, [], t0) == []


def test_the_process_cpu_samples_are_timed_from_the_users_start() -> None:
    sampler = _bench()._CpuSampler()
    sampler.samples = [(1000.25, 3.5), (1000.35, 3.5625)]
    assert sampler.since(1000.0) == [[0.25, 3.5], [0.35, 3.5625]]
    sampler.start()  # samples this process until stopped
    sampler.stop()
    assert len(sampler.samples) >= 3
    assert sampler.samples[-1][1] >= sampler.samples[2][1]  # CPU time never goes back
