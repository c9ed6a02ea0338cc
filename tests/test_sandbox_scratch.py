"""Sandboxes' scratch directories: each locked by the process that made it, removed with its
lock; those of hosts that died (killed with their children) removed by the next host that
starts, those of live hosts kept, across processes; and a removal that never follows what a
job planted (docs/security.md, "Scratch directories").

The hosts here are processes of their own running plain (unconfined) children: what is
tested is the scratch's life, which is the same in a bubblewrap sandbox, and it runs where
there is none."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import datasched
from datasched.sandbox.confine import Confinement
from datasched.sandbox.host import Child
from datasched.sandbox.scratch import make_scratch, remove_scratch, sweep_scratch
from sandbox_support import job_account

SRC = str(Path(datasched.__file__).resolve().parents[1])

HOST = """
import os, sys, time
from datasched.sandbox.confine import Confinement
from datasched.sandbox.host import Child
from datasched.sandbox.scratch import make_scratch

base, run_as, how = sys.argv[1], sys.argv[2] or None, sys.argv[3]
conf = Confinement(bwrap=False, run_as=run_as)
if how == "exit":  # two scratches, then dies without cleaning up, as a killed process does
    print(make_scratch(conf, base), "-", make_scratch(conf, base), flush=True)
    os._exit(0)
child = Child(conf, None, scratch_base=base)
child.start()
print(child.scratch, child.proc.pid, make_scratch(conf, base), flush=True)
sys.stdin.read()  # until told to end: then ends normally
"""


def _conf() -> Confinement:
    return Confinement(bwrap=False, run_as=job_account())


class Hosts:
    """Host processes of their own, each with a child (its scratch) and a scratch of its
    own; those still running are killed, and their pipes closed, at the test's end."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, *hows: str) -> list[tuple[subprocess.Popen[str], list[str]]]:
        """Hosts started at once, one for each of ``hows`` (``wait``: ends normally when
        its input is closed; ``exit``: makes two scratches, with no child, and ends at once
        without cleaning up), each as ``(process, [child's scratch, child's pid, scratch])``."""
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", HOST, str(self.base), job_account() or "", how],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": SRC},
                start_new_session=True,
            )
            for how in hows
        ]
        self.procs += procs
        started = []
        for proc in procs:
            assert proc.stdout is not None
            said = proc.stdout.readline().split()
            assert len(said) == 3, f"a host did not start (exit code {proc.wait(timeout=30)})"
            started.append((proc, said))
        return started

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
            proc.wait(timeout=30)


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory of scratches, as /tmp is: reachable by the jobs' account (the tests'
    own temporary directories are not), removed at the end."""
    where = Path(tempfile.mkdtemp(prefix="datasched-scratch-test-"))
    where.chmod(0o1777)
    yield where
    shutil.rmtree(where)


@pytest.fixture
def hosts(base: Path) -> Iterator[Hosts]:
    h = Hosts(base)
    yield h
    h.close()


def _ours(base: Path) -> set[str]:
    return {p.name for p in base.iterdir() if p.name.startswith("datasched-job-")}


def test_a_scratch_is_locked_by_its_maker_and_removed_with_its_lock(base: Path) -> None:
    conf = _conf()
    scratch = make_scratch(conf, base)
    lock = Path(f"{scratch}.lock")
    assert (scratch / "tmp").is_dir()
    assert lock.is_file()
    assert lock.stat().st_uid == os.geteuid()
    if conf.run_as is not None:
        assert scratch.stat().st_uid == pwd.getpwnam(conf.run_as).pw_uid
    assert sweep_scratch(base) == 0  # its owner (this process) lives
    assert scratch.is_dir()
    assert remove_scratch(scratch)
    assert _ours(base) == set()
    assert remove_scratch(scratch)  # again: nothing to do


def test_a_killed_host_leaves_scratches_the_next_host_removes_and_a_live_ones_are_kept(
    base: Path, hosts: Hosts
) -> None:
    (killed, (k_child, k_pid, k_own)), (live, (l_child, _, l_own)) = hosts.start("wait", "wait")
    try:
        # SIGKILL to a host and its child: nothing of theirs runs to clean up.
        os.kill(int(k_pid), signal.SIGKILL)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
        psutil.wait_procs([psutil.Process(int(k_pid))], timeout=10)
    except psutil.NoSuchProcess:
        pass
    assert {k_child, k_own, l_child, l_own} <= {str(p) for p in base.iterdir()}
    # The next host to start (its first scratch here) removes what the dead one left.
    conf = _conf()
    mine = make_scratch(conf, base)
    left = _ours(base)
    assert Path(k_child).name not in left
    assert Path(k_own).name not in left
    assert f"{Path(k_own).name}.lock" not in left
    for kept in (l_child, l_own, str(mine)):  # the live host's, in another process; ours
        assert Path(kept).name in left
        assert (Path(kept) / "tmp").is_dir()
    assert sweep_scratch(base) == 0  # from this process as well
    # The live host, ended normally, closes its child and removes its scratches at exit,
    # though nothing of its own code did.
    assert live.stdin is not None
    live.stdin.close()
    assert live.wait(timeout=30) == 0
    assert _ours(base) == {mine.name, f"{mine.name}.lock"}
    remove_scratch(mine)


def test_a_sweep_never_follows_what_a_job_planted(base: Path, hosts: Hosts, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "dir" / "precious.txt").write_text("keep me")
    (outside / "file.txt").write_text("keep me too")
    [(host, (stale, _, replaced))] = hosts.start("exit")
    host.wait(timeout=30)
    # In a scratch its job owned: links out, a directory it closed, nesting.
    planted = Path(stale) / "tmp"
    (planted / "to-dir").symlink_to(outside / "dir")
    (planted / "to-file").symlink_to(outside / "file.txt")
    (planted / "to-base").symlink_to(base)
    deep = planted.joinpath(*["d"] * 50)
    deep.mkdir(parents=True)
    (deep / "x").symlink_to(outside)
    closed = planted / "closed"
    closed.mkdir()
    (closed / "f").write_text("x")
    closed.chmod(0)
    # The other scratch swapped for a link to a directory outside: not what was made.
    Path(replaced, "tmp").rmdir()
    Path(replaced).rmdir()
    Path(replaced).symlink_to(outside / "dir")
    # One made by an older datasched (no lock file), and a lock file of another account.
    legacy = base / "datasched-job-legacy"
    (legacy / "tmp").mkdir(parents=True)
    foreign = base / "datasched-job-foreign"
    (foreign / "tmp").mkdir(parents=True)
    Path(f"{foreign}.lock").write_text("1 0\n")
    if os.geteuid() == 0:
        os.chown(f"{foreign}.lock", 65534, 65534)

    assert sweep_scratch(base) == 1
    left = _ours(base)
    assert Path(stale).name not in left
    assert f"{Path(stale).name}.lock" not in left
    assert (outside / "dir" / "precious.txt").read_text() == "keep me"
    assert (outside / "file.txt").read_text() == "keep me too"
    assert Path(replaced).is_symlink()  # left as it is, and what it points to
    assert legacy.is_dir()
    if os.geteuid() == 0:
        assert foreign.is_dir()
    assert sorted(p.name for p in outside.rglob("*")) == ["dir", "file.txt", "precious.txt"]


def test_a_host_of_the_jobs_own_account_removes_what_its_job_closed(base: Path) -> None:
    """A worker running as the jobs' account (no root to pass permissions by) removes a
    scratch in which the job closed directories (modes 0, 0o100, 0o500) to keep them."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to become the jobs' account")
    account = job_account()
    assert account is not None
    entry = pwd.getpwnam(account)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the host, as the jobs' account: says what it saw, then ends at once
        said = b"?"
        try:
            os.setgroups([])
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            s = make_scratch(Confinement(bwrap=False), base)
            (s / "tmp" / "a" / "b").mkdir(parents=True)
            (s / "tmp" / "a" / "b" / "f").write_text("x")
            (s / "tmp" / "a" / "b").chmod(0)
            (s / "tmp" / "ro").mkdir()
            (s / "tmp" / "ro" / "f").write_text("x")
            (s / "tmp" / "ro").chmod(0o500)
            (s / "tmp" / "a").chmod(0o100)
            (s / "tmp").chmod(0)
            said = f"{remove_scratch(s)} {s.exists()}".encode()
        except BaseException as exc:
            said = repr(exc).encode()
        finally:
            os.write(write, said)
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        answer = fh.read().decode()
    os.waitpid(pid, 0)
    assert answer == "True False"
    assert _ours(base) == set()


def test_closing_a_child_from_two_threads_removes_its_scratch_once(base: Path) -> None:
    child = Child(_conf(), None, scratch_base=base)
    child.start()
    threads = [threading.Thread(target=child.close) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert child.proc is None
    assert _ours(base) == set()


KEYS_HOST = """
import sys
from pathlib import Path
from datasched.runtime.tls import private_credentials
from datasched.sandbox.scratch import WORKER_PREFIX, make_scratch

base = Path(sys.argv[1])
with private_credentials(base) as creds:
    worker_tmp = make_scratch(None, base, prefix=WORKER_PREFIX)
    print(creds.directory, worker_tmp, flush=True)
    sys.stdin.read()  # until killed, or told to end
"""


def test_a_killed_daemons_tls_keys_and_worker_directories_are_removed_by_the_next(
    base: Path,
) -> None:
    """A daemon's cluster credentials (a private key) and a confined worker's temporary
    directory are made as scratches are: a daemon killed with SIGKILL leaves them, and the
    next process to make one in that directory removes them; a live daemon's are kept."""

    def start() -> tuple[subprocess.Popen[str], Path, Path]:
        proc = subprocess.Popen(
            [sys.executable, "-c", KEYS_HOST, str(base)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        assert proc.stdout is not None
        said = proc.stdout.readline().split()
        assert len(said) == 2, f"the host did not start (exit code {proc.wait(timeout=30)})"
        return proc, Path(said[0]), Path(said[1])

    killed, k_keys, k_tmp = start()
    live, l_keys, l_tmp = start()
    mine: Path | None = None
    try:
        assert k_keys.name.startswith("datasched-tls-")
        assert k_tmp.name.startswith("datasched-worker-")
        assert any(p.suffix == ".pem" or "key" in p.name for p in k_keys.iterdir())
        assert oct(k_keys.stat().st_mode & 0o777) == "0o700"
        killed.kill()
        killed.wait(timeout=30)
        assert k_keys.is_dir()  # nothing of the killed one cleaned up
        assert k_tmp.is_dir()
        mine = make_scratch(None, base, prefix="datasched-tls-")  # its first here: a sweep
        left = {p.name for p in base.iterdir()}
        for gone in (k_keys, k_tmp):
            assert gone.name not in left
            assert f"{gone.name}.lock" not in left
        for kept in (l_keys, l_tmp, mine):
            assert kept.name in left
        assert live.stdin is not None
        live.stdin.close()
        assert live.wait(timeout=30) == 0
        # The live one, ended normally, removed its key's directory; its worker directory,
        # made by hand here and not removed by its code, went at its exit.
        assert {p.name for p in base.iterdir()} == {mine.name, f"{mine.name}.lock"}
    finally:
        for proc in (killed, live):
            if proc.poll() is None:
                proc.kill()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
            proc.wait(timeout=30)
        if mine is not None:
            remove_scratch(mine)


def test_only_the_known_kinds_of_directory_are_made() -> None:
    with pytest.raises(ValueError, match="prefix: 'datasched-other-' is not one of"):
        make_scratch(None, prefix="datasched-other-")
