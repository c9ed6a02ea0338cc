"""A STAR command job as the runtime runs it: STAR's variables, the files its sandbox may
read, its outputs in the user's own directory, and how the scheduling core sees it.

The core sees a command job as one event of a pseudo-file of its own, ``command:<job id>``
(it cannot be split; its bytes are its files'), run as one packet on one slot
(docs/service-runner.md, "How the core sees a command job").
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from datasched.runtime.commands import STDIN_FILELIST, CommandSpec, split_command, substitute
from datasched.runtime.dataset import Dataset, FileEntry
from datasched.runtime.jobspec import JobSpec
from datasched.sandbox.confine import Confinement
from datasched.service.contracts import CommandWork, ElementaryJob
from datasched.service.request.paths import (
    Outside,
    confine,
    confine_output,
    locate,
    readable_for,
)

__all__ = ["COMMAND_SCHEME", "command_job", "star_variables"]

COMMAND_SCHEME = "command:"
"""A command job's one pseudo-file in the data space: ``command:<job id>``."""


def star_variables(job: ElementaryJob) -> dict[str, str]:
    """STAR's variables of an elementary job that the runner knows: ``JOBID`` (the request's
    id and the job's index, joined as STAR joins them), ``REQUESTID``, ``PROCESSID`` (the
    job's index) and ``USER`` (its owner); the worker adds its inputs', ``FILELIST`` and
    ``SCRATCH``."""
    return {
        "JOBID": f"{job.request_id}_{job.index}",
        "REQUESTID": job.request_id,
        "PROCESSID": str(job.index),
        "USER": job.user or "user",
    }


def command_job(
    job: ElementaryJob, *, roots: Sequence[Path], user_dirs: bool, confinement: Confinement
) -> tuple[JobSpec, CommandSpec]:
    """The engine's job and the command's packet for ``job``; ``ValueError`` naming the
    field for a command that cannot be split, an executable or an input not under a root,
    or an output outside the roots (with ``user_dirs``: outside the user's own directory)."""
    work = job.work
    assert isinstance(work, CommandWork)
    variables = star_variables(job)
    owner = (job.user or "user") if user_dirs else None
    argv = list(split_command(work.command))
    readable: list[str] = []
    exe = argv[0]
    if "/" in exe and not exe.startswith("/"):  # ./reco.py: under a root
        try:
            found = locate(exe, roots)
        except Outside as exc:
            raise ValueError(f"process.command: {exe}: {exc}") from None
        argv[0] = str(found)
        readable.append(str(found))
    elif exe.startswith("/"):  # under a root (bound), or the system's (already there)
        with contextlib.suppress(Outside):
            readable.append(str(locate(exe, roots)))
    for path in readable:  # the executable, when it is under a root
        try:
            readable_for(Path(path), roots, owner)
        except Outside as exc:
            raise ValueError(f"process.command: {exe}: {exc}") from None
    for arg in argv[1:]:
        # A file under a root named as an argument (a script, a macro, a configuration)
        # is bound read-only in the sandbox, at its own path; nothing else of the roots, and
        # nothing of another user's (readable_for).
        if arg.startswith("/") and "$" not in arg:
            try:
                named = confine(arg, roots)
            except Outside:
                continue
            if named.exists():
                try:
                    readable.append(str(readable_for(named, roots, owner)))
                except Outside as exc:
                    raise ValueError(f"process.command: {arg}: {exc}") from None
    stdin = work.stdin
    if stdin is not None and stdin not in (STDIN_FILELIST, "$FILELIST"):
        stdin = _on_root("stdin", stdin, variables, roots, read=True, owner=owner)
        readable.append(stdin)
    outputs = {
        key: _on_root(key, where, variables, roots, owner=owner) if where else None
        for key, where in (("stdout", work.stdout), ("stderr", work.stderr))
    }
    command = CommandSpec(
        packet_id=-1,
        job_id=-1,
        argv=tuple(argv),
        files=tuple((f.url, f.n_bytes) for f in job.files),
        stdin=stdin,
        stdout=outputs["stdout"],
        stderr=outputs["stderr"],
        variables=tuple(sorted(variables.items())),
        readable=tuple(dict.fromkeys(readable)),
        confine=confinement,
    )
    n_bytes = sum(f.n_bytes for f in job.files)
    pseudo = FileEntry(f"{COMMAND_SCHEME}{job.id}", "", 1, n_bytes)
    spec = JobSpec(
        id=job.id,
        dataset=Dataset(job.id, (pseudo,)),
        start=0,
        stop=1,
        processor=work.command,
        output=Path("-"),
    )
    return spec, command


def _on_root(
    field: str,
    path: str,
    variables: Mapping[str, str],
    roots: Sequence[Path],
    *,
    read: bool = False,
    owner: str | None = None,
) -> str:
    """``path`` (STAR's variables filled in) on a root, relative to the first: a file to
    ``read``, or an output, in ``owner``'s own directory when a daemon has several users."""
    if not roots:
        raise ValueError(f"process.{field}: {path!r}: no storage root is configured")
    full = substitute(path, variables)
    try:
        if read:
            return str(readable_for(locate(full, roots), roots, owner))
        return str(confine_output(full, roots, owner))
    except Outside as exc:
        raise ValueError(f"process.{field}: {path!r}: {exc}") from None
