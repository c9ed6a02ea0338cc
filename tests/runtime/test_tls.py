"""A closed cluster (docs/runtime.md, "A closed cluster").

The cluster datasched starts is ``tls://`` with credentials made for it in a private
directory (removed when it closes), and nothing it starts listens beyond loopback. An attacker
who reaches its port (plain TCP, TLS without a certificate, or a certificate of another CA,
even one with the same names) cannot connect, let alone run code in this process, which is
where the ``serve`` daemon's scheduler lives; the right files let a client in. An existing
cluster is joined over TLS with the user's files, by ``run`` and by a sweep, and each misuse
of ``--tls-*`` is one error line naming the option.
"""

from __future__ import annotations

import asyncio
import csv
import gc
import ipaddress
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from typer.testing import CliRunner

from datasched.cli import app
from datasched.runtime.session import ClusterOptions, open_cluster, run_jobs
from datasched.runtime.tls import (
    ClusterCredentials,
    TlsError,
    TlsFiles,
    check_tls_options,
    make_credentials,
    private_credentials,
    security,
)
from datasched.sim.parallel import ClusterError, DaskScheduler, check_scheduler
from runtime_support import N_EVENTS, TLS_OPTIONS, DaskProcesses, reference_counts

runner = CliRunner()

# Dask's TLS listener leaves the socket of a connection whose handshake failed (each attack
# here) to the garbage collector (distributed.comm.tcp.TLSListener._prepare_stream), which
# then warns that it was not closed; collected within this module (``gc.collect`` below).
pytestmark = pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")

ATTACK_TIMEOUT_S = 10.0
"""What an attacker's client waits for: the refusals come at once, this only bounds a test
that would otherwise hang."""


# -- the embedded cluster, held open for the module ------------------------------------------


def listening() -> set[tuple[int, str, int]]:
    """``(pid, ip, port)`` of every socket that waits for others, in this process and its
    children: TCP listeners and unconnected UDP sockets."""
    me = psutil.Process()
    found = set()
    for proc in [me, *me.children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and not c.raddr):
                found.add((proc.pid, c.laddr.ip, c.laddr.port))
    return found


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


@dataclass(frozen=True)
class Held:
    """The embedded cluster as a test sees it while it runs."""

    address: str
    directory: Path
    worker_addresses: list[str]
    nanny_addresses: list[str]
    http_ports: list[int]
    """The scheduler's HTTP server's and each worker's."""
    before: set[tuple[int, str, int]]
    """What listened before the cluster started."""


@pytest.fixture(scope="module")
def closed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Held]:
    """The embedded cluster of two workers, opened by :func:`open_cluster` as ``run`` and
    ``serve`` open it, in a thread of its own (its event loop serves the scheduler while
    the tests connect to it from this one)."""
    before = listening()
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    box: dict[str, Any] = {}

    async def hold() -> None:
        opts = ClusterOptions(workers=2, cache_root=tmp_path_factory.mktemp("closed"))
        async with open_cluster(opts) as (client, _):
            assert client.scheduler is not None
            info = await client.scheduler.identity()
            workers = info["workers"]
            address = client.scheduler.address
            assert address is not None
            box["held"] = Held(
                address,
                Path(client.security.tls_ca_file).parent,
                sorted(workers),
                sorted(w["nanny"] for w in workers.values()),
                [info["services"]["dashboard"]]
                + [w["services"]["dashboard"] for w in workers.values()],
                before,
            )
            ready.set()
            await stop.wait()

    def run() -> None:
        try:
            loop.run_until_complete(hold())
        except BaseException as exc:
            box["error"] = exc
        finally:
            ready.set()
            loop.close()

    thread = threading.Thread(target=run, name="closed-cluster")
    thread.start()
    ready.wait(180)
    try:
        if "held" not in box:
            pytest.fail(f"the embedded cluster did not start: {box.get('error')!r}")
        yield box["held"]
    finally:
        if not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        thread.join(120)
        gc.collect()  # the sockets of the refused connections, while warnings are ignored
    assert "error" not in box, box["error"]
    assert not box["held"].directory.exists()  # its credentials went with it


ATTACKER = """
import asyncio, json, os, ssl, sys
from distributed import Client
from distributed.comm import connect
from distributed.security import Security


class Presenting(Security):
    # TLS that trusts any server (so that it is the cluster that refuses, never this side),
    # presenting a certificate, or none.
    def __init__(self, files):
        super().__init__(require_encryption=True)
        self.files = files

    def get_connection_args(self, role):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        if self.files:
            context.load_cert_chain(self.files[1], self.files[2])
        return {"ssl_context": context, "require_encryption": True, "extra_conn_args": {}}


def security(how, files):
    if how == "plain":
        return None
    if how == "present":
        return Presenting(files)
    ca, cert, key = files
    return Security(
        require_encryption=True, tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key
    )


async def identity(address, sec, timeout):
    args = {} if sec is None else sec.get_connection_args("client")
    comm = await connect(address, timeout=timeout, **args)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def attempt(address, how, files, scheduler, timeout):
    sec = security(how, files)
    try:
        if scheduler:  # as a client, running code in the scheduler's process
            with Client(address, security=sec, timeout=timeout) as client:
                return f"let in: ran in {client.run_on_scheduler(os.getpid)}"
        info = asyncio.run(asyncio.wait_for(identity(address, sec, timeout), timeout))
        return f"let in: {info.get('type')} answered"
    except (OSError, TimeoutError) as exc:
        return f"refused: {type(exc).__name__}: {exc}"


timeout = float(sys.argv[2])
print(json.dumps([attempt(*a, timeout) for a in json.loads(sys.argv[1])]))
"""
"""An attacker in a process of its own, as one would come. Each attempt is (address, how:
plain TCP, ``present`` a certificate or none to a server it trusts blindly, or a ``client``
of Dask's own with CA, certificate and key; files, and whether the address is the
scheduler's: then as a client that runs ``os.getpid`` there, else asking for the server's
identity). It prints, for each, ``refused: ...`` or ``let in: ...``."""


def attack(held: Held, how: str, files: TlsFiles | None = None) -> list[str]:
    """Every server of the cluster (the scheduler, the workers, the nannies) attacked
    ``how``; what each attempt got."""
    paths = None if files is None else [str(files.ca), str(files.cert), str(files.key)]
    plain = how == "plain"
    attempts = [
        (a.replace("tls://", "tcp://") if plain else a, how, paths, a == held.address)
        for a in (held.address, *held.worker_addresses, *held.nanny_addresses)
    ]
    done = subprocess.run(
        [sys.executable, "-c", ATTACKER, json.dumps(attempts), str(ATTACK_TIMEOUT_S)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    gc.collect()
    results: list[str] = json.loads(done.stdout)
    return results


def assert_refused(results: list[str]) -> None:
    assert len(results) == 5
    assert all(r.startswith("refused: ") for r in results), results


def test_the_cluster_is_tls_with_its_own_private_credentials(closed: Held) -> None:
    assert closed.address.startswith("tls://")
    assert len(closed.worker_addresses) == 2
    assert all(a.startswith("tls://") for a in closed.worker_addresses)
    directory = closed.directory
    assert directory.name.startswith("datasched-tls-")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}
    assert modes == {
        "ca.pem": 0o644,
        "scheduler.pem": 0o644,
        "scheduler-key.pem": 0o600,
        "worker.pem": 0o644,
        "worker-key.pem": 0o600,
    }
    # The CA's key was never written: no further certificate can be signed.
    keys = sorted(p.name for p in directory.iterdir() if "PRIVATE KEY" in p.read_text())
    assert keys == ["scheduler-key.pem", "worker-key.pem"]


def test_nothing_it_starts_listens_beyond_loopback(closed: Held) -> None:
    new = listening() - closed.before
    ports = {port for _, _, port in new}
    # The scheduler, the workers and their HTTP servers are among what was found.
    wanted = {port_of(closed.address), *map(port_of, closed.worker_addresses)}
    assert wanted | set(closed.http_ports) <= ports, (wanted, closed.http_ports, new)
    assert len({pid for pid, _, _ in new}) == 3  # this process (scheduler, nannies), 2 workers
    outside = sorted(s for s in new if not ipaddress.ip_address(s[1]).is_loopback)
    assert outside == []


def test_the_http_servers_answer_health_only(closed: Held) -> None:
    for port in closed.http_ports:
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/health", timeout=10) as answer:
            assert answer.read() == b"ok"
        # Dask serves these by default: metrics, pages on the workers, the scheduler's state.
        for path in ("/metrics", "/info/main/workers.html", "/json/identity.json", "/status"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(base + path, timeout=10)
            assert refused.value.code == 404, path


def test_plain_tcp_is_not_answered(closed: Held) -> None:
    assert_refused(attack(closed, "plain"))


def test_tls_without_a_certificate_is_refused(closed: Held) -> None:
    assert_refused(attack(closed, "present"))


def test_a_certificate_of_another_ca_is_refused(closed: Held) -> None:
    # Made the same way: the same names, another CA. What the cluster checks is the
    # signature, not a name.
    with private_credentials() as other:
        for files in (other.scheduler, other.worker):
            assert_refused(attack(closed, "present", files))
        assert_refused(attack(closed, "client", other.scheduler))


def test_the_right_files_let_a_client_in(closed: Held) -> None:
    d = closed.directory
    files = TlsFiles(d / "ca.pem", d / "scheduler.pem", d / "scheduler-key.pem")
    results = attack(closed, "client", files)
    # Which is why the files must stay private: they run code in the daemon.
    assert results[0] == f"let in: ran in {os.getpid()}"
    assert all(r.startswith("let in: ") for r in results), results


# -- datasched's own runs -------------------------------------------------------------------


def test_a_run_on_the_embedded_cluster_and_its_credentials_removed(
    demo_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datasched.core.packets import PacketSizing
    from datasched.runtime.jobspec import load_jobs
    from datasched.runtime.reports import EngineConfig

    temp = tmp_path / "tmp"  # where the private directory is made (the system's is shared)
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    doc = {
        "catalog": str(demo_catalog),
        "defaults": {"processor": "datasched.runtime.demodata:DimuonMass", "dataset": "zmumu"},
        "jobs": [{"id": "j", "output": str(tmp_path / "j.pkl")}],
    }
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(doc))
    specs = load_jobs(tmp_path / "jobs.yaml")
    opts = ClusterOptions(workers=2, cache_bytes=50 * 10**6, cache_root=tmp_path / "caches")

    async def run_and_fail() -> list[str]:
        report = await run_jobs(
            specs,
            opts,
            policy="out-of-order",
            config=EngineConfig(queue_s=0.2, poll_s=0.1),
            packets=PacketSizing(target_s=0.2, min_events=500),
            calibrate=False,
        )
        assert [j.status for j in report.jobs] == ["completed"], report.jobs
        assert [float(x) for x in report.results["j"]["mass"].values()] == reference_counts(
            demo_catalog, 0, N_EVENTS
        )
        assert credentials() == []  # gone with the cluster
        # And when what runs on the cluster fails.
        seen = []

        async def fail_on_the_cluster() -> None:
            nonlocal seen
            async with open_cluster(opts):
                seen = credentials()
                raise RuntimeError("on purpose")

        with pytest.raises(RuntimeError, match="on purpose"):
            await fail_on_the_cluster()
        return seen

    def credentials() -> list[str]:
        return [p.name for p in temp.glob("datasched-tls-*") if p.is_dir()]

    assert len(asyncio.run(run_and_fail())) == 1
    assert list(temp.glob("datasched-tls-*")) == []  # the directory and its lock file


# -- an existing cluster over TLS ----------------------------------------------------------


@pytest.fixture(scope="module")
def user_cluster() -> Iterator[tuple[DaskProcesses, ClusterCredentials]]:
    """A user's closed cluster: ``dask scheduler`` and two ``dask worker`` processes on
    ``tls://``, with credentials of the user's own CA."""
    with ExitStack() as stack:
        creds = stack.enter_context(private_credentials())
        cluster = DaskProcesses({"n1": {}, "n2": {}}, tls=creds)
        stack.callback(cluster.close)
        yield cluster, creds


def tls_args(files: TlsFiles) -> list[str]:
    paths = (files.ca, files.cert, files.key)
    return [a for o, p in zip(TLS_OPTIONS, paths, strict=True) for a in (o, str(p))]


def test_run_joins_an_existing_tls_cluster_with_the_users_files(
    user_cluster: tuple[DaskProcesses, ClusterCredentials], demo_catalog: Path, tmp_path: Path
) -> None:
    cluster, creds = user_cluster
    doc = {
        "catalog": str(demo_catalog),
        "defaults": {"processor": "datasched.runtime.demodata:DimuonMass", "dataset": "zmumu"},
        "jobs": [{"id": "j", "events": [0, 6000], "output": str(tmp_path / "j.pkl")}],
    }
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(doc))
    base = ["run", str(tmp_path / "jobs.yaml"), "--cache-dir", str(tmp_path / "c"), "--json"]
    args = [*base, "--no-calibrate", "--scheduler", cluster.address]
    result = runner.invoke(app, [*args, *tls_args(creds.scheduler)])
    assert result.exit_code == 0, result.output
    (job,) = json.loads(result.stdout)["jobs"]
    assert job["status"] == "completed"
    assert job["events_processed"] == 6000
    # The same scheduler over tcp://: refused at once, one line naming the option.
    tcp = cluster.address.replace("tls://", "tcp://")
    result = runner.invoke(app, [*base, "--scheduler", tcp])
    assert result.exit_code == 2
    # (asked before anything starts, by the check every command with --scheduler makes)
    assert result.stderr.startswith(f"error: --scheduler: {tcp} ")
    assert "a scheduler that requires TLS takes its tls:// address" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    # Another CA's files: refused too.
    with private_credentials() as other:
        result = runner.invoke(app, [*args, *tls_args(other.scheduler)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --scheduler: ")
    assert cluster.address in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_sweep_runs_on_an_existing_tls_cluster(
    user_cluster: tuple[DaskProcesses, ClusterCredentials], tmp_path: Path
) -> None:
    cluster, creds = user_cluster
    args = ["sweep", "--policies", "farm", "--loads", "0.5", "--jobs", "30", "--nodes", "3"]
    local = runner.invoke(app, [*args, "-j", "1", "--out", str(tmp_path / "local")])
    assert local.exit_code == 0, local.output
    remote_args = [*args, "--out", str(tmp_path / "d"), "--scheduler", cluster.address]
    remote = runner.invoke(app, [*remote_args, *tls_args(creds.scheduler)])
    assert remote.exit_code == 0, remote.output

    def rows(path: Path) -> list[dict[str, str]]:
        with path.open(newline="") as fh:  # the wall-clock column differs from run to run
            return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(fh)]

    assert rows(tmp_path / "d" / "sweep.csv") == rows(tmp_path / "local" / "sweep.csv")
    # Without the files, or over tcp://: one line before anything runs.
    bare = runner.invoke(app, remote_args)
    assert bare.exit_code == 2
    assert bare.stderr.startswith(f"error: --scheduler: {cluster.address} is a tls:// address")
    tcp = cluster.address.replace("tls://", "tcp://")
    with pytest.raises(ClusterError, match=f"{tcp} closed the connection: .*requires TLS"):
        check_scheduler(tcp)
    with pytest.raises(ClusterError, match="is a tls:// address"):
        check_scheduler(cluster.address)
    assert check_scheduler(DaskScheduler(cluster.address, security(creds.scheduler))) == 2


# -- the options, checked before anything runs ---------------------------------------------


@pytest.fixture(scope="module")
def user_files(tmp_path_factory: pytest.TempPathFactory) -> ClusterCredentials:
    directory = tmp_path_factory.mktemp("user-tls")
    directory.chmod(0o700)
    return make_credentials(directory)


COMMANDS = {
    "run": ["run", "jobs.yaml"],
    "serve": ["serve", "--db", "never-opened.db"],
    "sweep": ["sweep", "--policies", "farm", "--loads", "0.5", "--out", "never-written"],
}


def cases(files: ClusterCredentials, tmp_path: Path) -> list[tuple[list[str], str]]:
    """(arguments after the command, the error line's start)."""
    s = files.scheduler
    ok = tls_args(s)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    encrypted = tmp_path / "encrypted-key.pem"
    key = serialization.load_pem_private_key(s.key.read_bytes(), password=None)
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    tls = ["--scheduler", "tls://127.0.0.1:1"]

    def with_file(option: str, path: Path) -> list[str]:
        i = ok.index(option)
        return [*tls, *ok[:i], option, str(path), *ok[i + 2 :]]

    return [
        (tls, "--scheduler: tls://127.0.0.1:1 is a tls:// address: give its credentials"),
        (["--scheduler", "tcp://127.0.0.1:1", *ok], "--tls-ca-file: --scheduler tcp://"),
        (ok[2:], "--tls-cert: only with --scheduler tls://HOST:PORT"),
        ([*tls, *ok[:4]], "--tls-key: missing (a tls:// scheduler needs"),
        (with_file("--tls-cert", tmp_path / "absent.pem"), "--tls-cert: cannot read "),
        (with_file("--tls-ca-file", tmp_path), "--tls-ca-file: cannot read "),
        (with_file("--tls-ca-file", garbage), "--tls-ca-file: "),
        (with_file("--tls-cert", garbage), "--tls-cert: "),
        (with_file("--tls-key", files.worker.key), "--tls-key: "),  # another certificate's
        (with_file("--tls-key", encrypted), "--tls-key: "),
        (with_file("--tls-key", s.cert), "--tls-key: "),
    ]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_misuse_of_the_tls_options_is_one_line_naming_it(
    command: str, user_files: ClusterCredentials, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for args, start in cases(user_files, tmp_path):
        result = runner.invoke(app, [*COMMANDS[command], *args])
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith(f"error: {start}"), (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    # Nothing else was written.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["encrypted-key.pem", "garbage.pem"]


def test_what_the_file_errors_say(user_files: ClusterCredentials, tmp_path: Path) -> None:
    s = user_files.scheduler
    address = "tls://h:1"

    def error(ca: Path, cert: Path, key: Path) -> str:
        with pytest.raises(TlsError) as raised:
            check_tls_options(address, ca, cert, key)
        return str(raised.value)

    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    assert error(s.ca, s.cert, tmp_path / "none.pem") == (
        f"--tls-key: cannot read {tmp_path / 'none.pem'}: No such file or directory"
    )
    assert error(garbage, s.cert, s.key).startswith(f"--tls-ca-file: {garbage} holds no PEM")
    assert error(s.ca, garbage, s.key) == f"--tls-cert: {garbage} holds no PEM certificate"
    assert error(s.ca, s.cert, s.cert) == f"--tls-key: {s.cert} holds no PEM private key"
    assert error(s.ca, s.cert, user_files.worker.key).startswith(
        f"--tls-key: {user_files.worker.key} does not go with the certificate {s.cert}"
    )
    assert check_tls_options(address, s.ca, s.cert, s.key) == s
    assert check_tls_options("tcp://h:1", None, None, None) is None
    assert check_tls_options(None, None, None, None) is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_key_is_named(user_files: ClusterCredentials, tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    key.write_bytes(user_files.scheduler.key.read_bytes())
    key.chmod(0)
    s = user_files.scheduler
    with pytest.raises(TlsError, match=f"--tls-key: cannot read {key}: Permission denied"):
        check_tls_options("tls://h:1", s.ca, s.cert, key)


def test_the_service_runner_takes_the_files(user_files: ClusterCredentials) -> None:
    from datasched.service.threaded import make_runner

    s = user_files.scheduler
    made = make_runner(scheduler="tls://h:1", tls_ca_file=s.ca, tls_cert=s.cert, tls_key=s.key)
    assert made.options["cluster"].tls == s
    assert made.options["cluster"].scheduler_address == "tls://h:1"
    with pytest.raises(TlsError, match="--scheduler: tls://h:1 is a tls:// address"):
        make_runner(scheduler="tls://h:1")
    with pytest.raises(TlsError, match="--tls-ca-file: only with --scheduler"):
        make_runner(workers=2, tls_ca_file=s.ca, tls_cert=s.cert, tls_key=s.key)


def test_cluster_options_keep_tls_and_address_together(user_files: ClusterCredentials) -> None:
    s = user_files.scheduler
    assert ClusterOptions(scheduler_address="tls://h:1", tls=s).tls == s
    for kw, message in (
        ({"scheduler_address": "tls://h:1"}, "tls: the scheduler address tls://h:1 needs"),
        ({"scheduler_address": "tcp://h:1", "tls": s}, "tls: not with tcp://h:1"),
        ({"tls": s}, "tls: only with a tls:// scheduler address"),
    ):
        with pytest.raises(ValueError, match=message):
            ClusterOptions(**kw)


def test_credentials_need_a_private_directory_and_expire(tmp_path: Path) -> None:
    from cryptography import x509

    tmp_path.chmod(0o755)
    with pytest.raises(TlsError, match="not private"):
        make_credentials(tmp_path)
    tmp_path.chmod(0o700)
    made = make_credentials(tmp_path)
    cert = x509.load_pem_x509_certificate(made.worker.cert.read_bytes())
    days = (cert.not_valid_after_utc - cert.not_valid_before_utc).days
    assert days == 365  # and made anew each time a cluster starts
    with pytest.raises(FileExistsError):  # never written over
        make_credentials(tmp_path)
