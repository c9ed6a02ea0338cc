"""A command run once in a sandbox (STAR's elementary jobs), killed at its wall time.

The command's standard input, output and error are files its host opened for it; what it
may see is the sandbox's :class:`~datasched.sandbox.confine.Layout`. Its CPU time is its
whole sandbox's, as the kernel counts it; a limit it passed is named.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

from datasched.sandbox.confine import (
    Confinement,
    Layout,
    SandboxUnavailable,
    command_line,
    limit_reason,
)
from datasched.sandbox.host import host_env, kill_tree, make_scratch, remove_scratch

__all__ = ["Ended", "run_confined", "selftest"]


@dataclass(frozen=True, slots=True)
class Ended:
    """How a confined command ended: its exit code (negative: killed by that signal), its
    CPU seconds (its whole sandbox's) and, if it passed a limit, which."""

    exit_code: int
    cpu_s: float
    reason: str = ""


def run_confined(
    conf: Confinement,
    layout: Layout,
    argv: Sequence[str],
    *,
    stdin: IO[bytes] | int,
    stdout: IO[bytes] | int,
    stderr: IO[bytes] | int,
    timeout_s: float,
    on_start: Callable[[int], None] | None = None,
) -> Ended:
    """Run ``argv`` once, confined, in ``layout`` (its scratch is the working directory),
    killed at ``timeout_s``. ``OSError`` if it cannot be started at all. ``on_start`` gets
    the process's id once it runs (whoever may have to stop it early)."""
    line = command_line(conf, layout, argv)
    proc = subprocess.Popen(
        line,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=host_env(conf, layout.scratch, layout.env),
        cwd=layout.scratch,
        start_new_session=True,
    )
    if on_start is not None:
        on_start(proc.pid)
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        kill_tree(proc.pid)

    timer = threading.Timer(timeout_s, kill)
    timer.daemon = True
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    if timed_out.is_set():
        return Ended(
            proc.returncode, cpu, f"the job's wall time limit ({timeout_s:g} s) was reached"
        )
    reason = limit_reason(conf, exit_code=proc.returncode, cpu_s=cpu) if proc.returncode else ""
    return Ended(proc.returncode, cpu, reason)


def selftest(conf: Confinement, timeout_s: float = 60.0) -> str | None:
    """Why a sandbox cannot be made here as ``conf`` asks (None: it can): ``true`` is run in
    one, through the account's view when this process is root, so that a daemon refuses to
    start rather than fail every job (unprivileged user namespaces off, an account that
    cannot reach the Python environment, ...)."""
    scratch = make_scratch(conf)
    try:
        err = scratch / "tmp" / "selftest.err"
        with err.open("wb") as fh:
            try:
                ended = run_confined(
                    conf,
                    Layout(scratch),
                    ["true"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=fh,
                    timeout_s=timeout_s,
                )
            except (OSError, SandboxUnavailable) as exc:
                return str(exc)
        if ended.exit_code == 0:
            return None
        said = err.read_text(errors="replace").strip().splitlines()
        return f"a sandbox could not run 'true' (exit code {ended.exit_code}): " + (
            said[-1] if said else ended.reason or "it said nothing"
        )
    finally:
        remove_scratch(scratch)
