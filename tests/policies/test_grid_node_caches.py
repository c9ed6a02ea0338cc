"""Node caches pay at a grid site: with a few datasets asked for again and again, sites
running out-of-order (cached work first) read fewer bytes over their LANs per job than sites
running the processing farm (no cache), on the same grid and the same jobs' draws."""

from __future__ import annotations

from dataclasses import replace

from datasched.gridsim.engine import GridRun, run_grid
from datasched.gridsim.model import GridConfig
from datasched.policies.grid.schedulers import DATA_DO_NOTHING, JOB_DATA_PRESENT, JOB_LOCAL

HOT = GridConfig(users=12, sites=4, datasets=20, jobs=120, tier1=2, cache_gb=6.0, popularity_p=0.3)


def test_a_cache_aware_site_reads_less_over_its_lan_than_a_farm() -> None:
    for external in (JOB_DATA_PRESENT, JOB_LOCAL):
        farm = run_grid(GridRun(replace(HOT, local="farm"), external, DATA_DO_NOTHING))
        ooo = run_grid(GridRun(replace(HOT, local="out-of-order"), external, DATA_DO_NOTHING))
        # The farm keeps nothing: every job reads its whole dataset over the LAN.
        assert farm.lan_mb_per_job > 500
        assert ooo.lan_mb_per_job < 0.8 * farm.lan_mb_per_job, external
        assert ooo.mean_response_s < farm.mean_response_s, external
