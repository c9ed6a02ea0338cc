"""Independent simulations in worker processes.

A simulation is one Python thread's work from start to end, so the only way to use a second
core is a second process. Each run is seeded by its own config, so the results do not depend
on how many processes computed them or in which order they finished.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import TypeVar

__all__ = ["map_in_processes", "usable_cores"]

T = TypeVar("T")
R = TypeVar("R")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or a batch
    system may narrow; all of the machine's where the platform cannot say)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


def map_in_processes(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    processes: int = 1,
    on_done: Callable[[int, R], None] | None = None,
) -> list[R]:
    """``[fn(item) for item in items]``, in up to ``processes`` worker processes.

    ``on_done(index, result)`` is called in this process as each result arrives (in the order
    they finish when parallel; drives a progress bar). With one process, or one item, nothing
    is forked. ``fn`` and the items must pickle (a module-level function, plain data). The
    first exception is raised once the runs not yet started are cancelled.
    """
    if processes < 1:
        raise ValueError(f"processes: must be at least 1, got {processes}")
    if processes == 1 or len(items) <= 1:
        out: list[R] = []
        for i, item in enumerate(items):
            result = fn(item)
            out.append(result)
            if on_done is not None:
                on_done(i, result)
        return out
    results: dict[int, R] = {}
    with ProcessPoolExecutor(max_workers=min(processes, len(items))) as pool:
        futures: dict[Future[R], int] = {pool.submit(fn, item): i for i, item in enumerate(items)}
        try:
            for future in as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                if on_done is not None:
                    on_done(i, results[i])
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return [results[i] for i in range(len(items))]
