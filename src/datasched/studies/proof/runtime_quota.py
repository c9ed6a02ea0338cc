"""The quota test of the PROOF paper (§3.3, Fig. 6) on a local Dask cluster: groups with
target CPU shares run continuous analyses side by side for a fixed time, under a packetizer
policy with quotas; the shares they achieve are measured from each packet's CPU time.

Every group has one user running one job over the whole demo data set, more events than the
whole cluster could process in the run, so no group ever runs out of work: the analyses are
continuous, and the run stops at ``duration_s`` (what is still in flight then is not
counted). The analysis burns ``cpu_ms_per_event`` of its thread's CPU per event
(:class:`BurnAnalysis`), so that a packet's CPU time is real and the shares are of CPU, as
ALICE's were. As in the simulator's quota experiment every query gets every worker
(``min_workers``): the worker-level control decides the shares. The machine's cores are
shared by the workers (and by whatever else runs on it), so a packet's wall time varies;
its CPU time does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from datasched.monitoring import PacketRow
from datasched.runtime.demodata import DimuonMass, write_demo_dataset
from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.jobspec import load_jobs
from datasched.runtime.monitor import packet_rows
from datasched.runtime.reports import EngineConfig, PacketStat
from datasched.runtime.session import (
    ClusterOptions,
    build_scheduler,
    default_calibration,
    job_space,
    open_cluster,
)
from datasched.studies.claims import Measured

__all__ = [
    "BurnAnalysis",
    "QuotaResult",
    "RuntimeQuota",
    "measure_quota_runtime",
    "plot_quota_runtime",
    "run_quota_runtime",
    "write_quota_csv",
]


class BurnAnalysis(DimuonMass):
    """The demo analysis, then ``cpu_ms_per_event`` of CPU per event (a busy loop on the
    thread's CPU clock, so the CPU spent is the same however the cores are shared)."""

    def __init__(self, cpu_ms_per_event: float = 10.0) -> None:
        if not cpu_ms_per_event >= 0:
            raise ValueError(f"cpu_ms_per_event: must not be negative, got {cpu_ms_per_event!r}")
        self.cpu_ms_per_event = cpu_ms_per_event

    def process(self, events: Any) -> dict[str, Any]:
        out = super().process(events)
        need = len(events) * self.cpu_ms_per_event / 1e3
        t0 = time.thread_time()
        while time.thread_time() - t0 < need:
            pass
        return out


@dataclass(frozen=True, slots=True)
class RuntimeQuota:
    """``workers`` workers (one slot each) on this machine; groups with target shares
    ``quotas`` (name, percent); the policy's quota controller recomputing priorities every
    ``quota_period_s`` from usage decayed with ``usage_half_life_s`` (the simulated day's
    5 min and 1 h, scaled to the run); ``bin_s`` for the shares over time."""

    workers: int = 4
    duration_s: float = 600.0
    quotas: tuple[tuple[str, float], ...] = (("g10", 10), ("g20", 20), ("g30", 30), ("g40", 40))
    cpu_ms_per_event: float = 20.0
    quota_period_s: float = 10.0
    usage_half_life_s: float = 120.0
    bin_s: float = 30.0
    policy: str = "adaptive-packetizer"
    packet_s: tuple[float, float] = (2.0, 5.0)
    """The adaptive packetizer's clamp on a packet's seconds (ROOT's 3 to 20 s suit a day;
    a run of minutes wants its shares measured on more, shorter packets)."""
    calibration_events: int = 25
    """The first packet's events, before a worker's rate is known: short beside the run
    (half a CPU second at 20 ms an event; on a machine whose cores are shared many ways a
    first packet of 200 events took a minute of the run's ten)."""
    files: int = 8
    seed: int = 5
    os_nice: bool = False
    """Also compute each packet at its session's nice value (the policy's ``os_nice``): off,
    the slots' order by CPU weight applies the priorities alone (on, they apply twice)."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers: must be at least 1, got {self.workers!r}")
        for name in ("duration_s", "cpu_ms_per_event", "quota_period_s", "bin_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be positive, got {getattr(self, name)!r}")
        if len(self.quotas) < 2 or any(not p > 0 for _, p in self.quotas):
            raise ValueError("quotas: at least two groups, each with a positive share")

    @property
    def targets(self) -> dict[str, float]:
        """Each group's target share, as a fraction of the whole."""
        total = sum(p for _, p in self.quotas)
        return {g: p / total for g, p in self.quotas}

    @property
    def events(self) -> int:
        """Events of the data set, which every group's job runs over: more than all the
        workers could process in the run at one core each, a quarter more for safety."""
        need = 1.25 * self.workers * self.duration_s / (self.cpu_ms_per_event / 1e3)
        return self.files * (int(need / self.files) + 1)

    def params(self) -> dict[str, Any]:
        return {
            "quotas": ",".join(f"{g}={p:g}" for g, p in self.quotas),
            "min_workers": self.workers,
            "quota_period_s": self.quota_period_s,
            "usage_half_life_s": self.usage_half_life_s,
            "min_packet_s": self.packet_s[0],
            "max_packet_s": self.packet_s[1],
            "calibration_events": self.calibration_events,
            "os_nice": self.os_nice,
        }


@dataclass(frozen=True, slots=True)
class QuotaResult:
    """What one run measured: each packet counted (ended within the run) as a monitor row."""

    setup: RuntimeQuota
    rows: tuple[PacketRow, ...]
    group_of: dict[str, str]
    """Job id -> group."""
    notes: tuple[str, ...] = ()

    def cpu_by_group(self, lo: float, hi: float) -> dict[str, float]:
        """CPU seconds of each group within ``[lo, hi)``, a packet's spread evenly over its
        processing."""
        out = {g: 0.0 for g, _ in self.setup.quotas}
        for r in self.rows:
            span = r.end_s - r.start_s
            overlap = min(r.end_s, hi) - max(r.start_s, lo)
            if span <= 0 or overlap <= 0:
                continue
            out[self.group_of[r.job]] += r.cpu_s * overlap / span
        return out

    def shares(self, lo: float = 0.0, hi: float | None = None) -> dict[str, float]:
        cpu = self.cpu_by_group(lo, self.setup.duration_s if hi is None else hi)
        total = sum(cpu.values())
        return {g: c / total if total else 0.0 for g, c in cpu.items()}

    def slot_shares(self) -> dict[str, float]:
        """Each group's share of the workers' processing time (wall seconds of its packets),
        beside :meth:`shares`' CPU (what the policy's usage counts, each packet's CPU
        seconds as its result reports them)."""
        out = {g: 0.0 for g, _ in self.setup.quotas}
        for r in self.rows:
            out[self.group_of[r.job]] += r.processing_s
        total = sum(out.values())
        return {g: s / total if total else 0.0 for g, s in out.items()}

    def max_error_pp(self, lo: float = 0.0) -> float:
        """The largest gap, in percentage points, between a group's share of the CPU from
        ``lo`` to the end and its target."""
        got = self.shares(lo)
        return max(abs(100 * (got[g] - t)) for g, t in self.setup.targets.items())

    def over_time(self) -> list[dict[str, float]]:
        """Each bin's shares (percent), with its start: the paper's Fig. 6 over time."""
        rows = []
        t = 0.0
        while t < self.setup.duration_s - 1e-9:
            shares = self.shares(t, min(t + self.setup.bin_s, self.setup.duration_s))
            rows.append({"start_s": t, **{g: round(100 * s, 2) for g, s in shares.items()}})
            t += self.setup.bin_s
        return rows

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu_by_group(0.0, self.setup.duration_s).values())


class _Collect:
    """A progress sink that keeps every packet's statistics as they arrive."""

    def __init__(self) -> None:
        self.packets: list[PacketStat] = []

    def job_started(self, job_id: str, n_events: int) -> None:
        pass

    def advance(self, job_id: str, n_events: int, from_cache: bool) -> None:
        pass

    def packet_stat(self, stat: PacketStat) -> None:
        self.packets.append(stat)

    def job_done(self, job_id: str, status: str) -> None:
        pass


def _jobs_file(setup: RuntimeQuota, out_dir: Path) -> tuple[Path, dict[str, str]]:
    catalog = write_demo_dataset(
        out_dir / "data", n_events=setup.events, n_files=setup.files, seed=setup.seed
    )
    jobs = [
        {
            "id": f"{group}-analysis",
            "dataset": "zmumu",
            "user": f"{group}-user",
            "user_group": group,
            "output": str(out_dir / "out" / f"{group}.pkl"),
        }
        for group, _ in setup.quotas
    ]
    doc = {
        "catalog": str(catalog),
        "defaults": {
            "processor": f"{__name__}:BurnAnalysis",
            "processor_args": {"cpu_ms_per_event": setup.cpu_ms_per_event},
        },
        "jobs": jobs,
    }
    path = out_dir / "jobs.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path, {j["id"]: j["user_group"] for j in jobs}


async def _run(setup: RuntimeQuota, jobs: Path, root: Path) -> tuple[list[PacketStat], list[str]]:
    specs = load_jobs(jobs)
    space = job_space(specs)
    cap = 2 * sum(f.n_bytes for f in space.files)
    opts = ClusterOptions(workers=setup.workers, slots=1, cache_bytes=cap, cache_root=root)
    calibration = default_calibration(None, setup.cpu_ms_per_event / 1e3)
    sink = _Collect()
    notes: list[str] = []
    async with open_cluster(opts) as (client, names):
        sched = build_scheduler(
            len(names), opts, space, calibration, policy=setup.policy, policy_params=setup.params()
        )
        engine = RuntimeEngine(
            client, sched, names, config=EngineConfig(queue_s=1.0), progress=sink
        )
        task = asyncio.ensure_future(engine.run(specs, known_cache={}))
        done, _ = await asyncio.wait({task}, timeout=setup.duration_s)
        if done:  # every job ended before the time was up: the work was too short
            report = task.result()
            raise RuntimeError(
                "the quota run's jobs ended before its duration: "
                + "; ".join(f"{j.id} {j.status} {j.error}" for j in report.jobs)
            )
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    return sink.packets, notes


def run_quota_runtime(setup: RuntimeQuota, out_dir: Path) -> QuotaResult:
    """One run of ``setup`` (its data and caches under ``out_dir``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs, group_of = _jobs_file(setup, out_dir)
    packets, notes = asyncio.run(_run(setup, jobs, out_dir / "caches"))
    rows = tuple(
        r for r in packet_rows(packets) if r.end_s <= setup.duration_s and r.job in group_of
    )
    nice = sorted({p.nice for p in packets if p.nice is not None})
    if nice:
        notes.append(f"nice values applied to packets: {nice}")
    return QuotaResult(setup, rows, group_of, tuple(notes))


def plot_quota_runtime(result: QuotaResult, path: Path) -> Path:
    """Shares over time per bin with the targets dashed (a), and each group's share of the
    whole run beside its target (b, the paper's Fig. 6)."""
    from matplotlib.figure import Figure

    from datasched._files import atomic_write_bytes

    setup = result.setup
    fig = Figure(figsize=(10, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=(2, 1))
    bins = result.over_time()
    colours = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
    for i, (group, target) in enumerate(setup.targets.items()):
        colour = colours[i % len(colours)]
        xs = [b["start_s"] for b in bins] + [setup.duration_s]
        ys = [b[group] for b in bins]
        left.step(xs, [*ys, ys[-1] if ys else 0.0], where="post", color=colour, label=group)
        left.axhline(100 * target, color=colour, ls="--", lw=0.8)
    left.set_xlabel("time [s]")
    left.set_ylabel(f"CPU share per {setup.bin_s:g} s [%]")
    left.set_ylim(0, 100)
    left.legend(fontsize="small")
    got = result.shares()
    names = list(setup.targets)
    xs_ = range(len(names))
    right.bar([x - 0.2 for x in xs_], [100 * got[g] for g in names], 0.4, label="achieved")
    right.bar([x + 0.2 for x in xs_], [100 * setup.targets[g] for g in names], 0.4, label="target")
    right.set_xticks(list(xs_), names)
    right.set_ylabel("CPU share of the run [%]")
    right.legend(fontsize="small")
    fig.suptitle(
        f"CPU quotas on {setup.workers} local workers, {setup.duration_s:g} s "
        f"(largest gap {result.max_error_pp():.1f} pp)"
    )
    atomic_write_bytes(path, lambda fh: fig.savefig(fh, format="png", dpi=110))
    return path


def write_quota_csv(result: QuotaResult, path: Path) -> Path:
    import csv
    import io

    from datasched._files import atomic_write_text

    rows = result.over_time()
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["start_s", *result.setup.targets])
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())
    return path


QUICK = RuntimeQuota(duration_s=60.0, quota_period_s=3.0, usage_half_life_s=20.0, bin_s=6.0)
FULL = RuntimeQuota()


def measure_quota_runtime(quick: bool, figures: Path | None = None) -> Measured:
    """The claim ``quota_max_error_pp_runtime``: one run (in a temporary directory, removed
    after); its plot and CSV into ``figures`` when given."""
    setup = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="datasched-quota-") as tmp:
        result = run_quota_runtime(setup, Path(tmp))
    if figures is not None:
        figures.mkdir(parents=True, exist_ok=True)
        plot_quota_runtime(result, figures / "quota_runtime.png")
        write_quota_csv(result, figures / "quota_runtime.csv")
    got = result.shares()
    half = setup.duration_s / 2
    detail = (
        f"{setup.duration_s:g} s on {setup.workers} workers of this machine, one continuous "
        f"analysis per group burning {setup.cpu_ms_per_event:g} ms of CPU an event; "
        f"{len(result.rows)} packets, {result.cpu_s:,.0f} CPU s in all; shares "
        + ", ".join(f"{g} {100 * got[g]:.1f} %" for g in setup.targets)
        + "; of the workers' processing time "
        + ", ".join(f"{g} {100 * s:.1f} %" for g, s in result.slot_shares().items())
        + f". Over the second half only the largest gap is {result.max_error_pp(half):.1f} pp "
        f"(usage in CPU seconds, charged when a packet is handed out and corrected when it "
        f"returns; half-life {setup.usage_half_life_s:g} s, priorities recomputed every "
        f"{setup.quota_period_s:g} s; worker threads "
        + ("re-niced per packet as well" if setup.os_nice else "not re-niced (os_nice off)")
        + ")"
        + (f"; {'; '.join(result.notes)}" if result.notes else "")
    )
    return Measured(result.max_error_pp(), {"detail": detail})
