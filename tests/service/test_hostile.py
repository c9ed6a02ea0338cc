"""Hostile users against a real daemon: ``datasched serve`` in a process of its own, with its
real runner and two real Dask workers, on loopback, with ordinary users' tokens.

Each test is an attack a user could try, and asserts what that user must not be able to do:
run code in the daemon (a processor that is a system call; a processor file's module body and
``__init__``; a result whose unpickling runs code, fetched by an administrator), reach what
the daemon holds (its environment, the store, other users' outputs, the network), write
outside their own directory (``sh -c``, an output path into another user's directory, through
a link), or pass the job's limits. Where user code runs, it reports the process it ran in:
never the daemon's, always the run-as account, in a sandbox.

Needs bubblewrap (skips without it, unless ``DATASCHED_REQUIRE_SANDBOX=1``).
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("distributed", reason="the runtime extra is not installed")
pytest.importorskip("fastapi", reason="the service extra is not installed")

import httpx
import yaml

from datasched.runtime.demodata import write_demo_dataset
from datasched.service.catalog import Catalog
from datasched.service.store.db import Store
from datasched.service.users import add_user
from sandbox_support import job_account, require_sandbox

SRC = Path(__file__).resolve().parents[2] / "src"
SECRET = "planted-secret-7f3a9c"
CPU_LIMIT_S = 6.0
WALL_LIMIT_S = 40.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """The daemon under attack: its process, URL, tokens and the paths it serves."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, tokens: dict[str, str]) -> None:
        self.proc = proc
        self.url = url
        self.tokens = tokens
        self.root = Path()
        self.db = Path()
        self.log = Path()
        self.uid: int | None = None

    def h(self, user: str, kind: str = "yaml") -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.tokens[user]}",
            "Content-Type": f"application/{kind}",
        }

    def submit(self, user: str, text: str, kind: str = "yaml") -> httpx.Response:
        return httpx.post(
            f"{self.url}/requests", content=text, headers=self.h(user, kind), timeout=120
        )

    def final(self, user: str, rid: str, timeout_s: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            got = httpx.get(f"{self.url}/requests/{rid}", headers=self.h(user), timeout=30)
            assert got.status_code == 200, got.text
            body: dict[str, Any] = got.json()
            if body["state"] in {"completed", "failed", "aborted"}:
                return body
            assert self.proc.poll() is None, "the daemon died"
            assert time.monotonic() < deadline, f"request {rid} still {body['state']}"
            time.sleep(0.3)

    def result(self, user: str, rid: str) -> bytes:
        deadline = time.monotonic() + 60
        while True:
            got = httpx.get(f"{self.url}/requests/{rid}/result", headers=self.h(user), timeout=30)
            if got.status_code == 200:
                return bytes(got.content)
            assert got.status_code == 409, got.text
            assert "Retry-After" in got.headers, got.text
            assert time.monotonic() < deadline, "the result was not merged"
            time.sleep(0.3)

    def logs(self, user: str, rid: str) -> str:
        got = httpx.get(f"{self.url}/requests/{rid}/logs", headers=self.h(user), timeout=30)
        assert got.status_code == 200, got.text
        return got.text


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    require_sandbox()
    if os.geteuid() != 0:
        pytest.skip("the daemon must start as root to run jobs as another account")
    account = job_account()
    base = tmp_path_factory.mktemp("hostile")
    root = base / "root"
    root.mkdir()
    catalog = write_demo_dataset(root / "data", n_events=2000, n_files=2, seed=11)
    uid = gid = None
    if account is not None:
        import pwd

        entry = pwd.getpwnam(account)
        uid, gid = entry.pw_uid, entry.pw_gid
    for user in ("ann", "bob"):
        (root / user).mkdir()
        if uid is not None and gid is not None:
            os.chown(root / user, uid, gid)
    (root / "bob" / "secret.txt").write_text("bob's private output\n")
    db = base / "store.db"
    store = Store(f"sqlite:///{db}")
    Catalog(store).import_yaml(catalog)
    with store.session() as s:
        tokens = {
            "ann": add_user(s, "ann", "physics"),
            "bob": add_user(s, "bob", "physics"),
            "root": add_user(s, "root", "admins", admin=True),
        }
    store.close()
    port = _port()
    args = [sys.executable, "-m", "datasched", "serve", "--db", str(db), "--port", str(port)]
    args += ["--workers", "2", "--cache-dir", str(base / "cache"), "--roots", str(root)]
    args += ["--job-cpu-h", str(CPU_LIMIT_S / 3600), "--job-wall-h", str(WALL_LIMIT_S / 3600)]
    args += ["--job-memory-gb", "1.5", "--job-processes", "64", "--check-timeout", "60"]
    if account is not None:
        args += ["--run-as", account]
    env = {**os.environ, "DATASCHED_PLANTED": SECRET, "DATASCHED_DB": str(db)}
    env["PYTHONPATH"] = str(SRC)
    log = base / "daemon.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    d = Daemon(proc, f"http://127.0.0.1:{port}/api/v1", tokens)
    d.root, d.db, d.log, d.uid = root, db, log, uid
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{d.url}/requests", headers=d.h("ann"), timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.3)
        yield d
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _processor_request(path: Path, *, cls: str = "P", args: str = "{}") -> str:
    return (
        f"processor: {{name: '{path}:{cls}', tree: Events, args: {args}}}\n"
        "inputs:\n  - dataset: {query: 'dataset=zmumu'}\n"
    )


def _command_request(command: str, stdout: str | None = None) -> str:
    doc: dict[str, Any] = {"command": command, "inputs": [{"dataset": {"query": "dataset=zmumu"}}]}
    if stdout is not None:
        doc["stdout"] = stdout
    return str(yaml.safe_dump(doc))


def test_a_processor_that_is_a_system_call_runs_nowhere_near_the_daemon(daemon: Daemon) -> None:
    marker = daemon.root.parent / "popen-marker"
    text = (
        f"processor: {{name: 'subprocess:Popen', tree: Events, "
        f"args: {{args: 'touch {marker}', shell: true}}}}\n"
        "inputs:\n  - dataset: {query: 'dataset=zmumu'}\n"
    )
    sent = daemon.submit("ann", text)
    time.sleep(1.0)  # a Popen made anywhere on this machine would have touched it by now
    assert not marker.exists(), "the processor ran on the daemon's machine"
    if sent.status_code == 201:  # not a processor: refused, or failed where it ran
        assert daemon.final("ann", sent.json()["id"])["state"] == "failed"
    else:
        assert sent.status_code == 422, sent.text
        assert any(e["field"] == "processor" for e in sent.json()["errors"])
    assert not marker.exists()


EVIL_FILE = """
import os, socket

def plant(path):
    try:
        with open(path, "w") as fh:
            fh.write(str(os.getpid()))
    except OSError:
        pass

plant({body!r})  # the module body: at import
LOADED_IN = os.getpid()

class P:
    def __init__(self):
        plant({init!r})  # the constructor
    def process(self, events):
        seen = {{}}
        for name, path in {probe!r}.items():
            try:
                with open(path, "rb") as fh:
                    seen[name] = fh.read(64).decode("latin-1")
            except OSError as exc:
                seen[name] = "refused: " + type(exc).__name__
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
            net = "connected"
        except OSError as exc:
            net = "refused: " + type(exc).__name__
        # Sets: the packets' results are merged (numbers would add up).
        return {{"pid": {{os.getpid()}}, "loaded_in": {{LOADED_IN}}, "uid": {{os.getuid()}},
                 "env": set(os.environ.items()), "seen": set(seen.items()), "net": {{net}},
                 "root": set(os.listdir("/")), "n": len(events)}}
"""


def test_a_processor_file_runs_only_in_a_sandbox_that_holds_nothing_of_the_daemon(
    daemon: Daemon,
) -> None:
    body, init = daemon.root.parent / "body-marker", daemon.root.parent / "init-marker"
    port = int(daemon.url.split(":")[2].split("/")[0])
    probe = {
        "store": str(daemon.db),
        "bob": str(daemon.root / "bob" / "secret.txt"),
        "data": str(next((daemon.root / "data").glob("*.root"))),
        "passwd_of_the_daemon": f"/proc/{daemon.proc.pid}/environ",
    }
    evil = daemon.root / "ann" / "evil.py"
    evil.write_text(EVIL_FILE.format(body=str(body), init=str(init), probe=probe, port=port))
    sent = daemon.submit("ann", _processor_request(evil))
    assert sent.status_code == 201, sent.text
    state = daemon.final("ann", sent.json()["id"])
    assert state["state"] == "completed", state
    assert not body.exists(), "user code wrote on the daemon's machine"
    assert not init.exists(), "user code wrote on the daemon's machine"
    got = pickle.loads(daemon.result("ann", sent.json()["id"]))  # ann's own result
    assert got["n"] == 2000
    pids = got["pid"] | got["loaded_in"]
    assert daemon.proc.pid not in pids, pids
    assert all(pid < 100 for pid in pids), pids
    if daemon.uid is not None:
        assert got["uid"] == {daemon.uid}, "not the run-as account"
    env = dict(got["env"])
    assert SECRET not in repr(env)
    assert "DATASCHED_DB" not in env
    assert set(env) <= {"PATH", "HOME", "LANG", "SCRATCH", "PWD", "TMPDIR"}, sorted(env)
    assert all(v.startswith("refused") for _, v in got["seen"]), got["seen"]
    assert all(n.startswith("refused") for n in got["net"]), "it reached the daemon's port"
    assert {"scratch", "usr", "tmp"} <= got["root"]


HOSTILE_RESULT = """
import os

class Trap:
    def __reduce__(self):
        return (os.system, ("touch {marker}",))

class P:
    def process(self, events):
        return {{"n": len(events)}}
    def postprocess(self, merged):
        return {{"n": merged["n"], "trap": Trap()}}
"""


def test_a_result_that_runs_code_when_unpickled_runs_nothing_for_the_administrator(
    daemon: Daemon, tmp_path: Path
) -> None:
    marker = tmp_path / "unpickled-marker"
    trap = daemon.root / "ann" / "trap.py"
    trap.write_text(HOSTILE_RESULT.format(marker=marker))
    sent = daemon.submit("ann", _processor_request(trap))
    assert sent.status_code == 201, sent.text
    rid = sent.json()["id"]
    assert daemon.final("ann", rid)["state"] == "completed"
    daemon.result("root", rid)  # merged on a worker; the daemon served it unopened
    assert not marker.exists(), "the daemon unpickled a user's result"
    out = tmp_path / "fetched"
    cli = subprocess.run(
        [
            *(sys.executable, "-m", "datasched", "result", rid, "--out", str(out)),
            *("--server", daemon.url.removesuffix("/api/v1"), "--token", daemon.tokens["root"]),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
        check=False,
    )
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "system" in cli.stderr
    assert "--trust" in cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1, cli.stderr
    assert not marker.exists(), "fetching the result ran the user's code"


def test_sh_c_writes_nowhere_outside_its_sandbox(daemon: Daemon) -> None:
    outside = daemon.root / "outside.txt"
    elsewhere = daemon.root.parent / "elsewhere.txt"
    command = f"sh -c 'echo pwned > {outside}; echo pwned > {elsewhere}; echo tried'"
    stdout = daemon.root / "ann" / "sh.out"
    sent = daemon.submit("ann", _command_request(command, str(stdout)))
    assert sent.status_code == 201, sent.text
    daemon.final("ann", sent.json()["id"])
    assert not outside.exists()
    assert not elsewhere.exists()


def test_a_command_cannot_reach_the_store_to_make_itself_administrator(daemon: Daemon) -> None:
    code = (
        f"import sqlite3; c = sqlite3.connect('file:{daemon.db}?mode=rw', uri=True); "
        "c.execute('update users set admin = 1'); c.commit()"
    )
    sent = daemon.submit("ann", _command_request(f"python3 -c {code!r}"))
    assert sent.status_code == 201, sent.text
    body = daemon.final("ann", sent.json()["id"])
    assert body["state"] == "failed", body  # no store in its sandbox
    store = Store(f"sqlite:///{daemon.db}")
    try:
        from sqlalchemy import select

        from datasched.service.store.models import User

        with store.reading() as s:
            admins = sorted(s.scalars(select(User.name).where(User.admin)).all())
    finally:
        store.close()
    assert admins == ["root"]
    ann = {"Authorization": f"Bearer {daemon.tokens['ann']}"}
    r = httpx.put(f"{daemon.url}/groups/physics", json={"quota": 99}, headers=ann)
    assert r.status_code == 403


def test_the_daemons_environment_stays_in_the_daemon(daemon: Daemon) -> None:
    stdout = daemon.root / "ann" / "env.out"
    sent = daemon.submit("ann", _command_request("env", str(stdout)))
    assert sent.status_code == 201, sent.text
    assert daemon.final("ann", sent.json()["id"])["state"] == "completed"
    env = dict(line.split("=", 1) for line in stdout.read_text().splitlines() if "=" in line)
    assert SECRET not in stdout.read_text()
    assert "DATASCHED_DB" not in env
    star = {"FILELIST", "INPUTFILECOUNT", "SCRATCH", "JOBID", "REQUESTID", "PROCESSID", "USER"}
    inputs = {k for k in env if k.startswith("INPUTFILE") and k[9:].isdigit()}
    assert set(env) - inputs <= {"PATH", "HOME", "LANG", "PWD", *star}, sorted(env)
    assert env["USER"] == "ann"
    assert env["HOME"] == "/scratch"


VARS = """
import os, sys
names = open(os.environ["FILELIST"]).read().split()
print("argv", *sys.argv[1:])
print("env", *(os.environ[k] for k in ("JOBID", "INPUTFILECOUNT", "INPUTFILE0", "USER")))
print("listed", len(names), all(os.path.exists(n) for n in names))
"""


def test_star_variables_are_filled_in_and_two_jobs_write_two_files(daemon: Daemon) -> None:
    # A file list naming ROOT files the catalog does not know: the command must still run.
    data = daemon.root / "ann" / "own-data"
    data.mkdir()
    files = []
    for i, f in enumerate(sorted((daemon.root / "data").glob("*.root"))):
        copy = data / f"mine-{i}.root"
        copy.write_bytes(f.read_bytes())
        files.append(copy)
    listing = daemon.root / "ann" / "mine.list"
    listing.write_text("".join(f"{f}\n" for f in files))
    script = daemon.root / "ann" / "vars.py"
    script.write_text(VARS)
    out = daemon.root / "ann" / "out"
    out.mkdir()
    if daemon.uid is not None:
        os.chown(out, daemon.uid, -1)
    text = (
        f"command: python3 {script} $JOBID ${{INPUTFILECOUNT}} $INPUTFILE0 $USER\n"
        f"stdout: {out}/$JOBID.out\n"
        "max_files_per_job: 1\n"
        f"inputs:\n  - filelist:{listing}\n"
    )
    sent = daemon.submit("ann", text)
    assert sent.status_code == 201, sent.text
    rid = sent.json()["id"]
    assert daemon.final("ann", rid)["state"] == "completed"
    written = sorted(p.name for p in out.iterdir())
    assert written == [f"{rid}_0.out", f"{rid}_1.out"]
    for k in (0, 1):
        lines = (out / f"{rid}_{k}.out").read_text().splitlines()
        argv, env, listed = lines[0].split()[1:], lines[1].split()[1:], lines[2].split()
        assert argv[0] == f"{rid}_{k}"
        assert argv[1] == "1"
        assert argv[3] == "ann"
        assert argv[2].startswith("/inputs/0000-mine-")
        assert env == argv
        assert listed == ["listed", "1", "True"]


def test_outputs_go_only_to_the_users_own_directory(daemon: Daemon) -> None:
    bobs = daemon.root / "bob" / "taken.out"
    sent = daemon.submit("ann", _command_request("true", str(bobs)))
    assert sent.status_code == 422, sent.text
    assert any(e["field"] == "stdout" for e in sent.json()["errors"])
    link = daemon.root / "ann" / "to-bob"
    link.symlink_to(daemon.root / "bob")
    sent = daemon.submit("ann", _command_request("true", str(link / "x.out")))
    assert sent.status_code == 422, sent.text
    assert not (daemon.root / "bob" / "x.out").exists()


BURN = """
class P:
    def process(self, events):
        while True:
            pass
"""


def test_a_job_past_its_cpu_limit_fails_saying_so(daemon: Daemon) -> None:
    burn = daemon.root / "ann" / "burn.py"
    burn.write_text(BURN)
    sent = daemon.submit("ann", _processor_request(burn))
    assert sent.status_code == 201, sent.text
    body = daemon.final("ann", sent.json()["id"], timeout_s=WALL_LIMIT_S + 60)
    assert body["state"] == "failed", body
    log = daemon.logs("ann", sent.json()["id"])
    assert "CPU time limit" in log or "wall time limit" in log, log


def test_a_fork_bomb_and_a_memory_hog_fail_on_their_limits(daemon: Daemon) -> None:
    bomb = "python3 -c 'import itertools, os; [os.fork() for _ in itertools.count()]'"
    hog = "python3 -c 'x = bytearray(3 * 1024 ** 3)'"
    ids = []
    for command in (bomb, hog):
        sent = daemon.submit("ann", _command_request(command))
        assert sent.status_code == 201, sent.text
        ids.append(sent.json()["id"])
    logs = []
    for rid in ids:
        assert daemon.final("ann", rid, timeout_s=WALL_LIMIT_S + 60)["state"] == "failed"
        logs.append(daemon.logs("ann", rid))
    assert "process limit" in logs[0] or "wall time" in logs[0], logs[0]
    assert "memory limit" in logs[1], logs[1]
    # The daemon and its workers live on: an ordinary job still runs.
    sent = daemon.submit("ann", _command_request("true"))
    assert daemon.final("ann", sent.json()["id"])["state"] == "completed"


def test_a_dask_client_without_credentials_cannot_reach_the_cluster(daemon: Daemon) -> None:
    admin = {"Authorization": f"Bearer {daemon.tokens['root']}"}
    cluster = httpx.get(f"{daemon.url}/cluster", headers=admin, timeout=30).json()
    address = cluster.get("scheduler")
    assert isinstance(address, str), cluster
    assert address.startswith("tls://127.0.0.1:"), cluster
    probe = (
        "import os, sys\n"
        "from distributed import Client\n"
        "try:\n"
        "    c = Client(sys.argv[1], timeout=5)\n"
        "    print('ran in', c.run_on_scheduler(os.getpid))\n"
        "except Exception as exc:\n"
        "    print('refused', type(exc).__name__)\n"
    )
    for addr in (address, address.replace("tls://", "tcp://")):
        got = subprocess.run(
            [sys.executable, "-c", probe, addr],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert got.stdout.startswith("refused"), got.stdout + got.stderr
        assert str(daemon.proc.pid) not in got.stdout


def test_the_daemons_own_workers_run_as_the_jobs_account_without_its_secrets(
    daemon: Daemon,
) -> None:
    import psutil

    tree = psutil.Process(daemon.proc.pid).children(recursive=True)
    workers = [
        p
        for p in tree
        if p.name() != "bwrap" and "distributed.cli.dask_spec" in " ".join(p.cmdline())
    ]
    assert len(workers) >= 2, [p.cmdline() for p in tree]
    for p in workers:
        assert p.uids().real == daemon.uid, p.cmdline()
        env = p.environ()
        assert "DATASCHED_DB" not in env, sorted(env)
        assert SECRET not in repr(env), sorted(env)
        # Its view holds no store: the daemon's store path is not there.
        assert not Path(f"/proc/{p.pid}/root{daemon.db}").exists()


def test_an_output_the_jobs_account_cannot_write_fails_the_job_saying_so(daemon: Daemon) -> None:
    closed = daemon.root / "ann" / "closed"
    closed.mkdir()
    closed.chmod(0o755)  # the daemon's (root's): the jobs' account cannot write in it
    sent = daemon.submit("ann", _command_request("true", str(closed / "x.out")))
    assert sent.status_code == 201, sent.text
    body = daemon.final("ann", sent.json()["id"])
    assert body["state"] == "failed", body
    assert "cannot write" in daemon.logs("ann", sent.json()["id"])
    assert not (closed / "x.out").exists()
