"""Test configuration: a Hypothesis profile without deadlines (CI machines are noisy), a
Dask cluster on loopback for the tests that spread simulations over one, and the scheduler's
validation on (``DATASCHED_VALIDATE=1``: every scheduler the tests build checks its books
after the events, docs/design.md "Invariants and tracing"; set it to 0 to measure without)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

if "DATASCHED_VALIDATE" not in os.environ:
    os.environ["DATASCHED_VALIDATE"] = "1"
    # The environment did not choose: a directory whose tests do not pay for it may turn
    # validation off (tests/sim/conftest.py).
    os.environ["DATASCHED_VALIDATE_BY_TESTS"] = "1"

settings.register_profile("ci", deadline=None, max_examples=100)
settings.load_profile("ci")


@pytest.fixture(scope="session")
def dask_cluster() -> Iterator[Any]:
    """A ``distributed.LocalCluster`` listening on 127.0.0.1 only: a scheduler and two worker
    processes of one thread each, started once per test session (about two seconds).

    Skipped where the runtime extra (Dask) is not installed.
    """
    pytest.importorskip("distributed", reason="the runtime extra is not installed")
    from distributed import LocalCluster

    with LocalCluster(  # type: ignore[no-untyped-call]  # distributed is not annotated
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",  # None would still take port 8787 when free
        silence_logs=logging.ERROR,
    ) as cluster:
        yield cluster
