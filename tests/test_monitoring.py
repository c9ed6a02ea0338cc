"""PROOF's monitor, shared by both engines: the live view's numbers on a hand-built packet
sequence, the runtime's packet rows, and the report files."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from datasched.monitoring import LiveMonitor, PacketRow, progress, tail_fraction
from datasched.monitoring import write_packets_csv as write_rows


def row(job: str, worker: str, start: float, end: float, events: int = 100) -> PacketRow:
    return PacketRow(job, worker, worker, "f.root", events, start, end, 0.5, events * 1e4, "local")


def test_live_rates_by_hand() -> None:
    """Two workers, 10 s window. Job a: two packets of 100 events, 0-5 s and 5-10 s on w1;
    job b: one of 200 events, 2-12 s on w2. At 12 s the window is [2, 12]: a has 60 + 100
    events in it (3 of the first packet's 5 s), b all 200."""
    live = LiveMonitor(window_s=10.0)
    for r in (row("a", "w1", 0, 5), row("a", "w1", 5, 10), row("b", "w2", 2, 12, 200)):
        live.add(r)
    assert live.jobs() == ["a", "b"]
    assert live.latest_s == 12
    a, b, both = live.rates("a"), live.rates("b"), live.rates()
    assert a.events == 200
    assert b.events == 200
    assert both.events == 400
    assert a.events_per_s == pytest.approx(16.0)  # 160 events in 10 s
    assert b.events_per_s == pytest.approx(20.0)
    assert both.events_per_s == pytest.approx(36.0)
    assert a.mb_per_s == pytest.approx(16 * 1e4 / 1e6)
    assert a.active_workers == pytest.approx(0.8)  # busy 8 of the 10 s
    assert both.active_workers == pytest.approx(1.8)
    assert both.cpu_s == pytest.approx(1.5)
    # Later packets push the old ones out of the window; totals stay.
    live.add(row("b", "w2", 30, 40))
    assert live.rates("a").events_per_s == 0
    assert live.rates("a").events == 200
    assert live.rates("b").events_per_s == pytest.approx(10.0)


def test_live_rates_before_a_whole_window() -> None:
    """At 4 s only 4 s have passed: the rate is over those, not the 10 s window."""
    live = LiveMonitor(window_s=10.0)
    live.add(row("a", "w1", 0, 4))
    assert live.rates("a").events_per_s == pytest.approx(25.0)
    with pytest.raises(ValueError, match="window_s"):
        LiveMonitor(0)


def test_progress_tail_and_csv(tmp_path: Path) -> None:
    rows = [row("a", "w1", 0, 10), row("a", "w2", 0, 10), row("a", "w3", 0, 20, 200)]
    bins = progress(rows, 10.0, 20.0)
    assert [b.events_per_s for b in bins] == pytest.approx([30.0, 10.0])
    assert [b.active_workers for b in bins] == pytest.approx([3.0, 1.0])
    assert tail_fraction(rows, 3, 0.0, 20.0) == pytest.approx(0.5)
    path = write_rows(tmp_path / "p.csv", rows, run="x")
    with path.open() as fh:
        got = list(csv.DictReader(fh))
    assert [g["run"] for g in got] == ["x"] * 3
    assert float(got[2]["processing_s"]) == 20
    assert float(got[2]["events_per_s"]) == 10
    empty = write_rows(tmp_path / "e.csv", [])
    assert empty.read_text().startswith("job,worker,node,file,events")


def test_runtime_packets_become_rows() -> None:
    pytest.importorskip("distributed")
    from datasched.runtime.monitor import packet_rows
    from datasched.runtime.reports import PacketStat

    def stat(node: str, t0: float, source: str = "cache") -> PacketStat:
        return PacketStat(
            "j", node, "f.root", 100, 300, source, 0, 0, 1.0, 2.0,
            bytes_read=5000, cpu_s=1.5, t_start=t0, t_end=t0 + 3.5,
        )  # fmt: skip

    # Results in arrival order; n1's second packet started 0.5 s after its first ended.
    first, other, second = packet_rows(
        [stat("n1", 10.0, "staged"), stat("n2", 11.0), stat("n1", 13.5, "peer")]
    )
    assert (first.events, first.start_s, first.end_s, first.latency_s) == (200, 10.0, 13.0, 0.0)
    assert first.category == "local"
    assert first.n_bytes == 5000
    assert first.cpu_s == 1.5
    assert other.latency_s == 0.0
    assert second.category == "peer"
    assert second.latency_s == pytest.approx(0.5)


def test_the_live_view_draws_the_monitor_under_the_bars() -> None:
    """What ``datasched run`` shows: the bars, then a row per job and one for all jobs."""
    pytest.importorskip("distributed")
    from rich.console import Console

    from datasched.cli.live import BarProgress, MonitoredProgress, progress_bars
    from datasched.runtime.reports import PacketStat

    bars = progress_bars(quiet=False)
    assert isinstance(bars, MonitoredProgress)
    sink = BarProgress(bars, total_events=400)
    for job, t0 in (("a", 0.0), ("b", 1.0)):
        sink.job_started(job, 200)
        stat = PacketStat(
            job, "n1", "f.root", 0, 200, "cache", 0, 0, 0.5, 1.5,
            bytes_read=2_000_000, cpu_s=1.0, t_start=t0, t_end=t0 + 2.5,
        )  # fmt: skip
        sink.advance(job, 200, True)
        sink.packet_stat(stat)
    console = Console(width=120, record=True)
    for part in bars.get_renderables():
        console.print(part)
    text = console.export_text()
    assert "all jobs" in text
    assert "events/s" in text
    assert "active workers" in text
    rows = [line.split() for line in text.splitlines() if line.split()[:1] in (["a"], ["b"])]
    # a: 200 events over [0, 2] of the 3 s seen so far; b: 200 over [1, 3].
    assert [r[1] for r in rows if len(r) > 5] == ["200", "200"]
    assert sink.monitor.rates("a").events_per_s == pytest.approx(200 / 3)


def test_the_progress_plot_draws_every_bin_to_its_end_and_the_total_under_the_jobs() -> None:
    """A short run's plot stopped at the last bin's start (a burst there showed as a bare
    vertical line) and drew the total over the job it equalled, hiding it."""
    from datasched.monitoring import Progress
    from datasched.monitoring_plots import progress_figure

    first = [Progress(0.0, 120_000, 2.8, 0.7), Progress(0.5, 0, 0, 0), Progress(1.0, 0, 0, 0)]
    second = [Progress(0.0, 0, 0, 0), Progress(0.5, 0, 0, 0), Progress(1.0, 120_000, 2.1, 0.5)]
    total = [
        Progress(0.0, 120_000, 2.8, 0.7),
        Progress(0.5, 0, 0, 0),
        Progress(1.0, 120_000, 2.1, 0.5),
    ]
    fig = progress_figure({"a": first, "b": second}, title="t", bin_s=0.5, total=total)
    events = fig.axes[0]
    lines = {line.get_label(): line for line in events.get_lines()}
    assert set(lines) == {"all jobs", "a", "b"}
    for line in lines.values():
        xs = np.asarray(line.get_xdata())
        assert xs[-1] == 1.5  # the last bin drawn to its end
    assert np.asarray(lines["b"].get_ydata())[-2:].tolist() == [120_000, 120_000]
    assert lines["all jobs"].get_zorder() < min(lines["a"].get_zorder(), lines["b"].get_zorder())
    assert events.get_xlim() == (0.0, 1.5)


def test_the_packets_plot_counts_a_worker_once_and_names_a_lone_run_once() -> None:
    """The runtime's workers run several packets at once: each counts once among the active
    workers (it counted its packets, past the worker count and the half-workers line's
    meaning); a run's report titled the figure and its one panel with the same words."""
    from datasched.monitoring_plots import packets_figure

    rows = [row("j", "w1", 0.0, 1.0), row("j", "w1", 0.1, 1.0), row("j", "w1", 0.2, 1.0)]
    rows += [row("j", "w2", 0.3, 1.1), row("j", "w2", 0.4, 1.1)]
    fig = packets_figure([("run", rows, 1.15)], 2, title="run")
    top = fig.axes[0]
    step, half = top.get_lines()
    assert np.max(np.asarray(step.get_ydata())) == 2  # five packets at once, two workers
    assert np.asarray(half.get_ydata()).tolist() == [1, 1]  # half the workers
    assert top.get_ylim()[1] >= 2
    assert top.get_title() == "run: 1.1 s"
    assert fig.get_suptitle() == ""
    two = packets_figure([("a", rows, 20.0), ("b", rows, 20.0)], 2, title="both")
    assert two.get_suptitle() == "both"
    assert two.axes[0].get_title() == "a: 20 s"


def test_a_worker_with_packets_side_by_side_is_one_active_worker_in_progress() -> None:
    """w1 runs two packets at once over 0-10 s and w2 one over 0-5 s: a mean of 1.5 active
    workers in the bin (it was 2.5: the packets' busy seconds), while the events and bytes
    are every packet's."""
    rows = [row("a", "w1", 0, 10), row("a", "w1", 0, 10), row("a", "w2", 0, 5)]
    (got,) = progress(rows, 10.0, 10.0)
    assert got.active_workers == pytest.approx(1.5)
    assert got.events_per_s == pytest.approx(30.0)
    live = LiveMonitor(window_s=10.0)
    for r in rows:
        live.add(r)
    assert live.rates().active_workers == pytest.approx(1.5)
