"""The service's command line: users and catalog on a local store, and the client
commands (submit, status, cancel, logs, result, catalog query --server) against a daemon
on loopback (uvicorn in a thread, with the stand-in language and runner)."""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.service.api.deps import Limits
from datasched.service.app import build_state
from datasched.service.catalog import Catalog
from datasched.service.contracts import FileRef
from datasched.service.store.db import Store
from datasched.service.users import add_user
from svc_support import FakeLanguage, FakeRunner, serving_on_loopback

DATA = Path(__file__).parents[1] / "data"
cli = CliRunner()


def test_users_add_prints_a_token_once_and_list_shows_the_users(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    r = cli.invoke(app, ["users", "add", "ann", "--group", "physics", "--admin", "--db", db])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().startswith("ds_")
    r = cli.invoke(app, ["users", "add", "ann", "--group", "physics", "--db", db])
    assert r.exit_code == 2
    assert "error: NAME: user 'ann' exists" in r.stderr
    r = cli.invoke(app, ["users", "add", "bob", "--group", "a b", "--db", db])
    assert r.exit_code == 2
    assert "--group" in r.stderr
    r = cli.invoke(app, ["users", "list", "--db", db])
    assert r.exit_code == 0
    assert "ann" in r.stdout
    assert "physics" in r.stdout
    assert "yes" in r.stdout


def _group_of(db: str, name: str) -> str:
    r = cli.invoke(app, ["users", "list", "--db", db])
    assert r.exit_code == 0, r.output
    row = next(line for line in r.stdout.splitlines() if line.split()[:1] == [name])
    return row.split()[1]


def test_a_new_token_keeps_the_users_group_unless_one_is_named(tmp_path: Path) -> None:
    """`users add NAME --new-token` needed a --group and moved the user to it, silently: a
    new token now keeps the group, and moving to a named one says so (on stderr: stdout is
    the token alone)."""
    db = str(tmp_path / "s.db")
    r = cli.invoke(app, ["users", "add", "ann", "--group", "physics", "--db", db])
    assert r.exit_code == 0, r.output
    r = cli.invoke(app, ["users", "add", "ann", "--new-token", "--db", db])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().startswith("ds_")
    assert r.stderr == ""
    assert _group_of(db, "ann") == "physics"
    r = cli.invoke(app, ["users", "add", "ann", "--new-token", "--group", "physics", "--db", db])
    assert r.exit_code == 0, r.output
    assert r.stderr == ""  # named, but the same: nothing moved
    r = cli.invoke(app, ["users", "add", "ann", "--new-token", "--group", "chem", "--db", db])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().startswith("ds_")
    assert r.stderr.strip() == "ann: moved from group 'physics' to 'chem'"
    assert _group_of(db, "ann") == "chem"
    r = cli.invoke(app, ["users", "add", "zed", "--db", db])  # a new user needs a group
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: --group: needed to add a new user ('zed' does not exist)"
    r = cli.invoke(app, ["users", "list", "--db", db])
    assert "zed" not in r.stdout


def test_catalog_scan_import_and_query(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    r = cli.invoke(
        app,
        ["catalog", "scan", str(DATA / "uproot-HZZ.root"), "--dataset", "hzz", "--db", db,
         "--meta", "year=2012", "--meta", "system=pp", "--meta", "keywords=higgs,mc"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "hzz: 1 files" in r.stdout
    (tmp_path / "cat.yaml").write_text(
        "datasets:\n  auau:\n    tree: T\n"
        "    files: [{url: /star/a.root, n_events: 5, n_bytes: 50}]\n"
        "    metadata: {year: 2004, system: AuAu, energy: 200}\n"
    )
    r = cli.invoke(app, ["catalog", "import", str(tmp_path / "cat.yaml"), "--db", db])
    assert r.exit_code == 0
    assert "imported 1 datasets: auau" in r.stdout
    r = cli.invoke(app, ["catalog", "query", "higgs year>=2010", "--files", "--db", db])
    assert r.exit_code == 0
    assert r.stdout.split("\t")[1:] == ["2421", f"{(DATA / 'uproot-HZZ.root').stat().st_size}\n"]
    r = cli.invoke(app, ["catalog", "query", "system=auau", "--db", db])
    assert "auau" in r.stdout
    assert "hzz" not in r.stdout
    r = cli.invoke(app, ["catalog", "query", "run=3", "--db", db])
    assert r.exit_code == 2
    assert "unknown key 'run'" in r.stderr
    r = cli.invoke(app, ["catalog", "scan", str(tmp_path / "none"), "--db", db])
    assert r.exit_code == 2
    assert "no ROOT file found" in r.stderr


@pytest.fixture
def server(sqlite_store: Store) -> Iterator[tuple[str, dict[str, str]]]:
    with sqlite_store.session() as s:
        tokens = {"ann": add_user(s, "ann", "g"), "bob": add_user(s, "bob", "g")}
    Catalog(sqlite_store).put(
        "d", [FileRef(f"/d/{i}.root", 20, 200) for i in range(2)], {"year": 2004}
    )
    state = build_state(
        sqlite_store,
        FakeLanguage(),
        runner=FakeRunner(packet=5, hold_users=frozenset({"bob"})),
        period_s=0.05,
    )
    with serving_on_loopback(state) as url:
        yield url, tokens


def test_the_client_commands_against_a_daemon(
    server: tuple[str, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, tokens = server
    monkeypatch.setenv("DATASCHED_SERVER", url)
    monkeypatch.setenv("DATASCHED_TOKEN", tokens["ann"])
    req = tmp_path / "r.yaml"
    req.write_text("title: first\nprocessor: p.py:P\ninput: [{catalog: year=2004}]\n")
    r = cli.invoke(app, ["submit", str(req)])
    assert r.exit_code == 0, r.output
    rid = r.stdout.strip()
    r = cli.invoke(app, ["status", rid, "--watch", "--interval", "0.1"])
    assert r.exit_code == 0
    assert "completed" in r.stdout
    assert "40/40 events" in r.stdout
    r = cli.invoke(app, ["status"])
    assert rid in r.stdout
    assert "first" in r.stdout
    r = cli.invoke(app, ["logs", rid])
    assert f"== {rid}.0 (completed, node-0)" in r.stdout
    r = cli.invoke(app, ["result", rid, "--out", str(tmp_path / "res")])
    assert r.exit_code == 0, r.output
    assert pickle.loads((tmp_path / "res" / "result.pkl").read_bytes()) == {"events": 40}
    r = cli.invoke(app, ["catalog", "query", "year=2004", "--server", url])
    assert r.exit_code == 0
    assert "d" in r.stdout
    # Errors from the server: one field: reason line each, exit 1.
    bad = tmp_path / "bad.yaml"
    bad.write_text("title: bad\ninput: [7]\n")
    r = cli.invoke(app, ["submit", str(bad)])
    assert r.exit_code == 1
    assert "process: give processor or command" in r.stderr
    assert "input[0]: expected a path or {catalog: query}" in r.stderr
    r = cli.invoke(app, ["cancel", rid, "--token", tokens["bob"]])
    assert r.exit_code == 1
    assert f"id: no request '{rid}'" in r.stderr
    r = cli.invoke(app, ["status", "--token", "ds_bad_token"])
    assert r.exit_code == 1
    assert "Authorization: a valid token is needed" in r.stderr
    # bob's jobs run until cancelled.
    rid2 = cli.invoke(app, ["submit", str(req), "--token", tokens["bob"]]).stdout.strip()
    r = cli.invoke(app, ["cancel", rid2, "--token", tokens["bob"]])
    assert r.exit_code == 0
    assert f"{rid2}: aborted" in r.stdout


def test_users_remove_and_set_against_a_daemon(
    server: tuple[str, dict[str, str]],
    sqlite_store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An administrator removes a user (refused while one of their requests runs; their
    token refused by the running daemon at once after; their requests kept) and promotes
    and demotes administrators, never the last; an unknown user is one line, exit 2."""
    url, tokens = server
    db = str(tmp_path / "store.db")  # the daemon's store
    with sqlite_store.session() as s:
        root = add_user(s, "root", "admins", admin=True)
    monkeypatch.setenv("DATASCHED_SERVER", url)
    req = tmp_path / "r.yaml"
    req.write_text("title: held\nprocessor: p.py:P\ninput: [{catalog: year=2004}]\n")
    r = cli.invoke(app, ["submit", str(req), "--token", tokens["bob"]])  # runs until cancelled
    assert r.exit_code == 0, r.output
    rid = r.stdout.strip()
    r = cli.invoke(app, ["users", "remove", "bob", "--db", db])
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        f"error: NAME: user 'bob' has a request not yet final ({rid}); cancel it first "
        "(datasched cancel ID, with an administrator's token), or give --cancel"
    )
    assert cli.invoke(app, ["status", "--token", tokens["bob"]]).exit_code == 0  # unchanged
    assert cli.invoke(app, ["cancel", rid, "--token", root]).exit_code == 0
    r = cli.invoke(app, ["users", "remove", "bob", "--db", db])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "bob: removed; their token no longer works; 1 request kept"
    r = cli.invoke(app, ["status", "--token", tokens["bob"]])
    assert r.exit_code == 1
    assert r.stderr.strip() == "Authorization: a valid token is needed"
    r = cli.invoke(app, ["status", rid, "--token", root])  # the history stays
    assert r.exit_code == 0, r.output
    assert f"{rid} (bob) aborted" in r.stdout
    assert "bob" not in cli.invoke(app, ["users", "list", "--db", db]).stdout
    assert "bob" in cli.invoke(app, ["users", "list", "--removed", "--db", db]).stdout
    r = cli.invoke(app, ["users", "add", "bob", "--group", "g", "--db", db])  # not reused
    assert r.exit_code == 2
    assert "error: NAME: user 'bob' was removed (their requests keep the name)" in r.stderr
    for args in (["remove", "nobody"], ["set", "nobody", "--admin"]):
        r = cli.invoke(app, ["users", *args, "--db", db])
        assert r.exit_code == 2
        assert r.stderr.strip() == "error: NAME: no user 'nobody'"
    last = (
        "'root' is the last administrator; make another one first "
        "(datasched users set NAME --admin)"
    )
    r = cli.invoke(app, ["users", "remove", "root", "--db", db])
    assert r.exit_code == 2
    assert r.stderr.strip() == f"error: NAME: {last}"
    r = cli.invoke(app, ["users", "set", "root", "--no-admin", "--db", db])
    assert r.exit_code == 2
    assert r.stderr.strip() == f"error: --no-admin: {last}"
    r = cli.invoke(app, ["users", "set", "root", "--db", db])
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: --admin, --no-admin, --group: give one"
    # Promoted and demoted: the daemon sees it at the next call.
    r = cli.invoke(app, ["users", "set", "ann", "--admin", "--db", db])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "ann: now an administrator (group 'g', administrator)"
    r = cli.invoke(app, ["users", "set", "root", "--no-admin", "--db", db])
    assert r.exit_code == 0, r.output
    assert (
        r.stdout.strip() == "root: no longer an administrator (group 'admins', not administrator)"
    )
    r = cli.invoke(app, ["groups", "set", "g", "--quota", "2", "--token", root])
    assert r.exit_code == 1
    assert r.stderr.strip() == "caller: administrators only"
    r = cli.invoke(app, ["groups", "set", "g", "--quota", "2", "--token", tokens["ann"]])
    assert r.exit_code == 0, r.output
    r = cli.invoke(app, ["users", "set", "ann", "--group", "physics", "--db", db])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == (
        "ann: moved from group 'g' to 'physics' (group 'physics', administrator)"
    )
    r = cli.invoke(app, ["users", "add", "bob", "--new-token", "--db", db])  # brought back
    assert r.exit_code == 0, r.output
    assert r.stderr.strip() == "bob: brought back (they had been removed)"
    r = cli.invoke(app, ["status", rid, "--token", r.stdout.strip()])
    assert r.exit_code == 0, r.output


def test_the_address_may_be_pasted_with_the_apis_or_dashboards_path(
    server: tuple[str, dict[str, str]],
) -> None:
    url, tokens = server
    for pasted in (f"{url}/api/v1", f"{url}/api/v1/", f"{url}/dashboard", f"  {url}/ "):
        r = cli.invoke(app, ["status", "--server", pasted, "--token", tokens["ann"]])
        assert r.exit_code == 0, (pasted, r.output)
    for bad, says in (
        ("127.0.0.1:8765", "expected the service's address, such as http://127.0.0.1:8765"),
        (f"{url}/api/v1?x=1", "without a query or fragment"),
    ):
        r = cli.invoke(app, ["status", "--server", bad, "--token", tokens["ann"]])
        assert r.exit_code == 2, (bad, r.output)
        assert says in r.stderr
        assert "Traceback" not in r.output


def test_serve_refuses_bad_options_before_touching_the_store(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    for args, field in (
        (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "--workers and --scheduler"),
        (["--split", "by-moon"], "--split: 'by-moon' is not one of"),
        (["--runner", "no_such_module:make"], "--runner: cannot load"),
        (
            ["--runner", "svc_support:make_fake_runner", "--db", "mysql://h/d", "--no-sandbox"],
            "--db: 'mysql'",
        ),
        (["--roots", str(tmp_path / "nowhere")], "--roots: "),
    ):
        r = cli.invoke(app, ["serve", "--db", str(db), *args])
        assert r.exit_code == 2, r.output
        assert field in r.stderr
    assert not db.exists()


def test_numbers_and_tokens_are_checked_before_they_are_used(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    for value in ("1e309", "inf", "nan", "0"):
        r = cli.invoke(
            app, ["users", "add", "fay", "--group", "hot", "--priority", value, "--db", db]
        )
        assert r.exit_code == 2, r.output
        assert "--priority: expected a finite number > 0" in r.stderr
        # (Refused here: infinite, it broke 'groups list' for everyone.)
        r = cli.invoke(app, ["groups", "set", "hot", "--quota", value, "--token", "ds_a_b"])
        assert r.exit_code == 2, r.output
        assert "--quota: expected a finite number > 0" in r.stderr
    nowhere = "http://127.0.0.1:9"
    # A token pasted with a newline or a space is taken without them.
    r = cli.invoke(app, ["status", "--server", nowhere], env={"DATASCHED_TOKEN": "ds_a_b \r\n"})
    assert r.exit_code == 1
    assert "cannot reach" in r.stderr
    # Anything else is not a token, and is not printed back (it may be most of a real one).
    for bad in ("ds_é_secret", "ds_a b_secret"):
        r = cli.invoke(app, ["status", "--server", nowhere, "--token", bad])
        assert r.exit_code == 2, r.output
        assert "--token: not a token" in r.stderr
        assert "secret" not in r.output


def test_groups_set_and_list_against_a_daemon(
    server: tuple[str, dict[str, str]], sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, tokens = server
    with sqlite_store.session() as s:
        root = add_user(s, "root", "admins", admin=True)
    monkeypatch.setenv("DATASCHED_SERVER", url)
    r = cli.invoke(app, ["groups", "set", "g", "--quota", "25", "--token", tokens["ann"]])
    assert r.exit_code == 1
    assert "caller: administrators only" in r.stderr
    r = cli.invoke(app, ["groups", "set", "g", "--quota", "-2", "--token", root])
    assert r.exit_code == 2  # refused here, before the server (which refuses it too)
    assert "--quota: expected a finite number > 0, got -2.0" in r.stderr
    r = cli.invoke(app, ["groups", "set", "g", "--token", root])
    assert r.exit_code == 2
    assert "--priority, --quota: give one or both" in r.stderr
    r = cli.invoke(app, ["groups", "set", "g", "--quota", "25", "--priority", "3", "--token", root])
    assert r.exit_code == 0, r.output
    long_name = "higgs-to-four-leptons-2026"
    r = cli.invoke(app, ["groups", "set", long_name, "--quota", "2", "--token", root])
    assert r.exit_code == 0, r.output
    r = cli.invoke(app, ["groups", "list", "--token", tokens["bob"]], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    row = next(line for line in lines if line.split()[:1] == ["g"])
    assert row.split()[:4] == ["g", "3", "25", "2"]
    # 80 columns hold every column and the group's whole name, nothing cut with an ellipsis
    assert "…" not in r.stdout
    assert max(len(line) for line in lines) <= 80
    assert any(line.split()[:1] == [long_name] for line in lines), r.stdout


def test_serve_confines_users_code_or_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasched.sandbox.confine as confine

    db = tmp_path / "s.db"
    base = ["serve", "--db", str(db), "--runner", "svc_support:make_fake_runner"]
    if os.geteuid() == 0:
        r = cli.invoke(app, base)
        assert r.exit_code == 2
        assert "--run-as: users' jobs need an account" in r.stderr
        r = cli.invoke(app, [*base, "--run-as", "no-such-account-xyz"])
        assert r.exit_code == 2
        assert "no account 'no-such-account-xyz'" in r.stderr
        r = cli.invoke(app, [*base, "--run-as", "root"])
        assert r.exit_code == 2
        assert "is root" in r.stderr
    else:
        r = cli.invoke(app, base)
        assert r.exit_code == 2
        assert "never run as the daemon's own account" in r.stderr
    # Without bubblewrap it says how to install it.
    monkeypatch.setattr(confine, "sandbox_problem", lambda: "bubblewrap (bwrap) is not installed")
    r = cli.invoke(app, [*base, "--run-as", "nobody"])
    assert r.exit_code == 2
    assert "bubblewrap (bwrap) is not installed" in r.stderr
    assert not db.exists()
    # --no-sandbox warns, every start (this one stops at the store).
    r = cli.invoke(app, [*base, "--no-sandbox", "--db", "mysql://h/d"])
    assert r.exit_code == 2
    assert "WARNING: --no-sandbox" in r.stderr


def test_users_list_fits_80_columns_with_names_whole(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    name, group = "u" + "x" * 63, "g" + "y" * 63  # the longest names allowed
    r = cli.invoke(app, ["users", "add", name, "--group", group, "--admin", "--db", db])
    assert r.exit_code == 0, r.output
    r = cli.invoke(app, ["users", "list", "--db", db], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "…" not in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    rows = [line.split() for line in r.stdout.splitlines()]
    rule = next(i for i, row in enumerate(rows) if row and set(row[0]) == {"─"})
    data = [row for row in rows[rule + 1 :] if row]
    # wrapped over lines, column by column, never cut
    assert "".join(row[0] for row in data) == name
    assert "".join(row[1] for row in data) == group


def test_users_remove_cancel_shuts_a_hostile_user_out_in_one_step(
    sqlite_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`users remove NAME --cancel`, from another process on the daemon's store, while the
    user's command and analysis run and they keep submitting: their token is refused at
    once, the submissions racing the removal leave no open request, every request of theirs
    ends aborted, and the daemon cancels their running jobs in the runner (the path
    `datasched cancel` takes, which kills a command in its sandbox). It took three steps
    (new token, cancel each request, remove), the removal refused while one was open. The
    last administrator stays protected."""
    import threading

    import httpx

    db = str(tmp_path / "store.db")  # the daemon's store
    with sqlite_store.session() as s:
        root = add_user(s, "root", "admins", admin=True)
        eve = add_user(s, "eve", "g")
    Catalog(sqlite_store).put(
        "d", [FileRef(f"/d/{i}.root", 20, 200) for i in range(2)], {"year": 2004}
    )
    runner = FakeRunner(packet=5, hold_users=frozenset({"eve"}))  # eve's jobs run until cancelled
    # No rate limit in the way: every answer to the flood says whether its token held.
    limits = Limits(rate_per_s=10_000, burst=10_000, max_pending=10_000)
    state = build_state(sqlite_store, FakeLanguage(), runner=runner, period_s=0.05, limits=limits)
    command = (
        "title: spin\ncommand: spin $FILELIST\nfiles_per_job: 2\ninput: [{catalog: year=2004}]\n"
    )
    analysis = "title: hog\nprocessor: p.py:P\ninput: [{catalog: year=2004}]\n"
    with serving_on_loopback(state) as url:
        monkeypatch.setenv("DATASCHED_SERVER", url)
        as_eve = {"Authorization": f"Bearer {eve}", "Content-Type": "application/yaml"}

        def submit(body: str) -> httpx.Response:
            return httpx.post(f"{url}/api/v1/requests", content=body, headers=as_eve)

        ids = [submit(command).json()["id"], submit(analysis).json()["id"]]
        deadline = time.monotonic() + 10
        while len(runner.submitted) < 3:  # the command's job and the analysis's two
            assert time.monotonic() < deadline, runner.submitted
            time.sleep(0.02)
        # eve keeps submitting while she is removed.
        answers: list[int] = []
        stop = threading.Event()

        def flood() -> None:
            while not stop.is_set():
                answers.append(submit(analysis).status_code)

        flooding = threading.Thread(target=flood)
        flooding.start()
        try:
            while len(answers) < 3:
                time.sleep(0.01)
            r = cli.invoke(app, ["users", "remove", "eve", "--cancel", "--db", db])
            removed_after = len(answers)
            assert r.exit_code == 0, r.output
            r2 = cli.invoke(app, ["status", "--token", eve])  # refused at once
            time.sleep(0.3)
        finally:
            stop.set()
            flooding.join(timeout=10)
        assert r2.exit_code == 1
        assert r2.stderr.strip() == "Authorization: a valid token is needed"
        said = r.stdout.strip()
        assert said.startswith("eve: removed; their token no longer works; ")
        n = int(said.split("; ")[2].split()[0])  # "N requests cancelled (ids)"
        assert n >= 2
        assert all(rid in said for rid in ids)
        assert said.endswith(f"; {n} requests kept")  # every one of hers, none left open
        assert 401 in answers[removed_after:]  # the flood was refused from then on
        assert set(answers[removed_after + 1 :]) <= {401}
        everyone = httpx.get(
            f"{url}/api/v1/requests", headers={"Authorization": f"Bearer {root}"}
        ).json()["requests"]
        hers = [q for q in everyone if q["owner"] == "eve"]
        assert len(hers) == n
        assert {q["state"] for q in hers} == {"aborted"}
        # The daemon stopped each job the runner held (the command's among them).
        held = {job_id for job_id, _ in runner.submitted}
        deadline = time.monotonic() + 10
        while not held <= set(runner.cancelled):
            assert time.monotonic() < deadline, (held, runner.cancelled)
            time.sleep(0.02)
        assert f"{ids[0]}.0" in runner.cancelled
        runner.wait()
        assert all(not th.is_alive() for th in runner._threads)  # nothing of hers runs
        # The last administrator, and an unknown user: one line naming the field.
        r = cli.invoke(app, ["users", "remove", "root", "--cancel", "--db", db])
        assert r.exit_code == 2
        assert r.stderr.strip() == (
            "error: NAME: 'root' is the last administrator; make another one first "
            "(datasched users set NAME --admin)"
        )
        for who, why in (("nobody", "no user 'nobody'"), ("eve", "user 'eve' was removed already")):
            r = cli.invoke(app, ["users", "remove", who, "--cancel", "--db", db])
            assert r.exit_code == 2
            assert r.stderr.strip() == f"error: NAME: {why}"
        assert (
            httpx.get(
                f"{url}/api/v1/requests", headers={"Authorization": f"Bearer {root}"}
            ).status_code
            == 200
        )
