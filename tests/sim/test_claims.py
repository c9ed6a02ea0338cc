"""The claims table of ponce-hersch and how measurements fill it (no simulation here)."""

from __future__ import annotations

import pytest

from datasched.sim.claims import ClaimSpec, Measured, fill_claims
from datasched.sim.claims_ponce import PONCE_CLAIMS, PONCE_FCFS_CLAIMS, PONCE_POLICY_CLAIMS
from datasched.sim.ponce_measure import PIPELINING_GAIN_LOADS


def test_table_keys_are_unique_and_cover_the_measured_loads() -> None:
    keys = [spec.key for spec in PONCE_CLAIMS]
    assert len(keys) == len(set(keys))
    assert PONCE_CLAIMS == PONCE_FCFS_CLAIMS + PONCE_POLICY_CLAIMS
    for load in PIPELINING_GAIN_LOADS:
        assert f"splitting_pipelining_gain_{load:g}" in keys


def test_every_claim_cites_a_section_and_has_a_known_bound() -> None:
    for spec in PONCE_CLAIMS:
        assert spec.section.startswith("§"), spec.key
        assert spec.bound in ("about", "at_most", "at_least", "below", "above"), spec.key
        assert spec.rel_tol >= 0, spec.key


def test_fill_keeps_the_table_order_and_skips_what_was_not_measured() -> None:
    table = (
        ClaimSpec("a", "§1", "first", 1.0, "", 0.1, "at {load:g} jobs/h"),
        ClaimSpec("b", "§2", "second", 2.0, "h", 0.0, bound="at_most"),
        ClaimSpec("c", "§3", "third", 3.0, "", 0.1, "{pts}.", series=(("pts", "{0} GB: {1:.2f}"),)),
    )
    measured = {
        "c": Measured(3.0, {"pts": [(50, 1.234), (200, 1.0)]}),
        "a": Measured(1.05, {"load": 0.5}),
    }
    claims = fill_claims(table, measured)
    assert [c.key for c in claims] == ["a", "c"]
    assert claims[0].note == "at 0.5 jobs/h" and claims[0].agrees
    assert claims[1].note == "50 GB: 1.23, 200 GB: 1.00."


def test_a_measured_key_missing_from_the_table_is_an_error() -> None:
    with pytest.raises(KeyError, match="typo"):
        fill_claims(PONCE_FCFS_CLAIMS, {"typo": Measured(1.0)})
