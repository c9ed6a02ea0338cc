"""``GET /api/v1/whatif`` on its own, with a fixed snapshot in place of the daemon's."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi import FastAPI
from fastapi.testclient import TestClient

from datasched.service.api_whatif import get_snapshot, router
from datasched.service.contracts import ClusterSnapshot, NodeSnapshot
from service.whatif_support import cached_on_second_node

Query = list[tuple[str, str | int | float | bool | None]]
"""Query parameters as the test client takes them, repeated names included."""


def _client(snapshot: ClusterSnapshot | None) -> TestClient:
    app = FastAPI()
    app.include_router(router)
    if snapshot is not None:
        app.dependency_overrides[get_snapshot] = lambda: snapshot
    return TestClient(app)


def test_whatif_answers_each_policy() -> None:
    client = _client(cached_on_second_node())
    resp = client.get("/api/v1/whatif", params=[("policy", "farm"), ("policy", "out-of-order")])
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["policies"] == ["farm", "out-of-order"]
    eta = body["requests"][0]["eta_s"]
    assert eta["out-of-order"] == pytest.approx(10.0, rel=1e-6)
    assert eta["out-of-order"] < eta["farm"]
    assert body["makespan_s"]["farm"] == eta["farm"]


def test_whatif_refuses_bad_policies_by_field() -> None:
    client = _client(cached_on_second_node())
    resp = client.get("/api/v1/whatif", params={"policy": "nope"})
    assert resp.status_code == 400
    assert resp.json()["detail"]["field"] == "policy"
    assert "nope" in resp.json()["detail"]["reason"]
    assert client.get("/api/v1/whatif").status_code == 422  # no policy at all
    many = (("policy", "farm"),) * 9
    assert client.get("/api/v1/whatif", params=many).json()["detail"]["field"] == "policy"


def test_whatif_without_a_live_snapshot_is_unavailable() -> None:
    resp = _client(None).get("/api/v1/whatif", params={"policy": "farm"})
    assert resp.status_code == 503
    assert resp.json()["detail"]["field"] == "snapshot"


def test_an_inconsistent_snapshot_is_reported_by_field() -> None:
    bad = ClusterSnapshot(0.0, (NodeSnapshot("w0"), NodeSnapshot("w0")))
    resp = _client(bad).get("/api/v1/whatif", params={"policy": "farm"})
    assert resp.status_code == 500
    assert resp.json()["detail"]["field"] == "snapshot.nodes[1].name"


def test_whatif_takes_policy_parameters_for_the_policies_that_take_them() -> None:
    """`param=NAME=VALUE` goes to each policy asked for that declares it: a min-cost flow
    that batches every 100 s places its first jobs 100 s later; the farm takes no such
    parameter and is predicted as without it."""
    client = _client(cached_on_second_node())
    both: Query = [("policy", "farm"), ("policy", "mincostflow")]
    plain = client.get("/api/v1/whatif", params=both).json()["makespan_s"]
    resp = client.get("/api/v1/whatif", params=[*both, ("param", "lp_period_s=100")])
    assert resp.status_code == 200, resp.text
    slow = resp.json()["makespan_s"]
    assert slow["mincostflow"] == pytest.approx(plain["mincostflow"] + 100.0)
    assert slow["farm"] == plain["farm"]


@pytest.mark.parametrize(
    ("param", "says"),
    [
        ("lp_period_s", "expected NAME=VALUE"),
        ("lp_period_s=-1", "must be at least 0"),
        ("fairness_h=24", "none of the policies (mincostflow) takes such a parameter"),
        ("network=hexagonal", "must be one of grouped, full"),
    ],
)
def test_whatif_refuses_bad_parameters_by_field(param: str, says: str) -> None:
    client = _client(cached_on_second_node())
    resp = client.get("/api/v1/whatif", params=[("policy", "mincostflow"), ("param", param)])
    assert resp.status_code == 400, resp.text
    assert resp.json()["detail"]["field"] == "param"
    assert says in resp.json()["detail"]["reason"]


def test_whatif_reads_no_file_a_caller_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adaptive delay's performance map is read from a file: over the API that would have
    the daemon open a path of the caller's choosing, so it is refused unread."""
    from dataclasses import replace

    from datasched.policies.ponce.adaptive import AdaptiveDelay

    opened: list[str] = []
    spied = tuple(
        replace(p, parse=opened.append) if p.name == "performance_map" else p
        for p in AdaptiveDelay.params
    )
    monkeypatch.setattr(AdaptiveDelay, "params", spied)
    client = _client(cached_on_second_node())
    params: Query = [("policy", "adaptive-delay"), ("param", "performance_map=/etc/shadow")]
    resp = client.get("/api/v1/whatif", params=params)
    assert resp.status_code == 400, resp.text
    assert resp.json()["detail"]["field"] == "param"
    assert "a what-if does not read" in resp.json()["detail"]["reason"]
    assert opened == []
    off: Query = [("policy", "adaptive-delay"), ("param", "performance_map=none")]  # no file: taken
    assert client.get("/api/v1/whatif", params=off).status_code == 200
    many: Query = [("policy", "mincostflow"), *(("param", f"lp_period_s={i}") for i in range(33))]
    assert client.get("/api/v1/whatif", params=many).json()["detail"]["field"] == "param"
