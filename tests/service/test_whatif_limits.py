"""What one what-if call may cost the daemon: its simulations stop at the limit's seconds
(400, field ``policy``), and a user has one call under way at a time (another at once:
429, field ``whatif``), as an attacker would try it: parameters that make the queue's
simulation take minutes (packets of one event), and calls fired together."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi import FastAPI
from fastapi.testclient import TestClient

from datasched.service import api_whatif, whatif
from datasched.service.api.deps import Limits
from datasched.service.app import build_state, create_app
from datasched.service.contracts import ClusterSnapshot, FileTodo, JobSnapshot
from datasched.service.store.db import Store
from datasched.service.whatif import BudgetSpent, compare
from datasched.sim.engine import SimEngine
from service.whatif_support import cached_on_second_node
from svc_support import FakeLanguage, seed

Query = list[tuple[str, str | int | float | bool | None]]
"""Query parameters as the test client takes them, repeated names included."""

ONE_EVENT: Query = [
    ("policy", "farm"),
    ("policy", "basic-packetizer"),
    ("param", "packet_events=1"),
]
"""A what-if whose second simulation hands out 20,000 packets of one event: tens of
thousands of engine steps, where the farm's takes a handful."""


def _queue() -> ClusterSnapshot:
    """cached_on_second_node's cluster with two jobs of 10,000 events each."""
    snap = cached_on_second_node()
    files = (FileTodo("f1", 10_000, 10**6), FileTodo("f2", 10_000, 10**6))
    jobs = tuple(JobSnapshot(f"r{i}.0", f"r{i}", files[i : i + 1], 0.0) for i in range(2))
    return replace(snap, jobs=jobs)


class Proceeds:
    """Counts the engine's :meth:`SimEngine.proceed` calls (each a chunk of steps)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        proceeds = self

        # A subclass where the what-if builds its engine: compiled, SimEngine is an extension
        # type, which takes no patched methods.
        class Counted(SimEngine):
            def proceed(self, *args: Any, **kwargs: Any) -> bool:
                proceeds.calls += 1
                return super().proceed(*args, **kwargs)

        monkeypatch.setattr(whatif, "SimEngine", Counted)


def test_a_spent_budget_stops_the_simulation_at_its_first_look_at_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps = Proceeds(monkeypatch)
    with pytest.raises(BudgetSpent) as got:
        compare(
            _queue(), ["basic-packetizer"], {"basic-packetizer": {"packet_events": 1}}, budget_s=0
        )
    assert got.value.policy == "basic-packetizer"
    assert got.value.budget_s == 0
    assert "'basic-packetizer'" in str(got.value)
    assert steps.calls == 1  # one chunk of steps, then the deadline was seen


def test_a_budget_changes_no_answer_it_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    params = {"basic-packetizer": {"packet_events": 5}}
    free = compare(_queue(), ["farm", "basic-packetizer"], params)
    steps = Proceeds(monkeypatch)
    timed = compare(_queue(), ["farm", "basic-packetizer"], params, budget_s=3600)
    assert timed.as_dict() == free.as_dict()
    assert steps.calls > 2  # the packetizer's run took several chunks, each looked at


def _router(budget: float | None) -> TestClient:
    app = FastAPI()
    app.include_router(api_whatif.router)
    app.dependency_overrides[api_whatif.get_snapshot] = _queue
    app.dependency_overrides[api_whatif.get_budget] = lambda: budget
    return TestClient(app)


def test_the_api_refuses_a_whatif_past_its_budget_naming_the_policy() -> None:
    resp = _router(0.0).get("/api/v1/whatif", params=ONE_EVENT)
    assert resp.status_code == 400
    detail = resp.json()["detail"]
    assert detail["field"] == "policy"
    # The farm's few steps end within its first chunk; the packetizer's run is given up.
    assert "'basic-packetizer'" in detail["reason"]
    assert "limit of 0 s" in detail["reason"]


def test_the_api_answers_within_its_budget() -> None:
    resp = _router(3600.0).get("/api/v1/whatif", params=ONE_EVENT)
    assert resp.status_code == 200, resp.text
    assert set(resp.json()["makespan_s"]) == {"farm", "basic-packetizer"}


class Gate:
    """A live snapshot that holds the first call for it until :meth:`open` (the what-if
    under way), and answers the others at once."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        self._first = True
        self._lock = threading.Lock()

    def __call__(self) -> ClusterSnapshot:
        with self._lock:
            first, self._first = self._first, False
        if first:
            self.entered.set()
            assert self.opened.wait(30), "the test never opened the gate"
        return _queue()


@pytest.fixture
def daemon(sqlite_store: Store) -> Iterator[tuple[TestClient, dict[str, str], Gate]]:
    tokens = seed(sqlite_store)
    state = build_state(sqlite_store, FakeLanguage(), limits=Limits(rate_per_s=1e6, burst=10**6))
    app = create_app(state)
    gate = Gate()
    app.dependency_overrides[api_whatif.get_snapshot] = gate
    with TestClient(app) as client:
        yield client, tokens, gate
    gate.opened.set()


def _whatif(client: TestClient, token: str, params: Any = (("policy", "farm"),)) -> Any:
    return client.get(
        "/api/v1/whatif", params=list(params), headers={"Authorization": f"Bearer {token}"}
    )


def test_a_user_has_one_whatif_under_way_at_a_time(
    daemon: tuple[TestClient, dict[str, str], Gate],
) -> None:
    client, tokens, gate = daemon
    first: list[Any] = []
    held = threading.Thread(target=lambda: first.append(_whatif(client, tokens["ann"])))
    held.start()
    try:
        assert gate.entered.wait(30)
        again = _whatif(client, tokens["ann"])
        assert again.status_code == 429
        assert again.json()["errors"][0]["field"] == "whatif"
        assert int(again.headers["Retry-After"]) >= 1
        other = _whatif(client, tokens["bob"])  # another user is not held up by ann's
        assert other.status_code == 200, other.text
    finally:
        gate.opened.set()
        held.join(30)
    assert first[0].status_code == 200, first[0].text
    assert _whatif(client, tokens["ann"]).status_code == 200  # her turn was given back


def test_a_refused_whatif_gives_its_turn_back(
    daemon: tuple[TestClient, dict[str, str], Gate],
) -> None:
    client, tokens, gate = daemon
    gate.opened.set()
    state = client.app.state.service  # type: ignore[attr-defined]
    state.limits = replace(state.limits, whatif_budget_s=0.0)
    spent = _whatif(client, tokens["ann"], ONE_EVENT)
    assert spent.status_code == 400
    assert spent.json()["errors"][0]["field"] == "policy"
    bad = _whatif(client, tokens["ann"], [("policy", "nope")])
    assert bad.status_code == 400
    assert bad.json()["errors"][0]["field"] == "policy"
    state.limits = replace(state.limits, whatif_budget_s=10.0)
    assert _whatif(client, tokens["ann"]).status_code == 200
