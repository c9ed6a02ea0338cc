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
