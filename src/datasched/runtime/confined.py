"""The service's own local workers, confined: each a Dask nanny and worker started as the
jobs' account (never the daemon's), in a view of its own, with a clean environment.

A confined worker sees the system, the Python environment, its node cache (writable), the
roots (where it reads local tertiary files and writes commands' outputs, as the jobs'
account), its TLS credentials (read-only) and a ``/tmp`` of its own: not the store, not the
daemon's files, not its environment (no store credentials). The users' code it runs is
confined further, each job in a sandbox of its own (:mod:`datasched.sandbox`).

Started by :func:`confined_workers` as a :class:`distributed.SpecCluster`'s workers: the
scheduler stays in the daemon's process, the workers are processes of their own that the
cluster starts and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask.config
import psutil
from distributed import Scheduler, SpecCluster
from distributed.deploy.spec import ProcessInterface

from datasched.runtime.tls import ClusterCredentials
from datasched.sandbox.confine import Confinement, account, python_dirs, view_args
from datasched.sandbox.host import process_tree
from datasched.sandbox.scratch import WORKER_PREFIX, make_scratch, remove_scratch

if TYPE_CHECKING:
    from distributed.security import Security

__all__ = ["ConfinedCluster", "ConfinedWorker", "confined_cluster", "worker_specs"]


class ConfinedWorker(ProcessInterface):
    """A nanny and its worker (``name``) in a process of their own, started as
    ``confine.run_as`` in a view holding ``rw`` (writable: the cache root, the roots) and
    ``ro`` (the TLS credentials), with ``env`` (Dask's settings) and nothing else."""

    def __init__(
        self,
        scheduler: str,
        name: str,
        *,
        confine: Confinement,
        nthreads: int,
        memory_limit: str,
        rw: Sequence[str] = (),
        ro: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_dir: str | None = None,
    ) -> None:
        super().__init__(scheduler=scheduler, name=name)  # type: ignore[no-untyped-call]
        self.scheduler = scheduler
        self.name = name
        self.confine = confine
        self.nthreads = nthreads
        self.memory_limit = memory_limit
        self.rw = list(rw)
        self.ro = list(ro)
        self.env = dict(env or {})
        self.log_dir = log_dir
        self.process: asyncio.subprocess.Process | None = None
        self.scratch: Path | None = None
        self.tmp: str | None = None

    def command(self) -> list[str]:
        """The command line starting the nanny (through the account's view when root)."""
        spec = {
            "cls": "distributed.Nanny",
            "opts": {
                "name": self.name,
                "nthreads": self.nthreads,
                "memory_limit": self.memory_limit,
                "host": "127.0.0.1",
                "dashboard": False,
                "dashboard_address": None,
            },
        }
        argv = [sys.executable, "-m", "distributed.cli.dask_spec", self.scheduler]
        argv += ["--spec", json.dumps(spec)]
        import datasched

        env = {
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(Path(datasched.__file__).resolve().parent.parent),
            **self.env,
        }
        if os.geteuid() != 0 or self.confine.run_as is None:
            return ["env", "-i", f"PATH={os.environ.get('PATH', '')}", *_pairs(env), *argv]
        assert self.tmp is not None
        return [
            *view_args(self.confine.run_as, ro=self.ro, rw=self.rw, tmp=self.tmp, env=env),
            *argv,
        ]

    async def start(self) -> None:
        # Its own temporary directory, the job account's when this process is root; removed
        # on close, or by the next process to make one if this one is killed
        # (docs/security.md, "Scratch directories").
        self.scratch = make_scratch(self.confine, prefix=WORKER_PREFIX)
        self.tmp = str(self.scratch / "tmp")
        # Its log (errors only: Dask's logging is set so) goes to the daemon's, or to a file.
        log = (Path(self.log_dir) / f"worker-{self.name}.log").open("ab") if self.log_dir else None
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.command(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log or asyncio.subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        finally:
            if log is not None:
                log.close()
        await super().start()  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        proc, self.process = self.process, None
        if proc is not None and proc.returncode is None:
            # The whole tree: bubblewrap, the nanny and the worker process it spawned (in
            # sessions of their own), asked to end, then killed.
            tree = process_tree(proc.pid)[::-1]  # deepest first
            for p in tree:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(signal.SIGTERM)
            # The direct child is asyncio's to reap (its watcher waits for it): psutil,
            # which reaps a child it waits for, would take it first, and asyncio would then
            # log "Unknown child process pid ..." on the daemon's terminal. Its
            # descendants are not this process's children: psutil polls them.
            rest = [p for p in tree if p.pid != proc.pid]
            _, alive = await asyncio.to_thread(psutil.wait_procs, rest, timeout=10)
            for p in alive:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), timeout=10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        if self.scratch is not None:
            remove_scratch(self.scratch)
            self.scratch = self.tmp = None
        await super().close()  # type: ignore[no-untyped-call]


def _pairs(env: Mapping[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in env.items()]


def worker_specs(
    n: int,
    *,
    confine: Confinement,
    nthreads: int,
    memory_limit: str,
    cache_root: Path,
    roots: Sequence[Path],
    tls_dir: Path | None,
    env: Mapping[str, str],
    log_dir: Path | None = None,
) -> dict[Any, dict[str, Any]]:
    """The workers of a confined cluster (``SpecCluster(workers=...)``), named ``0`` ...
    ``n-1`` as a LocalCluster names them. The cache root is made and given to the account."""
    cache_root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0 and confine.run_as is not None:
        uid, gid = account(confine.run_as)
        for path in (cache_root, *cache_root.rglob("*")):
            with contextlib.suppress(OSError):
                os.chown(path, uid, gid, follow_symlinks=False)
    rw = [str(cache_root.resolve()), *(str(Path(r).resolve()) for r in roots)]
    ro = [str(tls_dir)] if tls_dir is not None else []
    known = set(python_dirs())
    options = {
        "confine": confine,
        "nthreads": nthreads,
        "memory_limit": memory_limit,
        "rw": [p for p in rw if p not in known],
        "ro": ro,
        "env": dict(env),
        "log_dir": str(log_dir) if log_dir is not None else None,
    }
    return {i: {"cls": ConfinedWorker, "options": {**options, "name": str(i)}} for i in range(n)}


class ConfinedCluster(SpecCluster):
    """A scheduler in this process and :class:`ConfinedWorker` s (the service's own local
    cluster)."""


def _as_env(config: Mapping[str, Any]) -> dict[str, str]:
    """Dask settings as the environment variables Dask reads them from."""
    return {
        "DASK_" + key.upper().replace(".", "__").replace("-", "_"): json.dumps(value)
        for key, value in config.items()
    }


def worker_credentials(creds: ClusterCredentials, account_name: str) -> Path:
    """A directory of the workers' credentials (the CA, their certificate and key) that the
    jobs' account can read: the cluster's private one is the daemon's alone."""
    uid, gid = account(account_name)
    where = creds.directory / "workers"
    where.mkdir(mode=0o700)
    os.chown(where, uid, gid)
    for src in (creds.worker.ca, creds.worker.cert, creds.worker.key):
        dest = where / src.name
        shutil.copyfile(src, dest)
        dest.chmod(0o600)
        os.chown(dest, uid, gid)
    return where


async def confined_cluster(
    n_workers: int,
    conf: Confinement,
    creds: ClusterCredentials,
    sec: Security,
    *,
    nthreads: int,
    memory_limit: str,
    cache_root: Path,
    roots: Sequence[Path],
    http_config: Mapping[str, Any],
    worker_config: Mapping[str, Any],
    host: str,
) -> ConfinedCluster:
    """The service's local cluster: the scheduler here, over TLS on ``host``; ``n_workers``
    workers started as ``conf.run_as`` in views of their own (their ``cache_root``, the
    ``roots``), with their credentials and Dask's settings (``worker_config``,
    ``http_config``) in a clean environment."""
    assert conf.run_as is not None
    where = worker_credentials(creds, conf.run_as)
    env = _as_env(
        {
            **worker_config,
            **http_config,
            "logging.distributed": "error",
            "distributed.comm.require-encryption": True,
            "distributed.comm.default-scheme": "tls",
            "distributed.comm.tls.ca-file": str(where / creds.worker.ca.name),
            "distributed.comm.tls.worker.cert": str(where / creds.worker.cert.name),
            "distributed.comm.tls.worker.key": str(where / creds.worker.key.name),
        }
    )
    workers = worker_specs(
        n_workers,
        confine=conf,
        nthreads=nthreads,
        memory_limit=memory_limit,
        cache_root=cache_root,
        roots=roots,
        tls_dir=where,
        env=env,
    )
    scheduler = {
        "cls": Scheduler,
        "options": {
            "host": host,
            "protocol": "tls://",
            "security": sec,
            "dashboard": False,
            "dashboard_address": f"{host}:0",
        },
    }
    with dask.config.set(dict(http_config)):
        return await ConfinedCluster(  # type: ignore[no-untyped-call]
            workers=workers,
            scheduler=scheduler,
            asynchronous=True,
            security=sec,
            silence_logs=logging.ERROR,
            name="datasched-confined",
        )
