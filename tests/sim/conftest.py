"""The simulator's tests run long simulations (thousands of jobs) for their statistics: the
scheduler's validation, on everywhere else in the tests, would double their CPU time, so it
is off here unless ``DATASCHED_VALIDATE`` is set in the environment. Where it pays it is
asked for: the long faulty runs of every policy (``test_faults.py``) validate, and so do the
golden runs and the core's state machine, after every event."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _validation_off(monkeypatch: pytest.MonkeyPatch) -> None:
    if os.environ.get("DATASCHED_VALIDATE_BY_TESTS"):
        monkeypatch.setenv("DATASCHED_VALIDATE", "0")
