"""Shared by the runtime tests (importable: ``tests`` is on the path)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

N_EVENTS = 12_000
N_FILES = 6
TLS_OPTIONS = ("--tls-ca-file", "--tls-cert", "--tls-key")
"""What ``dask scheduler`` and ``dask worker`` (and datasched) call the CA, certificate and
key files."""


def reference_counts(catalog: Path, start: int, stop: int) -> list[float]:
    """The dimuon-mass histogram of events [start, stop), computed in this process."""
    from datasched.runtime.dataset import load_catalog, read_events
    from datasched.runtime.demodata import DimuonMass

    ds = load_catalog(catalog)["zmumu"]
    proc = DimuonMass()
    total = None
    for i, a, b in ds.locate(start, stop):
        f = ds.files[i]
        h = proc.process(read_events(f.url, f.tree, a, b))["mass"]
        total = h if total is None else total + h
    assert total is not None
    return [float(x) for x in total.values()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DaskProcesses:
    """A real ``dask scheduler`` and ``dask worker`` processes on loopback (what a user starts
    on a cluster), each worker with its own environment (``DATASCHED_CACHE_DIR``: a cache
    directory of its own, shared with no one). The address is ``.address``; ``close()`` stops
    them all.

    With ``tls`` (a :class:`~datasched.runtime.tls.ClusterCredentials`), a closed cluster as
    a user starts one: ``tls://``, the scheduler presenting the scheduler's certificate and
    the workers the workers'; ``.security`` is a client's (the scheduler's files)."""

    def __init__(
        self, workers: dict[str, dict[str, str]], *, nthreads: int = 2, tls: Any = None
    ) -> None:
        import os
        import subprocess
        import sys
        import time

        from distributed import Client

        from datasched.runtime.tls import security

        src = str(Path(__file__).resolve().parent.parent / "src")
        base = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
        port = free_port()
        scheme = "tcp" if tls is None else "tls"
        self.address = f"{scheme}://127.0.0.1:{port}"
        self.security = None if tls is None else security(tls.scheduler)

        def tls_args(files: Any) -> list[str]:
            if files is None:
                return []
            paths = (files.ca, files.cert, files.key)
            return [a for o, p in zip(TLS_OPTIONS, paths, strict=True) for a in (o, str(p))]

        self.procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dask",
                    "scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--protocol",
                    scheme,
                    "--no-dashboard",
                    *tls_args(None if tls is None else tls.scheduler),
                ],
                env=base,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        ]
        try:
            for name, env in workers.items():
                self.procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "dask",
                            "worker",
                            self.address,
                            "--name",
                            name,
                            "--nthreads",
                            str(nthreads),
                            "--host",
                            "127.0.0.1",
                            "--no-dashboard",
                            "--memory-limit",
                            "2GiB",
                            *tls_args(None if tls is None else tls.worker),
                        ],
                        env={**base, **env},
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            deadline = time.monotonic() + 60
            while True:
                try:
                    with Client(  # type: ignore[no-untyped-call]  # distributed is not annotated
                        self.address, timeout=5, security=self.security
                    ) as client:
                        client.wait_for_workers(
                            len(workers), timeout=max(deadline - time.monotonic(), 1)
                        )
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(15)
            except Exception:
                proc.kill()
                proc.wait(15)


class KillOnFirstPacket:
    """A progress listener that kills the process ``victim`` (a worker) with SIGKILL when the
    first packet's events are counted, once; ``killed`` lists the pids it killed."""

    def __init__(self, victim: int) -> None:
        self.victim = victim
        self.killed: list[int] = []

    def job_started(self, job_id: str, n_events: int) -> None:
        pass

    def advance(self, job_id: str, n_events: int, from_cache: bool) -> None:
        if not self.killed:
            self.killed.append(self.victim)
            os.kill(self.victim, signal.SIGKILL)

    def job_done(self, job_id: str, status: str) -> None:
        pass


def fake_worker(root: Path, name: str = "n1") -> Any:
    """A stand-in for a Dask worker with datasched's cache plugin set up (no cluster)."""
    from datasched.runtime.worker import PLUGIN_NAME, CachePlugin

    worker = SimpleNamespace(name=name, plugins={}, handlers={})
    plugin = CachePlugin(str(root), 10**9)
    plugin.setup(worker)
    worker.plugins[PLUGIN_NAME] = plugin
    return worker


REQUIRE_ROOT_ENV = "DATASCHED_REQUIRE_ROOT"
"""Set to 1 (CI, a root machine), tests that mount file systems fail instead of skipping."""


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``mount -o size=``, e.g. ``32k``) mounted at ``path`` for the
    block: a cache disk that fills up. Skips where nothing can be mounted (not root, no
    ``CAP_SYS_ADMIN``), unless ``DATASCHED_REQUIRE_ROOT=1``, which makes that a failure."""
    import pytest

    def unable(reason: str) -> None:
        if os.environ.get(REQUIRE_ROOT_ENV) == "1":
            pytest.fail(f"mounting a tmpfs is required ({REQUIRE_ROOT_ENV}=1): {reason}")
        pytest.skip(f"cannot mount a tmpfs: {reason}")

    if os.geteuid() != 0:
        unable("not root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        unable(done.stderr.strip() or f"mount exited with {done.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)
