"""The contention coefficient fitted to a file server's measured rates (``proof_runs``): no
hosts needed, so it runs by default (milliseconds)."""

from __future__ import annotations

import pytest

from hosts.proof_runs import fit_contention


def test_a_constant_total_fits_zero() -> None:
    assert fit_contention({1: 1e5, 2: 1e5, 3: 1e5}, {1: 10, 2: 5, 3: 1}) == pytest.approx(0.0)


@pytest.mark.parametrize("c", [0.1, 0.5, 2.0])
def test_a_falling_total_fits_its_coefficient(c: float) -> None:
    rates = {n: 6e7 / (1 + c * (n - 1)) for n in range(1, 6)}
    assert fit_contention(rates, dict.fromkeys(rates, 3)) == pytest.approx(c)


def test_a_rising_total_and_one_level_fit_zero() -> None:
    """More total with more readers (a token bucket's burst) is no contention; one level of
    readers cannot tell."""
    assert fit_contention({1: 1e5, 2: 1.4e5}, {1: 9, 2: 4}) == 0.0
    assert fit_contention({1: 1e5}, {1: 9}) == 0.0
