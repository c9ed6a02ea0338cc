"""Hot-file replication on a real Dask cluster: a file read by enough jobs is copied into a
second worker's cache in the background, and the jobs' results are unchanged."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from datasched.core.actions import Action, Replicate
from datasched.core.events import Event, TransferDone
from datasched.runtime.diskcache import cache_file_name
from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.reports import RunReport
from datasched.runtime.session import (
    build_scheduler,
    cache_by_name,
    default_calibration,
    job_space,
    open_cluster,
)
from runtime.test_engine import FAST, check_exactly_once, options, write_jobs
from runtime_support import N_EVENTS, N_FILES


def test_a_hot_file_reaches_a_second_cache_and_results_are_unchanged(
    demo_catalog: Path, tmp_path: Path
) -> None:
    """A first run caches the first file on one worker; in a second run with replication at
    threshold 1, a job over that file runs where it is cached (out-of-order), and its start
    makes the file hot: it is copied to the other worker, which never read it."""
    per_file = N_EVENTS // N_FILES
    specs = write_jobs(
        tmp_path,
        demo_catalog,
        [{"id": j, "dataset": "zmumu", "events": [0, per_file]} for j in ("first", "again")],
    )
    seen: list[Any] = []

    async def main() -> tuple[RunReport, RunReport]:
        # The demo processor's cost given: a calibration would read through a cache.
        calibration = default_calibration(None, 1e-5)
        reports = []
        opts = options(tmp_path)
        async with open_cluster(opts) as (client, names):
            for spec, hot in ((specs[0], None), (specs[1], 1)):
                sched = build_scheduler(
                    len(names),
                    replace(opts, replicate_hot=hot),
                    job_space([spec]),
                    calibration,
                    policy="out-of-order",
                )
                sched.min_subjob_events = per_file + 1  # no split: one worker reads the job
                handle = sched.handle

                def watch(event: Event, handle: Any = handle) -> list[Action]:
                    out: list[Action] = handle(event)
                    seen.extend(x for x in [event, *out] if isinstance(x, TransferDone | Replicate))
                    return out

                sched.handle = watch  # type: ignore[method-assign]  # wrapped: the test watches each event
                engine = RuntimeEngine(client, sched, names, config=FAST)
                reports.append(await engine.run([spec], known_cache=await cache_by_name(client)))
        return reports[0], reports[1]

    first, again = asyncio.run(main())
    check_exactly_once(first, specs[:1], demo_catalog)
    check_exactly_once(again, specs[1:], demo_catalog)
    (reader,) = {p.node for p in first.packets}
    assert {(p.node, p.source) for p in again.packets} == {(reader, "cache")}
    # The file went to the other worker in the background, and landed there.
    replicate, done = seen
    assert isinstance(replicate, Replicate)
    assert isinstance(done, TransferDone)
    assert done.node == replicate.node != replicate.source
    assert done.added == replicate.data
    url = specs[0].dataset.files[0].url
    holders = sorted(
        d.name for d in (tmp_path / "caches").iterdir() if (d / cache_file_name(url)).exists()
    )
    assert len(holders) == 2, holders
