"""The reproduction of ganis et al. (PROOF) in the simulator: the experiments of §2.3 and §3.3,
their claims beside the paper's, and the figures (PNG and CSV each).

``datasched reproduce proof`` calls :func:`run_proof`, then :func:`write_proof_figures` and
:func:`~datasched.studies.report.write_report`. ``quick`` (:data:`QUICK`) halves the data set
and the placements and shortens the day of quotas to four hours on eight workers. The runs are
units of :mod:`datasched.studies.resume`, kept as they finish (``--resume``).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import astuple, dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any

from datasched._files import atomic_write_bytes, atomic_write_text
from datasched.sim.monitor import plot_packets, progress, write_packets_csv, write_progress_csv
from datasched.sim.recorder import PacketRecord
from datasched.studies.claims import Claim, Measured, fill_claims
from datasched.studies.proof.claims import PROOF_CLAIMS
from datasched.studies.proof.runs import (
    ADAPTIVE,
    BASIC,
    UnevenRun,
    run_quota,
    run_uneven,
    uneven_table,
)
from datasched.studies.proof.setup import QuotaSetup, UnevenSetup
from datasched.studies.resume import RunStore, Unit, run_units

__all__ = [
    "FULL",
    "QUICK",
    "ProofResults",
    "ProofStudy",
    "proof_units",
    "run_proof",
    "write_proof_figures",
]

Progress = Callable[[str], None]
CPU_FACTORS = (0.5, 1.0, 2.0, 5.0)
"""CPU time per event, in units of the time to read it from a local disk, for the
sensitivity of the packetizers' ratio (1: the I/O-intensive job of the main experiment)."""


@dataclass(frozen=True, slots=True)
class ProofStudy:
    """The sizes of the reproduction: the uneven data set's files, its placements, and the
    day of quotas with its control (equal priorities)."""

    files: int
    seeds: int
    quota: QuotaSetup
    control: QuotaSetup


SHORT_DAY = QuotaSetup(nodes=8, hours=4.0)
FULL = ProofStudy(files=300, seeds=8, quota=QuotaSetup(), control=SHORT_DAY)
QUICK = ProofStudy(files=150, seeds=4, quota=SHORT_DAY, control=SHORT_DAY)


@dataclass(frozen=True, slots=True)
class QuotaOutcome:
    """What the report and Figure 6 read of a day of quotas (its packets are not kept)."""

    setup: QuotaSetup
    day: dict[str, float]
    """Each group's share of the day's CPU."""
    hourly: list[dict[str, float]]
    """Shares per step (:func:`quota_step_s`), the day over time."""
    max_error_pp: float
    """The largest gap between a group's share and its target, in percentage points."""


@dataclass(slots=True)
class ProofResults:
    """Everything the report and the figures need."""

    setup: UnevenSetup
    pairs: list[tuple[UnevenRun, UnevenRun]]
    shown: tuple[UnevenRun, UnevenRun]
    uniform: tuple[UnevenRun, UnevenRun]
    sensitivity: list[tuple[float, float]]
    """(CPU ms an event, mean adaptive / basic)."""
    quota: QuotaOutcome
    control: QuotaOutcome
    claims: list[Claim] = field(default_factory=list)


def quota_step_s(setup: QuotaSetup) -> float:
    """The step of Figure 6 over time: an hour, a quarter for a day shorter than 8 h."""
    return 3600.0 if setup.hours >= 8 else 900.0


def _pair(setup: UnevenSetup, seed: int) -> list[dict[str, Any]]:
    return [_uneven_doc(run_uneven(setup, policy, seed)) for policy in (BASIC, ADAPTIVE)]


def _uneven_doc(run: UnevenRun) -> dict[str, Any]:
    doc = {f.name: getattr(run, f.name) for f in fields(run)}
    doc["packets"] = [astuple(p) for p in run.packets]
    doc["worker_nodes"] = sorted(run.worker_nodes)
    return doc


def _uneven_run(doc: dict[str, Any]) -> UnevenRun:
    packets = tuple(PacketRecord(*row) for row in doc["packets"])
    return UnevenRun(**{**doc, "packets": packets, "worker_nodes": frozenset(doc["worker_nodes"])})


def _ratio(setup: UnevenSetup, seed: int) -> float:
    """Adaptive over basic processing time on one placement."""
    return run_uneven(setup, ADAPTIVE, seed).end_s / run_uneven(setup, BASIC, seed).end_s


def _quota(setup: QuotaSetup, priorities: str | None = None) -> dict[str, Any]:
    q = run_quota(setup, priorities=priorities)
    return {
        "day": q.day_shares(),
        "hourly": q.hourly(quota_step_s(setup)),
        "max_error_pp": q.max_error_pp(),
    }


def _measured(measure: Callable[[], Measured]) -> dict[str, Any]:
    m = measure()
    return {"ours": m.ours, "fields": dict(m.fields)}


def proof_units(
    study: ProofStudy, runtime: Mapping[str, Callable[[], Measured]] | None = None
) -> list[Unit]:
    """The reproduction's runs (:mod:`datasched.studies.resume`): both packetizers on each
    placement, on uniform data, and at other CPU times per event; the day of quotas and its
    control; and ``runtime``'s measurements, by claim key, on a local Dask cluster."""
    setup = UnevenSetup(files=study.files)
    seeds = range(study.seeds)
    units = [
        Unit(
            f"uneven/{s}", f"uneven data, placement {s}: both packetizers", partial(_pair, setup, s)
        )
        for s in seeds
    ]
    units.append(
        Unit(
            "uniform",
            "uniform data: both packetizers",
            partial(_pair, replace(setup, uniform=True), 0),
        )
    )
    io_s = setup.event_bytes / setup.disk_bytes_per_s
    for factor in CPU_FACTORS:
        if factor == 1.0:
            continue  # the placements above
        varied = replace(setup, cpu_s_per_event=factor * io_s)
        units += [
            Unit(
                f"cpu/{factor:g}/{s}",
                f"{factor * io_s * 1e3:.1f} ms of CPU an event, placement {s}: both packetizers",
                partial(_ratio, varied, s),
            )
            for s in seeds
        ]
    q, c = study.quota, study.control
    equal = ",".join(f"{g.name}=1" for g in c.groups)
    units += [
        Unit("quota", f"quotas: {q.hours:g} h on {q.nodes} workers", partial(_quota, q)),
        Unit("quota/control", "quotas: the control, equal priorities", partial(_quota, c, equal)),
    ]
    units += [
        Unit(f"runtime/{key}", f"on a local Dask cluster: {key}", partial(_measured, fn))
        for key, fn in (runtime or {}).items()
    ]
    return units


def run_proof(
    *,
    quick: bool = False,
    progress: Progress | None = None,
    runtime: Mapping[str, Callable[[], Measured]] | None = None,
    store: RunStore | None = None,
) -> ProofResults:
    """Run every experiment (:func:`proof_units`, one after the other, here) and fill the
    claims. ``runtime`` measures the claims of the local cluster (the simulator cannot: it
    never imports the runtime), by key; without it those claims are not measured.
    ``progress`` gets a line as each run finishes (``[k/N] label (seconds)``); with
    ``store``, each is kept as it finishes and those it already holds are read back."""
    say = progress or (lambda _: None)
    study = QUICK if quick else FULL
    units = proof_units(study, runtime)
    say(f"{len(units)} runs, one after the other")
    done = dict(zip((u.key for u in units), run_units(units, store=store, say=say), strict=True))
    setup = UnevenSetup(files=study.files)
    pairs = [
        (_uneven_run(b), _uneven_run(a))
        for b, a in (done[f"uneven/{s}"] for s in range(study.seeds))
    ]
    shown = next((p for p in pairs if not p[0].busiest_is_worker), pairs[0])
    ub, ua = done["uniform"]
    io_s = setup.event_bytes / setup.disk_bytes_per_s
    sensitivity = []
    for factor in CPU_FACTORS:
        if factor == 1.0:
            ratios = [a.end_s / b.end_s for b, a in pairs]
        else:
            ratios = [done[f"cpu/{factor:g}/{s}"] for s in range(study.seeds)]
        sensitivity.append((round(factor * io_s * 1e3, 1), statistics.fmean(ratios)))
    quota, control = (
        QuotaOutcome(s, **done[key])
        for s, key in ((study.quota, "quota"), (study.control, "quota/control"))
    )
    results = ProofResults(
        setup, pairs, shown, (_uneven_run(ub), _uneven_run(ua)), sensitivity, quota, control
    )
    measured = _measure(results)
    for key in runtime or {}:
        doc = done[f"runtime/{key}"]
        measured[key] = Measured(doc["ours"], doc["fields"])
    results.claims = fill_claims(PROOF_CLAIMS, measured)
    return results


def _measure(r: ProofResults) -> dict[str, Measured]:
    pairs = r.pairs
    ratios = [a.end_s / b.end_s for b, a in pairs]
    servers = [a.end_s / b.end_s for b, a in pairs if not b.busiest_is_worker]
    setup = r.setup
    io_s = setup.event_bytes / setup.disk_bytes_per_s
    out: dict[str, Measured] = {}
    out["adaptive_over_basic_time"] = Measured(
        statistics.fmean(ratios),
        {
            "n": len(pairs),
            "lo": min(ratios),
            "hi": max(ratios),
            "n_server": len(servers),
            "server_mean": statistics.fmean(servers) if servers else math.nan,
            "bound_basic": statistics.fmean(b.bound_s / b.end_s for b, _ in pairs),
            "bound_adaptive": statistics.fmean(a.bound_s / a.end_s for _, a in pairs),
            "fill": round((setup.cpu_s_per_event + io_s) / io_s, 1),
            "sensitivity": r.sensitivity,
        },
    )
    for key in ("adaptive_over_basic_time_runtime", "quota_max_error_pp_runtime"):
        out[key] = Measured(
            math.nan, {"detail": "not measured: run without --no-runtime to measure it"}
        )
    shown_basic = r.shown[0]
    out["tail_fraction_basic"] = Measured(
        statistics.fmean(b.tail_fraction for b, _ in pairs),
        {"shown": shown_basic.seed, "shown_tail": shown_basic.tail_fraction},
    )
    out["tail_fraction_adaptive"] = Measured(statistics.fmean(a.tail_fraction for _, a in pairs))
    ub, ua = r.uniform
    out["adaptive_over_basic_time_uniform"] = Measured(
        ua.end_s / ub.end_s, {"basic": ub.end_s, "adaptive": ua.end_s, "bound": ub.bound_s}
    )
    q = r.quota
    shares = q.day
    out["quota_max_error_pp"] = Measured(
        q.max_error_pp,
        {
            "hours": q.setup.hours,
            "nodes": q.setup.nodes,
            "shares": [(g.name, 100 * shares[g.name]) for g in q.setup.groups],
            "control": r.control.max_error_pp,
        },
    )
    return out


def _csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())
    return path


def write_proof_figures(r: ProofResults, out_dir: Path) -> list[tuple[str, Path]]:
    """Write the figures (PNG) and their data (CSV) into ``out_dir``; returns (title, PNG)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    basic, adaptive = r.shown
    workers = set(basic.worker_nodes)
    for run in r.shown:
        name = run.policy.replace("-", "_")
        write_packets_csv(out_dir / f"packets_{name}.csv", run.packets, workers, policy=run.policy)
        write_progress_csv(
            out_dir / f"progress_{name}.csv",
            progress(run.packets, 10.0, run.end_s),
            policy=run.policy,
        )
    _csv(out_dir / "uneven.csv", uneven_table(r.pairs))
    _csv(
        out_dir / "sensitivity.csv",
        [{"cpu_ms_per_event": ms, "adaptive_over_basic": round(x, 4)} for ms, x in r.sensitivity],
    )
    figs = []
    title = (
        f"Uneven data, placement {basic.seed}: {r.setup.workers} workers, "
        f"{r.setup.servers} file servers (Figs. 3-4)"
    )
    runs = [
        ("basic packetizer", basic.packets, basic.end_s),
        ("adaptive packetizer", adaptive.packets, adaptive.end_s),
    ]
    png = plot_packets(
        runs,
        workers,
        r.setup.workers,
        out_dir / "fig3_4_uneven.png",
        title=title,
    )
    figs.append(("Active workers and packet rates, basic and adaptive packetizers", png))
    figs.append(("CPU quotas over the day", _plot_quota(r.quota, out_dir)))
    return figs


def _plot_quota(q: QuotaOutcome, out_dir: Path) -> Path:
    from matplotlib.figure import Figure

    step = quota_step_s(q.setup)
    hourly = q.hourly
    _csv(out_dir / "quota_over_time.csv", [{k: round(v, 4) for k, v in h.items()} for h in hourly])
    day = q.day
    total = sum(g.target_percent for g in q.setup.groups)
    rows = [
        {
            "group": g.name,
            "users": g.users,
            "target_percent": round(100 * g.target_percent / total, 2),
            "achieved_percent": round(100 * day[g.name], 2),
        }
        for g in q.setup.groups
    ]
    _csv(out_dir / "quota.csv", rows)
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=(1, 2))
    xs = range(len(rows))
    left.bar([x - 0.2 for x in xs], [r["achieved_percent"] for r in rows], 0.4, label="achieved")
    left.bar([x + 0.2 for x in xs], [r["target_percent"] for r in rows], 0.4, label="target")
    left.set_xticks(list(xs), [str(r["group"]) for r in rows])
    left.set_ylabel("CPU share over the day [%]")
    left.legend(fontsize="small")
    for i, g in enumerate(q.setup.groups):
        colour = f"C{i}"
        right.plot(
            [h["start_h"] for h in hourly],
            [100 * h[g.name] for h in hourly],
            drawstyle="steps-post",
            color=colour,
            label=g.name,
        )
        right.axhline(100 * g.target_percent / total, ls=":", color=colour)
    right.set_xlabel("time [h]")
    right.set_ylabel(f"CPU share per {step / 3600:g} h [%]")
    right.legend(fontsize="small", ncols=4)
    fig.suptitle(f"CPU quotas: {q.setup.nodes} workers, {q.setup.hours:g} h (Fig. 6)")
    path = out_dir / "fig6_quotas.png"
    atomic_write_bytes(path, lambda fh: fig.savefig(fh, format="png", dpi=110))
    return path
