"""Commands run on a worker over local copies of their files (STAR's elementary jobs).

A command job is one unit: its executable runs once, on the worker its packet is pinned to,
with every one of its files brought into that node's cache first (as a packet's file is: a
hit, a copy from a peer, or a throttled copy from tertiary storage). The command gets the
local paths as STAR's jobs do: a file list, one path a line, named by ``$FILELIST``, and
``$INPUTFILE0..n`` (with ``$INPUTFILECOUNT``); on its standard input too when asked. It runs
without a shell (its command line is split as a POSIX shell would, nothing expanded), in a
scratch directory of its own that is removed afterwards. Standard output and error go to the
named files, or to scratch files; the end of both is returned as the log. A non-zero exit
fails the job with that log.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from distributed import get_worker

from datasched.runtime.diskcache import Acquired
from datasched.runtime.processor import ShippedProcessor
from datasched.runtime.worker import (
    PacketError,
    PacketResult,
    PacketSpec,
    acquire_file,
    cache_plugin,
    release_file,
)

__all__ = ["STDIN_FILELIST", "CommandOutcome", "CommandSpec", "log_tail", "run_command"]

STDIN_FILELIST = "filelist"
"""``stdin`` naming this (or ``$FILELIST``): the file list is the command's standard input."""
LOG_CHARS = 4000
"""How much of the end of stdout and of stderr the log keeps."""
_NO_PROCESSOR = ShippedProcessor("command", key="")


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """A command job's one packet: ``argv`` over ``files`` (url, n_bytes), on one worker."""

    packet_id: int
    job_id: int
    argv: tuple[str, ...]
    files: tuple[tuple[str, int], ...]
    stdin: str | None = None
    """None: nothing; :data:`STDIN_FILELIST`: the file list; else a file's path."""
    stdout: str | None = None
    """A path to write standard output to (None: a scratch file, its end in the log)."""
    stderr: str | None = None
    cache_fill: bool = True
    use_cache: bool = True
    peers: tuple[str, ...] = ()


@dataclass(slots=True)
class CommandOutcome:
    """What a command did: its exit code, the end of its output and where it went."""

    exit_code: int
    log: str
    stdout: str | None = None
    stderr: str | None = None
    inputs: list[str] = field(default_factory=list)
    """The local paths it was given, in order."""


def split_command(command: str) -> tuple[str, ...]:
    """The command line as arguments (POSIX quoting, nothing expanded); ``ValueError`` naming
    the problem when it cannot be split or is empty."""
    try:
        argv = tuple(shlex.split(command))
    except ValueError as exc:
        raise ValueError(f"command: cannot be split into arguments: {exc}") from exc
    if not argv:
        raise ValueError("command: empty")
    return argv


def log_tail(path: Path | None, label: str) -> str:
    """The end of the file at ``path`` (at most :data:`LOG_CHARS`), labelled; empty if none."""
    if path is None or not path.exists():
        return ""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(size - LOG_CHARS, 0))
        text = fh.read().decode("utf-8", "replace")
    if not text:
        return ""
    cut = "...\n" if size > LOG_CHARS else ""
    return f"--- {label} ---\n{cut}{text.rstrip()}\n"


def run_command(spec: CommandSpec) -> PacketResult:
    """The Dask task of a command job (runs on the worker it is pinned to)."""
    worker = get_worker()
    node, plugin = cache_plugin(worker)
    started = time.time()
    t0 = time.perf_counter()
    held: list[tuple[Acquired | None, bool]] = []
    sources: list[str] = []
    fetched = from_peer = 0
    added: list[str] = []
    evicted: list[str] = []
    notes: list[str] = []
    paths: list[str] = []
    try:
        for url, n_bytes in spec.files:
            pspec = PacketSpec(
                packet_id=spec.packet_id,
                job_id=spec.job_id,
                url=url,
                tree="",
                local_start=0,
                local_stop=0,
                file_bytes=n_bytes,
                processor=_NO_PROCESSOR,
                cache_fill=spec.cache_fill,
                use_cache=spec.use_cache,
                peers=spec.peers,
            )
            got, keep, info, note = acquire_file(node, plugin, pspec, worker)
            held.append((got, keep))
            sources.append(str(info["source"]))
            from_peer += int(info["from_peer"])
            if note:
                notes.append(note)
            if got is None:  # the local disk is full: the command reads it where it is
                paths.append(url)
                continue
            if info["source"] in ("tertiary", "staged"):
                fetched += got.bytes_fetched
            added += got.added
            evicted += got.evicted
            paths.append(str(got.path))
        read_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        outcome, cpu_s = _execute(spec, paths)
        compute_s = time.perf_counter() - t1
    finally:
        for got, keep in held:
            release_file(plugin, got, keep)
    if outcome.exit_code != 0:
        raise PacketError(
            "command",
            spec.argv[0],
            f"exited with code {outcome.exit_code} on {node}",
            outcome.log,
        )
    source = "cache" if sources and all(s == "cache" for s in sources) else "tertiary"
    return PacketResult(
        packet_id=spec.packet_id,
        job_id=spec.job_id,
        node=node,
        n_events=1,
        source=source,
        bytes_from_tertiary=fetched,
        bytes_from_peer=from_peer,
        read_s=read_s,
        compute_s=compute_s,
        accumulator=outcome,
        cache_added=added,
        cache_evicted=evicted,
        bytes_read=sum(n for _, n in spec.files),
        cpu_s=cpu_s,
        started=started,
        note="; ".join(notes),
    )


def _execute(spec: CommandSpec, paths: list[str]) -> tuple[CommandOutcome, float]:
    """Run the command in a scratch directory; ``(outcome, CPU seconds of the child)``."""
    scratch = Path(tempfile.mkdtemp(prefix=f"datasched-cmd-{spec.job_id}-"))
    try:
        filelist = scratch / "filelist.txt"
        filelist.write_text("".join(p + "\n" for p in paths))
        env = dict(os.environ)
        env["FILELIST"] = str(filelist)
        env["INPUTFILECOUNT"] = str(len(paths))
        for i, p in enumerate(paths):
            env[f"INPUTFILE{i}"] = p
        out = Path(spec.stdout) if spec.stdout else scratch / "stdout.txt"
        err = Path(spec.stderr) if spec.stderr else scratch / "stderr.txt"
        for target in (out, err):
            target.parent.mkdir(parents=True, exist_ok=True)
        if spec.stdin in (STDIN_FILELIST, "$FILELIST"):
            stdin_path: Path | None = filelist
        else:
            stdin_path = Path(spec.stdin) if spec.stdin else None
            if stdin_path is not None and not stdin_path.is_file():
                raise PacketError("command", str(stdin_path), "stdin: no such file")
        same = out.resolve() == err.resolve()
        with (
            open(stdin_path, "rb") if stdin_path is not None else open(os.devnull, "rb") as fin,
            open(out, "wb") as fout,
            open(err, "ab" if same else "wb") as ferr,
        ):
            try:
                proc = subprocess.Popen(
                    list(spec.argv), stdin=fin, stdout=fout, stderr=ferr, cwd=scratch, env=env
                )
            except OSError as exc:
                log = f"cannot start {spec.argv[0]}: {exc.strerror or exc}\n"
                return CommandOutcome(127, log, spec.stdout, spec.stderr, paths), 0.0
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        log = log_tail(out, "stdout") + ("" if same else log_tail(err, "stderr"))
        outcome = CommandOutcome(proc.returncode, log, spec.stdout, spec.stderr, paths)
        return outcome, usage.ru_utime + usage.ru_stime
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
