"""benchmarks/runtime.py's breakdown of where a run's worker time went, on a hand-made
timeline whose gaps, head and tail are known."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from datasched.runtime.reports import PacketStat, RunReport
from script_support import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "runtime.py"


def _module() -> ModuleType:
    return load_script(SCRIPT, "bench_runtime")


def _packet(node: str, t_start: float, busy: float, t_end: float) -> PacketStat:
    return PacketStat(
        job="j", node=node, url="f.root", start=0, stop=10, source="cache",
        bytes_from_tertiary=0, bytes_from_peer=0, read_s=busy / 2, compute_s=busy / 2,
        cpu_s=busy, t_start=t_start, t_end=t_end,
    )  # fmt: skip


def test_breakdown_sums_gaps_head_tail_and_return() -> None:
    packets = [
        # n1: starts at 0.5, runs 1 s, result at the master 0.1 s later; next starts 0.2 s
        # after that result; ends at 3.0 of a 4.0 s run.
        _packet("n1", 0.5, 1.0, 1.6),
        _packet("n1", 1.8, 1.0, 3.0),
        _packet("n2", 0.0, 2.0, 2.0),
    ]
    report = RunReport("p", 4.0, [], packets, scheduling_s=0.05, workers=["n1", "n2"])
    out = _module().breakdown(report)
    assert out["packets"] == 3
    assert out["rows"] == 2
    assert out["busy_s"] == 4.0
    assert out["cpu_s"] == 4.0
    assert out["return_s"] == 0.3  # 0.1 + 0.2 + 0.0
    assert out["gap_s"] == 0.2
    assert out["gap_median_ms"] == 200.0
    assert out["head_s"] == 0.5
    assert out["tail_s"] == 3.0  # 1.0 (n1) + 2.0 (n2)
    assert out["master_s"] == 0.05


def test_a_runs_cpu_window_charges_each_process_what_it_used_inside() -> None:
    module = _module()
    cpu = module.ProcessCPU()
    # Two processes' cumulative CPU, sampled at known times; one starts late, one ends early.
    cpu.series = {
        1: [(10.0, 1.0), (11.0, 1.5), (12.0, 2.5), (13.0, 3.0)],
        2: [(11.5, 0.2), (12.5, 0.7)],
    }
    # Process 1: 2.5 at 12.0 less 1.5 at 11.0; process 2: 0.7 (its last) less 0.2 (its first).
    assert cpu.window(11.2, 12.9) == 1.0 + 0.5
    report = RunReport("p", 2.0, [], [_packet("n1", 0.0, 0.4, 0.5)], started_wall=11.0)
    out = module.run_cpu(report, cpu, 2)
    assert out == {"all_processes": 2.0, "packet_threads": 0.4, "share_of_cores": 0.5}


def test_the_sampler_sees_this_process_burn_cpu() -> None:
    import os
    import time

    with _module().ProcessCPU(every_s=0.02) as cpu:
        mine = cpu.series.setdefault(os.getpid(), [])
        deadline = time.time() + 30  # a busy machine may sample late; it must sample
        while not mine and time.time() < deadline:
            time.sleep(0.01)
        a = time.time()
        # Burn CPU until the sampler has seen at least 0.3 s of it pass.
        while time.time() < deadline and not (mine[-1][0] > a and mine[-1][1] - mine[0][1] > 0.3):
            sum(range(10_000))
        b = time.time()
    assert cpu.window(a, b) > 0
