"""The dashboard's page and HTML fragments with FastAPI's TestClient (no browser): tokens
required as for the API, another user's request unknown, progress, packet statistics and
the plot after a request completes, a refused request's reasons, escaping, the cluster's
two shapes of node."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from datasched.service.api.deps import ServiceState
from datasched.service.app import build_state, create_app
from datasched.service.dashboard.plot import progress_plot
from datasched.service.dashboard.routes import render
from datasched.service.dashboard.views import eta_text, node_rows
from datasched.service.store.db import Store
from datasched.service.users import add_user
from service.dash_support import REQUEST, dashboard_service


@dataclass
class Dash:
    client: TestClient
    tokens: dict[str, str]
    svc: ServiceState

    def h(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def get(self, who: str, fragment: str) -> Any:
        return self.client.get(f"/dashboard/fragments/{fragment}", headers=self.h(who))

    def submit(self, who: str, body: str = REQUEST) -> dict[str, Any]:
        r = self.client.post(
            "/api/v1/requests",
            content=body,
            headers={**self.h(who), "Content-Type": "application/yaml"},
        )
        out: dict[str, Any] = r.json()
        return out

    def wait(self, who: str, rid: str, state: str) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got = self.client.get(f"/api/v1/requests/{rid}", headers=self.h(who)).json()
            if got["state"] == state:
                return
            time.sleep(0.02)
        raise AssertionError(f"{rid} did not become {state}")


@pytest.fixture
def dash(sqlite_store: Store) -> Iterator[Dash]:
    svc, tokens = dashboard_service(sqlite_store)
    with TestClient(create_app(svc)) as client:
        yield Dash(client, tokens, svc)
        root = {"Authorization": f"Bearer {tokens['root']}"}
        for r in client.get("/api/v1/requests", headers=root).json()["requests"]:
            client.delete(f"/api/v1/requests/{r['id']}", headers=root)  # end bob's held jobs
    assert svc.runner is not None
    svc.runner.stop()


def test_page_and_static_files_need_no_token_and_forbid_other_origins(dash: Dash) -> None:
    page = dash.client.get("/dashboard")
    assert page.status_code == 200
    assert 'id="login-form"' in page.text
    assert "/dashboard/static/dashboard.js" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "http" not in page.text.replace("http://www.w3.org", "")  # nothing from elsewhere
    root = dash.client.get("/", follow_redirects=False)
    assert root.status_code == 307
    assert root.headers["location"] == "/dashboard"
    js = dash.client.get("/dashboard/static/dashboard.js")
    assert js.status_code == 200
    assert js.headers["content-type"].startswith("text/javascript")
    assert "sessionStorage" in js.text
    assert dash.client.get("/dashboard/static/dashboard.css").status_code == 200
    icon = dash.client.get("/dashboard/static/favicon.svg")
    assert icon.headers["content-type"].startswith("image/svg+xml")
    missing = dash.client.get("/dashboard/static/..%2Fviews.py")
    assert missing.status_code == 404


@pytest.mark.parametrize("fragment", ["whoami", "cluster", "requests", "requests/abc"])
def test_fragments_need_a_valid_token(dash: Dash, fragment: str) -> None:
    assert dash.client.get(f"/dashboard/fragments/{fragment}").status_code == 401
    bad = {"Authorization": "Bearer nope.nope"}
    r = dash.client.get(f"/dashboard/fragments/{fragment}", headers=bad)
    assert r.status_code == 401
    assert r.json()["errors"][0]["field"] == "Authorization"


def test_whoami_names_the_user_and_says_administrator(dash: Dash) -> None:
    assert 'data-user="ann"' in dash.get("ann", "whoami").text
    assert "administrator" not in dash.get("ann", "whoami").text
    assert "administrator" in dash.get("root", "whoami").text


def test_a_completed_request_shows_its_progress_packets_and_plot(dash: Dash) -> None:
    rid = dash.submit("ann")["id"]
    dash.wait("ann", rid, "completed")
    listing = dash.get("ann", "requests").text
    assert f'data-request="{rid}" data-state="completed"' in listing
    assert "80 / 80 events (100%)" in listing
    assert f'data-cancel="{rid}"' not in listing  # nothing to cancel any more
    detail = dash.get("ann", f"requests/{rid}")
    assert detail.status_code == 200
    text = detail.text
    assert text.count('<tr data-job="') == 2
    assert text.count("40 / 40 events (100%)") == 2
    assert '<td data-stat="count">16</td>' in text  # 2 files × 40 events in packets of 5
    assert '<td data-stat="events">5 / 5.0 / 5</td>' in text
    assert "8.0 kB" in text  # the stand-in reads 100 bytes an event: 80 events
    assert "<svg" in text
    assert 'class="done" points="' in text
    assert "80 of 80 events done in 16 packets" in text


def test_another_users_request_is_unknown_and_an_administrator_sees_all(dash: Dash) -> None:
    rid = dash.submit("ann")["id"]
    assert dash.get("bob", f"requests/{rid}").status_code == 404
    assert rid not in dash.get("bob", "requests").text
    assert dash.get("root", f"requests/{rid}").status_code == 200
    assert "Everyone's requests" in dash.get("root", "requests").text


def test_a_running_request_offers_cancel_and_the_queue_counts_its_jobs(dash: Dash) -> None:
    rid = dash.submit("bob")["id"]  # bob's jobs are held running
    dash.wait("bob", rid, "running")
    assert f'data-cancel="{rid}"' in dash.get("bob", "requests").text
    assert f'data-cancel="{rid}"' in dash.get("bob", f"requests/{rid}").text
    # The request runs as soon as one of its jobs does; wait for both.
    deadline = time.monotonic() + 10
    while '<td data-state="running">2</td>' not in (cluster := dash.get("bob", "cluster").text):
        assert time.monotonic() < deadline, cluster
        time.sleep(0.02)
    assert '<tr data-node="node-0">' in cluster
    assert "50%" in cluster
    group = cluster.split('<tr data-group="physics">', 1)[1].split("</tr>", 1)[0]
    assert '<td data-count="waiting">0</td><td data-count="running">2</td>' in group
    assert dash.client.delete(f"/api/v1/requests/{rid}", headers=dash.h("bob")).status_code == 200
    dash.wait("bob", rid, "aborted")
    assert 'data-state="aborted"' in dash.get("bob", "requests").text


def test_a_refused_request_shows_why_and_markup_is_escaped(dash: Dash) -> None:
    body = "title: '<script>alert(1)</script>'\nprocessor: p\ninput:\n  - /not/there.root\n"
    answer = dash.submit("ann", body)
    assert answer["state"] == "refused"
    text = dash.get("ann", f"requests/{answer['id']}").text
    assert "Why it was refused" in text
    assert "input[0].path" in text
    assert "<script>alert" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "No packet done yet." in text
    assert "<script>alert" not in dash.get("ann", "requests").text


def test_nodes_are_read_from_the_runtimes_view_and_from_a_plain_one() -> None:
    runtime = {
        "nodes": [
            {
                "name": "w1",
                "up": True,
                "slots": [{"slot": 0, "job": "r.0"}, {"slot": 1, "job": None}],
                "slots_total": 2,
                "cached_bytes": 250,
                "cached_files": 3,
                "cache_capacity_bytes": 1000,
            },
            {"name": "w2", "up": False, "slots": [], "slots_total": 2, "cached_bytes": 0},
        ]
    }
    w1, w2 = node_rows(runtime)
    assert (w1.slots_busy, w1.slots_total, w1.cache_fill, w1.running) == (1, 2, 0.25, ("r.0",))
    assert w1.cached_files == 3
    html = render("cluster.html", nodes=[w1, w2], queue=[], policy="farm", has_runner=True)
    assert "Policy: <strong>farm</strong>" in html
    assert "(3 files)" in html
    assert '<tr data-node="w2" class="down">' in html
    assert "w2 (down)" in html
    assert (w2.up, w2.slots_busy, w2.cache_fill, w2.cached_files) == (False, 0, None, None)
    plain_view = {"nodes": [{"name": "n", "slots": 4, "cache_fill": 0.5, "running": ["a"]}]}
    (plain,) = node_rows(plain_view)
    assert (plain.slots_busy, plain.slots_total, plain.cache_fill) == (1, 4, 0.5)
    assert plain.cached_files is None
    assert node_rows({}) == []


def test_the_plot_steps_up_to_the_events_done() -> None:
    plot = progress_plot([(0.0, 10), (2.0, 20)], events_total=40, packets=2)
    points = [tuple(map(float, p.split(","))) for p in plot.points.split()]
    ys = [y for _, y in points]
    assert ys == sorted(ys, reverse=True)  # never down (SVG's y grows downwards)
    assert points[0] == (plot.left, plot.bottom)
    assert points[-1][0] == plot.right
    # 20 of 40 events: half way up; the dashed line of the events to do at the top.
    assert points[-1][1] == pytest.approx((plot.top + plot.bottom) / 2, abs=0.1)
    assert plot.total_y == pytest.approx(plot.top, abs=0.1)
    assert [t.label for t in plot.y_ticks] == ["0", "10", "20", "30", "40"]


def test_each_request_in_the_list_shows_its_own_progress(dash: Dash) -> None:
    done = dash.submit("ann")["id"]
    dash.wait("ann", done, "completed")
    held = dash.submit("bob")["id"]  # bob's jobs are held running, nothing done
    dash.wait("bob", held, "running")
    refused = dash.submit("ann", "processor: p\n")["id"]
    listing = dash.get("root", "requests").text
    rows = {
        rid: listing.split(f'<tr data-request="{rid}"', 1)[1].split("</tr>", 1)[0]
        for rid in (done, held, refused)
    }
    assert "80 / 80 events (100%)" in rows[done]
    assert "completed" in rows[done]
    assert "0 / 80 events (0%)" in rows[held]
    assert "running" in rows[held]
    assert "— (refused)" in rows[refused]
    assert "<progress" not in rows[refused]
    # Newest first.
    assert listing.index(refused) < listing.index(held) < listing.index(done)


def test_etas_in_words() -> None:
    assert eta_text(None) == "—"
    assert eta_text({"seconds_left": 12.4, "error_at_submission_s": None}) == "12 s left"
    # error = predicted finish - actual finish: positive, it ended before the first ETA.
    early = {"seconds_left": None, "error_at_submission_s": 5.5}
    assert eta_text(early) == "ended 5.5 s before its first ETA"
    late = {"seconds_left": None, "error_at_submission_s": -11.3}
    assert eta_text(late) == "ended 11.3 s after its first ETA"


def test_the_daemons_eta_is_shown_in_the_list_and_on_the_request(
    dash: Dash, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = dash.submit("bob")["id"]  # held running
    dash.wait("bob", rid, "running")
    assert dash.svc.eta is not None
    etas = {rid: {"seconds_left": 42.0, "error_at_submission_s": None}}
    monkeypatch.setattr(dash.svc.eta, "eta", etas.get)
    row = dash.get("bob", "requests").text.split(f'<tr data-request="{rid}"', 1)[1]
    assert '<td class="eta">42 s left</td>' in row.split("</tr>", 1)[0]
    detail = dash.get("bob", f"requests/{rid}").text
    policy = dash.svc.eta.policy
    assert f'<dd class="eta">42 s left (the simulator, under {policy})</dd>' in detail


def test_without_a_runner_the_groups_queues_wait_highest_priority_first(
    sqlite_store: Store,
) -> None:
    svc, tokens = dashboard_service(sqlite_store)
    svc = build_state(sqlite_store, svc.language)  # no runner: the jobs wait
    with sqlite_store.session() as s:
        add_user(s, "cy", "heavy-ion", group_priority=5.0)
        tokens["cy"] = add_user(s, "cy", "heavy-ion", new_token=True)
    with TestClient(create_app(svc)) as client:
        dash = Dash(client, tokens, svc)
        dash.submit("ann")
        dash.submit("bob")
        dash.submit("cy")
        cluster = dash.get("root", "cluster").text
    assert "No runner" in cluster
    assert "No node reported." in cluster
    assert '<td data-state="pending">6</td>' in cluster
    assert cluster.index('data-group="heavy-ion"') < cluster.index('data-group="physics"')
    physics = cluster.split('<tr data-group="physics">', 1)[1].split("</tr>", 1)[0]
    assert '<td data-count="waiting">4</td><td data-count="running">0</td>' in physics
    heavy = cluster.split('<tr data-group="heavy-ion">', 1)[1].split("</tr>", 1)[0]
    assert "<td>5</td>" in heavy
    assert '<td data-count="waiting">2</td>' in heavy
    # Its target share: its weight 5 (quota 1 x priority 5) over the groups with work, 5 + 1.
    assert '<td data-share="target">83%</td><td data-share="achieved">—</td>' in heavy


@pytest.mark.parametrize(
    ("state", "value"), [("aborted", 'value="0"'), ("completed", 'value="1"'), ("running", None)]
)
def test_a_commands_job_shows_its_state_not_a_percentage(state: str, value: str | None) -> None:
    from datasched.service.dashboard.routes import _env
    from datasched.service.dashboard.views import Progress

    bar = _env.get_template("_progress.html").module.bar  # type: ignore[attr-defined]
    html = str(bar(Progress(0, 0), state))
    assert f"a command, no events ({state})" in html
    assert "%" not in html  # an aborted command is not "0 / 0 events (100%)"
    if value is None:
        assert "value=" not in html  # indeterminate while it runs
    else:
        assert value in html
    # a processor's job keeps its events and percentage
    assert "5 / 20 events (25%)" in str(bar(Progress(5, 20), state))


def test_the_status_table_shows_a_dash_for_a_commands_events() -> None:
    from rich.console import Console

    from datasched.cli.client import _request_table

    none = {"events": 0, "events_total": 0, "packets": 0, "bytes": 0}
    job: dict[str, Any] = {"id": "r.0", "state": "aborted", "node": None, "files": []}
    job["progress"] = none
    req: dict[str, Any] = {"id": "r", "owner": "ann", "state": "aborted", "jobs": [job]}
    req["progress"] = none
    console = Console(width=100, record=True)
    console.print(_request_table(req))
    text = console.export_text()
    assert "a command, no events" in text
    assert "0/0" not in text


COMMAND = (
    "title: count files\ncommand: count $FILELIST\nfiles_per_job: 2\n"
    "input:\n  - catalog: year=2004\n"
)
"""A command over both files, in one elementary job."""


def test_a_commands_request_shows_its_run_not_packet_statistics(dash: Dash) -> None:
    """A command reads no events in packets: its page showed "events per packet 0 / 0.0 /
    0" and the like. It shows the command's state, start, end and exit status instead, and
    no packet figures; the API's JSON and `datasched status ID` say the same."""
    from datetime import UTC, datetime

    from rich.console import Console
    from sqlalchemy import update

    from datasched.cli.client import _request_table
    from datasched.service.store.models import Job, Packet

    rid = dash.submit("ann", COMMAND)["id"]
    dash.wait("ann", rid, "completed")
    began = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    with dash.svc.store.session() as s:  # as the runner reports a command: when it began
        s.execute(update(Packet).where(Packet.job_id == f"{rid}.0").values(started=began))
    text = dash.get("ann", f"requests/{rid}").text
    for gone in ("Packet statistics", "data-stat=", "per packet", "packets", "Packets"):
        assert gone not in text, gone
    assert '<dd data-run="started">2024-05-06 07:08:09 UTC</dd>' in text
    assert '<dd data-run="exit">0</dd>' in text
    assert '<dd data-run="ended">—</dd>' not in text  # it ended: when
    assert "a command, no events (completed)" in text
    assert "80 events" not in text
    assert "%" not in text
    listing = dash.get("ann", "requests").text  # the list's bar says the same
    assert "a command, no events (completed)" in listing
    got = dash.client.get(f"/api/v1/requests/{rid}", headers=dash.h("ann")).json()
    assert got["kind"] == "command"
    assert got["progress"] is None
    (job,) = got["jobs"]
    assert job["kind"] == "command"
    assert job["progress"] is None
    assert job["command"]["started"] == "2024-05-06T07:08:09+00:00"
    assert job["command"]["ended"] is not None
    assert job["command"]["exit_code"] == 0
    console = Console(width=100, record=True)
    console.print(_request_table(got))
    shown = console.export_text()
    assert f"{rid} (ann) completed: a command" in shown
    assert "2024-05-06 07:08:09" in shown
    assert "packets" not in shown
    assert "events" not in shown
    # Failed with an exit code: the code, from what its log recorded.
    with dash.svc.store.session() as s:
        s.execute(
            update(Job)
            .where(Job.id == f"{rid}.0")
            .values(state="failed", log="command count: exited with code 3 on node-0\n")
        )
    text = dash.get("ann", f"requests/{rid}").text
    assert '<dd data-run="exit">3</dd>' in text
    job = dash.client.get(f"/api/v1/requests/{rid}", headers=dash.h("ann")).json()["jobs"][0]
    assert job["command"]["exit_code"] == 3
    # A processor's request keeps its packet figures.
    other = dash.submit("ann")["id"]
    dash.wait("ann", other, "completed")
    text = dash.get("ann", f"requests/{other}").text
    assert "Packet statistics" in text
    assert 'data-run="' not in text
    assert dash.client.get(f"/api/v1/requests/{other}", headers=dash.h("ann")).json()["kind"] == (
        "processor"
    )


def test_a_running_command_shows_when_it_started_and_no_end_yet(dash: Dash) -> None:
    rid = dash.submit("bob", COMMAND)["id"]  # bob's jobs are held running
    dash.wait("bob", rid, "running")
    text = dash.get("bob", f"requests/{rid}").text
    assert '<dd data-run="started">—</dd>' not in text  # reported running: then
    assert '<dd data-run="ended">—</dd>' in text
    assert '<dd data-run="exit">—</dd>' in text
    assert "Packet statistics" not in text
    job = dash.client.get(f"/api/v1/requests/{rid}", headers=dash.h("bob")).json()["jobs"][0]
    assert job["command"]["started"] is not None
    assert job["command"]["ended"] is None
    assert job["command"]["exit_code"] is None
