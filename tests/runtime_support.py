"""Shared by the runtime tests (importable: ``tests`` is on the path)."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

N_EVENTS = 12_000
N_FILES = 6


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
    them all."""

    def __init__(self, workers: dict[str, dict[str, str]], *, nthreads: int = 2) -> None:
        import os
        import subprocess
        import sys
        import time

        from distributed import Client

        src = str(Path(__file__).resolve().parent.parent / "src")
        base = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
        port = free_port()
        self.address = f"tcp://127.0.0.1:{port}"
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
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
                    "--no-dashboard",
                ],
                env=base,
                **quiet,
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
                        ],
                        env={**base, **env},
                        **quiet,
                    )
                )
            deadline = time.monotonic() + 60
            while True:
                try:
                    with Client(self.address, timeout=5) as client:
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
