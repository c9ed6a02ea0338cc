"""Test hosts in network namespaces: a storage host serving tertiary storage over XRootD, a
Dask scheduler host and worker hosts, each in a network namespace of its own, joined by a
Linux bridge, with the client in the root namespace (docs/deployment.md, "Trying it on one
machine"). The multi-host tests (``tests/hosts``) build it through a fixture; ``make hosts``
builds the same for people to try by hand (``python tests/hosts_support.py up|down``).

Every address is private (``10.77.N.0/24``, no default route in any namespace): nothing leaves
the machine. Names carry a tag (the building process's id, or ``man`` for the one built by
hand), so a run that crashed leaves nothing that breaks the next: :func:`remove_stale` removes
what a dead process left. Needs root, iproute2 (``ip``, ``tc``) and Debian's xrootd-server.

The hosts share no path: each worker's cache directory is its own (given to it as
``DATASCHED_CACHE_DIR``, as a deployment gives node-local scratch), optionally a small tmpfs.
Links are limited with ``tc``'s token bucket (tbf); netem (delay, loss) is not needed: a cut
link is the switch port taken down, which drops every frame as a pulled cable does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = "dsh"
"""Namespaces are ``dsh<tag>-<host>``, the bridge ``dsb<tag>``, host-side veths
``dsv<tag><index>``: short enough for Linux's 15-character interface names."""
MANUAL_TAG = "man"
STATE_ROOT = Path("/run/datasched-hosts")
SCHEDULER_PORT = 8786
XROOTD_PORT = 1094

HOSTS_DASK_CONFIG: dict[str, str] = {
    # A worker silent for 10 s is removed by the scheduler (Dask's default is 300 s); the
    # scheduler then hands its work elsewhere. The floor is ten heartbeats (5 s here).
    "distributed.scheduler.worker-ttl": "10s",
    # A connection silent or with data unacknowledged for 12 s is broken (keepalive probes
    # and TCP_USER_TIMEOUT; Dask's default 30 s, its floor 11 s): a cut host's connections
    # fail in seconds, not at the kernel's 15 minutes.
    "distributed.comm.timeouts.tcp": "12s",
    "distributed.comm.timeouts.connect": "5s",
    # No dashboard to show the profiler (docs/runtime.md): a fifth of a worker's CPU saved.
    "distributed.worker.profile.enabled": "False",
}
"""The Dask settings of the hosts tests and of ``make hosts`` (docs/deployment.md, "Timeouts":
what a deployment should set, and why)."""


def dask_env(config: dict[str, str]) -> dict[str, str]:
    """``config`` as Dask's environment variables (``DASK_DISTRIBUTED__COMM__...``)."""
    return {
        "DASK_" + "__".join(k.upper().replace("-", "_") for k in key.split(".")): value
        for key, value in config.items()
    }


def missing_tools() -> str | None:
    """Why the topology cannot be built here (not root, a tool missing), or None."""
    if os.geteuid() != 0:
        return "the hosts tests need root (network namespaces, veth pairs, a bridge, tc)"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("xrootd", "xrootd-server")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {package})"
    return None


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run an iproute2 command; a failure raises with its error output."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done


@dataclass
class Host:
    """One host: its namespace, address, the host-side end of its link (a bridge port)."""

    name: str
    ns: str
    ip: str
    veth: str
    procs: list[int] = field(default_factory=list)
    """Process-group leaders started in it (killed by group at teardown)."""


STORAGE_STARTS = 3
"""How many times :meth:`Topology.start_storage` starts an XRootD that dies as it starts."""


@dataclass
class Topology:
    """The hosts, their processes and the work directory; :meth:`down` removes all of it.

    ``storage_mbit``: each storage host's upload rate (None: unlimited); ``worker_mbit``: each
    worker's link, both ways. ``tmpfs_mb``: worker name -> size of a tmpfs mounted as its
    cache directory (a small cache disk that fills)."""

    tag: str
    subnet: int
    work: Path
    n_workers: int = 4
    n_storage: int = 1
    storage_mbit: float | None = 40.0
    worker_mbit: float | None = None
    tmpfs_mb: dict[str, int] = field(default_factory=dict)
    nthreads: int = 2
    hosts: dict[str, Host] = field(default_factory=dict)
    mounts: list[str] = field(default_factory=list)
    storage_procs: dict[str, subprocess.Popen[bytes] | int] = field(default_factory=dict)
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    """This process's own children (reaped at teardown)."""

    # -- names and addresses ------------------------------------------------------------------

    @property
    def bridge(self) -> str:
        return f"dsb{self.tag}"

    @property
    def gateway(self) -> str:
        """The client's address (the root namespace, on the bridge)."""
        return f"10.77.{self.subnet}.1"

    @property
    def scheduler_address(self) -> str:
        return f"tcp://{self.hosts['scheduler'].ip}:{SCHEDULER_PORT}"

    @property
    def workers(self) -> list[str]:
        return [f"w{i + 1}" for i in range(self.n_workers)]

    @property
    def storage(self) -> list[str]:
        return ["storage"] if self.n_storage == 1 else [f"s{i + 1}" for i in range(self.n_storage)]

    def storage_url(self, name: str = "storage") -> str:
        """The ``root://`` base URL of a storage host's export (``/data``)."""
        return f"root://{self.hosts[name].ip}:{XROOTD_PORT}//data"

    def export_dir(self, name: str = "storage") -> Path:
        """Where a storage host's files lie (what its XRootD serves as ``/data``)."""
        return self.work / name / "export" / "data"

    def cache_dir(self, worker: str) -> Path:
        """The worker's cache root (its ``DATASCHED_CACHE_DIR``): a path of its own."""
        return self.work / worker / "cache"

    def env(self) -> dict[str, str]:
        src = str(Path(__file__).resolve().parent.parent / "src")
        return {
            **os.environ,
            "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""),
            **dask_env(HOSTS_DASK_CONFIG),
        }

    # -- building -----------------------------------------------------------------------------

    def up(self) -> None:
        """Build the network and start XRootD, the scheduler and the workers; on any failure
        everything built so far is removed."""
        try:
            self._network()
            for name in self.storage:
                self.start_storage(name)
            self._start_scheduler()
            for name in self.workers:
                self._start_worker(name)
            self.wait_ready()
            self.save()
        except BaseException:
            self.down()
            raise

    def claim(self) -> None:
        """The bridge with the client's address: the subnet taken (:func:`build`)."""
        try:
            self.work.mkdir(parents=True, exist_ok=True)
            self.work.chmod(0o755)
            sh("ip", "link", "add", self.bridge, "type", "bridge")
            sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            sh("ip", "link", "set", self.bridge, "up")
        except BaseException:
            self.down()
            raise

    def _network(self) -> None:
        if sh("ip", "link", "show", self.bridge, check=False).returncode != 0:
            self.claim()
        names = ["scheduler", *self.storage, *self.workers]
        for index, name in enumerate(names):
            last = 2 if name == "scheduler" else (10 + index if name in self.storage else 0)
            if name in self.workers:
                last = 100 + self.workers.index(name) + 1
            host = Host(
                name,
                f"{PREFIX}{self.tag}-{name}",
                f"10.77.{self.subnet}.{last}",
                f"dsv{self.tag}{index}",
            )
            self.hosts[name] = host
            sh("ip", "netns", "add", host.ns)
            sh(
                "ip",
                "link",
                "add",
                host.veth,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                host.ns,
            )
            sh("ip", "link", "set", host.veth, "master", self.bridge, "up")
            sh("ip", "-n", host.ns, "addr", "add", f"{host.ip}/24", "dev", "eth0")
            sh("ip", "-n", host.ns, "link", "set", "eth0", "up")
            sh("ip", "-n", host.ns, "link", "set", "lo", "up")
        for name in self.storage:
            self.limit(name, out_mbit=self.storage_mbit)
        for name in self.workers:
            self.limit(name, out_mbit=self.worker_mbit, in_mbit=self.worker_mbit)
            cache = self.cache_dir(name)
            cache.mkdir(parents=True)
            if name in self.tmpfs_mb:
                sh(
                    "mount",
                    "-t",
                    "tmpfs",
                    "-o",
                    f"size={self.tmpfs_mb[name]}m",
                    "tmpfs",
                    str(cache),
                )
                self.mounts.append(str(cache))

    def spawn(
        self, host: str, argv: Sequence[str], log: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in ``host``'s namespace, in a process group of its own (so the group
        is what is stopped), its output appended to ``work/<host>/<log>``."""
        h = self.hosts[host]
        (self.work / host).mkdir(parents=True, exist_ok=True)
        with (self.work / host / log).open("ab") as out:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", h.ns, *argv],
                env=env or self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        h.procs.append(proc.pid)
        self.children.append(proc)
        return proc

    def start_storage(self, name: str = "storage") -> None:
        """XRootD on the storage host (again, after :meth:`stop_storage`: a restart). It runs
        as ``nobody`` (it refuses root), from a directory it can read."""
        base = self.work / name
        export = base / "export"
        admin = base / "admin"
        if not admin.exists():
            (export / "data").mkdir(parents=True, exist_ok=True)
            admin.mkdir(parents=True)
            for p in (base, export, export / "data"):
                p.chmod(0o755)
            admin.chmod(0o777)
            (base / "xrootd.cfg").write_text(
                f"xrd.port {XROOTD_PORT}\nall.export /data\noss.localroot {export}\n"
                f"all.adminpath {admin}\nall.pidpath {admin}\n"
            )
        exe = shutil.which("xrootd") or "xrootd"
        argv = [
            exe,
            "-R",
            "nobody",
            "-c",
            str(base / "xrootd.cfg"),
            "-l",
            str(admin / "xrootd.log"),
        ]
        # Debian's xrootd now and then dies of SIGSEGV as it starts again after a SIGKILL
        # (once in a full hosts run, 55 tests; its start alone passed seven in seven): the
        # server's own crash, not the fault under test, so a start that dies is tried again.
        for attempt in range(1, STORAGE_STARTS + 1):
            proc = self.spawn(name, argv, "xrootd.out")
            self.storage_procs[name] = proc
            try:
                self.wait_port(self.hosts[name].ip, XROOTD_PORT, 20, proc)
                return
            except RuntimeError:
                if proc.poll() is None or attempt == STORAGE_STARTS:
                    raise  # still running (nothing listens) is no crash: left to teardown
                self.hosts[name].procs.remove(proc.pid)
                del self.storage_procs[name]

    def stop_storage(self, name: str = "storage") -> None:
        """Kill the storage host's XRootD (SIGKILL: a crash, its clients see their connections
        reset)."""
        proc = self.storage_procs.pop(name)
        pid = proc if isinstance(proc, int) else proc.pid
        _kill_group(pid, signal.SIGKILL)
        if not isinstance(proc, int):
            proc.wait(10)
        self.hosts[name].procs.remove(pid)

    def _start_scheduler(self) -> None:
        ip = self.hosts["scheduler"].ip
        proc = self.spawn(
            "scheduler",
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                ip,
                "--port",
                str(SCHEDULER_PORT),
                "--no-dashboard",
            ],
            "scheduler.log",
        )
        self.wait_port(ip, SCHEDULER_PORT, 60, proc)

    def _start_worker(self, name: str) -> None:
        """A ``dask worker`` named after its host, restarted a second after it exits, as
        systemd's ``Restart=always`` does (docs/deployment.md): a worker that lost the
        scheduler (a cut link) closes itself, and comes back when the network does."""
        h = self.hosts[name]
        argv = [
            sys.executable,
            "-m",
            "distributed.cli.dask_worker",
            self.scheduler_address,
            "--name",
            name,
            "--host",
            h.ip,
            "--nthreads",
            str(self.nthreads),
            "--no-dashboard",
            "--memory-limit",
            "2GiB",
        ]
        env = {**self.env(), "DATASCHED_CACHE_DIR": str(self.cache_dir(name))}
        loop = 'while :; do "$@"; sleep 1; done'
        self.spawn(name, ["sh", "-c", loop, "supervise", *argv], "worker.log", env)

    def wait_port(self, ip: str, port: int, timeout_s: float, proc: Any = None) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection((ip, port), timeout=0.5):
                    return
            except OSError:
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{ip}:{port}: the server exited ({self.work})") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{ip}:{port}: nothing listens after {timeout_s:g} s"
                    ) from None
                time.sleep(0.1)

    def wait_ready(self, timeout_s: float = 120.0, names: Sequence[str] | None = None) -> None:
        """Until every worker (or ``names``) is connected to the scheduler."""
        want = set(names or self.workers)
        deadline = time.monotonic() + timeout_s
        while (missing := want - set(self.connected())) and time.monotonic() < deadline:
            time.sleep(0.5)
        if missing:
            raise RuntimeError(f"workers {sorted(missing)} did not join in {timeout_s:g} s")

    def connected(self) -> list[str]:
        """The names of the workers the scheduler knows now."""
        from distributed import Client

        with Client(self.scheduler_address, timeout=10) as client:  # type: ignore[no-untyped-call]
            info = client.scheduler_info(n_workers=-1)
        return sorted(str(w["name"]) for w in info["workers"].values())

    # -- faults -------------------------------------------------------------------------------

    def cut(self, host: str) -> None:
        """The host's link cut: its switch port taken down, every frame to or from it lost."""
        sh("ip", "link", "set", self.hosts[host].veth, "down")

    def heal(self, host: str) -> None:
        sh("ip", "link", "set", self.hosts[host].veth, "up")

    def resize_cache(self, worker: str, size: str) -> None:
        """The worker's tmpfs cache disk (one of ``tmpfs_mb``) remounted at ``size`` (``mount
        -o size=``: ``32k``, ``64m``), its files kept: shrunk below what a file needs, it is a
        full cache disk, at once and without restarting the worker (the worker's namespace
        sees the same mount). Shrinking below what it holds fails (empty the cache first)."""
        if worker not in self.tmpfs_mb:
            raise ValueError(f"worker {worker}: its cache is no tmpfs (tmpfs_mb)")
        sh("mount", "-o", f"remount,size={size}", str(self.cache_dir(worker)))

    def limit(
        self, host: str, *, out_mbit: float | None = None, in_mbit: float | None = None
    ) -> None:
        """The host's link rate, each way (None: unlimited), as token buckets: its uploads
        on its own end of the link, its downloads on the bridge's end."""
        h = self.hosts[host]
        for ns, dev, mbit in ((h.ns, "eth0", out_mbit), (None, h.veth, in_mbit)):
            where = ["ip", "netns", "exec", ns] if ns else []
            sh(*where, "tc", "qdisc", "del", "dev", dev, "root", check=False)
            if mbit is not None:
                rate = int(mbit * 1e6 / 8)  # bytes a second
                burst = max(rate // 50, 16_000)
                sh(
                    *where,
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    dev,
                    "root",
                    "tbf",
                    "rate",
                    f"{rate}bps",
                    "burst",
                    str(burst),
                    "latency",
                    "500ms",
                )

    # -- state and teardown -------------------------------------------------------------------

    def save(self) -> None:
        """What :func:`down_by_tag` needs to remove it from another process."""
        STATE_ROOT.mkdir(parents=True, exist_ok=True)
        state = {
            "tag": self.tag,
            "work": str(self.work),
            "mounts": self.mounts,
            "namespaces": [h.ns for h in self.hosts.values()],
            "bridge": self.bridge,
            "groups": [p for h in self.hosts.values() for p in h.procs],
        }
        (STATE_ROOT / f"{self.tag}.json").write_text(json.dumps(state))

    def down(self) -> None:
        """Stop every process started here, remove the namespaces, the bridge, the mounts and
        the work directory. Safe to call twice, and after a partial build."""
        groups = [p for h in self.hosts.values() for p in h.procs]
        self.keep_logs()
        _teardown(
            groups,
            [h.ns for h in self.hosts.values()],
            self.bridge,
            self.mounts,
            self.work,
            self.tag,
        )
        for proc in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        self.children.clear()
        self.hosts.clear()
        self.mounts.clear()

    def keep_logs(self) -> None:
        """The hosts' logs (each host's ``*.log``, ``*.out``, XRootD's) copied to the directory
        ``DATASCHED_HOSTS_LOGS`` names, if any, before the work directory is removed: what a
        failed run leaves to read."""
        dest = os.environ.get("DATASCHED_HOSTS_LOGS")
        if not dest or not self.work.exists():
            return
        for log in self.work.glob("*/**/*"):
            if log.is_file() and log.suffix in (".log", ".out"):
                target = Path(dest) / self.tag / log.relative_to(self.work)
                target.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):
                    shutil.copy(log, target)


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _teardown(
    groups: list[int], namespaces: list[str], bridge: str, mounts: list[str], work: Path, tag: str
) -> None:
    for pgid in groups:
        _kill_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for ns in namespaces:
        # What still runs in the namespace (a worker's nanny child that left the group).
        while True:
            pids = [int(p) for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()]
            if not pids:
                break
            for pid in pids:
                with_sig = signal.SIGTERM if time.monotonic() < deadline else signal.SIGKILL
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, with_sig)
            time.sleep(0.2)
        sh("ip", "netns", "del", ns, check=False)
    for pgid in groups:
        _kill_group(pgid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):  # reap our own children
            os.waitpid(pgid, os.WNOHANG)
    sh("ip", "link", "del", bridge, check=False)
    for mount in mounts:
        sh("umount", "-l", mount, check=False)
    shutil.rmtree(work, ignore_errors=True)
    (STATE_ROOT / f"{tag}.json").unlink(missing_ok=True)


def down_by_tag(tag: str) -> bool:
    """Remove the topology tagged ``tag`` (built by another process); whether any was found."""
    state_file = STATE_ROOT / f"{tag}.json"
    namespaces = [
        ns for ns in sh("ip", "netns", "list").stdout.split() if ns.startswith(f"{PREFIX}{tag}-")
    ]
    state: dict[str, Any] = {}
    if state_file.exists():
        state = json.loads(state_file.read_text())
    if not namespaces and not state:
        return False
    _teardown(
        list(state.get("groups", [])),
        sorted(set(namespaces) | set(state.get("namespaces", []))),
        f"dsb{tag}",
        list(state.get("mounts", [])),
        Path(state.get("work", f"/tmp/datasched-hosts-{tag}")),
        tag,
    )
    return True


def remove_stale() -> list[str]:
    """Remove the topologies whose building process is gone (a crashed run); their tags."""
    tags = set()
    for ns in sh("ip", "netns", "list").stdout.split():
        m = re.fullmatch(rf"{PREFIX}(\d+)-\S+", ns)
        if m:
            tags.add(m.group(1))
    stale = []
    for tag in sorted(tags):
        if not Path(f"/proc/{tag}").exists():
            down_by_tag(tag)
            stale.append(tag)
    return stale


def free_subnet(first: int) -> int:
    """A third octet ``N`` of ``10.77.N.0/24`` that no address of this machine uses."""
    used = sh("ip", "-4", "addr").stdout
    for k in range(254):
        n = (first + k) % 254 + 1
        if f"10.77.{n}." not in used:
            return n
    raise RuntimeError("no free 10.77.N.0/24 subnet")


@contextlib.contextmanager
def _building() -> Any:
    """Held while a topology's network is made: processes building at once (pytest-xdist's,
    ``make hosts`` beside a test run) never pick the same free subnet."""
    import fcntl

    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    with (STATE_ROOT / "build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build(tag: str | None = None, **kw: Any) -> Topology:
    """Build a topology (stale ones removed first); ``kw``: :class:`Topology`'s fields.
    Several processes may build at once, each its own (tagged with its process id)."""
    tag = tag or str(os.getpid())
    with _building():
        remove_stale()
        subnet = free_subnet(0 if tag == MANUAL_TAG else int(tag) % 200 + 10)
        topo = Topology(tag=tag, subnet=subnet, work=Path(f"/tmp/datasched-hosts-{tag}"), **kw)
        shutil.rmtree(topo.work, ignore_errors=True)
        # The bridge (with the subnet's address) claims the subnet; the rest may go on
        # beside another build.
        topo.claim()
    topo.up()
    return topo


# -- by hand: make hosts / make hosts-down ------------------------------------------------------

USAGE = """\
The test hosts are up (tag {tag}); every address is private, nothing leaves this machine.

  client (this shell)   {gateway}
  scheduler             {scheduler}            namespace {sched_ns}
  storage (XRootD)      {storage}  ({storage_mbit} Mbit/s)
  workers               {workers}
  each worker's cache   {work}/<worker>/cache (DATASCHED_CACHE_DIR, shared with no one)

Run the demo's jobs across them (the dataset lies on the storage host):

  .venv/bin/datasched run {work}/jobs.yaml --scheduler {scheduler} --policy out-of-order \\
      -P replication=true --report {work}/report

Faults by hand (the worker hosts are {worker_list}):

  ip link set {veth_w1} down      # cut w1's link (up again to heal it)
  tc qdisc add dev {veth_w1} root tbf rate 1mbit burst 16000 latency 500ms   # slow it
  ip netns exec {ns_w1} bash      # a shell on w1; logs under {work}/<host>/

Tear it down: make hosts-down   (or: python tests/hosts_support.py down)
"""


def _write_demo(topo: Topology) -> None:
    """The demo's dataset on the storage host and its jobs file (scaled down) in ``work``."""
    import yaml

    from datasched.compare.demo import demo_workload
    from datasched.runtime.demodata import write_demo_dataset

    catalog = write_demo_dataset(topo.export_dir(), n_events=48_000, n_files=24, seed=1)
    for f in topo.export_dir().iterdir():
        f.chmod(0o644)
    doc = yaml.safe_load(catalog.read_text())
    for f in doc["datasets"]["zmumu"]["files"]:
        f["url"] = f"{topo.storage_url()}/{f['url']}"
    (topo.work / "catalog.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    jobs = demo_workload(topo.work / "catalog.yaml", topo.work, n_jobs=8)
    spec = yaml.safe_load(jobs.read_text())
    for job in spec["jobs"]:
        job["output"] = str(topo.work / job["output"])
    jobs.write_text(yaml.safe_dump(spec, sort_keys=False))


def main(argv: Sequence[str]) -> int:
    """``up`` (the topology by hand, left running) or ``down``."""
    what = argv[0] if argv else "up"
    if what == "down":
        found = down_by_tag(MANUAL_TAG)
        sys.stdout.write("removed the test hosts\n" if found else "no test hosts were up\n")
        return 0
    if what != "up":
        sys.stderr.write("usage: hosts_support.py up|down\n")
        return 2
    problem = missing_tools()
    if problem is not None:
        sys.stderr.write(f"error: {problem}\n")
        return 2
    down_by_tag(MANUAL_TAG)
    topo = build(MANUAL_TAG)
    try:
        _write_demo(topo)
    except BaseException:
        topo.down()
        raise
    sys.stdout.write(
        USAGE.format(
            tag=topo.tag,
            gateway=topo.gateway,
            scheduler=topo.scheduler_address,
            sched_ns=topo.hosts["scheduler"].ns,
            storage=topo.storage_url(),
            storage_mbit=topo.storage_mbit,
            workers=", ".join(f"{w} {topo.hosts[w].ip}" for w in topo.workers),
            worker_list=" ".join(topo.workers),
            work=topo.work,
            veth_w1=topo.hosts["w1"].veth,
            ns_w1=topo.hosts["w1"].ns,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
