"""What one user sees of another's work: ann cannot find bob's request or job ids (nor the
workers' addresses or cached files) in ``/api/v1/cluster``, ``/api/v1/whatif`` or the
dashboard's cluster fragment; an administrator sees everything. The runner is the stand-in
of tests/svc_support.py, holding both users' jobs running and describing them as the
runtime's runner does (a slot per job, the workers' addresses, the files cached)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from datasched.service.api.deps import Limits
from datasched.service.app import build_state, create_app
from datasched.service.dashboard.views import node_rows
from datasched.service.store.db import Store
from datasched.service.visibility import EVERYTHING, Scope, cluster_view, whatif_view
from svc_support import FakeLanguage, FakeRunner, seed

YAML = "application/yaml"
ADDRESS = "tcp://10.1.2.3:40001"
SECRET_FILE = "/star/auau/1.root"


class DescribingRunner(FakeRunner):
    """The stand-in runner, whose cluster view names every job it runs, in the runtime's
    shape: two nodes of two slots, each with its worker's address and cached files."""

    def cluster(self) -> Mapping[str, Any]:
        running = sorted(j for j, _ in self.submitted if j not in self.cancelled)
        slots = [
            {
                "slot": i,
                "job": running[i] if i < len(running) else None,
                "files_in_flight": [SECRET_FILE] if i < len(running) else [],
            }
            for i in range(4)
        ]
        return {
            "running": True,
            "policy": "out-of-order",
            "scheduler": "tcp://10.1.2.3:8786",
            "nodes": [
                {
                    "name": f"node-{n}",
                    "address": ADDRESS,
                    "up": True,
                    "slots": slots[2 * n : 2 * n + 2],
                    "slots_total": 2,
                    "cached_bytes": 3000,
                    "cached_files": 1,
                    "cached_urls": [SECRET_FILE],
                    "cache_capacity_bytes": 10_000,
                }
                for n in range(2)
            ],
            "jobs": [{"id": j, "status": "running", "events": 30, "done": 0} for j in running],
        }


@dataclass
class Two:
    client: TestClient
    tokens: dict[str, str]
    ann: str
    """ann's request id."""
    bob: str
    """bob's."""

    def get(self, who: str, url: str, **params: Any) -> Any:
        h = {"Authorization": f"Bearer {self.tokens[who]}"}
        r = self.client.get(url, headers=h, params=params)
        assert r.status_code == 200, r.text
        return r


@pytest.fixture
def two(sqlite_store: Store) -> Iterator[Two]:
    """ann's and bob's requests, each one job held running."""
    runner = DescribingRunner(packet=5, hold_users=frozenset({"ann", "bob"}))
    tokens = seed(sqlite_store)
    limits = Limits(rate_per_s=1e6, burst=10**6)
    state = build_state(
        sqlite_store, FakeLanguage(), runner=runner, period_s=0.05, eta_period_s=None, limits=limits
    )
    with TestClient(create_app(state)) as client:
        ids = {}
        for who, path in (("ann", "/star/auau/0.root"), ("bob", SECRET_FILE)):
            r = client.post(
                "/api/v1/requests",
                content=f"processor: p\ninput: [{path}]\n",
                headers={"Authorization": f"Bearer {tokens[who]}", "Content-Type": YAML},
            )
            assert r.status_code == 201, r.text
            ids[who] = r.json()["id"]
        deadline = time.monotonic() + 30
        root = {"Authorization": f"Bearer {tokens['root']}"}
        while {
            client.get(f"/api/v1/requests/{rid}", headers=root).json()["state"]
            for rid in ids.values()
        } != {"running"}:
            assert time.monotonic() < deadline, "the jobs did not start"
            time.sleep(0.02)
        yield Two(client, tokens, ids["ann"], ids["bob"])
        for rid in ids.values():
            client.delete(f"/api/v1/requests/{rid}", headers=root)  # end the held jobs
    runner.wait()


def test_cluster_shows_a_user_only_their_own_jobs_and_an_admin_all(two: Two) -> None:
    ann = two.get("ann", "/api/v1/cluster")
    text = ann.text
    assert two.ann in text
    assert two.bob not in text
    assert ADDRESS not in text
    assert SECRET_FILE not in text
    assert "8786" not in text
    body = ann.json()
    assert body["scope"] == "own"
    assert body["totals"] == {"nodes": 2, "nodes_up": 2, "slots": 4, "slots_busy": 2}
    assert [j["id"] for j in body["my_jobs"]] == [f"{two.ann}.0"]
    slots = [s for n in body["nodes"] for s in n["slots"]]
    assert sum(s["busy"] for s in slots) == 2
    assert {s["job"] for s in slots if s["busy"]} == {f"{two.ann}.0", None}
    assert body["nodes"][0]["cached_files"] == 1
    assert body["nodes"][0]["cache_fill"] == 0.3
    assert body["jobs"] == {"running": 2}  # the queue in aggregate: everyone's
    root = two.get("root", "/api/v1/cluster")
    assert two.ann in root.text
    assert two.bob in root.text
    assert ADDRESS in root.text
    assert SECRET_FILE in root.text
    assert root.json()["scope"] == "all"
    assert root.json()["totals"]["slots_busy"] == 2


def test_whatif_shows_a_user_only_their_own_etas_and_an_admin_all(two: Two) -> None:
    ann = two.get("ann", "/api/v1/whatif", policy="farm")
    assert two.ann in ann.text
    assert two.bob not in ann.text
    body = ann.json()
    assert [r["request"] for r in body["requests"]] == [two.ann]
    assert [j["job"] for j in body["jobs"]] == [f"{two.ann}.0"]
    assert body["others"] == {"requests": 1, "jobs": 1}
    assert body["makespan_s"]["farm"] > 0
    root = two.get("root", "/api/v1/whatif", policy="farm").json()
    assert {r["request"] for r in root["requests"]} == {two.ann, two.bob}
    assert "others" not in root
    bob = two.get("bob", "/api/v1/whatif", policy="farm").text
    assert two.bob in bob
    assert two.ann not in bob


def test_the_dashboard_shows_a_user_only_their_own_jobs_and_an_admin_all(two: Two) -> None:
    ann = two.get("ann", "/dashboard/fragments/cluster").text
    assert f"{two.ann}.0" in ann
    assert two.bob not in ann
    assert '<span data-hidden="1">1 job of other users</span>' in ann
    assert ADDRESS not in ann
    assert SECRET_FILE not in ann
    root = two.get("root", "/dashboard/fragments/cluster").text
    assert f"{two.ann}.0" in root
    assert f"{two.bob}.0" in root
    assert "data-hidden" not in root
    requests = two.get("ann", "/dashboard/fragments/requests").text
    assert two.ann in requests
    assert two.bob not in requests
    everyone = two.get("root", "/dashboard/fragments/requests").text
    assert two.ann in everyone
    assert two.bob in everyone


def test_views_of_the_plain_shape_and_of_what_if() -> None:
    view = {
        "nodes": [{"name": "n", "slots": 4, "cache_fill": 0.5, "running": ["a.0", "b.0"]}],
        "secret": "x",
    }
    mine = Scope(False, frozenset({"a"}), frozenset({"a.0"}))
    shown = cluster_view(view, {"running": 2}, mine)
    assert "secret" not in json.dumps(shown)
    (node,) = shown["nodes"]
    assert node["running"] == ["a.0"]
    assert node["slots_busy"] == 2
    assert node["slots"] == 4
    (row,) = node_rows(shown)
    assert (row.slots_busy, row.slots_total, row.running, row.hidden) == (2, 4, ("a.0",), 1)
    everything = cluster_view(view, {}, EVERYTHING)
    assert everything["secret"] == "x"
    assert everything["nodes"][0]["running"] == ["a.0", "b.0"]
    answer = {
        "policies": ["farm"],
        "makespan_s": {"farm": 9.0},
        "requests": [{"request": "a", "eta_s": {}}, {"request": "b", "eta_s": {}}],
        "jobs": [{"job": "a.0", "eta_s": {}}, {"job": "b.0", "eta_s": {}}],
    }
    assert "b" not in json.dumps(whatif_view(answer, mine)["requests"])
    assert whatif_view(answer, mine)["others"] == {"requests": 1, "jobs": 1}
    assert whatif_view(answer, EVERYTHING) == answer


def test_the_whatif_command_reads_the_services_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    import email.message
    import io
    import urllib.error

    from typer.testing import CliRunner

    from datasched.cli import app

    answers: list[Any] = []

    def urlopen(req: Any, timeout: float) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return io.BytesIO(json.dumps(answer).encode())

    monkeypatch.setattr("urllib.request.urlopen", urlopen)
    refused = {"errors": [{"field": "policy", "reason": "unknown policy 'nope'"}]}
    answers.append(
        urllib.error.HTTPError(
            "http://x",
            400,
            "Bad Request",
            email.message.Message(),
            io.BytesIO(json.dumps(refused).encode()),
        )
    )
    cmd = ["whatif", "-p", "nope", "--server", "http://x", "--token", "t"]
    r = CliRunner().invoke(app, cmd)
    assert r.exit_code == 1
    assert "400: policy: unknown policy 'nope'" in r.stderr
    mine = {
        "time_s": 0.0,
        "policies": ["farm"],
        "makespan_s": {"farm": 9.0},
        "requests": [{"request": "abc", "eta_s": {"farm": 4.0}}],
        "jobs": [],
        "others": {"requests": 3, "jobs": 5},
    }
    answers.append(mine)
    r = CliRunner().invoke(app, ["whatif", "-p", "farm", "--server", "http://x"])
    assert r.exit_code == 0
    assert "abc" in r.stdout
    assert "(3 of other users)" in r.stdout
