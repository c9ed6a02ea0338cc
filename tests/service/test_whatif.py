"""Predictions from a live snapshot (:mod:`datasched.service.whatif`) and the snapshot's JSON
form: ETAs worked out by hand, cache-awareness, determinism, bad input named by field."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest

from datasched.policies.registry import UnknownPolicyError
from datasched.service.contracts import ClusterSnapshot, SnapshotError
from datasched.service.whatif import compare, predict
from service.whatif_support import cached_on_second_node, mixed, one_node


def test_one_node_one_job_takes_events_over_rate() -> None:
    p = predict(one_node(events=5000, rate=1000.0), "farm")
    assert p.jobs == {"r1.0": pytest.approx(5.0)}
    assert p.requests == {"r1": pytest.approx(5.0)}
    assert p.makespan_s == pytest.approx(5.0)
    assert p.time_s == 100.0


def test_only_the_entries_left_count() -> None:
    snap = one_node(events=5000, rate=1000.0)
    data = snap.as_dict()
    data["jobs"][0]["files"][0]["todo"] = [[0, 1000], [4000, 5000]]
    assert predict(ClusterSnapshot.from_dict(data), "farm").jobs["r1.0"] == pytest.approx(2.0)
    data["jobs"][0]["files"][0]["todo"] = []
    done = predict(ClusterSnapshot.from_dict(data), "farm")
    assert done.jobs["r1.0"] == 0.0
    assert done.makespan_s == 0.0


def test_a_jobs_own_cpu_time_beats_the_nodes_rate() -> None:
    data = one_node(events=5000, rate=1000.0).as_dict()
    data["jobs"][0]["cpu_s_per_event"] = 2e-3
    assert predict(ClusterSnapshot.from_dict(data), "farm").jobs["r1.0"] == pytest.approx(10.0)


def test_the_cache_aware_policy_predicts_sooner_than_the_farm() -> None:
    snap = cached_on_second_node()
    farm = predict(snap, "farm")
    aware = predict(snap, "out-of-order")
    # The farm takes the first free slot (the node without the files): 100 MB at 1 MB/s,
    # then 10 s of processing. Out-of-order sends the job where its files are: 10 s.
    assert aware.jobs["r1.0"] == pytest.approx(10.0, rel=1e-6)
    assert farm.jobs["r1.0"] == pytest.approx(110.0, rel=0.1)
    aware_s, farm_s = aware.jobs["r1.0"], farm.jobs["r1.0"]
    assert aware_s is not None
    assert farm_s is not None
    assert aware_s < farm_s


def test_predictions_are_deterministic_and_cover_every_job() -> None:
    snap = mixed()
    for policy in ("farm", "cache-splitting", "out-of-order"):
        a, b = predict(snap, policy), predict(snap, policy)
        assert a == b
        assert set(a.jobs) == {"r1.0", "r1.1", "r2.0", "r3.0"}
        assert list(a.requests) == ["r1", "r2", "r3"]
        assert a.requests["r1"] == max(a.jobs["r1.0"] or 0, a.jobs["r1.1"] or 0)
        assert a.jobs["r3.0"] == 0.0  # nothing left of it
        assert a.makespan_s == max(v for v in a.jobs.values() if v is not None)


def test_compare_gives_one_column_a_policy() -> None:
    table = compare(mixed(), ["farm", "out-of-order"]).as_dict()
    assert table["policies"] == ["farm", "out-of-order"]
    assert table["time_s"] == 50.0
    assert set(table["makespan_s"]) == {"farm", "out-of-order"}
    assert [r["request"] for r in table["requests"]] == ["r1", "r2", "r3"]
    assert all(set(r["eta_s"]) == {"farm", "out-of-order"} for r in table["requests"])
    json.dumps(table, allow_nan=False)


def test_unknown_policy_is_refused_by_name() -> None:
    with pytest.raises(UnknownPolicyError, match="nope"):
        predict(one_node(), "nope")


def test_snapshot_json_round_trip() -> None:
    snap = mixed()
    text = json.dumps(snap.as_dict())
    assert ClusterSnapshot.from_dict(json.loads(text)) == snap
    warm = replace(
        snap,
        nodes=(replace(snap.nodes[0], warm_users=("ann",)), *snap.nodes[1:]),
        user_setup_s=0.4,
    )
    assert ClusterSnapshot.from_dict(json.loads(json.dumps(warm.as_dict()))) == warm
    job = warm.jobs[0]
    flying = replace(job, files=(replace(job.files[0], under_way=True), *job.files[1:]))
    out = replace(warm, jobs=(flying, *warm.jobs[1:]))
    assert ClusterSnapshot.from_dict(json.loads(json.dumps(out.as_dict()))) == out


def test_a_users_first_packet_on_a_node_pays_its_sandboxs_start() -> None:
    # One node at 1000 events/s, one job of 5000 events by ann: 5 s, and 0.5 s more for
    # ann's sandbox unless the node has it warm; the interval's rates scale it too.
    snap = one_node(events=5000, rate=1000.0)
    snap = replace(snap, jobs=(replace(snap.jobs[0], user="ann"),), user_setup_s=0.5)
    assert predict(snap, "farm").jobs == {"r1.0": pytest.approx(5.5)}
    assert predict(snap, "farm", rate_factor=2.0).jobs == {"r1.0": pytest.approx(2.75)}
    warm = replace(snap, nodes=(replace(snap.nodes[0], warm_users=("ann",)),))
    assert predict(warm, "farm").jobs == {"r1.0": pytest.approx(5.0)}
    other = replace(snap, nodes=(replace(snap.nodes[0], warm_users=("bob",)),))
    assert predict(other, "farm").jobs == {"r1.0": pytest.approx(5.5)}


def _bad(mutate: Any) -> str:
    data = mixed().as_dict()
    mutate(data)
    with pytest.raises(SnapshotError) as info:
        ClusterSnapshot.from_dict(copy.deepcopy(data))
    return info.value.field


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("time_s"), "time_s"),
        (lambda d: d.update(nodes=[]), "nodes"),
        (lambda d: d.update(nodes="w0"), "nodes"),
        (lambda d: d["nodes"][1].update(slots=1.5), "nodes[1].slots"),
        (lambda d: d["nodes"][1].update(slots=0), "nodes[1].slots"),
        (lambda d: d.update(node=[]), "node"),
        (lambda d: d["nodes"][0].update(slotz=4), "nodes[0].slotz"),
        (lambda d: d["nodes"][0]["rates"].update(cached=1.0), "nodes[0].rates.cached"),
        (lambda d: d["jobs"][1].update(cpu_per_event=1e-3), "jobs[1].cpu_per_event"),
        (lambda d: d["jobs"][1].update(priority=float("inf")), "jobs[1].priority"),
        (lambda d: d["jobs"][1].update(priority=-1), "jobs[1].priority"),
        (lambda d: d["jobs"][0]["files"][0].update(events=10), "jobs[0].files[0].events"),
        (lambda d: d["nodes"][0].update(name=""), "nodes[0].name"),
        (lambda d: d["nodes"][2].update(name="w0"), "nodes[2].name"),
        (
            lambda d: d["nodes"][0]["rates"].update(cached_events_per_s=0),
            "nodes[0].rates.cached_events_per_s",
        ),
        (lambda d: d["nodes"][0]["cached"].append(3), "nodes[0].cached[1]"),
        (lambda d: d["jobs"][1].update(node="w9"), "jobs[1].node"),
        (lambda d: d["jobs"][1].update(id="r1.0"), "jobs[1].id"),
        (lambda d: d["jobs"][0]["files"][0].update(todo=[[0, 9000]]), "jobs[0].files[0].todo[0]"),
        (lambda d: d["jobs"][0]["files"][0].update(todo=[[5]]), "jobs[0].files[0].todo[0]"),
        (lambda d: d["jobs"][0]["files"][0].update(under_way="yes"), "jobs[0].files[0].under_way"),
        (lambda d: d["jobs"][0]["files"][1].pop("n_bytes"), "jobs[0].files[1].n_bytes"),
        (lambda d: d["jobs"][2]["files"][1].update(n_events=1), "jobs[2].files[1]"),
        (lambda d: d["jobs"][2].update(submitted_s=float("nan")), "jobs[2].submitted_s"),
        (lambda d: d["jobs"][2].update(priority="high"), "jobs[2].priority"),
        (lambda d: d.update(user_setup_s=-1), "user_setup_s"),
        (lambda d: d.update(user_setup_s="slow"), "user_setup_s"),
        (lambda d: d["nodes"][1].update(warm_users="ann"), "nodes[1].warm_users"),
        (lambda d: d["nodes"][1].update(warm_users=["ann", ""]), "nodes[1].warm_users[1]"),
    ],
)
def test_bad_snapshot_names_the_field(mutate: Any, field: str) -> None:
    assert _bad(mutate) == field


def test_a_snapshot_without_slots_cannot_be_predicted() -> None:
    snap = one_node()
    snap = replace(snap, nodes=(replace(snap.nodes[0], slots=0),))
    with pytest.raises(SnapshotError, match="must be at least 1") as info:
        predict(snap, "farm")
    assert info.value.field == "nodes[0].slots"
