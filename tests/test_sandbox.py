"""The sandbox on its own: its confinement's settings, its messages read as hostile, a
child's packets, failures and limits, the pool of children, the daemon's checks (a
processor's load, a file's event count), and a command run once."""

from __future__ import annotations

import os
import pickle
import socket
import struct
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from datasched.sandbox import wire
from datasched.sandbox.confine import Confinement, Layout, LimitReached, UserCode, limit_reason
from datasched.sandbox.host import ChildFailed, check_code, make_scratch, remove_scratch
from datasched.sandbox.pool import ChildPool
from datasched.sandbox.run import run_confined, selftest
from sandbox_support import confinement

DATA = Path(__file__).parent / "data" / "uproot-HZZ.root"  # a public file: 2421 entries
TREE = "events"

COUNTING = """
import os

class P:
    def __init__(self, tag="t"):
        self.tag = tag
    def process(self, events):
        return {"n": len(events), "pids": {os.getpid()}, "tags": {self.tag}}
"""


def _code(tmp_path: Path, text: str, args: str = "{}", name: str = "proc.py") -> UserCode:
    path = tmp_path / name
    path.write_text(text)
    return UserCode(f"{name}:P", text.encode(), str(path), args)


def test_a_confinement_names_what_is_wrong_with_it() -> None:
    for kw, field in (
        ({"memory_bytes": 0}, "memory_bytes"),
        ({"memory_bytes": 1 << 20}, "memory_bytes"),
        ({"cpu_s": -1}, "cpu_s"),
        ({"wall_s": 0}, "wall_s"),
        ({"processes": 0}, "processes"),
        ({"run_as": " "}, "run_as"),
    ):
        with pytest.raises(ValueError, match=field):
            Confinement(**kw)
    limits = Confinement(cpu_s=10.2).rlimits()
    assert limits["RLIMIT_CPU"] == 11
    assert limits["RLIMIT_NPROC"] == 256
    assert "RLIMIT_NPROC" not in Confinement(bwrap=False).rlimits()  # the account's, not the job's


def test_the_key_of_user_code_follows_its_text_and_arguments() -> None:
    a = UserCode("p.py:P", b"x = 1", "/r/p.py", "{}")
    assert a.key == UserCode("p.py:P", b"x = 1", "/r/p.py", "{}").key
    assert a.key != UserCode("p.py:P", b"x = 2", "/r/p.py", "{}").key
    assert a.key != UserCode("p.py:P", b"x = 1", "/r/p.py", '{"a": 1}').key
    assert "x = 1" not in repr(a)  # a repr names it, it does not print the user's code
    assert a.key != UserCode("p.py:P", b"x = 1", "/r/p.py", "{}", owner="eve").key


def test_messages_are_read_as_hostile() -> None:
    a, b = socket.socketpair()
    with a, b:
        wire.send(a, {"ok": True}, b"x" * 10)
        header, payload, fds = wire.recv(b, max_payload=10)
        assert (header, payload, fds) == ({"ok": True}, b"x" * 10, [])
        # Lengths are checked before anything is read.
        a.sendall(struct.pack("!QQ", wire.MAX_HEADER + 1, 0))
        with pytest.raises(wire.WireError, match="header"):
            wire.recv(b, max_payload=10)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack("!QQ", 2, 11) + b"{}")
        with pytest.raises(wire.WireError, match="payload of 11 bytes"):
            wire.recv(b, max_payload=10)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack("!QQ", 2, 0) + b"[]")
        with pytest.raises(wire.WireError, match="not a JSON object"):
            wire.recv(b, max_payload=10)
    # A descriptor sent where none is wanted is closed, unread.
    a, b = socket.socketpair()
    r, w = os.pipe()
    with a, b:
        wire.send(a, {"ok": True}, fds=[r])
        _, _, fds = wire.recv(b, max_payload=10, max_fds=0)
        assert fds == []
        a.close()  # the other side gone
        with pytest.raises(wire.WireError):
            wire.recv(b, max_payload=10)
    os.close(r)
    os.close(w)


def test_limit_reasons_name_the_limit() -> None:
    conf = Confinement(cpu_s=10, memory_bytes=1 << 30, processes=8)
    assert "CPU time" in limit_reason(conf, exit_code=128 + 24, cpu_s=1)
    assert "CPU time" in limit_reason(conf, exit_code=-9, cpu_s=9.9)
    assert "file size" in limit_reason(conf, exit_code=-25, cpu_s=0)
    assert "memory limit (1 GiB" in limit_reason(conf, exit_code=1, cpu_s=0, said="MemoryError")
    assert "process limit (8)" in limit_reason(
        conf, exit_code=1, cpu_s=0, said="BlockingIOError: Resource temporarily unavailable"
    )
    assert limit_reason(conf, exit_code=1, cpu_s=0, said="ValueError") == ""


def test_a_child_runs_packets_and_its_results_stay_bytes(tmp_path: Path) -> None:
    conf = confinement()
    pool = ChildPool(keep=2, idle_s=60)
    code = _code(tmp_path, COUNTING, '{"tag": "x"}')
    blobs = []
    for start, stop in ((0, 1000), (1000, 2421)):
        with pool.borrow(conf, code) as child:
            blob, stats = child.packet(
                str(DATA), url="HZZ", tree=TREE, start=start, stop=stop, read={}, timeout_s=120
            )
        assert isinstance(blob, bytes)
        assert 0 <= stats["bytes_read"] <= DATA.stat().st_size
        assert stats["cpu_s"] >= 0
        blobs.append(blob)
    assert pool.started == 1
    assert len(pool) == 1  # the second packet found it loaded
    results = [pickle.loads(b) for b in blobs]  # the test's own code: trusted here
    assert [r["n"] for r in results] == [1000, 1421]
    assert results[0]["tags"] == {"x"}
    assert os.getpid() not in results[0]["pids"]
    with pool.borrow(conf, code) as child:
        merged = pickle.loads(child.merge(blobs, final=True, timeout_s=60))
    assert merged["n"] == 2421
    pool.close()
    assert len(pool) == 0


# A processor that keeps what it saw: every packet's file and length in a module global, and
# every regular file this process holds open, returned with each result.
HOARDING = """
import os, stat

SEEN = []

class P:
    def process(self, events):
        SEEN.append(len(events))
        held = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                st = os.fstat(int(fd))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                held.add((st.st_dev, st.st_ino))
        return {"seen": list(SEEN), "held": held}
"""


def test_another_users_job_never_gets_a_child_that_ran_someone_elses_packets(
    tmp_path: Path,
) -> None:
    # The attack: the same code (a shared processor file, the same arguments) run by a victim
    # and then by its author, whose job would find the victim's file still open and the
    # processor's globals holding what the victim's packets left there.
    conf = confinement()
    pool = ChildPool(keep=4, idle_s=60)
    private = tmp_path / "private.root"
    private.write_bytes(DATA.read_bytes())
    mine = private.stat()
    victim = replace(_code(tmp_path, HOARDING), owner="bob")
    author = replace(victim, owner="eve")

    def packet(code: UserCode, path: Path, stop: int) -> dict[str, Any]:
        with pool.borrow(conf, code) as child:
            blob, _ = child.packet(
                str(path), url=path.name, tree=TREE, start=0, stop=stop, read={}, timeout_s=120
            )
        got: dict[str, Any] = pickle.loads(blob)  # the test's own code: trusted here
        return got

    bob = packet(victim, private, 700)
    assert (mine.st_dev, mine.st_ino) in bob["held"]
    eve = packet(author, DATA, 10)
    assert eve["seen"] == [10]  # nothing of bob's packet
    assert (mine.st_dev, mine.st_ino) not in eve["held"]
    assert pool.started == 2
    # The same owner's next job does find its child loaded (the check above can fail).
    again = packet(victim, DATA, 20)
    assert again["seen"] == [700, 20]
    assert pool.started == 2
    pool.close()


def test_a_processors_errors_come_back_with_the_users_traceback(tmp_path: Path) -> None:
    conf = confinement()
    raising = _code(tmp_path, "class P:\n    def process(self, events):\n        1 / 0\n")
    pool = ChildPool()
    with pytest.raises(ChildFailed) as err, pool.borrow(conf, raising) as child:
        child.packet(str(DATA), url="HZZ", tree=TREE, start=0, stop=10, read={}, timeout_s=60)
    assert err.value.kind == "processor"
    assert "ZeroDivisionError" in err.value.message
    assert 'proc.py", line 3' in err.value.traceback
    # A tree the file does not hold is the data's fault.
    with pytest.raises(ChildFailed) as err, pool.borrow(conf, _code(tmp_path, COUNTING)) as child:
        child.packet(str(DATA), url="HZZ", tree="nope", start=0, stop=10, read={}, timeout_s=60)
    assert err.value.kind == "data"
    pool.close()


def test_the_daemons_check_loads_a_processor_in_a_sandbox(tmp_path: Path) -> None:
    conf = confinement()
    assert check_code(conf, _code(tmp_path, COUNTING, '{"tag": "y"}'), timeout_s=60) is None
    failed = check_code(conf, _code(tmp_path, COUNTING, '{"colour": 1}'), timeout_s=60)
    assert failed is not None
    assert "colour" in failed.message
    marker = tmp_path / "marker"
    body = f"open({str(marker)!r}, 'w').write('ran')\nclass P:\n    pass\n"
    failed = check_code(conf, _code(tmp_path, body, name="body.py"), timeout_s=60)
    assert failed is not None
    assert "FileNotFoundError" in failed.message  # ran, but boxed
    assert not marker.exists()
    hang = "import time\ntime.sleep(60)\nclass P:\n    pass\n"
    failed = check_code(conf, _code(tmp_path, hang, name="hang.py"), timeout_s=2)
    assert failed is not None
    assert "wall time limit" in failed.message  # stopped, not waited


def test_a_childs_wall_time_and_cpu_budget_kill_it(tmp_path: Path) -> None:
    conf = confinement()
    spin = _code(tmp_path, "class P:\n    def process(self, events):\n        while True: pass\n")
    pool = ChildPool()
    for kw, said in (({"timeout_s": 2}, "wall time"), ({"cpu_budget_s": 1.0}, "CPU time")):
        with pytest.raises(LimitReached, match=said), pool.borrow(conf, spin) as child:
            child.packet(
                str(DATA),
                url="HZZ",
                tree=TREE,
                start=0,
                stop=10,
                read={},
                **{"timeout_s": 60, **kw},
            )
        assert child.broken
        assert child.proc is None  # killed, its sandbox gone
    assert len(pool) == 0  # a killed child is not kept
    pool.close()


def test_a_command_runs_once_confined_with_its_output_handed_over(tmp_path: Path) -> None:
    conf = confinement(wall_s=3)
    scratch = make_scratch(conf)
    out = tmp_path / "out.txt"
    with out.open("wb") as fh:
        ended = run_confined(
            conf,
            Layout(scratch, env={"JOBID": "r_0"}),
            ["sh", "-c", f"echo $JOBID $HOME; test -e {tmp_path} && echo seen || echo unseen"],
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            timeout_s=3,
        )
    assert ended.exit_code == 0, out.read_text()
    assert out.read_text().split() == ["r_0", "/scratch", "unseen"]
    with out.open("wb") as fh:
        ended = run_confined(
            conf, Layout(scratch), ["sleep", "30"], stdin=0, stdout=fh, stderr=fh, timeout_s=1
        )
    assert ended.exit_code != 0
    assert "wall time limit" in ended.reason
    assert remove_scratch(scratch)
    assert selftest(conf) is None


def test_the_daemon_counts_a_users_file_in_a_sandbox() -> None:
    from datasched.service.usercode import SandboxCounter

    count = SandboxCounter(confinement())
    assert count(str(DATA), TREE) == 2421
    with pytest.raises(ValueError, match="no tree 'nope' \\(its trees: events\\)"):
        count(str(DATA), "nope")
    with pytest.raises(ValueError, match="not a readable ROOT file"):
        count(__file__, TREE)
    count.pool.close()


def test_closing_a_child_ends_its_whole_sandbox(tmp_path: Path) -> None:
    import psutil

    from datasched.sandbox.host import Child

    child = Child(confinement(), _code(tmp_path, COUNTING))
    child.start()
    assert child.proc is not None
    inside = psutil.Process(child.proc.pid).children(recursive=True)
    assert inside, "no sandbox under bubblewrap"
    # As root, the sandbox runs under bubblewrap's second instance, as the jobs' account,
    # in sessions of their own: killing the first does not end them; close() does.
    child.close()
    _, alive = psutil.wait_procs(inside, timeout=10)
    assert not alive, [p.cmdline()[:3] for p in alive]
