"""Commands run on a worker over local copies of their files (STAR's elementary jobs).

A command job is one unit: its executable runs once, on the worker its packet is pinned to,
with every one of its files brought into that node's cache first (as a packet's file is: a
hit, a copy from a peer, or a throttled copy from tertiary storage). It runs confined
(:mod:`datasched.sandbox`): in a sandbox holding its inputs (read-only, each at
``/inputs/NNNN-<name>``), its executable and the files its arguments name, and a scratch
directory (``/scratch``: its working directory, removed afterwards), with a clean
environment and its job's limits. Standard input, output and error are files the worker opens
(the named ones, on the user's output area, or scratch files); the end of both outputs is
returned as the log. A non-zero exit, or a limit passed, fails the job with that log.

The command gets STAR's variables, both substituted in its arguments and set in its
environment (no shell runs it: its command line is split as a POSIX shell would, and nothing
else is expanded): ``$FILELIST`` (a file listing the inputs' paths, one a line),
``$INPUTFILECOUNT``, ``$INPUTFILE0`` ... ``$INPUTFILEn``, ``$SCRATCH``, and those the runner
gives (``$JOBID``, ``$REQUESTID``, ``$PROCESSID``, ``$USER``).
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from distributed import get_worker

from datasched.runtime.diskcache import Acquired
from datasched.runtime.processor import ShippedProcessor
from datasched.runtime.sandboxed import JobStopped, command_running, job_stopped
from datasched.runtime.worker import (
    PacketError,
    PacketResult,
    PacketSpec,
    acquire_file,
    cache_plugin,
    release_file,
)
from datasched.sandbox.confine import (
    SCRATCH,
    Confinement,
    Layout,
    SandboxUnavailable,
    limit_reason,
)
from datasched.sandbox.host import make_scratch, remove_scratch
from datasched.sandbox.run import run_confined

__all__ = [
    "STDIN_FILELIST",
    "CommandOutcome",
    "CommandSpec",
    "log_tail",
    "run_command",
    "substitute",
]

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
    variables: tuple[tuple[str, str], ...] = ()
    """STAR's variables the runner knows (``JOBID``, ``REQUESTID``, ``PROCESSID``,
    ``USER``); the worker adds the inputs', ``FILELIST`` and ``SCRATCH``."""
    readable: tuple[str, ...] = ()
    """Files besides the inputs the command may read (its executable, the files its
    arguments name), bound read-only at their own paths."""
    confine: Confinement = field(default_factory=lambda: Confinement(bwrap=False))
    token: str = ""
    """The job's name on the workers: :func:`~datasched.runtime.sandboxed.abort_job` kills
    its command when the job is cancelled or fails."""


_VARIABLE = re.compile(r"\$(?:\{([A-Z][A-Z0-9]*)\}|([A-Z][A-Z0-9]*))")


def substitute(text: str, values: Mapping[str, str]) -> str:
    """``text`` with ``$NAME`` and ``${NAME}`` replaced where ``NAME`` is in ``values``
    (anything else is left as written: no shell expands it)."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if m.group(2) is not None and name not in values:
            # $INPUTFILE12abc: the longest known name that prefixes it
            for cut in range(len(name) - 1, 0, -1):
                if name[:cut] in values:
                    return values[name[:cut]] + name[cut:]
        return values.get(name, m.group(0))

    return _VARIABLE.sub(one, text)


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
    with path.open("rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(size - LOG_CHARS, 0))
        text = fh.read().decode("utf-8", "replace")
    if not text:
        return ""
    cut = "...\n" if size > LOG_CHARS else ""
    return f"--- {label} ---\n{cut}{text.rstrip()}\n"


def run_command(spec: CommandSpec) -> PacketResult | None:
    """The Dask task of a command job (runs on the worker it is pinned to); None if its job
    was stopped before or while it ran (:class:`~datasched.runtime.sandboxed.JobStopped`:
    no failure)."""
    try:
        return _run_command(spec)
    except JobStopped:
        return None


def _run_command(spec: CommandSpec) -> PacketResult:
    if job_stopped(spec.token):
        raise JobStopped(spec.token)  # before its files are fetched
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
    corrupted: list[str] = []
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
            corrupted += info["corrupted"]
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
        slot_at = time.time()  # its files are here: the command starts
        t1 = time.perf_counter()
        outcome, cpu_s = _execute(spec, paths)
        compute_s = time.perf_counter() - t1
    finally:
        for got, keep in held:
            release_file(plugin, got, keep)
    if outcome.exit_code != 0 and job_stopped(spec.token):
        raise JobStopped(spec.token)  # killed by abort_job
    if outcome.exit_code != 0:
        raise PacketError(
            "command",
            spec.argv[0],
            f"exited with code {outcome.exit_code} on {node}",
            outcome.log,
        )
    source = "cache" if sources and all(s == "cache" for s in sources) else "tertiary"
    assert plugin.cache is not None
    dropped, unsound = plugin.cache.take_news()
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
        cache_evicted=evicted + dropped,
        bytes_read=sum(n for _, n in spec.files),
        cpu_s=cpu_s,
        started=started,
        slot_at=slot_at,
        note="; ".join(notes),
        cache_corrupted=unsound + corrupted,
    )


INPUTS = "/inputs"
"""Where a sandboxed command finds its inputs: ``/inputs/0000-<file name>``, ..."""


def _inside(i: int, url: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1]) or "file"
    return f"{INPUTS}/{i:04d}-{name}"


def _execute(spec: CommandSpec, paths: list[str]) -> tuple[CommandOutcome, float]:
    """Run the command, confined, in a scratch directory of its own; ``(outcome, CPU seconds
    of its sandbox)``."""
    conf = spec.confine
    scratch = make_scratch(conf)
    try:
        boxed = conf.bwrap
        for p in paths if boxed else ():
            if "://" in p and not p.startswith("file://"):
                raise PacketError(
                    "data",
                    p,
                    "the cache disk is full, and a sandboxed command reads only local copies",
                )
        urls = [url for url, _ in spec.files]
        pairs = enumerate(zip(paths, urls, strict=True))
        seen = [_inside(i, url) if boxed else p for i, (p, url) in pairs]
        here = SCRATCH if boxed else str(scratch)
        values = dict(spec.variables)
        values.update(FILELIST=f"{here}/filelist.txt", SCRATCH=here, INPUTFILECOUNT=str(len(seen)))
        values.update({f"INPUTFILE{i}": p for i, p in enumerate(seen)})
        (scratch / "filelist.txt").write_text("".join(p + "\n" for p in seen))
        ro = [(p.removeprefix("file://"), s) for p, s in zip(paths, seen, strict=True) if boxed]
        ro += [(r, r) for r in spec.readable]
        layout = Layout(scratch, ro=tuple(ro), env=values)
        out = Path(spec.stdout) if spec.stdout else scratch / "tmp" / "stdout.txt"
        err = Path(spec.stderr) if spec.stderr else scratch / "tmp" / "stderr.txt"
        for target in (out, err):
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
            except OSError as exc:  # not the account's to write: the user's to fix
                why = f"cannot write {target}: {exc.strerror or exc}"
                raise PacketError("command", str(target), why) from None
        if spec.stdin in (STDIN_FILELIST, "$FILELIST"):
            stdin_path: Path | None = scratch / "filelist.txt"
        else:
            stdin_path = Path(spec.stdin) if spec.stdin else None
            if stdin_path is not None and not stdin_path.is_file():
                raise PacketError("command", str(stdin_path), "stdin: no such file")
        same = out.resolve() == err.resolve()
        argv = [substitute(a, values) for a in spec.argv]
        with (
            (stdin_path or Path(os.devnull)).open("rb") as fin,
            out.open("wb") as fout,
            err.open("ab" if same else "wb") as ferr,
        ):
            if job_stopped(spec.token):
                raise JobStopped(spec.token)
            try:
                with command_running(spec.token) as started:
                    ended = run_confined(
                        conf,
                        layout,
                        argv,
                        stdin=fin,
                        stdout=fout,
                        stderr=ferr,
                        timeout_s=conf.wall_s,
                        on_start=started,
                    )
            except (OSError, SandboxUnavailable) as exc:
                log = f"cannot start {spec.argv[0]}: {getattr(exc, 'strerror', None) or exc}\n"
                return CommandOutcome(127, log, spec.stdout, spec.stderr, paths), 0.0
        log = log_tail(out, "stdout") + ("" if same else log_tail(err, "stderr"))
        reason = ended.reason or (
            limit_reason(conf, exit_code=ended.exit_code, cpu_s=ended.cpu_s, said=log)
            if ended.exit_code
            else ""
        )
        if reason:
            log = f"{reason}\n{log}"
        code = ended.exit_code
        if code == 127 and boxed and not log.strip():
            log = f"cannot start {spec.argv[0]} in the sandbox (not found, or not executable)\n"
        outcome = CommandOutcome(code, log, spec.stdout, spec.stderr, paths)
        return outcome, ended.cpu_s
    finally:
        remove_scratch(scratch)
