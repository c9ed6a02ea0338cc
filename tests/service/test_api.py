"""The API with FastAPI's TestClient: submission (accepted, refused and kept), tokens,
cross-user isolation (404), cancel, progress, logs, merged results, catalog, cluster,
limits and metrics. The request language and the runner are the stand-ins of
tests/svc_support.py."""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from datasched.service.api.deps import Limits, TokenBucket
from datasched.service.app import build_state, create_app
from datasched.service.store.db import Store
from datasched.service.users import remove_user
from svc_support import FakeLanguage, FakeRunner, seed

YAML = "application/yaml"


@dataclass
class Api:
    client: TestClient
    tokens: dict[str, str]
    runner: FakeRunner

    def h(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def submit(self, who: str, body: str, ctype: str = YAML) -> Any:
        return self.client.post(
            "/api/v1/requests", content=body, headers={**self.h(who), "Content-Type": ctype}
        )

    def wait(self, who: str, rid: str, state: str, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            got: dict[str, Any] = self.client.get(
                f"/api/v1/requests/{rid}", headers=self.h(who)
            ).json()
            if got["state"] == state or time.monotonic() > deadline:
                return got
            time.sleep(0.02)

    def result(self, who: str, rid: str, timeout: float = 10.0) -> Any:
        """The request's result once merged (409 with Retry-After while it is merging)."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.client.get(f"/api/v1/requests/{rid}/result", headers=self.h(who))
            if r.status_code != 409 or "Retry-After" not in r.headers:
                return r
            assert time.monotonic() < deadline, r.text
            time.sleep(0.02)


@pytest.fixture
def api(sqlite_store: Store) -> Iterator[Api]:
    runner = FakeRunner(packet=10)
    tokens = seed(sqlite_store)
    state = build_state(
        sqlite_store,
        FakeLanguage(),
        runner=runner,
        period_s=0.05,
        limits=Limits(max_request_bytes=4000, rate_per_s=1000, burst=1000),
    )
    with TestClient(create_app(state)) as client:
        yield Api(client, tokens, runner)
    runner.wait()


def test_a_request_runs_to_completion_with_its_progress_and_merged_result(api: Api) -> None:
    r = api.submit("ann", "title: zz\nprocessor: p.py:P\ninput: [{catalog: year=2004}]\n")
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    got = api.wait("ann", rid, "completed")
    assert got["state"] == "completed"
    assert got["owner"] == "ann"
    assert got["title"] == "zz"
    assert [j["state"] for j in got["jobs"]] == ["completed"] * 3
    assert {j["node"] for j in got["jobs"]} == {"node-0"}
    assert got["jobs"][0]["files"] == ["/star/auau/0.root"]
    assert got["progress"] == {"events": 90, "bytes": 9000, "packets": 9, "events_total": 90}
    res = api.result("ann", rid)
    assert res.status_code == 200
    assert pickle.loads(res.content) == {"events": 90}
    raw = api.client.get(f"/api/v1/requests/{rid}/result?packets=true", headers=api.h("ann"))
    assert sorted(pickle.loads(b)["events"] for b in pickle.loads(raw.content)) == [10] * 9
    logs = api.client.get(f"/api/v1/requests/{rid}/logs", headers=api.h("ann")).json()
    assert [j["log"] for j in logs["jobs"]] == ["done\n"] * 3


def test_the_packets_results_are_served_only_up_to_the_limit(api: Api) -> None:
    """`?packets=true` holds every packet's result in the daemon's memory: past the limit
    the call is refused (409, field `packets`) before any is read, and the merged result is
    still served."""
    r = api.submit("ann", "title: zz\nprocessor: p.py:P\ninput: [{catalog: year=2004}]\n")
    rid = r.json()["id"]
    assert api.wait("ann", rid, "completed")["state"] == "completed"
    url = f"/api/v1/requests/{rid}/result?packets=true"
    whole = api.client.get(url, headers=api.h("ann"))
    assert whole.status_code == 200
    size = sum(len(b) for b in pickle.loads(whole.content))  # nine packets' pickles
    limits = api.client.app.state.service.limits  # type: ignore[attr-defined]
    api.client.app.state.service.limits = replace(  # type: ignore[attr-defined]
        limits, max_packets_result_bytes=size - 1
    )
    refused = api.client.get(url, headers=api.h("ann"))
    assert refused.status_code == 409
    error = refused.json()["errors"][0]
    assert error["field"] == "packets"
    assert "fetch the merged result" in error["reason"]
    assert api.result("ann", rid).status_code == 200
    api.client.app.state.service.limits = replace(  # type: ignore[attr-defined]
        limits, max_packets_result_bytes=size
    )
    assert api.client.get(url, headers=api.h("ann")).status_code == 200  # at the limit


def test_the_list_of_requests_comes_in_pages_that_miss_none(api: Api) -> None:
    """`GET /requests?limit=N&after=ID`: pages of the same newest-first order, each
    request once (refused ones too), `next` None on the last page; another user's id is as
    unknown as one that does not exist."""
    bodies = ["title: ok\nprocessor: p.py:P\ninput: [/star/pp/0.root]\n", "title: bad\n"]
    for k in range(5):
        assert api.submit("ann", bodies[k % 2]).status_code in (201, 422)
    bob = api.submit("bob", bodies[0]).json()["id"]
    url = "/api/v1/requests"
    whole = api.client.get(url, headers=api.h("ann")).json()
    assert whole["next"] is None
    assert len(whole["requests"]) == 5
    pages, after = [], None
    while True:
        params: dict[str, str | int] = {"limit": 2, **({"after": after} if after else {})}
        got = api.client.get(url, headers=api.h("ann"), params=params)
        assert got.status_code == 200, got.text
        pages.append([r["id"] for r in got.json()["requests"]])
        after = got.json()["next"]
        if after is None:
            break
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [i for p in pages for i in p] == [r["id"] for r in whole["requests"]]
    for unknown in (bob, "nope"):
        r = api.client.get(url, headers=api.h("ann"), params={"after": unknown})
        assert r.status_code == 422
        assert r.json()["errors"][0]["field"] == "after"
    assert api.client.get(url, headers=api.h("ann"), params={"limit": 0}).status_code == 422
    everyone = api.client.get(url, headers=api.h("root"), params={"limit": 6}).json()
    assert {r["id"] for r in everyone["requests"]} == {bob, *pages[0], *pages[1], *pages[2]}


def test_an_invalid_request_is_refused_with_every_error_and_kept(api: Api) -> None:
    r = api.submit("ann", "title: bad\ninput: [/nowhere.root, 7]\n")
    assert r.status_code == 422
    body = r.json()
    assert body["state"] == "refused"
    assert {e["field"] for e in body["errors"]} == {"process", "input[1]"}
    got = api.client.get(f"/api/v1/requests/{body['id']}", headers=api.h("ann")).json()
    assert got["state"] == "refused"
    assert got["errors"] == body["errors"]
    r = api.submit("ann", "processor: p\ninput: [{catalog: colour=red}]\n")
    assert r.status_code == 422
    assert "unknown key 'colour'" in r.json()["errors"][0]["reason"]


def test_a_request_in_another_users_name_is_refused(api: Api) -> None:
    r = api.submit("ann", "username: bob\nprocessor: p\ninput: [/star/pp/0.root]\n")
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "username"


def test_a_request_runs_under_its_users_group_and_no_other(api: Api) -> None:
    """A request names no group but its user's own (an administrator may name any): another
    was accepted, then ignored, the jobs running under the owner's group all the same."""
    body = "processor: p\ninput: [/star/pp/0.root]\n"
    r = api.submit("ann", f"group: admins\n{body}")
    assert r.status_code == 422
    assert r.json()["errors"] == [
        {"field": "group", "reason": "'admins' is not your group ('physics')"}
    ]
    assert api.submit("ann", f"group: physics\n{body}").status_code == 201
    assert api.submit("root", f"group: physics\n{body}").status_code == 201


def test_without_a_valid_token_every_call_is_401(api: Api) -> None:
    for headers in ({}, {"Authorization": "Bearer ds_x_y"}, {"Authorization": "Basic abc"}):
        r = api.client.get("/api/v1/requests", headers=headers)
        assert r.status_code == 401
        assert r.json()["errors"][0]["field"] == "Authorization"


def test_a_removed_users_token_is_refused_at_once_and_nothing_is_stored_for_them(
    api: Api, sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`users remove` (the store, from another process) takes effect on the next call: the
    token is checked against the store on every call. A submission already past the check
    when its user is removed stores nothing: the user's row is locked and read again in the
    transaction that stores the request, as the removal locks it to find none open."""
    assert api.client.get("/api/v1/requests", headers=api.h("bob")).status_code == 200
    svc = api.client.app.state.service  # type: ignore[attr-defined]
    checked = svc.language.check

    def check_then_remove(*args: Any) -> Any:
        found = checked(*args)
        with sqlite_store.session() as s:
            remove_user(s, "bob")
        return found

    monkeypatch.setattr(svc.language, "check", check_then_remove)
    r = api.submit("bob", "processor: p\ninput: [/star/pp/0.root]\n")
    assert r.status_code == 401, r.text
    assert r.json()["errors"] == [{"field": "Authorization", "reason": "a valid token is needed"}]
    assert r.headers["WWW-Authenticate"] == "Bearer"
    r = api.client.get("/api/v1/requests", headers=api.h("bob"))
    assert r.status_code == 401
    everyone = api.client.get("/api/v1/requests", headers=api.h("root")).json()["requests"]
    assert [q["owner"] for q in everyone] == []


@pytest.mark.parametrize("stored_first", [False, True])
def test_a_submission_racing_users_remove_cancel_leaves_nothing_open(
    api: Api, sqlite_store: Store, monkeypatch: pytest.MonkeyPatch, stored_first: bool
) -> None:
    """`users remove NAME --cancel` racing the user's submission, either way round: a
    submission past the token check when the removal commits is refused (401) and stores
    nothing; one stored before the removal is cancelled with the rest. The user's row is
    the lock both take."""
    from datasched.service.store.ops import remove_user_cancelling

    svc = api.client.app.state.service  # type: ignore[attr-defined]
    body = "processor: p\ninput: [/star/pp/0.root]\n"
    if stored_first:
        api.runner.hold_users = frozenset({"bob"})  # running until cancelled
        rid = api.submit("bob", body).json()["id"]
        with sqlite_store.session() as s:
            removal = remove_user_cancelling(s, "bob")
        assert removal.cancelled == (rid,)
        assert api.client.get("/api/v1/requests", headers=api.h("bob")).status_code == 401
    else:
        checked = svc.language.check

        def check_then_remove(*args: Any) -> Any:
            found = checked(*args)
            with sqlite_store.session() as s:
                assert remove_user_cancelling(s, "bob").cancelled == ()
            return found

        monkeypatch.setattr(svc.language, "check", check_then_remove)
        r = api.submit("bob", body)
        assert r.status_code == 401, r.text
    everyone = api.client.get("/api/v1/requests", headers=api.h("root")).json()["requests"]
    assert [q["state"] for q in everyone if q["owner"] == "bob"] == (
        ["aborted"] if stored_first else []
    )


def test_another_users_request_is_404_and_an_admin_sees_all(api: Api) -> None:
    rid = api.submit("ann", "processor: p\ninput: [/star/pp/0.root]\n").json()["id"]
    for path in ("", "/logs", "/result"):
        assert (
            api.client.get(f"/api/v1/requests/{rid}{path}", headers=api.h("bob")).status_code == 404
        )
    assert api.client.delete(f"/api/v1/requests/{rid}", headers=api.h("bob")).status_code == 404
    assert api.client.get("/api/v1/requests", headers=api.h("bob")).json()["requests"] == []
    mine = api.client.get("/api/v1/requests", headers=api.h("ann")).json()["requests"]
    assert [r["id"] for r in mine] == [rid]
    every = api.client.get("/api/v1/requests", headers=api.h("root")).json()["requests"]
    assert [r["id"] for r in every] == [rid]
    assert api.client.get(f"/api/v1/requests/{rid}", headers=api.h("root")).status_code == 200
    assert api.client.get("/api/v1/requests/nope", headers=api.h("ann")).status_code == 404


def test_cancel_aborts_a_running_request(sqlite_store: Store) -> None:
    runner = FakeRunner(packet=1, hold_users=frozenset({"ann"}))
    tokens = seed(sqlite_store)
    state = build_state(sqlite_store, FakeLanguage(), runner=runner, period_s=0.05)
    with TestClient(create_app(state)) as client:
        h = {"Authorization": f"Bearer {tokens['ann']}", "Content-Type": YAML}
        rid = client.post(
            "/api/v1/requests", content="processor: p\ninput: [{catalog: year=2004}]", headers=h
        ).json()["id"]
        deadline = time.monotonic() + 10
        while client.get(f"/api/v1/requests/{rid}", headers=h).json()["state"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        r = client.delete(f"/api/v1/requests/{rid}", headers=h)
        assert r.json() == {"id": rid, "state": "aborted"}
        runner.wait()
        got = client.get(f"/api/v1/requests/{rid}", headers=h).json()
        assert got["state"] == "aborted"
        assert {j["state"] for j in got["jobs"]} == {"aborted"}
        assert set(runner.cancelled) == {j["id"] for j in got["jobs"]}
        assert got["progress"]["events"] < 90
        r = client.get(f"/api/v1/requests/{rid}/result", headers=h)
        assert r.status_code == 409


def test_size_content_type_and_body_limits(api: Api) -> None:
    r = api.submit("ann", "x" * 5000)
    assert r.status_code == 413
    assert r.json()["errors"][0]["field"] == "body"
    r = api.submit("ann", "{}", ctype="application/json")
    assert r.status_code == 415
    assert r.json()["errors"][0]["field"] == "Content-Type"
    r = api.client.post(
        "/api/v1/requests", content=b"\xff\xfe", headers={**api.h("ann"), "Content-Type": YAML}
    )
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "body"


def test_the_rate_limit_is_per_user_with_retry_after(sqlite_store: Store) -> None:
    tokens = seed(sqlite_store)
    state = build_state(sqlite_store, FakeLanguage(), limits=Limits(rate_per_s=0.001, burst=3))
    with TestClient(create_app(state)) as client:
        ann = {"Authorization": f"Bearer {tokens['ann']}"}
        codes = [client.get("/api/v1/requests", headers=ann).status_code for _ in range(5)]
        assert codes == [200, 200, 200, 429, 429]
        r = client.get("/api/v1/requests", headers=ann)
        assert int(r.headers["Retry-After"]) >= 1
        bob = {"Authorization": f"Bearer {tokens['bob']}"}
        assert client.get("/api/v1/requests", headers=bob).status_code == 200


def test_a_429_says_the_wait_its_retry_after_header_says(sqlite_store: Store) -> None:
    tokens = seed(sqlite_store)
    state = build_state(sqlite_store, FakeLanguage(), limits=Limits(rate_per_s=0.01, burst=1))
    with TestClient(create_app(state)) as client:
        ann = {"Authorization": f"Bearer {tokens['ann']}"}
        assert client.get("/api/v1/requests", headers=ann).status_code == 200
        r = client.get("/api/v1/requests", headers=ann)
        assert r.status_code == 429
        retry = int(r.headers["Retry-After"])
        assert retry >= 1
        assert r.json()["errors"] == [
            {"field": "rate", "reason": f"too many calls; retry in {retry} s"}
        ]
    # a wait under a second (a second's refill less the call's time) is said as 1 s
    state = build_state(sqlite_store, FakeLanguage(), limits=Limits(rate_per_s=1.0, burst=1))
    with TestClient(create_app(state)) as client:
        ann = {"Authorization": f"Bearer {tokens['ann']}"}
        assert client.get("/api/v1/requests", headers=ann).status_code == 200
        r = client.get("/api/v1/requests", headers=ann)
        assert r.status_code == 429
        assert r.headers["Retry-After"] == "1"
        assert r.json()["errors"][0]["reason"] == "too many calls; retry in 1 s"


def test_a_token_bucket_refills_at_its_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=2, clock=lambda: now[0])
    assert [bucket.take("a"), bucket.take("a")] == [0.0, 0.0]
    assert bucket.take("a") == pytest.approx(0.5)
    now[0] = 0.5
    assert bucket.take("a") == 0.0
    assert bucket.take("b") == 0.0


def test_catalog_cluster_metrics_and_the_openapi_schema(api: Api) -> None:
    r = api.client.get(
        "/api/v1/catalog/datasets", params={"query": "energy>=100 minbias"}, headers=api.h("bob")
    )
    assert [d["name"] for d in r.json()["datasets"]] == ["auau200"]
    assert r.json()["datasets"][0]["n_events"] == 90
    r = api.client.get(
        "/api/v1/catalog/datasets", params={"query": "colour=red"}, headers=api.h("bob")
    )
    assert r.status_code == 422
    assert "colour" in r.json()["errors"][0]["reason"]
    cl = api.client.get("/api/v1/cluster", headers=api.h("bob")).json()
    assert cl["nodes"][0]["name"] == "node-0"
    assert cl["jobs"] == {}
    rid = api.submit("ann", "processor: p\ninput: [/star/pp/0.root]\n").json()["id"]
    api.wait("ann", rid, "completed")
    text = api.client.get("/metrics").text
    assert 'datasched_requests_submitted_total{state="pending"} 1.0' in text
    assert 'datasched_jobs{state="completed"} 1.0' in text
    assert "datasched_events_done 15.0" in text
    schema = api.client.get("/api/v1/openapi.json").json()
    assert {"/api/v1/requests", "/api/v1/requests/{request_id}", "/api/v1/cluster"} <= set(
        schema["paths"]
    )
    assert (
        "application/xml" in schema["paths"]["/api/v1/requests"]["post"]["requestBody"]["content"]
    )


class Trap:
    """A result whose unpickling runs code (writes a marker file)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (Path(self.marker).write_text, ("ran",))


def test_the_daemon_serves_a_result_as_bytes_and_never_unpickles_it(
    api: Api, tmp_path: Path
) -> None:
    from datasched.service.contracts import JobState, PacketDone
    from datasched.service.daemon import StoreListener
    from datasched.service.store.models import Request

    marker = tmp_path / "unpickled"
    rid = api.submit("ann", "processor: p\ninput: [/star/pp/0.root]\n").json()["id"]
    api.wait("ann", rid, "completed")
    store = api.client.app.state.service.store  # type: ignore[attr-defined]
    listener = StoreListener(store)
    job = f"{rid}.0"
    listener.job_state(job, JobState.COMPLETED)
    blob = pickle.dumps(Trap(str(marker)))
    listener.packet_done(PacketDone(job, "/star/pp/0.root", 100, 101, "n", 1, 0.0, blob))
    with store.session() as s:
        s.get(Request, rid).result = blob  # as a worker's merge would have stored it
    r = api.client.get(f"/api/v1/requests/{rid}/result", headers=api.h("ann"))
    assert r.status_code == 200
    assert r.content == blob
    r = api.client.get(f"/api/v1/requests/{rid}/result?packets=true", headers=api.h("root"))
    assert blob in pickle.loads(r.content)  # a list of bytes: loading it runs nothing
    assert not marker.exists(), "the daemon unpickled a user's result"
    # A merge that failed on the worker is the owner's to read; bob sees no such request.
    with store.session() as s:
        req = s.get(Request, rid)
        req.result, req.result_error = None, "the results could not be merged: boom"
    r = api.client.get(f"/api/v1/requests/{rid}/result", headers=api.h("ann"))
    assert r.status_code == 409
    assert "boom" in r.json()["errors"][0]["reason"]
    r = api.client.get(f"/api/v1/requests/{rid}/result", headers=api.h("bob"))
    assert r.status_code == 404


def test_a_completed_request_is_merged_by_the_runner_once(api: Api) -> None:
    rid = api.submit("ann", "processor: p\ninput: [{catalog: year=2004}]\n").json()["id"]
    api.wait("ann", rid, "completed")
    r = api.result("ann", rid)
    assert r.status_code == 200, r.text
    assert pickle.loads(r.content) == {"events": 90}
    assert api.runner.merged == [9]  # 3 files of 30 events in packets of 10, merged once


def test_a_merge_never_overwrites_a_result_stored_meanwhile(api: Api) -> None:
    """Two mergers on one store (or a merge begun before a restart): the first result stands."""
    from datasched.service.merger import Merger
    from datasched.service.store.models import Request

    rid = api.submit("ann", "processor: p\ninput: [{catalog: year=2004}]\n").json()["id"]
    api.wait("ann", rid, "completed")
    store = api.client.app.state.service.store  # type: ignore[attr-defined]
    with store.session() as s:
        s.get(Request, rid).result = None  # as if not merged yet

    class Racing:
        """Merges slowly: another merger stores its result first."""

        def merge(self, work: object, results: object) -> bytes:
            with store.session() as s:
                s.get(Request, rid).result = b"first"
            return b"second"

    Merger(store, Racing()).merge_once()
    with store.reading() as s:
        assert s.get(Request, rid).result == b"first"


def test_groups_are_read_by_all_and_set_by_administrators_only(api: Api) -> None:
    put = api.client.put
    r = put("/api/v1/groups/physics", json={"quota": 75}, headers=api.h("ann"))
    assert r.status_code == 403
    assert r.json()["errors"][0]["reason"] == "administrators only"
    r = put("/api/v1/groups/physics", json={"quota": 75, "priority": 2}, headers=api.h("root"))
    assert r.status_code == 200, r.text
    assert (r.json()["quota"], r.json()["priority"], r.json()["users"]) == (75, 2, 2)
    for body, field in (
        ({"quota": -1}, "quota"),
        ({"priority": 0}, "priority"),
        ({"quota": "lots"}, "body.quota"),
        ({"weight": 3}, "body.weight"),
    ):
        r = put("/api/v1/groups/physics", json=body, headers=api.h("root"))
        assert r.status_code == 422, (body, r.text)
        assert r.json()["errors"][0]["field"] == field, (body, r.text)
    r = put("/api/v1/groups/a%20b", json={"quota": 1}, headers=api.h("root"))
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "group"
    # Everyone reads them; a group with work has a target share and an achieved one.
    rid = api.submit("ann", "processor: p\ninput: [{catalog: year=2004}]\n").json()["id"]
    api.wait("ann", rid, "completed")
    rows = api.client.get("/api/v1/groups", headers=api.h("bob")).json()["groups"]
    by_name = {g["name"]: g for g in rows}
    assert set(by_name) == {"admins", "physics"}
    assert by_name["physics"]["quota"] == 75
    assert by_name["physics"]["achieved_share"] == 1.0
    assert by_name["admins"]["achieved_share"] == 0.0
