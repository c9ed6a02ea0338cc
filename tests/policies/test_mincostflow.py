"""The assignment batch of romosan's co-scheduling: the min-cost flow (both networks) against a
brute force on tiny instances and the HiGHS linear program on small ones; the flow is always
min(queued jobs, free slots); the paper's worked example; instances read from JSON."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

from datasched.policies.cosched.mincostflow import (
    NETWORKS,
    Batch,
    BatchFlow,
    InstanceError,
    parse_instance,
    solve,
    solve_instance,
    solve_lp,
)
from strategies import flow_batches, grouped_flow_batches


def exact_cost(batch: Batch, f: int, s: int) -> Fraction:
    """C(f, s) / min(N(f), S(s)), as a fraction."""
    zero = batch.zero_idx[batch.zero_ptr[f] : batch.zero_ptr[f + 1]].tolist()
    if s in zero:
        return Fraction(0)
    c = batch.local_cost if batch.has_copy[f] else batch.remote_cost
    return Fraction(c) / min(int(batch.popularity[f]), int(batch.free[s]))


def brute_force(batch: Batch) -> Fraction:
    """The least objective over every integral flow of total min(sum N, sum S)."""
    edges = [
        (f, s)
        for f in range(batch.n_files)
        for s in range(batch.n_servers)
        if batch.popularity[f] > 0 and batch.free[s] > 0
    ]
    pop = batch.popularity.tolist()
    free = batch.free.tolist()
    best: list[Fraction | None] = [None]

    def walk(i: int, left: int, cost: Fraction) -> None:
        if left == 0:
            if best[0] is None or cost < best[0]:
                best[0] = cost
            return
        if i == len(edges):
            return
        f, s = edges[i]
        for q in range(min(pop[f], free[s], left), -1, -1):
            pop[f] -= q
            free[s] -= q
            walk(i + 1, left - q, cost + q * exact_cost(batch, f, s))
            pop[f] += q
            free[s] += q

    walk(0, batch.total_flow, Fraction(0))
    assert best[0] is not None
    return best[0]


def _check_within(batch: Batch, result: BatchFlow, slots: Any) -> None:
    """As many units as the files want or ``slots`` (per server) offer, none past either."""
    assert result.total_flow == min(batch.popularity.sum(), slots.sum())
    assert int(result.units.sum()) == result.total_flow
    per_file = np.bincount(result.files, weights=result.units, minlength=batch.n_files)
    per_server = np.bincount(result.servers, weights=result.units, minlength=batch.n_servers)
    assert (per_file <= batch.popularity).all()
    assert (per_server <= slots).all()


def check_feasible(batch: Batch, result: BatchFlow) -> None:
    _check_within(batch, result, batch.free)
    assert (result.units > 0).all()


@pytest.mark.parametrize("network", NETWORKS)
@settings(max_examples=150, deadline=None)
@given(batch=flow_batches(max_files=3, max_servers=3, max_units=3))
def test_the_flow_is_a_brute_force_optimum_on_tiny_instances(network: Any, batch: Batch) -> None:
    result = solve(batch, network)
    check_feasible(batch, result)
    best = brute_force(batch)
    assert result.objective == pytest.approx(float(best), abs=1e-9)
    flows = zip(result.files, result.servers, result.units, strict=True)
    mine = sum((u * exact_cost(batch, f, s) for f, s, u in flows), Fraction(0))
    assert mine == best


@settings(max_examples=60, deadline=None)
@given(batch=flow_batches(max_files=8, max_servers=6, max_units=6))
def test_both_networks_reach_the_highs_lp_optimum_on_small_instances(batch: Batch) -> None:
    lp_objective, lp_flow = solve_lp(batch)
    assert lp_flow.sum() == pytest.approx(batch.total_flow)
    for network in NETWORKS:
        result = solve(batch, network)
        check_feasible(batch, result)
        assert result.objective == pytest.approx(lp_objective, rel=1e-9, abs=1e-9)


def random_batch(n_files: int, n_servers: int, seed: int, max_free: int = 3) -> Batch:
    rng = np.random.default_rng(seed)
    pop = rng.integers(0, 9, n_files)
    free = rng.integers(0, max_free + 1, n_servers)
    holders = [rng.choice(n_servers, rng.integers(0, 3), replace=False) for _ in range(n_files)]
    ptr = np.cumsum([0] + [len(h) for h in holders])
    idx = np.concatenate([np.sort(h) for h in holders]).astype(np.int64)
    return Batch(
        popularity=pop.astype(np.int64),
        free=free.astype(np.int64),
        zero_ptr=ptr.astype(np.int64),
        zero_idx=idx,
        has_copy=(np.diff(ptr) > 0) | (rng.random(n_files) < 0.2),
        local_cost=1.0,
        remote_cost=10.0,
    )


def check_grouped_feasible(batch: Batch, result: BatchFlow) -> None:
    """Like :func:`check_feasible`, a group offering its servers' slots together."""
    _check_within(batch, result, batch.slots)


@pytest.mark.parametrize("network", NETWORKS)
@settings(max_examples=120, deadline=None)
@given(batch=grouped_flow_batches(max_files=3, max_servers=3, max_units=3))
def test_a_grouped_batch_costs_what_its_servers_one_by_one_cost(network: Any, batch: Batch) -> None:
    """Servers holding none of the files, as groups of equal free slots: the optimum is
    that of the same servers one by one (a brute force on tiny instances, both networks)."""
    one_by_one, origin = batch.expanded()
    assert one_by_one.n_servers == batch.n_machines
    assert (one_by_one.free == batch.free[origin]).all()
    result = solve(batch, network)
    check_grouped_feasible(batch, result)
    assert result.total_flow == one_by_one.total_flow
    if one_by_one.n_servers <= 4:
        assert result.objective == pytest.approx(float(brute_force(one_by_one)), abs=1e-9)
    assert result.objective == pytest.approx(solve(one_by_one, network).objective, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(batch=grouped_flow_batches(max_files=8, max_servers=6, max_units=6))
def test_a_grouped_batch_reaches_the_highs_lp_optimum(batch: Batch) -> None:
    """HiGHS solves the batch with its groups written out server by server."""
    lp_objective, lp_flow = solve_lp(batch)
    assert lp_flow.shape == (batch.n_files, batch.n_machines)
    for network in NETWORKS:
        result = solve(batch, network)
        check_grouped_feasible(batch, result)
        assert result.objective == pytest.approx(lp_objective, rel=1e-9, abs=1e-9)


def test_a_group_of_empty_servers_takes_what_they_would() -> None:
    """Two files of 3 and 1 queued jobs, nothing cached: 10 empty servers of 2 free slots
    as one group take the 4 jobs at the cost they would one by one, each file's units at
    r / min(N(f), 2)."""
    batch = Batch(
        popularity=np.array([3, 1], dtype=np.int64),
        free=np.array([2], dtype=np.int64),
        zero_ptr=np.array([0, 0, 0], dtype=np.int64),
        zero_idx=np.zeros(0, dtype=np.int64),
        has_copy=np.array([False, False]),
        count=np.array([10], dtype=np.int64),
    )
    result = solve(batch)
    assert result.total_flow == 4
    assert result.units.tolist() == [3, 1]
    assert result.objective == pytest.approx(3 * 10.0 / 2 + 1 * 10.0 / 1)


@pytest.mark.parametrize("max_free", [3, 40])
def test_larger_batches_match_highs_with_exact_and_rounded_costs(max_free: int) -> None:
    """200 files on 20 servers. With up to 40 free slots a server, the least common multiple
    of the capacities passes 2^40 and the unit costs are rounded: still the LP's optimum."""
    batch = random_batch(200, 20, seed=max_free, max_free=max_free)
    lp_objective, _ = solve_lp(batch)
    for network in NETWORKS:
        result = solve(batch, network)
        check_feasible(batch, result)
        assert result.objective == pytest.approx(lp_objective, rel=1e-7)


def test_an_empty_batch_has_no_flow() -> None:
    batch = random_batch(5, 3, seed=1)
    none_free = Batch(
        batch.popularity,
        np.zeros(3, dtype=np.int64),
        batch.zero_ptr,
        batch.zero_idx,
        batch.has_copy,
    )
    result = solve(none_free)
    assert result.total_flow == 0
    assert len(result.units) == 0
    assert result.objective == 0.0


def paper_example() -> dict[str, Any]:
    """The worked example as its printed bounds and flow read: file f1 wanted by 5 queued jobs
    and cached on s1, f2 by 3 jobs and cached nowhere; s1 with 7 free slots, s2 with 4; l = 1,
    r = 10. Then e(f1, s1) <= min(5, 7) = 5 and e(f2, s2) <= min(3, 4) = 3 as printed, the
    flow is min(5 + 3, 7 + 4) = 8 as printed, and the edge costs are the printed 0, 1, 10,
    10."""
    return {
        "local_cost": 1,
        "remote_cost": 10,
        "files": [
            {"id": "f1", "popularity": 5, "holders": ["s1"]},
            {"id": "f2", "popularity": 3, "holders": []},
        ],
        "servers": [{"id": "s1", "free_slots": 7}, {"id": "s2", "free_slots": 4}],
    }


def test_the_papers_worked_example() -> None:
    """Flow 8: the five jobs of f1 on s1, which caches it (cost 0), and the three of f2
    fetched from the archive, 10 / min(3, S) = 10/3 a job wherever they go: objective 10.

    The slide's printed answer (e1 = 3, e2 = 4, e3 = 1) cannot be this instance's: it sends 7
    jobs of the file whose edges are e1 and e2, and pays for a local copy of f1 while f1's
    holder has free slots. No reading of the slide makes it an optimum (see the next test);
    docs/cosched.md has the details."""
    result = solve_instance(parse_instance(paper_example()))
    assert result["total_flow"] == 8
    assert result["objective"] == pytest.approx(10.0)
    flow = {(f, s): u for f, s, u in result["flow"]}
    assert flow[("f1", "s1")] == 5
    assert ("f1", "s2") not in flow
    assert flow.get(("f2", "s1"), 0) + flow.get(("f2", "s2"), 0) == 3
    lp_objective, _ = solve_lp(parse_instance(paper_example()).batch)
    assert lp_objective == pytest.approx(10.0)


def test_the_slides_printed_constraints_have_a_cheaper_answer_than_the_printed_one() -> None:
    """The slide's constraints as printed (e1, e2 <= 5; e3, e4 <= 3; e1 + e2 <= 7;
    e1 + e3 <= 5; e2 + e4 <= 5; e1 + e2 + e3 + e4 = 8) with its printed objective
    0 e1 + 1 e2 + 10 e3 + 10 e4: the printed answer (3, 4, 1, 0) is feasible but costs 14; the
    optimum is (5, 2, 0, 1) at 12. Whatever the extraction lost, the printed answer is not an
    optimum of the printed program."""
    from scipy.optimize import linprog

    c = [0, 1, 10, 10]
    a_ub = [[1, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1]]
    b_ub = [7, 5, 5]
    bounds = [(0, 5), (0, 5), (0, 3), (0, 3)]
    printed = np.array([3, 4, 1, 0])
    assert (np.array(a_ub) @ printed <= b_ub).all()
    assert printed.sum() == 8
    assert float(np.dot(c, printed)) == 14
    lp = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=[[1, 1, 1, 1]], b_eq=[8], bounds=bounds)
    assert lp.status == 0
    assert lp.fun == pytest.approx(12.0)
    assert np.allclose(lp.x, [5, 2, 0, 1])


def test_an_instance_names_ids_in_its_answer() -> None:
    doc = {
        "local_cost": 1.5,
        "remote_cost": 9,
        "files": [{"id": 7, "popularity": 2, "holders": ["b"]}, {"id": 8, "popularity": 0}],
        "servers": [{"id": "a", "free_slots": 1}, {"id": "b", "free_slots": 1}],
    }
    result = solve_instance(parse_instance(doc), "full")
    assert result["total_flow"] == 2
    assert sorted(map(tuple, result["flow"])) == [(7, "a", 1), (7, "b", 1)]
    assert result["objective"] == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(local_cost=-1), "local_cost"),
        (lambda d: d.update(remote_cost="ten"), "remote_cost"),
        (lambda d: d.pop("servers"), "servers"),
        (lambda d: d["files"][1].update(popularity=-2), "files[1].popularity"),
        (lambda d: d["files"][0].update(popularity=1.5), "files[0].popularity"),
        (lambda d: d["files"][0].update(holders=["s9"]), "files[0].holders[0]"),
        (lambda d: d["files"][1].update(id="f1"), "files[1].id"),
        (lambda d: d["servers"][1].update(free_slots=-4), "servers[1].free_slots"),
        (lambda d: d["servers"][1].update(id="s1"), "servers[1].id"),
        (lambda d: d["servers"][0].update(id=True), "servers[0].id"),
        (lambda d: d["files"].append("f3"), "files[2]"),
    ],
)
def test_bad_instances_name_the_field(change: Any, field: str) -> None:
    doc = paper_example()
    change(doc)
    with pytest.raises(InstanceError) as info:
        parse_instance(doc)
    assert info.value.field == field


def test_an_instance_must_be_an_object() -> None:
    with pytest.raises(InstanceError, match="instance"):
        parse_instance([1, 2])
