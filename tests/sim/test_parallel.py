"""Simulations side by side in processes or on a Dask cluster: the same results, in the same
order, as one by one."""

from __future__ import annotations

import dataclasses
import math
import socket
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, cast

import pytest

from datasched.sim.experiment import SimConfig, sweep
from datasched.sim.metrics import Summary
from datasched.sim.parallel import (
    ClusterError,
    _stop_workers,
    _worker_signals,
    check_scheduler,
    map_in_processes,
    usable_cores,
)
from datasched.studies.ponce.perfmap import build_map


def test_results_come_back_in_the_order_of_the_items() -> None:
    # The first item takes longest, so the other worker's results usually arrive first.
    items = [range(20_000_000), range(4), range(10), range(3)]
    seen: list[tuple[int, int]] = []
    out = map_in_processes(sum, items, processes=2, on_done=lambda i, r: seen.append((i, r)))
    expected = [sum(r) for r in items]
    assert out == expected
    assert sorted(seen) == list(enumerate(expected))


def test_one_process_runs_in_this_one_in_order() -> None:
    seen: list[int] = []
    out = map_in_processes(abs, [-2, 3, -1], on_done=lambda i, _: seen.append(i))
    assert out == [2, 3, 1]
    assert seen == [0, 1, 2]


def test_a_failure_in_a_worker_is_raised_here() -> None:
    with pytest.raises(ValueError, match="math domain error"):
        map_in_processes(math.sqrt, [1.0, -1.0, 4.0], processes=2)


def test_a_stopped_pool_leaves_no_thread_to_race_the_exit() -> None:
    """Stopping a pool (Ctrl-C, SIGTERM) ends its manager thread before returning. Left
    running, the thread closes its wake-up pipe while the interpreter's exit hook writes to
    it, and the exit printed "Bad file descriptor" in about one run in ten."""
    pool = ProcessPoolExecutor(max_workers=2, initializer=_worker_signals)
    futures = [pool.submit(time.sleep, 60) for _ in range(3)]
    deadline = time.monotonic() + 30
    while not all(p.is_alive() for p in pool._processes.values()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # (typeshed types it as the wake-up object; it is the thread)
    manager = cast("threading.Thread | None", pool._executor_manager_thread)
    wakeup = pool._executor_manager_thread_wakeup
    assert manager is not None
    assert manager.is_alive()
    _stop_workers(pool)
    assert not manager.is_alive()
    assert wakeup._closed
    assert all(f.done() for f in futures)


def test_processes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="processes: must be at least 1"):
        map_in_processes(abs, [1], processes=0)


def test_usable_cores_is_positive() -> None:
    assert usable_cores() >= 1


def _without_wall(summary: Summary) -> dict[str, Any]:
    fields = dataclasses.asdict(summary)
    del fields["wall_s"]  # time taken, not a result
    return fields


def test_a_sweep_in_two_processes_equals_one_in_one() -> None:
    configs = [
        SimConfig(policy=p, load_jobs_per_h=load, n_jobs=80)
        for p in ("splitting", "cache-splitting", "out-of-order")
        for load in (0.3, 0.9)
    ]
    arrived: list[str] = []
    serial = sweep(configs)
    parallel = sweep(configs, processes=2, on_result=lambda s: arrived.append(s.policy))
    assert [_without_wall(s) for s in parallel] == [_without_wall(s) for s in serial]
    assert [(s.policy, s.load_jobs_per_h) for s in parallel] == [
        (c.policy, c.load_jobs_per_h) for c in configs
    ]
    assert sorted(arrived) == sorted(c.policy for c in configs)


@pytest.mark.slow  # 23 s; the default run keeps the same check on a Dask cluster (below)
def test_a_performance_map_in_two_processes_equals_one_in_one() -> None:
    base = SimConfig(policy="delayed", n_jobs=60)
    grid = {"periods_h": [0.0], "stripes": [200, 5000], "caches_gb": [50.0]}
    serial = build_map(base, **grid)  # type: ignore[arg-type]
    points: list[int] = []
    parallel = build_map(
        base,
        **grid,  # type: ignore[arg-type]
        processes=2,
        on_point=lambda p: points.append(p.stripe_events),
    )
    assert parallel == serial
    assert [p.stripe_events for p in parallel.points] == [200, 5000]
    assert sorted(points) == [200, 5000]


# -- on a Dask cluster (tests/conftest.py starts one on loopback) -------------------------------


def test_results_from_a_dask_cluster_come_back_in_the_order_of_the_items(
    dask_cluster: Any,
) -> None:
    items = [range(20_000_000), range(4), range(10), range(3)]
    seen: list[tuple[int, int]] = []
    out = map_in_processes(
        sum,
        items,
        scheduler=dask_cluster.scheduler_address,
        on_done=lambda i, r: seen.append((i, r)),
    )
    expected = [sum(r) for r in items]
    assert out == expected
    assert sorted(seen) == list(enumerate(expected))


def test_a_failure_on_a_dask_worker_is_raised_here_and_the_rest_cancelled(
    dask_cluster: Any,
) -> None:
    items = [-1.0, *[float(n) for n in range(1, 40)]]
    with pytest.raises(ValueError, match="math domain error"):
        map_in_processes(math.sqrt, items, scheduler=dask_cluster.scheduler_address)
    deadline = time.monotonic() + 10
    while dask_cluster.scheduler.tasks and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not dask_cluster.scheduler.tasks  # nothing left queued on the cluster


def test_a_sweep_on_a_dask_cluster_equals_one_in_one_process(dask_cluster: Any) -> None:
    configs = [
        SimConfig(policy=p, load_jobs_per_h=load, n_jobs=80)
        for p in ("splitting", "cache-splitting", "out-of-order")
        for load in (0.3, 0.9)
    ]
    arrived: list[str] = []
    serial = sweep(configs)
    remote = sweep(
        configs,
        scheduler=dask_cluster.scheduler_address,
        on_result=lambda s: arrived.append(s.policy),
    )
    assert [_without_wall(s) for s in remote] == [_without_wall(s) for s in serial]
    assert sorted(arrived) == sorted(c.policy for c in configs)


def test_a_performance_map_on_a_dask_cluster_equals_one_in_one_process(
    dask_cluster: Any,
) -> None:
    base = SimConfig(policy="delayed", n_jobs=30, n_nodes=3)
    grid = {"periods_h": [0.0], "stripes": [1000, 5000], "caches_gb": [50.0, 100.0]}
    serial = build_map(base, **grid)  # type: ignore[arg-type]
    remote = build_map(base, **grid, scheduler=dask_cluster.scheduler_address)  # type: ignore[arg-type]
    assert remote == serial
    assert [(p.stripe_events, p.cache_gb) for p in remote.points] == [
        (1000, 50.0),
        (5000, 50.0),
        (1000, 100.0),
        (5000, 100.0),
    ]


def test_losing_the_scheduler_midway_is_a_cluster_error() -> None:
    pytest.importorskip("distributed", reason="the runtime extra is not installed")
    from distributed import LocalCluster

    # A cluster of its own, in this process (quick to start), closed after the first result.
    cluster = LocalCluster(  # type: ignore[no-untyped-call]  # distributed is not annotated
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    )

    def close_cluster(i: int, r: int) -> None:
        cluster.close()

    with cluster, pytest.raises(ClusterError, match="dropped the runs"):
        map_in_processes(
            sum,
            [range(10), *[range(3_000_000)] * 4],
            scheduler=cluster.scheduler_address,
            on_done=close_cluster,
        )


def test_check_scheduler_counts_the_workers(dask_cluster: Any) -> None:
    assert check_scheduler(dask_cluster.scheduler_address) == 2


def test_a_worker_is_not_a_scheduler(dask_cluster: Any) -> None:
    worker = next(iter(dask_cluster.scheduler.workers))
    with pytest.raises(ClusterError, match=r"is not a Dask scheduler \(it is a Worker\)"):
        check_scheduler(worker)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("localhost", "is not a scheduler address like tcp://HOST:PORT"),
        ("http://127.0.0.1:8786", "is not a scheduler address like tcp://HOST:PORT"),
        ("tcp://127.0.0.1:port", "is not a scheduler address like tcp://HOST:PORT"),
    ],
)
def test_a_malformed_address_is_refused_at_once(
    address: str, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At once: refused from the text alone, before any name is looked up or any connection
    # tried (either would fail the test here).
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the network was asked: {args!r}")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    with pytest.raises(ClusterError, match=reason):
        check_scheduler(address)


def test_an_address_where_nothing_listens_is_refused_at_once() -> None:
    # Said as such, without waiting out the timeout (distributed's connect would retry it).
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(ClusterError, match=f"{address}: nothing listens there"):
        map_in_processes(abs, [1, 2], scheduler=address)


def test_a_host_that_does_not_resolve_is_named() -> None:
    # .invalid never resolves (RFC 2606).
    with pytest.raises(ClusterError, match=r"host 'head\.invalid' is not known"):
        check_scheduler("tcp://head.invalid:8786", timeout_s=5)


def test_a_server_that_says_nothing_is_refused_within_the_timeout() -> None:
    # It accepts connections (the kernel does, from the backlog) and never answers: the
    # address of some other service. distributed.Client alone would wait for ever.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(ClusterError, match="no Dask scheduler answered"):
            check_scheduler(address, timeout_s=0.5)


def test_without_dask_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    with pytest.raises(ClusterError, match=r"pip install 'datasched\[runtime\]'"):
        map_in_processes(abs, [1], scheduler="tcp://127.0.0.1:8786")
