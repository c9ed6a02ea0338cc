"""The studies' tests run the papers' quick reproductions (thousands of simulated jobs, for
their statistics): the scheduler's validation would double their CPU time, so it is off here
unless ``DATASCHED_VALIDATE`` is set in the environment, as in tests/sim/conftest.py."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module", autouse=True)
def _validation_off() -> Iterator[None]:
    """Module-scoped and autouse, so it comes before the modules' own shared fixtures (a
    quick reproduction built once per module runs without validation too)."""
    with pytest.MonkeyPatch.context() as patch:
        if os.environ.get("DATASCHED_VALIDATE_BY_TESTS"):
            patch.setenv("DATASCHED_VALIDATE", "0")
        yield
