"""The host's side of a sandbox: start a child for a job's code, hand it packets, merge
results in it, check a processor with it, run a command in a sandbox; and keep children
between packets (:class:`ChildPool`).

Everything a child answers is data from a hostile process: its header is checked field by
field, its payload is opaque bytes of bounded size, and what it says of its own CPU time is
not believed (the host measures its process tree). A child that dies, hangs past its wall
time or passes a limit fails the packet with the reason, and is not used again.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from datasched.sandbox import wire
from datasched.sandbox.child import join_blobs
from datasched.sandbox.confine import (
    JOB_PATH,
    Confinement,
    Layout,
    LimitReached,
    UserCode,
    clean_env,
    command_line,
    limit_reason,
)
from datasched.sandbox.scratch import make_scratch, remove_scratch

__all__ = [
    "MAX_RESULT_BYTES",
    "Child",
    "ChildFailed",
    "check_code",
    "host_env",
    "kill_tree",
    "make_scratch",
    "merge_results",
    "process_tree",
    "remove_scratch",
]

MAX_RESULT_BYTES = 256 << 20
"""The largest result a child may send back (a packet's, or a merge's)."""
WATCH_S = 0.5
"""How often a host looks at a busy child's CPU time."""
START_TIMEOUT_S = 120.0
"""How long a child may take to start and load its processor (imports included)."""
LOG_TAIL = 4000


def _child_command() -> list[str]:
    """Python, isolated (no user site, no environment's settings), running the child from
    the datasched this process runs (bound in every sandbox), whatever ``sys.path`` says."""
    import datasched

    where = str(Path(datasched.__file__).resolve().parent.parent)
    code = (
        f"import sys; sys.path.insert(0, {where!r}); "
        "from datasched.sandbox.child import main; sys.exit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-I", "-c", code]


CHILD_COMMAND = _child_command()


class ChildFailed(RuntimeError):
    """The child said the work failed (``kind``: ``data``, ``processor``), or died;
    ``traceback`` is the user's, when their code raised."""

    def __init__(self, kind: str, message: str, traceback: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.traceback = traceback


def host_env(conf: Confinement, scratch: Path, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment given to the process started: bubblewrap sets the job's inside; a
    plain child gets the job's at once, its scratch at its real place."""
    if conf.bwrap:
        return {"PATH": JOB_PATH}
    env = clean_env(extra)
    env["HOME"] = env["SCRATCH"] = str(scratch)
    env["TMPDIR"] = str(scratch / "tmp")
    return env


def process_tree(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and its descendants, ``pid`` first (finding them reads every
    process of the machine: done at a child's start and now and then, not at every packet)."""
    try:
        top = psutil.Process(pid)
        return [top, *top.children(recursive=True)]
    except psutil.Error:
        return []


def kill_tree(pid: int) -> None:
    """Kill the process ``pid``, its group and every descendant (a sandbox's processes may
    sit in sessions of their own, under bubblewrap)."""
    tree = process_tree(pid)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.kill()


def _cpu_s(procs: Sequence[psutil.Process]) -> float:
    """CPU seconds of ``procs`` and their reaped children, as the kernel counts them."""
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(size - LOG_TAIL, 0))
            return fh.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _text(value: Any, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


class Child:
    """A sandboxed Python child serving one job's code (``code``; None: merges only of
    results holding no class of the user's) on this host."""

    def __init__(
        self, conf: Confinement, code: UserCode | None, *, scratch_base: str | Path | None = None
    ) -> None:
        self.conf = conf
        self.code = code
        self.scratch = make_scratch(conf, scratch_base)
        self.log_path = self.scratch / "tmp" / "child-output.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.broken = False
        self.cpu_at_start = 0.0
        self.last_used = time.monotonic()
        self.has_postprocess = False
        self._procs: list[psutil.Process] = []
        self._closing = threading.Lock()
        self._pid = os.getpid()
        _LIVE.add(self)

    # -- life -----------------------------------------------------------------------------

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the child and load the job's processor in it (:class:`ChildFailed` if it
        does not load, :class:`~datasched.sandbox.confine.SandboxUnavailable` if there is no
        sandbox to start it in)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = ours
        argv = [*CHILD_COMMAND, str(theirs.fileno())]
        layout = Layout(self.scratch)
        try:
            line = command_line(self.conf, layout, argv)
            with self.log_path.open("wb") as log:
                self.proc = subprocess.Popen(
                    line,
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=host_env(self.conf, self.scratch, {}),
                    cwd=self.scratch,
                    start_new_session=True,
                )
        except BaseException:
            theirs.close()
            self.close()
            raise
        theirs.close()
        try:
            self._ask({"op": "hello"}, timeout_s=timeout_s, expect_ready=True)
            if self.code is not None:
                head, _ = self._ask(
                    {
                        "op": "load",
                        "ref": self.code.ref,
                        "filename": self.code.filename or "",
                        "args": self.code.args_json,
                    },
                    self.code.source or b"",
                    timeout_s=timeout_s,
                )
                self.has_postprocess = bool(head.get("has_postprocess"))
        except BaseException:
            self.close()
            raise
        self.cpu_at_start = self.cpu_s(look_again=True)

    def close(self) -> None:
        """Kill the child (its whole sandbox) and remove its scratch directory (again: does
        nothing; from two threads at once: once)."""
        self.broken = True
        with self._closing:
            if self.sock is not None:
                with contextlib.suppress(OSError):
                    self.sock.close()
                self.sock = None
            proc, self.proc = self.proc, None
            if proc is not None:
                kill_tree(proc.pid)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
            remove_scratch(self.scratch)
            _LIVE.discard(self)

    def cpu_s(self, *, look_again: bool = False) -> float:
        """CPU seconds its sandbox used so far (measured here): its processes as last seen
        (``look_again``: found anew, with any it started since), and all they reaped."""
        if self.proc is None:
            return 0.0
        if look_again or not self._procs:
            self._procs = process_tree(self.proc.pid)
        return _cpu_s(self._procs)

    # -- talking ----------------------------------------------------------------------------

    def _ask(
        self,
        header: dict[str, Any],
        payload: bytes = b"",
        fds: Sequence[int] = (),
        *,
        timeout_s: float,
        cpu_budget_s: float | None = None,
        expect_ready: bool = False,
    ) -> tuple[dict[str, Any], bytes]:
        """Send a request (none for the first answer, ``expect_ready``) and read the answer:
        ``(header, payload)``; :class:`ChildFailed` if the child says it failed, or dies;
        :class:`LimitReached` (the child killed) past ``timeout_s`` seconds, or past
        ``cpu_budget_s`` CPU seconds of its sandbox for this request."""
        sock = self.sock
        if sock is None or self.broken:
            raise ChildFailed("processor", "the job's sandbox is not running")
        deadline = time.monotonic() + timeout_s
        cpu0 = self.cpu_s() if cpu_budget_s is not None else 0.0
        try:
            sock.settimeout(timeout_s)
            if not expect_ready:
                wire.send(sock, header, payload, fds)
            # Wait for the answer, looking at the sandbox's CPU time meanwhile (and at
            # which processes it has, every tenth look).
            looks = 0
            while not select.select([sock], [], [], WATCH_S)[0]:
                if time.monotonic() > deadline:
                    raise TimeoutError
                looks += 1
                used = self.cpu_s(look_again=looks % 10 == 0) - cpu0
                if cpu_budget_s is not None and used > cpu_budget_s:
                    self.close()
                    raise LimitReached(
                        f"the job's CPU time limit ({self.conf.cpu_s:g} s) was reached"
                    )
            sock.settimeout(max(deadline - time.monotonic(), 1.0))
            answer, data, _ = wire.recv(sock, max_payload=MAX_RESULT_BYTES)
        except TimeoutError:
            self.close()
            raise LimitReached(
                f"the job's wall time limit ({self.conf.wall_s:g} s) was reached"
            ) from None
        except (wire.WireError, OSError) as exc:
            raise self._died(exc) from None
        self.last_used = time.monotonic()
        if answer.get("ok") is True:
            return answer, data
        kind = answer.get("kind") if answer.get("kind") in ("data", "processor") else "processor"
        message = _text(answer.get("message"), 4000) or "failed, saying nothing"
        reason = limit_reason(self.conf, exit_code=None, cpu_s=0.0, said=message)
        if reason:
            message = f"{reason} ({message})"
        raise ChildFailed(str(kind), message, _text(answer.get("traceback"), 20000))

    def _died(self, exc: BaseException) -> ChildFailed:
        proc = self.proc
        code = None
        cpu = self.cpu_s()
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = proc.wait(timeout=5)
        said = _tail(self.log_path)
        self.close()
        reason = limit_reason(self.conf, exit_code=code, cpu_s=cpu - self.cpu_at_start, said=said)
        why = reason or f"the job's sandbox ended (exit code {code}; {exc})"
        tail = f"\n{said[-2000:]}" if said and not reason else ""
        return ChildFailed("processor", why + tail)

    # -- work ---------------------------------------------------------------------------------

    def packet(
        self,
        path: str,
        *,
        url: str,
        tree: str,
        start: int,
        stop: int,
        read: Mapping[str, Any],
        timeout_s: float,
        cpu_budget_s: float | None = None,
    ) -> tuple[bytes, dict[str, float]]:
        """Run the processor on entries ``[start, stop)`` of ``url``, whose local copy is
        ``path`` (handed over read-only): ``(result bytes, stats)``; stats are
        ``bytes_read``, ``open_s``, ``compute_s`` (the child's word, bounded) and ``cpu_s``
        (measured here)."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        cpu0 = self.cpu_s()
        t0 = time.monotonic()
        try:
            header = {"op": "packet", "url": url, "tree": tree, "start": start, "stop": stop}
            head, blob = self._ask(
                {**header, "read": dict(read)},
                fds=[fd],
                timeout_s=timeout_s,
                cpu_budget_s=cpu_budget_s,
            )
        finally:
            os.close(fd)
        wall = time.monotonic() - t0
        size = Path(path).stat().st_size

        def number(key: str, top: float) -> float:
            value = head.get(key)
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            return min(max(float(value), 0.0), top) if ok else 0.0  # type: ignore[arg-type]

        stats = {
            "bytes_read": number("bytes_read", float(size)),
            "open_s": number("open_s", wall),
            "compute_s": number("compute_s", wall),
            "cpu_s": max(self.cpu_s() - cpu0, 0.0),
        }
        return blob, stats

    def count(self, path: str, *, url: str, tree: str, timeout_s: float) -> int:
        """The entries of ``tree`` in the ROOT file at ``path`` (handed over read-only),
        read in the sandbox; :class:`ChildFailed` (``data``) saying why it cannot."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            head, _ = self._ask(
                {"op": "count", "url": url, "tree": tree}, fds=[fd], timeout_s=timeout_s
            )
        finally:
            os.close(fd)
        n = head.get("n_events")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ChildFailed("data", f"{url}: no event count")
        return n

    def merge(self, blobs: list[bytes], *, final: bool, timeout_s: float) -> bytes:
        """The merge of ``blobs`` (results pickled by children), postprocessed if ``final``."""
        payload = join_blobs(blobs)
        _, merged = self._ask({"op": "merge", "final": final}, payload, timeout_s=timeout_s)
        return merged


_LIVE: weakref.WeakSet[Child] = weakref.WeakSet()
"""This process's children not closed yet."""


@atexit.register
def _close_all() -> None:
    """At exit, close this process's children left open (a worker's pool of idle ones): a
    sandbox does not outlive its host, nor its scratch directory the sandbox. A process
    killed runs nothing: the next host to start removes its scratch (docs/security.md)."""
    for child in list(_LIVE):
        if child._pid == os.getpid():
            child.close()


MERGE_BATCH_BYTES = 64 << 20
"""Results merged in one request to a child, at most (then merged again)."""


def merge_results(
    conf: Confinement,
    code: UserCode | None,
    blobs: Sequence[bytes],
    *,
    timeout_s: float,
    scratch_base: str | Path | None = None,
) -> bytes:
    """The merge of ``blobs`` in a fresh child that loaded ``code`` (the user's classes are
    in their results), postprocessed once at the end: results are never unpickled here."""
    child = Child(conf, code, scratch_base=scratch_base)
    try:
        child.start()
        todo = list(blobs)
        while True:
            batches: list[list[bytes]] = [[]]
            size = 0
            for b in todo:
                if batches[-1] and size + len(b) > MERGE_BATCH_BYTES:
                    batches.append([])
                    size = 0
                batches[-1].append(b)
                size += len(b)
            if len(batches) == 1:
                return child.merge(batches[0], final=True, timeout_s=timeout_s)
            todo = [child.merge(batch, final=False, timeout_s=timeout_s) for batch in batches]
    finally:
        child.close()


def check_code(
    conf: Confinement, code: UserCode, *, timeout_s: float, scratch_base: str | Path | None = None
) -> ChildFailed | None:
    """Whether ``code`` loads (its file runs, its class takes the arguments), tried in a
    sandbox within ``timeout_s``: None if it does, else why not."""
    child = Child(conf, code, scratch_base=scratch_base)
    try:
        child.start(timeout_s=timeout_s)
    except ChildFailed as exc:
        return exc
    except LimitReached as exc:
        return ChildFailed("processor", f"{exc} (while loading the processor)")
    finally:
        child.close()
    return None
