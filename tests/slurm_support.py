"""A real Slurm on loopback for the batch-system tests: Debian's ``slurm-wlm`` and ``munge``,
one controller and one node (``localhost``, 2 CPUs), everything under a temporary directory.

:func:`slurm_unavailable` says why it cannot run here (or ``None``); :class:`LoopbackSlurm`
starts munged, slurmctld and slurmd in the foreground as child processes, waits until
``sinfo`` shows the node idle, and stops them all on ``close()``. Client commands (``sbatch``,
``squeue``, ``sinfo``) find this cluster through ``SLURM_CONF`` in :attr:`env`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from runtime_support import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue")


def slurm_unavailable() -> str | None:
    """Why a loopback Slurm cannot be started here, or ``None`` if it can be tried."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} not on PATH): "
            "apt-get install slurm-wlm munge"
        )
    if os.geteuid() != 0:
        # slurmd starts each job as its user; the daemons here run as root (SlurmUser=root).
        return "the loopback Slurm runs its daemons as root; these tests are not root"
    return None


SLURM_CONF = """\
ClusterName=datasched-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={work}/state
SlurmdSpoolDir={work}/spool
SlurmctldPidFile={work}/slurmctld.pid
SlurmdPidFile={work}/slurmd.pid
SlurmctldLogFile={work}/log/slurmctld.log
SlurmdLogFile={work}/log/slurmd.log
# No cgroups: processes are tracked by process group, tasks are not confined.
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


class LoopbackSlurm:
    """One Slurm controller and one node on 127.0.0.1, started now; :meth:`close` stops it.

    The test process runs ``sbatch`` (through dask-jobqueue) with :attr:`env` in
    ``os.environ``; the jobs inherit the submitter's environment (Slurm's default)."""

    def __init__(self, start_timeout_s: float = 30.0) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="datasched-slurm-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            self._start(start_timeout_s)
        except BaseException:
            self.close()
            raise

    def _start(self, timeout_s: float) -> None:
        work = self.work
        for sub in ("munge", "state", "spool", "log"):
            (work / sub).mkdir()
        munge = work / "munge"
        munge.chmod(0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.munge_socket = munge / "socket"
        self.conf = work / "slurm.conf"
        self.conf.write_text(
            SLURM_CONF.format(
                ctld_port=free_port(),
                slurmd_port=free_port(),
                munge_socket=self.munge_socket,
                work=work,
            )
        )
        self.env = {"SLURM_CONF": str(self.conf)}
        env = {**os.environ, **self.env}
        self._spawn(
            [
                "munged",
                "--foreground",
                "--force",  # root, and a socket directory others cannot enter: fine here
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--log-file={work / 'log' / 'munged.log'}",
                f"--seed-file={munge / 'seed'}",
            ],
            env,
        )
        self._wait(lambda: self.munge_socket.exists(), timeout_s, "munged did not start")
        self._spawn(["slurmctld", "-D", "-c", "-f", str(self.conf)], env)
        self._spawn(["slurmd", "-D", "-N", "localhost", "-f", str(self.conf)], env)
        self._wait(lambda: self.sinfo() == "idle", timeout_s, "the node did not become idle")

    def _spawn(self, cmd: list[str], env: dict[str, str]) -> None:
        self.procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        )

    def sinfo(self) -> str:
        """The node's state as ``sinfo`` reports it (``idle``, ``alloc``, ...), or ``""``."""
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    def jobs(self) -> list[str]:
        """``squeue``'s jobs, each as ``NAME STATE`` (``datasched-worker RUNNING``, ...)."""
        done = subprocess.run(
            ["squeue", "-h", "-o", "%j %T"],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return done.stdout.splitlines()

    def wait_until(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        """Whether ``ready()`` came true within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def _wait(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"{what} (exited: {dead}); logs:\n{self.logs()}")
            time.sleep(0.2)

    def logs(self, tail_chars: int = 3000) -> str:
        """The daemons' logs, their last ``tail_chars`` each: what to read when it fails."""
        parts = []
        for log in sorted((self.work / "log").glob("*.log")):
            parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-tail_chars:]}")
        return "\n".join(parts)

    def close(self) -> None:
        """Stop the daemons (slurmd first, munged last) and remove the directory."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(15)
        self.procs.clear()
        shutil.rmtree(self.work, ignore_errors=True)
