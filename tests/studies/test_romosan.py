"""The reproduction of romosan in the default test session: the whole reproduction (every
experiment, every claim key, the figures and the report) at the smoke sizes, and the quick
run's (``reproduce romosan --quick``) own simulations behind the claims that agree with the
paper; one batch of the edges experiment, determinism. The full reproduction is slow."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from datasched.sim.parallel import map_in_processes
from datasched.studies.claims import Claim, fill_claims
from datasched.studies.romosan.claims import ROMOSAN_CLAIMS, measure_romosan
from datasched.studies.romosan.reproduce import run_romosan, write_romosan
from datasched.studies.romosan.runs import (
    CLUSTER,
    FULL,
    QUICK,
    SMOKE,
    CoschedRun,
    edge_point,
    run_one,
    study_runs,
)

ISSUE_KEYS = {
    "fifo_over_lp_copies",
    "fifo_over_lp_utilization",
    "sjf_over_lp_copies",
    "sjf_over_lp_makespan",
    "lp_delay_scheduler_time_ratio",
    "remote_copies_32_over_1_server",
    "local_copies_32_over_2_servers",
    "mincostflow_solve_s_64k_files_32_servers",
}


SIMULATED_AGREEMENTS = (
    "fifo_over_lp_copies",
    "fifo_over_sjf_copies",
    "fifo_over_lp_utilization",
    "sjf_over_lp_copies",
    "sjf_over_lp_makespan",
    "local_copies_32_over_2_servers",
)
"""The claims that agree in the full reproduction and come from the simulations alone
(copies, utilization, makespan: deterministic). The scheduler-time and solve-time claims are
wall-clock measurements on a shared machine: reported, never asserted."""


AGREEMENT_SERVERS = (2, 8, 32)
"""The servers of the quick run's simulations that the agreeing claims read: the claims at
:attr:`~RomosanStudy.claims_servers` (8) and the local copies at 32 against 2 servers."""


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    """The whole reproduction, as ``reproduce romosan --quick`` runs it (every experiment in
    two processes, the edges batches, the claims, the figures, the report), at the smoke
    sizes: the quick run differs only in its sizes, and whole it took a minute of the
    default session; its own simulations are in :func:`quick_claims`."""
    outcome = run_romosan(SMOKE, processes=2)
    out_dir = tmp_path_factory.mktemp("romosan")
    write_romosan(outcome, out_dir)
    return outcome, out_dir


@pytest.fixture(scope="module")
def quick_claims() -> dict[str, Claim]:
    """The claims of the quick run that come from its servers experiment at
    :data:`AGREEMENT_SERVERS`: the same simulations (each the same :class:`CoschedRun`), so the
    same values, as in the quick run whole."""
    study = replace(QUICK, servers=AGREEMENT_SERVERS)
    runs = [r for r in study_runs(study) if r.experiment == "servers"]
    assert len(runs) == 3 * len(AGREEMENT_SERVERS)
    assert set(runs) <= set(study_runs(QUICK))
    results = map_in_processes(run_one, runs, processes=2)
    for r in results:
        assert r.jobs_completed == QUICK.jobs
        assert r.remote_copies >= 1
    return {c.key: c for c in fill_claims(ROMOSAN_CLAIMS, measure_romosan(results, [], study))}


def test_the_whole_run_measures_every_claim(whole: tuple[object, Path]) -> None:
    outcome, _ = whole
    claims = {c.key: c for c in outcome.claims}  # type: ignore[attr-defined]
    assert set(claims) == {spec.key for spec in ROMOSAN_CLAIMS}
    assert set(claims) >= ISSUE_KEYS
    for c in claims.values():
        assert c.note, c.key
        assert "{" not in c.note, c.key
        assert c.ours == c.ours, c.key
        assert c.ours >= 0, c.key  # a number, not NaN
    for r in outcome.results:  # type: ignore[attr-defined]
        assert r.jobs_completed == (SMOKE.zipf_jobs if r.experiment == "zipf" else SMOKE.jobs)
        # Every file a job needs comes from the archive at least once.
        assert r.remote_copies >= 1


def test_the_quick_run_agrees_where_the_full_one_does(quick_claims: dict[str, Claim]) -> None:
    """2,000 jobs instead of 10,000: the simulated claims that agree at the paper's sizes
    agree here too (the others are explained in docs/cosched.md)."""
    claims = quick_claims
    for key in SIMULATED_AGREEMENTS:
        assert claims[key].agrees, (key, claims[key].ours, claims[key].note)


def test_the_delay_note_says_what_the_ratio_shows(whole: tuple[object, Path]) -> None:
    """The note on local copies under LP delays follows our value, not the full run's."""
    outcome, _ = whole
    claim = {c.key: c for c in outcome.claims}["lp_delay_local_copies_ratio"]  # type: ignore[attr-defined]
    if claim.ours > 1.02:
        assert "More with the delay" in claim.note
    elif claim.ours < 0.98:
        assert "Fewer with the delay" in claim.note
    else:
        assert "About as many either way" in claim.note


def test_the_whole_run_writes_figures_and_a_report(whole: tuple[object, Path]) -> None:
    _, out_dir = whole
    report = (out_dir / "report.md").read_text()
    assert "## The cluster" in report
    assert "20 GB (the paper's)" in report
    assert "archive bandwidth" in report
    for spec in ROMOSAN_CLAIMS:
        assert spec.claim in report
    with (out_dir / "claims.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {r["key"] for r in rows} == {spec.key for spec in ROMOSAN_CLAIMS}
    figures = out_dir / "figures"
    for key in ("servers_copies", "servers_utilization", "servers_scheduler_time", "edges"):
        assert (figures / f"{key}.png").stat().st_size > 1000
        with (figures / f"{key}.csv").open() as fh:
            assert len(list(csv.DictReader(fh))) > 0
    for key in ("zipf_small_cache", "zipf_infinite_cache", "delays"):
        assert (figures / f"{key}.png").exists()
        assert (figures / f"{key}.csv").exists()
        assert f"figures/{key}.png" in report


def test_an_edges_batch_wants_every_file() -> None:
    """More files than jobs: each job needs several, every file is in the batch; fewer:
    each file is wanted by several jobs. Either way the batch places a job on every slot."""
    study = replace(SMOKE, edge_jobs=300, edge_servers=4)
    for n_files in (100, 1000):
        point = edge_point(n_files, study, full=n_files <= 100)
        assert point.edges == n_files * 4
        assert point.jobs == 300
        # Nothing is cached: every placed job pays r / min(N(f), 2 free slots).
        per_job = CLUSTER.remote_cost / min(max(300 // n_files, 1), CLUSTER.slots)
        assert point.objective == pytest.approx(4 * CLUSTER.slots * per_job)
        assert point.solve_s > 0
        assert point.batch_s > 0


def test_a_run_is_deterministic() -> None:
    run = CoschedRun("servers", "mincostflow", 4, 200, 20, 5.0, lp_period_s=30.0, seed=3)
    a, b = run_one(run), run_one(run)
    assert (a.local_copies, a.remote_copies, a.makespan_h, a.batches) == (
        b.local_copies,
        b.remote_copies,
        b.makespan_h,
        b.batches,
    )
    assert a.jobs_completed == 200
    assert a.batches > 0


def test_the_study_covers_each_experiment() -> None:
    runs = study_runs(FULL)
    kinds = {r.experiment for r in runs}
    assert kinds == {"servers", "zipf", "delays"}
    servers = [r for r in runs if r.experiment == "servers"]
    assert len(servers) == 3 * len(FULL.servers)
    assert {r.jobs for r in servers} == {10_000}
    assert {r.cache_gb for r in runs if r.experiment == "zipf"} == {
        FULL.small_cache_gb,
        FULL.infinite_cache_gb,
    }
    assert max(r.lp_period_s for r in runs) >= 300  # several minutes


@pytest.mark.slow
def test_the_full_reproduction(tmp_path: Path) -> None:
    """The paper's sizes (several minutes on two cores). The simulated claims that agree
    here are checked to keep agreeing; docs/cosched.md explains the ones that do not. The
    two timed claims are reported, not asserted (wall-clock time on a shared machine)."""
    outcome = run_romosan(FULL, processes=2)
    write_romosan(outcome, tmp_path)
    claims = {c.key: c for c in outcome.claims}
    assert set(claims) >= ISSUE_KEYS
    for key in SIMULATED_AGREEMENTS:
        assert claims[key].agrees, (key, claims[key].ours, claims[key].note)
